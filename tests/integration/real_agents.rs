//! The real agent CLIs (the versions in `tests/real-agents/versions`, installed by `.ci/run`)
//! through whole workflows, against the scripted model server on loopback: each as an agent
//! that edits the worktree with its own tools, as a planner deciding from its structured
//! output, and each failure (401, no answer, endless tool loop, cut stream) classified with no
//! process left behind. Without the CLIs each test is skipped, unless CI or
//! `TNH_REQUIRE_REAL_AGENTS=1` requires them.

use serde_json::json;

use crate::real_agents_support::{AgentRepo, Cli, agent_workflow, evaluate_workflow, real_cli};

/// Codex's default model is given a JavaScript `exec` tool; a named one gets `exec_command`:
/// both paths are driven by the server, the named one here.
const CODEX_MODEL: &str = "    model: gpt-5\n";

fn edit_script() -> serde_json::Value {
    json!({"mode": "turns", "turns": [
        {"edit": {"path": "hello.txt", "content": "hello from the model\n"}},
        {"text": "I wrote hello.txt."},
    ]})
}

/// Runs the one-step agent workflow with the CLI named in the profile's `binary` and returns the repository, the run id and the step's
/// runner metadata, asserting the step's outcome.
fn run_agent(
    cli: Cli,
    script: serde_json::Value,
    extra_keys: &str,
    limits: &str,
    outcome: &str,
) -> Option<(AgentRepo, String, serde_json::Value)> {
    let binary = real_cli(cli)?;
    let repo = AgentRepo::new(cli, binary, script, extra_keys);
    let workflow = repo
        .repo
        .workflow_text("real.yaml", &agent_workflow(limits));
    let (code, result, output) = repo.run(&workflow);
    let run_id = result["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{code:?}: {}", crate::support::stderr_text(&output)));
    let run_id = run_id.to_owned();
    let metadata = repo
        .repo
        .json(&run_id, "artifacts/work/1/runner_metadata.json");
    assert_eq!(
        repo.outcomes(&run_id).first(),
        Some(&format!("work:{outcome}")),
        "{metadata:#}"
    );
    repo.assert_no_process_left();
    Some((repo, run_id, metadata))
}

fn assert_completed_edit(repo: &AgentRepo, run_id: &str, metadata: &serde_json::Value) {
    assert_eq!(metadata["outcome"], "completed", "{metadata:#}");
    assert!(metadata["turns"].as_u64().unwrap_or(0) >= 1, "{metadata:#}");
    assert!(
        metadata["usage"]["output_tokens"].as_u64().unwrap_or(0) >= 7,
        "{metadata:#}"
    );
    assert_eq!(metadata["final_response_present"], true, "{metadata:#}");
    let answer = std::fs::read_to_string(
        repo.repo
            .run_dir(run_id)
            .join("artifacts/work/1/final_response.md"),
    )
    .unwrap();
    assert_eq!(answer.trim(), "I wrote hello.txt.");
    // The CLI's tool wrote into the run's worktree, not the operator's checkout.
    let worktree = repo.repo.path().join(".tnh/worktrees").join(run_id);
    let text = std::fs::read_to_string(worktree.join("hello.txt")).unwrap();
    assert_eq!(text, "hello from the model\n");
    assert!(!repo.repo.path().join("hello.txt").exists());
    assert!(repo.server.posts() >= 2, "{:#?}", repo.server.requests());
}

#[test]
fn real_claude_edits_the_worktree_with_its_write_tool() {
    let Some((repo, run_id, metadata)) =
        run_agent(Cli::Claude, edit_script(), "", "timeout: 120s", "completed")
    else {
        return;
    };
    assert_completed_edit(&repo, &run_id, &metadata);
    assert!(metadata["cost_usd"].as_f64().is_some(), "{metadata:#}");
    assert!(metadata["session_id"].is_string(), "{metadata:#}");
}

#[test]
fn real_codex_edits_the_worktree_with_a_shell_command() {
    let Some((repo, run_id, metadata)) = run_agent(
        Cli::Codex,
        edit_script(),
        CODEX_MODEL,
        "timeout: 120s",
        "completed",
    ) else {
        return;
    };
    assert_completed_edit(&repo, &run_id, &metadata);
}

#[test]
fn real_codex_with_its_default_model_edits_through_its_exec_tool() {
    let Some((repo, run_id, metadata)) =
        run_agent(Cli::Codex, edit_script(), "", "timeout: 120s", "completed")
    else {
        return;
    };
    assert_completed_edit(&repo, &run_id, &metadata);
}

