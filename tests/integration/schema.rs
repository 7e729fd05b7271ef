//! The published workflow JSON Schema: the committed copy is current, valid fixtures pass it,
//! structurally broken ones fail it, and it names exactly the keys the decoder accepts (both
//! are read from the same document types).

use std::collections::BTreeSet;

use tnh_conductor::document::shape::keys;
use tnh_conductor::workflow::decode_step::{common_step_keys, opcode_keys};
use tnh_conductor::workflow::model::Opcode;
use tnh_conductor::workflow::schema::{self as document, workflow_schema};
use tnh_conductor::workflow::yaml;

use crate::support::{conductor, fixture};

fn fixture_json(relative: &str) -> serde_json::Value {
    let bytes = std::fs::read(fixture(relative)).unwrap();
    yaml::parse(&bytes).unwrap().to_json()
}

#[test]
fn the_committed_schema_is_the_generated_one() {
    let output = conductor().args(["schema", "workflow"]).output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/schemas/workflow.v1.json"
    ))
    .unwrap();
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        committed,
        "schemas/workflow.v1.json is stale: run `cargo run -- schema workflow > schemas/workflow.v1.json`"
    );
    let schema: serde_json::Value = serde_json::from_str(&committed).unwrap();
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
}

#[test]
fn valid_fixtures_pass_the_schema() {
    let validator = jsonschema::validator_for(&workflow_schema()).unwrap();
    for name in [
        "pattern_a_generative_eval",
        "builder_loop",
        "params_script_expressions",
    ] {
        let instance = fixture_json(&format!("workflows/valid/{name}.yaml"));
        let errors: Vec<String> = validator
            .iter_errors(&instance)
            .map(|error| format!("{} at {}", error, error.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{name}: {errors:#?}");
    }
}

#[test]
fn structurally_broken_fixtures_fail_the_schema() {
    let validator = jsonschema::validator_for(&workflow_schema()).unwrap();
    for name in [
        "unknown-key",
        "missing-field",
        "wrong-type",
        "invalid-value",
        "invalid-duration",
        "unknown-outcome",
        "reserved-checkpoint",
    ] {
        let instance = fixture_json(&format!("workflows/invalid/{name}.yaml"));
        assert!(!validator.is_valid(&instance), "{name} passed the schema");
    }
}

fn properties(schema: &serde_json::Value) -> BTreeSet<String> {
    schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect()
}

fn set(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|key| (*key).to_owned()).collect()
}

/// The decoder reads each type's keys as serde spells them, the schema as schemars does: a
/// rename only one of them sees would make them differ.
#[test]
fn schema_and_decoder_accept_the_same_keys() {
    let schema = workflow_schema();
    let definitions = &schema["$defs"];
    assert_eq!(
        properties(&schema),
        set(keys::<document::WorkflowDocument>())
    );
    assert_eq!(
        properties(&definitions["Defaults"]),
        set(keys::<document::Defaults>())
    );
    assert_eq!(
        properties(&definitions["Limits"]),
        set(keys::<document::Limits>())
    );
    assert_eq!(
        properties(&definitions["Param"]),
        set(keys::<document::Param>())
    );
    assert_eq!(
        properties(&definitions["InlinePolicy"]),
        set(keys::<document::InlinePolicy>())
    );
    assert_eq!(
        properties(&definitions["ValidatorSpec"]),
        set(keys::<document::ValidatorSpec>())
    );
    let variants = definitions["Step"]["oneOf"].as_array().unwrap();
    let opcodes: Vec<&str> = variants
        .iter()
        .map(|variant| variant["properties"]["opcode"]["const"].as_str().unwrap())
        .collect();
    assert_eq!(
        opcodes,
        *Opcode::NAMES,
        "the schema's opcodes are the model's"
    );
    for variant in variants {
        let opcode =
            Opcode::parse(variant["properties"]["opcode"]["const"].as_str().unwrap()).unwrap();
        let mut expected = set(common_step_keys());
        expected.extend(set(&opcode_keys(opcode)));
        if opcode == Opcode::Stop {
            // STOP steps have no routes; the decoder accepts the key only to report it.
            expected.remove("routes");
        }
        assert_eq!(properties(variant), expected, "{}", opcode.name());
    }
}

#[test]
fn every_published_schema_compiles_and_real_records_match_it() {
    for name in [
        "workflow",
        "manifest",
        "event",
        "workspace-status",
        "policy-summary",
        "rollback-record",
        "run-metadata",
        "run-status",
        "harness-report",
        "planner-input",
        "planner-decision",
        "guard-state",
        "runner-metadata",
        "validation-report",
        "gate-request",
        "gate-outcome",
        "planner-attempts",
        "state",
        "process-group",
        "stopped-orphans",
        "runlog-entry",
        "validate-output",
        "run-history",
        "finished-runs",
        "tnh-context",
        "tnh-check",
    ] {
        let output = conductor().args(["schema", name]).output().unwrap();
        assert_eq!(output.status.code(), Some(0), "schema {name}");
        let schema: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        assert!(
            jsonschema::validator_for(&schema).is_ok(),
            "schema {name} does not compile"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.ndjson");
    let mut log =
        tnh_conductor::artifacts::EventLog::open(&path, "20260101T000000Z-abcdef").unwrap();
    let payload = tnh_conductor::artifacts::event_payload::StepCompleted {
        outcome: Some(tnh_conductor::outcome::Outcome::Completed),
        ..Default::default()
    };
    log.append(
        Some(("implement", 2)),
        tnh_conductor::artifacts::EventPayload::StepCompleted(payload),
    )
    .unwrap();
    let output = conductor().args(["schema", "event"]).output().unwrap();
    let validator =
        jsonschema::validator_for(&serde_json::from_slice(&output.stdout).unwrap()).unwrap();
    let line: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&path).unwrap().trim()).unwrap();
    assert!(validator.is_valid(&line), "{line}");
    let mut broken = line.clone();
    broken["event_type"] = serde_json::json!("step_exploded");
    assert!(!validator.is_valid(&broken));
}

/// Every record format's schema is committed under `schemas/records/` as `schema NAME` prints
/// it: a change to a record's shape (or to the words describing it) shows in review, and
/// readers of the repository find every format without building it.
#[test]
fn every_record_schema_is_committed_as_generated() {
    let help = conductor().args(["schema", "--help"]).output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let names: BTreeSet<String> = help
        .lines()
        .skip_while(|line| !line.contains("Possible values:"))
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.trim().strip_prefix("- "))
        .filter_map(|line| line.split(':').next())
        .filter(|name| *name != "workflow")
        .map(str::to_owned)
        .collect();
    assert!(names.len() > 20, "{help}");
    let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/records");
    let committed: BTreeSet<String> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|entry| {
            let name = entry.unwrap().file_name().into_string().unwrap();
            name.trim_end_matches(".json").to_owned()
        })
        .collect();
    assert_eq!(
        committed, names,
        "schemas/records/ holds one file a schema name"
    );
    for name in &names {
        let output = conductor().args(["schema", name]).output().unwrap();
        let file = folder.join(format!("{name}.json"));
        assert_eq!(
            String::from_utf8(output.stdout).unwrap(),
            std::fs::read_to_string(&file).unwrap(),
            "{} is stale: run `cargo run -- schema {name} > schemas/records/{name}.json`",
            file.display()
        );
    }
}
