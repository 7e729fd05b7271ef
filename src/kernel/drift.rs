//! Drift: the worktree changed since the run's last checkpoint, by someone other than the
//! step that was running. Refused, or accepted and recorded.

use super::recorder::Recorder;
use super::run::workspace_record;
use super::run_error::RunError;
use super::state::{Phase, RunState};
use crate::artifacts::{EventPayload, event_payload::DriftAccepted};
use crate::ids::RunId;
use crate::workflow::model::{Opcode, Workflow};
use crate::workspace::{Fingerprint, Workspace};

/// Before a gate decision: the worktree must still be the one the gate's checkpoint recorded,
/// since that is what the reviewer was shown. A change is refused (nothing recorded), or with
/// `accept_drift` recorded as a `drift_accepted` event and taken as the new checkpoint.
pub(super) fn check_drift_before_decision(
    workflow: &Workflow,
    recorder: &mut Recorder,
    state: &mut RunState,
    accept_drift: bool,
) -> Result<(), RunError> {
    let record = workspace_record(recorder.metadata());
    let (workspace, recreated) = Workspace::open_or_recreate(&record)?;
    // A run waiting at a gate is in no visit: no planner's change is exempt.
    if accept_drift {
        return record_accepted_drift(workflow, &workspace, recorder, state, false);
    }
    match drifted(workflow, &workspace, state, false)? {
        Some((recorded, found)) => Err(RunError::Drift {
            recorded,
            found,
            recreated,
        }),
        None => Ok(()),
    }
}

/// The recorded and current fingerprints, when the worktree changed since the last checkpoint.
///
/// A visit that was running when the process died is exempt when the worktree goes back to
/// its own pre-step snapshot anyway, or when it is a step that may change the worktree without
/// one (a validation, a rollback). An agent step with no snapshot yet never reached its agent:
/// its worktree must still be the checkpoint's. An EVALUATE is exempt when `planners` (see
/// [`planner_owns_change`]): what changed is its planner's, recorded as its violation.
pub(super) fn drifted(
    workflow: &Workflow,
    workspace: &Workspace,
    state: &RunState,
    planners: bool,
) -> Result<Option<(Fingerprint, Fingerprint)>, RunError> {
    let Some(recorded) = state.fingerprint.clone() else {
        return Ok(None);
    };
    if let Phase::Running { step_id, visit } = &state.phase {
        let opcode = workflow.step(step_id).map(|step| step.body.opcode());
        // An EVALUATE, a GATE or a STOP changes no file: a change found after one was made by
        // someone else, and is drift like any other — unless an EVALUATE's planner process
        // was caught changing it, or was running when the process died.
        if matches!(opcode, Some(Opcode::RunValidation | Opcode::Rollback))
            || (opcode == Some(Opcode::RunAgent)
                && own_snapshot_is_latest(workspace, state, step_id, *visit)?)
            || (opcode == Some(Opcode::Evaluate) && planners)
        {
            return Ok(None);
        }
    }
    let found = workspace.fingerprint()?;
    // A success STOP commits the worktree's files before the run's end is checkpointed: the
    // same files on the run's own result commit are the kernel's doing.
    let committed_here = found.tree == recorded.tree
        && found.head != recorded.head
        && workspace.is_result_commit(&found.head)?;
    if found == recorded || committed_here {
        return Ok(None);
    }
    Ok(Some((recorded, found)))
}

/// Whether the latest pre-step snapshot is the one taken for this visit.
pub(super) fn own_snapshot_is_latest(
    workspace: &Workspace,
    state: &RunState,
    step_id: &str,
    visit: u32,
) -> Result<bool, RunError> {
    let own = format!(
        "{}/pre_step/{step_id}/{visit}",
        crate::workspace::refs_prefix(&RunId::new(state.run_id.clone()))
    );
    Ok(workspace
        .latest_pre_step()?
        .is_some_and(|snapshot| snapshot.reference == own))
}

/// Accepts the worktree as it is now when it drifted (see [`drifted`]; `planners` as there):
/// a `drift_accepted` event records both fingerprints, and the checkpoint takes the new one.
pub(super) fn record_accepted_drift(
    workflow: &Workflow,
    workspace: &Workspace,
    recorder: &mut Recorder,
    state: &mut RunState,
    planners: bool,
) -> Result<(), RunError> {
    let Some((recorded, found)) = drifted(workflow, workspace, state, planners)? else {
        return Ok(());
    };
    let fields = DriftAccepted {
        recorded: serde_json::to_value(&recorded).unwrap_or_default(),
        found: serde_json::to_value(&found).unwrap_or_default(),
    };
    recorder.event(None, EventPayload::DriftAccepted(fields))?;
    state.fingerprint = Some(found);
    Ok(())
}
