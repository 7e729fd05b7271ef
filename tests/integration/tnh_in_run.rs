//! `tnh` inside a real run: the agent's commands read the configuration the run uses (the main
//! working tree's, not the worktree's absent `.tnh/`), and `tnh context` shows the step's inputs.

use crate::kernel_support::RunRepo;
use crate::support::{stderr_text, stdout_text, tnh};

/// A repository whose one agent step runs `commands` (a shell script, `tnh` on its PATH as
/// `$TNH`) in the run's worktree, writing what it sees into its step folder; and the run's
/// result.
fn run_agent_script(
    repo: &RunRepo,
    extra_config: &str,
    step: &str,
    commands: &str,
) -> serde_json::Value {
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    let script = format!(
        "cat >/dev/null; TNH={}; {commands}",
        env!("CARGO_BIN_EXE_tnh")
    );
    let agent = serde_json::to_string(&script).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "{config}  shell:\n    kind: command\n    argv: [sh, -c, {agent}]\n{extra_config}"
        ),
    );
    let workflow = repo.workflow_text(
        "shell.yaml",
        &format!(
            "workflow_id: shell\nversion: 1\ndescription: d\nentry_step: work\nsteps:\n  - id: work\n    opcode: RUN_AGENT\n    agent: shell\n{step}    routes:\n      \"*\": STOP\n"
        ),
    );
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(0), "{result}{}", stderr_text(&output));
    result
}

/// Commits `path` alone (`.tnh/` stays uncommitted, as in a real repository).
fn commit(repo: &RunRepo, path: &str) {
    repo.repo.git(&["add", path]);
    repo.repo.git(&["commit", "-q", "-m", "add"]);
}

fn step_file(repo: &RunRepo, result: &serde_json::Value, name: &str) -> String {
    let run_id = result["run_id"].as_str().unwrap();
    std::fs::read_to_string(repo.run_dir(run_id).join("artifacts/work/1").join(name)).unwrap()
}

/// Regression: inside a run, `tnh test` read `<worktree>/.tnh/config.yaml`, which a run's
/// worktree never has; the agent got "not configured" (or, in a Cargo project, `cargo test`)
/// while RUN_VALIDATION ran the configured command.
#[test]
fn tnh_test_in_a_run_uses_the_configured_validator_not_the_detected_one() {
    let repo = RunRepo::new();
    // A Cargo project: without the configuration, `tests` would be detected as `cargo test`.
    repo.repo.write(
        "Cargo.toml",
        "[package]\nname = \"x\"\nversion = \"0.1.0\"\n",
    );
    commit(&repo, "Cargo.toml");
    let result = run_agent_script(
        &repo,
        "validators:\n  tests: {argv: [sh, -c, \"echo 'error: configured suite fails'; exit 3\"]}\n",
        "    prompt: Run the tests.\n",
        "$TNH test --json > \"$TNH_STEP_DIR/test.json\" 2> \"$TNH_STEP_DIR/test.err\"; echo $? > \"$TNH_STEP_DIR/test.code\"",
    );
    let json: serde_json::Value =
        serde_json::from_str(&step_file(&repo, &result, "test.json")).unwrap();
    assert_eq!(
        (json["detected"].as_bool(), json["exit_code"].as_i64()),
        (Some(false), Some(3)),
        "{json}"
    );
    assert_eq!(json["argv"][0], "sh", "{json}");
    // A tool that ran and failed is exit 1 whatever its own code (which the JSON keeps).
    assert_eq!(step_file(&repo, &result, "test.code").trim(), "1");
    // The file is the one the run recorded: nothing to note.
    assert_eq!(step_file(&repo, &result, "test.err"), "");
    // The whole output is kept in the step folder, and the visit's manifest lists it.
    assert!(step_file(&repo, &result, "tnh-tests.log").contains("configured suite fails"));
    let manifest: serde_json::Value =
        serde_json::from_str(&step_file(&repo, &result, "manifest.json")).unwrap();
    let logs: Vec<&serde_json::Value> = manifest["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|entry| entry["role"] == "tool_log")
        .collect();
    assert_eq!(logs.len(), 1, "{manifest}");
    assert!(
        logs[0]["path"]
            .as_str()
            .unwrap()
            .ends_with("/work/1/tnh-tests.log"),
        "{manifest}"
    );
}

/// Regression: `tnh adr list` read `adr_paths` from the worktree's (absent) configuration.
#[test]
fn tnh_adr_list_in_a_run_uses_the_configured_adr_paths() {
    let repo = RunRepo::new();
    repo.repo.write(
        "design/decisions/adr-0007-keep-the-api.md",
        "# Keep the API\n\n**Status**: accepted\n",
    );
    commit(&repo, "design");
    let result = run_agent_script(
        &repo,
        "adr_paths: [\"design/decisions/*.md\"]\n",
        "    prompt: List the ADRs.\n",
        "$TNH adr list > \"$TNH_STEP_DIR/adrs.txt\"",
    );
    assert_eq!(
        step_file(&repo, &result, "adrs.txt"),
        "0007\taccepted\tKeep the API\n"
    );
}

/// Outside a run, every checkout of the repository (a linked worktree without its own
/// `.tnh/`) reads the main working tree's configuration, as `tnh-conductor` does.
#[test]
fn tnh_test_in_a_linked_worktree_reads_the_main_working_tree_configuration() {
    let repo = RunRepo::new();
    repo.repo.write(
        ".tnh/config.yaml",
        "validators:\n  tests: {argv: [sh, -c, \"echo main-config; exit 0\"]}\n",
    );
    let linked = tempfile::tempdir().unwrap();
    let checkout = linked.path().join("checkout");
    repo.repo.git(&[
        "worktree",
        "add",
        "-q",
        "-b",
        "side",
        checkout.to_str().unwrap(),
    ]);
    let output = tnh()
        .current_dir(&checkout)
        .arg("test")
        .env_remove("TNH_RUN_DIR")
        .env_remove("TNH_STEP_DIR")
        .env_remove("TNH_WORKTREE")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr_text(&output));
    assert!(
        stdout_text(&output).starts_with("tests: passed (exit 0"),
        "{}",
        stdout_text(&output)
    );
}

