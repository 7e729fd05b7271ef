//! One readable line per finished visit, from its manifest's evidence summary: what the agent
//! did and what the policy found, what the checks returned, what the planner decided, what a
//! rollback undid. Used by `runs show`, the viewer's run page (and the violation text by the live progress).

use serde_json::Value;

use crate::artifacts::evidence::{
    self, AgentEvidence, BlockerEvidence, EvaluationEvidence, GateEvidence, InterruptedEvidence,
    RollbackEvidence, StopEvidence, ValidationEvidence,
};
use crate::artifacts::{ArtifactRole, DiffStat, GateOutcome, RunDir, StepManifest, read_json};
use crate::policy::Violation;

/// What a visit did, in a line, followed by one line per policy violation it recorded.
pub fn describe_visit(manifest: &StepManifest, run_dir: &RunDir) -> Vec<String> {
    // An interrupted visit: its cause and violations are told from its events; what a rollback
    // undid before the interruption is only in its record.
    if manifest.termination == "interrupted" {
        return manifest
            .evidence::<InterruptedEvidence>()
            .rollback
            .map(|record| {
                let line = describe_rollback(&record);
                format!("reset the worktree before it was interrupted: {line}")
            })
            .into_iter()
            .collect();
    }
    let mut lines: Vec<String> = describe_summary(&manifest.opcode, &manifest.evidence_summary)
        .into_iter()
        .collect();
    // Why a planner gave no usable answer (connection refused, HTTP 500, not JSON), or what
    // it found in the way: said where the operator looks, not only in planner_decision.json.
    if manifest.opcode == "EVALUATE" {
        lines.extend(blocker_lines(&manifest.evidence::<EvaluationEvidence>()));
    }
    // Who decided a gate, and what they said.
    if let Some(entry) = manifest.artifact(ArtifactRole::GateOutcome) {
        let outcome: Option<GateOutcome> =
            read_json(&run_dir.root().join(&entry.path), "gate outcome").ok();
        if let Some(outcome) = outcome {
            let by = match &outcome.reviewer {
                Some(reviewer) => format!(" by {reviewer}"),
                None => " by its deadline".to_owned(),
            };
            let comment = outcome
                .comment
                .as_ref()
                .map(|comment| format!(": \"{comment}\""))
                .unwrap_or_default();
            lines.push(format!(
                "decision: {}{by}{comment}",
                outcome.decision.outcome().as_str()
            ));
        }
    }
    if let Some(entry) = manifest.artifact(ArtifactRole::PolicySummary) {
        let policy: Option<Value> =
            read_json(&run_dir.root().join(&entry.path), "policy summary").ok();
        let violations = policy
            .as_ref()
            .and_then(|policy| policy.get("violations"))
            .and_then(Value::as_array);
        for violation in violations.into_iter().flatten() {
            lines.push(format!(
                "policy violation — {}",
                describe_violation(Some(violation))
            ));
        }
    }
    lines
}

/// The most blockers of one decision `runs show` lists, and the most characters of each.
const MAX_BLOCKERS: usize = 5;
const MAX_BLOCKER_CHARS: usize = 300;

/// One line per blocker of an EVALUATE's decision (its code and summary, on one line and
/// bounded), the first [`MAX_BLOCKERS`] of them.
fn blocker_lines(evaluation: &EvaluationEvidence) -> Vec<String> {
    let blockers = &evaluation.decision.blockers;
    let mut lines: Vec<String> = blockers
        .iter()
        .take(MAX_BLOCKERS)
        .map(|blocker| {
            let (code, text) = match blocker {
                BlockerEvidence::Text(text) => ("", text.as_str()),
                BlockerEvidence::Coded { code, summary } => (code.as_str(), summary.as_str()),
            };
            let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
            let text = match text.char_indices().nth(MAX_BLOCKER_CHARS) {
                Some((end, _)) => format!("{}…", &text[..end]),
                None => text,
            };
            match (code, text.is_empty()) {
                ("", _) => format!("blocker: {text}"),
                (code, true) => format!("blocker `{code}`"),
                (code, false) => format!("blocker `{code}`: {text}"),
            }
        })
        .collect();
    if blockers.len() > MAX_BLOCKERS {
        lines.push(format!(
            "… and {} more blocker(s) in planner_decision.json",
            blockers.len() - MAX_BLOCKERS
        ));
    }
    lines
}

