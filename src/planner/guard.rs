//! The guard: deterministic checks of the evidence applied to every
//! backend's decision. It raises statuses and adds the canonical risk flags; it never lowers.

mod facts;

pub use facts::Facts;

use super::{Decision, Status};

/// The words that claim the work is finished.
const CLAIM_WORDS: [&str; 5] = ["implemented", "done", "completed", "finished", "fixed"];

/// Words that negate a claim word following them closely: "not done", "cannot be done",
/// "nothing was fixed", "unable to get it finished". Any word ending in `n't` ("didn't",
/// "couldn't", "isn't") negates too.
const NEGATIONS: [&str; 8] = [
    "not", "no", "never", "cannot", "nothing", "unable", "neither", "nor",
];

/// How many words before a claim word a negation reaches ("unable to get it completed": four).
const NEGATION_REACH: usize = 4;

/// Whether an agent's final response claims the work is finished: one of [`CLAIM_WORDS`] as
/// a whole word (so "abandoned" is no "done", "unfinished" no "finished"), not negated by one
/// of [`NEGATIONS`] among the [`NEGATION_REACH`] words before it in the same clause (clauses
/// end at `.`, `,`, `;`, `:`, `!`, `?` and line breaks). Deliberately simple: one negated
/// claim word does not hide another that is not ("not all done, but the parser is fixed"
/// claims).
pub fn claims_completion(text: &str) -> bool {
    let lowered = text.to_lowercase();
    lowered
        .split(['.', ',', ';', ':', '!', '?', '\n'])
        .any(|clause| {
            let words: Vec<&str> = clause
                .split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '\u{2019}'))
                .filter(|word| !word.is_empty())
                .collect();
            words.iter().enumerate().any(|(at, word)| {
                CLAIM_WORDS.contains(word)
                    && !words[at.saturating_sub(NEGATION_REACH)..at]
                        .iter()
                        .any(|before| negates(before))
            })
        })
}

fn negates(word: &str) -> bool {
    NEGATIONS.contains(&word) || word.ends_with("n't") || word.ends_with("n\u{2019}t")
}

/// The guard rules, in the order they apply: a rule sees the status the ones before it left.
const RULES: [fn(&mut Decision, &Facts); 10] = [
    no_success_without_checks,
    no_new_evidence_floor,
    completion_without_changes,
    policy_violation,
    report_execution_mismatch,
    repeated_contradiction,
    proposed_goldens,
    repeated_partial_loop,
    missing_artifact,
    repeated_blocker,
];

/// Applies every guard rule to a decision.
pub fn guard(mut decision: Decision, facts: &Facts) -> Decision {
    for rule in RULES {
        rule(&mut decision, facts);
    }
    decision
}

/// `success` only when every required check is satisfied. A step killed by its timeout (or
/// idle timeout, or an interactive prompt) is never a success, whatever a backend answers; nor
/// is a failed step, validator or harness report.
fn no_success_without_checks(decision: &mut Decision, facts: &Facts) {
    if decision.status != Status::Success {
        return;
    }
    let outcome = facts.mechanical_outcome.as_str();
    if outcome.starts_with("killed_") {
        decision.raise(
            Status::Blocked,
            outcome,
            format!("the last step ended {outcome}: not a success whatever the planner says"),
        );
    } else if !matches!(outcome, "completed" | "")
        || facts.validator_failed
        || facts.report_passed == Some(false)
    {
        decision.raise(
            Status::Partial,
            "checks_failed",
            format!(
                "a step or check failed (outcome {outcome}): not a success whatever the planner says"
            ),
        );
    }
}

/// An evaluation with no agent or validation step since the previous one (a gate or a
/// rollback between them shows nothing about the work) has no new evidence: it cannot
/// launder that decision (a killed step's `blocked`, say) into a better status.
fn no_new_evidence_floor(decision: &mut Decision, facts: &Facts) {
    if let Some((floor, why)) = &facts.no_new_evidence
        && decision.status < *floor
    {
        decision.raise(*floor, "no_new_evidence", why.clone());
    }
}

/// A claim of finished work with an empty diff, when changes were expected. A failed or
/// killed step hides nothing: it is reported as such (`partial`, `blocked`), and what it said
/// before it stopped is no claim about finished work.
fn completion_without_changes(decision: &mut Decision, facts: &Facts) {
    if facts.claims_done
        && facts.empty_diff
        && facts.expects_changes
        && facts.mechanical_outcome != "error"
        && !facts.mechanical_outcome.starts_with("killed_")
    {
        decision.raise(
            Status::Partial,
            "transcript_workspace_mismatch",
            "the agent reports completion but the diff is empty".into(),
        );
    }
}

