//! `tnh-conductor runs abandon RUN_ID [--reason TEXT] [--as NAME]`: ends a run that waits at a
//! gate or stands interrupted, for good (see [`crate::kernel::abandon`]).

use std::path::Path;

use super::Output;
use crate::error::{Error, ExitStatus, Result};
use crate::kernel::abandon::{AbandonRequest, abandon_run};

/// Abandons the run and says what became of it and of its leftover processes.
pub fn cmd_runs_abandon(
    repo_root: &Path,
    run_id: &str,
    reason: Option<&str>,
    by: Option<&str>,
    output: &mut Output,
) -> Result<ExitStatus> {
    let by = by
        .map(str::to_owned)
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "operator".into());
    let request = AbandonRequest { by: &by, reason };
    let abandoned =
        abandon_run(repo_root, run_id, request).map_err(|error| Error::Run(Box::new(error)))?;
    let was = match abandoned.was {
        "waiting" => format!("it waited at gate `{}`", abandoned.step_id),
        "interrupted" => format!("it was interrupted in step `{}`", abandoned.step_id),
        _ => format!("it stood before step `{}`", abandoned.step_id),
    };
    output.print(&format!(
        "run {run_id}: abandoned — {} ({was})\n",
        super::one_line(&abandoned.reason)
    ));
    if !abandoned.stopped_pids.is_empty() {
        output.note(&format!(
            "stopped its leftover processes: {}",
            pids(&abandoned.stopped_pids)
        ));
    }
    if !abandoned.survivors.is_empty() {
        output.note(&format!(
            "warning: these processes of the run could not be stopped: {}",
            pids(&abandoned.survivors)
        ));
    }
    output.note(&format!(
        "its worktree and branch stay until `tnh-conductor runs clean`; `tnh-conductor runs show {run_id}` shows what it did"
    ));
    Ok(ExitStatus::Success)
}

fn pids(pids: &[i32]) -> String {
    pids.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