/// The planner's decision for a structured answer, through a whole run.
fn planner_decides(cli: Cli, extra_keys: &str) {
    let Some(binary) = real_cli(cli) else {
        return;
    };
    let decision = json!({
        "status": "partial", "next_step": "fix",
        "fix_instructions": {"objective": "make the test pass", "constraints": [], "edits": [],
                             "verification": [{"command": "cargo test", "expected_signal": "exit 0"}]},
        "blockers": [], "risk_flags": ["tests_failed"],
    });
    let repo = AgentRepo::new(
        cli,
        binary,
        json!({"turns": [{"structured": decision}]}),
        "",
    );
    if !extra_keys.is_empty() {
        let config = repo.repo.path().join(".tnh/config.yaml");
        let text = std::fs::read_to_string(&config).unwrap() + extra_keys;
        std::fs::write(&config, text).unwrap();
    }
    let workflow = repo.repo.workflow_text("judged.yaml", &evaluate_workflow());
    let (_, result, output) = repo.run(&workflow);
    let run_id = result["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", crate::support::stderr_text(&output)));
    let saved = repo
        .repo
        .json(run_id, "artifacts/judge/1/planner_decision.json");
    assert_eq!(saved["status"], "partial", "{saved:#}");
    assert_eq!(saved["decided_by"], "judge", "{saved:#}");
    assert_eq!(saved["next_step"], "fix", "{saved:#}");
    assert_eq!(
        saved["fix_instructions"]["objective"], "make the test pass",
        "{saved:#}"
    );
    assert_eq!(
        repo.outcomes(run_id).first().map(String::as_str),
        Some("judge:partial")
    );
    repo.assert_no_process_left();
}

#[test]
fn real_claude_as_a_planner_decides_from_its_structured_output() {
    planner_decides(Cli::Claude, "");
}

#[test]
fn real_codex_as_a_planner_decides_from_its_output_schema_answer() {
    planner_decides(Cli::Codex, "    model: gpt-5\n");
}

#[test]
fn real_claude_refused_with_401_is_an_authentication_failure() {
    let Some((_, _, metadata)) = run_agent(
        Cli::Claude,
        json!({"mode": "unauthorized"}),
        "",
        "timeout: 60s",
        "error",
    ) else {
        return;
    };
    let cause = metadata["cause"].as_str().unwrap();
    assert!(cause.starts_with("authentication_failed"), "{cause}");
}

#[test]
fn real_codex_refused_with_401_is_an_authentication_failure() {
    let Some((_, _, metadata)) = run_agent(
        Cli::Codex,
        json!({"mode": "unauthorized"}),
        CODEX_MODEL,
        "timeout: 60s",
        "error",
    ) else {
        return;
    };
    let cause = metadata["cause"].as_str().unwrap();
    assert!(cause.starts_with("authentication_failed"), "{cause}");
}

#[test]
fn real_claude_facing_a_server_that_never_answers_is_killed_idle() {
    let Some((repo, _, metadata)) = run_agent(
        Cli::Claude,
        json!({"mode": "hang"}),
        "",
        "timeout: 60s, idle_timeout: 8s",
        "killed_idle",
    ) else {
        return;
    };
    assert!(repo.server.posts() >= 1);
    assert!(
        metadata["cause"]
            .as_str()
            .unwrap()
            .starts_with("idle_timeout"),
        "{metadata:#}"
    );
}

#[test]
fn real_codex_facing_a_server_that_never_answers_is_killed_idle() {
    let Some((repo, _, metadata)) = run_agent(
        Cli::Codex,
        json!({"mode": "hang"}),
        CODEX_MODEL,
        "timeout: 60s, idle_timeout: 8s",
        "killed_idle",
    ) else {
        return;
    };
    assert!(repo.server.posts() >= 1);
    assert!(
        metadata["cause"]
            .as_str()
            .unwrap()
            .starts_with("idle_timeout"),
        "{metadata:#}"
    );
}

#[test]
fn real_claude_in_an_endless_tool_loop_is_stopped_by_max_turns() {
    let Some((repo, _, metadata)) = run_agent(
        Cli::Claude,
        json!({"mode": "loop"}),
        "",
        "timeout: 60s, max_turns: 3",
        "error",
    ) else {
        return;
    };
    let cause = metadata["cause"].as_str().unwrap();
    assert!(cause.contains("error_max_turns"), "{cause}");
    assert!(repo.server.posts() >= 3);
}

#[test]
fn real_codex_in_an_endless_tool_loop_is_stopped_by_the_timeout() {
    let Some((repo, _, metadata)) = run_agent(
        Cli::Codex,
        json!({"mode": "loop"}),
        CODEX_MODEL,
        "timeout: 4s",
        "killed_timeout",
    ) else {
        return;
    };
    let cause = metadata["cause"].as_str().unwrap();
    assert!(cause.starts_with("timeout"), "{cause}");
    assert!(repo.server.posts() >= 3, "the loop went round");
}

#[test]
fn real_claude_given_a_cut_stream_ends_as_an_error() {
    let Some((_, _, metadata)) = run_agent(
        Cli::Claude,
        json!({"mode": "cut"}),
        "",
        "timeout: 60s",
        "error",
    ) else {
        return;
    };
    let cause = metadata["cause"].as_str().unwrap();
    assert!(cause.contains("API Error"), "{cause}");
}

