//! Configuration mistakes are refused where they are written, relative
//! program paths resolve against the repository root, and `init` / `runs clean` say what
//! happened.

use crate::kernel_support::RunRepo;
use crate::support::stderr_text;

/// `.tnh/config.yaml` replaced by `text`, then `validate` on the linear workflow.
fn validate_with_config(text: &str) -> (Option<i32>, String) {
    let repo = RunRepo::new();
    repo.repo.write(".tnh/config.yaml", text);
    let workflow = repo.workflow("linear.yaml");
    let output = repo.conductor(&["validate", workflow.to_str().unwrap()]);
    (output.status.code(), stderr_text(&output))
}

/// A codex profile's `disallowed_tools`, a claude profile's `sandbox`,
/// an http planner's `argv` were accepted and dropped; the operator believed a restriction
/// applied that did not.
#[test]
fn a_profile_key_its_kind_would_ignore_is_refused_at_its_position() {
    for (text, expected) in [
        (
            "agents:\n  cx: {kind: codex, permission_mode: plan}\n",
            ".tnh/config.yaml:2:21: agent profile `cx` is invalid: `permission_mode` does not apply to `kind: codex` (its adapter would ignore it); only `kind: claude` takes it",
        ),
        (
            "agents:\n  cx:\n    kind: codex\n    disallowed_tools: [Bash]\n",
            ".tnh/config.yaml:4:5: agent profile `cx` is invalid: `disallowed_tools` does not apply to `kind: codex`",
        ),
        (
            "agents:\n  cl: {kind: claude, sandbox: read-only}\n",
            ".tnh/config.yaml:2:22: agent profile `cl` is invalid: `sandbox` does not apply to `kind: claude` (its adapter would ignore it); only `kind: codex` and `kind: gemini` take it",
        ),
        (
            "agents:\n  cmd: {kind: command, argv: [sh], sandbox: read-only}\n",
            ".tnh/config.yaml:2:36: agent profile `cmd` is invalid: `sandbox` does not apply to `kind: command`",
        ),
        (
            "planners:\n  h: {kind: http, url: \"http://127.0.0.1:9/v1\", model: m, argv: [x]}\n",
            ".tnh/config.yaml:2:59: planner `h` is `kind: http`, which would ignore `argv`; only `kind: command` takes it",
        ),
    ] {
        let (code, stderr) = validate_with_config(text);
        assert_eq!(code, Some(2), "{text}: {stderr}");
        assert!(stderr.contains(expected), "{text}: {stderr}");
    }
}

/// `permision_mode:` at 5:5 was reported at the profile's line 3, with a
/// list of every field and no nearest key; planners said "did you mean".
#[test]
fn an_agent_profile_typo_is_reported_at_the_key_with_the_nearest_one() {
    let (code, stderr) = validate_with_config(
        "agents:\n  scripted: {kind: command, argv: [python3, x.py]}\n  claude-code:\n    kind: claude\n    permision_mode: plan\n",
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(
            ".tnh/config.yaml:5:5: agent profile `claude-code` is invalid: unknown key `permision_mode`; did you mean `permission_mode`?"
        ),
        "{stderr}"
    );
    let (code, stderr) = validate_with_config(
        "agents:\n  scripted: {kind: command, argv: [python3, x.py]}\n  c:\n    kind: claude\n    pass_env: HOME\n",
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(
            ".tnh/config.yaml:5:15: agent profile `c` is invalid: `pass_env`: invalid type"
        ),
        "{stderr}"
    );
}

