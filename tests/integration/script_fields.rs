//! Computed validator fields in real runs: what an expression's value becomes in a validator's
//! argv, environment, working directory and artifacts, and the errors for values that cannot
//! be any of these.

use std::path::Path;

use crate::kernel_support::{RunRepo, first_event};
use crate::support::stderr_text;

/// A repository with `scripts/show.sh` (prints its argv, `XA`, `XB` and whether it runs at the
/// worktree's root) allowed as a script validator.
fn repo_with_show_script() -> RunRepo {
    let repo = RunRepo::new();
    repo.repo.write(
        "scripts/show.sh",
        "#!/bin/sh\necho \"argv: $# [$*]\"\necho \"XA=${XA-unset} XB=${XB-unset}\"\ntest -e .git && echo \"cwd: root\"\nexit 0\n",
    );
    make_executable(&repo.path().join("scripts/show.sh"));
    repo.repo.commit_all("a validator script");
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!("{config}script_allowlist: [\"scripts/\"]\n"),
    );
    repo
}

/// A workflow whose one validation step runs `scripts/show.sh` as each of `validators`
/// (`id: …, …` flow-map bodies), then queues a review.
fn workflow(validators: &[&str]) -> String {
    let run: String = validators
        .iter()
        .map(|fields| {
            let network = if fields.contains("network:") {
                ""
            } else {
                "network: allow, "
            };
            format!("      - {{kind: script, entrypoint: scripts/show.sh, {network}{fields}}}\n")
        })
        .collect();
    format!(
        r#"workflow_id: fields
version: 1
description: computed validator fields
entry_step: check
script: |
  fn nothing() {{ () }}
  fn one() {{ "one arg" }}
  fn mixed() {{ ["x", (), 3] }}
steps:
  - id: check
    opcode: RUN_VALIDATION
    run:
{run}    routes: {{"*": review}}
  - id: review
    opcode: GATE
    gate: queue_for_review
    routes: {{gate_queued: STOP}}
"#
    )
}

fn stdout_of(repo: &RunRepo, run_id: &str, validator: &str) -> String {
    std::fs::read_to_string(repo.run_dir(run_id).join(format!(
        "artifacts/check/1/validators/{validator}/stdout.txt"
    )))
    .unwrap()
}

