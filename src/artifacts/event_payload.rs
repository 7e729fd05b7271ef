//! What each kind of event of `events.ndjson` records: one variant per event type, each with
//! its own fields, written flat beside the event's own keys and told apart by `event_type`.
//!
//! Every field struct reads with defaults (`#[serde(default)]`): a line written by an older
//! release that lacked a field stays readable, as it was when payloads were free maps.
//! Nested records owned by higher layers (a policy violation, a guard report, a rollback
//! record, a worktree fingerprint) are kept as JSON values: this file may use only the types
//! of its own layer and below.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use super::{ArtifactRole, EventType};
use crate::outcome::Outcome;

/// JSON values with no fixed shape here (user parameters, records of higher layers).
type Json = serde_json::Value;
/// A JSON object with no fixed shape here.
type JsonObject = serde_json::Map<String, serde_json::Value>;

/// Reads a field that is written even when it has no value (`null`): `Some` whenever the key
/// is there, `null` included, so the line is written back the same; `None` only when the key
/// is missing.
fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// What an event records, with its fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "event_type", rename_all = "snake_case")]
pub enum EventPayload {
    /// A run began.
    RunStarted(RunStarted),
    /// A run continued after an interruption or a gate.
    RunResumed(RunResumed),
    /// A step began a visit.
    StepStarted(StepStarted),
    /// An agent or validator process started.
    RunnerStarted(RunnerStarted),
    /// An agent or validator process ended.
    RunnerCompleted(RunnerCompleted),
    /// A file was added to a step's manifest.
    ArtifactRecorded(ArtifactRecorded),
    /// A step's diff broke the policy.
    PolicyViolation(PolicyViolation),
    /// The kernel chose the next step.
    RouteSelected(RouteSelected),
    /// A step visit ended with an outcome.
    StepCompleted(StepCompleted),
    /// A step visit failed at runtime (not an outcome of its opcode).
    StepFailed(StepFailed),
    /// A step visit was cut short by a crash or Ctrl-C.
    StepInterrupted(StepInterrupted),
    /// The operator's `tnh-conductor rollback` is about to reset the worktree (no step).
    /// Recorded first, so a rollback killed part-way leaves what it was undoing in the
    /// record; its `rollback_completed` follows.
    RollbackStarted(RollbackStarted),
    /// A rollback reset the worktree: a ROLLBACK step, or the operator's `tnh-conductor
    /// rollback` (`"by": "operator"`, no step).
    RollbackCompleted(RollbackCompleted),
    /// A blocking gate is waiting for a human.
    GateRequested(GateRequested),
    /// A gate was decided.
    GateResolved(GateResolved),
    /// A human's decision and comments.
    HumanFeedback(HumanFeedback),
    /// The planner decided.
    PlannerDecision(PlannerDecision),
    /// A script printed something.
    ScriptOutput(ScriptOutput),
    /// The worktree differed from the recorded state and the operator accepted it.
    DriftAccepted(DriftAccepted),
    /// `resume --accept-drift` of a run killed in an agent step: repository-wide refs and git
    /// configuration files that changed since the step started are kept as the operator's.
    RepositoryChangesKept(RepositoryChangesKept),
    /// `resume --skip-guard-check` of a run killed in a step whose saved guard state was
    /// damaged or missing: the visit was not checked.
    GuardCheckSkipped(GuardCheckSkipped),
    /// The worktree folder was gone on resume and was checked out again from the work branch.
    WorktreeRecreated(WorktreeRecreated),
    /// The workflow file differs from the one the run started (or last continued) with; the
    /// file as it is now applies from here on.
    WorkflowChanged(FileChanged),
    /// The configuration file differs from the one the run started (or last continued) with;
    /// it applies from here on.
    ConfigChanged(FileChanged),
    /// The repository's prompt files (`.tnh/prompts/`) differ from those the run started (or
    /// last continued) with; they apply from here on.
    PromptsChanged(PromptsChanged),
    /// The edited workflow's parameter declarations changed the run's parameters.
    ParamsChanged(ParamsChanged),
    /// An agent appended to the run log.
    AgentRunlog(AgentRunlog),
    /// The agent left something in its step folder under a name the conductor writes; it
    /// was replaced, never written through.
    EvidenceTampered(EvidenceTampered),
    /// A success STOP committed the run's change on its work branch. Recorded just before
    /// `run_completed`.
    RunCommitted(RunCommitted),
    /// The run ended at a STOP.
    RunCompleted(RunEnded),
    /// The run ended with a runtime error.
    RunFailed(RunEnded),
    /// The operator interrupted the run.
    RunInterrupted(RunInterrupted),
    /// The operator ended the run with `runs abandon`. Its step and visit are where it stood.
    RunAbandoned(RunAbandoned),
    /// `tnh-conductor land` brought the run's commit into a branch and/or pushed the run's
    /// branch.
    Landed(Landed),
}

