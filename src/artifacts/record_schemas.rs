//! JSON Schemas of the run artifacts written as ad-hoc JSON rather than from a Rust type:
//! `gate_request.json`, `gate_outcome.json`, `validation_report.json` (by the opcode
//! executors), the lines of a step's `runlog.ndjson` (by `tnh runlog append`), and the records
//! a crashed run leaves for `resume`: `process_group.json` (by the supervisor) and
//! `stopped_orphans.json` (by a refused `resume`).
//!
//! They are written by hand, strict (every key required, no other key allowed) so that a key
//! added to or dropped from the writer without the schema fails the test that checks a real
//! run directory against `tnh-conductor schema NAME` (tests/integration/artifact_schemas.rs).
//! Nested values that do come from a type (diffstats, blockers, planner statuses) use that
//! type's derived schema.

use serde_json::{Value, json};

use super::{Blocker, DiffStat, Status};

const DRAFT: &str = "https://json-schema.org/draft/2020-12/schema";

/// The mechanical outcomes a validator (or a RUN_VALIDATION step) ends with.
const VALIDATION_OUTCOMES: [&str; 5] = [
    "completed",
    "error",
    "killed_timeout",
    "killed_idle",
    "killed_policy",
];

/// An object schema whose every property is required and that allows no other key.
fn strict(properties: Value) -> Value {
    let required: Vec<String> = properties
        .as_object()
        .map(|fields| fields.keys().cloned().collect())
        .unwrap_or_default();
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

fn nullable(schema: &Value) -> Value {
    json!({ "anyOf": [schema, { "type": "null" }] })
}

fn schema_version() -> Value {
    json!({ "type": "integer", "const": super::SCHEMA_VERSION })
}

fn visit() -> Value {
    json!({ "type": "integer", "minimum": 1 })
}

fn string() -> Value {
    json!({ "type": "string" })
}

fn strings() -> Value {
    json!({ "type": "array", "items": { "type": "string" } })
}

/// A root schema: `body` with the draft, a title, a description and the `$defs` the derived
/// nested types need.
fn root(
    title: &str,
    description: &str,
    body: Value,
    generator: schemars::SchemaGenerator,
) -> Value {
    let mut schema = json!({ "$schema": DRAFT, "title": title, "description": description });
    if let (Value::Object(fields), Value::Object(extra)) = (&mut schema, body) {
        fields.extend(extra);
        let definitions = generator.definitions().clone();
        if !definitions.is_empty() {
            fields.insert("$defs".into(), Value::Object(definitions));
        }
    }
    schema
}

fn generator() -> schemars::SchemaGenerator {
    schemars::generate::SchemaSettings::draft2020_12().into_generator()
}

/// The schema of `gate_request.json`: what a GATE asks a reviewer, with the review context.
pub fn gate_request_schema() -> Value {
    let mut generator = generator();
    let diffstat = generator.subschema_for::<DiffStat>().to_value();
    let status = generator.subschema_for::<Status>().to_value();
    let blockers = generator.subschema_for::<Vec<Blocker>>().to_value();
    let last_step = strict(json!({
        "step_id": string(),
        "visit": visit(),
        "diff": { "type": "string", "description": "the step's workspace.diff, relative to the run directory" },
        "diffstat": nullable(&diffstat),
    }));
    let planner = strict(json!({
        "path": { "type": "string", "description": "the decision, relative to the run directory" },
        "status": status,
        "risk_flags": strings(),
        "blockers": blockers,
    }));
    let run_beside = strict(json!({
        "run_id": string(),
        "visits": { "type": "array", "items": string(), "description": "`step#visit` of this run's agent and validation steps it was driven beside" },
    }));
    let context = strict(json!({
        "runs_beside": {
            "type": "array",
            "items": run_beside,
            "description": "other runs driven while this run's steps ran: their agents could have written into this run's worktree, which the diff shows as this run's change",
        },
        "diffstat": diffstat,
        "diff": { "type": "string", "description": "run.diff (the whole change of the run), relative to the run directory" },
        "last_step": nullable(&last_step),
        "planner": nullable(&planner),
        "transcript": nullable(&string()),
        "worktree": string(),
    }));
    let body = strict(json!({
        "schema_version": schema_version(),
        "run_id": string(),
        "step_id": string(),
        "visit": visit(),
        "gate": { "enum": ["requires_approval", "blocking_approval", "queue_for_review", "requires_daily_review"] },
        "blocking": { "type": "boolean" },
        "reason": string(),
        "required_decision": { "enum": ["approve or reject", "review"] },
        "approvers": strings(),
        "requested_at": { "type": "string", "description": "RFC 3339 UTC" },
        "deadline": nullable(&json!({ "type": "string", "description": "RFC 3339 UTC" })),
        "context": context,
    }));
    root(
        "GateRequest",
        "`gate_request.json`: what a GATE step asks its reviewers, and the review context.",
        body,
        generator,
    )
}

/// The schema of `gate_outcome.json`: how a blocking gate was decided.
pub fn gate_outcome_schema() -> Value {
    let body = strict(json!({
        "schema_version": schema_version(),
        "run_id": string(),
        "step_id": string(),
        "visit": visit(),
        "decision": { "enum": ["gate_approved", "gate_rejected", "gate_timed_out"] },
        "reviewer": nullable(&string()),
        "comment": nullable(&string()),
        "decided_at": { "type": "string", "description": "RFC 3339 UTC" },
    }));
    root(
        "GateOutcome",
        "`gate_outcome.json`: the decision on a blocking gate (approve, reject, or its deadline).",
        body,
        generator(),
    )
}

/// The schema of `validation_report.json`: each validator of a RUN_VALIDATION visit, by id.
pub fn validation_report_schema() -> Value {
    let outcome = json!({ "enum": VALIDATION_OUTCOMES });
    let noted_paths = json!({
        "type": "array",
        "items": strict(json!({ "path": string(), "reason": string() })),
    });
    let ran = strict(json!({
        "argv": strings(),
        "cwd": string(),
        "detected": { "type": "boolean", "description": "detected from the worktree rather than configured" },
        "outcome": outcome,
        "cause": string(),
        "exit_code": nullable(&json!({ "type": "integer" })),
        "signal": nullable(&json!({ "type": "integer" })),
        "duration_ms": { "type": "integer", "minimum": 0 },
        "timeout_ms": nullable(&json!({ "type": "integer", "minimum": 0 })),
        "artifacts": strings(),
        "missing_artifacts": strings(),
        "refused_artifacts": noted_paths,
        "skipped_artifacts": noted_paths,
        "harness_report": nullable(&string()),
        "proposed_goldens": { "type": "boolean" },
        "network": string(),
        "dropped_env": strings(),
    }));
    let not_started = strict(json!({
        "outcome": outcome,
        "cause": string(),
        "exit_code": { "type": "null" },
        "network": { "const": "not run" },
    }));
    let unresolved = strict(json!({
        "status": { "enum": ["not_configured", "not_run"] },
        "cause": string(),
        "exit_code": { "type": "null" },
    }));
    let ran_report = strict(json!({
        "schema_version": schema_version(),
        "outcome": outcome,
        "validators": { "type": "object", "additionalProperties": { "oneOf": [ran, not_started] } },
    }));
    let refused_report = strict(json!({
        "schema_version": schema_version(),
        "status": { "const": "not_configured" },
        "validators": { "type": "object", "additionalProperties": unresolved },
    }));
    let body = json!({ "oneOf": [ran_report, refused_report] });
    root(
        "ValidationReport",
        "`validation_report.json`: each validator of a RUN_VALIDATION visit by id — how it ran, or (status `not_configured`) why the step could not start.",
        body,
        generator(),
    )
}

/// The schema of one line of a step's `runlog.ndjson`, appended by `tnh runlog append`.
pub fn runlog_entry_schema() -> Value {
    let body = strict(json!({
        "schema_version": schema_version(),
        "timestamp": { "type": "string", "description": "RFC 3339 UTC" },
        "kind": { "enum": ["note", "decision", "blocker", "question"] },
        "message": string(),
        "ref": nullable(&json!({ "type": "string", "description": "a file or artifact the entry refers to" })),
        "step_id": nullable(&string()),
    }));
    root(
        "RunlogEntry",
        "One line of an agent step's `runlog.ndjson` (`tnh runlog append`).",
        body,
        generator(),
    )
}

/// The schema of `process_group.json`: a step's process group, recorded while its agent,
/// validator or planner runs, for `resume` to end it after a crash.
pub fn process_group_schema() -> Value {
    let body = strict(json!({
        "schema_version": schema_version(),
        "pgid": { "type": "integer", "minimum": 1, "description": "the group id: the leader's pid" },
        "session": { "type": "integer", "description": "the session the group was made in" },
        "leader_started": { "type": "integer", "minimum": 0, "description": "the leader's start time, in clock ticks since boot (/proc/PID/stat)" },
        "boot_id": { "type": "string", "description": "the kernel's boot id (/proc/sys/kernel/random/boot_id); empty when unreadable" },
    }));
    root(
        "ProcessGroup",
        "`process_group.json`: a step's process group while its agent, validator or planner runs, so that `resume` after a crash ends what is left of it. Removed once its processes are gone. A record an older release wrote has no `schema_version`; it is still read.",
        body,
        generator(),
    )
}

/// The schema of `stopped_orphans.json`: the pids a refused `resume` killed for the visit.
pub fn stopped_orphans_schema() -> Value {
    let body = strict(json!({
        "schema_version": schema_version(),
        "pids": { "type": "array", "items": { "type": "integer", "minimum": 1 } },
    }));
    root(
        "StoppedOrphans",
        "`stopped_orphans.json`: the pids a refused `resume` killed for the interrupted visit, kept until the visit's `step_interrupted` event lists them. An older release wrote a bare list of pids; it is still read.",
        body,
        generator(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schemas_compile() {
        for schema in [
            gate_request_schema(),
            gate_outcome_schema(),
            validation_report_schema(),
            runlog_entry_schema(),
            process_group_schema(),
            stopped_orphans_schema(),
        ] {
            assert!(jsonschema::validator_for(&schema).is_ok(), "{schema}");
        }
    }

    #[test]
    fn a_gate_outcome_with_an_unknown_key_is_refused() {
        let validator = jsonschema::validator_for(&gate_outcome_schema()).unwrap();
        let mut outcome = json!({
            "schema_version": 1, "run_id": "r", "step_id": "g", "visit": 1,
            "decision": "gate_approved", "reviewer": null, "comment": null, "decided_at": "t",
        });
        assert!(validator.is_valid(&outcome));
        outcome["approved_by_planner"] = json!(true);
        assert!(!validator.is_valid(&outcome));
    }
}