/// A computed validator field whose value was `()` became the text `null`: argv
/// `a null b`, `XA=null`, a `cwd` `null` that is not a folder (the run ended), an artifact
/// pattern `null` that was missing (the step's outcome `error`). Now `()` leaves the item, the
/// variable or the whole field out.
#[test]
fn a_computed_validator_field_of_no_value_is_left_out_not_the_text_null() {
    let repo = repo_with_show_script();
    let path = repo.workflow_text(
        "unit.yaml",
        &workflow(&[
            r#"id: items, args: ["a", "${{ nothing() }}", "b", "${{ mixed() }}"], env: {XA: "${{ nothing() }}", XB: "${{ 2 }}"}, cwd: "${{ nothing() }}", artifacts: "${{ nothing() }}""#,
            r#"id: whole, args: "${{ nothing() }}", env: "${{ #{XA: (), XB: `b`} }}", artifacts: ["${{ nothing() }}"]"#,
            r#"id: string, args: "${{ one() }}", report: "${{ nothing() }}""#,
        ]),
    );
    repo.conductor_exits(&["validate", path.to_str().unwrap()], 0);
    let (code, result, output) = repo.run(&path, &[]);
    assert_eq!(code, Some(0), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    assert_eq!(
        stdout_of(&repo, run_id, "items"),
        "argv: 4 [a b x 3]\nXA=unset XB=2\ncwd: root\n"
    );
    assert_eq!(
        stdout_of(&repo, run_id, "whole"),
        "argv: 0 []\nXA=unset XB=b\ncwd: root\n"
    );
    // One string given for the whole list is a list of one.
    assert_eq!(
        stdout_of(&repo, run_id, "string"),
        "argv: 1 [one arg]\nXA=unset XB=unset\ncwd: root\n"
    );
    let report = repo.json(run_id, "artifacts/check/1/validation_report.json");
    assert_eq!(report["outcome"], "completed", "{report}");
    for id in ["items", "whole", "string"] {
        let validator = &report["validators"][id];
        assert_eq!(validator["outcome"], "completed", "{id}: {validator}");
        assert_eq!(
            validator["missing_artifacts"],
            serde_json::json!([]),
            "{id}: {validator}"
        );
    }
}

/// `args: "${{ 42 }}"` (not a list) was accepted as the argument `42`, and a list
/// holding a map as its JSON text. Now both are an error at the expression that names the
/// field and the type it got, and no validator runs.
#[test]
fn a_computed_validator_list_of_the_wrong_type_is_an_error_at_the_expression() {
    for (name, fields, message) in [
        (
            "number",
            r#"id: number, args: "${{ 42 }}""#,
            "/wf/number.yaml:13:87 (expression): `args` must be a list of strings (or one string), got int",
        ),
        (
            "map_item",
            r#"id: map_item, artifacts: ["a", "${{ [#{}] }}"]"#,
            "/wf/map_item.yaml:13:100 (expression): `artifacts` must be a list of strings, got an item of type map",
        ),
        (
            "cwd_list",
            r#"id: cwd_list, cwd: "${{ [`a`] }}""#,
            "/wf/cwd_list.yaml:13:88 (expression): `cwd` must be a string, got list",
        ),
    ] {
        let repo = repo_with_show_script();
        let path = repo.workflow_text(&format!("{name}.yaml"), &workflow(&[fields]));
        let (code, result, output) = repo.run(&path, &[]);
        assert_eq!(code, Some(4), "{name}: {result}\n{}", stderr_text(&output));
        let run_id = result["run_id"].as_str().unwrap();
        let failed = first_event(&repo.events(run_id), "step_failed").clone();
        assert!(
            failed["error"].as_str().unwrap().ends_with(message),
            "{name}: {failed}"
        );
        assert!(
            !repo
                .run_dir(run_id)
                .join(format!("artifacts/check/1/validators/{name}/stdout.txt"))
                .exists(),
            "{name}: the validator ran"
        );
    }
}

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A NUL byte in a computed validator `env` value (or argument) was reported as
/// "`/usr/bin/unshare` could not be started … install unshare", and the run was left resumable
/// although resuming evaluates the same expression again. Now it is an error at the expression
/// naming the field, and the run ends.
#[test]
fn a_nul_byte_in_a_computed_validator_env_value_or_argument_is_an_error_at_the_expression() {
    for (name, fields, message) in [
        (
            "env",
            r#"id: env, network: deny, env: {XA: "${{ nul() }}"}"#,
            "/wf/env.yaml:14:87 (expression): the `env` value of `XA` contains a NUL byte, which no program argument, environment value or path can carry",
        ),
        (
            "whole_env",
            r#"id: whole_env, env: "${{ #{XA: nul()} }}""#,
            "/wf/whole_env.yaml:14:89 (expression): the `env` value of `XA` contains a NUL byte, which no program argument, environment value or path can carry",
        ),
        (
            "args",
            r#"id: args, args: ["a", "${{ nul() }}"]"#,
            "/wf/args.yaml:14:91 (expression): `args` contains a NUL byte, which no program argument, environment value or path can carry",
        ),
    ] {
        let repo = repo_with_show_script();
        let text = workflow(&[fields]).replace(
            "  fn nothing() { () }\n",
            "  fn nothing() { () }\n  fn nul() { \"a\\x00b\" }\n",
        );
        let path = repo.workflow_text(&format!("{name}.yaml"), &text);
        let (code, result, output) = repo.run(&path, &[]);
        assert_eq!(code, Some(4), "{name}: {result}\n{}", stderr_text(&output));
        let run_id = result["run_id"].as_str().unwrap();
        let events = repo.events(run_id);
        let failed = first_event(&events, "step_failed").clone();
        assert!(
            failed["error"].as_str().unwrap().ends_with(message),
            "{name}: {failed}"
        );
        // The workflow is at fault: once it is fixed, `resume` evaluates the field again.
        assert_eq!(failed["resumable"], true, "{name}: {failed}");
        assert!(!failed.to_string().contains("unshare"), "{name}: {failed}");
    }
}
