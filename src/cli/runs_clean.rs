//! `tnh-conductor runs clean [--older-than 7d] [--keep N] [--all]`: removes the worktrees of
//! finished runs (but the N most recently finished with `--keep`).
//! Run directories, snapshot refs and work branches are kept (they are the evidence and the
//! work), and the worktree's last state is first recorded as `refs/tnh/runs/<id>/final`,
//! unless `--all`. Runs that have not ended are never touched. Each run is cleaned holding
//! its lock (a run another process holds is skipped, saying so); with `--all` its directory
//! is first renamed to `.tnh/run/.removing-<id>`, which a later `runs clean` finishes removing
//! if this one is killed.

use std::path::Path;
use std::time::SystemTime;

use super::Output;
use crate::error::{Error, ExitStatus, Result};
use crate::workflow::duration::parse_duration;
use crate::workspace::runs::{CleanOptions, clean_runs};

/// Removes finished runs' worktrees and reports which runs were cleaned and which kept.
pub fn cmd_runs_clean(
    repo_root: &Path,
    older_than: Option<&str>,
    all: bool,
    keep: Option<usize>,
    output: &mut Output,
) -> Result<ExitStatus> {
    let older_than = match older_than {
        None => None,
        Some(text) => Some(parse_duration(text).map_err(|error| {
            Error::usage(
                format!("invalid --older-than: {error}"),
                "use a number and a unit: `90s`, `20m`, `24h`, `7d`, `2w`",
            )
        })?),
    };
    let options = CleanOptions {
        older_than,
        all,
        now: SystemTime::now(),
        keep: keep.unwrap_or(0),
        keep_history: |repo, run_dir, run_id| {
            crate::kernel::history::keep_run(repo, run_dir, run_id)
                .map(drop)
                .map_err(|error| error.to_string())
        },
    };
    let report = clean_runs(repo_root, options)?;
    let what = if all {
        "removed"
    } else {
        "removed worktree of"
    };
    for run_id in &report.cleaned {
        let kept = report
            .kept
            .iter()
            .find(|(kept, _)| kept == run_id)
            .map(|(_, reference)| {
                format!(
                    " (its last state is kept at {reference}: `git worktree add DIR {reference}` or `git diff {reference}^ {reference}` show it)"
                )
            })
            .unwrap_or_default();
        output.print(&format!("{what} {run_id}{kept}\n"));
    }
    // Runs an earlier `runs clean` already cleaned are not reported again, one by one.
    if !report.already_clean.is_empty() && report.cleaned.is_empty() && report.finished.is_empty() {
        output.note(&format!(
            "nothing to clean: the worktree of {} ended run{} was already removed",
            report.already_clean.len(),
            if report.already_clean.len() == 1 {
                ""
            } else {
                "s"
            }
        ));
    }
    for run_id in &report.running {
        output.note(&format!("kept {run_id}: not ended"));
    }
    note_newest(&report.newest, output);
    for run_id in &report.recent {
        output.note(&format!("kept {run_id}: ended too recently"));
    }
    for (run_id, holder) in &report.busy {
        output.note(&format!(
            "skipped {run_id}: {holder}; `runs clean` again once it is done"
        ));
    }
    for run_id in &report.gone {
        output.note(&format!(
            "{run_id} was already removed (by another `runs clean`)"
        ));
    }
    for run_id in &report.finished {
        output.print(&format!(
            "finished removing {run_id} (an interrupted `runs clean --all` had set it aside)\n"
        ));
    }
    for (run_id, reason) in &report.unreadable {
        output.note(&format!("skipped {run_id}: {reason}"));
    }
    // Everything cleaned is listed above; the first failure is the command's error.
    let mut failed = report.failed.into_iter();
    let Some((_, first)) = failed.next() else {
        return Ok(ExitStatus::Success);
    };
    for (run_id, error) in failed {
        output.note(&format!("failed to clean {run_id}: {error}"));
    }
    Err(first.into())
}

/// The runs `--keep` kept, in one line.
fn note_newest(newest: &[String], output: &mut Output) {
    if !newest.is_empty() {
        output.note(&format!(
            "kept the {} most recently finished run{} (--keep): {}",
            newest.len(),
            if newest.len() == 1 { "" } else { "s" },
            newest.join(", ")
        ));
    }
}