impl EventPayload {
    /// The event type the payload is of.
    pub fn event_type(&self) -> EventType {
        match self {
            EventPayload::RunStarted(_) => EventType::RunStarted,
            EventPayload::RunResumed(_) => EventType::RunResumed,
            EventPayload::StepStarted(_) => EventType::StepStarted,
            EventPayload::RunnerStarted(_) => EventType::RunnerStarted,
            EventPayload::RunnerCompleted(_) => EventType::RunnerCompleted,
            EventPayload::ArtifactRecorded(_) => EventType::ArtifactRecorded,
            EventPayload::PolicyViolation(_) => EventType::PolicyViolation,
            EventPayload::RouteSelected(_) => EventType::RouteSelected,
            EventPayload::StepCompleted(_) => EventType::StepCompleted,
            EventPayload::StepFailed(_) => EventType::StepFailed,
            EventPayload::StepInterrupted(_) => EventType::StepInterrupted,
            EventPayload::RollbackStarted(_) => EventType::RollbackStarted,
            EventPayload::RollbackCompleted(_) => EventType::RollbackCompleted,
            EventPayload::GateRequested(_) => EventType::GateRequested,
            EventPayload::GateResolved(_) => EventType::GateResolved,
            EventPayload::HumanFeedback(_) => EventType::HumanFeedback,
            EventPayload::PlannerDecision(_) => EventType::PlannerDecision,
            EventPayload::ScriptOutput(_) => EventType::ScriptOutput,
            EventPayload::DriftAccepted(_) => EventType::DriftAccepted,
            EventPayload::RepositoryChangesKept(_) => EventType::RepositoryChangesKept,
            EventPayload::GuardCheckSkipped(_) => EventType::GuardCheckSkipped,
            EventPayload::WorktreeRecreated(_) => EventType::WorktreeRecreated,
            EventPayload::WorkflowChanged(_) => EventType::WorkflowChanged,
            EventPayload::ConfigChanged(_) => EventType::ConfigChanged,
            EventPayload::PromptsChanged(_) => EventType::PromptsChanged,
            EventPayload::ParamsChanged(_) => EventType::ParamsChanged,
            EventPayload::AgentRunlog(_) => EventType::AgentRunlog,
            EventPayload::EvidenceTampered(_) => EventType::EvidenceTampered,
            EventPayload::RunCommitted(_) => EventType::RunCommitted,
            EventPayload::RunCompleted(_) => EventType::RunCompleted,
            EventPayload::RunFailed(_) => EventType::RunFailed,
            EventPayload::RunInterrupted(_) => EventType::RunInterrupted,
            EventPayload::RunAbandoned(_) => EventType::RunAbandoned,
            EventPayload::Landed(_) => EventType::Landed,
        }
    }
}

/// `run_started`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct RunStarted {
    /// The workflow's id.
    pub workflow_id: String,
    /// The commit the run's worktree started from.
    pub base_sha: String,
    /// The run's parameters, as resolved.
    pub params: JsonObject,
}

/// `run_resumed`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct RunResumed {
    /// The last event the checkpoint it continued from accounts for.
    pub from_seq: u64,
}

/// `step_started`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct StepStarted {
    /// The step's opcode (`RUN_AGENT`, `RUN_VALIDATION`, …).
    pub opcode: String,
}

/// `runner_started`: an agent's (`agent`) or a validator's (`validator` and `argv`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct RunnerStarted {
    /// The validator's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub validator: Option<String>,
    /// The validator's command line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    /// The agent profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

