//! Deciding a waiting gate (`gate approve|reject`) and resolving one past its deadline: the
//! decision is recorded (`gate_outcome`, `gate_resolved`, `human_feedback`), then the kernel
//! routes it like any other outcome.

use std::path::Path;

use super::lock::RunLock;
use super::recorder::Recorder;
use super::run::{RunError, find_run_dir};
use super::state::{Phase, RunState};
use super::transition::StepReport;
use crate::artifacts::EventPayload;
use crate::artifacts::event_payload::{GateResolved, HumanFeedback, RollbackCompleted};
use crate::artifacts::{
    ArtifactRole, EventLog, EventType, GateDecision, GateOutcome, GateRequest, RunDir,
    StepManifest, VisitDir, read_json, write_json_new,
};
use crate::outcome::Outcome;

/// A human's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// `gate approve`.
    Approve,
    /// `gate reject`.
    Reject,
}

/// Why a gate could not be decided (nothing was changed).
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// The run is not waiting at a gate.
    #[error("run `{run_id}` is not waiting at a gate (it is {state})")]
    NotWaiting {
        /// The run.
        run_id: String,
        /// What it is instead.
        state: String,
    },
    /// The operator abandoned the run (`runs abandon`): its gates can no longer be decided.
    #[error("run `{run_id}` was {reason}: its gates can no longer be decided")]
    Abandoned {
        /// The run.
        run_id: String,
        /// The reason recorded as its end: `abandoned by NAME (WHY)`.
        reason: String,
    },
    /// The process driving the run died at this gate: after it requested the gate, before
    /// the run was recorded as waiting. Only `resume` can settle it (it requests the gate
    /// again).
    #[error(
        "run `{run_id}` is not waiting at a gate: the process driving it died at gate `{step_id}`, after requesting it and before the run was recorded as waiting"
    )]
    DiedAtGate {
        /// The run.
        run_id: String,
        /// The gate.
        step_id: String,
    },
    /// The operator rolled the worktree back after the gate showed it: the change the
    /// reviewer was shown is gone.
    #[error(
        "the worktree of run `{run_id}` was rolled back by the operator (to {target}, {record}) after gate `{step_id}` showed it: the change the reviewer was shown is gone"
    )]
    RolledBack {
        /// The run.
        run_id: String,
        /// The gate.
        step_id: String,
        /// The rollback's target (`pre_step`, `pre_run`).
        target: String,
        /// The rollback's record (`rollbacks/<n>.json`).
        record: String,
    },
    /// The gate's deadline passed before the decision: it was resolved as timed out.
    #[error(
        "gate `{step_id}` of run `{run_id}` timed out at {deadline}, before this decision; it was resolved as gate_timed_out"
    )]
    TimedOut {
        /// The run.
        run_id: String,
        /// The gate.
        step_id: String,
        /// Its deadline.
        deadline: String,
        /// How the run ended, when the `gate_timed_out` route ended it (`failure`, …).
        ended: Option<&'static str>,
    },
    /// An earlier decision was recorded, by a process that stopped before taking its route.
    #[error(
        "gate `{step_id}` of run `{run_id}` was already decided ({decision}) by a process that stopped before taking its route; that decision stands"
    )]
    AlreadyDecided {
        /// The run.
        run_id: String,
        /// The gate.
        step_id: String,
        /// The earlier decision.
        decision: String,
        /// How the run ended, when that decision's route ended it.
        ended: Option<&'static str>,
    },
    /// The decision names no reviewer (`--as ""`, or `$USER` set but empty): the record
    /// would not say who decided.
    #[error("no reviewer name for the decision on run `{run_id}`: the record must say who decided")]
    NoReviewer {
        /// The run.
        run_id: String,
    },
    /// The reviewer is not an approver of this gate.
    #[error("`{reviewer}` is not an approver of gate `{step_id}` (approvers: {approvers})")]
    NotApprover {
        /// Who tried.
        reviewer: String,
        /// The gate.
        step_id: String,
        /// Who may.
        approvers: String,
    },
}

