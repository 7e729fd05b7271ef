//! What scripts see during a real run: the workspace changes since `pre_run` behind
//! `changed_files()` and `diff_stat()` (the step's capture in a policy `check`), and a `ctx`
//! with per-step evidence, the last planner decision and the last harness report.
//!
//! Regression tests for scripts that saw no changes at all in a run, so scripted policy
//! checks (`tnh/policy`) never fired and gate reasons counted 0 files.

use std::path::Path;

use crate::kernel_support::RunRepo;
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

/// The README's `fix_flaky` workflow and `task.fix_flaky` prompt, run as written with a
/// `claude-code` profile that changes two files: the review reason counts them.
#[test]
fn the_readme_fix_flaky_example_counts_the_files_it_changed() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let workflow = fenced_block(&readme, "## Writing a workflow", "```yaml");
    let prompt = fenced_block(&readme, "## Writing a prompt", "```markdown");
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
