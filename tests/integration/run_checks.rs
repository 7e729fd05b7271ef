//! The checks before a run: `run` and `run --check` refuse an unknown function, an
//! unconfigured validator, a validator program or Python module that is missing, an agent CLI
//! that is missing, a missing parameter or prompt input — all at once, exit 2, before any
//! worktree, branch or run directory exists. And an expression that fails while a run runs
//! leaves it resumable.

use std::path::{Path, PathBuf};

use crate::kernel_support::RunRepo;
use crate::support::{TempRepo, conductor, fixture, git_in, stderr_text, stdout_text};

/// A folder holding a `python3` that imports nothing (`python3 -c "import X"` fails the way
/// Python says it) and runs `-m MODULE` the same way, first on `PATH`.
fn python_without_modules() -> (tempfile::TempDir, std::ffi::OsString) {
    let bin = tempfile::tempdir().unwrap();
    let shim = bin.path().join("python3");
    std::fs::write(
        &shim,
        "#!/bin/sh\nif [ \"$1\" = -c ]; then echo \"ModuleNotFoundError: No module named '${2#import }'\" >&2; exit 1; fi\necho \"$0: No module named $2\" >&2\nexit 1\n",
    )
    .unwrap();
    make_executable(&shim);
    let path = path_with(bin.path());
    (bin, path)
}

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `PATH` with `folder` first.
fn path_with(folder: &Path) -> std::ffi::OsString {
    let mut folders = vec![folder.to_path_buf()];
    folders.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(folders).unwrap()
}

/// Asserts nothing of a run exists: no run directory, no worktree, no `tnh/*` branch.
#[track_caller]
fn assert_nothing_created(repo: &Path) {
    assert!(
        !repo.join(".tnh/run").exists(),
        "a run directory was created"
    );
    assert!(
        !repo.join(".tnh/worktrees").exists(),
        "a worktree was created"
    );
    let branches = git_in(repo, &["branch", "--list", "tnh/*"]);
    assert!(branches.trim().is_empty(), "branches: {branches}");
}

/// A workflow with one of each mistake.
const MISTAKES: &str = r#"workflow_id: mistakes
version: 1
description: one of each mistake the checks before a run find
entry_step: implement
params:
  ticket: {type: string, required: true}
  adr_id: {type: string}
script: |
  fn fix(text) { text }
steps:
  - id: implement
    opcode: RUN_AGENT
    agent: claude-code
    prompt: task.implement_adr.v1
    inputs: [adr_id]
    routes: {completed: check, "*": STOP}
  - id: check
    opcode: RUN_VALIDATION
    run: [lint, pytests, format]
    routes: {completed: review, "*": STOP}
  - id: review
    opcode: GATE
    gate: queue_for_review
    reason: "${{ fixed(params.ticket) }}"
    routes: {gate_queued: STOP}
"#;

fn mistakes_repo() -> (TempRepo, PathBuf) {
    let repo = TempRepo::new();
    repo.write(
        ".tnh/config.yaml",
        "validators:\n  pytests: {argv: [python3, -m, pytest, -q]}\n  format: {argv: [tnh-no-such-formatter, --check]}\n",
    );
    let workflow = repo.write("wf/mistakes.yaml", MISTAKES);
    (repo, workflow)
}

/// Every mistake is named, with where and a hint, in one invocation of `run` or `run --check`.
#[test]
fn run_and_run_check_report_every_mistake_at_once_before_anything_exists() {
    let (repo, workflow) = mistakes_repo();
    let (_bin, path) = python_without_modules();
    for check in [true, false] {
        let mut command = conductor();
        command
            .arg("--repo")
            .arg(repo.path())
            .args(["--color", "never", "run"])
            .args(check.then_some("--check"))
            .arg(&workflow)
            .env("PATH", &path)
            .env("TNH_CLAUDE_BIN", "/nonexistent/claude");
        let output = command.output().unwrap();
        let stderr = stderr_text(&output);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        for expected in [
            // The unknown function, at its place, with the near name.
            "mistakes.yaml:24:18: error: function `fixed` is not defined",
            "did you mean `fix`?",
            // The required parameter, at its declaration.
            "mistakes.yaml:6:3: error: the required parameter `ticket` (string) was not given",
            // The prompt input taken from a parameter the run does not have.
            "mistakes.yaml:15:14: error: step `implement`: prompt `task.implement_adr.v1` requires input `adr_id`",
            // The agent CLI, with how to install it.
            "step `implement`: agent `claude-code` runs `/nonexistent/claude`, which is not found",
            "npm install -g @anthropic-ai/claude-code",
            // The unconfigured validator, with the key to set.
            "step `check`: validator `lint` is not configured and cannot be detected",
            "set `validators.lint` in .tnh/config.yaml",
            // The Python module that does not import.
            "validator `pytests` runs `python3 -m pytest -q`, but `python3` cannot import `pytest`",
            // The validator program that is not found.
            "validator `format` runs `tnh-no-such-formatter`, which is not found (not on PATH)",
            "error: 7 problems were found before the run of",
        ] {
            assert!(
                stderr.contains(expected),
                "--check {check}: `{expected}` missing in:\n{stderr}"
            );
        }
        assert_nothing_created(repo.path());
    }
}