/// A policy violation recorded as JSON, as the operator reads it.
pub fn describe_violation(violation: Option<&Value>) -> String {
    violation
        .and_then(|violation| serde_json::from_value::<Violation>(violation.clone()).ok())
        .map_or_else(
            || "(a violation this release cannot read)".to_owned(),
            |violation| violation.to_string(),
        )
}

/// The summary line of a visit's evidence, by opcode; `None` when there is nothing to say.
fn describe_summary(opcode: &str, summary: &Value) -> Option<String> {
    let line = match opcode {
        "RUN_AGENT" => describe_agent(&evidence::read(summary)),
        "RUN_VALIDATION" => describe_validation(&evidence::read(summary))?,
        "EVALUATE" => describe_evaluation(&evidence::read(summary)),
        "ROLLBACK" => describe_rollback(&evidence::read(summary)),
        "STOP" => {
            let stop: StopEvidence = evidence::read(summary);
            match stop
                .reason
                .as_ref()
                .and_then(Value::as_str)
                .unwrap_or_default()
            {
                "" => stop.stop,
                reason => format!("{}: {reason}", stop.stop),
            }
        }
        "GATE" => {
            let gate: GateEvidence = evidence::read(summary);
            let mut line = gate.gate.replace('_', " ");
            if gate.waiting {
                line.push_str("; waited for a decision");
            }
            if gate.queued_for_review {
                line.push_str("; queued for the review journal");
            }
            line
        }
        _ => return None,
    };
    Some(line)
}

fn describe_agent(agent: &AgentEvidence) -> String {
    let mut line = format!("{}; {}", agent.cause, diffstat(agent.diffstat.as_ref()));
    if let Some(cost) = agent.cost_usd {
        line.push_str(&format!("; ${cost:.2}"));
    }
    if agent.policy_violations > 0 {
        line.push_str(&format!(
            "; {} policy violation(s)",
            agent.policy_violations
        ));
    }
    line
}

/// `None` for a summary that is not a validation's.
fn describe_validation(validation: &ValidationEvidence) -> Option<String> {
    if validation.exit_codes.is_empty() && validation.mechanical_outcome.is_empty() {
        return None;
    }
    let mut line = validation
        .exit_codes
        .iter()
        .map(|(name, code)| match code {
            Some(code) => format!("{name} exit {code}"),
            // Why there is none (a timeout, a refused entrypoint), when recorded.
            None => match validation.causes.get(name) {
                Some(cause) => format!("{name}: {cause}"),
                None => format!("{name} no exit code"),
            },
        })
        .collect::<Vec<_>>()
        .join(", ");
    if !validation.timeouts.is_empty() {
        line.push_str(&format!("; timed out: {}", validation.timeouts.join(", ")));
    }
    if validation.policy_violations > 0 {
        line.push_str(&format!(
            "; {} policy violation(s)",
            validation.policy_violations
        ));
    }
    Some(line)
}

