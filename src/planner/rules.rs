//! The `rules` planner: a deterministic planner derivation from structured evidence, the offline
//! default. It proposes a base status from the validation outcome and the transcript/diff
//! consistency, then the guard raises it where the evidence demands.

use super::guard::{Facts, guard};
use super::{Decision, FixInstructions, PlannerInput, Status, Verification};

/// Decides from a planner envelope.
pub fn decide(input: &PlannerInput) -> Decision {
    let facts = Facts::from_input(input);
    let decision = base(&facts);
    // The transcript/workspace contradiction is the guard's: every backend gets it.
    // `next_step` stays empty: the EVALUATE step fills in the target its routes give the status.
    guard(decision, &facts)
}

fn base(facts: &Facts) -> Decision {
    let outcome = facts.mechanical_outcome.as_str();
    if outcome.starts_with("killed_") {
        let mut decision = Decision::status(Status::Blocked);
        decision.raise(
            Status::Blocked,
            outcome,
            format!("the last step ended {outcome}"),
        );
        return decision;
    }
    if outcome != "completed" || facts.validator_failed || facts.report_passed == Some(false) {
        let mut decision = Decision::status(Status::Partial);
        decision.fix_instructions = Some(FixInstructions {
            objective: "make the failing checks pass".into(),
            constraints: vec![
                "keep the change within the policy".into(),
                "do not weaken or delete tests".into(),
            ],
            edits: Vec::new(),
            verification: vec![Verification {
                command: "tnh test".into(),
                expected_signal: "exit 0".into(),
            }],
        });
        return decision;
    }
    Decision::status(Status::Success)
}
