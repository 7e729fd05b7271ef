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
        read(&self.evidence_summary)
    }

    /// The change the step itself made, when its opcode records one (an agent step's, or a
    /// validation's that changed something).
    pub fn step_diffstat(&self) -> Option<DiffStat> {
        match self.opcode.as_str() {
            "RUN_AGENT" => self.evidence::<AgentEvidence>().diffstat,
            "RUN_VALIDATION" => self.evidence::<ValidationEvidence>().diffstat,
            _ => None,
        }
    }

    /// The run's change as the step saw it: against the run's base where the step recorded
    /// that (an agent step, a gate), else the step's own change.
    pub fn run_diffstat(&self) -> Option<DiffStat> {
        match self.opcode.as_str() {
            "RUN_AGENT" => {
                let agent = self.evidence::<AgentEvidence>();
                agent.run_diffstat.or(agent.diffstat)
            }
            "GATE" => self.evidence::<GateEvidence>().run_diffstat,
            _ => self.step_diffstat(),
        }
    }
}

/// A summary read as `T`: its default when the summary has another shape.
pub fn read<T: EvidenceSummary>(summary: &serde_json::Value) -> T {
    T::deserialize(summary).unwrap_or_default()
}

/// A field of a record read as its type, or as its default when it has another shape: for
/// readers that show what they can of a record written by another release.
pub fn lenient<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: DeserializeOwned + Default,
{
    let value = serde_json::Value::deserialize(deserializer)?;
    Ok(T::deserialize(value).unwrap_or_default())
}

