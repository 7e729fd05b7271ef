//! Step manifests: what a step visit produced, by canonical role.

use serde::{Deserialize, Serialize};

/// Canonical artifact roles; consumers resolve evidence by role,
/// never by file name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactRole {
    /// The raw agent stream.
    RunnerTranscript,
    /// The agent's last message.
    RunnerFinalResponse,
    /// argv, timing, termination, cost, tokens.
    RunnerMetadata,
    /// The rendered prompt sent to the agent.
    RunnerPrompt,
    /// A readable transcript.
    RunnerTranscriptMarkdown,
    /// The agent's stderr.
    RunnerStderr,
    /// Requested vs effective policy and violations.
    PolicySummary,
    /// Per-validator exit codes and durations.
    ValidationReport,
    /// A validator's stdout.
    ValidationStdout,
    /// A validator's stderr.
    ValidationStderr,
    /// A harness report.
    HarnessReport,
    /// A file a validator declared as an artifact.
    ValidationArtifact,
    /// The planner input envelope.
    PlannerInput,
    /// The planner decision.
    PlannerDecision,
    /// The rendered prompt a model planner was sent.
    PlannerPrompt,
    /// Each attempt of an external planner, with its raw answer.
    PlannerAttempts,
    /// A gate request.
    GateRequest,
    /// A gate decision.
    GateOutcome,
    /// The step's unified diff.
    WorkspaceDiff,
    /// The step's changed paths.
    WorkspaceStatus,
    /// A rollback's before/after record.
    RollbackRecord,
    /// Entries the agent appended with `tnh runlog append`.
    AgentRunlog,
    /// The inputs an agent step's prompt was rendered with (`inputs.json`).
    PromptInputs,
    /// The output of a `tnh test|lint|typecheck` the agent ran (`tnh-<name>.log`).
    ToolLog,
}

/// One artifact of a step visit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ArtifactEntry {
    /// Its canonical role.
    pub role: ArtifactRole,
    /// Path relative to the run directory.
    pub path: String,
    /// Coarse type (`application/json`, `text/plain`, …).
    pub media_type: String,
    /// Whether the artifact is contract-critical.
    pub required: bool,
    /// Advisory: especially relevant for review.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub important: bool,
}

/// `artifacts/<step_id>/<visit>/manifest.json` (and the latest visit's, hard-linked, at
/// `artifacts/<step_id>/manifest.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(transform = super::evidence::by_opcode)]
pub struct StepManifest {
    /// The manifest format's version.
    pub schema_version: u32,
    /// The step.
    pub step_id: String,
    /// Its opcode (`RUN_AGENT`, …).
    pub opcode: String,
    /// Which visit of the step (1, 2, …).
    pub visit: u32,
    /// RFC 3339.
    pub started_at: String,
    /// RFC 3339.
    pub ended_at: String,
    /// The outcome or status (`completed`, `killed_timeout`, `partial`, …) or `interrupted`.
    pub termination: String,
    /// A compact, evaluator-facing summary of the evidence, of the opcode's shape (one type
    /// per opcode in `artifacts::evidence`, read with `StepManifest::evidence`).
    #[schemars(schema_with = "super::evidence::summary_schema")]
    pub evidence_summary: serde_json::Value,
    /// The artifacts, by role.
    pub artifacts: Vec<ArtifactEntry>,
    /// Where the visit's time went (RUN_AGENT); absent for other opcodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timings_ms: Option<StepTimings>,
}

/// Where a RUN_AGENT visit's time went, in milliseconds. The rest of the visit, from its
/// `step_started` event to the next visit's, is the conductor's own work: events, artifacts,
/// the policy check, the checkpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepTimings {
    /// The agent's processes, from the leader's start to the end of the final sweep.
    pub agent: f64,
    /// The workspace's git work: pre-step snapshot, protected-ref guard and check, capture.
    pub workspace: f64,
}

impl StepManifest {
    /// The first artifact with a role.
    pub fn artifact(&self, role: ArtifactRole) -> Option<&ArtifactEntry> {
        self.artifacts.iter().find(|entry| entry.role == role)
    }
}

/// `inputs.json` of an agent step's visit: the inputs its prompt was rendered with, written
/// before the agent starts (`tnh context` shows them to the agent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PromptInputs {
    /// The format's version.
    pub schema_version: u32,
    /// The step.
    pub step_id: String,
    /// The prompt reference (`family.name.vN`); `null` for literal prompt text.
    pub prompt: Option<String>,
    /// Name → value, as given to the prompt (empty for literal prompt text).
    pub inputs: serde_json::Map<String, serde_json::Value>,
}