/// A comment-only configuration saved with a byte order mark (Notepad)
/// stopped every command with "the file holds no YAML document".
#[test]
fn a_comment_only_configuration_after_a_byte_order_mark_is_the_default() {
    let repo = RunRepo::new();
    let agents = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        "\u{feff}# agents:\n#   scripted: {kind: command, argv: [\"./my-agent.sh\"]}\n",
    );
    let workflow = repo.workflow_text(
        "claude.yaml",
        "workflow_id: w\nversion: 1\ndescription: d\nentry_step: a\nsteps:\n  - {id: a, opcode: RUN_AGENT, agent: claude, prompt: x, routes: {\"*\": STOP}}\n",
    );
    repo.conductor_exits(&["validate", workflow.to_str().unwrap()], 0);
    // The same mark before real content was already read.
    repo.repo
        .write(".tnh/config.yaml", &format!("\u{feff}{agents}"));
    let linear = repo.workflow("linear.yaml");
    repo.conductor_exits(&["validate", linear.to_str().unwrap()], 0);
}

/// Another tool's top-level `events:` was refused as a misspelt
/// `agents` (two letters apart); only close misspellings of a known key are refused.
#[test]
fn another_tools_top_level_key_is_left_alone_a_close_misspelling_is_not() {
    let repo = RunRepo::new();
    let agents = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    let linear = repo.workflow("linear.yaml");
    repo.repo.write(
        ".tnh/config.yaml",
        &format!("{agents}events:\n  on_push: [lint]\n"),
    );
    repo.conductor_exits(&["validate", linear.to_str().unwrap()], 0);
    repo.repo.write(
        ".tnh/config.yaml",
        &format!("{agents}protected_brnaches: [main]\n"),
    );
    let output = repo.conductor_exits(&["validate", linear.to_str().unwrap()], 2);
    let stderr = stderr_text(&output);
    assert!(
        stderr.contains("unknown key `protected_brnaches`: did you mean `protected_branches`?"),
        "{stderr}"
    );
}

/// `init` where `.tnh` is a file was told to "check that the path exists
/// and is readable"; the hint names the file in the way.
#[test]
fn init_blocked_by_a_file_names_it() {
    let repo = crate::support::TempRepo::new();
    repo.write("README", "x\n");
    repo.commit_all("init");
    repo.write(".tnh", "not a folder\n");
    let output = crate::support::conductor()
        .arg("--repo")
        .arg(repo.path())
        .arg("init")
        .output()
        .unwrap();
    let stderr = stderr_text(&output);
    assert_eq!(output.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains("is a file where a folder is needed: move it away")
            && stderr.contains("/.tnh`")
            && !stderr.contains("readable"),
        "{stderr}"
    );
}

