//! Processes left behind by a driver that was killed, ended on `resume` before the
//! interrupted step runs again (two agents must never edit one worktree, nor two planners
//! judge one step). They are found two ways:
//!
//! - the step's process group, which the supervisor recorded in the visit's folder
//!   ([`crate::runner::PROCESS_GROUP_FILE`], the agent's and each validator's) while the step
//!   ran: every member is ended, a process that cleared its environment (`env -i`) but stayed
//!   in the group included, provided the group can be shown to be still the step's (a group
//!   id is a pid, and pids are reused: see [`crate::runner::kill_recorded_group`]);
//! - every agent, validator and planner of a run has `TNH_RUN_ID=<run_id>` in its
//!   environment, so the run's processes that left the group are found in `/proc`.
//!
//! The marked processes are killed first (the run's planner included), then what is left of
//! the recorded groups. One pass with a SIGKILL per pid misses a process that keeps forking
//! (its successor is born after the look); both stop before they kill, in passes until one
//! finds nothing.

use std::path::{Path, PathBuf};

pub use crate::runner::KilledProcesses;
use crate::runner::{GroupEnding, PROCESS_GROUP_FILE, RecordedGroup};

/// Kills every process (other than this one) whose environment names this run, in passes
/// until none is left (or a time limit, after which the survivors are reported). Processes
/// that cannot be inspected are skipped.
pub fn kill_run_orphans(run_id: &str) -> KilledProcesses {
    crate::runner::kill_marked("TNH_RUN_ID", run_id)
}

/// Kills what is left of the process groups recorded in the visit folder `visit_dir` (the
/// agent's, each validator's), when each is still the step's, and removes the records; the
/// members killed, and any that survived, are added to `orphans` (what
/// [`kill_run_orphans`] did).
pub fn end_recorded_groups(visit_dir: &Path, orphans: KilledProcesses) -> KilledProcesses {
    let KilledProcesses {
        mut killed,
        mut survivors,
    } = orphans;
    for record in group_records(visit_dir) {
        // Only a regular file, and a small one: the agent could plant a FIFO or a link here.
        let group = crate::artifacts::safe_files::read_regular(&record, 64 * 1024)
            .ok()
            .and_then(|(bytes, _)| serde_json::from_slice::<RecordedGroup>(&bytes).ok());
        if let Some(group) = group
            && let GroupEnding::Killed {
                killed: members,
                survivors: left,
            } = crate::runner::kill_recorded_group(&group)
        {
            killed.extend(members);
            survivors.extend(left);
        }
        // Spent either way: the group is gone, or it is not the step's any more.
        let _ = std::fs::remove_file(&record);
    }
    killed.sort_unstable();
    killed.dedup();
    survivors.sort_unstable();
    survivors.dedup();
    KilledProcesses { killed, survivors }
}

/// The group records in a visit's folder: the agent's, and each validator's
/// (`validators/<id>/`).
fn group_records(visit_dir: &Path) -> Vec<PathBuf> {
    let mut records = vec![visit_dir.join(PROCESS_GROUP_FILE)];
    if let Ok(entries) = std::fs::read_dir(visit_dir.join("validators")) {
        records.extend(
            entries
                .flatten()
                .map(|entry| entry.path().join(PROCESS_GROUP_FILE)),
        );
    }
    records.retain(|record| record.is_file());
    records
}
