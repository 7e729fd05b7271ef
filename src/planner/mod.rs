//! The planner contract: the decision an EVALUATE gets back, the deterministic `rules`
//! planner, the guard every backend's answer passes through, and decision vectors.
//!
//! The guard may raise a status (unsafe > needs_human > blocked > partial > success), never
//! lower it: whatever a model answers, a policy violation stays `unsafe` and proposed goldens
//! stay `needs_human`.

pub mod answer_schema;
pub mod backend;
pub mod guard;
pub mod rules;
pub mod vectors;

use serde::{Deserialize, Serialize};

pub use crate::artifacts::{Blocker, Status};

/// What a fix step should do. Only `objective` is required;
/// the lists may be absent or `null` (read as empty). The shipped `task.fix_*` prompts render
/// `objective`, each constraint, each edit's `action`, `target` and `rationale`, and each
/// verification's `command` and `expected_signal`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FixInstructions {
    /// What the fix must achieve.
    pub objective: String,
    /// Limits the fix must respect.
    #[serde(default, deserialize_with = "null_as_empty")]
    #[schemars(with = "Option<Vec<String>>")]
    pub constraints: Vec<String>,
    /// The changes to make.
    #[serde(default, deserialize_with = "null_as_empty")]
    #[schemars(with = "Option<Vec<Edit>>")]
    pub edits: Vec<Edit>,
    /// How to show that the fix worked.
    #[serde(default, deserialize_with = "null_as_empty")]
    #[schemars(with = "Option<Vec<Verification>>")]
    pub verification: Vec<Verification>,
}

/// One change a fix should make.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Edit {
    /// The file or symbol to change.
    pub target: String,
    /// What to do to it.
    pub action: String,
    /// Why.
    pub rationale: String,
}

/// One check that shows a fix worked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Verification {
    /// The command to run.
    pub command: String,
    /// What it shows when the fix worked (`exit 0`).
    pub expected_signal: String,
}

/// A list given as `null` is an empty list.
fn null_as_empty<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(deserializer)?.unwrap_or_default())
}

/// `fix_instructions`, with an error that names the field and the shape it must have.
fn fix_instructions<'de, D>(deserializer: D) -> Result<Option<FixInstructions>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    use serde::de::Error as _;
    let Some(value) = Option::<serde_json::Value>::deserialize(deserializer)? else {
        return Ok(None);
    };
    FixInstructions::deserialize(value).map(Some).map_err(|error| {
        D::Error::custom(format!(
            "`fix_instructions`: {error}; it must be null or an object with a string `objective` and optionally `constraints` (strings), `edits` (objects with string `target`, `action`, `rationale`) and `verification` (objects with string `command`, `expected_signal`)"
        ))
    })
}

/// The planner's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    /// The status the kernel routes on.
    pub status: Status,
    /// The step the planner intends (must be in `allowed_next_steps`).
    #[serde(default)]
    pub next_step: Option<String>,
    /// What a fix step should do: `null`, or an object with a string `objective`.
    // The shipped fix prompts render its fields: an answer of another shape is a failed
    // attempt here, not a fix step that cannot render later.
    #[serde(default, deserialize_with = "fix_instructions")]
    pub fix_instructions: Option<FixInstructions>,
    /// What blocks progress.
    #[serde(default)]
    pub blockers: Vec<Blocker>,
    /// Flags for reviewers.
    #[serde(default)]
    pub risk_flags: Vec<String>,
    /// The record format, on saved decisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_version: Option<u32>,
    /// The planner profile asked, on saved decisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planner: Option<String>,
    /// Who decided (`rules`, the profile, or `kernel` when the backend failed), on saved decisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
}

impl Decision {
    /// A decision with just a status.
    pub fn status(status: Status) -> Self {
        Self {
            status,
            next_step: None,
            fix_instructions: None,
            blockers: Vec::new(),
            risk_flags: Vec::new(),
            schema_version: None,
            planner: None,
            decided_by: None,
        }
    }

    /// Raises the status to at least `floor` (never lowers it), adding a flag and a blocker.
    pub fn raise(&mut self, floor: Status, flag: &str, summary: String) {
        if self.status < floor {
            self.status = floor;
        }
        if !self.risk_flags.iter().any(|existing| existing == flag) {
            self.risk_flags.push(flag.to_owned());
        }
        if !self.blockers.iter().any(|blocker| blocker.code == flag) {
            self.blockers.push(Blocker {
                code: flag.to_owned(),
                summary,
                evidence_ref: None,
                severity: Some(floor.severity().into()),
            });
        }
    }
}

/// The JSON Schema of planner decisions (`tnh-conductor schema planner-decision`).
pub fn decision_schema() -> serde_json::Value {
    schemars::schema_for!(Decision).to_value()
}

