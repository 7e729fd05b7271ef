//! `planner_input.json`: the envelope an EVALUATE step sends its planner, written by the
//! kernel and read by the rules planner and the guard (and by hand-written decision vectors).
//!
//! Every field reads with a default so that a partial envelope (a vector written by hand, an
//! older record) is judged on what it holds, as the guard always did; the published schema
//! still requires what the kernel always writes (see the `required_*` transforms).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Blocker, Decision, Status, lenient};
use crate::artifacts::DiffStat;
use crate::runner::TailLine;
use crate::runner::artifacts::PermissionDenial;

/// The envelope.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(
    title = "PlannerInput",
    description = "The envelope an EVALUATE step sends its planner.",
    transform = required_envelope
)]
pub struct PlannerInput {
    /// Set on envelopes the kernel saves.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::value"
    )]
    #[schemars(with = "SchemaVersion")]
    pub schema_version: Option<u32>,
    /// The run.
    #[serde(default, deserialize_with = "lenient::value")]
    pub run_id: String,
    /// The workflow.
    #[serde(default, deserialize_with = "lenient::value")]
    pub workflow_id: String,
    /// The EVALUATE step.
    #[serde(default, deserialize_with = "lenient::value")]
    pub step_id: String,
    /// Prompt reference `id.vN`.
    #[serde(default, deserialize_with = "lenient::value")]
    pub evaluate_prompt: String,
    /// The steps the planner may name as `next_step`.
    #[serde(default, deserialize_with = "lenient::strings")]
    pub allowed_next_steps: Vec<String>,
    /// The last K=3 step summaries before this EVALUATE.
    #[serde(default, deserialize_with = "lenient::items")]
    pub provenance_window: Vec<WindowEntry>,
    /// The steps completed since the previous EVALUATE, oldest first. Absent from a
    /// hand-written envelope, which then says nothing about what ran.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::optional_items"
    )]
    #[schemars(with = "Vec<StepEntry>")]
    pub steps: Option<Vec<StepEntry>>,
    /// What the last RUN_AGENT was asked: its prompt reference, the inputs it names, the
    /// rendered prompt's path.
    #[serde(default, deserialize_with = "lenient::value")]
    pub intent: Option<Intent>,
    /// The run's earlier evaluations (status, blocker codes, risk flags, the worktree
    /// fingerprint they judged), oldest first. Absent from a hand-written envelope, whose
    /// window's evaluations stand in for it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::optional_items"
    )]
    #[schemars(with = "Vec<HistoryEntry>")]
    pub evaluation_history: Option<Vec<HistoryEntry>>,
    /// The EVALUATE step's own `inputs`, computed (`expects_changes: false` tells the guard
    /// the judged step was not meant to change code).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::value"
    )]
    pub inputs: Option<serde_json::Value>,
    /// What the steps since the previous EVALUATE left.
    #[serde(default, deserialize_with = "lenient::value")]
    pub evidence: Evidence,
}

/// `schema_version`'s schema: the one version there is.
#[derive(schemars::JsonSchema)]
#[schemars(transform = version_constant)]
#[allow(dead_code)]
struct SchemaVersion(u32);

fn version_constant(schema: &mut schemars::Schema) {
    schema.insert("const".into(), crate::artifacts::SCHEMA_VERSION.into());
    schema.remove("format");
    schema.remove("minimum");
}

/// One step of the provenance window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(transform = required_step)]
pub struct WindowEntry {
    /// The step.
    #[serde(default, deserialize_with = "lenient::value")]
    pub step_id: String,
    /// Its opcode (`RUN_AGENT`, `EVALUATE`, …).
    #[serde(default, deserialize_with = "lenient::value")]
    pub opcode: String,
    /// How it ended: the mechanical outcome, or an EVALUATE's status.
    #[serde(default, deserialize_with = "lenient::value")]
    pub outcome: String,
    /// Its diffstat as one line (`2 files changed, +10 -1`, `no changes`).
    #[serde(default, deserialize_with = "lenient::value")]
    pub diff_summary: Option<String>,
    /// An EVALUATE's risk flags.
    #[serde(default, deserialize_with = "lenient::strings")]
    pub risk_flags: Vec<String>,
    /// An EVALUATE's blocker codes.
    #[serde(default, deserialize_with = "lenient::strings")]
    pub blocker_codes: Vec<String>,
    /// Its evidence summary, whole up to 16 KiB of JSON, else an `omitted` note.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::value"
    )]
    pub summary: Option<serde_json::Value>,
}

