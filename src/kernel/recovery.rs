//! The visit a run was in when its driver stopped: found, then either its recorded route is
//! taken or it is recorded as interrupted and run again as a new visit.

use super::drift::own_snapshot_is_latest;
use super::guard_recovery::{UnusableGuardState, check_interrupted_agent};
use super::interrupted_manifest::record_interrupted_manifest;
use super::planner_recovery::{PlannerFound, PlannerVisit, guard_saved, planner_change_recorded};
use super::recorder::Recorder;
use super::resume::RepositoryChanges;
use super::run_error::RunError;
use super::state::{Phase, RunState};
use super::transition::StepReport;
use crate::artifacts::event_payload::{GuardCheckSkipped, StepInterrupted};
use crate::artifacts::{Event, EventLog, EventPayload, EventType, RunDir};
use crate::config::OperatorCheckout;
use crate::workflow::model::Workflow;
use crate::workspace::{GUARD_STATE_FILE, RollbackTarget, Workspace};

/// The driver does not checkpoint when a visit starts; its `step_started` event, made durable
/// before the step does anything, stands for it. Replaying that event on the checkpoint (the
/// same pure `start_step` the driver applied) gives the state the driver held: the visit
/// running, which `recover_interrupted_visit` then handles.
pub(super) fn replay_started_visit(
    workflow: &Workflow,
    run_dir: &RunDir,
    state: &mut RunState,
) -> Result<(), RunError> {
    if matches!(state.phase, Phase::Ready { .. })
        && visit_in_progress(run_dir, state)?.is_some()
        && let Ok(running) = super::transition::start_step(workflow, state)
    {
        *state = running;
    }
    Ok(())
}

/// The visit a run was in the middle of when its driver stopped: the checkpoint's running
/// visit, or its next visit when a `step_started` event for it follows the checkpoint.
pub(crate) fn visit_in_progress(
    run_dir: &RunDir,
    state: &RunState,
) -> Result<Option<(String, u32)>, RunError> {
    match &state.phase {
        Phase::Running { step_id, visit } => Ok(Some((step_id.clone(), *visit))),
        Phase::Ready { step_id, visit } => {
            let events = EventLog::read_all(&run_dir.events())?;
            let started = events.iter().any(|event| {
                event.seq > state.events_seq
                    && event.event_type() == EventType::StepStarted
                    && event.step_id.as_deref() == Some(step_id.as_str())
                    && event.visit == Some(*visit)
            });
            Ok(started.then(|| (step_id.clone(), *visit)))
        }
        Phase::Waiting { .. } | Phase::Finished { .. } => Ok(None),
    }
}

/// What `resume` recovers the visit the run stopped in with.
pub(super) struct Recovery<'a> {
    pub(super) workflow: &'a Workflow,
    pub(super) operator_checkout: OperatorCheckout,
    pub(super) workspace: &'a Workspace,
    /// What to do with repository-wide changes found since the visit started.
    pub(super) repository: RepositoryChanges,
    /// The visit's damaged or missing guard state, which `resume --skip-guard-check` goes on
    /// without: the visit is not checked, and a `guard_check_skipped` event says so.
    pub(super) unusable: Option<&'a UnusableGuardState>,
}

