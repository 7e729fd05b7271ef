//! The guard state an interrupted visit saved: checked as `resume` begins (repository-wide
//! changes, a damaged or missing file), then verified and put back for the visit's record.

use std::path::PathBuf;

use super::recorder::Recorder;
use super::resume::RepositoryChanges;
use super::run_error::{RunError, short};
use super::state::{Phase, RunState};
use crate::artifacts::EventPayload;
use crate::artifacts::event_payload::{PolicyViolation, RepositoryChangesKept, StepInterrupted};
use crate::artifacts::{EventType, RunDir};
use crate::config::OperatorCheckout;
use crate::policy::{Policy, PolicySpec};
use crate::workspace::{GUARD_STATE_FILE, GuardReport, GuardScope, Workspace, WorkspaceError};

/// An agent step whose driving process died (a crash, a power loss, or an agent that killed
/// it) before its guard could check it: the guard saved before the agent started checks it
/// now — protected refs and git configuration are put back, the worktree's HEAD re-attached —
/// and what it found is recorded in the `step_interrupted` event (`guard_report`) and as
/// `policy_violation` events of the interrupted visit, by the rules that need no policy
/// (protected refs, the operator's HEAD and checkout — the latter as `operator_checkout` in
/// the configuration says).
///
/// With [`RepositoryChanges::Keep`] (`resume --accept-drift`), the repository-wide changes
/// found now (once the visit's orphans are gone) are the operator's: listed in a
/// `repository_changes_kept` event and left as they are; the guard then checks only the run's
/// own refs and worktree (and reports the operator's HEAD and checkout). Otherwise —
/// `--put-back`, or nothing changed when `resume` looked — everything is checked and put back.
pub(super) fn check_interrupted_agent(
    workspace: &Workspace,
    operator_checkout: OperatorCheckout,
    recorder: &mut Recorder,
    (step_id, visit): (&str, u32),
    fields: &mut StepInterrupted,
    repository: RepositoryChanges,
) -> Result<(), RunError> {
    let saved = recorder
        .run_dir()
        .visit_dir(step_id, visit)
        .join(GUARD_STATE_FILE);
    let Some(mut guard) = workspace.load_guard(&saved)? else {
        return Ok(());
    };
    let kept = match repository {
        RepositoryChanges::Keep => Some(guard.compare()?).filter(|found| !found.is_clean()),
        RepositoryChanges::Refuse | RepositoryChanges::PutBack => None,
    };
    if let Some(kept) = kept {
        let changes = RepositoryChangesKept {
            ref_changes: serde_json::to_value(&kept.ref_changes).unwrap_or_default(),
            git_config_changed: serde_json::to_value(&kept.git_config_changed).unwrap_or_default(),
            by: "operator".to_owned(),
        };
        recorder.event(
            Some((step_id, visit)),
            EventPayload::RepositoryChangesKept(changes),
        )?;
        guard = guard.with_scope(GuardScope::RunOwn);
    }
    let report = guard.verify()?;
    fields.guard_report = Some(serde_json::to_value(&report).unwrap_or_default());
    let violations = Policy::compile(&PolicySpec::default())
        .map(|policy| {
            policy
                .with_operator_checkout(operator_checkout)
                .check_guard_report(&report)
        })
        .unwrap_or_default();
    for violation in violations {
        let fields = EventPayload::PolicyViolation(PolicyViolation {
            violation: serde_json::to_value(&violation).unwrap_or_default(),
        });
        recorder.event(Some((step_id, visit)), fields)?;
    }
    Ok(())
}

/// The repository-wide changes since the visit the run stopped in started (compared
/// with the guard state it saved; nothing written), with the visit; `None` when the run did
/// not stop in a visit still to be checked (no saved guard state, or the visit's end
/// or its interruption already recorded).
pub(super) fn repository_changes_of_interrupted_visit(
    run_dir: &RunDir,
    workspace: &Workspace,
    state: &RunState,
    events: &[crate::artifacts::Event],
) -> Result<Option<(String, u32, GuardReport)>, RunError> {
    let Phase::Running { step_id, visit } = &state.phase else {
        return Ok(None);
    };
    let settled = events.iter().any(|event| {
        matches!(
            event.event_type(),
            EventType::StepCompleted | EventType::StepInterrupted
        ) && event.step_id.as_deref() == Some(step_id.as_str())
            && event.visit == Some(*visit)
    });
    if settled {
        return Ok(None);
    }
    let saved = run_dir.visit_dir(step_id, *visit).join(GUARD_STATE_FILE);
    let Some(guard) = workspace.load_guard(&saved)? else {
        return Ok(None);
    };
    Ok(Some((step_id.clone(), *visit, guard.compare()?)))
}

