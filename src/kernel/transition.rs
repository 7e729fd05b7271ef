//! The kernel as a pure function: (state, what happened) → (next state, what to record).
//! No I/O and no clock: the driver performs and records; routing is `routes[outcome]` only.

use super::state::{End, Phase, RunState};
use crate::outcome::Outcome;
use crate::workflow::decode_step::step_limits;
use crate::workflow::model::{Limits, StepBody, StopOutcome, Workflow};

/// Why the kernel refuses to go on (the run ends with a recorded runtime error, exit 4).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    /// No route for the outcome (and no `*`).
    #[error("step `{step_id}` produced `{outcome}`, which has no route")]
    Unroutable {
        /// The step.
        step_id: String,
        /// The outcome.
        outcome: Outcome,
    },
    /// A step would be visited more than `max_visits` times.
    #[error("step `{step_id}` reached its limit of {limit} visits")]
    MaxVisits {
        /// The step.
        step_id: String,
        /// The limit.
        limit: u32,
    },
    /// The run would take more than `max_transitions` routes.
    #[error("the run reached its limit of {limit} transitions at step `{step_id}`")]
    MaxTransitions {
        /// The step routing.
        step_id: String,
        /// The limit.
        limit: u32,
    },
    /// A route names a step that does not exist (the workflow changed since validation).
    #[error("step `{step_id}` routes to `{target}`, which is not a step")]
    UnknownStep {
        /// The step.
        step_id: String,
        /// The target.
        target: String,
    },
    /// A success STOP was reached while proposed goldens await an approved gate.
    #[error(
        "goldens proposed by step `{reported_by}` need an approved blocking GATE before the run can succeed"
    )]
    GoldensUnapproved {
        /// The step whose harness report proposed them.
        reported_by: String,
    },
    /// The phase does not allow this (a driver bug or a damaged state.json).
    #[error("the run is {phase}, not {expected}")]
    WrongPhase {
        /// The phase found.
        phase: String,
        /// The phase needed.
        expected: &'static str,
    },
}

/// What a finished step visit tells the kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct StepReport {
    /// The outcome or planner status that routes.
    pub outcome: Outcome,
    /// A policy violation found in the step's diff, described.
    pub policy_violation: Option<String>,
    /// The step's harness report proposed goldens.
    pub proposed_goldens: bool,
    /// For a STOP step: why the run ends (its `reason`, or what led to it), for the run's
    /// end record.
    pub stop_reason: Option<String>,
}

impl StepReport {
    /// A plain outcome with no safety facts.
    pub fn outcome(outcome: Outcome) -> Self {
        Self {
            outcome,
            policy_violation: None,
            proposed_goldens: false,
            stop_reason: None,
        }
    }
}

/// Where a transition leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Start this visit of this step.
    Step {
        /// The step.
        step_id: String,
        /// Its visit.
        visit: u32,
    },
    /// The run ended.
    End {
        /// How.
        end: End,
        /// Why.
        reason: String,
    },
}

/// The result of a transition.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// The new state.
    pub state: RunState,
    /// The route key used (`None` when a STOP step or an error ended the run).
    pub outcome: Outcome,
    /// Where the run goes.
    pub next: Next,
}

fn limits_for<'w>(workflow: &'w Workflow, step_id: &str) -> (Option<&'w Limits>, &'w Limits) {
    let step = workflow
        .step(step_id)
        .and_then(|step| step_limits(&step.body));
    (step, &workflow.defaults.limits)
}

/// The `max_visits` of a step: its own, else the default, else 10.
pub fn max_visits(workflow: &Workflow, step_id: &str) -> u32 {
    let (step, defaults) = limits_for(workflow, step_id);
    step.and_then(|limits| limits.max_visits.as_ref())
        .or(defaults.max_visits.as_ref())
        .map_or(Limits::DEFAULT_MAX_VISITS, |limit| limit.value)
}

/// The run's `max_transitions`.
pub fn max_transitions(workflow: &Workflow) -> u32 {
    workflow
        .defaults
        .limits
        .max_transitions
        .as_ref()
        .map_or(Limits::DEFAULT_MAX_TRANSITIONS, |limit| limit.value)
}

/// Ready → Running: the visit starts. Refuses a visit beyond `max_visits`; visits that never
/// finished (interrupted, or unable to start) keep their numbers but are not counted.
pub fn start_step(workflow: &Workflow, state: &RunState) -> Result<RunState, KernelError> {
    let Phase::Ready { step_id, visit } = &state.phase else {
        return Err(wrong_phase(state, "ready"));
    };
    let limit = max_visits(workflow, step_id);
    if visit.saturating_sub(state.interrupted_visits_of(step_id)) > limit {
        return Err(KernelError::MaxVisits {
            step_id: step_id.clone(),
            limit,
        });
    }
    let mut next = state.clone();
    next.visits.insert(step_id.clone(), *visit);
    next.phase = Phase::Running {
        step_id: step_id.clone(),
        visit: *visit,
    };
    Ok(next)
}