/// One step completed since the previous EVALUATE.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(transform = required_step)]
pub struct StepEntry {
    /// The step.
    #[serde(default, deserialize_with = "lenient::value")]
    pub step_id: String,
    /// Its visit.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::value"
    )]
    #[schemars(with = "u32")]
    pub visit: Option<u32>,
    /// Its opcode.
    #[serde(default, deserialize_with = "lenient::value")]
    pub opcode: String,
    /// How it ended.
    #[serde(default, deserialize_with = "lenient::value")]
    pub outcome: String,
}

/// An earlier evaluation of the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HistoryEntry {
    /// The EVALUATE step.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::value"
    )]
    #[schemars(with = "String")]
    pub step_id: Option<String>,
    /// Its visit.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::value"
    )]
    #[schemars(with = "u32")]
    pub visit: Option<u32>,
    /// The status it decided.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::value"
    )]
    #[schemars(with = "String")]
    pub status: Option<String>,
    /// Its blockers' codes.
    #[serde(default, deserialize_with = "lenient::strings")]
    pub blocker_codes: Vec<String>,
    /// Its risk flags.
    #[serde(default, deserialize_with = "lenient::strings")]
    pub risk_flags: Vec<String>,
    /// The tree of the worktree it judged.
    #[serde(default, deserialize_with = "lenient::value")]
    pub worktree_fingerprint: Option<String>,
}

/// What the last agent step was asked. Only `step_id` when the workflow no longer names that
/// step an agent step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Intent {
    /// The agent step.
    #[serde(default, deserialize_with = "lenient::value")]
    pub step_id: String,
    /// Its visit.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::value"
    )]
    #[schemars(with = "u32")]
    pub visit: Option<u32>,
    /// The agent profile.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::value"
    )]
    #[schemars(with = "String")]
    pub agent: Option<String>,
    /// The prompt reference, or `inline`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::value"
    )]
    #[schemars(with = "String")]
    pub prompt: Option<String>,
    /// The inputs the step names.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::value"
    )]
    #[schemars(with = "Vec<String>")]
    pub inputs: Option<Vec<String>>,
    /// The rendered prompt as sent, relative to the run directory (`null` when not saved).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    #[schemars(with = "Option<String>")]
    pub rendered_prompt: Option<Option<String>>,
}

/// A field that is there, `null` or not: absent is the outer `None`.
fn present<'de, D>(deserializer: D) -> Result<Option<Option<String>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    lenient::value::<D, Option<String>>(deserializer).map(Some)
}

/// The evidence of the steps since the previous EVALUATE.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(transform = required_evidence)]
pub struct Evidence {
    /// The tree of the worktree being judged.
    #[serde(default, deserialize_with = "lenient::value")]
    pub worktree_fingerprint: Option<String>,
    /// The last agent's final response, bounded (its claims, for the contradiction checks).
    #[serde(default, deserialize_with = "lenient::value")]
    pub transcript_summary: String,
    /// The last agent's termination, cause, exit code, turns, cost, permission denials and
    /// output tail.
    #[serde(default, deserialize_with = "lenient::value")]
    pub transcript: Option<Transcript>,
    /// The last agent step's diffstat as one line.
    #[serde(default, deserialize_with = "lenient::value")]
    pub workspace_diff_summary: String,
    /// The last agent step's diffstat, structured (null without one); the guard reads an
    /// empty diff from `files_changed`, never from the text.
    #[serde(default, deserialize_with = "lenient::value")]
    pub workspace_diffstat: Option<DiffStat>,
    /// The validation summary.
    #[serde(default, deserialize_with = "lenient::value")]
    pub validation: Validation,
    /// The last harness report since the previous EVALUATE, whole up to 32 KiB of JSON; a
    /// larger one keeps `suite_id`, `version`, `generated_at`, `summary`, the first 50
    /// `proposed_goldens`, the cases that did not pass then those that did (long fields
    /// shortened) as many as fit, `ux_flags` when they fit, and a `truncated` note (`note`,
    /// `report`: the whole report's path in the run directory, `bytes`, `cases_total`,
    /// `cases_kept`, `cases_not_passed`).
    // The harness's own document, cut to a bound: its fields are the harness's, not ours.
    #[serde(default, deserialize_with = "lenient::value")]
    #[schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")]
    pub harness_report: Option<serde_json::Value>,
    /// The artifacts of the steps since the previous EVALUATE.
    #[serde(default, deserialize_with = "lenient::strings")]
    pub artifacts: Vec<String>,
    /// Policy or safety events the kernel recorded.
    #[serde(default, deserialize_with = "lenient::strings")]
    pub policy_events: Vec<String>,
    /// What the workflow's `summarize(evidence)` returned.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::value"
    )]
    pub summary: Option<serde_json::Value>,
}

