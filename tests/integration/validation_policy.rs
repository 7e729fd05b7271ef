//! RUN_VALIDATION steps are checked like agent steps: what a validator (or a harness an agent
//! wrote under the run directory) changes in the worktree is captured and checked against the
//! policy, and the guard puts back protected refs it moved. Real repositories, the real binary.

use crate::kernel_support::RunRepo;
use crate::support::{git_in, stderr_text};

/// A repository whose `tests` validator runs the shell `script` in the worktree, beside the
/// scripted agent.
fn repo_with_validator(script: &str) -> RunRepo {
    let repo = RunRepo::new();
    repo.repo.write("src/a.txt", "hello\n");
    repo.repo.git(&["add", "src/a.txt"]);
    repo.repo.git(&["commit", "-q", "-m", "a source file"]);
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!("{config}validators:\n  tests:\n    argv: [sh, -c, {script:?}]\n"),
    );
    repo
}

/// An agent step changes `src/a.txt`, the `tests` validator runs under a policy that allows
/// `src/**` only and forbids `README.md` and `.github/**`, the rules planner judges, and an
/// unsafe verdict rolls back to `pre_step`.
const AGENT_THEN_VALIDATION: &str = r#"workflow_id: validation_policy
version: 1
description: a validator that edits forbidden paths
entry_step: work
defaults:
  policy: {allowed_paths: ["src/**"], forbidden_paths: ["README.md", ".github/**"]}
steps:
  - id: work
    opcode: RUN_AGENT
    agent: scripted
    prompt: "WRITE src/a.txt: work"
    routes: {completed: check, "*": failed}
  - id: check
    opcode: RUN_VALIDATION
    run: [tests]
    policy: {allowed_paths: ["src/**"], forbidden_paths: ["README.md", ".github/**"]}
    routes: {"*": judge}
  - id: judge
    opcode: EVALUATE
    prompt: planner.evaluate_results.v1
    allowed_next_steps: [undo, failed]
    routes: {success: STOP, partial: failed, blocked: failed, unsafe: undo, needs_human: failed}
  - id: undo
    opcode: ROLLBACK
    target: pre_step
    routes: {"*": failed}
  - id: failed
    opcode: STOP
    outcome: failure
"#;

fn violations_of<'a>(
    events: &'a [serde_json::Value],
    step: &str,
    visit: u64,
) -> Vec<&'a serde_json::Value> {
    events
        .iter()
        .filter(|event| {
            event["event_type"] == "policy_violation"
                && event["step_id"] == step
                && event["visit"] == visit
        })
        .map(|event| &event["violation"])
        .collect()
}

