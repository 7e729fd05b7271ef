//! One readable line per finished visit, from its manifest's evidence summary: what the agent
//! did and what the policy found, what the checks returned, what the planner decided, what a
//! rollback undid. Used by `runs show`, the viewer's run page (and the violation text by the live progress).

use serde_json::Value;

use crate::artifacts::{ArtifactRole, GateOutcome, RunDir, StepManifest, read_json};
use crate::policy::Violation;

/// What a visit did, in a line, followed by one line per policy violation it recorded.
pub fn describe_visit(manifest: &StepManifest, run_dir: &RunDir) -> Vec<String> {
    let summary = &manifest.evidence_summary;
    // An interrupted visit: its cause and violations are told from its events; what a rollback
    // undid before the interruption is only in its record.
    if manifest.termination == "interrupted" {
        return summary
            .get("rollback")
            .and_then(|record| describe_summary("ROLLBACK", record))
            .map(|line| format!("reset the worktree before it was interrupted: {line}"))
            .into_iter()
            .collect();
    }
    let mut lines: Vec<String> = describe_summary(&manifest.opcode, summary)
        .into_iter()
        .collect();
    // Why a planner gave no usable answer (connection refused, HTTP 500, not JSON), or what
    // it found in the way: said where the operator looks, not only in planner_decision.json.
    if manifest.opcode == "EVALUATE" {
        lines.extend(blocker_lines(summary));
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
fn blocker_lines(summary: &Value) -> Vec<String> {
    let blockers: Vec<&Value> = summary
        .get("decision")
        .and_then(|decision| decision.get("blockers"))
        .and_then(Value::as_array)
        .map(|blockers| blockers.iter().collect())
        .unwrap_or_default();
    let mut lines: Vec<String> = blockers
        .iter()
        .take(MAX_BLOCKERS)
        .map(|blocker| {
            let (code, text) = match blocker {
                Value::String(text) => ("", text.as_str()),
                _ => (
                    blocker["code"].as_str().unwrap_or_default(),
                    blocker["summary"].as_str().unwrap_or_default(),
                ),
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
    let summary = Some(summary);
    let line = match opcode {
        "RUN_AGENT" => {
            let mut line = format!(
                "{}; {}",
                text(summary, "cause"),
                diffstat(summary.and_then(|summary| summary.get("diffstat")))
            );
            if let Some(cost) = number(summary, "cost_usd") {
                line.push_str(&format!("; ${cost:.2}"));
            }
            let violations = number(summary, "policy_violations").unwrap_or(0.0);
            if violations > 0.0 {
                line.push_str(&format!("; {violations} policy violation(s)"));
            }
            line
        }
        "RUN_VALIDATION" => {
            let codes = summary
                .and_then(|summary| summary.get("exit_codes"))
                .and_then(Value::as_object)?;
            let causes = summary.and_then(|summary| summary.get("causes"));
            let mut line = codes
                .iter()
                .map(|(name, code)| match code.as_i64() {
                    Some(code) => format!("{name} exit {code}"),
                    // Why there is none (a timeout, a refused entrypoint), when recorded.
                    None => match causes.and_then(|causes| causes[name].as_str()) {
                        Some(cause) => format!("{name}: {cause}"),
                        None => format!("{name} no exit code"),
                    },
                })
                .collect::<Vec<_>>()
                .join(", ");
            let timeouts: Vec<&str> = summary
                .and_then(|summary| summary.get("timeouts"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            if !timeouts.is_empty() {
                line.push_str(&format!("; timed out: {}", timeouts.join(", ")));
            }
            let violations = number(summary, "policy_violations").unwrap_or(0.0);
            if violations > 0.0 {
                line.push_str(&format!("; {violations} policy violation(s)"));
            }
            line
        }
        "EVALUATE" => {
            let decision = summary.and_then(|summary| summary.get("decision"));
            let status = text(summary, "status");
            let planner = text(decision, "planner");
            let answered = text(summary, "planner_status");
            // Who decided: the kernel when the planner gave no usable answer; the guard (or
            // the kernel's safety facts) when they raised what the planner answered.
            let mut line = if text(decision, "decided_by") == "kernel" {
                format!("{status} by the kernel (the `{planner}` planner gave no usable answer)")
            } else if !answered.is_empty() && answered != status {
                format!("{status}, raised by the guard from the `{planner}` planner's `{answered}`")
            } else {
                format!("{status} by the `{planner}` planner")
            };
            if !text(decision, "next_step").is_empty() {
                line.push_str(&format!(", next `{}`", text(decision, "next_step")));
            }
            let blockers = decision
                .and_then(|decision| decision.get("blockers"))
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            if blockers > 0 {
                line.push_str(&format!("; {blockers} blocker(s)"));
            }
            line
        }
        "ROLLBACK" => format!(
            "to {}: undid {}",
            text(summary, "target"),
            diffstat(summary.and_then(|summary| summary.get("before")))
        ),
        "STOP" => match text(summary, "reason") {
            "" => text(summary, "stop").to_owned(),
            reason => format!("{}: {reason}", text(summary, "stop")),
        },
        "GATE" => {
            let flag = |key: &str| {
                summary
                    .and_then(|summary| summary.get(key))
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            };
            let mut line = text(summary, "gate").replace('_', " ");
            if flag("waiting") {
                line.push_str("; waited for a decision");
            }
            if flag("queued_for_review") {
                line.push_str("; queued for the review journal");
            }
            line
        }
        _ => return None,
    };
    Some(line)
}

/// `3 file(s) +10 −2` (and binary files when there are), or `no changes`.
pub fn diffstat(stat: Option<&Value>) -> String {
    let count = |key: &str| number(stat, key).unwrap_or(0.0);
    if count("files_changed") == 0.0 {
        return "no changes".to_owned();
    }
    let mut line = format!(
        "{} file(s) +{} −{}",
        count("files_changed"),
        count("insertions"),
        count("deletions")
    );
    if count("binary_files") > 0.0 {
        line.push_str(&format!(", {} binary", count("binary_files")));
    }
    line
}

/// [`diffstat`] of a typed diffstat.
pub fn diffstat_of(stat: Option<&crate::artifacts::DiffStat>) -> String {
    let value = stat.and_then(|stat| serde_json::to_value(stat).ok());
    diffstat(value.as_ref())
}

fn text<'a>(value: Option<&'a Value>, key: &str) -> &'a str {
    value
        .and_then(|value| value.get(key))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn number(value: Option<&Value>, key: &str) -> Option<f64> {
    value
        .and_then(|value| value.get(key))
        .and_then(Value::as_f64)
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
        let lines = blocker_lines(&summary);
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
            blocker_lines(&json!({"status": "success", "decision": {"blockers": []}})).is_empty()
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