/// A detected Python tool whose module is missing is named with the key to set.
#[test]
fn a_detected_python_tool_whose_module_does_not_import_is_refused() {
    let repo = TempRepo::new();
    repo.write("pyproject.toml", "[project]\nname = \"x\"\n");
    let workflow = repo.write(
        "wf/tests.yaml",
        "workflow_id: tests\nversion: 1\ndescription: d\nentry_step: check\nsteps:\n  - id: check\n    opcode: RUN_VALIDATION\n    run: [tests]\n    routes: {completed: STOP, \"*\": STOP}\n",
    );
    let (_bin, path) = python_without_modules();
    let output = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["--color", "never", "run", "--check"])
        .arg(&workflow)
        .env("PATH", &path)
        .output()
        .unwrap();
    let stderr = stderr_text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("tests.yaml:8:11: error: step `check`: validator `tests` runs `python3 -m pytest -q`, but `python3` cannot import `pytest`: ModuleNotFoundError: No module named 'pytest' [python-module-missing]"),
        "{stderr}"
    );
    assert!(
        stderr.contains("or set `validators.tests` in .tnh/config.yaml"),
        "{stderr}"
    );
    assert_nothing_created(repo.path());
}

const FINE: &str = "workflow_id: fine\nversion: 1\ndescription: d\nentry_step: work\nsteps:\n  - id: work\n    opcode: RUN_AGENT\n    agent: claude\n    prompt: \"say hello\"\n    routes: {completed: STOP, \"*\": STOP}\n";

/// `run --check` of a workflow that is ready says so, exits 0 and creates nothing; a CLI newer
/// than the tested versions is a warning, an older one an error.
#[test]
fn run_check_says_ok_and_judges_the_agent_cli_version() {
    let repo = TempRepo::new();
    let workflow = repo.write("wf/fine.yaml", FINE);
    let check = |version: &str| {
        conductor()
            .arg("--repo")
            .arg(repo.path())
            .args(["--color", "never", "run", "--check"])
            .arg(&workflow)
            .env("TNH_CLAUDE_BIN", fixture("agents/bin/claude"))
            .env("TNH_FAKE_VERSION", version)
            .output()
            .unwrap()
    };
    let tested = check("2.1.332 (Claude Code)");
    assert_eq!(tested.status.code(), Some(0), "{}", stderr_text(&tested));
    assert!(
        stdout_text(&tested).contains("fine.yaml: ok"),
        "{}",
        stdout_text(&tested)
    );
    assert!(
        !stderr_text(&tested).contains("warning"),
        "{}",
        stderr_text(&tested)
    );
    let newer = check("2.9.0 (Claude Code)");
    assert_eq!(newer.status.code(), Some(0), "{}", stderr_text(&newer));
    assert!(
        stderr_text(&newer).contains("warning: `")
            && stderr_text(&newer).contains(
                "is version 2.9.0, newer than the newest the adapters were tested with (2.1.332)"
            ),
        "{}",
        stderr_text(&newer)
    );
    let older = check("1.0.3 (Claude Code)");
    assert_eq!(older.status.code(), Some(2), "{}", stderr_text(&older));
    assert!(
        stderr_text(&older).contains("older than the oldest the adapters know (2.1.329)")
            && stderr_text(&older).contains("npm install -g @anthropic-ai/claude-code@latest"),
        "{}",
        stderr_text(&older)
    );
    assert_nothing_created(repo.path());
}

/// `validate` names the unknown function at its position with a near name, and, inside a
/// repository, the validator that is neither configured nor detectable.
#[test]
fn validate_reports_the_unknown_function_and_the_unresolvable_validator() {
    let (repo, workflow) = mistakes_repo();
    let output = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["--color", "never", "validate"])
        .arg(&workflow)
        .output()
        .unwrap();
    let text = format!("{}{}", stdout_text(&output), stderr_text(&output));
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(
        text.contains("mistakes.yaml:24:18: error: function `fixed` is not defined: not by the workflow's `script`, a module it imports, the host API or Rhai [unknown-function]\n  hint: did you mean `fix`?"),
        "{text}"
    );
    assert!(
        text.contains("mistakes.yaml:19:11: error: step `check`: validator `lint` is not configured and cannot be detected in the worktree"),
        "{text}"
    );
    assert!(text.contains("[validator-program-missing]"), "{text}");
}