fn describe_evaluation(evaluation: &EvaluationEvidence) -> String {
    let decision = &evaluation.decision;
    let status = &evaluation.status;
    let planner = decision.planner.as_deref().unwrap_or_default();
    let answered = evaluation.planner_status.as_deref().unwrap_or_default();
    // Who decided: the kernel when the planner gave no usable answer; the guard (or the
    // kernel's safety facts) when they raised what the planner answered.
    let mut line = if decision.decided_by.as_deref() == Some("kernel") {
        format!("{status} by the kernel (the `{planner}` planner gave no usable answer)")
    } else if !answered.is_empty() && answered != status {
        format!("{status}, raised by the guard from the `{planner}` planner's `{answered}`")
    } else {
        format!("{status} by the `{planner}` planner")
    };
    if let Some(next) = decision
        .next_step
        .as_deref()
        .filter(|next| !next.is_empty())
    {
        line.push_str(&format!(", next `{next}`"));
    }
    if !decision.blockers.is_empty() {
        line.push_str(&format!("; {} blocker(s)", decision.blockers.len()));
    }
    line
}

fn describe_rollback(rollback: &RollbackEvidence) -> String {
    format!(
        "to {}: undid {}",
        rollback.target.as_deref().unwrap_or_default(),
        diffstat(rollback.before.as_ref())
    )
}