/// A configuration file changed since the run recorded it is still read, and the agent is told.
#[test]
fn tnh_test_says_when_the_configuration_is_not_the_one_the_run_recorded() {
    let repo = RunRepo::new();
    repo.repo.write(
        ".tnh/config.yaml",
        "validators:\n  tests: {argv: [sh, -c, \"exit 0\"]}\n",
    );
    let run_dir = repo.path().join(".tnh/run/20260101T000000Z-abcdef");
    std::fs::create_dir_all(&run_dir).unwrap();
    let metadata = serde_json::json!({
        "run_id": "20260101T000000Z-abcdef",
        "repo_root": repo.path().canonicalize().unwrap(),
        "config_sha256": "0000",
    });
    std::fs::write(run_dir.join("metadata.json"), metadata.to_string()).unwrap();
    let output = tnh()
        .current_dir(repo.path())
        .arg("test")
        .env("TNH_RUN_DIR", &run_dir)
        .env_remove("TNH_STEP_DIR")
        .env_remove("TNH_WORKTREE")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr_text(&output));
    assert!(
        stderr_text(&output)
            .contains("is not the configuration run 20260101T000000Z-abcdef recorded"),
        "{}",
        stderr_text(&output)
    );
}

/// Regression: nothing wrote `$TNH_STEP_DIR/inputs.json`, so `tnh context` inside a run always
/// showed `"inputs": null`.
#[test]
fn tnh_context_in_a_run_shows_the_inputs_the_prompt_was_given() {
    let repo = RunRepo::new();
    let result = run_agent_script(
        &repo,
        "",
        "    prompt: task.implement_adr.v1\n    inputs:\n      adr_id: ADR-0007\n      target_paths: [src/]\n",
        "$TNH context --json > \"$TNH_STEP_DIR/context.json\"; $TNH context > \"$TNH_STEP_DIR/context.txt\"",
    );
    let context: serde_json::Value =
        serde_json::from_str(&step_file(&repo, &result, "context.json")).unwrap();
    assert_eq!(
        context["inputs"],
        serde_json::json!({"adr_id": "ADR-0007", "target_paths": ["src/"]}),
        "{context}"
    );
    let text = step_file(&repo, &result, "context.txt");
    assert!(
        text.contains("  adr_id: ADR-0007\n") && text.contains("  target_paths: [\"src/\"]\n"),
        "{text}"
    );
    let inputs: serde_json::Value =
        serde_json::from_str(&step_file(&repo, &result, "inputs.json")).unwrap();
    assert_eq!(
        (inputs["schema_version"].as_u64(), inputs["prompt"].as_str()),
        (Some(1), Some("task.implement_adr.v1"))
    );
    let run_id = result["run_id"].as_str().unwrap();
    let manifest = repo.json(run_id, "artifacts/work/1/manifest.json");
    let listed = manifest["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["role"] == "prompt_inputs")
        .unwrap_or_else(|| panic!("inputs.json is not in the manifest: {manifest}"));
    assert_eq!(listed["path"], "artifacts/work/1/inputs.json");
}

/// Regression: a run started with `--config FILE` did not record the file, so `resume`, the
/// gate decision and the agent's `tnh` commands all read the repository's `.tnh/config.yaml`
/// instead — here a configuration without the run's agent or validator.
#[test]
fn a_run_started_with_config_keeps_that_file_for_resume_gate_and_tnh() {
    let repo = RunRepo::new();
    let elsewhere = tempfile::tempdir().unwrap();
    let team = elsewhere.path().join("team.yaml");
    let script = format!(
        "cat >/dev/null; {} test --json > \"$TNH_STEP_DIR/test.json\" 2> \"$TNH_STEP_DIR/test.err\"",
        env!("CARGO_BIN_EXE_tnh")
    );
    std::fs::write(
        &team,
        format!(
            "agents:\n  shell:\n    kind: command\n    argv: [sh, -c, {}]\nvalidators:\n  tests: {{argv: [sh, -c, \"echo team-suite\"]}}\n",
            serde_json::to_string(&script).unwrap()
        ),
    )
    .unwrap();
    let workflow = repo.workflow_text(
        "team.yaml",
        "workflow_id: team\nversion: 1\ndescription: d\nentry_step: approve\nsteps:\n  - id: approve\n    opcode: GATE\n    gate: requires_approval\n    routes: {gate_approved: work, \"*\": STOP}\n  - id: work\n    opcode: RUN_AGENT\n    agent: shell\n    prompt: Run the tests.\n    routes:\n      \"*\": STOP\n",
    );
    let team_text = team.to_str().unwrap();
    let (code, result, output) = repo.run(&workflow, &[]);
    // Without `--config`, the workflow's agent is unknown: nothing starts.
    assert_eq!(code, Some(2), "{result}{}", stderr_text(&output));
    let output = crate::support::conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["--config", team_text, "run", "--json"])
        .arg(&workflow)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", stderr_text(&output));
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let run_id = result["run_id"].as_str().unwrap();
    let metadata = repo.json(run_id, "metadata.json");
    assert_eq!(
        metadata["config_path"].as_str(),
        Some(team.canonicalize().unwrap().to_str().unwrap()),
        "{metadata}"
    );
    // Neither the decision nor the resume names the file again.
    repo.conductor_exits(&["gate", "approve", run_id], 0);
    repo.conductor_exits(&["resume", run_id], 0);
    let step = repo.run_dir(run_id).join("artifacts/work/1");
    let test: serde_json::Value =
        serde_json::from_slice(&std::fs::read(step.join("test.json")).unwrap()).unwrap();
    assert_eq!(test["exit_code"].as_i64(), Some(0), "{test}");
    assert!(test["argv"].to_string().contains("team-suite"), "{test}");
    // The file is the one the run recorded: nothing to note.
    assert_eq!(std::fs::read_to_string(step.join("test.err")).unwrap(), "");
}

