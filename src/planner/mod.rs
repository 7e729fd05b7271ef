//! The planner contract: the decision an EVALUATE gets back, the deterministic `rules`
//! planner, the guard every backend's answer passes through, and decision vectors.
//!
//! The guard may raise a status (unsafe > needs_human > blocked > partial > success), never
//! lower it: whatever a model answers, a policy violation stays `unsafe` and proposed goldens
//! stay `needs_human`.

pub mod answer_schema;
pub mod backend;
pub mod guard;
pub mod input;
mod lenient;
pub mod rules;
pub mod vectors;

use serde::{Deserialize, Serialize};

pub use crate::artifacts::{Blocker, Status};
pub use input::{EvaluationSummary, PlannerInput};

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

pub use input::input_schema;