/// A recorded diffstat, its missing counts read as 0 (`null` or another shape as none).
fn lenient_diffstat<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<DiffStat>, D::Error> {
    let value = Option::<serde_json::Value>::deserialize(deserializer)?;
    Ok(value.filter(serde_json::Value::is_object).map(|stat| {
        let count = |key: &str| stat.get(key).and_then(serde_json::Value::as_u64);
        DiffStat {
            files_changed: count("files_changed").unwrap_or(0),
            insertions: count("insertions").unwrap_or(0),
            deletions: count("deletions").unwrap_or(0),
            binary_files: count("binary_files").unwrap_or(0),
        }
    }))
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
    #[serde(deserialize_with = "lenient_diffstat")]
    pub diffstat: Option<DiffStat>,
    /// The worktree against the run's base (absent before it was recorded).
    #[serde(deserialize_with = "lenient_diffstat")]
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
    #[serde(deserialize_with = "lenient_diffstat")]
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
    #[serde(deserialize_with = "lenient_diffstat")]
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
    #[serde(deserialize_with = "lenient_diffstat")]
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
mod tests {
    //! Each summary as its writer produces it reads back and writes the same keys.
    use serde_json::{Value, json};

    use super::*;

    fn manifest(opcode: &str, summary: Value) -> StepManifest {
        StepManifest {
            schema_version: 1,
            step_id: "step".to_owned(),
            opcode: opcode.to_owned(),
            visit: 1,
            started_at: String::new(),
            ended_at: String::new(),
            termination: "completed".to_owned(),
            evidence_summary: summary,
            artifacts: Vec::new(),
            timings_ms: None,
        }
    }

    /// Reads `written` as `T` and checks it writes back the same JSON.
    fn round_trip<T: EvidenceSummary + std::fmt::Debug>(opcode: &str, written: Value) -> T {
        let read: T = manifest(opcode, written.clone()).evidence();
        assert_eq!(summary_value(&read), written);
        read
    }

    fn stat(files: u64) -> Value {
        json!({"files_changed": files, "insertions": 3, "deletions": 1, "binary_files": 0})
    }

    #[test]
    fn an_agent_summary_reads_back_and_writes_the_same_keys() {
        let written = json!({
            "outcome": "completed", "cause": "exited 0", "cost_usd": 0.25,
            "diffstat": stat(2), "run_diffstat": stat(3), "policy_violations": 1,
        });
        let read: AgentEvidence = round_trip("RUN_AGENT", written);
        assert_eq!(read.diffstat.map(|stat| stat.files_changed), Some(2));
        assert_eq!(read.run_diffstat.map(|stat| stat.files_changed), Some(3));
        assert_eq!(read.cost_usd, Some(0.25));
        let no_cost = json!({
            "outcome": "error", "cause": "", "cost_usd": null,
            "diffstat": stat(0), "run_diffstat": stat(0), "policy_violations": 0,
        });
        let read: AgentEvidence = round_trip("RUN_AGENT", no_cost);
        assert_eq!(read.cost_usd, None);
    }

    #[test]
    fn an_older_agent_summary_reads_its_missing_fields_as_defaults() {
        let older = json!({"outcome": "completed", "cause": "exited 0", "diffstat": stat(1)});
        let read: AgentEvidence = manifest("RUN_AGENT", older).evidence();
        assert_eq!(read.run_diffstat, None);
        assert_eq!(read.policy_violations, 0);
        assert_eq!(read.diffstat.map(|stat| stat.files_changed), Some(1));
        let other: AgentEvidence = manifest("RUN_AGENT", json!("not an object")).evidence();
        assert_eq!(other, AgentEvidence::default());
    }

    #[test]
    fn a_validation_summary_reads_back_and_writes_the_same_keys() {
        let written = json!({
            "mechanical_outcome": "killed_timeout",
            "exit_codes": {"lint": 0, "test": null},
            "causes": {"test": "timed out after 5s"},
            "timeouts": ["test"],
            "proposed_goldens": false,
            "policy_violations": 0,
        });
        let read: ValidationEvidence = round_trip("RUN_VALIDATION", written.clone());
        assert_eq!(read.exit_codes.get("test"), Some(&None));
        let mut failed = written;
        failed["step_failed"] = json!("validator `x`: not found");
        failed["diffstat"] = stat(1);
        failed["tool_caches_removed"] = json!(["__pycache__"]);
        let read: ValidationEvidence = round_trip("RUN_VALIDATION", failed);
        assert_eq!(
            read.step_failed.as_deref(),
            Some("validator `x`: not found")
        );
    }

    #[test]
    fn an_evaluation_summary_reads_its_decision_and_old_text_blockers() {
        let written = json!({
            "status": "blocked", "planner_status": "needs_fix",
            "decision": {
                "status": "blocked", "next_step": null, "fix_instructions": null,
                "blockers": [{"code": "tests", "summary": "failing", "evidence_ref": null}],
                "risk_flags": [], "planner": "rules", "decided_by": "rules"
            },
            "worktree_fingerprint": "abc",
        });
        let read: EvaluationEvidence = manifest("EVALUATE", written).evidence();
        assert_eq!(read.status, "blocked");
        assert_eq!(read.planner_status.as_deref(), Some("needs_fix"));
        assert_eq!(read.decision.planner.as_deref(), Some("rules"));
        assert_eq!(
            read.decision.blockers,
            vec![BlockerEvidence::Coded {
                code: "tests".to_owned(),
                summary: "failing".to_owned()
            }]
        );
        let older = json!({"status": "blocked", "decision": {"blockers": ["a text"]}});
        let read: EvaluationEvidence = manifest("EVALUATE", older).evidence();
        assert_eq!(
            read.decision.blockers,
            vec![BlockerEvidence::Text("a text".to_owned())]
        );
    }

    #[test]
    fn gate_and_stop_summaries_read_back_and_write_the_same_keys() {
        let waiting = json!({"gate": "human_approval", "waiting": true, "run_diffstat": stat(1)});
        let read: GateEvidence = round_trip("GATE", waiting);
        assert!(read.waiting && !read.queued_for_review);
        let queued = json!({"gate": "review", "queued_for_review": true, "run_diffstat": stat(0)});
        let read: GateEvidence = round_trip("GATE", queued);
        assert!(read.queued_for_review);
        let stop = json!({"stop": "failure", "reason": {"why": ["any", "value"]}});
        let read: StopEvidence = round_trip("STOP", stop);
        assert_eq!(read.stop, "failure");
        let read: StopEvidence = round_trip("STOP", json!({"stop": "success", "reason": null}));
        assert_eq!(read.reason, None);
    }

    #[test]
    fn rollback_and_interrupted_summaries_keep_the_whole_record() {
        let record = json!({
            "schema_version": 1, "run_id": "r", "target": "last_snapshot",
            "snapshot": {"tree": "t"}, "head_before": "a", "head_after": "b",
            "before": stat(2), "after": stat(0),
        });
        let read: RollbackEvidence = round_trip("ROLLBACK", record.clone());
        assert_eq!(read.target.as_deref(), Some("last_snapshot"));
        assert_eq!(read.before.map(|stat| stat.files_changed), Some(2));
        let failed: RollbackEvidence = round_trip("ROLLBACK", json!({"error": "no snapshot"}));
        assert_eq!(failed.error.as_deref(), Some("no snapshot"));
        let interrupted = json!({"interrupted": true, "cause": "killed", "rollback": record});
        let read: InterruptedEvidence = round_trip("ROLLBACK", interrupted);
        assert_eq!(read.cause, "killed");
        assert!(
            read.rollback
                .is_some_and(|rollback| rollback.before.is_some())
        );
        round_trip::<InterruptedEvidence>("RUN_AGENT", json!({"interrupted": true, "cause": "c"}));
    }
}