/// Any policy event makes the decision `unsafe`.
fn policy_violation(decision: &mut Decision, facts: &Facts) {
    if let Some(event) = facts.policy_events.first() {
        decision.raise(Status::Unsafe, "policy_violation", event.clone());
    }
}

/// A harness report that passes while a validator failed hides a failure.
fn report_execution_mismatch(decision: &mut Decision, facts: &Facts) {
    if facts.report_passed == Some(true) && facts.validator_failed {
        decision.raise(
            Status::Unsafe,
            "report_execution_mismatch",
            "the harness report says pass while a validator failed".into(),
        );
    }
}

/// A contradiction after an earlier one.
fn repeated_contradiction(decision: &mut Decision, facts: &Facts) {
    let contradiction = decision
        .risk_flags
        .iter()
        .any(|flag| flag.contains("mismatch"));
    if contradiction && facts.previous_contradiction {
        decision.raise(
            Status::Unsafe,
            "repeated_contradiction",
            "a contradiction after an earlier one".into(),
        );
    }
}

/// Proposed goldens wait for a human.
fn proposed_goldens(decision: &mut Decision, facts: &Facts) {
    if facts.proposed_goldens {
        decision.raise(
            Status::NeedsHuman,
            "proposed_goldens_present",
            "the harness proposes golden updates; a human approves them".into(),
        );
    }
}

/// A third `partial` in a row goes to a human.
fn repeated_partial_loop(decision: &mut Decision, facts: &Facts) {
    let partial_run = facts
        .previous_statuses
        .iter()
        .rev()
        .take(2)
        .filter(|status| *status == "partial")
        .count();
    if decision.status == Status::Partial && partial_run >= 2 {
        decision.raise(
            Status::NeedsHuman,
            "repeated_partial_loop",
            "three partial evaluations in a row".into(),
        );
    }
}

/// Declared artifacts that are missing block.
fn missing_artifact(decision: &mut Decision, facts: &Facts) {
    if !facts.missing_artifacts.is_empty() && decision.status < Status::Blocked {
        decision.raise(
            Status::Blocked,
            "missing_artifact",
            format!(
                "declared artifacts missing: {}",
                facts.missing_artifacts.join(", ")
            ),
        );
    }
}