/// `tnh test` supervises the tool in a process group and under a token of its own, so when
/// `tnh` itself was killed outright (SIGKILL: it cannot end the tool), the tool was neither in
/// the agent's group nor marked with the step's token, and outlived the step. Now a
/// supervision started inside a step keeps the step's token as the outer one, and the step's
/// sweep ends the tool with everything else the agent left.
#[test]
fn a_tool_whose_tnh_was_killed_outright_is_ended_with_the_step() {
    let repo = RunRepo::new();
    let result = run_agent_script(
        &repo,
        "validators:\n  tests: {argv: [sh, -c, \"echo $$ > \\\"$TNH_STEP_DIR/tool.pid.new\\\"; mv \\\"$TNH_STEP_DIR/tool.pid.new\\\" \\\"$TNH_STEP_DIR/tool.pid\\\"; exec sleep 1003\"]}\n",
        "    prompt: Run the tests.\n",
        "$TNH test > /dev/null 2>&1 & tnh_pid=$!; \
         while [ ! -e \"$TNH_STEP_DIR/tool.pid\" ]; do :; done; \
         kill -9 $tnh_pid; echo done",
    );
    let pid: i32 = step_file(&repo, &result, "tool.pid")
        .trim()
        .parse()
        .unwrap();
    let command = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    assert!(
        !String::from_utf8_lossy(&command).starts_with("sleep\x001003"),
        "the tool {pid} outlived its step"
    );
}
