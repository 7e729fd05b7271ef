//! Removing the checkouts finished runs no longer need, when a new run starts: all but the
//! most recently finished few (`retention.finished_checkouts`). A run that has not finished —
//! running, waiting at a gate, interrupted, blocked, stopped or decided — keeps its checkout.
//! What a removed checkout held is kept first under `refs/tnh/runs/<run>/final` (as `runs
//! clean` keeps it); the run's branch, snapshot refs and run directory stay, and `rollback`
//! and `resume` check the branch out again.
//!
//! Only the folders under `.tnh/worktrees/` are looked at, not every run directory: with the
//! checkouts pruned, that is the few kept, however many runs the repository keeps.

use std::path::Path;
use std::time::SystemTime;

use super::runs::{load_run, remove_finished_checkout};

/// Removes the checkouts of the finished runs beyond the `keep` most recently finished.
/// Returns the runs whose checkout was removed. Best effort: a run that cannot be read or
/// whose lock another process holds keeps its checkout (the next run tries again).
pub fn prune_finished_checkouts(repo_root: &Path, keep: usize) -> Vec<String> {
    let folder = repo_root.join(".tnh").join("worktrees");
    let Ok(entries) = std::fs::read_dir(&folder) else {
        return Vec::new();
    };
    let mut finished: Vec<(SystemTime, String)> = entries
        .flatten()
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| !name.starts_with('.'))
        .filter_map(|name| {
            let ended_at = load_run(repo_root, &name).ok()?.ended_at?;
            Some((ended_at, name))
        })
        .collect();
    // Newest first; the run id breaks ties the same way every time.
    finished.sort_by(|left, right| right.cmp(left));
    finished
        .into_iter()
        .skip(keep)
        .filter(|(_, run_id)| remove_finished_checkout(repo_root, run_id).unwrap_or(false))
        .map(|(_, run_id)| run_id)
        .collect()
}
