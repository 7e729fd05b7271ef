//! Workflow documents through `check_bytes` (parse, decode, validate, expression checks), as
//! `validate` runs them: arbitrary bytes, YAML token soup and structurally edited fixtures get
//! well-formed diagnostics, never a panic; a consistent step rename keeps a fixture valid; a
//! route to an unknown step is always named.

use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestCaseError;
use serde_json::{Map, Value};
use tnh_conductor::workflow::diagnostic::{Diagnostic, Diagnostics, Severity};
use tnh_conductor::workflow::load::check_bytes;
use tnh_conductor::workflow::validate::KnownNames;
use tnh_conductor::workflow::yaml;

use super::{config, node_mut, node_paths};
use crate::support::fixture;

fn known() -> &'static KnownNames {
    static KNOWN: OnceLock<KnownNames> = OnceLock::new();
    KNOWN.get_or_init(KnownNames::default)
}

/// What checking one document gave.
struct Checked {
    decoded: bool,
    diagnostics: Vec<Diagnostic>,
}

impl Checked {
    fn is_valid(&self) -> bool {
        self.decoded
            && !self
                .diagnostics
                .iter()
                .any(|diagnostic| diagnostic.severity == Severity::Error)
    }

    fn errors(&self) -> Vec<String> {
        self.diagnostics
            .iter()
            .filter(|diagnostic| diagnostic.severity == Severity::Error)
            .map(|diagnostic| diagnostic.render(false))
            .collect()
    }
}

/// Checks a document and asserts every diagnostic points into it and says what to do.
fn check(bytes: &[u8]) -> Result<Checked, TestCaseError> {
    let mut diagnostics = Diagnostics::new("property.yaml");
    let decoded = check_bytes(bytes, known(), &mut diagnostics).is_some();
    let diagnostics = diagnostics.into_sorted();
    let lines = 1 + bytes
        .iter()
        .filter(|byte| matches!(byte, b'\n' | b'\r'))
        .count();
    for diagnostic in &diagnostics {
        prop_assert!(
            diagnostic.line >= 1 && diagnostic.column >= 1,
            "{diagnostic:?}"
        );
        prop_assert!(
            diagnostic.line as usize <= lines,
            "{lines} lines: {diagnostic:?}"
        );
        prop_assert!(!diagnostic.message.is_empty(), "{diagnostic:?}");
        prop_assert!(diagnostic.hint.is_some(), "no hint: {diagnostic:?}");
    }
    prop_assert!(
        decoded || !diagnostics.is_empty(),
        "a document that does not decode must say why"
    );
    Ok(Checked {
        decoded,
        diagnostics,
    })
}

/// The valid fixtures and the shipped workflows as JSON trees (JSON is YAML, so a tree is
/// checked as its JSON text).
fn valid_documents() -> &'static [Value] {
    static DOCUMENTS: OnceLock<Vec<Value>> = OnceLock::new();
    DOCUMENTS.get_or_init(|| {
        let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("workflows");
        let mut paths: Vec<_> = [fixture("workflows/valid"), shipped]
            .iter()
            .flat_map(|folder| std::fs::read_dir(folder).unwrap())
            .map(|entry| entry.unwrap().path())
            .filter(|path| {
                path.extension()
                    .is_some_and(|extension| extension == "yaml")
            })
            .collect();
        paths.sort();
        paths
            .iter()
            .map(|path| {
                yaml::parse(&std::fs::read(path).unwrap())
                    .unwrap()
                    .to_json()
            })
            .collect()
    })
}

fn document(index: &Index) -> Value {
    let documents = valid_documents();
    documents[index.index(documents.len())].clone()
}

fn text(document: &Value) -> Vec<u8> {
    serde_json::to_vec_pretty(document).unwrap()
}