/// `3 file(s) +10 −2` (and binary files when there are), or `no changes`.
pub fn diffstat(stat: Option<&DiffStat>) -> String {
    let stat = stat.copied().unwrap_or_default();
    if stat.files_changed == 0 {
        return "no changes".to_owned();
    }
    let mut line = format!(
        "{} file(s) +{} −{}",
        stat.files_changed, stat.insertions, stat.deletions
    );
    if stat.binary_files > 0 {
        line.push_str(&format!(", {} binary", stat.binary_files));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_violation_is_described_by_its_class_path_and_detail() {
        let violation = json!({
            "class": "path_escape",
            "path": "src",
            "rule": "symlink_target",
            "detail": "symlink points outside the worktree: `/etc`"
        });
        assert_eq!(
            describe_violation(Some(&violation)),
            "path escape `src`: symlink points outside the worktree: `/etc`"
        );
        let pathless =
            json!({"class": "forbidden_operation", "rule": "commit", "detail": "commit"});
        assert_eq!(
            describe_violation(Some(&pathless)),
            "forbidden operation `commit`"
        );
        let lockfile = json!({"class": "forbidden_operation", "path": "Cargo.lock", "rule": "modify_lockfiles", "detail": "lockfile changed"});
        assert_eq!(
            describe_violation(Some(&lockfile)),
            "forbidden operation `modify_lockfiles` on `Cargo.lock`: lockfile changed"
        );
    }

    #[test]
    fn each_opcode_says_what_its_visit_did() {
        let agent = json!({
            "cause": "idle timeout after 300s", "cost_usd": 0.25, "policy_violations": 2,
            "diffstat": {"files_changed": 4, "insertions": 2, "deletions": 3, "binary_files": 1}
        });
        assert_eq!(
            describe_summary("RUN_AGENT", &agent).unwrap(),
            "idle timeout after 300s; 4 file(s) +2 −3, 1 binary; $0.25; 2 policy violation(s)"
        );
        let checks = json!({"exit_codes": {"lint": 0, "tests": null}, "timeouts": ["tests"]});
        assert_eq!(
            describe_summary("RUN_VALIDATION", &checks).unwrap(),
            "lint exit 0, tests no exit code; timed out: tests"
        );
        let explained = json!({
            "exit_codes": {"lint": 0, "tests": null},
            "causes": {"tests": "timeout: wall-clock limit of 1s reached"},
            "timeouts": ["tests"]
        });
        assert_eq!(
            describe_summary("RUN_VALIDATION", &explained).unwrap(),
            "lint exit 0, tests: timeout: wall-clock limit of 1s reached; timed out: tests"
        );
        let evaluate = json!({
            "status": "blocked",
            "decision": {"planner": "rules", "next_step": "fix", "blockers": ["no tests"]}
        });
        assert_eq!(
            describe_summary("EVALUATE", &evaluate).unwrap(),
            "blocked by the `rules` planner, next `fix`; 1 blocker(s)"
        );
        let failed = json!({
            "status": "blocked",
            "decision": {"planner": "judge", "decided_by": "kernel", "next_step": "failed",
                "blockers": ["planner_error"]}
        });
        assert_eq!(
            describe_summary("EVALUATE", &failed).unwrap(),
            "blocked by the kernel (the `judge` planner gave no usable answer), next `failed`; 1 blocker(s)"
        );
        let raised = json!({
            "status": "unsafe",
            "planner_status": "success",
            "decision": {"planner": "liar", "decided_by": "liar", "next_step": "undo",
                "blockers": ["policy_violation"]}
        });
        assert_eq!(
            describe_summary("EVALUATE", &raised).unwrap(),
            "unsafe, raised by the guard from the `liar` planner's `success`, next `undo`; 1 blocker(s)"
        );
        let rollback = json!({"target": "pre_run",
            "before": {"files_changed": 1, "insertions": 5, "deletions": 0, "binary_files": 0}});
        assert_eq!(
            describe_summary("ROLLBACK", &rollback).unwrap(),
            "to pre_run: undid 1 file(s) +5 −0"
        );
        assert_eq!(
            describe_summary("STOP", &json!({"stop": "failure", "reason": "rolled back"})).unwrap(),
            "failure: rolled back"
        );
        assert_eq!(
            describe_summary(
                "GATE",
                &json!({"gate": "requires_approval", "waiting": true})
            )
            .unwrap(),
            "requires approval; waited for a decision"
        );
        assert_eq!(describe_summary("SOMETHING_ELSE", &json!({})), None);
    }

    #[test]
    fn an_evaluate_lists_its_blockers_on_one_bounded_line_each() {
        let summary = json!({
            "status": "blocked",
            "decision": {"planner": "judge", "decided_by": "kernel", "blockers": [
                {"code": "planner_error", "severity": "medium",
                 "summary": "planner `judge` failed 1 time(s); last: POST http://127.0.0.1:9/v1: io: Connection refused (os error 111)"},
                {"code": "tests_failing", "summary": "two\nlines"},
                "no tests",
                {"code": "long", "summary": "x".repeat(1000)},
                {"code": "quiet"},
                {"code": "sixth", "summary": "left out"},
                {"code": "seventh", "summary": "left out"}
            ]}
        });
        let lines = blocker_lines(&evidence::read(&summary));
        assert_eq!(
            lines[..3],
            [
                "blocker `planner_error`: planner `judge` failed 1 time(s); last: POST http://127.0.0.1:9/v1: io: Connection refused (os error 111)",
                "blocker `tests_failing`: two lines",
                "blocker: no tests",
            ]
        );
        assert_eq!(
            lines[3],
            format!("blocker `long`: {}…", "x".repeat(MAX_BLOCKER_CHARS))
        );
        assert_eq!(lines[4], "blocker `quiet`");
        assert_eq!(lines[5], "… and 2 more blocker(s) in planner_decision.json");
        assert_eq!(lines.len(), 6);
        assert!(
            blocker_lines(&evidence::read(
                &json!({"status": "success", "decision": {"blockers": []}})
            ))
            .is_empty()
        );
    }

    #[test]
    fn a_stop_without_a_reason_and_an_empty_change_read_plainly() {
        let line = |opcode: &str, summary: Value| describe_summary(opcode, &summary).unwrap();
        assert_eq!(line("STOP", json!({"stop": "failure"})), "failure");
        assert_eq!(
            line("STOP", json!({"stop": "success", "reason": "done"})),
            "success: done"
        );
        let cause = "idle_timeout: no progress for 6s";
        assert_eq!(
            line(
                "RUN_AGENT",
                json!({"cause": cause, "diffstat": {"files_changed": 0}})
            ),
            format!("{cause}; no changes")
        );
        assert_eq!(
            line(
                "RUN_AGENT",
                json!({"cause": "exit code 0", "diffstat": {"files_changed": 2, "insertions": 5, "deletions": 1}})
            ),
            "exit code 0; 2 file(s) +5 −1"
        );
    }
}