/// A gate whose reason calls a function that fails stops the run resumable (exit 4, blocked);
/// once the workflow is fixed, `resume` evaluates it again and the run finishes.
#[test]
fn a_failing_gate_reason_leaves_the_run_resumable_and_resume_evaluates_it_again() {
    let repo = RunRepo::new();
    let text = "workflow_id: reason\nversion: 1\ndescription: d\nentry_step: review\nscript: |\n  fn reason_text() { throw \"no reason yet\" }\nsteps:\n  - id: review\n    opcode: GATE\n    gate: queue_for_review\n    reason: \"${{ reason_text() }}\"\n    routes: {gate_queued: STOP}\n";
    let workflow = repo.workflow_text("reason.yaml", text);
    let (run_id, result) = repo.run_exits(&workflow, &[], 4);
    assert_eq!(result["state"], "stopped", "{result}");
    assert!(
        result["detail"].as_str().unwrap().contains("no reason yet"),
        "{result}"
    );
    assert_eq!(
        repo.json(&run_id, "status.json")["lifecycle_state"],
        "blocked"
    );
    let failed = crate::kernel_support::first_event(&repo.events(&run_id), "step_failed").clone();
    assert_eq!(failed["resumable"], true, "{failed}");
    std::fs::write(
        &workflow,
        text.replace("throw \"no reason yet\"", "\"ready\""),
    )
    .unwrap();
    let resumed = repo.conductor_exits(&["resume", &run_id, "--json"], 0);
    let resumed: serde_json::Value = serde_json::from_slice(&resumed.stdout).unwrap();
    assert_eq!(resumed["state"], "completed", "{resumed}");
    let types = crate::kernel_support::event_types(&repo.events(&run_id));
    assert!(types.contains(&"workflow_changed".to_owned()), "{types:?}");
    assert!(types.contains(&"gate_requested".to_owned()), "{types:?}");
    assert_eq!(
        types.last().map(String::as_str),
        Some("run_completed"),
        "{types:?}"
    );
}

/// A `python -m` validator whose interpreter lacks its module at run time is not failing
/// tests: the run stops resumable as could-not-run, and no planner is asked about it.
#[test]
fn a_validator_whose_python_module_is_missing_stops_the_run_as_could_not_run() {
    let repo = RunRepo::new();
    // Imports succeed (the checks pass), `-m` does not: the module is gone by the time the
    // validator runs.
    let bin = tempfile::tempdir().unwrap();
    let shim = bin.path().join("python3");
    std::fs::write(
        &shim,
        "#!/bin/sh\nif [ \"$1\" = -c ]; then exit 0; fi\necho \"$0: No module named $2\" >&2\nexit 1\n",
    )
    .unwrap();
    make_executable(&shim);
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "{config}validators:\n  tests: {{argv: [{}, -m, pytest, -q]}}\n",
            shim.display()
        ),
    );
    let workflow = repo.workflow_text(
        "tests.yaml",
        "workflow_id: tests\nversion: 1\ndescription: d\nentry_step: check\nsteps:\n  - id: check\n    opcode: RUN_VALIDATION\n    run: [tests]\n    routes: {completed: judge, error: judge, \"*\": STOP}\n  - id: judge\n    opcode: EVALUATE\n    prompt: planner.evaluate_step.v1\n    allowed_next_steps: [failed]\n    routes: {success: STOP, partial: failed, blocked: failed, unsafe: failed, needs_human: failed}\n  - id: failed\n    opcode: STOP\n    outcome: failure\n",
    );
    let (run_id, result) = repo.run_exits(&workflow, &[], 4);
    assert_eq!(result["state"], "stopped", "{result}");
    let detail = result["detail"].as_str().unwrap();
    assert!(
        detail.contains("validator `tests` could not run") && detail.contains("no module `pytest`"),
        "{detail}"
    );
    assert_eq!(
        repo.json(&run_id, "status.json")["lifecycle_state"],
        "blocked"
    );
    let types = crate::kernel_support::event_types(&repo.events(&run_id));
    assert!(
        !types.iter().any(|kind| kind.starts_with("planner")),
        "{types:?}"
    );
    assert!(!repo.run_dir(&run_id).join("artifacts/judge").exists());
}
