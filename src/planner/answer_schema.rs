//! The schema a model backend is asked to answer in: the fields of a planner decision a model
//! fills, in the subset of JSON Schema that every structured-output mode accepts.
//!
//! The published decision schema (`tnh-conductor schema planner-decision`) describes saved
//! decisions and is written for validators; the model CLIs are stricter. Claude Code's
//! `--json-schema` refuses a schema that declares the draft 2020-12 `$schema` (its validator
//! does not know that meta-schema), and OpenAI structured outputs (`codex --output-schema`,
//! the `http` backend) require `additionalProperties: false` and every property listed in
//! `required` on every object, and refuse `oneOf`, `default` and unknown `format`s. So this
//! schema has no `$schema`, no references, only `type`/`enum`/`anyOf`/`items`, and makes the
//! optional fields nullable instead of absent. Every answer it accepts parses as a
//! [`Decision`](super::Decision).

use serde_json::{Value, json};

/// The answer schema, as a JSON value.
pub fn answer_schema() -> Value {
    let strings = json!({ "type": "array", "items": { "type": "string" } });
    let nullable_string = json!({ "type": ["string", "null"] });
    let edit = object(&[
        (
            "target",
            json!({ "type": "string", "description": "The file or symbol to change." }),
        ),
        (
            "action",
            json!({ "type": "string", "description": "What to do to it." }),
        ),
        (
            "rationale",
            json!({ "type": "string", "description": "Why." }),
        ),
    ]);
    let verification = object(&[
        (
            "command",
            json!({ "type": "string", "description": "The command to run." }),
        ),
        (
            "expected_signal",
            json!({ "type": "string", "description": "What it shows when the fix worked." }),
        ),
    ]);
    let fix_instructions = object(&[
        (
            "objective",
            json!({ "type": "string", "description": "What the fix must achieve." }),
        ),
        ("constraints", strings.clone()),
        ("edits", json!({ "type": "array", "items": edit })),
        (
            "verification",
            json!({ "type": "array", "items": verification }),
        ),
    ]);
    let blocker = object(&[
        (
            "code",
            json!({ "type": "string", "description": "A stable code (`policy_violation`, `missing_artifact`, …)." }),
        ),
        (
            "summary",
            json!({ "type": "string", "description": "What blocks." }),
        ),
        ("evidence_ref", nullable_string.clone()),
        (
            "severity",
            json!({ "type": ["string", "null"], "enum": ["low", "medium", "high", null] }),
        ),
    ]);
    let mut schema = object(&[
        (
            "status",
            json!({ "type": "string", "enum": ["success", "partial", "blocked", "needs_human", "unsafe"] }),
        ),
        (
            "next_step",
            json!({ "type": ["string", "null"], "description": "One of allowed_next_steps, or null." }),
        ),
        (
            "fix_instructions",
            json!({ "anyOf": [fix_instructions, { "type": "null" }] }),
        ),
        ("blockers", json!({ "type": "array", "items": blocker })),
        ("risk_flags", strings),
    ]);
    schema["title"] = json!("PlannerAnswer");
    schema["description"] = json!("The planner's decision on the evidence envelope.");
    schema
}

/// The answer schema as compact JSON text, for a command-line flag or a file.
pub fn answer_schema_text() -> String {
    answer_schema().to_string()
}