/// How the run ended, when it did (a route taken to a STOP).
fn ended(state: &RunState) -> Option<&'static str> {
    match &state.phase {
        Phase::Finished { end, .. } => Some(end.name()),
        _ => None,
    }
}

/// The gate request of the waiting visit.
pub fn read_request(
    recorder: &Recorder,
    step_id: &str,
    visit: u32,
) -> Result<GateRequest, RunError> {
    Ok(request_of(recorder.run_dir(), step_id, visit)?)
}

/// The `gate_request.json` of the gate `step_id` #`visit` of the run in `run_dir`.
pub fn request_of(
    run_dir: &crate::artifacts::RunDir,
    step_id: &str,
    visit: u32,
) -> Result<GateRequest, crate::artifacts::ArtifactsError> {
    read_json(
        &run_dir.visit(step_id, visit).gate_request(),
        "gate request",
    )
}

/// The waiting gate of a state, or why there is none.
fn waiting(state: &RunState) -> Result<(String, u32), GateError> {
    match &state.phase {
        Phase::Waiting { step_id, visit } => Ok((step_id.clone(), *visit)),
        Phase::Finished {
            end: super::state::End::Abandoned,
            reason,
            ..
        } => Err(GateError::Abandoned {
            run_id: state.run_id.clone(),
            reason: reason.clone(),
        }),
        Phase::Finished { end, .. } => Err(GateError::NotWaiting {
            run_id: state.run_id.clone(),
            state: format!("finished ({})", end.name()),
        }),
        Phase::Ready { step_id, .. } => Err(GateError::NotWaiting {
            run_id: state.run_id.clone(),
            state: format!("between steps, before `{step_id}`"),
        }),
        Phase::Running { step_id, .. } => Err(GateError::NotWaiting {
            run_id: state.run_id.clone(),
            state: format!("at step `{step_id}`"),
        }),
    }
}

/// The first rollback the operator made after the gate of this visit was requested: when it
/// was recorded, and its fields.
pub(crate) fn rollback_since_request(
    recorder: &Recorder,
    step_id: &str,
    visit: u32,
) -> Result<Option<(String, RollbackCompleted)>, RunError> {
    let events = EventLog::read_all(&recorder.run_dir().events())?;
    let Some(requested) = events.iter().rev().find(|event| {
        event.event_type() == EventType::GateRequested
            && event.step_id.as_deref() == Some(step_id)
            && event.visit == Some(visit)
    }) else {
        return Ok(None);
    };
    let requested = requested.seq;
    Ok(events.into_iter().find_map(|event| match event.payload {
        EventPayload::RollbackCompleted(rollback)
            if event.seq > requested
                && event.step_id.is_none()
                && rollback.by.as_deref() == Some("operator") =>
        {
            Some((event.timestamp, rollback))
        }
        _ => None,
    }))
}

/// Why a run that is not waiting cannot be decided: a visit its driving process left in the
/// middle (the lock is ours, so that process is gone) is said to be one, a gate's own first.
fn not_waiting(run_dir: &crate::artifacts::RunDir, state: &RunState, error: GateError) -> RunError {
    let Ok(Some((step_id, visit))) = super::recovery::visit_in_progress(run_dir, state) else {
        return RunError::Gate(error);
    };
    let requested = EventLog::read_all(&run_dir.events()).is_ok_and(|events| {
        events.iter().any(|event| {
            event.seq > state.events_seq
                && event.event_type() == EventType::GateRequested
                && event.step_id.as_deref() == Some(step_id.as_str())
                && event.visit == Some(visit)
        })
    });
    if requested {
        RunError::Gate(GateError::DiedAtGate {
            run_id: state.run_id.clone(),
            step_id,
        })
    } else {
        RunError::StepInProgress {
            run_id: state.run_id.clone(),
            step_id,
            visit,
        }
    }
}