/// The last agent's run in numbers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Transcript {
    /// `completed`, `error`, `killed_timeout`, `killed_idle` or `killed_policy`.
    #[serde(default, deserialize_with = "lenient::value")]
    pub termination: Option<String>,
    /// Why it ended so.
    #[serde(default, deserialize_with = "lenient::value")]
    pub cause: Option<String>,
    /// The agent's exit code, when it exited by itself.
    #[serde(default, deserialize_with = "lenient::value")]
    pub exit_code: Option<i32>,
    /// Model turns, as reported.
    #[serde(default, deserialize_with = "lenient::value")]
    pub turns: Option<u64>,
    /// Cost in US dollars, as reported.
    #[serde(default, deserialize_with = "lenient::value")]
    pub cost_usd: Option<f64>,
    /// Tool uses refused by the permission settings.
    #[serde(default, deserialize_with = "lenient::value")]
    pub permission_denials: Option<Vec<PermissionDenial>>,
    /// The last lines of the agent's output.
    #[serde(default, deserialize_with = "lenient::value")]
    pub tail: Option<Vec<TailLine>>,
}

/// The validation summary: the worst mechanical termination since the previous EVALUATE,
/// the exit codes and timeouts of its validators, what they left missing and why they failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(transform = required_validation)]
pub struct Validation {
    /// `completed`, `error`, `killed_timeout`, …
    #[serde(default = "completed", deserialize_with = "lenient::outcome")]
    pub mechanical_outcome: String,
    /// Each validator's exit code (null when it did not exit by itself).
    #[serde(default, deserialize_with = "lenient::exit_codes")]
    pub exit_codes: BTreeMap<String, Option<i64>>,
    /// The validators killed by their timeout.
    #[serde(default, deserialize_with = "lenient::strings")]
    pub timeouts: Vec<String>,
    /// Declared artifacts a validator did not produce (its latest run since the previous
    /// EVALUATE).
    #[serde(default, deserialize_with = "lenient::strings")]
    pub missing_artifacts: Vec<String>,
    /// Why each validator that did not complete failed, by validator id (up to 1000
    /// characters each).
    #[serde(default, deserialize_with = "lenient::value")]
    pub causes: BTreeMap<String, String>,
}

fn completed() -> String {
    "completed".to_owned()
}

impl Default for Validation {
    fn default() -> Self {
        Self {
            mechanical_outcome: completed(),
            exit_codes: BTreeMap::new(),
            timeouts: Vec::new(),
            missing_artifacts: Vec::new(),
            causes: BTreeMap::new(),
        }
    }
}

/// The evidence summary an EVALUATE visit's manifest carries: the status it routed on, what
/// the planner answered before the guard, the decision as saved, and the worktree it judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EvaluationSummary {
    /// The status the step routed on.
    pub status: Status,
    /// What the backend answered before the guard and the kernel's facts (`null` when the
    /// kernel decided).
    pub planner_status: Option<Status>,
    /// The decision as saved in `planner_decision.json`.
    pub decision: Decision,
    /// The tree of the worktree it judged.
    pub worktree_fingerprint: Option<String>,
}

impl EvaluationSummary {
    /// The codes of the decision's blockers.
    pub fn blocker_codes(&self) -> Vec<String> {
        self.decision
            .blockers
            .iter()
            .map(|blocker: &Blocker| blocker.code.clone())
            .collect()
    }
}

/// A note in place of a value too large (or unreadable) to send: `{"omitted": "why"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Omitted {
    /// Why the value is not there, and where the whole of it is.
    pub omitted: String,
}

