//! The operator's rollback of a run (`tnh-conductor rollback RUN_ID`): the ROLLBACK opcode's
//! semantics, done from outside the driver, as part of the run's record.
//!
//! It holds the run lock, so it never races a process driving the run (nor a `resume` or a
//! gate decision). Before the worktree is reset, a `rollback_started` event records the target,
//! the snapshot and the worktree's HEAD commit and file tree, so a rollback killed part-way
//! leaves what it was undoing in the run's record, and the next rollback's record names that
//! attempt (`interrupted_attempt`). The rollback record is kept as `rollbacks/<n>.json` and
//! announced by a `rollback_completed` event (`"by": "operator"`, no step). A run that will continue (waiting
//! at a gate, or stopped between two steps) is checkpointed with the rolled-back worktree as
//! its fingerprint, so `resume` continues from it instead of refusing it as drift, and a
//! policy violation stops making EVALUATE `unsafe`, as after a ROLLBACK step. A run stopped in
//! the middle of a step is refused: `resume` puts that step's snapshot back itself.
//!
//! The event keeps the checkpoint's fingerprint from before the rollback
//! (`checkpoint_before`): for a run waiting at a gate that is what the gate showed, which the
//! gate's decision then needs `--accept-drift` to give up (the change the reviewer was shown
//! is gone; see [`super::gate::decide`]).

use std::path::{Path, PathBuf};

use crate::artifacts::{EventLog, EventPayload, RunDir, write_json_atomic, write_json_new};
use crate::workspace::runs::load_run;
use crate::workspace::{
    InterruptedRollback, RollbackRecord, RollbackStart, RollbackTarget, Workspace,
};

use super::lock::RunLock;
use super::recovery::visit_in_progress;
use super::run::RunError;
use super::state::{Phase, RunState};
use crate::artifacts::event_payload::{RollbackCompleted, RollbackStarted};

/// What the operator's rollback did.
#[derive(Debug)]
pub struct OperatorRollback {
    /// The rollback record.
    pub record: RollbackRecord,
    /// Where it was saved, relative to the run directory (`rollbacks/<n>.json`).
    pub record_file: String,
    /// The worktree folder was gone and was checked out again from the work branch first.
    pub recreated: bool,
    /// The worktree.
    pub worktree: PathBuf,
    /// The work branch.
    pub branch: String,
    /// What becomes of the run.
    pub run: AfterRollback,
}

/// What becomes of the run after the operator's rollback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterRollback {
    /// The run had ended: only the record and the event were added.
    Ended,
    /// `resume` continues from the rolled-back worktree.
    Continues {
        /// The gate the run waits at, if it does: the change it showed is gone, so deciding
        /// it needs `--accept-drift`.
        waiting_gate: Option<String>,
        /// The policy violation that no longer makes EVALUATE `unsafe`, if one did.
        violation_cleared: Option<String>,
        /// The policy violation that still does: the `pre_step` snapshot is newer than the
        /// visit that made it.
        violation_kept: Option<String>,
    },
    /// The run never reached its first checkpoint: `resume` starts it over.
    NotStarted,
}

/// Rolls back the worktree of run `run_id` in the repository at `repo_root` to `target`, and
/// records it in the run directory.
pub fn rollback_run(
    repo_root: &Path,
    run_id: &str,
    target: RollbackTarget,
) -> Result<OperatorRollback, RunError> {
    let entry = load_run(repo_root, run_id)?;
    let run_dir = RunDir::at(entry.dir.clone());
    let _lock = RunLock::acquire(&run_dir.lock())?;
    super::state::check_run_versions(&run_dir)?;
    let mut state: Option<RunState> = if run_dir.state().is_file() {
        Some(super::state::read_state(&run_dir.state())?)
    } else {
        None
    };
    if let Some(state) = &state
        && let Some((step_id, visit)) = visit_in_progress(&run_dir, state)?
    {
        return Err(RunError::StepInProgress {
            run_id: run_id.to_owned(),
            step_id,
            visit,
        });
    }
    let (workspace, recreated) = Workspace::open_or_recreate(&entry.record)?;
    // What is about to be undone is recorded before anything is reset: a rollback killed
    // part-way leaves it in the record, and the next one says so.
    let checkpoint = super::recorder::checkpointed_seq(&run_dir).map(|seq| (run_dir.state(), seq));
    let mut events = EventLog::open_after(
        &run_dir.events(),
        run_id,
        checkpoint
            .as_ref()
            .map(|(path, seq)| (path.as_path(), *seq)),
    )?;
    let interrupted_attempt = interrupted_attempt(&run_dir)?;
    let mut record =
        workspace.rollback_announced(target, |start| record_start(&mut events, target, start))?;
    record.interrupted_attempt = interrupted_attempt;
    let record_file = save_record(&run_dir, &record)?;

    let checkpoint_before = state.as_ref().and_then(|state| state.fingerprint.clone());
    let after = after_rollback(state.as_mut(), &workspace, target)?;
    // The event is durable before the checkpoint that accounts for it.
    let cleared = match &after {
        AfterRollback::Continues {
            violation_cleared, ..
        } => violation_cleared.clone(),
        _ => None,
    };
    let fields = RollbackCompleted {
        target: target.as_str().to_owned(),
        by: Some("operator".to_owned()),
        record: record_file.clone(),
        undone: record.before.to_string(),
        policy_violation_cleared: Some(cleared),
        checkpoint_before: Some(serde_json::to_value(&checkpoint_before).unwrap_or_default()),
        interrupted_attempt: record
            .interrupted_attempt
            .as_ref()
            .map(|attempt| serde_json::to_value(attempt).unwrap_or_default()),
    };
    events.append(None, EventPayload::RollbackCompleted(fields))?;
    events.sync()?;
    if let (Some(state), AfterRollback::Continues { .. }) = (&mut state, &after) {
        state.events_seq = events.last_seq();
        write_json_atomic(&run_dir.state(), state)?;
    }
    Ok(OperatorRollback {
        record,
        record_file,
        recreated,
        worktree: entry.record.worktree_path.clone(),
        branch: entry.record.branch.clone(),
        run: after,
    })
}