/// A reviewer's decision of a run's waiting gate, as `gate approve|reject` and the `--wait`
/// prompt make it.
#[derive(Debug, Clone, Copy)]
pub struct DecisionRequest<'a> {
    /// The repository the run directory is found in.
    pub repo: &'a Path,
    /// The run.
    pub run_id: &'a str,
    /// Approve or reject.
    pub decision: Decision,
    /// Who decides (`--as`).
    pub reviewer: &'a str,
    /// Why (`--comment`).
    pub comment: Option<&'a str>,
    /// `--accept-drift`: decide on what the worktree holds now when it changed since the gate
    /// showed it (recorded as a `drift_accepted` event).
    pub accept_drift: bool,
    /// When the reviewer answered, for a decision recorded later (the `--wait` prompt asks for
    /// a name and a comment after the answer): a gate whose deadline passed in between is
    /// decided as of that answer (its `decided_at`), not timed out. `None`: now.
    pub answered_at: Option<jiff::Timestamp>,
}

/// Decides the waiting gate of a run. The run lock makes concurrent decisions safe: exactly
/// one wins, the other finds the run no longer waiting (or the lock held) and changes nothing.
pub fn decide(request: &DecisionRequest<'_>) -> Result<Phase, RunError> {
    let (run_id, reviewer) = (request.run_id, request.reviewer);
    // Refused before anything is opened: a decision must say who made it.
    if reviewer.trim().is_empty() {
        return Err(RunError::Gate(GateError::NoReviewer {
            run_id: run_id.to_owned(),
        }));
    }
    let run_dir = find_run_dir(request.repo, run_id)?;
    super::run::check_recorded_repository(request.repo, &run_dir, run_id)?;
    let _lock = RunLock::acquire(&run_dir.lock())?;
    let (mut recorder, mut state) = open_waiting(&run_dir, run_id)?;
    let (step_id, visit) = match waiting(&state) {
        Ok(gate) => gate,
        Err(error @ GateError::Abandoned { .. }) => return Err(error.into()),
        Err(error) => return Err(not_waiting(&run_dir, &state, error)),
    };
    // A decision recorded by a process that died before taking its route stands.
    if let Some(earlier) = finish_interrupted_decision(&mut recorder, &mut state)? {
        return Err(RunError::Gate(GateError::AlreadyDecided {
            run_id: state.run_id.clone(),
            step_id,
            decision: earlier.as_str().to_owned(),
            ended: ended(&state),
        }));
    }
    let request_file = read_request(&recorder, &step_id, visit)?;
    // A decision after the deadline is too late: the gate times out now, as `gate list` or
    // `status` would have noticed.
    let answered_in_time = request.answered_at.filter(|at| {
        request_file
            .deadline_time()
            .is_none_or(|deadline| *at < deadline)
    });
    if answered_in_time.is_none() && resolve_if_timed_out(&mut recorder, &mut state)? {
        return Err(RunError::Gate(GateError::TimedOut {
            run_id: state.run_id.clone(),
            step_id,
            deadline: request_file.deadline.as_deref().unwrap_or("?").to_owned(),
            ended: ended(&state),
        }));
    }
    check_approver(&request_file, reviewer, &step_id)?;
    // The reviewer decided on what the gate showed: a worktree changed since is refused
    // whichever way the decision routes (a STOP included), unless accepted.
    let workflow = super::continuation::workflow_of(&mut recorder, &state)?;
    check_rollback_since(
        &recorder,
        &mut state,
        (&step_id, visit),
        request.accept_drift,
    )?;
    super::drift::check_drift_before_decision(
        &workflow,
        &mut recorder,
        &mut state,
        request.accept_drift,
    )?;
    let decision = match request.decision {
        Decision::Approve => GateDecision::GateApproved,
        Decision::Reject => GateDecision::GateRejected,
    };
    resolve(
        &workflow,
        &mut recorder,
        &mut state,
        (&step_id, visit),
        decision,
        Some((reviewer, request.comment)),
        answered_in_time,
    )?;
    Ok(state.phase)
}

