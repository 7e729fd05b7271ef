//! The facts the guard and the rules planner judge, read from an envelope: the validation
//! outcome, the harness report's verdict, the diff, the agent's claims, and what earlier
//! evaluations of the run decided.

use serde::Deserialize;

use super::claims_completion;
use crate::planner::Status;
use crate::planner::input::{HistoryEntry, PlannerInput, StepEntry, WindowEntry};

/// Evidence facts the guard and the rules planner read from an planner envelope.
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
    /// Nothing new to judge: no agent or validation step (RUN_AGENT, RUN_VALIDATION) ran
    /// since the previous evaluation, or none ran after the last ROLLBACK among the steps
    /// since then (a GATE decides nothing about the work). The least status this evaluation
    /// may decide, and why.
    pub no_new_evidence: Option<(Status, String)>,
    /// The step being judged was meant to change code (an EVALUATE input
    /// `expects_changes: false` says it was not, e.g. a plan).
    pub expects_changes: bool,
}

impl Facts {
    /// Reads the facts from an envelope.
    pub fn from_input(input: &PlannerInput) -> Self {
        let evidence = &input.evidence;
        let report = evidence
            .harness_report
            .as_ref()
            .and_then(|report| ReportVerdict::deserialize(report).ok())
            .unwrap_or_default();
        let transcript = evidence.transcript_summary.to_lowercase();
        let diff = evidence.workspace_diff_summary.to_lowercase();
        let history = evaluation_history(input);
        let current_fingerprint = evidence.worktree_fingerprint.as_deref();
        let validation = &evidence.validation;
        Facts {
            no_new_evidence: no_new_evidence(input.steps.as_deref(), history.last()),
            unchanged_blocker_codes: unchanged_blocker_codes(&history, current_fingerprint, &diff),
            expects_changes: expects_changes(input.inputs.as_ref()),
            policy_events: evidence.policy_events.clone(),
            proposed_goldens: report.proposed_goldens.is_some_and(|goldens| goldens > 0),
            report_passed: report
                .cases
                .map(|cases| !cases.is_empty() && cases.iter().all(|case| case.passed)),
            validator_failed: validation
                .exit_codes
                .values()
                .any(|code| code.is_some_and(|code| code != 0)),
            mechanical_outcome: validation.mechanical_outcome.clone(),
            missing_artifacts: validation.missing_artifacts.clone(),
            claims_done: claims_completion(&transcript),
            empty_diff: match &evidence.workspace_diffstat {
                Some(diffstat) => diffstat.files_changed == 0,
                None => empty_diff_text(&diff),
            },
            previous_statuses: history
                .iter()
                .map(|entry| entry.status.unwrap_or_default().to_owned())
                .collect(),
            previous_contradiction: history
                .iter()
                .map(|entry| entry.risk_flags)
                .chain(
                    input
                        .provenance_window
                        .iter()
                        .map(|entry| &entry.risk_flags[..]),
                )
                .flatten()
                .any(|flag| flag.contains("mismatch") || flag == "repeated_contradiction"),
        }
    }
}

/// What the guard reads of a harness report in the envelope: whether every case passed and
/// whether it proposes goldens. The report is the harness's own document (cut to a bound by
/// the kernel), so nothing else of it is assumed.
#[derive(Debug, Default, Deserialize)]
struct ReportVerdict {
    /// The cases, when the report lists them.
    #[serde(default, deserialize_with = "list_or_none")]
    cases: Option<Vec<CaseVerdict>>,
    /// How many goldens it proposes, when it lists them.
    #[serde(default, deserialize_with = "count_or_none")]
    proposed_goldens: Option<usize>,
}

/// Whether one case passed: its `status` is `passed` (a case of any other shape did not).
#[derive(Debug)]
struct CaseVerdict {
    passed: bool,
}

impl From<serde_json::Value> for CaseVerdict {
    fn from(case: serde_json::Value) -> Self {
        let passed = case.get("status").and_then(serde_json::Value::as_str) == Some("passed");
        Self { passed }
    }
}

/// A list, or `None` when the value is not one.
fn list_or_none<'de, D, T>(deserializer: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: From<serde_json::Value>,
{
    Ok(match serde_json::Value::deserialize(deserializer)? {
        serde_json::Value::Array(items) => Some(items.into_iter().map(T::from).collect()),
        _ => None,
    })
}

/// The length of a list, or `None` when the value is not one.
fn count_or_none<'de, D>(deserializer: D) -> Result<Option<usize>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    Ok(serde_json::Value::deserialize(deserializer)?
        .as_array()
        .map(Vec::len))
}

/// Whether the judged step was meant to change code: not when the EVALUATE's `inputs` say
/// `expects_changes: false`.
fn expects_changes(inputs: Option<&serde_json::Value>) -> bool {
    #[derive(Deserialize)]
    struct Expects {
        expects_changes: bool,
    }
    inputs
        .and_then(|inputs| Expects::deserialize(inputs).ok())
        .is_none_or(|inputs| inputs.expects_changes)
}

/// An earlier evaluation as the guard compares it, from the kernel's history or the window.
struct Earlier<'a> {
    step_id: Option<&'a str>,
    visit: Option<u32>,
    status: Option<&'a str>,
    blocker_codes: &'a [String],
    risk_flags: &'a [String],
    worktree_fingerprint: Option<&'a str>,
    diff_summary: Option<&'a str>,
}

