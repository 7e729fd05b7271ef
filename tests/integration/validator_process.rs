//! Where and how a validator's process starts. It runs inside the run's worktree: a `cwd` that
//! is absolute, climbs out with `..` or resolves through a link to outside is refused — a literal
//! one by `validate`, a computed one when the step runs, before the validator starts. Its own
//! `env` (PATH included) applies to it, never to the conductor's isolation helper, and a
//! program it cannot start is named as the validator's.

use crate::kernel_support::{RunRepo, first_event};
use crate::support::{conductor, stderr_text, stdout_text};

/// A repository whose `scripts/where.sh` records the folder it ran in under the run directory.
fn repo() -> RunRepo {
    let repo = RunRepo::new();
    repo.repo.write(
        "scripts/where.sh",
        "#!/bin/sh\npwd -P > \"$TNH_RUN_DIR/ran-in\"\n",
    );
    repo.repo.commit_all("where");
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!("{config}script_allowlist: [\"scripts/\"]\n"),
    );
    repo
}

fn workflow(cwd: &str) -> String {
    format!(
        "workflow_id: where\nversion: 1\ndescription: d\nentry_step: check\nscript: |\n  fn up() {{ \"../../../..\" }}\nsteps:\n  - id: check\n    opcode: RUN_VALIDATION\n    run:\n      - {{id: probe, kind: script, entrypoint: scripts/where.sh, cwd: {cwd}}}\n    routes:\n      \"*\": review\n  - id: review\n    opcode: GATE\n    gate: requires_approval\n    routes: {{gate_approved: STOP, gate_rejected: STOP}}\n"
    )
}

#[test]
fn a_literal_cwd_outside_the_worktree_is_a_validation_error_with_its_position() {
    let repo = repo();
    for (cwd, reason) in [
        ("\"../..\"", "climbs out of the worktree"),
        ("\"sub/../../x\"", "climbs out of the worktree"),
        ("/tmp", "is an absolute path"),
    ] {
        let file = repo.workflow_text("where.yaml", &workflow(cwd));
        let output = conductor()
            .arg("--repo")
            .arg(repo.path())
            .args(["--color", "never", "validate"])
            .arg(&file)
            .output()
            .unwrap();
        let text = stdout_text(&output);
        assert_eq!(output.status.code(), Some(1), "{cwd}: {text}");
        assert!(
            text.contains("where.yaml:11:70: error: `cwd`")
                && text.contains("of validator `probe` in step `check`")
                && text.contains(reason)
                && text.contains("[cwd-outside-worktree]")
                && text.contains("hint: validators run inside the run's worktree"),
            "{cwd}: {text}"
        );
    }
    let inside = repo.workflow_text("where.yaml", &workflow("\"scripts/../scripts\""));
    let output = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["validate"])
        .arg(&inside)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stdout_text(&output));
}

/// Runs `workflow(cwd)`; returns the result and the run's `step_failed` error and hint.
fn refused_at_run_time(repo: &RunRepo, cwd: &str) -> (String, String) {
    let file = repo.workflow_text("where.yaml", &workflow(cwd));
    let (code, result, output) = repo.run(&file, &[]);
    assert_eq!(code, Some(4), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    assert!(
        !repo.run_dir(run_id).join("ran-in").exists(),
        "the validator did not run"
    );
    let failed = first_event(&repo.events(run_id), "step_failed").clone();
    (
        failed["error"].as_str().unwrap().to_owned(),
        failed["hint"].as_str().unwrap_or_default().to_owned(),
    )
}

#[test]
fn a_computed_cwd_outside_the_worktree_is_refused_before_the_validator_runs() {
    let repo = repo();
    let (error, hint) = refused_at_run_time(&repo, "\"${{ up() }}\"");
    assert!(
        error.contains("validator `probe` of step `check`: `cwd` `../../../..`")
            && error.contains("where.yaml:11:70")
            && error.contains("climbs out of the worktree"),
        "{error}"
    );
    assert!(hint.contains("relative to its root"), "{hint}");
}

#[test]
fn a_cwd_through_a_link_out_of_the_worktree_is_refused() {
    let repo = repo();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), repo.path().join("elsewhere")).unwrap();
    repo.repo.commit_all("a link out");
    let (error, _) = refused_at_run_time(&repo, "elsewhere");
    assert!(
        error.contains("`cwd` `elsewhere`") && error.contains("outside the worktree"),
        "{error}"
    );
}