impl Omitted {
    /// The note, as the JSON value it stands in for.
    pub fn note(omitted: String) -> serde_json::Value {
        serde_json::to_value(Self { omitted }).unwrap_or_default()
    }
}

impl PlannerInput {
    /// Reads an envelope: each field absent, or of another shape than the kernel writes, as
    /// its default; anything but an object as an empty envelope.
    pub fn read(value: &serde_json::Value) -> Self {
        if !value.is_object() {
            return Self::default();
        }
        Self::deserialize(value).unwrap_or_default()
    }
}

/// Marks `names` required in an object schema: what the kernel always writes, while the
/// readers take a missing one as its default.
fn require(schema: &mut schemars::Schema, names: &[&str]) {
    let names: Vec<serde_json::Value> = names.iter().map(|name| (*name).into()).collect();
    schema.insert("required".into(), names.into());
}

fn required_envelope(schema: &mut schemars::Schema) {
    require(
        schema,
        &[
            "run_id",
            "workflow_id",
            "step_id",
            "evaluate_prompt",
            "allowed_next_steps",
            "provenance_window",
            "evidence",
        ],
    );
}

fn required_step(schema: &mut schemars::Schema) {
    require(schema, &["step_id", "opcode", "outcome"]);
}

fn required_evidence(schema: &mut schemars::Schema) {
    require(
        schema,
        &[
            "transcript_summary",
            "workspace_diff_summary",
            "validation",
            "artifacts",
            "policy_events",
        ],
    );
}

fn required_validation(schema: &mut schemars::Schema) {
    require(schema, &["mechanical_outcome", "exit_codes", "timeouts"]);
}

