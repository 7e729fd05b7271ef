//! Table tests of the pure transition function.

use super::*;
use crate::document::diagnostic::Diagnostics;
use crate::outcome::Outcome;
use crate::workflow::load::check_bytes;
use crate::workflow::model::Workflow;
use crate::workflow::validate::KnownNames;

const LOOP: &str = r#"
workflow_id: loop
version: 1
description: a fix loop
entry_step: implement
defaults:
  limits: {max_visits: 3, max_transitions: 50}
steps:
  - id: implement
    opcode: RUN_AGENT
    agent: codex
    prompt: Do it.
    routes:
      completed: validate
      error: undo
      killed_timeout: STOP
      killed_idle: STOP
      killed_policy: failed
  - id: validate
    opcode: RUN_VALIDATION
    run: [tests]
    routes:
      completed: review
      "*": implement
  - id: review
    opcode: GATE
    gate: requires_approval
    routes:
      gate_approved: STOP
      gate_rejected: failed
  - id: undo
    opcode: ROLLBACK
    target: pre_run
    routes:
      completed: failed
      error: failed
  - id: failed
    opcode: STOP
    outcome: failure
"#;

fn workflow(text: &str) -> Workflow {
    let mut diagnostics = Diagnostics::new("loop.yaml");
    let workflow = check_bytes(text.as_bytes(), &KnownNames::default(), &mut diagnostics).unwrap();
    assert!(!diagnostics.has_errors(), "{:?}", diagnostics.into_sorted());
    workflow
}

/// Runs one visit: start, then complete with the report.
fn step(
    workflow: &Workflow,
    state: &RunState,
    report: StepReport,
) -> Result<Transition, KernelError> {
    complete_step(workflow, &start_step(workflow, state)?, &report)
}

fn plain(outcome: Outcome) -> StepReport {
    StepReport::outcome(outcome)
}

#[test]
fn routes_follow_outcomes_and_count_visits() {
    let workflow = workflow(LOOP);
    let state = RunState::new("r", "loop", "implement");
    let first = step(&workflow, &state, plain(Outcome::Completed)).unwrap();
    assert_eq!(
        first.next,
        Next::Step {
            step_id: "validate".into(),
            visit: 1
        }
    );
    let back = step(&workflow, &first.state, plain(Outcome::Error)).unwrap();
    assert_eq!(
        back.next,
        Next::Step {
            step_id: "implement".into(),
            visit: 2
        },
        "`*` routes error back"
    );
    assert_eq!(back.state.transitions, 2);
    assert_eq!(back.state.last_outcomes["validate"], "error");
}

#[test]
fn a_bare_stop_succeeds_only_through_success_outcomes() {
    let workflow = workflow(LOOP);
    let state = RunState::new("r", "loop", "implement");
    let timed_out = step(&workflow, &state, plain(Outcome::KilledTimeout)).unwrap();
    assert!(
        matches!(
            timed_out.next,
            Next::End {
                end: End::Failure,
                ..
            }
        ),
        "a timeout is never a success"
    );
    let mut at_review = RunState::new("r", "loop", "review");
    at_review.visits.insert("implement".into(), 1);
    let approved = step(&workflow, &at_review, plain(Outcome::GateApproved)).unwrap();
    assert!(matches!(
        approved.next,
        Next::End {
            end: End::Success,
            ..
        }
    ));
    assert!(matches!(
        approved.state.phase,
        Phase::Finished {
            end: End::Success,
            ..
        }
    ));
}

#[test]
fn a_stop_step_ends_with_its_declared_outcome() {
    let workflow = workflow(LOOP);
    let state = RunState::new("r", "loop", "failed");
    let ended = step(&workflow, &state, plain(Outcome::Completed)).unwrap();
    assert!(matches!(
        ended.next,
        Next::End {
            end: End::Failure,
            ..
        }
    ));
}

#[test]
fn max_visits_ends_a_runaway_loop_naming_the_step() {
    let workflow = workflow(LOOP);
    let mut state = RunState::new("r", "loop", "implement");
    let mut error = None;
    for _ in 0..10 {
        match step(&workflow, &state, plain(Outcome::Completed))
            .and_then(|next| step(&workflow, &next.state, plain(Outcome::Error)))
        {
            Ok(next) => state = next.state,
            Err(failure) => {
                error = Some(failure);
                break;
            }
        }
    }
    assert_eq!(
        error,
        Some(KernelError::MaxVisits {
            step_id: "implement".into(),
            limit: 3
        })
    );
    let failed = fail(&state, error.as_ref().unwrap());
    assert!(
        matches!(&failed.phase, Phase::Finished { end: End::Error, reason, .. } if reason.contains("limit of 3 visits"))
    );
}

/// A visit that never finished (interrupted, or unable to start) keeps its number but is not
/// counted against `max_visits`.
#[test]
fn interrupted_visits_do_not_count_toward_max_visits() {
    let workflow = workflow(LOOP);
    let mut state = RunState::new("r", "loop", "implement");
    state.phase = Phase::Ready {
        step_id: "implement".into(),
        visit: 4,
    };
    assert!(matches!(
        start_step(&workflow, &state),
        Err(KernelError::MaxVisits { limit: 3, .. })
    ));
    state.count_interrupted_visit("implement");
    let running = start_step(&workflow, &state).unwrap();
    assert_eq!(
        running.phase,
        Phase::Running {
            step_id: "implement".into(),
            visit: 4
        }
    );
    assert_eq!(running.visits_of("implement"), 4);
    state.phase = Phase::Ready {
        step_id: "implement".into(),
        visit: 5,
    };
    assert!(start_step(&workflow, &state).is_err());
}

