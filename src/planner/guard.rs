//! The guard (OA06 §4, §5, §7): deterministic checks of the evidence applied to every
//! backend's decision. It raises statuses and adds the canonical risk flags; it never lowers.

use super::{Decision, Status};

/// Evidence facts the guard and the rules planner read from an OA06 envelope.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    /// Policy or safety events from the kernel.
    pub policy_events: Vec<String>,
    /// The harness report proposes goldens.
    pub proposed_goldens: bool,
    /// The harness report says every case passed.
    pub report_passed: Option<bool>,
    /// Some deterministic validator exited non-zero.
    pub validator_failed: bool,
    /// The validation outcome (`completed`, `error`, `killed_timeout`, …).
    pub mechanical_outcome: String,
    /// Declared artifacts that are missing.
    pub missing_artifacts: Vec<String>,
    /// The agent claims it finished the work.
    pub claims_done: bool,
    /// The diff is empty.
    pub empty_diff: bool,
    /// The statuses of the previous evaluations in the window, oldest first.
    pub previous_statuses: Vec<String>,
    /// Earlier windows flagged a contradiction.
    pub previous_contradiction: bool,
    /// Blocker codes of earlier evaluations made on the same worktree (no net diff change
    /// since).
    pub unchanged_blocker_codes: Vec<String>,
    /// No step ran since the previous evaluation (the envelope's `steps` is empty): that
    /// evaluation (`step #visit`) and the status it decided, which this one cannot go below.
    pub no_new_evidence: Option<(String, Status)>,
    /// The step being judged was meant to change code (an EVALUATE input
    /// `expects_changes: false` says it was not, e.g. a plan).
    pub expects_changes: bool,
}

