//! The scripted examples in `examples/`: each is valid for `tnh-conductor validate`, and its
//! hooks compute what the kernel will use, through the library API on a real worktree.

use std::path::Path;

use serde_json::json;
use tnh_conductor::script::{HostOptions, Limits, ScriptHost};
use tnh_conductor::workflow::load::check_file;
use tnh_conductor::workflow::model::{
    Inputs, NodeList, PolicySpec, StepBody, ValidatorEntry, Workflow,
};
use tnh_conductor::workflow::validate::KnownNames;

use super::{context, with_changes, write};
use crate::support::{conductor, stdout_text};

const EXAMPLES: [&str; 3] = [
    "examples/script_input_packaging.yaml",
    "examples/script_artifact_globs.yaml",
    "examples/script_policy_check.yaml",
];

/// The example's workflow and a host confined to `worktree`.
fn load(example: &str, worktree: &Path) -> (Workflow, ScriptHost) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(example);
    let checked = check_file(&path, example, &KnownNames::default());
    assert!(checked.is_valid(), "{:?}", checked.diagnostics);
    let workflow = checked.workflow.unwrap();
    let host = ScriptHost::for_workflow(
        HostOptions {
            file: example.to_owned(),
            source: std::fs::read_to_string(&path).unwrap(),
            root: Some(worktree.to_path_buf()),
            limits: Limits::STANDARD,
        },
        &workflow,
    )
    .unwrap_or_else(|error| panic!("{error}"));
    (workflow, host)
}

#[test]
fn the_scripted_examples_are_valid() {
    let output = conductor()
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["--color", "never", "validate"])
        .args(EXAMPLES)
        .output()
        .unwrap();
    let stdout = stdout_text(&output);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    for example in EXAMPLES {
        assert!(stdout.contains(&format!("{example}: valid")), "{stdout}");
    }
}

#[test]
fn validate_refuses_eval_in_a_workflow_script() {
    let directory = tempfile::tempdir().unwrap();
    let file = directory.path().join("eval.yaml");
    std::fs::write(
        &file,
        "workflow_id: x\nversion: 1\ndescription: d\nentry_step: a\nscript: |\n  fn f(c) { eval(c) }\nsteps:\n  - id: a\n    opcode: STOP\n",
    )
    .unwrap();
    let output = conductor()
        .args(["--color", "never", "validate"])
        .arg(&file)
        .output()
        .unwrap();
    let stdout = stdout_text(&output);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("eval.yaml:6:13: error: the script does not compile: reserved keyword 'eval' is disabled [script-syntax]"), "{stdout}");
}

#[test]
fn validate_refuses_imports_outside_stdlib_and_repository_modules() {
    let directory = tempfile::tempdir().unwrap();
    let file = directory.path().join("import.yaml");
    std::fs::write(
        &file,
        "workflow_id: x\nversion: 1\ndescription: d\nentry_step: a\nscript: |\n  import \"tnh/paths\" as paths;\n  import \".tnh/scripts/local\" as local;\n  import \"/etc/passwd\" as secrets;\nsteps:\n  - id: a\n    opcode: STOP\n",
    )
    .unwrap();
    // The repository module is there: `validate` checks that it exists in the repository.
    write(
        directory.path(),
        ".tnh/scripts/local.rhai",
        "fn local() { 1 }\n",
    );
    crate::support::git_in(directory.path(), &["init", "-q", "-b", "main"]);
    let output = conductor()
        .args(["--color", "never", "--repo"])
        .arg(directory.path())
        .arg("validate")
        .arg(&file)
        .output()
        .unwrap();
    let stdout = stdout_text(&output);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("import.yaml:8:10: error: import `/etc/passwd` is refused"),
        "{stdout}"
    );
    assert!(stdout.contains("[script-import]"), "{stdout}");
    assert_eq!(stdout.matches("error:").count(), 1, "{stdout}");
}

#[test]
fn input_packaging_bundles_sources_changes_and_failures() {
    let worktree = tempfile::tempdir().unwrap();
    write(
        worktree.path(),
        "src/lib.rs",
        "pub fn add(a: i32, b: i32) -> i32 { a - b }\n",
    );
    write(worktree.path(), "src/generated/table.rs", "// generated\n");
    write(worktree.path(), "README.md", "# demo\n");
    let (workflow, host) = load(EXAMPLES[0], worktree.path());
    let StepBody::RunAgent(agent) = &workflow.steps[0].body else {
        panic!("fix is a RUN_AGENT step");
    };
    let Inputs::Expression(node) = &agent.inputs else {
        panic!("the inputs are one expression");
    };
    let ctx = with_changes(
        json!({
            "run": {"id": "r1"},
            "params": {"sources": ["src/**/*.rs"], "budget": 20000},
            "harness_report": {"suite_id": "unit", "cases": [
                {"id": "adds", "status": "failed", "repro": "cargo test adds", "observations": ["2 + 2 = 0"]}
            ], "summary": {}},
        }),
        json!([{"path": "src/lib.rs", "kind": "modified", "added": 1, "removed": 1}]),
    );
    let inputs = host.evaluate_json(node, &ctx).unwrap();
    assert_eq!(
        inputs,
        json!({
            "sources": "=== src/lib.rs ===\npub fn add(a: i32, b: i32) -> i32 { a - b }\n\n",
            "included": ["src/lib.rs"],
            "omitted": [],
            "changes": "1 files changed (+1 -1): 0 added, 1 modified, 0 deleted, 0 renamed\nmodified src/lib.rs (+1 -1)",
            "failures": ["adds: cargo test adds (2 + 2 = 0)"],
        })
    );
}