/// A visit marked running when the process died: if its `step_completed` was recorded after
/// the last checkpoint, its route is taken now; otherwise it is recorded as interrupted, the
/// worktree goes back to the visit's pre-step snapshot, and the step runs again as a new visit.
pub(super) fn recover_interrupted_visit(
    recovery: &Recovery<'_>,
    recorder: &mut Recorder,
    state: &mut RunState,
) -> Result<(), RunError> {
    let Phase::Running { step_id, visit } = state.phase.clone() else {
        return Ok(());
    };
    let (workflow, workspace) = (recovery.workflow, recovery.workspace);
    let events = EventLog::read_all(&recorder.run_dir().events())?;
    // A `resume` killed after it recorded the visit as interrupted (its orphans killed, its
    // snapshot restored) but before its checkpoint: that record stands, and only what followed
    // it is done now.
    if let Some(cause) = recorded_interruption(&events, state, (&step_id, visit)) {
        // An evaluation's violations were recorded before that record: carried now.
        if let Some(planner) = PlannerVisit::of(workflow, &events, (&step_id, visit)) {
            planner.recover(workflow, workspace, recorder, state, None)?;
        }
        return finish_interrupted(workflow, recorder, state, &events, (step_id, visit), cause);
    }
    let orphans = super::orphans::kill_run_orphans(&state.run_id);
    if let Some(report) = recorded_completion(&events, (&step_id, visit)) {
        // An evaluation whose planner changed the worktree: its route carries the violation;
        // the checkpoint takes the worktree as the planner left it.
        if PlannerVisit::of(workflow, &events, (&step_id, visit)).is_some()
            && planner_change_recorded(&events, &step_id, visit)
        {
            state.fingerprint = Some(workspace.fingerprint()?);
        }
        return take_recorded_route(workflow, recorder, state, &step_id, visit, &report);
    }
    // What is left of the step's recorded process groups: members without `TNH_RUN_ID` too.
    let visit_dir = recorder.run_dir().visit_dir(&step_id, visit);
    let orphans = super::orphans::end_recorded_groups(&visit_dir, orphans);
    // A planner process was running (or not yet checked) when the process died.
    let planner_ran = guard_saved(recorder.run_dir(), &step_id, visit);
    let mut fields = StepInterrupted {
        cause: interruption_cause(&events, (&step_id, visit)),
        killed_orphans: orphans.killed,
        // Still alive after seconds of stopping and killing: said, never hidden.
        surviving_orphans: (!orphans.survivors.is_empty()).then_some(orphans.survivors),
        ..StepInterrupted::default()
    };
    recovery.check_guard(recorder, &events, (&step_id, visit), &mut fields)?;
    if let Some(planner) = PlannerVisit::of(workflow, &events, (&step_id, visit)) {
        let found = PlannerFound {
            guard_report: fields.guard_report.as_ref(),
            operator_checkout: recovery.operator_checkout,
            planner_ran,
        };
        planner.recover(workflow, workspace, recorder, state, Some(found))?;
    }
    if own_snapshot_is_latest(workspace, state, &step_id, visit)? {
        let record = workspace.rollback(RollbackTarget::PreStep)?;
        fields.restored = Some(serde_json::to_value(&record).unwrap_or_default());
    }
    let cause = fields.cause.clone();
    recorder.event(
        Some((&step_id, visit)),
        EventPayload::StepInterrupted(fields),
    )?;
    finish_interrupted(workflow, recorder, state, &events, (step_id, visit), cause)
}

impl Recovery<'_> {
    /// Checks the interrupted visit by its saved guard (see [`check_interrupted_agent`]), or
    /// records that the operator skipped the check of its unusable guard state — once: a
    /// `resume --skip-guard-check` killed after it recorded the skip does not check again.
    fn check_guard(
        &self,
        recorder: &mut Recorder,
        events: &[crate::artifacts::Event],
        (step_id, visit): (&str, u32),
        fields: &mut StepInterrupted,
    ) -> Result<(), RunError> {
        let skipped = latest_of_visit(events, (step_id, visit), |payload| {
            matches!(payload, EventPayload::GuardCheckSkipped(_)).then_some(())
        })
        .is_some();
        match self
            .unusable
            .filter(|unusable| unusable.is_of(step_id, visit))
        {
            _ if skipped => Ok(()),
            Some(unusable) => {
                let skip = GuardCheckSkipped {
                    guard_state: unusable.path.display().to_string(),
                    reason: format!("the guard state {}", unusable.problem),
                    by: "operator".to_owned(),
                };
                recorder.event(
                    Some((step_id, visit)),
                    EventPayload::GuardCheckSkipped(skip),
                )?;
                Ok(())
            }
            None => check_interrupted_agent(
                self.workspace,
                self.operator_checkout,
                recorder,
                (step_id, visit),
                fields,
                self.repository,
            ),
        }
    }
}