#[test]
fn real_codex_given_a_cut_stream_ends_as_a_failed_turn() {
    let Some((_, _, metadata)) = run_agent(
        Cli::Codex,
        json!({"mode": "cut"}),
        CODEX_MODEL,
        "timeout: 60s",
        "error",
    ) else {
        return;
    };
    let cause = metadata["cause"].as_str().unwrap();
    assert!(cause.starts_with("turn_failed"), "{cause}");
    assert!(cause.contains("stream disconnected"), "{cause}");
}

#[test]
fn real_gemini_edits_the_worktree_with_its_write_file_tool() {
    let Some((repo, run_id, metadata)) =
        run_agent(Cli::Gemini, edit_script(), "", "timeout: 120s", "completed")
    else {
        return;
    };
    assert_completed_edit(&repo, &run_id, &metadata);
    assert_eq!(metadata["kind"], "gemini");
    assert_eq!(
        metadata["turns"], 2,
        "a tool call, then the answer: {metadata:#}"
    );
    assert!(metadata["session_id"].is_string(), "{metadata:#}");
    let argv: Vec<&str> = metadata["argv"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(serde_json::Value::as_str)
        .collect();
    assert!(
        argv.windows(2)
            .any(|pair| pair == ["--approval-mode", "auto_edit"]),
        "{argv:?}"
    );
    let transcript = std::fs::read_to_string(
        repo.repo
            .run_dir(&run_id)
            .join("artifacts/work/1/transcript.md"),
    )
    .unwrap();
    assert!(
        transcript.contains("**tool call** `write_file`"),
        "{transcript}"
    );
}

#[test]
fn real_gemini_named_by_tnh_gemini_bin_refused_with_401_is_an_authentication_failure() {
    let Some(binary) = real_cli(Cli::Gemini) else {
        return;
    };
    let repo = AgentRepo::new(
        Cli::Gemini,
        binary.clone(),
        json!({"mode": "unauthorized"}),
        "",
    );
    // The profile names a program that does not exist: the variable wins.
    let config = repo.repo.path().join(".tnh/config.yaml");
    let text = std::fs::read_to_string(&config).unwrap().replacen(
        &binary.display().to_string(),
        "/nonexistent/gemini",
        1,
    );
    std::fs::write(&config, text).unwrap();
    let workflow = repo
        .repo
        .workflow_text("real.yaml", &agent_workflow("timeout: 60s"));
    let (_, result, output) = repo.run_with(&workflow, &[("TNH_GEMINI_BIN", &binary)]);
    let run_id = result["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", crate::support::stderr_text(&output)));
    let metadata = repo
        .repo
        .json(run_id, "artifacts/work/1/runner_metadata.json");
    assert_eq!(metadata["outcome"], "error", "{metadata:#}");
    let cause = metadata["cause"].as_str().unwrap();
    assert!(cause.starts_with("authentication_failed"), "{cause}");
    assert!(repo.server.posts() >= 1);
    repo.assert_no_process_left();
}

#[test]
fn real_gemini_facing_a_server_that_never_answers_is_killed_idle() {
    let Some((repo, _, metadata)) = run_agent(
        Cli::Gemini,
        json!({"mode": "hang"}),
        "",
        // Its start-up alone takes seconds on a loaded machine, and prints nothing.
        "timeout: 60s, idle_timeout: 20s",
        "killed_idle",
    ) else {
        return;
    };
    assert!(repo.server.posts() >= 1);
    assert!(
        metadata["cause"]
            .as_str()
            .unwrap()
            .starts_with("idle_timeout"),
        "{metadata:#}"
    );
}

/// The CLI's own turn limit (`maxSessionTurns` in its settings) ends the loop: exit 53.
#[test]
fn real_gemini_in_an_endless_tool_loop_is_stopped_by_its_turn_limit() {
    let Some((repo, _, metadata)) = run_agent(
        Cli::Gemini,
        json!({"mode": "loop"}),
        "",
        "timeout: 60s",
        "error",
    ) else {
        return;
    };
    assert!(repo.server.posts() >= 3, "the loop went round");
    assert_eq!(metadata["exit_code"], 53, "{metadata:#}");
    let cause = metadata["cause"].as_str().unwrap();
    assert!(cause.starts_with("agent_error (turn_limit)"), "{cause}");
}

#[test]
fn real_gemini_given_a_cut_stream_ends_as_an_error() {
    let Some((_, _, metadata)) = run_agent(
        Cli::Gemini,
        json!({"mode": "cut"}),
        "",
        "timeout: 60s",
        "error",
    ) else {
        return;
    };
    let cause = metadata["cause"].as_str().unwrap();
    assert!(cause.contains("Incomplete JSON"), "{cause}");
}