/// The JSON Schema of the planner's input envelope (`tnh-conductor schema planner-input`).
pub fn input_schema() -> serde_json::Value {
    schemars::schema_for!(PlannerInput).to_value()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An envelope as the kernel writes it (every key it writes, an agent step and a
    /// validation step since the previous evaluation, `inputs` and a `summarize` result).
    fn written() -> serde_json::Value {
        serde_json::json!({
            "schema_version": 1,
            "run_id": "20261121T000000Z-abcdef",
            "workflow_id": "implement_adr",
            "step_id": "judge",
            "evaluate_prompt": "planner.evaluate_step.v1",
            "allowed_next_steps": ["fix", "gate"],
            "provenance_window": [
                {"step_id": "judge", "opcode": "EVALUATE", "outcome": "partial",
                 "diff_summary": null, "risk_flags": ["checks_failed"],
                 "blocker_codes": ["checks_failed"], "summary": {"status": "partial"}},
                {"step_id": "fix", "opcode": "RUN_AGENT", "outcome": "completed",
                 "diff_summary": "1 files changed, +3 -1", "risk_flags": [],
                 "blocker_codes": [], "summary": {"omitted": "too large"}}
            ],
            "steps": [
                {"step_id": "fix", "visit": 1, "opcode": "RUN_AGENT", "outcome": "completed"},
                {"step_id": "check", "visit": 2, "opcode": "RUN_VALIDATION", "outcome": "error"}
            ],
            "intent": {"step_id": "fix", "visit": 1, "agent": "claude",
                "prompt": "task.fix.v1", "inputs": ["objective"], "rendered_prompt": null},
            "evaluation_history": [
                {"step_id": "judge", "visit": 1, "status": "partial",
                 "blocker_codes": ["checks_failed"], "risk_flags": ["checks_failed"],
                 "worktree_fingerprint": null}
            ],
            "inputs": {"expects_changes": false},
            "evidence": {
                "worktree_fingerprint": "4b825dc6",
                "transcript_summary": "Fixed the parser.",
                "transcript": {"termination": "completed", "cause": "exited 0", "exit_code": 0,
                    "turns": 3, "cost_usd": 0.25, "permission_denials": [],
                    "tail": [{"stream": "stdout", "text": "done"}]},
                "workspace_diff_summary": "1 files changed, +3 -1",
                "workspace_diffstat": {"files_changed": 1, "insertions": 3, "deletions": 1, "binary_files": 0},
                "validation": {"mechanical_outcome": "error", "exit_codes": {"tests": 1, "lint": null},
                    "timeouts": [], "missing_artifacts": ["out.xml"], "causes": {"tests": "exited 1"}},
                "harness_report": {"suite_id": "s", "cases": [{"id": "a", "status": "failed"}],
                    "summary": {"failed": 1}, "extra": true},
                "artifacts": ["artifacts/fix/1/runner_metadata.json"],
                "policy_events": [],
                "summary": {"short": "failed"}
            }
        })
    }

    #[test]
    fn an_envelope_the_kernel_wrote_reads_back_and_writes_the_same_keys() {
        let record = written();
        let input = PlannerInput::read(&record);
        assert_eq!(input.evidence.validation.exit_codes["lint"], None);
        assert_eq!(serde_json::to_value(&input).unwrap(), record);
        // Without an agent step: `intent`, `transcript` and the diffstat are null, and stay.
        let mut bare = record;
        bare["intent"] = serde_json::Value::Null;
        bare["evidence"]["transcript"] = serde_json::Value::Null;
        bare["evidence"]["workspace_diffstat"] = serde_json::Value::Null;
        bare["evidence"]["harness_report"] = serde_json::Value::Null;
        bare.as_object_mut().unwrap().remove("inputs");
        bare["evidence"].as_object_mut().unwrap().remove("summary");
        let input = PlannerInput::read(&bare);
        assert_eq!(serde_json::to_value(&input).unwrap(), bare);
    }

    #[test]
    fn an_envelope_the_kernel_wrote_is_valid_against_its_schema() {
        let validator = jsonschema::validator_for(&input_schema()).unwrap();
        let problems: Vec<String> = validator
            .iter_errors(&written())
            .map(|error| error.to_string())
            .collect();
        assert!(problems.is_empty(), "{problems:?}");
        for required in ["run_id", "evidence", "provenance_window"] {
            let mut missing = written();
            missing.as_object_mut().unwrap().remove(required);
            assert!(!validator.is_valid(&missing), "{required}");
        }
    }

    /// A hand-written envelope lacks what the kernel always writes: each absent field reads
    /// as its default, and an absent `steps` or history stays absent (it means "unknown").
    #[test]
    fn a_partial_envelope_reads_with_defaults() {
        let input = PlannerInput::read(&serde_json::json!({"evidence": {"policy_events": ["x"]}}));
        assert_eq!(input.evidence.policy_events, ["x"]);
        assert_eq!(input.evidence.validation.mechanical_outcome, "completed");
        assert_eq!(input.steps, None);
        assert_eq!(input.evaluation_history, None);
        // A field of another shape reads as its default; the others are still read.
        let input = PlannerInput::read(&serde_json::json!({
            "steps": "none",
            "evidence": {"policy_events": [{"path": ".git/config"}], "validation": {
                "mechanical_outcome": 3, "exit_codes": {"tests": "one", "lint": 2}}},
            "provenance_window": [7, {"step_id": "fix", "opcode": "RUN_AGENT", "outcome": "completed"}],
        }));
        assert_eq!(input.steps, None);
        assert_eq!(input.evidence.policy_events, [r#"{"path":".git/config"}"#]);
        assert_eq!(input.evidence.validation.mechanical_outcome, "completed");
        assert_eq!(
            input.evidence.validation.exit_codes,
            BTreeMap::from([("lint".to_owned(), Some(2)), ("tests".to_owned(), None)])
        );
        assert_eq!(input.provenance_window.len(), 2);
        assert_eq!(input.provenance_window[1].step_id, "fix");
        assert_eq!(
            PlannerInput::read(&serde_json::json!([1, 2])),
            PlannerInput::default()
        );
    }

    #[test]
    fn an_evaluation_summary_the_kernel_wrote_reads_back_and_writes_the_same_keys() {
        let record = serde_json::json!({
            "status": "needs_human",
            "planner_status": "success",
            "decision": {
                "status": "needs_human", "next_step": "gate", "fix_instructions": null,
                "blockers": [{"code": "proposed_goldens_present", "summary": "a human approves goldens",
                    "evidence_ref": null, "severity": "high"}],
                "risk_flags": ["proposed_goldens_present"],
                "schema_version": 1, "planner": "rules", "decided_by": "rules"
            },
            "worktree_fingerprint": "4b825dc6",
        });
        let summary = EvaluationSummary::deserialize(&record).unwrap();
        assert_eq!(summary.blocker_codes(), ["proposed_goldens_present"]);
        assert_eq!(serde_json::to_value(&summary).unwrap(), record);
    }
}
