//! The visit a run was in when its driver stopped: found, then either its recorded route is
//! taken or it is recorded as interrupted and run again as a new visit.

use super::drift::own_snapshot_is_latest;
use super::guard_recovery::{UnusableGuardState, check_interrupted_agent};
use super::interrupted_manifest::record_interrupted_manifest;
use super::planner_recovery::{PlannerFound, PlannerVisit, guard_saved, planner_change_recorded};
use super::recorder::{Payload, Recorder, payload};
use super::resume::RepositoryChanges;
use super::run_error::RunError;
use super::state::{Phase, RunState};
use super::transition::StepReport;
use crate::artifacts::{EventLog, EventType, RunDir};
use crate::config::OperatorCheckout;
use crate::outcome::Outcome;
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
                    && event.event_type == EventType::StepStarted
                    && event.step_id.as_deref() == Some(step_id.as_str())
                    && event.visit == Some(*visit)
            });
            Ok(started.then(|| (step_id.clone(), *visit)))
        }
        Phase::Waiting { .. } | Phase::Finished { .. } => Ok(None),
    }
}

/// A visit marked running when the process died: if its `step_completed` was recorded after
/// the last checkpoint, its route is taken now; otherwise it is recorded as interrupted, the
/// worktree goes back to the visit's pre-step snapshot, and the step runs again as a new visit.
///
/// `unusable` is the visit's damaged or missing guard state, which `resume --skip-guard-check`
/// goes on without: the visit is not checked, and a `guard_check_skipped` event says so.
pub(super) fn recover_interrupted_visit(
    workflow: &Workflow,
    operator_checkout: OperatorCheckout,
    workspace: &Workspace,
    recorder: &mut Recorder,
    state: &mut RunState,
    (repository, unusable): (RepositoryChanges, Option<&UnusableGuardState>),
) -> Result<(), RunError> {
    let Phase::Running { step_id, visit } = state.phase.clone() else {
        return Ok(());
    };
    let events = EventLog::read_all(&recorder.run_dir().events())?;
    // A `resume` killed after it recorded the visit as interrupted (its orphans killed, its
    // snapshot restored) but before its checkpoint: that record stands, and only what followed
    // it is done now.
    let recorded = events.iter().rev().find(|event| {
        event.seq > state.events_seq
            && event.event_type == EventType::StepInterrupted
            && event.step_id.as_deref() == Some(step_id.as_str())
            && event.visit == Some(visit)
    });
    if let Some(recorded) = recorded {
        let cause = recorded.payload.get("cause").cloned().unwrap_or_default();
        // An evaluation's violations were recorded before that record: carried now.
        let planner = PlannerVisit::of(workflow, &events, (&step_id, visit));
        if let Some(planner) = planner {
            planner.recover(workflow, workspace, recorder, state, None)?;
        }
        // The resume that recorded it was killed before it removed the saved guard state.
        crate::opcode::remove_guard_state(
            &recorder
                .run_dir()
                .visit_dir(&step_id, visit)
                .join(GUARD_STATE_FILE),
        )?;
        record_interrupted_manifest(workflow, recorder, &events, (&step_id, visit), cause)?;
        state.count_interrupted_visit(&step_id);
        state.phase = Phase::Ready {
            step_id,
            visit: visit + 1,
        };
        return Ok(());
    }
    let orphans = super::orphans::kill_run_orphans(&state.run_id);
    let completed = events.iter().rev().find(|event| {
        event.event_type == EventType::StepCompleted
            && event.step_id.as_deref() == Some(step_id.as_str())
            && event.visit == Some(visit)
    });
    if let Some(event) = completed {
        let outcome = event
            .payload
            .get("outcome")
            .and_then(|value| value.as_str())
            .and_then(|text| text.parse::<Outcome>().ok());
        if let Some(outcome) = outcome {
            // An evaluation whose planner changed the worktree: its route carries the
            // violation; the checkpoint takes the worktree as the planner left it.
            if PlannerVisit::of(workflow, &events, (&step_id, visit)).is_some()
                && planner_change_recorded(&events, &step_id, visit)
            {
                state.fingerprint = Some(workspace.fingerprint()?);
            }
            let report = StepReport {
                outcome,
                policy_violation: event
                    .payload
                    .get("policy_violation")
                    .and_then(|value| value.as_str())
                    .map(str::to_owned),
                proposed_goldens: event
                    .payload
                    .get("proposed_goldens")
                    .and_then(serde_json::Value::as_bool)
                    .unwrap_or(false),
                stop_reason: event.text("stop_reason").map(str::to_owned),
            };
            return take_recorded_route(workflow, recorder, state, &step_id, visit, &report);
        }
    }
    // Why the visit did not finish: it could not start (a missing program, an unconfigured
    // validator), the operator interrupted it (Ctrl-C, SIGTERM, SIGHUP), or else the driving
    // process died during it.
    let of_this_visit = |kind: EventType, field: &str| {
        events.iter().rev().find_map(|event| {
            let this_visit = event.event_type == kind
                && event.step_id.as_deref() == Some(step_id.as_str())
                && event.visit == Some(visit);
            this_visit.then(|| event.text(field)).flatten()
        })
    };
    let cause = match (
        of_this_visit(EventType::StepFailed, "error"),
        of_this_visit(EventType::RunInterrupted, "cause"),
    ) {
        (Some(error), _) => format!("the step could not run: {error}"),
        (None, Some(interrupt)) => interrupt.to_owned(),
        (None, None) => "the driving process ended during the step".to_owned(),
    };
    // What is left of the step's recorded process groups: members without `TNH_RUN_ID` too.
    let visit_dir = recorder.run_dir().visit_dir(&step_id, visit);
    let orphans = super::orphans::end_recorded_groups(&visit_dir, orphans);
    // A planner process was running (or not yet checked) when the process died.
    let planner_ran = guard_saved(recorder.run_dir(), &step_id, visit);
    let mut fields: Payload = payload([
        ("cause", cause.into()),
        ("killed_orphans", orphans.killed.into()),
    ]);
    if !orphans.survivors.is_empty() {
        // Still alive after seconds of stopping and killing: said, never hidden.
        fields.insert("surviving_orphans".into(), orphans.survivors.into());
    }
    // A `resume --skip-guard-check` killed after it recorded the skip does not check again.
    let skipped = of_this_visit(EventType::GuardCheckSkipped, "reason").is_some();
    match unusable.filter(|unusable| unusable.is_of(&step_id, visit)) {
        _ if skipped => {}
        Some(unusable) => {
            let skip = payload([
                ("guard_state", unusable.path.display().to_string().into()),
                (
                    "reason",
                    format!("the guard state {}", unusable.problem).into(),
                ),
                ("by", "operator".into()),
            ]);
            recorder.event(EventType::GuardCheckSkipped, Some((&step_id, visit)), skip)?;
        }
        None => check_interrupted_agent(
            workspace,
            operator_checkout,
            recorder,
            (&step_id, visit),
            &mut fields,
            repository,
        )?,
    }
    if let Some(planner) = PlannerVisit::of(workflow, &events, (&step_id, visit)) {
        let found = PlannerFound {
            guard_report: fields.get("guard_report"),
            operator_checkout,
            planner_ran,
        };
        planner.recover(workflow, workspace, recorder, state, Some(found))?;
    }
    if own_snapshot_is_latest(workspace, state, &step_id, visit)? {
        let record = workspace.rollback(RollbackTarget::PreStep)?;
        fields.insert(
            "restored".into(),
            serde_json::to_value(&record).unwrap_or_default(),
        );
    }
    let cause = fields.get("cause").cloned().unwrap_or_default();
    recorder.event(EventType::StepInterrupted, Some((&step_id, visit)), fields)?;
    // Removed once the visit is recorded as interrupted (not when it was checked): a `resume`
    // killed in between checks it again, instead of finding it gone.
    crate::opcode::remove_guard_state(
        &recorder
            .run_dir()
            .visit_dir(&step_id, visit)
            .join(GUARD_STATE_FILE),
    )?;
    record_interrupted_manifest(workflow, recorder, &events, (&step_id, visit), cause)?;
    // The visit never finished: it keeps its number and folder, but not a `max_visits` slot.
    state.count_interrupted_visit(&step_id);
    state.phase = Phase::Ready {
        step_id,
        visit: visit + 1,
    };
    Ok(())
}

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
