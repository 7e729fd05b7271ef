//! Recording a finished visit and taking the kernel's route — one place for the driver, gate
//! decisions and crash recovery, so the three write the same events in the same order.

use super::recorder::Recorder;
use super::state::{End, Phase, RunState};
use super::transition::{Next, StepReport, complete_step, fail};
use crate::artifacts::EventPayload;
use crate::artifacts::event_payload::{RouteSelected, RunEnded, StepCompleted};
use crate::artifacts::{ArtifactsError, EventLog, EventType};
use crate::workflow::model::Workflow;

/// How a visit's end is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// Write `step_completed` now.
    Record,
    /// `step_completed` was written before a crash: take the route it implies.
    Recovered,
}

/// Writes `step_completed` (unless recovered), routes by the report, writes `route_selected`
/// and, when the run ends, `run_completed` or `run_failed` — at a success end, after the
/// run's change is committed on its branch (`run_committed`, see [`super::result`]); then
/// checkpoints, and records the end in `metadata.json`. A recovered route whose `route_selected` or end event the dead
/// process already wrote after the last checkpoint is not written again.
pub fn record_route(
    workflow: &Workflow,
    recorder: &mut Recorder,
    state: &mut RunState,
    (step_id, visit): (&str, u32),
    report: &StepReport,
    completion: Completion,
) -> Result<(), ArtifactsError> {
    let step = Some((step_id, visit));
    let recorded = match completion {
        Completion::Record => Recorded::default(),
        Completion::Recovered => Recorded::read(recorder, state.events_seq, (step_id, visit))?,
    };
    if completion == Completion::Record {
        let fields = StepCompleted {
            outcome: Some(report.outcome),
            proposed_goldens: report.proposed_goldens,
            policy_violation: report.policy_violation.clone(),
            stop_reason: report.stop_reason.clone(),
        };
        recorder.event(step, EventPayload::StepCompleted(fields))?;
    }
    let reason = match complete_step(workflow, state, report) {
        Ok(mut transition) => {
            explain_bare_failure(workflow, recorder, step_id, &mut transition);
            *state = transition.state;
            let (next_step, next_visit) = match &transition.next {
                Next::Step {
                    step_id: next,
                    visit: next_visit,
                } => (next.clone(), Some(*next_visit)),
                Next::End { .. } => ("STOP".to_owned(), None),
            };
            let fields = RouteSelected {
                outcome: Some(transition.outcome),
                next_step,
                next_visit,
                recovered: (completion == Completion::Recovered).then_some(true),
            };
            if !recorded.route {
                recorder.event(step, EventPayload::RouteSelected(fields))?;
            }
            match transition.next {
                Next::End { reason, .. } if recorded.end => Some(reason),
                Next::End { end, reason } => {
                    if end == End::Success {
                        let committed = recorded.committed.clone();
                        super::result::commit_at_success(recorder, state, committed)?;
                    }
                    let ended = RunEnded {
                        end: end.name().to_owned(),
                        reason: reason.clone(),
                    };
                    let event = if end == End::Error {
                        EventPayload::RunFailed(ended)
                    } else {
                        EventPayload::RunCompleted(ended)
                    };
                    recorder.event(None, event)?;
                    Some(reason)
                }
                Next::Step { .. } => None,
            }
        }
        Err(error) => {
            *state = fail(state, &error);
            let reason = error.to_string();
            if recorded.end {
                return finish(recorder, state, Some(&reason));
            }
            let ended = RunEnded {
                end: "error".to_owned(),
                reason: reason.clone(),
            };
            recorder.event(None, EventPayload::RunFailed(ended))?;
            Some(reason)
        }
    };
    finish(recorder, state, reason.as_deref())
}

/// A failure reached through a route to the bare `STOP` says why, as a failure STOP step does
/// (see [`crate::opcode::failure_causes`]): the end's reason gets what failed since the last
/// agent step began.
fn explain_bare_failure(
    workflow: &Workflow,
    recorder: &Recorder,
    step_id: &str,
    transition: &mut super::transition::Transition,
) {
    let Next::End {
        end: End::Failure,
        reason,
    } = &mut transition.next
    else {
        return;
    };
    let stop_step = workflow
        .step(step_id)
        .is_some_and(|step| matches!(step.body, crate::workflow::model::StepBody::Stop(_)));
    if stop_step {
        return;
    }
    let events = EventLog::read_all(&recorder.run_dir().events()).unwrap_or_default();
    let Some(causes) = crate::opcode::failure_causes(recorder.run_dir(), &events) else {
        return;
    };
    reason.push_str(" — ");
    reason.push_str(&causes);
    if let Phase::Finished { reason: ended, .. } = &mut transition.state.phase {
        *ended = reason.clone();
    }
}

/// Checkpoints, and records a finished run's end in `metadata.json`.
fn finish(
    recorder: &mut Recorder,
    state: &mut RunState,
    reason: Option<&str>,
) -> Result<(), ArtifactsError> {
    recorder.commit(state, reason)?;
    if matches!(state.phase, Phase::Finished { .. }) {
        recorder.finish(state)?;
    }
    Ok(())
}

/// What a process that died after recording a visit's end had written of its route after the
/// last checkpoint (events up to `checkpoint` are accounted for by it).
#[derive(Debug, Default)]
struct Recorded {
    /// The visit's `route_selected`.
    route: bool,
    /// The run's end (`run_completed` or `run_failed`).
    end: bool,
    /// The commit of a `run_committed` (a success STOP's result already committed).
    committed: Option<String>,
}

impl Recorded {
    fn read(
        recorder: &Recorder,
        checkpoint: u64,
        (step_id, visit): (&str, u32),
    ) -> Result<Recorded, ArtifactsError> {
        let events = EventLog::read_all(&recorder.run_dir().events())?;
        let mut recorded = Recorded::default();
        for event in events.iter().filter(|event| event.seq > checkpoint) {
            match event.event_type() {
                EventType::RouteSelected
                    if event.step_id.as_deref() == Some(step_id) && event.visit == Some(visit) =>
                {
                    recorded.route = true;
                }
                EventType::RunCompleted | EventType::RunFailed => {
                    recorded.end = true;
                }
                EventType::RunCommitted => {
                    if let EventPayload::RunCommitted(committed) = &event.payload {
                        recorded.committed = Some(committed.commit.clone());
                    }
                }
                _ => {}
            }
        }
        Ok(recorded)
    }
}