/// A blocker raised again on an unchanged worktree goes to a human.
fn repeated_blocker(decision: &mut Decision, facts: &Facts) {
    let repeated = decision
        .blockers
        .iter()
        .map(|blocker| blocker.code.clone())
        .find(|code| facts.unchanged_blocker_codes.contains(code))
        .filter(|_| decision.status < Status::Unsafe);
    if let Some(code) = repeated {
        decision.raise(
            Status::NeedsHuman,
            "repeated_blocker",
            format!(
                "blocker `{code}` again, with no change to the worktree since it was first raised"
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An envelope as the guard reads it.
    fn input(envelope: &serde_json::Value) -> crate::planner::PlannerInput {
        crate::planner::PlannerInput::read(envelope)
    }

    #[test]
    fn the_guard_raises_but_never_lowers() {
        let facts = Facts {
            proposed_goldens: true,
            ..Facts::default()
        };
        let raised = guard(Decision::status(Status::Success), &facts);
        assert_eq!(raised.status, Status::NeedsHuman);
        assert_eq!(raised.risk_flags, ["proposed_goldens_present"]);
        let kept = guard(Decision::status(Status::Unsafe), &facts);
        assert_eq!(kept.status, Status::Unsafe, "goldens do not lower unsafe");
        let calm = guard(Decision::status(Status::Blocked), &Facts::default());
        assert_eq!(
            guard(Decision::status(Status::Success), &Facts::default()),
            Decision::status(Status::Success)
        );
        assert_eq!(
            calm,
            Decision::status(Status::Blocked),
            "no facts, no change"
        );
    }

    #[test]
    fn a_killed_or_failed_step_is_never_a_success_whatever_the_backend_says() {
        for (outcome, validator_failed, report_passed, status, flag) in [
            (
                "killed_timeout",
                false,
                None,
                Status::Blocked,
                "killed_timeout",
            ),
            (
                "killed_idle",
                false,
                Some(true),
                Status::Blocked,
                "killed_idle",
            ),
            (
                "killed_policy",
                false,
                None,
                Status::Blocked,
                "killed_policy",
            ),
            ("error", false, None, Status::Partial, "checks_failed"),
            ("completed", true, None, Status::Partial, "checks_failed"),
            (
                "completed",
                false,
                Some(false),
                Status::Partial,
                "checks_failed",
            ),
        ] {
            let facts = Facts {
                mechanical_outcome: outcome.to_owned(),
                validator_failed,
                report_passed,
                ..Facts::default()
            };
            let raised = guard(Decision::status(Status::Success), &facts);
            assert_eq!(raised.status, status, "{outcome}");
            assert!(raised.risk_flags.contains(&flag.to_owned()), "{outcome}");
            // A bounded answer short of success stands.
            let partial = guard(Decision::status(Status::Partial), &facts);
            assert_eq!(partial.status, Status::Partial, "{outcome}");
        }
        let clean = Facts {
            mechanical_outcome: "completed".to_owned(),
            report_passed: Some(true),
            ..Facts::default()
        };
        assert_eq!(
            guard(Decision::status(Status::Success), &clean).status,
            Status::Success
        );
    }

    /// The completion check was a substring match, so an honest "this cannot
    /// be done", "not implemented" or "abandoned" counted as a claim of finished work, and a
    /// retry with the same honest answer became `unsafe`.
    #[test]
    fn completion_claims_are_whole_words_not_negated() {
        let claims = [
            "Done: implemented the change and all tests pass.",
            "I fixed the parser.",
            "The feature is implemented",
            "Finished!",
            "All tasks completed; see the diff.",
            "Not all of it, but the parser is fixed.",
            "It's done.",
            "Implemented the retry loop as asked",
        ];
        let non_claims = [
            "I have not changed anything: the README is generated, so this cannot be done by editing it.",
            "Not done yet.",
            "The change was abandoned.",
            "This is not implemented.",
            "Tests not completed.",
            "I couldn't get it finished.",
            "I didn\u{2019}t finish: nothing was fixed.",
            "The work remains unfinished.",
            "Unable to get it completed",
            "It could not be completed in time",
            "I never implemented it",
            "No changes; the issue cannot be fixed here.",
            "",
        ];
        for text in claims {
            assert!(claims_completion(text), "a claim: {text:?}");
        }
        for text in non_claims {
            assert!(!claims_completion(text), "no claim: {text:?}");
        }
        // Read from the envelope the same way: the review's honest refusal is no contradiction.
        let envelope = serde_json::json!({"evidence": {
            "transcript_summary": non_claims[0],
            "workspace_diff_summary": "",
            "validation": {"mechanical_outcome": "completed"},
        }});
        let facts = Facts::from_input(&input(&envelope));
        assert!(!facts.claims_done && facts.empty_diff);
        assert!(
            !crate::planner::rules::decide(&input(&envelope))
                .risk_flags
                .contains(&"transcript_workspace_mismatch".to_owned())
        );
    }

    /// A killed step's words (Codex's mid-turn "Done: …") were taken for a
    /// completion claim against the empty diff, and with an earlier contradiction the retry
    /// became `unsafe`. A killed step stays `blocked` with its outcome as flag.
    #[test]
    fn a_killed_step_that_said_done_is_blocked_not_a_contradiction() {
        let facts = Facts {
            mechanical_outcome: "killed_idle".to_owned(),
            claims_done: true,
            empty_diff: true,
            expects_changes: true,
            previous_contradiction: true,
            ..Facts::default()
        };
        let decided = guard(Decision::status(Status::Blocked), &facts);
        assert_eq!(decided.status, Status::Blocked);
        assert!(decided.risk_flags.is_empty(), "{:?}", decided.risk_flags);
        let completed = Facts {
            mechanical_outcome: "completed".to_owned(),
            ..facts
        };
        assert_eq!(
            guard(Decision::status(Status::Success), &completed).status,
            Status::Unsafe,
            "a step that ended by itself and claims done with an empty diff still contradicts"
        );
    }

    #[test]
    fn an_evaluation_without_a_step_since_the_previous_one_keeps_its_status() {
        let envelope = serde_json::json!({
            "steps": [],
            "evaluation_history": [{"step_id": "judge", "visit": 1, "status": "blocked",
                "blocker_codes": ["killed_timeout"], "risk_flags": ["killed_timeout"]}],
            "evidence": {"validation": {"mechanical_outcome": "completed"}},
        });
        let facts = Facts::from_input(&input(&envelope));
        let raised = guard(Decision::status(Status::Success), &facts);
        assert_eq!(raised.status, Status::Blocked);
        assert_eq!(raised.risk_flags, ["no_new_evidence"]);
        assert!(
            raised.blockers[0]
                .summary
                .contains("`judge` #1 decided `blocked`")
        );
        assert_eq!(
            crate::planner::rules::decide(&input(&envelope)).status,
            Status::Blocked,
            "the rules planner too"
        );
        // A step since, or no earlier evaluation: no floor.
        let mut stepped = envelope.clone();
        stepped["steps"] =
            serde_json::json!([{"step_id": "fix", "opcode": "RUN_AGENT", "outcome": "completed"}]);
        assert_eq!(Facts::from_input(&input(&stepped)).no_new_evidence, None);
        let mut first = envelope;
        first["evaluation_history"] = serde_json::json!([]);
        assert_eq!(Facts::from_input(&input(&first)).no_new_evidence, None);
    }

    /// A gate (its decision is no evidence about the work) or a rollback
    /// between two evaluations let the second one decide `success` after a killed step.
    #[test]
    fn a_gate_or_a_rollback_since_the_previous_evaluation_is_no_new_evidence() {
        let envelope = |steps: serde_json::Value, previous: &str| {
            serde_json::json!({
                "steps": steps,
                "evaluation_history": [{"step_id": "judge", "visit": 1, "status": previous}],
                "evidence": {"validation": {"mechanical_outcome": "completed"}},
            })
        };
        let gate =
            serde_json::json!({"step_id": "note", "opcode": "GATE", "outcome": "gate_queued"});
        let undo =
            serde_json::json!({"step_id": "undo", "opcode": "ROLLBACK", "outcome": "completed"});
        let agent =
            serde_json::json!({"step_id": "fix", "opcode": "RUN_AGENT", "outcome": "completed"});
        let check = serde_json::json!({"step_id": "check", "opcode": "RUN_VALIDATION", "outcome": "completed"});
        for (steps, previous, floor) in [
            // A gate carries the previous status over, whatever it was.
            (vec![gate.clone()], "blocked", Some(Status::Blocked)),
            (
                vec![gate.clone(), gate.clone()],
                "needs_human",
                Some(Status::NeedsHuman),
            ),
            (vec![gate.clone()], "success", Some(Status::Success)),
            // A rollback with nothing run since: never a success, at most the previous
            // `blocked` (an `unsafe` change it removed is gone; one it left is a policy event).
            (vec![undo.clone()], "blocked", Some(Status::Blocked)),
            (
                vec![gate.clone(), undo.clone()],
                "unsafe",
                Some(Status::Blocked),
            ),
            (vec![undo.clone()], "needs_human", Some(Status::Blocked)),
            (vec![undo.clone()], "partial", Some(Status::Partial)),
            (vec![undo.clone()], "success", Some(Status::Partial)),
            // Work rolled back within the steps since: what it showed is gone.
            (
                vec![agent.clone(), undo.clone()],
                "blocked",
                Some(Status::Blocked),
            ),
            // New evidence: an agent or a validation step ran (after any rollback).
            (vec![gate.clone(), agent.clone()], "blocked", None),
            (vec![undo.clone(), agent.clone()], "blocked", None),
            (
                vec![undo.clone(), check.clone(), gate.clone()],
                "unsafe",
                None,
            ),
        ] {
            let facts = Facts::from_input(&input(&envelope(serde_json::json!(steps), previous)));
            assert_eq!(
                facts.no_new_evidence.as_ref().map(|(floor, _)| *floor),
                floor,
                "{steps:?} after {previous}"
            );
            let decided = guard(Decision::status(Status::Success), &facts);
            match floor {
                Some(floor) => {
                    assert_eq!(decided.status, floor, "{steps:?} after {previous}");
                    if floor > Status::Success {
                        assert_eq!(decided.risk_flags, ["no_new_evidence"]);
                    }
                }
                None => assert_eq!(decided.status, Status::Success, "{steps:?}"),
            }
        }
        // The rules planner decides the same; the summary says what happened.
        let rolled_back = envelope(serde_json::json!([gate, undo]), "blocked");
        let decided = crate::planner::rules::decide(&input(&rolled_back));
        assert_eq!(decided.status, Status::Blocked);
        assert!(
            decided.blockers[0].summary.contains(
                "`undo` rolled the work back and no agent or validation step ran since (`judge` #1 decided `blocked`)"
            ),
            "{:?}",
            decided.blockers
        );
        // A rollback and no earlier evaluation: nothing shows a success.
        let first = serde_json::json!({
            "steps": [agent, {"step_id": "undo", "opcode": "ROLLBACK", "outcome": "completed"}],
            "evidence": {"validation": {"mechanical_outcome": "completed"}},
        });
        assert_eq!(
            crate::planner::rules::decide(&input(&first)).status,
            Status::Partial
        );
        // A gate and no earlier evaluation, or no `steps` at all (a hand-written vector): no floor.
        let no_history = serde_json::json!({"steps": [{"step_id": "note", "opcode": "GATE"}]});
        assert_eq!(Facts::from_input(&input(&no_history)).no_new_evidence, None);
        let vector = serde_json::json!({"evaluation_history": [{"status": "blocked"}]});
        assert_eq!(Facts::from_input(&input(&vector)).no_new_evidence, None);
    }

    /// "10 files changed" contains "0 files changed": the diff text was
    /// searched, so a change of 10, 20, 100… files read as an empty diff.
    #[test]
    fn the_diff_is_empty_only_when_nothing_changed() {
        for (text, empty) in [
            ("", true),
            ("  ", true),
            ("no changes", true),
            ("No changes", true),
            ("0 files changed, +0 -0", true),
            ("0 files changed", true),
            ("1 file changed, +1 -0", false),
            ("10 files changed, +10 -0", false),
            ("20 files changed, +3 -0", false),
            ("100 files changed, +0 -100", false),
            ("3000 files changed, +3000 -0 (2 binary)", false),
            ("2 files changed, no changes to tests", false),
        ] {
            let envelope = serde_json::json!({"evidence": {"workspace_diff_summary": text}});
            assert_eq!(
                Facts::from_input(&input(&envelope)).empty_diff,
                empty,
                "{text:?}"
            );
        }
        // The structured diffstat wins over the text.
        for (files, text, empty) in [
            (10, "no changes", false),
            (0, "10 files changed, +10 -0", true),
        ] {
            let envelope = serde_json::json!({"evidence": {
                "workspace_diff_summary": text,
                "workspace_diffstat": {"files_changed": files, "insertions": 0, "deletions": 0, "binary_files": 0},
            }});
            assert_eq!(
                Facts::from_input(&input(&envelope)).empty_diff,
                empty,
                "{files} {text:?}"
            );
        }
        // Ten changed files and "done": no contradiction, whatever the planner says.
        let ten = serde_json::json!({"evidence": {
            "transcript_summary": "done",
            "workspace_diff_summary": "10 files changed, +10 -0",
            "validation": {"mechanical_outcome": "completed"},
        }});
        assert_eq!(
            crate::planner::rules::decide(&input(&ten)),
            Decision::status(Status::Success)
        );
    }

    /// The missing artifacts the kernel now puts in the envelope block,
    /// with the rules planner and over a `success` answer alike.
    #[test]
    fn a_missing_declared_artifact_blocks_and_is_named() {
        let envelope = serde_json::json!({"evidence": {
            "transcript_summary": "done",
            "workspace_diff_summary": "1 file changed, +1 -0",
            "validation": {
                "mechanical_outcome": "error",
                "exit_codes": {"tests": 0},
                "timeouts": [],
                "missing_artifacts": ["report/out.xml"],
                "causes": {"tests": "declared artifacts missing: report/out.xml"},
            },
        }});
        let facts = Facts::from_input(&input(&envelope));
        assert_eq!(facts.missing_artifacts, ["report/out.xml"]);
        for decided in [
            crate::planner::rules::decide(&input(&envelope)),
            guard(Decision::status(Status::Success), &facts),
        ] {
            assert_eq!(decided.status, Status::Blocked);
            assert!(decided.risk_flags.contains(&"missing_artifact".to_owned()));
            let blocker = decided
                .blockers
                .iter()
                .find(|blocker| blocker.code == "missing_artifact")
                .unwrap();
            assert_eq!(
                blocker.summary,
                "declared artifacts missing: report/out.xml"
            );
        }
    }
}