fn roles(manifest: &serde_json::Value) -> Vec<String> {
    manifest["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["role"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_validator_writing_forbidden_paths_is_a_violation_the_evaluation_is_unsafe_and_rolled_back() {
    let repo = repo_with_validator(
        "echo 'edited by the validator' > README.md; mkdir -p .github; echo evil > .github/ci.yml",
    );
    let workflow = repo.workflow_text("wf.yaml", AGENT_THEN_VALIDATION);
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(1), "{result}{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let events = repo.events(run_id);

    let violations = violations_of(&events, "check", 1);
    let paths: Vec<&str> = violations
        .iter()
        .filter(|violation| violation["class"] == "forbidden_path")
        .filter_map(|violation| violation["path"].as_str())
        .collect();
    assert!(
        paths.contains(&"README.md") && paths.contains(&".github/ci.yml"),
        "{violations:?}"
    );
    assert!(
        violations_of(&events, "work", 1).is_empty(),
        "the agent's change is allowed"
    );

    let summary = repo.json(run_id, "artifacts/check/1/policy_summary.json");
    assert_eq!(summary["verdict"], "violation", "{summary}");
    let classes: Vec<(&str, &str)> = summary["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|violation| {
            (
                violation["class"].as_str().unwrap(),
                violation["path"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        classes.contains(&("forbidden_path", "README.md"))
            && classes.contains(&("forbidden_path", ".github/ci.yml")),
        "{summary}"
    );
    assert!(
        summary["network"]["tests"].is_string(),
        "the validators' isolation stays recorded: {summary}"
    );
    let status = repo.json(run_id, "artifacts/check/1/workspace_status.json");
    let changed: Vec<&str> = status["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|file| file["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        changed,
        [".github/ci.yml", "README.md"],
        "only the validator's changes, not the agent's: {status}"
    );
    let diff = std::fs::read_to_string(
        repo.run_dir(run_id)
            .join("artifacts/check/1/workspace.diff"),
    )
    .unwrap();
    assert!(diff.contains("+edited by the validator"), "{diff}");

    let manifest = repo.json(run_id, "artifacts/check/1/manifest.json");
    for role in ["workspace_diff", "workspace_status", "policy_summary"] {
        assert!(roles(&manifest).iter().any(|found| found == role), "{role}");
    }
    // Each path is forbidden and outside `allowed_paths`: four violations.
    let count = summary["violations"].as_array().unwrap().len();
    assert_eq!(count, 4, "{summary}");
    assert_eq!(manifest["evidence_summary"]["policy_violations"], count);
    assert_eq!(violations.len(), count);
    assert_eq!(manifest["evidence_summary"]["diffstat"]["files_changed"], 2);

    let completed = events
        .iter()
        .find(|event| event["event_type"] == "step_completed" && event["step_id"] == "check")
        .unwrap();
    assert!(
        completed["policy_violation"].is_string(),
        "the kernel got the violation: {completed}"
    );
    let decision = repo.json(run_id, "artifacts/judge/1/planner_decision.json");
    assert_eq!(decision["status"], "unsafe", "{decision}");

    // The rollback to `pre_step` (the snapshot before the agent, not one taken by the
    // validation) removed both changes.
    let prefix = format!("refs/tnh/runs/{run_id}/pre_step/");
    let refs = git_in(
        repo.path(),
        &["for-each-ref", "--format=%(refname)", prefix.as_str()],
    );
    assert_eq!(refs.trim(), format!("{prefix}work/1"), "{refs}");
    let worktree = repo.path().join(".tnh/worktrees").join(run_id);
    assert_eq!(
        std::fs::read_to_string(worktree.join("README.md")).unwrap(),
        "# test repository\n"
    );
    assert!(!worktree.join(".github/ci.yml").exists());
    assert_eq!(
        std::fs::read_to_string(worktree.join("src/a.txt")).unwrap(),
        "hello\n"
    );
    assert_eq!(
        git_in(&worktree, &["status", "--porcelain"]).trim(),
        "",
        "the rollback left the worktree clean"
    );

    let shown = repo.conductor(&["runs", "show", run_id]);
    let text = crate::support::stdout_text(&shown);
    assert!(text.contains("4 policy violation(s)"), "{text}");
    assert!(text.contains("forbidden path `README.md`"), "{text}");
}

#[test]
fn a_harness_an_agent_wrote_under_the_run_directory_is_checked_too() {
    let repo = RunRepo::new();
    let workflow = repo.workflow_text(
        "harness.yaml",
        r#"workflow_id: harness_policy
version: 1
description: a generated harness that edits CI configuration
entry_step: synthesize
defaults:
  policy: {forbidden_paths: [".github/**"]}
steps:
  - id: synthesize
    opcode: RUN_AGENT
    agent: scripted
    prompt: |
      WRITE ${run_dir}/harness/harness.sh: mkdir -p .github/workflows\necho 'on: push' > .github/workflows/ci.yml\n
    routes: {completed: execute_harness, "*": failed}
  - id: execute_harness
    opcode: RUN_VALIDATION
    run:
      - id: generated
        kind: script
        entrypoint: ".tnh/run/${run_id}/harness/harness.sh"
    routes: {"*": evaluate}
  - id: evaluate
    opcode: EVALUATE
    prompt: planner.evaluate_results.v1
    allowed_next_steps: [review, failed]
    routes: {success: STOP, partial: failed, blocked: failed, unsafe: failed, needs_human: review}
  - id: review
    opcode: GATE
    gate: requires_approval
    routes: {gate_approved: STOP, gate_rejected: failed}
  - id: failed
    opcode: STOP
    outcome: failure
"#,
    );
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(1), "{result}{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let report = repo.json(run_id, "artifacts/execute_harness/1/validation_report.json");
    assert_eq!(
        report["validators"]["generated"]["outcome"], "completed",
        "{report}"
    );
    let events = repo.events(run_id);
    let violations = violations_of(&events, "execute_harness", 1);
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert_eq!(violations[0]["class"], "forbidden_path");
    assert_eq!(violations[0]["path"], ".github/workflows/ci.yml");
    assert_eq!(
        repo.json(run_id, "artifacts/evaluate/1/planner_decision.json")["status"],
        "unsafe"
    );
}

#[test]
fn a_validator_that_changes_nothing_is_clean_and_completed() {
    let repo = repo_with_validator("test -f src/a.txt && mkdir -p build && echo cache > build/out");
    repo.repo.write(".gitignore", "build/\n");
    repo.repo.git(&["add", ".gitignore"]);
    repo.repo
        .git(&["commit", "-q", "-m", "ignore build output"]);
    let workflow = repo.workflow_text(
        "quiet.yaml",
        r#"workflow_id: quiet_validation
version: 1
description: a validator that leaves only ignored files
entry_step: check
defaults:
  policy: {allowed_paths: ["src/**"], forbidden_paths: ["README.md"]}
steps:
  - id: check
    opcode: RUN_VALIDATION
    run: [tests]
    routes: {completed: STOP, "*": failed}
  - id: failed
    opcode: STOP
    outcome: failure
"#,
    );
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(0), "{result}{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let events = repo.events(run_id);
    assert!(
        !events
            .iter()
            .any(|event| event["event_type"] == "policy_violation"),
        "{events:?}"
    );
    let manifest = repo.json(run_id, "artifacts/check/1/manifest.json");
    assert_eq!(manifest["termination"], "completed", "{manifest}");
    assert_eq!(manifest["evidence_summary"]["policy_violations"], 0);
    // Nothing changed: no change is listed, so the gate and the journal keep showing the
    // agent's (the files are written all the same).
    assert!(manifest["evidence_summary"].get("diffstat").is_none());
    let listed = roles(&manifest);
    assert!(
        listed.iter().any(|role| role == "policy_summary"),
        "{listed:?}"
    );
    assert!(
        !listed
            .iter()
            .any(|role| role == "workspace_diff" || role == "workspace_status"),
        "{listed:?}"
    );
    let summary = repo.json(run_id, "artifacts/check/1/policy_summary.json");
    assert_eq!(summary["verdict"], "clean", "{summary}");
    assert_eq!(summary["violations"], serde_json::json!([]));
    assert!(
        summary["guard_report"]["ref_changes"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let status = repo.json(run_id, "artifacts/check/1/workspace_status.json");
    assert_eq!(status["files"], serde_json::json!([]), "{status}");
    assert_eq!(status["diffstat"]["files_changed"], 0);
    let diff = repo
        .run_dir(run_id)
        .join("artifacts/check/1/workspace.diff");
    assert_eq!(std::fs::read(diff).unwrap(), b"");
    assert!(
        !repo
            .run_dir(run_id)
            .join("artifacts/check/1/guard_state.json")
            .exists(),
        "the saved guard state is removed once the step is checked"
    );
}

#[test]
fn a_validator_moving_main_is_put_back_and_is_a_protected_branch_violation() {
    let repo = repo_with_validator(
        "git update-ref refs/heads/main $(git -c user.name=v -c user.email=v@example.invalid commit-tree HEAD^{tree} -p HEAD -m evil)",
    );
    let main_before = git_in(repo.path(), &["rev-parse", "main"]);
    let workflow = repo.workflow_text("wf.yaml", AGENT_THEN_VALIDATION);
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(1), "{result}{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    assert_eq!(
        git_in(repo.path(), &["rev-parse", "main"]),
        main_before,
        "main was put back"
    );
    let summary = repo.json(run_id, "artifacts/check/1/policy_summary.json");
    let changes = summary["guard_report"]["ref_changes"].as_array().unwrap();
    assert!(
        changes
            .iter()
            .any(|change| change["refname"] == "refs/heads/main"
                && change["class"] == "protected_branch"
                && change["restored"] == true),
        "{summary}"
    );
    let events = repo.events(run_id);
    let violations = violations_of(&events, "check", 1);
    assert!(
        violations
            .iter()
            .any(|violation| violation["class"] == "protected_branch_violation"),
        "{violations:?}"
    );
    assert_eq!(
        repo.json(run_id, "artifacts/judge/1/planner_decision.json")["status"],
        "unsafe"
    );
}

#[test]
fn a_validation_whose_driving_process_died_is_checked_on_resume() {
    // On its first visit the validator moves `main`, edits README.md and kills the conductor
    // driving it; on the second it does nothing.
    let repo = repo_with_validator(
        "case \"$TNH_STEP_DIR\" in */1) git update-ref refs/heads/main $(git -c user.name=v -c user.email=v@example.invalid commit-tree HEAD^{tree} -p HEAD -m evil); echo edited > README.md; kill -9 $PPID; sleep 5;; esac",
    );
    let main_before = git_in(repo.path(), &["rev-parse", "main"]);
    let workflow = repo.workflow_text("wf.yaml", AGENT_THEN_VALIDATION);
    let (code, _, output) = repo.run(&workflow, &[]);
    assert_eq!(code, None, "killed: {}", stderr_text(&output));
    let run_id = repo.only_run_id();
    assert!(
        repo.run_dir(&run_id)
            .join("artifacts/check/1/guard_state.json")
            .is_file(),
        "the guard state was saved before the validator ran"
    );

    // `main` moved since the step started may be the operator's work
    // since the kill: refused, nothing put back, until told whose it is.
    let moved = git_in(repo.path(), &["rev-parse", "main"]);
    let refused = repo.conductor_exits(&["resume", &run_id], 2);
    assert!(
        stderr_text(&refused).contains("`refs/heads/main` (protected branch)"),
        "{}",
        stderr_text(&refused)
    );
    assert_eq!(git_in(repo.path(), &["rev-parse", "main"]), moved);

    repo.conductor_exits(&["resume", "--put-back", &run_id], 1);
    assert_eq!(git_in(repo.path(), &["rev-parse", "main"]), main_before);
    let events = repo.events(&run_id);
    let interrupted = violations_of(&events, "check", 1);
    assert!(
        interrupted
            .iter()
            .any(|violation| violation["class"] == "protected_branch_violation"),
        "the resume checked the interrupted visit: {interrupted:?}"
    );
    // The visit run again compares with the worktree from before the interrupted one, so the
    // README.md edit it left is caught.
    let rerun = violations_of(&events, "check", 2);
    assert!(
        rerun
            .iter()
            .any(|violation| violation["class"] == "forbidden_path"
                && violation["path"] == "README.md"),
        "{rerun:?}"
    );
    assert_eq!(
        repo.json(&run_id, "artifacts/judge/1/planner_decision.json")["status"],
        "unsafe"
    );
}

#[test]
fn a_validation_that_changes_nothing_leaves_the_agents_change_in_the_review_context() {
    let repo = repo_with_validator("true");
    let workflow = repo.workflow_text(
        "review.yaml",
        r#"workflow_id: quiet_review
version: 1
description: an agent change, a quiet validation, a queued review
entry_step: work
steps:
  - id: work
    opcode: RUN_AGENT
    agent: scripted
    prompt: "WRITE src/a.txt: work"
    routes: {completed: check, "*": STOP}
  - id: check
    opcode: RUN_VALIDATION
    run: [tests]
    routes: {"*": review}
  - id: review
    opcode: GATE
    gate: queue_for_review
    routes: {gate_queued: STOP}
"#,
    );
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(0), "{result}{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let request = repo.json(run_id, "artifacts/review/1/gate_request.json");
    assert_eq!(
        request["context"]["diffstat"]["files_changed"], 1,
        "{request}"
    );
    assert_eq!(
        request["context"]["last_step"]["diff"], "artifacts/work/1/workspace.diff",
        "{request}"
    );
    assert_eq!(
        request["context"]["last_step"]["diffstat"]["files_changed"], 1,
        "{request}"
    );
}

/// A build tool that brings a lockfile in line (`cargo test` writing `Cargo.lock`) in a
/// validation step is not an agent changing dependencies: `modify_lockfiles` applies to agent
/// steps, where the same write is a violation.
#[test]
fn a_validator_syncing_a_lockfile_is_not_a_lockfile_violation_an_agent_writing_one_is() {
    let repo = repo_with_validator("echo '# synced' >> Cargo.lock");
    let workflow = repo.workflow_text(
        "lockfile.yaml",
        r#"workflow_id: lockfile
version: 1
description: a validator that syncs a lockfile, then an agent that writes one
entry_step: check
defaults:
  policy: {forbidden_operations: [modify_lockfiles]}
steps:
  - id: check
    opcode: RUN_VALIDATION
    run: [tests]
    routes: {"*": work}
  - id: work
    opcode: RUN_AGENT
    agent: scripted
    prompt: "APPEND Cargo.lock: by hand"
    routes: {"*": failed}
  - id: failed
    opcode: STOP
    outcome: failure
"#,
    );

    let (code, result, output) = repo.run(&workflow, &[]);

    assert_eq!(code, Some(1), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let events = repo.events(run_id);
    assert!(violations_of(&events, "check", 1).is_empty());
    let agent = violations_of(&events, "work", 1);
    assert_eq!(agent.len(), 1, "{agent:?}");
    assert_eq!(agent[0]["rule"], "modify_lockfiles");
}

/// `repo_with_validator` plus a second registered validator, `second`, running `argv`.
fn repo_with_two_validators(first: &str, second: &str) -> RunRepo {
    let repo = repo_with_validator(first);
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!("{config}  second:\n    argv: {second}\n"),
    );
    repo
}

/// The second validator's `args` expression failed after the first validator had
/// run and written outside `allowed_paths`: the run ended without the capture or the policy
/// check, the first validator's result was lost. Every validator's expressions are evaluated
/// before any validator runs, so the step stops before anything ran, naming the expression.
#[test]
fn a_validator_expression_that_fails_stops_the_step_before_any_validator_runs() {
    let repo = repo_with_two_validators("echo forbidden > outside.txt", "[\"true\"]");
    let workflow = repo.workflow_text(
        "args_fail.yaml",
        r#"workflow_id: args_fail
version: 1
description: the second validator's args fail
entry_step: check
defaults:
  policy: {allowed_paths: ["src/**"]}
script: |
  fn boom() { throw "args failed" }
steps:
  - id: check
    opcode: RUN_VALIDATION
    run:
      - tests
      - {id: second, kind: builtin, args: ["${{ boom() }}"]}
    routes: {"*": STOP}
"#,
    );
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(4), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let events = repo.events(run_id);
    let types = crate::kernel_support::event_types(&events);
    assert!(
        !types.iter().any(|kind| kind == "runner_started"),
        "no validator ran: {types:?}"
    );
    let worktree = repo.path().join(".tnh/worktrees").join(run_id);
    assert!(!worktree.join("outside.txt").exists());
    // The failure names the expression's position, as fields of the event too.
    let failed = crate::kernel_support::first_event(&events, "step_failed");
    assert!(
        failed["error"].as_str().unwrap().contains("args failed"),
        "{failed}"
    );
    assert!(
        failed["file"].as_str().unwrap().ends_with("args_fail.yaml"),
        "{failed}"
    );
    // The `throw` in the script's `boom`, called from the second validator's `args`.
    assert_eq!(failed["line"], 8, "{failed}");
    assert!(failed["column"].is_u64(), "{failed}");
    assert_eq!(failed["code"], "script", "{failed}");
}

/// When a validator cannot be run after another one ran (here a
/// program found nowhere), what the first one did is still recorded — its result, the capture,
/// the policy check with its violation, the visit's manifest — and the step stops resumable.
/// (`run` refuses a program found nowhere before it starts: here the configuration names it
/// after the run started.)
#[test]
fn a_validator_that_cannot_run_after_another_ran_keeps_the_first_ones_evidence_and_violation() {
    let repo = repo_with_two_validators(
        "echo forbidden > outside.txt; echo first-validator-output",
        "[\"true\"]",
    );
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml"))
        .unwrap()
        .replace("[\"true\"]", "[\"no-such-validator-program-xyz\"]");
    let workflow = repo.workflow_text(
        "spawn_fail.yaml",
        r#"workflow_id: spawn_fail
version: 1
description: the second validator cannot be run
entry_step: check
defaults:
  policy: {allowed_paths: ["src/**"]}
steps:
  - id: check
    opcode: RUN_VALIDATION
    run: [tests, second]
    routes: {"*": STOP}
"#,
    );
    let (code, result, output) = repo.start_then_resume_with_config(&workflow, &config);
    assert_eq!(code, Some(4), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let events = repo.events(run_id);
    let violations = violations_of(&events, "check", 1);
    assert!(
        violations
            .iter()
            .any(|violation| violation["path"] == "outside.txt"),
        "{violations:?}"
    );
    let types = crate::kernel_support::event_types(&events);
    assert!(
        types.iter().any(|kind| kind == "runner_completed"),
        "{types:?}"
    );
    let report = repo.json(run_id, "artifacts/check/1/validation_report.json");
    assert_eq!(report["validators"]["tests"]["exit_code"], 0, "{report}");
    assert!(
        report["validators"]["second"]["cause"]
            .as_str()
            .unwrap()
            .contains("could not run"),
        "{report}"
    );
    let stdout = std::fs::read_to_string(
        repo.run_dir(run_id)
            .join("artifacts/check/1/validators/tests/stdout.txt"),
    )
    .unwrap();
    assert!(stdout.contains("first-validator-output"), "{stdout}");
    let manifest = repo.json(run_id, "artifacts/check/1/manifest.json");
    assert_eq!(manifest["termination"], "error", "{manifest}");
    assert_eq!(
        manifest["evidence_summary"]["policy_violations"], 1,
        "{manifest}"
    );
    let summary = repo.json(run_id, "artifacts/check/1/policy_summary.json");
    assert_eq!(summary["verdict"], "violation", "{summary}");
    let failed = crate::kernel_support::first_event(&events, "step_failed");
    assert_eq!(failed["resumable"], true, "{failed}");
}

/// What validators leave in tool caches (`__pycache__/`, `.pytest_cache/`, `.coverage`) is
/// removed after them: no violation under a policy that allows `src/**` only, nothing in the
/// validation's capture, nothing left for the next step's diff; the evidence names what went.
/// The same file written by an agent is charged to it, with a hint to ignore it.
#[test]
fn tool_caches_validators_write_are_charged_to_no_one() {
    let repo = repo_with_validator(
        "mkdir -p src/__pycache__ .pytest_cache/v/cache && echo x > src/__pycache__/a.cpython-311.pyc && echo '{}' > .pytest_cache/v/cache/lastfailed && echo d > .coverage && echo kept > src/made.txt",
    );
    let workflow = repo.workflow_text(
        "wf.yaml",
        r#"workflow_id: caches
version: 1
description: validators that leave caches, then an agent that does
entry_step: work
defaults:
  policy: {allowed_paths: ["src/**"]}
steps:
  - id: work
    opcode: RUN_AGENT
    agent: scripted
    prompt: "WRITE src/a.txt: work"
    routes: {completed: check, "*": failed}
  - id: check
    opcode: RUN_VALIDATION
    run: [tests]
    routes: {"*": again}
  - id: again
    opcode: RUN_AGENT
    agent: scripted
    prompt: "WRITE __pycache__/b.pyc: agent's own"
    routes: {"*": STOP}
  - id: failed
    opcode: STOP
    outcome: failure
"#,
    );
    let (code, result, output) = repo.run(&workflow, &[]);
    // The agent's cache file, never rolled back, fails the run.
    assert_eq!(code, Some(1), "{result}{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let events = repo.events(run_id);
    assert!(violations_of(&events, "check", 1).is_empty(), "{events:?}");

    let status = repo.json(run_id, "artifacts/check/1/workspace_status.json");
    let changed: Vec<&str> = status["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|file| file["path"].as_str().unwrap())
        .collect();
    assert_eq!(changed, ["src/made.txt"], "{status}");
    let manifest = repo.json(run_id, "artifacts/check/1/manifest.json");
    assert_eq!(
        manifest["evidence_summary"]["tool_caches_removed"],
        serde_json::json!([".coverage*", ".pytest_cache/", "__pycache__/"]),
        "{manifest}"
    );
    let worktree = repo.path().join(".tnh/worktrees").join(run_id);
    assert!(!worktree.join("src/__pycache__").exists());
    assert!(!worktree.join(".pytest_cache").exists());
    assert!(!worktree.join(".coverage").exists());
    assert!(
        worktree.join("src/made.txt").exists(),
        "an ordinary file stays"
    );

    // The agent's own cache file is its change: charged, with the way out.
    let violations = violations_of(&events, "again", 1);
    assert_eq!(violations.len(), 1, "{violations:?}");
    let detail = violations[0]["detail"].as_str().unwrap();
    assert!(
        detail.contains("`__pycache__/b.pyc` matches none of allowed_paths")
            && detail.contains("add `__pycache__/` to .gitignore"),
        "{detail}"
    );
}