/// `runner_completed`: an agent's (`cause`) or a validation's (`exit_codes`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct RunnerCompleted {
    /// The process's (or the validation's) outcome.
    #[schemars(with = "Option<String>")]
    pub outcome: Option<Outcome>,
    /// Why the agent's process ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// Each validator's exit code, `null` for one stopped or not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_codes: Option<BTreeMap<String, Option<i64>>>,
}

/// `artifact_recorded`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct ArtifactRecorded {
    /// What the file is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<ArtifactRole>,
    /// The file, relative to the run directory.
    pub path: String,
}

/// `policy_violation`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct PolicyViolation {
    /// The violation (class, path, detail…), as the policy reports it.
    pub violation: Json,
}

/// `route_selected`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct RouteSelected {
    /// The outcome routed on.
    #[schemars(with = "Option<String>")]
    pub outcome: Option<Outcome>,
    /// The next step, or `STOP`.
    pub next_step: String,
    /// The next step's visit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_visit: Option<u32>,
    /// Set when `resume` took the route of a visit whose end was recorded before a crash.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovered: Option<bool>,
}

/// `step_completed`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct StepCompleted {
    /// The visit's outcome.
    #[schemars(with = "Option<String>")]
    pub outcome: Option<Outcome>,
    /// Whether a validator proposed new golden files.
    pub proposed_goldens: bool,
    /// The first policy violation's detail (and how many more).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_violation: Option<String>,
    /// Why a STOP step stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
}

/// `step_failed`; a script error adds where it was.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct StepFailed {
    /// What failed.
    pub error: String,
    /// Set when `resume` runs the step again once the cause is fixed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumable: Option<bool>,
    /// What to do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// The script error's file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The script error's line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    /// The script error's column.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<u64>,
    /// The script error's kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Where in the script's own code (`line:column`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code_position: Option<String>,
}

/// `step_interrupted`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct StepInterrupted {
    /// What cut the visit short.
    pub cause: String,
    /// The leftover processes of the visit that were killed.
    pub killed_orphans: Vec<i32>,
    /// Processes still alive after being stopped and killed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub surviving_orphans: Option<Vec<i32>>,
    /// What the saved guard found (the guard's report).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "present")]
    pub guard_report: Option<Json>,
    /// The rollback to the visit's snapshot (its record).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "present")]
    pub restored: Option<Json>,
}

/// `rollback_started`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct RollbackStarted {
    /// `pre_run` or `pre_step`.
    pub target: String,
    /// Who asked (`operator`).
    pub by: String,
    /// The snapshot's ref.
    pub snapshot: String,
    /// The snapshot's commit.
    pub snapshot_commit: String,
    /// The worktree's HEAD before.
    pub head_before: String,
    /// The tree of the worktree's files before, when it could be written.
    pub tree_before: Option<String>,
}

/// `rollback_completed`: a ROLLBACK step's, or (with `by`) the operator's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct RollbackCompleted {
    /// `pre_run` or `pre_step`.
    pub target: String,
    /// Who asked (`operator`), for the operator's rollback.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// The rollback record's file.
    pub record: String,
    /// The commit the worktree was at before.
    pub undone: String,
    /// The operator's rollback: the policy violation it cleared (`null`: none).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "present")]
    pub policy_violation_cleared: Option<Option<String>>,
    /// The operator's rollback: the checkpoint the run had before.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "present")]
    pub checkpoint_before: Option<Json>,
    /// The operator's rollback: an earlier attempt that was killed part-way, which it finished.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "present")]
    pub interrupted_attempt: Option<Json>,
}

/// `gate_requested`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct GateRequested {
    /// The gate's kind.
    pub gate: String,
    /// Why the gate is asked.
    pub reason: String,
    /// The gate request's file in the visit's folder.
    pub request: String,
}

/// `gate_resolved`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct GateResolved {
    /// The decision: an outcome (`gate_approved`, …) or `queued` for a gate that does not wait.
    pub decision: String,
    /// Who decided (`null`: nobody, as when a gate timed out); absent for a queued gate.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "present")]
    pub reviewer: Option<Option<String>>,
}

/// `human_feedback`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct HumanFeedback {
    /// The decision.
    pub decision: String,
    /// The reviewer's comment.
    pub comments: Option<String>,
    /// Who decided.
    pub reviewer: String,
    /// The files the feedback is about.
    pub related: Vec<String>,
}