#[test]
fn a_cwd_inside_the_worktree_runs_there() {
    let repo = repo();
    let file = repo.workflow_text("where.yaml", &workflow("\"${{ \\\"scripts\\\" }}\""));
    let (code, result, output) = repo.run(&file, &[]);
    assert_eq!(code, Some(3), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let ran_in = std::fs::read_to_string(repo.run_dir(run_id).join("ran-in")).unwrap();
    let worktree = std::path::Path::new(result["worktree"].as_str().unwrap());
    assert_eq!(
        std::path::Path::new(ran_in.trim()),
        worktree.join("scripts").canonicalize().unwrap()
    );
}

/// `workflow` with the validator's `cwd` replaced by an `env`.
fn workflow_with_env(env: &str) -> String {
    workflow("scripts").replace("cwd: scripts", &format!("env: {env}"))
}

#[test]
fn a_validator_path_without_unshare_still_gets_its_own_network_namespace() {
    let helper_works = std::process::Command::new("unshare")
        .args(["-rn", "true"])
        .status()
        .is_ok_and(|status| status.success());
    let repo = repo();
    // The validator's PATH holds its shell and nothing else: no `unshare`.
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/bin/sh", bin.path().join("sh")).unwrap();
    let file = repo.workflow_text(
        "where.yaml",
        &workflow_with_env(&format!("{{PATH: \"{}\"}}", bin.path().display())),
    );
    let (code, result, output) = repo.run(&file, &[]);
    assert_eq!(code, Some(3), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    assert!(
        repo.run_dir(run_id).join("ran-in").exists(),
        "the validator ran"
    );
    let report = repo.json(run_id, "artifacts/check/1/validation_report.json");
    let network = report["validators"]["probe"]["network"].as_str().unwrap();
    if helper_works {
        assert_eq!(network, "denied (own network namespace)", "{report:#}");
    }
}

#[test]
fn a_validator_program_missing_from_its_path_is_named_as_the_validator() {
    let repo = repo();
    let file = repo.workflow_text("where.yaml", &workflow_with_env("{PATH: /nowhere}"));
    let (code, result, output) = repo.run(&file, &[]);
    assert_eq!(code, Some(4), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let failed = first_event(&repo.events(run_id), "step_failed").clone();
    let error = failed["error"].as_str().unwrap();
    assert_eq!(
        error, "failed to spawn validator `probe`: `sh` not found on PATH",
        "the validator's program, not the isolation helper: {failed}"
    );
    let hint = failed["hint"].as_str().unwrap();
    assert!(
        hint.contains("the validator's PATH") && !hint.contains("TNH_CLAUDE_BIN"),
        "{hint}"
    );
}

#[test]
fn a_configured_validator_that_cannot_start_is_named_as_a_validator() {
    let repo = repo();
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!("{config}validators:\n  lint: {{argv: [sh, -c, \"exit 0\"]}}\n"),
    );
    let file = repo.workflow_text(
        "lint.yaml",
        "workflow_id: lint\nversion: 1\ndescription: d\nentry_step: check\nsteps:\n  - id: check\n    opcode: RUN_VALIDATION\n    run: [lint]\n    routes:\n      \"*\": STOP\n",
    );
    // `run` refuses a missing program before it starts; one configured after it started is
    // met by the step.
    let (code, result, output) = repo.start_then_resume_with_config(
        &file,
        &format!("{config}validators:\n  lint: {{argv: [tnh-no-such-linter]}}\n"),
    );
    assert_eq!(code, Some(4), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let failed = first_event(&repo.events(run_id), "step_failed").clone();
    assert_eq!(
        failed["error"],
        "failed to spawn validator `lint`: `tnh-no-such-linter` not found on PATH"
    );
    assert!(
        failed["hint"]
            .as_str()
            .unwrap()
            .contains("argv of `validators.lint`"),
        "{failed}"
    );
}

/// A validator printing without end is stopped at its output limit (`max_output_mib`, here
/// 1 MiB): the step ends `killed_policy` with the cause and a hint naming the key, and what
/// it printed is kept up to the limit, never past it.
#[test]
fn a_validator_printing_without_end_stops_at_its_output_limit() {
    let repo = repo();
    repo.repo.write("scripts/noisy.sh", "#!/bin/sh\nexec yes\n");
    repo.repo.commit_all("noisy");
    let file = repo.workflow_text(
        "noisy.yaml",
        "workflow_id: noisy\nversion: 1\ndescription: d\nentry_step: check\nsteps:\n  - id: check\n    opcode: RUN_VALIDATION\n    run:\n      - {id: noisy, kind: script, entrypoint: scripts/noisy.sh, max_output_mib: 1}\n    routes:\n      killed_policy: review\n      \"*\": STOP\n  - id: review\n    opcode: GATE\n    gate: requires_approval\n    routes: {gate_approved: STOP, gate_rejected: STOP}\n",
    );
    let (code, result, output) = repo.run(&file, &[]);
    assert_eq!(code, Some(3), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let report = repo.json(run_id, "artifacts/check/1/validation_report.json");
    assert_eq!(report["outcome"], "killed_policy", "{report}");
    let cause = report["validators"]["noisy"]["cause"].as_str().unwrap();
    assert!(
        cause.starts_with(
            "output_limit: stdout.txt reached the output limit of 1 MiB (1048576 bytes)"
        ) && cause
            .contains("give it `max_output_mib` (more than 1) on the step's validator `noisy`"),
        "{cause}"
    );
    let kept = std::fs::metadata(
        repo.run_dir(run_id)
            .join("artifacts/check/1/validators/noisy/stdout.txt"),
    )
    .unwrap()
    .len();
    assert_eq!(kept, 1024 * 1024);
}
