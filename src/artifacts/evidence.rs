//! A visit manifest's `evidence_summary`, one type per opcode. Writers build the opcode's
//! type; readers take it with [`StepManifest::evidence`], which reads a summary of another
//! shape (a manifest of an older release, another opcode's) as the type's default, so a
//! missing field reads as its default.

use std::collections::BTreeMap;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::manifest::StepManifest;
use super::records::DiffStat;

/// A manifest's evidence summary type.
pub trait EvidenceSummary: Serialize + DeserializeOwned + Default {}

impl StepManifest {
    /// The evidence summary read as `T`: its default when the summary has another shape.
    pub fn evidence<T: EvidenceSummary>(&self) -> T {
        T::deserialize(&self.evidence_summary).unwrap_or_default()
    }
}

/// A summary as the JSON a manifest holds.
pub fn summary_value<T: Serialize>(summary: &T) -> serde_json::Value {
    serde_json::to_value(summary).unwrap_or_default()
}

/// RUN_AGENT: how the agent ended, what it cost and changed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct AgentEvidence {
    /// The step's outcome (`completed`, `killed_timeout`, …).
    pub outcome: String,
    /// Why the agent ended, as the runner says it.
    pub cause: String,
    /// What the agent reported it cost, when it did.
    pub cost_usd: Option<f64>,
    /// The worktree against the step's pre-step snapshot.
    pub diffstat: Option<DiffStat>,
    /// The worktree against the run's base (absent before it was recorded).
    pub run_diffstat: Option<DiffStat>,
    /// How many policy violations the step recorded.
    pub policy_violations: usize,
}

impl EvidenceSummary for AgentEvidence {}

/// RUN_VALIDATION: each validator's exit code and what the step found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct ValidationEvidence {
    /// The step's outcome from the validators alone.
    pub mechanical_outcome: String,
    /// Validator → exit code (`null` when it has none).
    pub exit_codes: BTreeMap<String, Option<i64>>,
    /// Validator → why it has no exit code (a timeout, a refused entrypoint).
    pub causes: BTreeMap<String, String>,
    /// The validators that timed out.
    pub timeouts: Vec<String>,
    /// Whether a validator proposed golden files.
    pub proposed_goldens: bool,
    /// How many policy violations the step recorded.
    pub policy_violations: usize,
    /// The validators' change, when they changed something.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diffstat: Option<DiffStat>,
    /// Tool caches the validators left in the worktree, removed before the capture.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_caches_removed: Vec<String>,
    /// The error that stopped the step after the validators before it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_failed: Option<String>,
}

impl EvidenceSummary for ValidationEvidence {}

/// EVALUATE, as a reader sees it (the kernel writes the planner's full summary).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct EvaluationEvidence {
    /// The status the step routed on.
    pub status: String,
    /// What the planner answered before the guard and the kernel's facts (`null` when the
    /// kernel decided).
    pub planner_status: Option<String>,
    /// The decision as saved in `planner_decision.json`.
    pub decision: DecisionEvidence,
    /// The tree of the worktree it judged.
    pub worktree_fingerprint: Option<String>,
}

impl EvidenceSummary for EvaluationEvidence {}

/// What a reader takes of an EVALUATE's decision.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct DecisionEvidence {
    /// The planner profile asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub planner: Option<String>,
    /// Who decided (`kernel` when the planner gave no usable answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// The step the planner intends.
    pub next_step: Option<String>,
    /// What blocks progress.
    pub blockers: Vec<BlockerEvidence>,
}

/// A blocker of a decision: a code and summary, or a bare text (older releases).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum BlockerEvidence {
    /// A bare text.
    Text(String),
    /// A coded blocker.
    Coded {
        /// Its stable code.
        #[serde(default)]
        code: String,
        /// What blocks.
        #[serde(default)]
        summary: String,
    },
}

/// GATE: which gate, and whether it waited or queued its review.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct GateEvidence {
    /// The gate's kind.
    pub gate: String,
    /// The run waited for a decision.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub waiting: bool,
    /// The review was queued for the journal.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub queued_for_review: bool,
    /// The run's change at the gate.
    pub run_diffstat: Option<DiffStat>,
}

impl EvidenceSummary for GateEvidence {}

/// STOP: how the run ended and why.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct StopEvidence {
    /// `success` or `failure`.
    pub stop: String,
    /// The step's `reason`, as its script evaluated it (any JSON value).
    pub reason: Option<serde_json::Value>,
}

impl EvidenceSummary for StopEvidence {}

/// ROLLBACK: the rollback's record (what it undid), or why it could not be done.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct RollbackEvidence {
    /// The requested target.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The changes undone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<DiffStat>,
    /// Why the rollback could not be done (no pre-step snapshot yet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The rest of the rollback's record, as written.
    #[serde(flatten)]
    pub record: serde_json::Map<String, serde_json::Value>,
}

impl EvidenceSummary for RollbackEvidence {}

/// A visit that did not finish (any opcode; termination `interrupted`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct InterruptedEvidence {
    /// Always true.
    pub interrupted: bool,
    /// Why the visit was cut short.
    pub cause: String,
    /// What a rollback undid before it was interrupted, from its record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollback: Option<RollbackEvidence>,
}

impl EvidenceSummary for InterruptedEvidence {}

/// The `evidence_summary` field's schema: an object, one of the opcodes' summaries.
pub(super) fn summary_schema(generator: &mut SchemaGenerator) -> Schema {
    let summaries = [
        generator.subschema_for::<AgentEvidence>(),
        generator.subschema_for::<ValidationEvidence>(),
        generator.subschema_for::<EvaluationEvidence>(),
        generator.subschema_for::<GateEvidence>(),
        generator.subschema_for::<StopEvidence>(),
        generator.subschema_for::<RollbackEvidence>(),
        generator.subschema_for::<InterruptedEvidence>(),
    ];
    json_schema!({
        "description": "A compact, evaluator-facing summary of the evidence: the opcode's \
            summary (an interrupted visit's for termination `interrupted`).",
        "type": "object",
        "anyOf": summaries,
    })
}

/// Ties each opcode to its summary's schema: `if` the manifest is of that opcode (and was not
/// interrupted), `then` its `evidence_summary` is that summary.
pub(super) fn by_opcode(schema: &mut Schema) {
    let rule = |opcode: &str, summary: &str| {
        json_schema!({
            "if": {
                "properties": {
                    "opcode": { "const": opcode },
                    "termination": { "not": { "const": "interrupted" } }
                },
                "required": ["opcode", "termination"]
            },
            "then": {
                "properties": { "evidence_summary": { "$ref": format!("#/$defs/{summary}") } }
            }
        })
        .to_value()
    };
    let interrupted = json_schema!({
        "if": {
            "properties": { "termination": { "const": "interrupted" } },
            "required": ["termination"]
        },
        "then": {
            "properties": {
                "evidence_summary": { "$ref": "#/$defs/InterruptedEvidence" }
            }
        }
    })
    .to_value();
    let rules = vec![
        rule("RUN_AGENT", "AgentEvidence"),
        rule("RUN_VALIDATION", "ValidationEvidence"),
        rule("EVALUATE", "EvaluationEvidence"),
        rule("GATE", "GateEvidence"),
        rule("STOP", "StopEvidence"),
        rule("ROLLBACK", "RollbackEvidence"),
        interrupted,
    ];
    schema.insert("allOf".to_owned(), serde_json::Value::Array(rules));
}

#[cfg(test)]
#[path = "evidence_tests.rs"]
mod tests;
