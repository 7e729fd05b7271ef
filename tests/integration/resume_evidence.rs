//! The manifest of a visit interrupted by a crash, as `resume` records it: every file its step
//! left (not only an agent's), under the opcode the visit ran with.

use crate::kernel_support::{RunRepo, assert_contiguous};
use crate::support::{stderr_text, stdout_text};

/// An agent step, a validation whose validator prints to both streams, an evaluation, a
/// rollback to `pre_run`, then STOP.
const WORKFLOW: &str = "workflow_id: evidence\nversion: 1\ndescription: every kind of step, to be killed in\nentry_step: work\nsteps:\n  - id: work\n    opcode: RUN_AGENT\n    agent: scripted\n    prompt: |\n      WRITE work.txt: the work\n    routes:\n      \"*\": check\n  - id: check\n    opcode: RUN_VALIDATION\n    run: [tests]\n    routes:\n      \"*\": judge\n  - id: judge\n    opcode: EVALUATE\n    prompt: planner.evaluate_results.v1\n    allowed_next_steps: [undo, failed]\n    routes:\n      success: undo\n      partial: undo\n      blocked: undo\n      unsafe: undo\n      needs_human: failed\n  - id: undo\n    opcode: ROLLBACK\n    target: pre_run\n    routes:\n      \"*\": done\n  - id: done\n    opcode: STOP\n    outcome: success\n    reason: done\n  - id: failed\n    opcode: STOP\n    outcome: failure\n";

fn repo() -> RunRepo {
    let repo = RunRepo::new();
    let config = repo.path().join(".tnh/config.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!(
            "{text}validators:\n  tests: {{argv: [sh, -c, \"echo validator-out; echo validator-err >&2\"]}}\n"
        ),
    )
    .unwrap();
    repo
}

/// The sequence number of the first `event_type` event of `step`.
fn seq_of(events: &[serde_json::Value], event_type: &str, step: &str) -> u64 {
    events
        .iter()
        .find(|event| event["event_type"] == event_type && event["step_id"] == step)
        .unwrap_or_else(|| panic!("no {event_type} of {step}"))["seq"]
        .as_u64()
        .unwrap()
}

/// Runs the workflow killed right after event `seq`, then resumes it to its end; returns the
/// repository and the run id.
fn killed_at_then_resumed(seq: u64) -> (RunRepo, String) {
    let repo = repo();
    let workflow = repo.workflow_text("evidence.yaml", WORKFLOW);
    repo.run_killed_at(&workflow, seq);
    let run_id = repo.only_run_id();
    repo.conductor_exits(&["resume", &run_id], 0);
    assert_contiguous(&repo.events(&run_id));
    (repo, run_id)
}

/// The paths an interrupted visit's manifest lists, with the manifest.
fn listed(repo: &RunRepo, run_id: &str, step: &str) -> (Vec<String>, serde_json::Value) {
    let manifest = repo.json(run_id, &format!("artifacts/{step}/1/manifest.json"));
    assert_eq!(manifest["termination"], "interrupted", "{manifest}");
    let paths = manifest["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["path"].as_str().unwrap().to_owned())
        .collect();
    (paths, manifest)
}

/// Interrupted RUN_VALIDATION, EVALUATE and ROLLBACK visits had manifests
/// with no artifacts, though their folders held the validator's output, the planner input and
/// the rollback record; and `runs show` hid what the interrupted rollback undid.
#[test]
fn interrupted_validation_evaluation_and_rollback_visits_list_what_they_left() {
    let reference = repo();
    let workflow = reference.workflow_text("evidence.yaml", WORKFLOW);
    let (code, result, output) = reference.run(&workflow, &[]);
    assert_eq!(code, Some(0), "{result}{}", stderr_text(&output));
    let events = reference.events(result["run_id"].as_str().unwrap());

    let (repo, run_id) = killed_at_then_resumed(seq_of(&events, "runner_completed", "check"));
    let (paths, manifest) = listed(&repo, &run_id, "check");
    assert_eq!(manifest["opcode"], "RUN_VALIDATION");
    for path in [
        "artifacts/check/1/validators/tests/stdout.txt",
        "artifacts/check/1/validators/tests/stderr.txt",
    ] {
        assert!(paths.contains(&path.to_owned()), "{path} not in {paths:?}");
    }

    let (repo, run_id) = killed_at_then_resumed(seq_of(&events, "planner_decision", "judge"));
    let (paths, manifest) = listed(&repo, &run_id, "judge");
    assert_eq!(manifest["opcode"], "EVALUATE");
    assert!(
        paths.contains(&"artifacts/judge/1/planner_input.json".to_owned()),
        "{paths:?}"
    );

    let (repo, run_id) = killed_at_then_resumed(seq_of(&events, "rollback_completed", "undo"));
    let (paths, manifest) = listed(&repo, &run_id, "undo");
    assert_eq!(manifest["opcode"], "ROLLBACK");
    assert_eq!(paths, ["artifacts/undo/1/rollback.json"]);
    assert_eq!(
        manifest["evidence_summary"]["rollback"]["target"], "pre_run",
        "{manifest}"
    );
    let show = stdout_text(&repo.conductor_exits(&["runs", "show", &run_id], 0));
    assert!(
        show.contains("reset the worktree before it was interrupted: to pre_run: undid 1 file"),
        "{show}"
    );
}

/// The interrupted visit's manifest took its opcode from the workflow as
/// edited after the crash, not from the visit's `step_started` event.
#[test]
fn an_interrupted_visit_keeps_the_opcode_it_ran_with_after_the_workflow_is_edited() {
    let reference = repo();
    let workflow = reference.workflow_text("evidence.yaml", WORKFLOW);
    let (_, result, _) = reference.run(&workflow, &[]);
    let events = reference.events(result["run_id"].as_str().unwrap());
    let seq = seq_of(&events, "runner_started", "work");

    let repo = repo();
    let workflow = repo.workflow_text("evidence.yaml", WORKFLOW);
    repo.run_killed_at(&workflow, seq);
    let run_id = repo.only_run_id();
    // `work` becomes a validation.
    let edited = WORKFLOW.replace(
        "    opcode: RUN_AGENT\n    agent: scripted\n    prompt: |\n      WRITE work.txt: the work\n",
        "    opcode: RUN_VALIDATION\n    run: [tests]\n",
    );
    assert_ne!(edited, WORKFLOW);
    std::fs::write(&workflow, edited).unwrap();

    repo.conductor_exits(&["resume", &run_id], 0);

    let (paths, manifest) = listed(&repo, &run_id, "work");
    assert_eq!(manifest["opcode"], "RUN_AGENT", "{manifest}");
    assert!(
        paths.contains(&"artifacts/work/1/inputs.json".to_owned()),
        "{paths:?}"
    );
}
