//! The records of a GATE visit: `gate_request.json` (what the gate asks its reviewers, with
//! the review context) and `gate_outcome.json` (how a blocking gate was decided).
//!
//! Readers are tolerant of a key an older release did not write (it reads as empty), and the
//! published schema is strict: it says what this release writes, every key of it.

use serde::{Deserialize, Serialize};

use super::{Blocker, DiffStat, Status};
use crate::outcome::Outcome;

/// `gate_request.json`: what a GATE step asks its reviewers, and the review context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct GateRequest {
    /// The version of this format.
    #[serde(default)]
    pub schema_version: u32,
    /// The run.
    #[serde(default)]
    pub run_id: String,
    /// The gate step.
    #[serde(default)]
    pub step_id: String,
    /// The gate's visit.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub visit: u32,
    /// The gate's kind, as the workflow names it.
    pub gate: GateType,
    /// Whether the run waits for a decision (`requires_approval`, `blocking_approval`).
    #[serde(default)]
    pub blocking: bool,
    /// Why the gate asks, as the workflow's `reason` says (or a default sentence).
    #[serde(default)]
    pub reason: String,
    /// What the reviewer is asked for.
    pub required_decision: RequiredDecision,
    /// Who may decide; empty: anyone.
    #[serde(default)]
    pub approvers: Vec<String>,
    /// When the gate was requested (RFC 3339 UTC).
    #[serde(default)]
    pub requested_at: String,
    /// When the gate times out (RFC 3339 UTC); `null`: never.
    #[serde(default)]
    pub deadline: Option<String>,
    /// What the reviewer needs to decide.
    #[serde(default)]
    pub context: GateContext,
}

impl GateRequest {
    /// The deadline, when the request has one that reads as a time.
    pub fn deadline_time(&self) -> Option<jiff::Timestamp> {
        self.deadline.as_deref()?.parse().ok()
    }
}

/// The kinds of gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GateType {
    /// The run waits until the gate is approved or rejected.
    RequiresApproval,
    /// The same as `requires_approval`.
    BlockingApproval,
    /// The run goes on; the work lands in the review journal.
    QueueForReview,
    /// The run goes on; the work is reviewed in the daily journal.
    RequiresDailyReview,
}

impl GateType {
    /// The name a workflow and the records use.
    pub fn as_str(self) -> &'static str {
        match self {
            GateType::RequiresApproval => "requires_approval",
            GateType::BlockingApproval => "blocking_approval",
            GateType::QueueForReview => "queue_for_review",
            GateType::RequiresDailyReview => "requires_daily_review",
        }
    }
}

/// What a gate's reviewer is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum RequiredDecision {
    /// A blocking gate: approve or reject.
    #[serde(rename = "approve or reject")]
    ApproveOrReject,
    /// A non-blocking gate: a review, later.
    #[serde(rename = "review")]
    Review,
}

/// The review context of a gate request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct GateContext {
    /// Other runs driven while this run's steps ran: their agents could have written into
    /// this run's worktree, which the diff shows as this run's change.
    #[serde(default)]
    pub runs_beside: Vec<RunBeside>,
    /// The whole change of the run.
    #[serde(default)]
    pub diffstat: DiffStat,
    /// `run.diff` (the whole change of the run), relative to the run directory.
    #[serde(default)]
    pub diff: String,
    /// The last change a step made.
    #[serde(default)]
    pub last_step: Option<GateLastStep>,
    /// The latest planner decision.
    #[serde(default)]
    pub planner: Option<GatePlanner>,
    /// The last agent's transcript, relative to the run directory.
    #[serde(default)]
    pub transcript: Option<String>,
    /// The run's worktree.
    #[serde(default)]
    pub worktree: String,
}

/// The last change a step made, in a gate's review context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct GateLastStep {
    /// The step.
    pub step_id: String,
    /// Its visit.
    #[schemars(range(min = 1))]
    pub visit: u32,
    /// The step's `workspace.diff`, relative to the run directory.
    pub diff: String,
    /// The step's diffstat, when its manifest has one.
    #[serde(default)]
    pub diffstat: Option<DiffStat>,
}

/// The latest planner decision, in a gate's review context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct GatePlanner {
    /// The decision, relative to the run directory.
    #[serde(default)]
    pub path: String,
    /// The planner's status.
    pub status: Status,
    /// Its flags for reviewers.
    #[serde(default)]
    pub risk_flags: Vec<String>,
    /// What it found in the way.
    #[serde(default)]
    pub blockers: Vec<Blocker>,
}

/// Another run driven while this run's steps ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RunBeside {
    /// The other run.
    pub run_id: String,
    /// `step#visit` of this run's agent and validation steps it was driven beside.
    #[serde(default)]
    pub visits: Vec<String>,
}

