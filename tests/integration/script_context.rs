//! What scripts see during a real run: the workspace changes since `pre_run` behind
//! `changed_files()` and `diff_stat()` (the step's capture in a policy `check`), and a `ctx`
//! with per-step evidence, the last planner decision and the last harness report.
//!
//! Regression tests for scripts that saw no changes at all in a run, so scripted policy
//! checks (`tnh/policy`) never fired and gate reasons counted 0 files.

use std::path::Path;

use crate::kernel_support::{RunRepo, first_event};
use crate::support::stderr_text;

/// An agent step that writes three files under `src/`, a policy `check` that allows at most
/// `limit` changed files, an EVALUATE, and a gate whose reason shows what the script sees.
fn three_files_workflow(limit: u32) -> String {
    format!(
        r#"workflow_id: ctx_changes
version: 1
description: scripts see the run's changes
entry_step: write
script: |
  import "tnh/policy" as policy;
  import "tnh/inputs" as inputs;
  fn check(change) {{ policy::max_changed_files({limit}) }}
  fn show() {{
      let stat = diff_stat();
      let paths = [];
      for change in changed_files() {{ paths.push(change.kind + " " + change.path + " +" + change.added); }}
      let write = ctx.steps.write;
      `files=${{stat.files}} added=${{stat.added}} new=${{stat.by_kind.added}} paths=${{paths}} ` +
      `write=${{write.outcome}}/${{write.status}} diff=${{write.evidence.diffstat.files_changed}} ` +
      `status_files=${{write.artifacts.workspace_status.len()}} planner=${{ctx.planner.status}} ` +
      `harness=${{type_of(ctx.harness_report)}} summary=${{inputs::changed_paths(["src/**"]).len()}}`
  }}
steps:
  - id: write
    opcode: RUN_AGENT
    agent: scripted
    prompt: |
      WRITE src/one.txt: 1
      WRITE src/two.txt: 2\n2
      WRITE src/three.txt: 3
    policy: {{allowed_paths: ["src/**"], check: check}}
    routes: {{"*": judge}}
  - id: judge
    opcode: EVALUATE
    prompt: planner.evaluate_step.v1
    allowed_next_steps: [review]
    routes: {{success: review, partial: review, blocked: review, unsafe: STOP, needs_human: review}}
  - id: review
    opcode: GATE
    gate: queue_for_review
    reason: "${{{{ show() }}}}"
    routes: {{gate_queued: STOP}}
"#
    )
}