/// A closed object: every property required, nothing else allowed.
fn object(properties: &[(&str, Value)]) -> Value {
    let names: Vec<&str> = properties.iter().map(|(name, _)| *name).collect();
    let map: serde_json::Map<String, Value> = properties
        .iter()
        .map(|(name, schema)| ((*name).to_owned(), schema.clone()))
        .collect();
    json!({
        "type": "object",
        "properties": map,
        "required": names,
        "additionalProperties": false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Visits every subschema, calling `check` with its JSON pointer.
    fn each_schema(value: &Value, at: &str, check: &mut dyn FnMut(&str, &Value)) {
        check(at, value);
        if let Some(properties) = value.get("properties").and_then(Value::as_object) {
            for (name, schema) in properties {
                each_schema(schema, &format!("{at}/properties/{name}"), check);
            }
        }
        if let Some(items) = value.get("items") {
            each_schema(items, &format!("{at}/items"), check);
        }
        if let Some(options) = value.get("anyOf").and_then(Value::as_array) {
            for (index, schema) in options.iter().enumerate() {
                each_schema(schema, &format!("{at}/anyOf/{index}"), check);
            }
        }
    }

    #[test]
    fn the_answer_schema_keeps_to_what_strict_structured_outputs_accept() {
        let schema = answer_schema();
        assert!(
            schema.get("$schema").is_none(),
            "claude refuses the draft 2020-12 meta-schema"
        );
        each_schema(&schema, "", &mut |at, value| {
            for refused in [
                "oneOf", "$ref", "$defs", "default", "format", "allOf", "const",
            ] {
                assert!(value.get(refused).is_none(), "{at} uses `{refused}`");
            }
            if value.get("type") == Some(&json!("object")) {
                assert_eq!(value["additionalProperties"], json!(false), "{at}");
                let mut properties: Vec<&String> =
                    value["properties"].as_object().unwrap().keys().collect();
                let mut required: Vec<&str> = value["required"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|name| name.as_str().unwrap())
                    .collect();
                properties.sort();
                required.sort_unstable();
                assert_eq!(
                    properties, required,
                    "{at}: every property must be required"
                );
            }
        });
    }

    /// The property names of an object schema, sorted.
    fn names(schema: &Value) -> Vec<String> {
        let mut names: Vec<String> = schema["properties"]
            .as_object()
            .map(|properties| properties.keys().cloned().collect())
            .unwrap_or_default();
        names.sort();
        names
    }

    /// The answer schema is written by hand (the model CLIs need every field required and
    /// nullable, no references, and a closed `severity`), so it is checked against the
    /// decision type: each object asks for exactly the fields the type has, less the ones
    /// the kernel adds to saved decisions.
    #[test]
    fn the_answer_schema_asks_for_every_field_of_the_decision_type() {
        let answer = answer_schema();
        let decision = super::super::decision_schema();
        let defs = &decision["$defs"];
        let saved_only = ["decided_by", "planner", "schema_version"];
        let decision_fields: Vec<String> = names(&decision)
            .into_iter()
            .filter(|name| !saved_only.contains(&name.as_str()))
            .collect();
        assert_eq!(names(&answer), decision_fields);
        let fix = &answer["properties"]["fix_instructions"]["anyOf"][0];
        for (schema, type_name) in [
            (fix, "FixInstructions"),
            (&fix["properties"]["edits"]["items"], "Edit"),
            (&fix["properties"]["verification"]["items"], "Verification"),
            (&answer["properties"]["blockers"]["items"], "Blocker"),
        ] {
            assert_eq!(names(schema), names(&defs[type_name]), "{type_name}");
        }
        assert_eq!(
            answer["properties"]["status"]["enum"],
            json!(["success", "partial", "blocked", "needs_human", "unsafe"])
        );
        for status in answer["properties"]["status"]["enum"].as_array().unwrap() {
            serde_json::from_value::<super::super::Status>(status.clone()).unwrap();
        }
    }

    #[test]
    fn a_full_answer_and_a_bare_one_parse_as_decisions() {
        let validator = jsonschema::validator_for(&answer_schema()).unwrap();
        let full = json!({
            "status": "partial",
            "next_step": "fix",
            "fix_instructions": {
                "objective": "make the test pass",
                "constraints": ["keep the API"],
                "edits": [{ "target": "src/lib.rs", "action": "fix the sum", "rationale": "off by one" }],
                "verification": [{ "command": "cargo test", "expected_signal": "exit 0" }],
            },
            "blockers": [{ "code": "tests_failed", "summary": "1 failed", "evidence_ref": null, "severity": "medium" }],
            "risk_flags": ["tests_failed"],
        });
        let bare = json!({
            "status": "success", "next_step": null, "fix_instructions": null,
            "blockers": [], "risk_flags": [],
        });
        for answer in [full, bare] {
            assert!(validator.is_valid(&answer), "{answer}");
            let decision: super::super::Decision = serde_json::from_value(answer).unwrap();
            assert!(decision.schema_version.is_none());
        }
        assert!(!validator.is_valid(&json!({ "status": "success" })));
        assert!(!validator.is_valid(&json!({
            "status": "fine", "next_step": null, "fix_instructions": null, "blockers": [], "risk_flags": [],
        })));
    }
}