/// The guard state of the visit the run stopped in, when it cannot be used although `resume`
/// needs it to check the visit: see [`unusable_guard_state`].
#[derive(Debug, Clone)]
pub(super) struct UnusableGuardState {
    pub(super) step_id: String,
    pub(super) visit: u32,
    /// `guard_state.json` in the visit's folder.
    pub(super) path: PathBuf,
    /// `is damaged (…)`, `is missing although …`.
    pub(super) problem: String,
    /// `agent` or `validators`.
    pub(super) process: &'static str,
}

impl UnusableGuardState {
    pub(super) fn is_of(&self, step_id: &str, visit: u32) -> bool {
        self.step_id == step_id && self.visit == visit
    }
}

/// The guard state (`guard_state.json`) of the visit the run stopped in, when `resume` would
/// check the visit against it and cannot:
///
/// - it is there but damaged (not JSON, cut short, written by a newer release, unreadable),
///   and the visit's end, its interruption or a skipped check is not recorded yet;
/// - it is gone although the events show that the visit's process started (a
///   `runner_started` event: an agent step records it once its guard state is saved, a
///   validation before each validator) and that nothing after it ended the visit while the
///   driving process was alive — no `runner_completed` (the driver saw the process end and
///   checked it itself), `step_failed` (its process could not start, or the step failed
///   after its check), `run_interrupted` (an operator's signal, after the check), nor the
///   visit's end. Only the driving process removes the file, once the step is checked, so an
///   agent or a person deleted it, and what the agent did is unchecked.
///
/// A visit whose agent never started (its program missing) has no guard state, and needs none.
pub(super) fn unusable_guard_state(
    run_dir: &RunDir,
    workspace: &Workspace,
    state: &RunState,
    events: &[crate::artifacts::Event],
) -> Option<UnusableGuardState> {
    let Phase::Running { step_id, visit } = &state.phase else {
        return None;
    };
    let of_visit = |kinds: &[EventType]| {
        events.iter().find(|event| {
            kinds.contains(&event.event_type())
                && event.step_id.as_deref() == Some(step_id.as_str())
                && event.visit == Some(*visit)
        })
    };
    if of_visit(&[
        EventType::StepCompleted,
        EventType::StepInterrupted,
        EventType::GuardCheckSkipped,
    ])
    .is_some()
    {
        return None;
    }
    let opcode = of_visit(&[EventType::StepStarted]).and_then(|event| match &event.payload {
        EventPayload::StepStarted(started) => Some(started.opcode.as_str()),
        _ => None,
    });
    let process = match opcode {
        Some("RUN_VALIDATION") => "validators",
        _ => "agent",
    };
    let path = run_dir.visit_dir(step_id, *visit).join(GUARD_STATE_FILE);
    let problem = match workspace.load_guard(&path) {
        Ok(Some(_)) => return None,
        Err(WorkspaceError::Io {
            action: "parse",
            source,
            ..
        }) => format!("is damaged ({source})"),
        Err(error @ WorkspaceError::UnknownGuardState { .. }) => {
            format!("cannot be read ({error}; a newer tnh-conductor wrote it)")
        }
        Err(error) => format!("cannot be used ({error})"),
        Ok(None) => {
            let started = of_visit(&[EventType::RunnerStarted])?;
            let ended = of_visit(&[
                EventType::RunnerCompleted,
                EventType::StepFailed,
                EventType::RunInterrupted,
            ]);
            if ended.is_some() {
                return None;
            }
            format!(
                "is missing, although the events show that the {process} started (event {}, `runner_started`) and the visit never ended: only the conductor removes it, once the step is checked",
                started.seq
            )
        }
    };
    Some(UnusableGuardState {
        step_id: step_id.clone(),
        visit: *visit,
        path,
        problem,
        process,
    })
}

/// One line per repository-wide change: `REF (CLASS): BEFORE → NOW`, or the git
/// configuration file that changed.
pub(super) fn describe_repository_changes(report: &GuardReport) -> Vec<String> {
    let value = |value: &Option<String>| {
        value
            .as_deref()
            .map_or_else(|| "(none)".to_owned(), |value| short(value).to_owned())
    };
    let refs = report.ref_changes.iter().map(|change| {
        let class = serde_json::to_value(change.class)
            .ok()
            .and_then(|class| class.as_str().map(|class| class.replace('_', " ")))
            .unwrap_or_default();
        format!(
            "`{}` ({class}): {} → {}",
            change.refname,
            value(&change.before),
            value(&change.after)
        )
    });
    let files = report
        .git_config_changed
        .iter()
        .map(|file| format!("git configuration file `{file}` changed"));
    refs.chain(files).collect()
}
