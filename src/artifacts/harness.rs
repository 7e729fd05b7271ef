//! The harness report: what a generated test harness writes for the planner. The
//! kernel checks only its minimal structure — `suite_id`, `cases`, `summary` — against this
//! schema; everything semantic is the planner's.

use std::sync::OnceLock;

use schemars::JsonSchema;

/// A harness report.
#[derive(JsonSchema)]
#[allow(dead_code)]
struct HarnessReport {
    /// Identifier of the suite.
    suite_id: String,
    /// Version of the report format the harness wrote.
    version: Option<String>,
    /// When the harness ran (ISO 8601).
    generated_at: Option<String>,
    /// The cases.
    cases: Vec<serde_json::Value>,
    /// Aggregate counts and timing (`passed`, `failed`, `flaky`, `duration_ms`).
    summary: serde_json::Map<String, serde_json::Value>,
    /// UX and accessibility concerns for human review.
    ux_flags: Option<Vec<serde_json::Value>>,
    /// Golden files the harness proposes to update: a human must approve them.
    proposed_goldens: Option<Vec<String>>,
}

/// The JSON Schema of harness reports (`tnh-conductor schema harness-report`).
pub fn harness_report_schema() -> serde_json::Value {
    schemars::schema_for!(HarnessReport).to_value()
}

/// Checks a report's minimal structure; returns the problems, none when it is valid.
pub fn harness_report_problems(report: &serde_json::Value) -> Vec<String> {
    static VALIDATOR: OnceLock<Option<jsonschema::Validator>> = OnceLock::new();
    let Some(validator) =
        VALIDATOR.get_or_init(|| jsonschema::validator_for(&harness_report_schema()).ok())
    else {
        return Vec::new();
    };
    schema_problems(validator, report)
}

/// What `validator` finds wrong with `value`, each problem with where it is (`… at /path`).
pub(crate) fn schema_problems(
    validator: &jsonschema::Validator,
    value: &serde_json::Value,
) -> Vec<String> {
    validator
        .iter_errors(value)
        .map(|error| {
            let at = error.instance_path().to_string();
            if at.is_empty() {
                error.to_string()
            } else {
                format!("{error} at {at}")
            }
        })
        .collect()
}