/// Running → the next step or the end, by `routes[outcome]`.
pub fn complete_step(
    workflow: &Workflow,
    state: &RunState,
    report: &StepReport,
) -> Result<Transition, KernelError> {
    let step_id = match &state.phase {
        Phase::Running { step_id, .. } | Phase::Waiting { step_id, .. } => step_id.clone(),
        _ => return Err(wrong_phase(state, "running")),
    };
    let step = workflow
        .step(&step_id)
        .ok_or_else(|| KernelError::UnknownStep {
            step_id: step_id.clone(),
            target: step_id.clone(),
        })?;
    let mut next = state.clone();
    next.last_outcomes
        .insert(step_id.clone(), report.outcome.as_str().to_owned());
    apply_safety(&mut next, &step.body, &step_id, report);
    if let StepBody::Stop(stop) = &step.body {
        let end = match stop.outcome {
            StopOutcome::Success => End::Success,
            StopOutcome::Failure => End::Failure,
        };
        return finish(
            next,
            &step_id,
            end,
            match &report.stop_reason {
                Some(why) => format!("reached STOP step `{step_id}`: {why}"),
                None => format!("reached STOP step `{step_id}`"),
            },
            report.outcome,
        );
    }
    let target = step
        .routes
        .target(report.outcome)
        .ok_or_else(|| KernelError::Unroutable {
            step_id: step_id.clone(),
            outcome: report.outcome,
        })?;
    let limit = max_transitions(workflow);
    if next.transitions >= limit {
        return Err(KernelError::MaxTransitions { step_id, limit });
    }
    next.transitions += 1;
    let target = target.value.as_str();
    if target == "STOP" && workflow.step("STOP").is_none() {
        let end = if report.outcome.is_success_for_bare_stop() {
            End::Success
        } else {
            End::Failure
        };
        let reason = format!("step `{step_id}` routed `{}` to STOP", report.outcome);
        return finish(next, &step_id, end, reason, report.outcome);
    }
    if workflow.step(target).is_none() {
        return Err(KernelError::UnknownStep {
            step_id,
            target: target.to_owned(),
        });
    }
    let visit = next.visits_of(target) + 1;
    next.phase = Phase::Ready {
        step_id: target.to_owned(),
        visit,
    };
    Ok(Transition {
        state: next,
        outcome: report.outcome,
        next: Next::Step {
            step_id: target.to_owned(),
            visit,
        },
    })
}

/// Running → Waiting: a blocking gate waits for a human.
pub fn wait_at_gate(state: &RunState) -> Result<RunState, KernelError> {
    let Phase::Running { step_id, visit } = &state.phase else {
        return Err(wrong_phase(state, "running"));
    };
    let mut next = state.clone();
    next.phase = Phase::Waiting {
        step_id: step_id.clone(),
        visit: *visit,
    };
    Ok(next)
}

/// Any phase → Finished with a runtime error.
pub fn fail(state: &RunState, error: &KernelError) -> RunState {
    let step_id = match &state.phase {
        Phase::Ready { step_id, .. }
        | Phase::Running { step_id, .. }
        | Phase::Waiting { step_id, .. }
        | Phase::Finished { step_id, .. } => step_id.clone(),
    };
    let mut next = state.clone();
    next.phase = Phase::Finished {
        end: End::Error,
        step_id,
        reason: error.to_string(),
    };
    next
}

fn finish(
    mut state: RunState,
    step_id: &str,
    end: End,
    reason: String,
    outcome: Outcome,
) -> Result<Transition, KernelError> {
    if end == End::Success
        && let Some(reported_by) = &state.safety.goldens_pending
    {
        return Err(KernelError::GoldensUnapproved {
            reported_by: reported_by.clone(),
        });
    }
    // A change that broke the policy and was never rolled back
    // cannot end in success, even on a route that asked no planner.
    let (end, reason) = match (&state.safety.policy_violation, end) {
        (Some(violation), End::Success) => (
            End::Failure,
            format!("{reason}; but the policy violation of {violation} was never rolled back"),
        ),
        _ => (end, reason),
    };
    state.phase = Phase::Finished {
        end,
        step_id: step_id.to_owned(),
        reason: reason.clone(),
    };
    Ok(Transition {
        state,
        outcome,
        next: Next::End { end, reason },
    })
}

/// Violations stick until a ROLLBACK completes; proposed goldens
/// stick until a blocking gate is approved.
fn apply_safety(state: &mut RunState, body: &StepBody, step_id: &str, report: &StepReport) {
    let pending = state.safety.policy_violation.is_some();
    // An agent step takes a new pre-step snapshot before it runs: a violation pending from
    // before it is no longer undone by a `pre_step` rollback.
    if pending && matches!(body, StepBody::RunAgent(_)) {
        state.safety.pre_step_undoes_violation = false;
    }
    if let Some(violation) = &report.policy_violation {
        state.safety.policy_violation = Some(format!("{step_id}: {violation}"));
        if !pending {
            state.safety.pre_step_undoes_violation = true;
        }
    }
    if report.proposed_goldens {
        state.safety.goldens_pending = Some(step_id.to_owned());
    }
    match body {
        StepBody::Rollback(rollback) if report.outcome == Outcome::Completed => {
            let undone = match rollback.target.value {
                crate::workflow::model::RollbackTarget::PreRun => true,
                crate::workflow::model::RollbackTarget::PreStep => {
                    state.safety.pre_step_undoes_violation
                }
            };
            if undone {
                state.safety.policy_violation = None;
            }
        }
        StepBody::Gate(gate)
            if gate.gate.value.is_blocking() && report.outcome == Outcome::GateApproved =>
        {
            state.safety.goldens_pending = None;
        }
        _ => {}
    }
}

fn wrong_phase(state: &RunState, expected: &'static str) -> KernelError {
    let phase = match &state.phase {
        Phase::Ready { .. } => "ready",
        Phase::Running { .. } => "running",
        Phase::Waiting { .. } => "waiting",
        Phase::Finished { .. } => "finished",
    };
    KernelError::WrongPhase {
        phase: phase.to_owned(),
        expected,
    }
}