/// `gate_outcome.json`: the decision on a blocking gate (approve, reject, or its deadline).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct GateOutcome {
    /// The version of this format.
    #[serde(default)]
    pub schema_version: u32,
    /// The run.
    #[serde(default)]
    pub run_id: String,
    /// The gate step.
    #[serde(default)]
    pub step_id: String,
    /// The gate's visit.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub visit: u32,
    /// How the gate was decided.
    pub decision: GateDecision,
    /// Who decided; `null`: the deadline did.
    #[serde(default)]
    pub reviewer: Option<String>,
    /// The reviewer's comment.
    #[serde(default)]
    pub comment: Option<String>,
    /// When it was decided (RFC 3339 UTC).
    #[serde(default)]
    pub decided_at: String,
}

/// How a blocking gate was decided: the outcome its route is taken for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GateDecision {
    /// A reviewer approved.
    GateApproved,
    /// A reviewer rejected.
    GateRejected,
    /// The deadline passed first.
    GateTimedOut,
}

impl GateDecision {
    /// The decision an outcome records, when it is one of a blocking gate's.
    pub fn of(outcome: Outcome) -> Option<Self> {
        match outcome {
            Outcome::GateApproved => Some(GateDecision::GateApproved),
            Outcome::GateRejected => Some(GateDecision::GateRejected),
            Outcome::GateTimedOut => Some(GateDecision::GateTimedOut),
            _ => None,
        }
    }

    /// The outcome the gate routes on.
    pub fn outcome(self) -> Outcome {
        match self {
            GateDecision::GateApproved => Outcome::GateApproved,
            GateDecision::GateRejected => Outcome::GateRejected,
            GateDecision::GateTimedOut => Outcome::GateTimedOut,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request as the GATE opcode writes it (keys in the order `serde_json` wrote them).
    const REQUEST: &str = r#"{"approvers":["lead"],"blocking":true,"context":{"diff":"artifacts/final_review/1/run.diff","diffstat":{"binary_files":0,"deletions":1,"files_changed":1,"insertions":2},"last_step":{"diff":"artifacts/fix/1/workspace.diff","diffstat":{"binary_files":0,"deletions":1,"files_changed":1,"insertions":1},"step_id":"fix","visit":1},"planner":{"blockers":[{"code":"review","evidence_ref":null,"summary":"a human looks"}],"path":"artifacts/evaluate_results/2/planner_decision.json","risk_flags":["manual_review"],"status":"needs_human"},"runs_beside":[{"run_id":"20261206T070000Z-aaaaaa","visits":["fix#1"]}],"transcript":"artifacts/fix/1/transcript.md","worktree":"/tmp/demo1/.tnh/worktrees/20261206T070348Z-619c72"},"deadline":"2026-12-07T07:03:49.252386522Z","gate":"requires_approval","reason":"review step `final_review`","requested_at":"2026-12-06T07:03:49.252386522Z","required_decision":"approve or reject","run_id":"20261206T070348Z-619c72","schema_version":1,"step_id":"final_review","visit":1}"#;

    fn same_keys(text: &str, record: &impl Serialize) {
        let written: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(serde_json::to_value(record).unwrap(), written);
    }

    #[test]
    fn a_gate_request_of_today_reads_back_and_writes_the_same_keys() {
        let request: GateRequest = serde_json::from_str(REQUEST).unwrap();
        assert_eq!(request.gate, GateType::RequiresApproval);
        assert_eq!(request.required_decision, RequiredDecision::ApproveOrReject);
        assert_eq!(
            request.context.planner.as_ref().unwrap().status,
            Status::NeedsHuman
        );
        assert_eq!(request.context.runs_beside[0].visits, ["fix#1"]);
        assert!(request.deadline_time().is_some());
        same_keys(REQUEST, &request);
    }

    #[test]
    fn a_gate_request_without_the_newer_keys_reads_as_empty() {
        let request: GateRequest = serde_json::from_str(
            r#"{"gate":"queue_for_review","required_decision":"review","context":{"diff":"d"}}"#,
        )
        .unwrap();
        assert!(request.approvers.is_empty() && request.deadline.is_none());
        assert!(request.context.runs_beside.is_empty() && request.context.planner.is_none());
        assert_eq!(request.context.diff, "d");
    }

    #[test]
    fn a_gate_outcome_of_today_reads_back_and_writes_the_same_keys() {
        let text = r#"{"comment":null,"decided_at":"2026-12-06T07:04:00Z","decision":"gate_approved","reviewer":"lead","run_id":"r","schema_version":1,"step_id":"review","visit":1}"#;
        let outcome: GateOutcome = serde_json::from_str(text).unwrap();
        assert_eq!(outcome.decision.outcome(), Outcome::GateApproved);
        assert_eq!(
            GateDecision::of(Outcome::GateTimedOut),
            Some(GateDecision::GateTimedOut)
        );
        assert_eq!(GateDecision::of(Outcome::GateQueued), None);
        same_keys(text, &outcome);
    }
}