impl<'a> From<&'a HistoryEntry> for Earlier<'a> {
    fn from(entry: &'a HistoryEntry) -> Self {
        Self {
            step_id: entry.step_id.as_deref(),
            visit: entry.visit,
            status: entry.status.as_deref(),
            blocker_codes: &entry.blocker_codes,
            risk_flags: &entry.risk_flags,
            worktree_fingerprint: entry.worktree_fingerprint.as_deref(),
            diff_summary: None,
        }
    }
}

impl<'a> From<&'a WindowEntry> for Earlier<'a> {
    fn from(entry: &'a WindowEntry) -> Self {
        Self {
            step_id: Some(&entry.step_id),
            visit: None,
            // A window entry's outcome is the status the evaluation decided.
            status: Some(&entry.outcome),
            blocker_codes: &entry.blocker_codes,
            risk_flags: &entry.risk_flags,
            worktree_fingerprint: None,
            diff_summary: entry.diff_summary.as_deref(),
        }
    }
}

/// The run's earlier evaluations: the kernel's `evaluation_history` when present (it reaches
/// past the K=3 window), else the EVALUATE entries of the window.
fn evaluation_history(input: &PlannerInput) -> Vec<Earlier<'_>> {
    match &input.evaluation_history {
        Some(history) => history.iter().map(Earlier::from).collect(),
        None => input
            .provenance_window
            .iter()
            .filter(|entry| entry.opcode == "EVALUATE")
            .map(Earlier::from)
            .collect(),
    }
}

/// The blocker codes of earlier evaluations made on the worktree as it is now: the same
/// fingerprint, or, with summaries only, the same diff summary.
fn unchanged_blocker_codes(
    history: &[Earlier<'_>],
    current_fingerprint: Option<&str>,
    diff: &str,
) -> Vec<String> {
    history
        .iter()
        .filter(
            |entry| match (entry.worktree_fingerprint, current_fingerprint) {
                (Some(then), Some(now)) => then == now,
                // Summaries only: the diff the earlier evaluation saw is the diff now.
                _ => entry
                    .diff_summary
                    .is_some_and(|then| then.trim().eq_ignore_ascii_case(diff.trim())),
            },
        )
        .flat_map(|entry| entry.blocker_codes.iter().cloned())
        .collect()
}

/// Whether a diff summary says nothing changed. The whole text is read, never a part of it:
/// `10 files changed, +10 -0` is a change, `0 files changed` and `no changes` (the kernel's
/// word for an empty diffstat) are not. The kernel's envelopes also carry the structured
/// `workspace_diffstat`, which wins over the text.
fn empty_diff_text(text: &str) -> bool {
    let text = text.trim();
    let mut words = text.split_whitespace();
    text.is_empty()
        || text == "no changes"
        || (words.next() == Some("0") && words.next().is_some_and(|word| word.starts_with("file")))
}

/// The mechanical steps: the ones whose processes show what the work is.
fn is_mechanical(step: &StepEntry) -> bool {
    matches!(step.opcode.as_str(), "RUN_AGENT" | "RUN_VALIDATION")
}

/// The floor of an evaluation with nothing new to judge (see [`Facts::no_new_evidence`]):
/// without a ROLLBACK, the previous evaluation's status carries over (a gate between the two
/// changes nothing: a killed step stays `blocked`); after a ROLLBACK with nothing run since,
/// the work judged before is gone and nothing shows a success: at least `partial`, and the
/// previous evaluation's status up to `blocked` (an `unsafe` change the rollback removed is
/// no longer there; one it did not remove is still among the policy events).
fn no_new_evidence(
    steps: Option<&[StepEntry]>,
    previous: Option<&Earlier<'_>>,
) -> Option<(Status, String)> {
    // An envelope without `steps` (a hand-written vector) says nothing about what ran.
    let steps = steps?;
    let rollback = steps.iter().rposition(|step| step.opcode == "ROLLBACK");
    if steps[rollback.map_or(0, |at| at + 1)..]
        .iter()
        .any(is_mechanical)
    {
        return None;
    }
    let previous = previous.and_then(|last| {
        let status = Status::deserialize(serde_json::Value::from(last.status?)).ok()?;
        let step = last.step_id.unwrap_or("an earlier EVALUATE");
        let label = match last.visit {
            Some(visit) => format!("`{step}` #{visit}"),
            None => format!("`{step}`"),
        };
        Some((label, status))
    });
    match (rollback, previous) {
        (None, None) => None,
        (None, Some((label, status))) => Some((
            status,
            format!(
                "no agent or validation step ran since {label} decided `{}`: an evaluation without new evidence keeps at least that status",
                status.name()
            ),
        )),
        (Some(at), previous) => {
            let undo = steps[at].step_id.as_str();
            let carried = previous
                .as_ref()
                .map_or(Status::Partial, |(_, status)| *status);
            let floor = carried.clamp(Status::Partial, Status::Blocked);
            let before = previous
                .map(|(label, status)| format!(" ({label} decided `{}`)", status.name()))
                .unwrap_or_default();
            Some((
                floor,
                format!(
                    "`{undo}` rolled the work back and no agent or validation step ran since{before}: nothing shows a success, so at least `{}`",
                    floor.name()
                ),
            ))
        }
    }
}