impl Facts {
    /// Reads the facts from an envelope (OA06 §2 fields; project additions are optional).
    pub fn from_envelope(envelope: &serde_json::Value) -> Self {
        let evidence = &envelope["evidence"];
        let strings = |value: &serde_json::Value| -> Vec<String> {
            value
                .as_array()
                .map(|items| {
                    items
                        .iter()
                        .map(|item| {
                            item.as_str()
                                .map_or_else(|| item.to_string(), str::to_owned)
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        let report = &evidence["harness_report"];
        let cases = report["cases"].as_array();
        let report_passed = cases
            .map(|cases| !cases.is_empty() && cases.iter().all(|case| case["status"] == "passed"));
        let exit_codes = evidence["validation"]["exit_codes"].as_object();
        let validator_failed = exit_codes.is_some_and(|codes| {
            codes
                .values()
                .any(|code| code.as_i64().is_some_and(|code| code != 0))
        });
        let transcript = evidence["transcript_summary"]
            .as_str()
            .unwrap_or_default()
            .to_lowercase();
        let claims_done = claims_completion(&transcript);
        let diff = evidence["workspace_diff_summary"]
            .as_str()
            .unwrap_or_default()
            .to_lowercase();
        let window = envelope["provenance_window"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        // The run's earlier evaluations: the kernel's `evaluation_history` when present (it
        // reaches past the K=3 window), else the EVALUATE entries of the window.
        let history: Vec<serde_json::Value> = match envelope["evaluation_history"].as_array() {
            Some(history) => history.clone(),
            None => window
                .iter()
                .filter(|entry| entry["opcode"] == "EVALUATE")
                .cloned()
                .collect(),
        };
        let previous_statuses = history
            .iter()
            .map(|entry| {
                entry["status"]
                    .as_str()
                    .or(entry["outcome"].as_str())
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect();
        let previous_contradiction = history.iter().chain(&window).any(|entry| {
            strings(&entry["risk_flags"])
                .iter()
                .any(|flag| flag.contains("mismatch") || flag == "repeated_contradiction")
        });
        let current_fingerprint = evidence["worktree_fingerprint"].as_str();
        let unchanged_blocker_codes = history
            .iter()
            .filter(|entry| {
                let then = entry["worktree_fingerprint"].as_str();
                match (then, current_fingerprint) {
                    (Some(then), Some(now)) => then == now,
                    // Summaries only: the diff the earlier evaluation saw is the diff now.
                    _ => entry["diff_summary"]
                        .as_str()
                        .is_some_and(|then| then.trim().eq_ignore_ascii_case(diff.trim())),
                }
            })
            .flat_map(|entry| strings(&entry["blocker_codes"]))
            .collect();
        let no_new_evidence = envelope["steps"]
            .as_array()
            .filter(|steps| steps.is_empty())
            .and_then(|_| history.last())
            .and_then(|last| {
                let status = last["status"].as_str().or(last["outcome"].as_str())?;
                let status: Status =
                    serde_json::from_value(serde_json::Value::String(status.to_owned())).ok()?;
                let step = last["step_id"].as_str().unwrap_or("an earlier EVALUATE");
                let label = match last["visit"].as_u64() {
                    Some(visit) => format!("`{step}` #{visit}"),
                    None => format!("`{step}`"),
                };
                Some((label, status))
            });
        Facts {
            no_new_evidence,
            unchanged_blocker_codes,
            expects_changes: envelope["inputs"]["expects_changes"]
                .as_bool()
                .unwrap_or(true),
            policy_events: strings(&evidence["policy_events"]),
            proposed_goldens: report["proposed_goldens"]
                .as_array()
                .is_some_and(|goldens| !goldens.is_empty()),
            report_passed,
            validator_failed,
            mechanical_outcome: evidence["validation"]["mechanical_outcome"]
                .as_str()
                .unwrap_or("completed")
                .to_owned(),
            missing_artifacts: strings(&evidence["validation"]["missing_artifacts"]),
            claims_done,
            empty_diff: diff.trim().is_empty()
                || diff.contains("no changes")
                || diff.contains("0 files changed"),
            previous_statuses,
            previous_contradiction,
        }
    }
}

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

/// Applies every guard rule to a decision.
pub fn guard(mut decision: Decision, facts: &Facts) -> Decision {
    // OA06 §4: `success` only when every required check is satisfied. A step killed by its
    // timeout (or idle timeout, or an interactive prompt) is never a success, whatever a
    // backend answers; nor is a failed step, validator or harness report.
    if decision.status == Status::Success {
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
    // An evaluation with no step since the previous one has no new evidence: it cannot
    // launder that decision (a killed step's `blocked`, say) into a better status.
    if let Some((previous, floor)) = &facts.no_new_evidence
        && decision.status < *floor
    {
        decision.raise(
            *floor,
            "no_new_evidence",
            format!(
                "no step ran since {previous} decided `{}`: an evaluation without new evidence keeps at least that status",
                floor.name()
            ),
        );
    }
    // A failed or killed step hides nothing: it is reported as such (`partial`, `blocked`),
    // and what it said before it stopped is no claim about finished work.
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
    if let Some(event) = facts.policy_events.first() {
        decision.raise(Status::Unsafe, "policy_violation", event.clone());
    }
    if facts.report_passed == Some(true) && facts.validator_failed {
        decision.raise(
            Status::Unsafe,
            "report_execution_mismatch",
            "the harness report says pass while a validator failed".into(),
        );
    }
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
    if facts.proposed_goldens {
        decision.raise(
            Status::NeedsHuman,
            "proposed_goldens_present",
            "the harness proposes golden updates; a human approves them".into(),
        );
    }
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
    if !facts.missing_artifacts.is_empty() && decision.status < Status::Blocked {
        decision.raise(
            Status::Blocked,
            "missing_artifact",
            format!("missing: {}", facts.missing_artifacts.join(", ")),
        );
    }
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
    decision
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Review defect 4: the completion check was a substring match, so an honest "this cannot
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
        let facts = Facts::from_envelope(&envelope);
        assert!(!facts.claims_done && facts.empty_diff);
        assert!(
            !crate::planner::rules::decide(&envelope)
                .risk_flags
                .contains(&"transcript_workspace_mismatch".to_owned())
        );
    }

    /// Review defect 3: a killed step's words (Codex's mid-turn "Done: …") were taken for a
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
        let facts = Facts::from_envelope(&envelope);
        let raised = guard(Decision::status(Status::Success), &facts);
        assert_eq!(raised.status, Status::Blocked);
        assert_eq!(raised.risk_flags, ["no_new_evidence"]);
        assert!(
            raised.blockers[0]
                .summary
                .contains("`judge` #1 decided `blocked`")
        );
        assert_eq!(
            crate::planner::rules::decide(&envelope).status,
            Status::Blocked,
            "the rules planner too"
        );
        // A step since, or no earlier evaluation: no floor.
        let mut stepped = envelope.clone();
        stepped["steps"] =
            serde_json::json!([{"step_id": "fix", "opcode": "RUN_AGENT", "outcome": "completed"}]);
        assert_eq!(Facts::from_envelope(&stepped).no_new_evidence, None);
        let mut first = envelope;
        first["evaluation_history"] = serde_json::json!([]);
        assert_eq!(Facts::from_envelope(&first).no_new_evidence, None);
    }
}
