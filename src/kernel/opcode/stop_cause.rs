//! Why a run reached a failure STOP, in one line: what went wrong since the last agent step
//! began — the policy violation, the validators that failed with their exit codes, the
//! planner's status and first blocker — so a failed run's summary, status and journal say
//! why without opening the run.

use crate::artifacts::{Event, EventPayload, RunDir, read_json};
use crate::planner::{Decision, Status};

/// The causes found in `events` since the last RUN_AGENT visit started, joined with `; `;
/// `None` when nothing there failed.
pub(crate) fn failure_causes(run_dir: &RunDir, events: &[Event]) -> Option<String> {
    let since = events
        .iter()
        .rposition(|event| {
            matches!(&event.payload, EventPayload::StepStarted(started) if started.opcode == "RUN_AGENT")
        })
        .unwrap_or(0);
    let window = &events[since..];
    let violation = violation(window);
    let verdict = planner_verdict(run_dir, window, violation.is_some());
    let causes: Vec<String> = [violation, failed_validators(window), verdict]
        .into_iter()
        .flatten()
        .collect();
    (!causes.is_empty()).then(|| causes.join("; "))
}

/// The first policy violation of the window, and how many more there were.
fn violation(window: &[Event]) -> Option<String> {
    let violations: Vec<&serde_json::Value> = window
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::PolicyViolation(policy) => Some(&policy.violation),
            _ => None,
        })
        .collect();
    let detail = violations.first()?.get("detail")?.as_str()?;
    let more = match violations.len() {
        1 => String::new(),
        count => format!(" (and {} more)", count - 1),
    };
    Some(format!("policy violation: {detail}{more}"))
}

/// The validators of the window's last failed RUN_VALIDATION, with their exit codes.
fn failed_validators(window: &[Event]) -> Option<String> {
    let (outcome, exit_codes) = window.iter().rev().find_map(|event| match &event.payload {
        EventPayload::RunnerCompleted(completed) => {
            Some((completed.outcome, completed.exit_codes.as_ref()?))
        }
        _ => None,
    })?;
    if outcome == Some(crate::outcome::Outcome::Completed) {
        return None;
    }
    let failed: Vec<String> = exit_codes
        .iter()
        .filter(|(_, code)| **code != Some(0))
        .map(|(id, code)| match code {
            Some(code) => format!("{id} (exit {code})"),
            None => format!("{id} (no exit code)"),
        })
        .collect();
    let outcome = outcome.map_or("error", crate::outcome::Outcome::as_str);
    match failed.is_empty() {
        true => Some(format!("validation ended {outcome}")),
        false => Some(format!("validators failed: {}", failed.join(", "))),
    }
}

/// The window's last planner decision, when it was not `success`: its status and first
/// blocker, else what it asked to fix (read from the visit's `planner_decision.json`). A
/// policy-violation blocker is left out when the violation is named already.
fn planner_verdict(run_dir: &RunDir, window: &[Event], violation_named: bool) -> Option<String> {
    let (decided, status) = window.iter().rev().find_map(|event| match &event.payload {
        EventPayload::PlannerDecision(decision) => Some((event, decision.status)),
        _ => None,
    })?;
    let status = status?.as_str();
    if status == Status::Success.name() {
        return None;
    }
    let (step, visit) = (decided.step_id.as_deref()?, decided.visit?);
    let decision: Option<Decision> = read_json(
        &run_dir.visit(step, visit).planner_decision(),
        "planner decision",
    )
    .ok();
    let said = decision.and_then(|decision| match decision.blockers.into_iter().next() {
        Some(blocker) if violation_named && blocker.code == "policy_violation" => None,
        Some(blocker) => Some(blocker.summary),
        None => decision.fix_instructions.map(|fix| fix.objective),
    });
    let blocker = said.map(|text| format!(": {text}")).unwrap_or_default();
    Some(format!("planner `{step}` answered {status}{blocker}"))
}