#[test]
fn artifact_globs_and_args_are_computed_per_suite() {
    let worktree = tempfile::tempdir().unwrap();
    let (workflow, host) = load(EXAMPLES[1], worktree.path());
    let StepBody::RunValidation(validation) = &workflow.steps[0].body else {
        panic!("check is a RUN_VALIDATION step");
    };
    let ValidatorEntry::Spec(spec) = &validation.run[0] else {
        panic!("harness is an inline validator");
    };
    let (NodeList::Expression(args), NodeList::Expression(artifacts)) =
        (&spec.args, &spec.artifacts)
    else {
        panic!("args and artifacts are expressions");
    };
    let ctx = context(json!({
        "step": {"id": "check", "visit": 1, "dir": ".tnh/run/r1/artifacts/check/1"},
        "params": {"suites": ["cli", "docs"]},
    }));
    assert_eq!(
        host.evaluate_json(args, &ctx).unwrap(),
        json!([
            "--suites",
            "cli,docs",
            "--out",
            ".tnh/run/r1/artifacts/check/1/harness_report.json"
        ])
    );
    let globs = host.evaluate_node(artifacts, &ctx).unwrap();
    assert_eq!(
        globs.to_json(),
        json!([
            "reports/summary.json",
            "reports/cli/**/*.json",
            "reports/cli/screenshots/*.png",
            "reports/docs/**/*.json",
            "reports/docs/screenshots/*.png",
        ])
    );
    let StepBody::Gate(gate) = &workflow.steps[1].body else {
        panic!("review is a GATE");
    };
    let reason = gate.reason.as_ref().unwrap();
    assert_eq!(
        host.evaluate_json(reason, &ctx).unwrap(),
        json!("Review the reports of 2 suites before accepting any golden.")
    );
}

#[test]
fn the_policy_check_reports_violations_per_changed_file() {
    let worktree = tempfile::tempdir().unwrap();
    write(worktree.path(), "src/lib.rs", "x\n");
    write(worktree.path(), "Cargo.lock", "x\n");
    write(worktree.path(), "newdir/a.txt", "x\n");
    write(worktree.path(), "tests/common.rs", "x\n");
    let (workflow, host) = load(EXAMPLES[2], worktree.path());
    let StepBody::RunAgent(agent) = &workflow.steps[0].body else {
        panic!("implement is a RUN_AGENT step");
    };
    let Some(PolicySpec::Inline(policy)) = agent.policy.as_ref().map(|policy| &policy.value) else {
        panic!("an inline policy");
    };
    let check = policy.check.as_ref().unwrap();
    let params = json!({"params": {"max_files": 10, "max_lines": 400}});
    let changes = json!([
        {"path": "src/lib.rs", "kind": "modified", "added": 5, "removed": 1},
        {"path": "Cargo.lock", "kind": "modified", "added": 2, "removed": 2},
        {"path": "newdir/a.txt", "kind": "added", "added": 1, "removed": 0},
    ]);
    let violations = host
        .check_policy(check, &with_changes(params.clone(), changes))
        .unwrap();
    let found: Vec<(&str, &str)> = violations
        .iter()
        .map(|violation| (violation.path.as_str(), violation.reason.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            (
                "src/lib.rs",
                "1 source files changed without any test change"
            ),
            (
                "Cargo.lock",
                "lockfiles and CI configuration are off limits"
            ),
            ("newdir/a.txt", "adds the new top-level directory `newdir/`"),
        ]
    );
    let clean = json!([
        {"path": "src/lib.rs", "kind": "modified", "added": 5, "removed": 1},
        {"path": "tests/lib.rs", "kind": "added", "added": 9, "removed": 0},
    ]);
    assert!(
        host.check_policy(check, &with_changes(params, clean))
            .unwrap()
            .is_empty()
    );
}

/// Run end to end, the computed inputs reach the agent: the step's prompt is a library
/// reference that declares them, so `inputs.json` holds them and the rendered prompt carries
/// the bundled sources (literal prompt text would have dropped them all).
#[test]
fn input_packaging_gives_the_agent_its_computed_inputs() {
    let repo = crate::kernel_support::RunRepo::new();
    let agent = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/agents/scripted.py");
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "agents:\n  claude-code: {{kind: command, argv: [python3, \"{}\"]}}\n",
            agent.display()
        ),
    );
    repo.repo.write(
        "src/lib.rs",
        "pub fn add(a: i32, b: i32) -> i32 { a - b }\n",
    );
    repo.repo.commit_all("a bug");
    let workflow = Path::new(env!("CARGO_MANIFEST_DIR")).join(EXAMPLES[0]);
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(
        code,
        Some(0),
        "{result}\n{}",
        crate::support::stderr_text(&output)
    );
    let run_id = result["run_id"].as_str().unwrap();
    let inputs = repo.json(run_id, "artifacts/fix/1/inputs.json");
    assert_eq!(inputs["prompt"], "task.fix_with_sources.v1", "{inputs}");
    assert_eq!(
        inputs["inputs"]["included"],
        json!(["src/lib.rs"]),
        "{inputs}"
    );
    assert!(
        inputs["inputs"]["sources"]
            .as_str()
            .is_some_and(|text| text.contains("=== src/lib.rs ===")),
        "{inputs}"
    );
    let prompt =
        std::fs::read_to_string(repo.run_dir(run_id).join("artifacts/fix/1/prompt.md")).unwrap();
    assert!(
        prompt.contains("=== src/lib.rs ===\npub fn add(a: i32, b: i32) -> i32 { a - b }"),
        "{prompt}"
    );
}