/// The cause of the visit's `step_interrupted` event when one was recorded after the last
/// checkpoint.
fn recorded_interruption(
    events: &[crate::artifacts::Event],
    state: &RunState,
    (step_id, visit): (&str, u32),
) -> Option<String> {
    events
        .iter()
        .rev()
        .filter(|event| event.seq > state.events_seq && event.is_of((step_id, visit)))
        .find_map(|event| match &event.payload {
            EventPayload::StepInterrupted(interrupted) => Some(interrupted.cause.clone()),
            _ => None,
        })
}

/// The report of the visit's recorded `step_completed` event, when it has one with an
/// outcome.
fn recorded_completion(
    events: &[crate::artifacts::Event],
    (step_id, visit): (&str, u32),
) -> Option<StepReport> {
    let completed = latest_of_visit(events, (step_id, visit), |payload| match payload {
        EventPayload::StepCompleted(completed) => Some(completed),
        _ => None,
    })?;
    Some(StepReport {
        outcome: completed.outcome?,
        policy_violation: completed.policy_violation.clone(),
        proposed_goldens: completed.proposed_goldens,
        stop_reason: completed.stop_reason.clone(),
    })
}

/// Why the visit did not finish: it could not start (a missing program, an unconfigured
/// validator), the operator interrupted it (Ctrl-C, SIGTERM, SIGHUP), or else the driving
/// process died during it.
fn interruption_cause(events: &[crate::artifacts::Event], visit: (&str, u32)) -> String {
    match (
        latest_of_visit(events, visit, |payload| match payload {
            EventPayload::StepFailed(failed) => Some(failed.error.as_str()),
            _ => None,
        }),
        latest_of_visit(events, visit, |payload| match payload {
            EventPayload::RunInterrupted(interrupted) => Some(interrupted.cause.as_str()),
            _ => None,
        }),
    ) {
        (Some(error), _) => format!("the step could not run: {error}"),
        (None, Some(interrupt)) => interrupt.to_owned(),
        (None, None) => "the driving process ended during the step".to_owned(),
    }
}

/// What `pick` takes from the latest event of the visit it takes something from.
pub(super) fn latest_of_visit<'e, T>(
    events: &'e [Event],
    visit: (&str, u32),
    pick: impl Fn(&'e EventPayload) -> Option<T>,
) -> Option<T> {
    events
        .iter()
        .rev()
        .filter(|event| event.is_of(visit))
        .find_map(|event| pick(&event.payload))
}

/// What follows a visit's `step_interrupted` event: its saved guard state goes, its
/// manifest is written, and the step is next with a new visit.
fn finish_interrupted(
    workflow: &Workflow,
    recorder: &mut Recorder,
    state: &mut RunState,
    events: &[crate::artifacts::Event],
    (step_id, visit): (String, u32),
    cause: String,
) -> Result<(), RunError> {
    // Removed once the visit is recorded as interrupted (not when it was checked): a `resume`
    // killed in between checks it again, instead of finding it gone.
    crate::opcode::remove_guard_state(
        &recorder
            .run_dir()
            .visit_dir(&step_id, visit)
            .join(GUARD_STATE_FILE),
    )?;
    record_interrupted_manifest(workflow, recorder, events, (&step_id, visit), cause)?;
    // The visit never finished: it keeps its number and folder, but not a `max_visits` slot.
    state.count_interrupted_visit(&step_id);
    state.phase = Phase::Ready {
        step_id,
        visit: visit + 1,
    };
    Ok(())
}

/// Takes the route a recovered visit's recorded `step_completed` gives.
fn take_recorded_route(
    workflow: &Workflow,
    recorder: &mut Recorder,
    state: &mut RunState,
    step_id: &str,
    visit: u32,
    report: &StepReport,
) -> Result<(), RunError> {
    let completion = super::routing::Completion::Recovered;
    super::routing::record_route(
        workflow,
        recorder,
        state,
        (step_id, visit),
        report,
        completion,
    )?;
    Ok(())
}