/// What the rollback means for the run (`None`: it has no checkpoint yet): the checkpoint
/// takes the rolled-back worktree, and the policy violation the rollback undid is cleared.
fn after_rollback(
    state: Option<&mut RunState>,
    workspace: &Workspace,
    target: RollbackTarget,
) -> Result<AfterRollback, RunError> {
    Ok(match state {
        Some(state) if matches!(state.phase, Phase::Finished { .. }) => AfterRollback::Ended,
        Some(state) => {
            state.fingerprint = Some(workspace.fingerprint()?);
            let waiting_gate = match &state.phase {
                Phase::Waiting { step_id, .. } => Some(step_id.clone()),
                _ => None,
            };
            // As after a ROLLBACK step: `pre_step` undoes the violation only when its
            // snapshot is not newer than the violating visit.
            let undone = match target {
                RollbackTarget::PreRun => true,
                RollbackTarget::PreStep => state.safety.pre_step_undoes_violation,
            };
            if undone {
                AfterRollback::Continues {
                    waiting_gate,
                    violation_cleared: state.safety.policy_violation.take(),
                    violation_kept: None,
                }
            } else {
                AfterRollback::Continues {
                    waiting_gate,
                    violation_cleared: None,
                    violation_kept: state.safety.policy_violation.clone(),
                }
            }
        }
        None => AfterRollback::NotStarted,
    })
}

/// Records `rollback_started`, durably, before the worktree is reset: the target, the snapshot,
/// and the worktree's HEAD commit and the tree of its files (kept in git's objects), which a
/// killed rollback would otherwise leave recorded nowhere.
fn record_start(
    events: &mut EventLog,
    target: RollbackTarget,
    start: &RollbackStart<'_>,
) -> Result<(), RunError> {
    let fields = RollbackStarted {
        target: target.as_str().to_owned(),
        by: "operator".to_owned(),
        snapshot: start.snapshot.reference.clone(),
        snapshot_commit: start.snapshot.commit.clone(),
        head_before: start.head_before.to_owned(),
        tree_before: start.tree_before.map(str::to_owned),
    };
    events.append(None, EventPayload::RollbackStarted(fields))?;
    events.sync()?;
    Ok(())
}

/// The operator's last rollback of the run that was recorded as started and never completed
/// (killed part-way), if any.
fn interrupted_attempt(run_dir: &RunDir) -> Result<Option<InterruptedRollback>, RunError> {
    let events = EventLog::read_all(&run_dir.events())?;
    let Some((event, started)) = events.iter().rev().find_map(|event| match &event.payload {
        EventPayload::RollbackStarted(started) if started.by == "operator" => {
            Some((event, started))
        }
        _ => None,
    }) else {
        return Ok(None);
    };
    let completed = events.iter().any(|later| {
        later.seq > event.seq
            && matches!(&later.payload, EventPayload::RollbackCompleted(completed)
                if completed.by.as_deref() == Some("operator"))
    });
    if completed {
        return Ok(None);
    }
    Ok(Some(InterruptedRollback {
        started_seq: event.seq,
        started_at: event.timestamp.clone(),
        target: started.target.parse().unwrap_or(RollbackTarget::PreRun),
        head_before: started.head_before.clone(),
        tree_before: started.tree_before.clone(),
    }))
}

/// Saves the record as the next `rollbacks/<n>.json` and returns that path, relative to the
/// run directory.
fn save_record(run_dir: &RunDir, record: &RollbackRecord) -> Result<String, RunError> {
    let dir = run_dir.rollbacks_dir();
    std::fs::create_dir_all(&dir).map_err(crate::artifacts::ArtifactsError::io("create", &dir))?;
    let count = std::fs::read_dir(&dir)
        .map_err(crate::artifacts::ArtifactsError::io("read", &dir))?
        .count();
    let name = RunDir::rollback_record_relative(count + 1);
    write_json_new(&run_dir.root().join(&name), record)?;
    Ok(name)
}