/// The JSON Schema of the planner's input envelope (`tnh-conductor schema planner-input`).
pub fn input_schema() -> serde_json::Value {
    let strings = serde_json::json!({ "type": "array", "items": { "type": "string" } });
    serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "PlannerInput",
        "description": "The envelope an EVALUATE step sends its planner.",
        "type": "object",
        "required": ["run_id", "workflow_id", "step_id", "evaluate_prompt", "allowed_next_steps", "provenance_window", "evidence"],
        "properties": {
            "schema_version": { "type": "integer", "const": 1, "description": "set on envelopes the kernel saves" },
            "inputs": { "description": "the EVALUATE step's own `inputs`, computed (`expects_changes: false` tells the guard the judged step was not meant to change code)" },
            "steps": {
                "type": "array",
                "description": "the steps completed since the previous EVALUATE, oldest first",
                "items": { "type": "object", "required": ["step_id", "opcode", "outcome"] }
            },
            "intent": {
                "type": ["object", "null"],
                "description": "what the last RUN_AGENT was asked: its prompt reference, the inputs it names, the rendered prompt's path"
            },
            "evaluation_history": {
                "type": "array",
                "description": "the run's earlier evaluations (status, blocker codes, risk flags, the worktree fingerprint they judged), oldest first",
                "items": {
                    "type": "object",
                    "properties": {
                        "step_id": { "type": "string" },
                        "visit": { "type": "integer" },
                        "status": { "type": "string" },
                        "blocker_codes": strings,
                        "risk_flags": strings,
                        "worktree_fingerprint": { "type": ["string", "null"] }
                    }
                }
            },
            "run_id": { "type": "string" },
            "workflow_id": { "type": "string" },
            "step_id": { "type": "string" },
            "evaluate_prompt": { "type": "string", "description": "prompt reference `id.vN`" },
            "allowed_next_steps": strings,
            "provenance_window": {
                "type": "array",
                "description": "the last K=3 step summaries before this EVALUATE",
                "items": {
                    "type": "object",
                    "required": ["step_id", "opcode", "outcome"],
                    "properties": {
                        "step_id": { "type": "string" },
                        "opcode": { "type": "string" },
                        "outcome": { "type": "string" },
                        "diff_summary": { "type": ["string", "null"] },
                        "risk_flags": strings,
                        "blocker_codes": strings
                    }
                }
            },
            "evidence": {
                "type": "object",
                "required": ["transcript_summary", "workspace_diff_summary", "validation", "artifacts", "policy_events"],
                "properties": {
                    "transcript_summary": { "type": "string" },
                    "workspace_diff_summary": { "type": "string" },
                    "workspace_diffstat": {
                        "type": ["object", "null"],
                        "description": "the last agent step's diffstat, structured (null without one); the guard reads an empty diff from `files_changed`, never from the text",
                        "properties": {
                            "files_changed": { "type": "integer" },
                            "insertions": { "type": "integer" },
                            "deletions": { "type": "integer" },
                            "binary_files": { "type": "integer" }
                        }
                    },
                    "validation": {
                        "type": "object",
                        "required": ["mechanical_outcome", "exit_codes", "timeouts"],
                        "properties": {
                            "mechanical_outcome": { "type": "string" },
                            "exit_codes": { "type": "object", "additionalProperties": { "type": ["integer", "null"] } },
                            "timeouts": strings,
                            "missing_artifacts": { "type": "array", "items": { "type": "string" }, "description": "declared artifacts a validator did not produce (its latest run since the previous EVALUATE)" },
                            "causes": { "type": "object", "additionalProperties": { "type": "string" }, "description": "why each validator that did not complete failed, by validator id (up to 1000 characters each)" }
                        }
                    },
                    "harness_report": {
                        "type": ["object", "null"],
                        "description": "the last harness report since the previous EVALUATE, whole up to 32 KiB of JSON; a larger one keeps `suite_id`, `version`, `generated_at`, `summary`, the first 50 `proposed_goldens`, the cases that did not pass then those that did (long fields shortened) as many as fit, `ux_flags` when they fit, and a `truncated` note (`note`, `report`: the whole report's path in the run directory, `bytes`, `cases_total`, `cases_kept`, `cases_not_passed`)"
                    },
                    "transcript": {
                        "type": ["object", "null"],
                        "description": "the last agent's termination, cause, exit code, turns, cost, permission denials and output tail"
                    },
                    "worktree_fingerprint": { "type": ["string", "null"], "description": "the tree of the worktree being judged" },
                    "summary": { "description": "what the workflow's `summarize(evidence)` returned" },
                    "artifacts": strings,
                    "policy_events": strings
                }
            }
        }
    })
}