#[test]
fn a_scripted_policy_check_on_changed_files_fires_and_the_next_evaluate_is_unsafe() {
    let repo = RunRepo::new();
    let workflow = repo.workflow_text("strict.yaml", &three_files_workflow(2));
    let (code, result, output) = repo.run(&workflow, &[]);
    // The violation makes the EVALUATE unsafe, which routes to a failure STOP.
    assert_eq!(code, Some(1), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let summary = repo.json(run_id, "artifacts/write/1/policy_summary.json");
    let violations = summary["violations"].as_array().unwrap();
    assert_eq!(violations.len(), 3, "{summary}");
    assert_eq!(
        violations[0]["detail"],
        "3 files changed; the policy allows at most 2"
    );
    let events = repo.events(run_id);
    assert_eq!(
        events
            .iter()
            .filter(|event| event["event_type"] == "policy_violation")
            .count(),
        3
    );
    let decision = repo.json(run_id, "artifacts/judge/1/planner_decision.json");
    assert_eq!(decision["status"], "unsafe", "{decision}");
    assert!(
        decision["risk_flags"]
            .to_string()
            .contains("policy_violation"),
        "{decision}"
    );
}

#[test]
fn a_gate_reason_sees_the_changes_the_step_evidence_and_the_planner_decision() {
    let repo = RunRepo::new();
    let workflow = repo.workflow_text("lenient.yaml", &three_files_workflow(3));
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(0), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let summary = repo.json(run_id, "artifacts/write/1/policy_summary.json");
    assert_eq!(summary["violations"], serde_json::json!([]), "{summary}");
    let reason = repo.json(run_id, "artifacts/review/1/gate_request.json")["reason"].clone();
    assert_eq!(
        reason.as_str().unwrap(),
        "files=3 added=4 new=3 \
         paths=[\"added src/one.txt +1\", \"added src/three.txt +1\", \"added src/two.txt +2\"] \
         write=completed/completed diff=3 status_files=1 planner=success harness=() summary=3",
    );
}

/// The guide's `fix_flaky` workflow and `task.fix_flaky` prompt, run as written with a
/// `claude-code` profile that changes two files: the review reason counts them.
#[test]
fn the_guides_fix_flaky_example_counts_the_files_it_changed() {
    let guide =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/guide.md"))
            .unwrap();
    let workflow = fenced_block(&guide, "## Prompts", "```yaml");
    let prompt = fenced_block(&guide, "## Prompts", "```markdown");
    let repo = RunRepo::new();
    repo.repo.write(
        ".tnh/config.yaml",
        "agents:\n  claude-code:\n    kind: command\n    argv: [sh, -c, \"cat >/dev/null; mkdir -p src tests; echo fix > src/parser.rs; echo test > tests/parser.rs\"]\nvalidators:\n  tests: {argv: [\"true\"]}\n  lint: {argv: [\"true\"]}\n",
    );
    repo.repo
        .write(".tnh/prompts/task/fix_flaky.v1.md", &prompt);
    let workflow = repo.workflow_text("fix_flaky.yaml", &workflow);
    let (code, result, output) = repo.run(&workflow, &["-p", "test=parser::empty"]);
    assert_eq!(code, Some(0), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    assert_eq!(
        repo.json(run_id, "artifacts/review/1/gate_request.json")["reason"],
        "Fixed parser::empty: 2 file(s) changed"
    );
}

/// The first fenced block opened by `fence` after the heading `heading`.
fn fenced_block(text: &str, heading: &str, fence: &str) -> String {
    let section = &text[text.find(heading).unwrap()..];
    let start = section.find(fence).unwrap() + fence.len() + 1;
    let end = start + section[start..].find("\n```").unwrap();
    section[start..=end].to_owned()
}

/// Regression: `env: "${{ … }}"` on an inline validator was refused by `validate` ("env must be
/// a mapping"), though validator `env` is documented as a computed value.
#[test]
fn a_validator_env_given_as_one_expression_reaches_the_validator() {
    let repo = RunRepo::new();
    repo.repo
        .write("scripts/show_env.sh", "#!/bin/sh\necho \"A=$A B=$B\"\n");
    make_executable(&repo.path().join("scripts/show_env.sh"));
    repo.repo.commit_all("a validator script");
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!("{config}script_allowlist: [\"scripts/\"]\n"),
    );
    let workflow = |env: &str| {
        format!(
            r#"workflow_id: env_expression
version: 1
description: a computed validator environment
entry_step: check
script: |
  fn harness_env() {{ #{{A: "one", B: 2}} }}
  fn broken_env() {{ #{{A: ["not", "text"]}} }}
steps:
  - id: check
    opcode: RUN_VALIDATION
    run:
      - {{id: show, kind: script, entrypoint: scripts/show_env.sh, network: allow, env: "${{{{ {env}() }}}}"}}
    routes: {{"*": review}}
  - id: review
    opcode: GATE
    gate: requires_approval
    routes: {{gate_approved: STOP, gate_rejected: STOP}}
"#
        )
    };
    let path = repo.workflow_text("env.yaml", &workflow("harness_env"));
    repo.conductor_exits(&["validate", path.to_str().unwrap()], 0);
    let (code, result, output) = repo.run(&path, &[]);
    assert_eq!(code, Some(3), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let stdout = std::fs::read_to_string(
        repo.run_dir(run_id)
            .join("artifacts/check/1/validators/show/stdout.txt"),
    )
    .unwrap();
    assert_eq!(stdout, "A=one B=2\n");

    let path = repo.workflow_text("broken_env.yaml", &workflow("broken_env"));
    let (code, result, output) = repo.run(&path, &[]);
    assert_eq!(code, Some(4), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let failed = first_event(&repo.events(run_id), "step_failed").clone();
    // The position is the expression's scalar in the validator's line.
    assert!(
        failed["error"].as_str().unwrap().ends_with(
            "/wf/broken_env.yaml:12:88 (expression): `env` must be a map of strings, got list for `A`"
        ),
        "{failed}"
    );
}

/// Regression: computed `inputs` that were not a map were dropped in silence, and the run then
/// failed on a "missing" input with the `prompts render` hint (`-i name=value`).
#[test]
fn computed_inputs_that_are_not_a_map_are_an_error_at_the_expression() {
    let repo = RunRepo::new();
    let workflow = |inputs: &str| {
        format!(
            "workflow_id: inputs\nversion: 1\ndescription: d\nentry_step: plan\nscript: |\n  fn text() {{ \"not a map\" }}\nsteps:\n  - id: plan\n    opcode: RUN_AGENT\n    agent: scripted\n    prompt: task.plan_adr.v1\n    inputs: \"{inputs}\"\n    routes: {{\"*\": STOP}}\n"
        )
    };
    let path = repo.workflow_text("text.yaml", &workflow("${{ text() }}"));
    let (code, result, output) = repo.run(&path, &[]);
    assert_eq!(code, Some(4), "{result}\n{}", stderr_text(&output));
    let failed = first_event(
        &repo.events(result["run_id"].as_str().unwrap()),
        "step_failed",
    )
    .clone();
    assert!(
        failed["error"].as_str().unwrap().ends_with(
            "/wf/text.yaml:12:13 (expression): the computed `inputs` must be a map, got string"
        ),
        "{failed}"
    );

    // A map that lacks a required input fails in the prompt, with a hint for a run.
    let path = repo.workflow_text("empty.yaml", &workflow("${{ #{} }}"));
    let (code, result, output) = repo.run(&path, &[]);
    assert_eq!(code, Some(4), "{result}\n{}", stderr_text(&output));
    let failed = first_event(
        &repo.events(result["run_id"].as_str().unwrap()),
        "step_failed",
    )
    .clone();
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("the required input `adr_id`"),
        "{failed}"
    );
    let hint = failed["hint"].as_str().unwrap();
    assert!(
        hint.contains("the step's `inputs`") && !hint.contains("-i name=value"),
        "{hint}"
    );
}

/// Regression: a gate `reason` that is exactly `${{ }}` of `()` became the text "null", while
/// inside a longer text `()` renders as nothing.
#[test]
fn a_gate_reason_with_no_value_is_no_reason() {
    let repo = RunRepo::new();
    let path = repo.workflow_text(
        "unit.yaml",
        "workflow_id: unit\nversion: 1\ndescription: d\nentry_step: review\nsteps:\n  - id: review\n    opcode: GATE\n    gate: queue_for_review\n    reason: \"${{ () }}\"\n    routes: {gate_queued: STOP}\n",
    );
    let (code, result, output) = repo.run(&path, &[]);
    assert_eq!(code, Some(0), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    assert_eq!(
        repo.json(run_id, "artifacts/review/1/gate_request.json")["reason"],
        format!("review step `review` of run {run_id}")
    );
}

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}