fn step_ids(document: &Value) -> Vec<String> {
    document["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|step| step["id"].as_str().map(str::to_owned))
        .collect()
}

/// Renames a step and every reference to it: `entry_step`, route targets, allowed next steps.
fn rename_step(document: &mut Value, from: &str, to: &str) {
    let rename = |value: &mut Value| {
        if value == from {
            *value = Value::from(to);
        }
    };
    rename(&mut document["entry_step"]);
    for step in document["steps"].as_array_mut().into_iter().flatten() {
        rename(&mut step["id"]);
        // `get_mut`, not indexing: indexing would add the keys a step does not have.
        if let Some(routes) = step.get_mut("routes").and_then(Value::as_object_mut) {
            routes.values_mut().for_each(rename);
        }
        if let Some(allowed) = step
            .get_mut("allowed_next_steps")
            .and_then(Value::as_array_mut)
        {
            allowed.iter_mut().for_each(rename);
        }
    }
}

const YAML_TOKENS: &[&str] = &[
    "workflow_id: w\n",
    "version: 1\n",
    "entry_step: a\n",
    "steps:\n",
    "  - id: a\n",
    "    opcode: STOP\n",
    "    opcode: EVALUATE\n",
    "    routes: {",
    "completed: a",
    "}",
    "[",
    "]",
    "{",
    "&a ",
    "*a",
    "<<: *a\n",
    "? ",
    "- ",
    ": ",
    ", ",
    "\t",
    "'",
    "\"",
    "|\n",
    ">-\n",
    "#c\n",
    "!!str ",
    "!!binary ",
    "!local ",
    "---\n",
    "...\n",
    "%YAML 1.2\n",
    "\u{feff}",
    "${{ ",
    " }}",
    "${run_id}",
    "\n",
    "\r\n",
    "  ",
    "    ",
    "1e999",
    "0x1F",
    "~",
    "null",
    ".inf",
    "STOP",
    "script: |\n  fn f() { loop {} }\n",
    "params:\n  p: {type: int, default: x}\n",
    "\u{0}",
    "é",
    "\u{2028}",
];

fn yaml_soup() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(YAML_TOKENS), 0..40)
        .prop_map(|tokens| tokens.concat().into_bytes())
}

const WORKFLOW_KEYS: &[&str] = &[
    "id",
    "opcode",
    "routes",
    "steps",
    "entry_step",
    "agent",
    "prompt",
    "inputs",
    "run",
    "limits",
    "timeout",
    "max_visits",
    "allowed_next_steps",
    "gate",
    "target",
    "params",
    "type",
    "default",
    "script",
    "defaults",
    "policy",
    "allowed_paths",
    "outcome",
    "reason",
    "kind",
    "args",
    "artifacts",
    "entrypoint",
    "env",
    "cwd",
    "completed",
    "*",
    "success",
    "needs_human",
    "unknown",
];

const WORKFLOW_WORDS: &[&str] = &[
    "STOP",
    "RUN_AGENT",
    "RUN_VALIDATION",
    "EVALUATE",
    "GATE",
    "ROLLBACK",
    "pre_run",
    "pre_step",
    "checkpoint:x",
    "requires_approval",
    "queue_for_review",
    "20m",
    "-5s",
    "0s",
    "${{ 1 + }}",
    "${{ params.x }}",
    "${{ loop {} }}",
    "${run_id}",
    "${nope}",
    "${",
    "task.plan_adr.v1",
    "policy.workspace_safety.v1",
    "*",
    "completed",
    "plan",
    "implement",
    "validate",
    "fix it",
    "builtin",
    "script",
    "string",
    "int",
    "list",
    "claude",
    "tests",
    "rules",
    "nobody",
    "",
];

fn workflow_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-3_i64..100_000).prop_map(Value::from),
        prop::sample::select(WORKFLOW_WORDS).prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(WORKFLOW_KEYS).prop_map(str::to_owned),
                inner,
                0..4
            )
            .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

/// One structural edit of a document tree, at the node a `Index` picks.
#[derive(Debug, Clone)]
enum Edit {
    Remove,
    Replace(Value),
    Insert(String, Value),
    Duplicate,
}

fn edit() -> impl Strategy<Value = (Index, Edit)> {
    let edit = prop_oneof![
        Just(Edit::Remove),
        workflow_value().prop_map(Edit::Replace),
        (prop::sample::select(WORKFLOW_KEYS), workflow_value())
            .prop_map(|(key, value)| Edit::Insert(key.to_owned(), value)),
        Just(Edit::Duplicate),
    ];
    (any::<Index>(), edit)
}