#[test]
fn max_transitions_ends_the_run() {
    let text = LOOP.replace(
        "max_visits: 3, max_transitions: 50",
        "max_visits: 100, max_transitions: 5",
    );
    let workflow = workflow(&text);
    let mut state = RunState::new("r", "loop", "implement");
    let mut outcomes = [Outcome::Completed, Outcome::Error].into_iter().cycle();
    let error = loop {
        match step(&workflow, &state, plain(outcomes.next().unwrap())) {
            Ok(next) => state = next.state,
            Err(error) => break error,
        }
    };
    assert!(
        matches!(error, KernelError::MaxTransitions { limit: 5, .. }),
        "{error:?}"
    );
}

#[test]
fn an_unroutable_outcome_is_a_runtime_error() {
    let workflow = workflow(LOOP);
    let state = RunState::new("r", "loop", "implement");
    let error = step(&workflow, &state, plain(Outcome::GateQueued)).unwrap_err();
    assert_eq!(
        error,
        KernelError::Unroutable {
            step_id: "implement".into(),
            outcome: Outcome::GateQueued
        }
    );
}

#[test]
fn a_policy_violation_sticks_until_a_rollback_completes() {
    let workflow = workflow(LOOP);
    let state = RunState::new("r", "loop", "implement");
    let report = StepReport {
        outcome: Outcome::Error,
        policy_violation: Some("forbidden_path .github/x".into()),
        proposed_goldens: false,
        stop_reason: None,
    };
    let violated = step(&workflow, &state, report).unwrap();
    assert_eq!(
        violated.next,
        Next::Step {
            step_id: "undo".into(),
            visit: 1
        }
    );
    assert!(
        violated
            .state
            .safety
            .policy_violation
            .as_deref()
            .unwrap()
            .starts_with("implement: forbidden_path")
    );
    let rolled_back = step(&workflow, &violated.state, plain(Outcome::Completed)).unwrap();
    assert_eq!(rolled_back.state.safety.policy_violation, None);
}

#[test]
fn proposed_goldens_block_success_until_a_blocking_gate_approves() {
    let workflow = workflow(LOOP);
    let state = RunState::new("r", "loop", "validate");
    let report = StepReport {
        outcome: Outcome::Completed,
        policy_violation: None,
        proposed_goldens: true,
        stop_reason: None,
    };
    let at_gate = step(&workflow, &state, report).unwrap();
    assert_eq!(
        at_gate.state.safety.goldens_pending.as_deref(),
        Some("validate")
    );
    // The approval at the blocking gate clears the rule, so the success STOP is allowed.
    let approved = step(&workflow, &at_gate.state, plain(Outcome::GateApproved)).unwrap();
    assert!(matches!(
        approved.next,
        Next::End {
            end: End::Success,
            ..
        }
    ));
    // Without the approval, a route to a success STOP is refused; a failure STOP stays allowed.
    let shortcut = workflow_text_shortcut();
    let mut pending = RunState::new("r", "loop", "validate");
    pending.safety.goldens_pending = Some("validate".into());
    let refused = step(&shortcut, &pending, plain(Outcome::Completed));
    assert_eq!(
        refused,
        Err(KernelError::GoldensUnapproved {
            reported_by: "validate".into()
        })
    );
    let mut at_implement = pending.clone();
    at_implement.phase = Phase::Ready {
        step_id: "implement".into(),
        visit: 1,
    };
    let failure = step(&shortcut, &at_implement, plain(Outcome::KilledTimeout))
        .map(|transition| transition.next);
    assert!(matches!(
        failure,
        Ok(Next::End {
            end: End::Failure,
            ..
        })
    ));
    let mut at_review = pending.clone();
    at_review.phase = Phase::Ready {
        step_id: "review".into(),
        visit: 1,
    };
    let rejected_then_approved = step(&workflow, &at_review, plain(Outcome::GateRejected)).unwrap();
    assert!(
        rejected_then_approved
            .state
            .safety
            .goldens_pending
            .is_some()
    );
}

/// The loop with validation routing straight to a success STOP (no gate on the way).
fn workflow_text_shortcut() -> Workflow {
    workflow(
        &LOOP
            .replace("      completed: review\n", "      completed: STOP\n")
            .replace(
                "  - id: review\n",
                "  - id: review\n    allow_unreachable: true\n",
            ),
    )
}

#[test]
fn phases_are_enforced() {
    let workflow = workflow(LOOP);
    let state = RunState::new("r", "loop", "implement");
    assert!(matches!(
        complete_step(&workflow, &state, &plain(Outcome::Completed)),
        Err(KernelError::WrongPhase { .. })
    ));
    let running = start_step(&workflow, &state).unwrap();
    assert!(matches!(
        start_step(&workflow, &running),
        Err(KernelError::WrongPhase { .. })
    ));
    let waiting = wait_at_gate(&running).unwrap();
    assert!(matches!(waiting.phase, Phase::Waiting { .. }));
}

#[test]
fn state_round_trips_through_json() {
    let workflow = workflow(LOOP);
    let state = step(
        &workflow,
        &RunState::new("r", "loop", "implement"),
        plain(Outcome::Completed),
    )
    .unwrap()
    .state;
    let json = serde_json::to_string(&state).unwrap();
    assert_eq!(serde_json::from_str::<RunState>(&json).unwrap(), state);
    assert!(json.contains("\"phase\":\"ready\""), "{json}");
}