/// `planner_decision`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct PlannerDecision {
    /// The decision's status.
    #[schemars(with = "Option<String>")]
    pub status: Option<Outcome>,
    /// The planner that decided.
    pub planner: Option<String>,
    /// Who decided (the planner, or the kernel for a planner that failed).
    pub decided_by: Option<String>,
    /// The decision's risk flags.
    pub risk_flags: Option<Vec<String>>,
}

/// `script_output`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct ScriptOutput {
    /// `print` or `debug`.
    pub stream: String,
    /// What the script printed.
    pub text: String,
}

/// `drift_accepted`: both fingerprints (tree and head) of the worktree.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct DriftAccepted {
    /// The fingerprint the checkpoint recorded.
    pub recorded: Json,
    /// The fingerprint found.
    pub found: Json,
}

/// `repository_changes_kept`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct RepositoryChangesKept {
    /// The refs that changed.
    pub ref_changes: Json,
    /// The git configuration files that changed.
    pub git_config_changed: Json,
    /// Who kept them (`operator`).
    pub by: String,
}

/// `guard_check_skipped`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct GuardCheckSkipped {
    /// The guard state's file.
    pub guard_state: String,
    /// What was wrong with it.
    pub reason: String,
    /// Who skipped the check (`operator`).
    pub by: String,
}

/// `worktree_recreated`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct WorktreeRecreated {
    /// The worktree's folder.
    pub path: String,
    /// The work branch it was checked out from.
    pub branch: String,
}

/// `workflow_changed` and `config_changed`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct FileChanged {
    /// The file.
    pub path: String,
    /// Its digest as the run last recorded it.
    pub recorded_sha256: String,
    /// Its digest now.
    pub found_sha256: String,
}

/// `prompts_changed`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct PromptsChanged {
    /// The prompts' folder.
    pub path: String,
    /// The files edited, added or removed.
    pub changed: Vec<String>,
}

/// `params_changed`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct ParamsChanged {
    /// New parameters, with their defaults.
    pub added: JsonObject,
    /// Parameters no longer declared.
    pub removed: Vec<String>,
}

/// `agent_runlog`: one entry of the agent's run log, each text bounded; or (`kind`
/// `unreadable`) what of the log was not read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct AgentRunlog {
    /// The entry's kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The entry's message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// What the entry refers to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub r#ref: Option<String>,
    /// When the agent logged it (the agent's `timestamp`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logged_at: Option<String>,
}

/// `evidence_tampered`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct EvidenceTampered {
    /// What was found in each place (one line each).
    pub entries: Vec<String>,
}

/// `run_committed`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct RunCommitted {
    /// The run's commit.
    pub commit: String,
    /// Its parent (the base).
    pub parent: String,
    /// Its tree.
    pub tree: String,
    /// The work branch.
    pub branch: String,
    /// `Name <email>`.
    pub author: String,
    /// `configured`, or `fallback` when git had no `user.name`/`user.email`.
    pub identity: String,
}

/// `run_completed` and `run_failed`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct RunEnded {
    /// `success`, `failure` or `error`.
    pub end: String,
    /// Why.
    pub reason: String,
}

/// `run_interrupted`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct RunInterrupted {
    /// What interrupted it.
    pub cause: String,
    /// The step that runs next, for an interrupt between steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_step: Option<String>,
}

/// `run_abandoned`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct RunAbandoned {
    /// Who abandoned it.
    pub by: String,
    /// Where it stood: `waiting`, `blocked`…
    pub was: String,
    /// The leftover processes of the run that were killed.
    pub stopped_pids: Vec<i32>,
    /// Why, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Processes still alive after being stopped and killed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub survivors: Option<Vec<i32>>,
}

/// `landed`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct Landed {
    /// The run's commit.
    pub run_commit: String,
    /// The branch it was brought into.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub into: Option<String>,
    /// `ff-only`, `merge` or `squash`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The branch's new tip.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The branch's tip before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// The remote the run's branch was pushed to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
    /// The pull request opened.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<String>,
}

#[cfg(test)]
#[path = "event_payload_tests.rs"]
mod tests;