/// Opens a run to decide its gate: refuses a run a newer release wrote or one without a
/// checkpoint, and finishes an interrupted `runs abandon` (its event stands: the run is
/// ended now).
fn open_waiting(
    run_dir: &crate::artifacts::RunDir,
    run_id: &str,
) -> Result<(Recorder, RunState), RunError> {
    // A run a newer release wrote is refused before anything of it is opened for writing.
    super::state::check_run_versions(run_dir)?;
    if !run_dir.state().is_file() {
        return Err(RunError::StateMissing {
            run_id: run_id.to_owned(),
            path: run_dir.state(),
            evidence: "a gate can only wait after a checkpoint".to_owned(),
        });
    }
    let mut recorder = Recorder::open(run_dir.clone())?;
    let mut state = super::state::read_state(&run_dir.state())?;
    super::abandon::finish_interrupted_abandon(&mut recorder, &mut state)?;
    Ok((recorder, state))
}

/// Refuses a reviewer who is not one of the gate's approvers, when it names any.
fn check_approver(request: &GateRequest, reviewer: &str, step_id: &str) -> Result<(), RunError> {
    let approvers = &request.approvers;
    if !approvers.is_empty() && !approvers.iter().any(|name| name == reviewer) {
        return Err(RunError::Gate(GateError::NotApprover {
            reviewer: reviewer.to_owned(),
            step_id: step_id.to_owned(),
            approvers: approvers.join(", "),
        }));
    }
    Ok(())
}

/// An operator's rollback since the gate showed the worktree checkpointed the rolled-back
/// one: it is still drift from what the gate showed. Refused unless `accept_drift`, which
/// checks against the checkpoint the rollback replaced.
fn check_rollback_since(
    recorder: &Recorder,
    state: &mut RunState,
    (step_id, visit): (&str, u32),
    accept_drift: bool,
) -> Result<(), RunError> {
    let Some((_, rollback)) = rollback_since_request(recorder, step_id, visit)? else {
        return Ok(());
    };
    if !accept_drift {
        return Err(RunError::Gate(GateError::RolledBack {
            run_id: state.run_id.clone(),
            step_id: step_id.to_owned(),
            target: rollback.target,
            record: rollback.record,
        }));
    }
    if let Ok(Some(shown)) = serde_json::from_value(rollback.checkpoint_before.unwrap_or_default())
    {
        state.fingerprint = Some(shown);
    }
    Ok(())
}

/// Resolves the waiting gate of a run that no process drives, when its deadline has passed
/// (`gate list` and `status` notice timeouts this way); returns whether it did.
pub fn notice_timeout(run_dir: &crate::artifacts::RunDir) -> bool {
    // Only a gate past its deadline needs the lock. Looking without it first keeps a listing
    // or a status (a dashboard polling them) from holding the lock a decision needs; the
    // check is made again under the lock.
    if !deadline_passed(run_dir) {
        return false;
    }
    let Ok(_lock) = RunLock::acquire(&run_dir.lock()) else {
        return false;
    };
    // A run a newer release wrote is left to that release.
    if super::state::check_run_versions(run_dir).is_err() {
        return false;
    }
    let (Ok(mut recorder), Ok(mut state)) = (
        Recorder::open(run_dir.clone()),
        super::state::read_state(&run_dir.state()),
    ) else {
        return false;
    };
    resolve_if_timed_out(&mut recorder, &mut state).unwrap_or(false)
}

/// Whether the run waits at a gate whose deadline has passed, read without the lock.
fn deadline_passed(run_dir: &crate::artifacts::RunDir) -> bool {
    let Ok(state) = read_json::<RunState>(&run_dir.state(), "run state") else {
        return false;
    };
    let Ok((step_id, visit)) = waiting(&state) else {
        return false;
    };
    gate_deadline_passed(run_dir, &step_id, visit).is_some()
}

/// The deadline of the gate `step_id` #`visit` a run waits at, when it has passed (read from
/// its `gate_request.json`); `None` when it has none, it is still ahead, or the request cannot
/// be read. Nothing drives such a run: its gate stays waiting until something notices it.
pub fn gate_deadline_passed(
    run_dir: &crate::artifacts::RunDir,
    step_id: &str,
    visit: u32,
) -> Option<String> {
    let request = request_of(run_dir, step_id, visit).ok()?;
    is_due(&request).then(|| request.deadline.as_deref().unwrap_or("?").to_owned())
}

