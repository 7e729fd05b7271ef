//! A run's status as every reader sees it: `status.json` checked against the run's lock, or,
//! when that file is unreadable, what the last checkpoint (`state.json`) says — with a reason
//! that tells truthfully whether `resume` can continue the run. `status`, `runs list`, `runs
//! show` and `journal` all read it here, so they agree.

use crate::artifacts::{ArtifactsError, LifecycleState, RunDir, RunMetadata, RunStatus, read_json};

use super::state::{Phase, RunState};

/// The run's status; an error only when neither `status.json` nor `metadata.json` can be read.
pub fn read_status(run_dir: &RunDir) -> Result<RunStatus, ArtifactsError> {
    let status_file = run_dir.status();
    let status_error = match read_json::<RunStatus>(&status_file, "run status") {
        Ok(status) => return Ok(super::lock::checked_status(run_dir, status)),
        Err(error) => error,
    };
    let metadata: RunMetadata = read_json(&run_dir.metadata(), "run metadata")?;
    // The last checkpoint, when there is one, says where the run is (`status.json` is only
    // its human-facing copy); a run that was running has no process left.
    let state_file = run_dir.state();
    let state = read_json::<RunState>(&state_file, "run state");
    let unreadable = match (&state, status_file.is_file(), state_file.is_file()) {
        (Err(state_error), _, true) => format!(
            "{status_error}, and {state_error}: `tnh-conductor resume` cannot continue the run \
             until `state.json` is put back (from a backup); or start a new run"
        ),
        // The driver died before its first checkpoint.
        (_, false, _) => {
            "the run stopped before its first checkpoint; `tnh-conductor resume` starts it"
                .to_owned()
        }
        // `status.json` is derived from `state.json` and not fsynced: after a power loss it
        // may be empty until `resume` rewrites it.
        (Ok(_), true, _) => {
            format!("{status_error}; `tnh-conductor resume` continues the run and rewrites it")
        }
        (Err(_), true, false) => format!(
            "{status_error}, and `state.json` is missing: `tnh-conductor resume` starts the run \
             over if it had not passed its first checkpoint, and otherwise says what is missing"
        ),
    };
    let (lifecycle_state, step, visit, transitions, reason) = match &state {
        Ok(state) => {
            let (lifecycle, step, visit, _) = super::recorder::describe(state);
            let reason = match &state.phase {
                Phase::Finished { reason, .. } => reason.clone(),
                _ => unreadable,
            };
            let lifecycle = if lifecycle == LifecycleState::Running {
                LifecycleState::Blocked
            } else {
                lifecycle
            };
            (lifecycle, step, visit, state.transitions, reason)
        }
        // A run whose end was recorded in `metadata.json` ended so, checkpoint or not.
        Err(_) => match &metadata.termination {
            Some(termination) => (
                match termination.kind.as_str() {
                    "success" => LifecycleState::Completed,
                    "abandoned" => LifecycleState::Abandoned,
                    _ => LifecycleState::Failed,
                },
                termination.step_id.clone(),
                None,
                0,
                format!("{}; {unreadable}", termination.reason),
            ),
            None => (
                LifecycleState::Blocked,
                metadata.entry_step,
                None,
                0,
                unreadable,
            ),
        },
    };
    Ok(RunStatus {
        schema_version: crate::artifacts::SCHEMA_VERSION,
        run_id: metadata.run_id,
        workflow_id: metadata.workflow_id,
        lifecycle_state,
        current_step_id: Some(step),
        visit,
        updated_at: metadata.started_at,
        reason: Some(reason),
        pid: None,
        transitions,
    })
}