fn apply(document: &mut Value, (at, edit): &(Index, Edit)) {
    let mut paths = Vec::new();
    node_paths(document, &mut Vec::new(), &mut paths);
    let path = at.get(&paths).clone();
    let Some((last, parent_path)) = path.split_last() else {
        if let Edit::Replace(value) = edit {
            *document = value.clone();
        }
        return;
    };
    let parent = node_mut(document, parent_path);
    match (edit, parent, last) {
        (Edit::Remove, Value::Object(entries), Value::String(key)) => {
            entries.remove(key);
        }
        (Edit::Remove, Value::Array(items), index) => {
            items.remove(index.as_u64().unwrap() as usize);
        }
        (Edit::Duplicate, Value::Array(items), index) => {
            let index = index.as_u64().unwrap() as usize;
            items.insert(index, items[index].clone());
        }
        (Edit::Replace(value), parent, _) => {
            *node_mut(parent, std::slice::from_ref(last)) = value.clone()
        }
        (Edit::Insert(key, value), parent, _) => match node_mut(parent, std::slice::from_ref(last))
        {
            Value::Object(entries) => {
                entries.insert(key.clone(), value.clone());
            }
            Value::Array(items) => items.push(value.clone()),
            _ => {}
        },
        _ => {}
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn arbitrary_bytes_get_diagnostics_never_a_panic(bytes in prop::collection::vec(any::<u8>(), 0..1024)) {
        check(&bytes)?;
    }

    #[test]
    fn yaml_token_soup_gets_the_same_diagnostics_every_time(bytes in yaml_soup()) {
        let first = check(&bytes)?;
        let second = check(&bytes)?;
        prop_assert_eq!(first.diagnostics, second.diagnostics);
    }

    #[test]
    fn structurally_edited_fixtures_get_diagnostics_never_a_panic(
        which in any::<Index>(),
        edits in prop::collection::vec(edit(), 1..5),
    ) {
        let mut document = document(&which);
        for edit in &edits {
            apply(&mut document, edit);
        }
        check(&text(&document))?;
    }
}

proptest! {
    #![proptest_config(config(96))]

    #[test]
    fn renaming_a_step_everywhere_keeps_a_workflow_valid(
        which in any::<Index>(),
        step in any::<Index>(),
        fresh in "[a-z_][a-z0-9_.-]{0,12}",
    ) {
        let mut document = document(&which);
        let ids = step_ids(&document);
        prop_assume!(!ids.contains(&fresh));
        // Ids are parts of git ref names: `..` and a trailing `.lock` are refused.
        prop_assume!(tnh_conductor::workflow::decode::fits_in_a_ref_name(&fresh));
        let renamable: Vec<&String> = ids.iter().filter(|id| *id != "STOP").collect();
        let from = step.get(&renamable).to_string();
        rename_step(&mut document, &from, &fresh);
        let checked = check(&text(&document))?;
        prop_assert!(checked.is_valid(), "`{}` → `{}`: {:#?}", from, fresh, checked.errors());
    }

    #[test]
    fn a_route_to_an_unknown_step_is_always_named(
        which in any::<Index>(),
        slot in any::<Index>(),
        fresh in "[a-z_][a-z0-9_]{0,12}",
    ) {
        let mut document = document(&which);
        prop_assume!(!step_ids(&document).contains(&fresh));
        let slots: Vec<(usize, String)> = document["steps"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .flat_map(|(index, step)| {
                step["routes"].as_object().into_iter().flat_map(Map::keys).map(move |key| (index, key.clone()))
            })
            .collect();
        let (step, key) = slot.get(&slots).clone();
        document["steps"][step]["routes"][key.as_str()] = Value::from(fresh.as_str());
        let checked = check(&text(&document))?;
        prop_assert!(!checked.is_valid());
        let named = format!("`{fresh}`");
        prop_assert!(
            checked.diagnostics.iter().any(|diagnostic| diagnostic.code == "unknown-target" && diagnostic.message.contains(&named)),
            "no unknown-target naming {}: {:#?}", named, checked.errors()
        );
    }
}

#[test]
fn valid_workflows_stay_valid_written_as_json() {
    assert!(
        valid_documents().len() >= 8,
        "fixtures and shipped workflows"
    );
    for document in valid_documents() {
        let checked = check(&text(document)).unwrap();
        assert!(
            checked.is_valid(),
            "{}: {:#?}",
            document["workflow_id"],
            checked.errors()
        );
    }
}

/// Found by the `workflow` fuzz target: a script ending in a syntax error was reported on the
/// line after the script, past the end of the file when the script was last.
#[test]
fn a_syntax_error_at_the_end_of_a_script_points_at_its_last_line() {
    let head = "workflow_id: w\nversion: 1\ndescription: d\nentry_step: s\n";
    let steps = "steps:\n  - id: s\n    opcode: STOP\n";
    for (source, line, column) in [
        (
            format!("{head}{steps}script: |\n  fn f() {{\n    let"),
            10,
            8,
        ),
        (
            format!("{head}script: |\n  fn f() {{\n    let\n{steps}"),
            7,
            8,
        ),
    ] {
        let checked = check(source.as_bytes()).unwrap();
        let error = checked
            .diagnostics
            .iter()
            .find(|diagnostic| diagnostic.code == "script-syntax")
            .unwrap_or_else(|| panic!("{:#?}", checked.errors()));
        assert_eq!((error.line, error.column), (line, column), "{source}");
    }
}