/// Whether a gate request's deadline has passed (a request without one never is).
pub fn is_due(request: &GateRequest) -> bool {
    request
        .deadline_time()
        .is_some_and(|deadline| deadline <= jiff::Timestamp::now())
}

/// Resolves a waiting gate whose deadline has passed as `gate_timed_out`; returns whether it did.
pub fn resolve_if_timed_out(
    recorder: &mut Recorder,
    state: &mut RunState,
) -> Result<bool, RunError> {
    let Ok((step_id, visit)) = waiting(state) else {
        return Ok(false);
    };
    let request = read_request(recorder, &step_id, visit)?;
    let due = is_due(&request);
    if due {
        let workflow = super::continuation::workflow_of(recorder, state)?;
        resolve(
            &workflow,
            recorder,
            state,
            (&step_id, visit),
            GateDecision::GateTimedOut,
            None,
            None,
        )?;
    }
    Ok(due)
}

/// Records the decision `outcome` on the waiting gate — by a reviewer, with their comment, or
/// by its deadline — and takes its route. `decided_at` is when the reviewer answered, when
/// that was before now. `workflow` is read by the caller before anything is recorded: a
/// workflow file that became invalid refuses the decision with nothing of it written.
fn resolve(
    workflow: &crate::workflow::model::Workflow,
    recorder: &mut Recorder,
    state: &mut RunState,
    (step_id, visit): (&str, u32),
    decision: GateDecision,
    by: Option<(&str, Option<&str>)>,
    decided_at: Option<jiff::Timestamp>,
) -> Result<(), RunError> {
    let (reviewer, comment) = (by.map(|(reviewer, _)| reviewer), by.and_then(|(_, c)| c));
    let visit_dir = recorder.run_dir().visit(step_id, visit);
    let decided_at = decided_at.map_or_else(crate::artifacts::now, |at| at.to_string());
    let outcome = decision.outcome();
    let gate_outcome = GateOutcome {
        schema_version: crate::artifacts::SCHEMA_VERSION,
        run_id: state.run_id.clone(),
        step_id: step_id.to_owned(),
        visit,
        decision,
        reviewer: reviewer.map(str::to_owned),
        comment: comment.map(str::to_owned),
        decided_at: decided_at.clone(),
    };
    write_json_new(&visit_dir.gate_outcome(), &gate_outcome)?;
    let step = Some((step_id, visit));
    let resolved = GateResolved {
        decision: outcome.as_str().to_owned(),
        reviewer: Some(reviewer.map(str::to_owned)),
    };
    recorder.event(step, EventPayload::GateResolved(resolved))?;
    if let Some(reviewer) = reviewer {
        record_feedback(recorder, (step_id, visit), outcome, reviewer, comment)?;
    }
    route_decision(
        workflow,
        recorder,
        state,
        (step_id, visit),
        outcome,
        &decided_at,
        super::routing::Completion::Record,
    )
}

/// The reviewer's `human_feedback` event of a decision.
fn record_feedback(
    recorder: &mut Recorder,
    (step_id, visit): (&str, u32),
    outcome: Outcome,
    reviewer: &str,
    comment: Option<&str>,
) -> Result<(), RunError> {
    let related = RunDir::visit_file_relative(step_id, visit, VisitDir::GATE_REQUEST);
    let fields = HumanFeedback {
        decision: outcome.as_str().to_owned(),
        comments: comment.map(str::to_owned),
        reviewer: reviewer.to_owned(),
        related: vec![related],
    };
    recorder.event(Some((step_id, visit)), EventPayload::HumanFeedback(fields))?;
    Ok(())
}