/// Every `runs clean` printed "removed worktree of RUN" again for runs an
/// earlier one had already cleaned, although nothing was removed.
#[test]
fn runs_clean_does_not_report_again_what_it_already_cleaned() {
    let repo = RunRepo::new();
    let (code, result, output) = repo.run(&repo.workflow("linear.yaml"), &[]);
    assert_eq!(code, Some(0), "{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap().to_owned();
    let first = repo.conductor_exits(&["runs", "clean"], 0);
    assert!(
        crate::support::stdout_text(&first).contains(&format!("removed worktree of {run_id}")),
        "{}",
        crate::support::stdout_text(&first)
    );
    for _ in 0..2 {
        let again = repo.conductor_exits(&["runs", "clean"], 0);
        let stdout = crate::support::stdout_text(&again);
        assert!(!stdout.contains("removed"), "{stdout}");
        assert!(
            stderr_text(&again)
                .contains("nothing to clean: the worktree of 1 ended run was already removed"),
            "{}",
            stderr_text(&again)
        );
    }
}

/// A workflow of one step running agent `agent`.
fn one_agent_step(repo: &RunRepo, agent: &str) -> std::path::PathBuf {
    repo.workflow_text(
        &format!("{agent}.yaml"),
        &format!(
            "workflow_id: w\nversion: 1\ndescription: d\nentry_step: a\nsteps:\n  - {{id: a, opcode: RUN_AGENT, agent: {agent}, prompt: x, routes: {{\"*\": STOP}}}}\n"
        ),
    )
}

fn executable(path: &std::path::Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The `init` template's `argv: ["./my-agent.sh"]` was resolved in the
/// run's worktree, where an uncommitted script is not: the run stopped with "`./my-agent.sh`
/// does not exist" although `ls ./my-agent.sh` showed it. A relative program path is now the
/// repository root's (the folder holding `.tnh/`), for agents, `TNH_CLAUDE_BIN` and planners.
#[test]
fn a_relative_program_path_is_resolved_against_the_repository_root() {
    let repo = RunRepo::new();
    let root = std::fs::canonicalize(repo.path()).unwrap();
    executable(
        &repo.path().join("my-agent.sh"),
        "#!/bin/sh\ncat > /dev/null\necho ran > ran-by-agent.txt\necho done\n",
    );
    repo.repo.write(
        ".tnh/config.yaml",
        "agents:\n  scripted:\n    kind: command\n    argv: [\"./my-agent.sh\"]\nplanners:\n  judge: {kind: command, argv: [./judge.sh], attempts: 1}\n",
    );
    let (code, result, output) = repo.run(&one_agent_step(&repo, "scripted"), &[]);
    assert_eq!(code, Some(0), "{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap().to_owned();
    let metadata = repo.json(&run_id, "artifacts/a/1/runner_metadata.json");
    assert_eq!(
        metadata["argv"][0],
        root.join("my-agent.sh").display().to_string()
    );
    let worktree = repo.path().join(".tnh/worktrees").join(&run_id);
    assert!(
        worktree.join("ran-by-agent.txt").exists(),
        "the agent ran in the worktree"
    );

    // TNH_CLAUDE_BIN, relative: the repository's `bin/claude`, not the worktree's.
    executable(
        &repo.path().join("bin/claude"),
        "#!/bin/sh\ncat > /dev/null\nexit 3\n",
    );
    let output = crate::support::conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["run", "--json"])
        .arg(one_agent_step(&repo, "claude"))
        .env("TNH_CLAUDE_BIN", "bin/claude")
        .output()
        .unwrap();
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let run_id = result["run_id"].as_str().unwrap().to_owned();
    let metadata = repo.json(&run_id, "artifacts/a/1/runner_metadata.json");
    assert_eq!(
        metadata["argv"][0],
        root.join("bin/claude").display().to_string(),
        "{}",
        stderr_text(&output)
    );
    assert_eq!(metadata["exit_code"], 3, "the fake ran");

    // A command planner's `./judge.sh`, asked outside a run (`planner check`).
    executable(
        &repo.path().join("judge.sh"),
        &format!(
            "#!/bin/sh\ncat > /dev/null\necho call >> \"{}\"\nexit 1\n",
            repo.path().join("judge.calls").display()
        ),
    );
    let output = repo.conductor(&[
        "planner",
        "check",
        crate::support::fixture("planner_vectors").to_str().unwrap(),
        "--planner",
        "judge",
    ]);
    assert!(
        repo.path().join("judge.calls").exists(),
        "the judge was found: {}{}",
        crate::support::stdout_text(&output),
        stderr_text(&output)
    );
}

/// A missing relative program is named with the path it was looked for at and what it was
/// resolved against, and the hint says how relative paths resolve: by the checks before the
/// run, which refuse it before anything is created.
#[test]
fn a_missing_relative_program_names_the_resolved_path() {
    let repo = RunRepo::new();
    let root = std::fs::canonicalize(repo.path()).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        "agents:\n  scripted: {kind: command, argv: [\"./missing.sh\"]}\n",
    );
    let workflow = one_agent_step(&repo, "scripted");
    let output = repo.conductor_exits(&["run", workflow.to_str().unwrap()], 2);
    let stderr = stderr_text(&output);
    let resolved = root.join("missing.sh").display().to_string();
    assert!(
        stderr.contains(&format!(
            "no executable file at `{resolved}`: `./missing.sh` as written, resolved against the repository root `{}`",
            root.display()
        )),
        "{stderr}"
    );
    assert!(
        !repo.path().join(".tnh/run").exists(),
        "nothing was created"
    );
    assert!(
        stderr.contains(&format!("hint: create `{resolved}`"))
            && stderr.contains("resolved against the repository root (the folder holding `.tnh/`), not the run's worktree"),
        "{stderr}"
    );
}
