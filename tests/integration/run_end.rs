//! How a run's end reads: a failed run says why (the violation, the validators that failed,
//! the planner's verdict), and every command that ends a run words the same end the same way.

use crate::kernel_support::RunRepo;
use crate::support::{stderr_text, stdout_text};

/// An agent step, a validation whose `tests` fail with exit 3, the rules planner, and a
/// failure STOP for anything but success.
const FAILING_CHECKS: &str = r#"workflow_id: failing_checks
version: 1
description: validators fail and the planner does not accept the work
entry_step: work
steps:
  - id: work
    opcode: RUN_AGENT
    agent: scripted
    prompt: "WRITE src/a.txt: work"
    routes: {completed: check, "*": failed}
  - id: check
    opcode: RUN_VALIDATION
    run: [tests]
    routes: {"*": judge}
  - id: judge
    opcode: EVALUATE
    prompt: planner.evaluate_results.v1
    allowed_next_steps: [failed]
    routes: {success: STOP, partial: failed, blocked: failed, unsafe: failed, needs_human: failed}
  - id: failed
    opcode: STOP
    outcome: failure
    reason: the work was not accepted
"#;

#[test]
fn a_failed_run_says_which_validators_failed_and_what_the_planner_answered() {
    let repo = RunRepo::new();
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!("{config}validators:\n  tests:\n    argv: [sh, -c, \"exit 3\"]\n"),
    );
    let workflow = repo.workflow_text("wf.yaml", FAILING_CHECKS);
    let (run_id, result) = repo.run_exits(&workflow, &[], 1);
    let detail = result["detail"].as_str().unwrap();
    assert!(
        detail.contains("the work was not accepted — ")
            && detail.contains("validators failed: tests (exit 3)")
            && detail.contains("planner `judge` answered partial"),
        "{detail}"
    );
    // The same words in the status and the journal's record of the end.
    let status = repo.json(&run_id, "status.json");
    assert_eq!(status["reason"].as_str(), Some(detail), "{status}");
}

#[test]
fn a_failed_run_names_the_policy_violation_behind_its_rollback() {
    let repo = RunRepo::new();
    let workflow = repo.workflow("unsafe.yaml");
    let (_, result) = repo.run_exits(&workflow, &[], 1);
    let detail = result["detail"].as_str().unwrap();
    assert!(
        detail.contains("the change broke the policy and was rolled back — ")
            && detail.contains("policy violation: ")
            && detail.contains(".github/workflows/ci.yml")
            && detail.contains("planner `evaluate` answered unsafe"),
        "{detail}"
    );
}

/// A success carries no cause: nothing failed.
#[test]
fn a_successful_run_has_no_cause_appended() {
    let repo = RunRepo::new();
    let workflow = repo.workflow("linear.yaml");
    let (_, result) = repo.run_exits(&workflow, &[], 0);
    let detail = result["detail"].as_str().unwrap();
    assert!(!detail.contains(" — "), "{detail}");
}

/// The `run ID: STATE — DETAIL` line of a command's output, with the run id left out.
fn end_line(stdout: &str, run_id: &str) -> String {
    let prefix = format!("run {run_id}: ");
    stdout
        .lines()
        // On a terminal the line may follow the progress line's erase sequence.
        .find_map(|line| Some(&line[line.find(&prefix)? + prefix.len()..]))
        .unwrap_or_else(|| panic!("no end line for {run_id}: {stdout}"))
        .trim_end()
        .to_owned()
}

/// `run --wait` on a pseudo-terminal as `alice`, approving at the gate as `lead`.
fn run_wait_approving(repo: &RunRepo, workflow: &std::path::Path) -> String {
    let output = std::process::Command::new("python3")
        .arg(crate::support::fixture("pty/answer.py"))
        .args(["[a/r/s/l]: =a", "comment (optional): =ok"])
        .args(["--", env!("CARGO_BIN_EXE_tnh-conductor"), "--repo"])
        .arg(repo.path())
        .args(["run", "--wait", "--as", "lead"])
        .arg(workflow)
        .output()
        .unwrap();
    stdout_text(&output)
}

/// One end, one wording: the same end reads the same whether `run --wait` decided the gate,
/// `gate approve --resume` continued the run, `gate approve` ended it, or `resume` did after
/// the decision; and `demo` says it the same way.
#[test]
fn every_command_that_ends_a_run_words_the_same_end_the_same_way() {
    let gate = std::fs::read_to_string(crate::support::fixture("runs/gate.yaml")).unwrap();
    // The decision routes to one more agent step, or straight to the bare STOP.
    let through_a_step = gate.replace("gate_approved: STOP", "gate_approved: more")
        + "  - id: more\n    opcode: RUN_AGENT\n    agent: scripted\n    prompt: \"WRITE more.txt: more\"\n    routes: {\"*\": STOP}\n";
    for text in [gate.clone(), through_a_step] {
        let mut lines = Vec::new();
        // `gate approve --resume`, then `gate approve` and `resume` apart.
        for split in [false, true] {
            let repo = RunRepo::new();
            let workflow = repo.workflow_text("gate.yaml", &text);
            let (run_id, _) = repo.run_exits(&workflow, &[], 3);
            let decided = if split {
                repo.conductor_exits(&["gate", "approve", &run_id, "--as", "lead"], 0)
            } else {
                repo.conductor_exits(&["gate", "approve", &run_id, "--as", "lead", "--resume"], 0)
            };
            let stdout = stdout_text(&decided);
            if stdout.contains(&format!("run {run_id}: ")) {
                lines.push(end_line(&stdout, &run_id));
            } else {
                let resumed = repo.conductor_exits(&["resume", &run_id], 0);
                lines.push(end_line(&stdout_text(&resumed), &run_id));
            }
        }
        let repo = RunRepo::new();
        let workflow = repo.workflow_text("gate.yaml", &text);
        let transcript = run_wait_approving(&repo, &workflow);
        lines.push(end_line(&transcript, &repo.only_run_id()));
        assert!(lines[0].starts_with("completed — "), "{lines:?}");
        assert!(
            lines.iter().all(|line| *line == lines[0]),
            "{lines:?}\n{}",
            stderr_text(&repo.conductor(&["runs", "list"]))
        );
    }
}

/// A RUN_VALIDATION's progress line names the validators that failed and their exit codes; a
/// failure routed to the bare `STOP` says which too.
#[test]
fn the_validation_line_and_a_bare_stop_name_the_failed_validators() {
    let repo = RunRepo::new();
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "{config}validators:\n  tests:\n    argv: [sh, -c, \"exit 3\"]\n  lint:\n    argv: [\"true\"]\n"
        ),
    );
    let workflow = repo.workflow_text(
        "wf.yaml",
        "workflow_id: checks\nversion: 1\ndescription: d\nentry_step: check\nsteps:\n  - id: check\n    opcode: RUN_VALIDATION\n    run: [tests, lint]\n    routes: {\"*\": STOP}\n",
    );
    let output = repo.conductor_exits(&["run", workflow.to_str().unwrap()], 1);
    let progress = stderr_text(&output);
    let line = progress
        .lines()
        .find(|line| line.contains("check #1: error ("))
        .unwrap_or_else(|| panic!("{progress}"));
    assert!(line.ends_with("— tests exit 3"), "{line}");
    let stdout = stdout_text(&output);
    assert!(
        stdout.contains("step `check` routed `error` to STOP — validators failed: tests (exit 3)"),
        "{stdout}"
    );
}