/// Takes the route of a recorded decision: the visit's manifest says how the gate ended, then
/// the kernel routes and checkpoints (`completion`: whether the visit's end is still to be
/// recorded). Done again from the start when a process died on the way, so it writes nothing
/// twice.
fn route_decision(
    workflow: &crate::workflow::model::Workflow,
    recorder: &mut Recorder,
    state: &mut RunState,
    (step_id, visit): (&str, u32),
    outcome: Outcome,
    decided_at: &str,
    completion: super::routing::Completion,
) -> Result<(), RunError> {
    let manifest_path = recorder.run_dir().visit_manifest(step_id, visit);
    let mut manifest: StepManifest = read_json(&manifest_path, "manifest")?;
    if manifest.termination != outcome.as_str() {
        manifest.termination = outcome.as_str().to_owned();
        manifest.ended_at = decided_at.to_owned();
        manifest.artifacts.push(crate::artifacts::ArtifactEntry {
            role: ArtifactRole::GateOutcome,
            path: RunDir::visit_file_relative(step_id, visit, VisitDir::GATE_OUTCOME),
            media_type: "application/json".into(),
            required: true,
            important: true,
        });
        recorder.write_manifest(&manifest)?;
    }
    let report = StepReport::outcome(outcome);
    super::routing::record_route(
        workflow,
        recorder,
        state,
        (step_id, visit),
        &report,
        completion,
    )?;
    if !matches!(state.phase, Phase::Finished { .. }) {
        // Nothing was interrupted: the decision was made and routed, and the run waits for
        // `resume` to go on.
        let decided = match outcome {
            Outcome::GateApproved => "approved",
            Outcome::GateRejected => "rejected",
            _ => "timed out",
        };
        recorder.write_decided(
            &format!(
                "gate `{step_id}` {decided}, waiting to resume; `tnh-conductor resume {}` continues the run",
                state.run_id
            ),
            outcome.as_str(),
        )?;
    }
    Ok(())
}

/// A decision a process recorded (`gate_resolved`) after the run's last checkpoint but died
/// before routing: it stands, and its route is taken now. Returns the decision when there was
/// one.
pub fn finish_interrupted_decision(
    recorder: &mut Recorder,
    state: &mut RunState,
) -> Result<Option<Outcome>, RunError> {
    let Ok((step_id, visit)) = waiting(state) else {
        return Ok(None);
    };
    let events = EventLog::read_all(&recorder.run_dir().events())?;
    let Some((recorded, resolved)) = events.iter().rev().find_map(|event| match &event.payload {
        EventPayload::GateResolved(resolved)
            if event.seq > state.events_seq && event.is_of((step_id.as_str(), visit)) =>
        {
            Some((event, resolved))
        }
        _ => None,
    }) else {
        return Ok(None);
    };
    let Ok(outcome) = resolved.decision.parse::<Outcome>() else {
        return Ok(None);
    };
    let decided_at = recorded.timestamp.clone();
    let reviewer = resolved.reviewer.clone().flatten();
    // The process may have died before recording the reviewer's feedback: it is recorded now,
    // with the comment kept in `gate_outcome.json`.
    let feedback = events.iter().any(|event| {
        event.seq > recorded.seq
            && event.event_type() == EventType::HumanFeedback
            && event.step_id.as_deref() == Some(step_id.as_str())
            && event.visit == Some(visit)
    });
    if let Some(reviewer) = reviewer.filter(|_| !feedback) {
        let decided: GateOutcome = read_json(
            &recorder.run_dir().visit(&step_id, visit).gate_outcome(),
            "gate outcome",
        )?;
        let comment = decided.comment.as_deref();
        record_feedback(recorder, (&step_id, visit), outcome, &reviewer, comment)?;
    }
    // The process may have died after recording the visit's end too.
    let completed = events.iter().any(|event| {
        event.seq > state.events_seq
            && event.event_type() == EventType::StepCompleted
            && event.step_id.as_deref() == Some(step_id.as_str())
            && event.visit == Some(visit)
    });
    let completion = if completed {
        super::routing::Completion::Recovered
    } else {
        super::routing::Completion::Record
    };
    let workflow = super::continuation::workflow_of(recorder, state)?;
    route_decision(
        &workflow,
        recorder,
        state,
        (&step_id, visit),
        outcome,
        &decided_at,
        completion,
    )?;
    Ok(Some(outcome))
}
