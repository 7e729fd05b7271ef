//! Claude Code and Codex adapters against fake CLIs replaying the real captured streams
//! (`tests/fixtures/agents/captures/`): every capture is classified as the real run was.

use std::time::Duration;

use serde_json::Value;
use tnh_conductor::outcome::Outcome;
use tnh_conductor::runner::{AgentKind, HostEnv};

use crate::runner_support::{Step, limits};
use crate::support::fixture;

fn claude(scenario: &str) -> Step {
    Step::fake(AgentKind::Claude, scenario)
}

fn codex(scenario: &str) -> Step {
    Step::fake(AgentKind::Codex, scenario)
}

/// Asks the fake CLI to record what it received (argv, prompt, environment names) at the
/// returned path.
fn record(step: &mut Step) -> std::path::PathBuf {
    let path = step.dir.path().join("received.json");
    step.set("TNH_FAKE_RECORD", &path.display().to_string());
    path
}

fn received(path: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("the fake recorded")).unwrap()
}

fn metadata(step: &Step) -> Value {
    serde_json::from_str(&step.read("runner_metadata.json")).unwrap()
}

#[tokio::test]
async fn claude_success_is_completed_with_answer_cost_and_usage() {
    let mut step = claude("claude-stream-success-tool-use");
    step.request.max_turns = Some(7);
    let path = record(&mut step);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::Completed, "{}", run.cause);
    assert_eq!(step.read("final_response.md"), "Hello from mock.");
    let received = received(&path);
    let argv: Vec<&str> = received["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|arg| arg.as_str().unwrap())
        .collect();
    assert_eq!(
        argv,
        [
            "-p",
            "--verbose",
            "--output-format",
            "stream-json",
            "--permission-mode",
            "acceptEdits",
            "--max-turns",
            "7"
        ]
    );
    assert_eq!(received["prompt"], "Write hello to out.txt.\n");
    let meta = metadata(&step);
    assert_eq!(meta["schema_version"], 1);
    assert_eq!(meta["session_id"], "804e71f7-6d67-4e4a-8c6a-50b35d4a3b90");
    assert_eq!(meta["turns"], 1);
    assert_eq!(meta["cost_usd"], 0.00014800000000000002);
    assert_eq!(meta["usage"]["input_tokens"], 12);
    assert_eq!(meta["usage"]["output_tokens"], 5);
    assert_eq!(meta["capture_format"], "claude-stream-json");
    assert!(
        step.read("transcript.md")
            .contains("**assistant:** Hello from mock.")
    );
    assert_eq!(run.cost_usd, Some(0.00014800000000000002));
}

#[tokio::test]
async fn claude_permission_denials_are_recorded_and_the_step_completes() {
    let step = claude("claude-stream-permission-denied-dontask");
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::Completed);
    let denials = &run.metadata.permission_denials;
    assert_eq!(denials.len(), 1);
    assert_eq!(denials[0].tool_name, "Bash");
    assert!(
        step.read("transcript.md")
            .contains("**permission denied:** `Bash`")
    );
}

#[tokio::test]
async fn claude_max_turns_is_an_error_whatever_the_exit() {
    let step = claude("claude-stream-error-max-turns");
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::Error);
    assert_eq!(
        run.cause,
        "agent_error (error_max_turns): Reached maximum number of turns (2)"
    );
    assert!(
        !step.file("final_response.md").exists(),
        "an error is not an answer"
    );
    assert_eq!(run.metadata.turns, Some(3));
    let transcript = step.read("transcript.md");
    assert!(transcript.contains("**tool call** `Bash`"), "{transcript}");
    assert!(
        transcript.contains("- error: Reached maximum number of turns (2)"),
        "{transcript}"
    );
}

#[tokio::test]
async fn claude_max_budget_is_an_error() {
    let run = claude("claude-stream-error-max-budget").run().await;
    assert_eq!(run.outcome, Outcome::Error);
    assert!(
        run.cause
            .starts_with("agent_error (error_max_budget_usd): Reached maximum budget"),
        "{}",
        run.cause
    );
}

#[tokio::test]
async fn claude_not_logged_in_is_an_authentication_error_despite_subtype_success() {
    let run = claude("claude-stream-not-logged-in").run().await;
    assert_eq!(run.outcome, Outcome::Error);
    assert_eq!(
        run.cause,
        "authentication_failed: Not logged in · Please run /login"
    );
}

#[tokio::test]
async fn claude_invalid_api_key_is_an_authentication_error() {
    let run = claude("claude-stream-invalid-api-key").run().await;
    assert_eq!(run.outcome, Outcome::Error);
    assert!(
        run.cause
            .starts_with("authentication_failed: Invalid API key"),
        "{}",
        run.cause
    );
}

#[tokio::test]
async fn claude_retrying_forever_is_killed_idle_although_it_keeps_printing() {
    let mut step = claude("claude-api-retry-forever");
    step.request.limits = limits(Duration::from_secs(30), Some(Duration::from_millis(800)));
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::KilledIdle);
    assert_eq!(
        run.cause,
        "idle_timeout: no progress for 800ms (only retry/reconnect messages)"
    );
    assert!(run.supervised.stdout_lines > 3, "retries kept coming");
}

#[tokio::test]
async fn claude_refusing_its_arguments_is_an_error_citing_stderr() {
    let run = claude("claude-stream-without-verbose").run().await;
    assert_eq!(run.outcome, Outcome::Error);
    assert_eq!(
        run.cause,
        "exit code 1: Error: When using --print, --output-format=stream-json requires --verbose"
    );
}

#[tokio::test]
async fn claude_cost_above_the_remaining_run_budget_is_killed_by_policy() {
    let mut step = claude("claude-stream-success-tool-use");
    step.request.remaining_run_budget_usd = Some(0.0001);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::KilledPolicy);
    assert!(
        run.cause
            .starts_with("budget_exhausted: reported cost $0.0001"),
        "{}",
        run.cause
    );
    assert_eq!(
        run.cost_usd,
        Some(0.00014800000000000002),
        "the cost still counts against the run"
    );
}

#[tokio::test]
async fn tnh_claude_bin_overrides_the_binary() {
    let mut step = claude("claude-stream-success-tool-use");
    let fake = fixture("agents/bin/claude").display().to_string();
    step.request.host_env = HostEnv::from_pairs([
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("TNH_CLAUDE_BIN", fake.clone()),
    ]);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::Completed, "{}", run.cause);
    assert_eq!(run.metadata.argv[0], fake);
}

#[tokio::test]
async fn codex_success_is_completed_with_the_output_file_as_answer() {
    let mut step = codex("codex-exec-json-success");
    let path = record(&mut step);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::Completed, "{}", run.cause);
    assert_eq!(step.read("final_response.md"), "Hello from mock.");
    let argv = received(&path)["argv"].clone();
    let output = step.file("final_response.md").display().to_string();
    let worktree = step.request.worktree.display().to_string();
    let expected = [
        "exec",
        "--json",
        "-o",
        &output,
        "--sandbox",
        "workspace-write",
        "--skip-git-repo-check",
        "-C",
        &worktree,
        "-",
    ];
    assert_eq!(argv, serde_json::json!(expected));
    assert_eq!(received(&path)["prompt"], "Write hello to out.txt.\n");
    let meta = metadata(&step);
    assert_eq!(meta["session_id"], "01a1fc6c-4aa4-7c31-81ab-c0e5703026a5");
    assert_eq!(meta["turns"], 1);
    assert_eq!(meta["usage"]["output_tokens"], 6);
    assert_eq!(meta["cost_usd"], Value::Null);
}

#[tokio::test]
async fn codex_command_execution_shows_in_the_transcript() {
    let step = codex("codex-exec-json-command-workspace-write");
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::Completed);
    let transcript = step.read("transcript.md");
    assert!(
        transcript.contains("**command** `/bin/bash -lc 'echo hello > out.txt'` → exit code `0`")
    );
}

#[tokio::test]
async fn codex_unauthorized_turn_failure_is_an_authentication_error() {
    let step = codex("codex-exec-json-unauthorized");
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::Error);
    assert!(
        step.read("transcript.md")
            .contains("## Turn failed\n\nunexpected status 401")
    );
    assert!(
        run.cause
            .starts_with("authentication_failed: unexpected status 401 Unauthorized"),
        "{}",
        run.cause
    );
}

#[tokio::test]
async fn codex_reconnecting_forever_is_killed_idle() {
    let mut step = codex("codex-reconnect-forever");
    step.request.limits = limits(Duration::from_secs(30), Some(Duration::from_millis(800)));
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::KilledIdle);
    assert!(
        run.cause.ends_with("(only retry/reconnect messages)"),
        "{}",
        run.cause
    );
}

#[tokio::test]
async fn codex_reconnecting_forever_without_idle_limit_is_killed_by_the_wall_clock() {
    let mut step = codex("codex-reconnect-forever");
    step.request.limits = limits(Duration::from_millis(600), None);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::KilledTimeout);
}

#[tokio::test]
async fn codex_untrusted_directory_is_an_error_citing_stderr() {
    let run = codex("codex-exec-untrusted-directory").run().await;
    assert_eq!(run.outcome, Outcome::Error);
    assert_eq!(
        run.cause,
        "exit code 1: Not inside a trusted directory and --skip-git-repo-check was not specified."
    );
}

#[tokio::test]
async fn codex_without_a_final_message_is_an_error() {
    let step = codex("codex-no-final-message");
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::Error);
    assert!(run.cause.starts_with("no_final_message"), "{}", run.cause);
    assert!(!step.file("final_response.md").exists());
}

#[tokio::test]
async fn garbage_and_invalid_utf8_in_the_stream_are_counted_not_fatal() {
    let step = claude("claude-garbage-then-success");
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::Completed, "{}", run.cause);
    assert_eq!(run.metadata.unparsed_lines, 2);
    assert_eq!(step.read("final_response.md"), "Hello from mock.");
    assert!(step.read("transcript.md").contains("*unparsed line:*"));
}

#[tokio::test]
async fn a_final_answer_longer_than_the_line_cap_is_kept_whole() {
    let step = claude("claude-huge-result");
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::Completed, "{}", run.cause);
    assert_eq!(step.read("final_response.md").len(), 600 * 1024);
}

#[tokio::test]
async fn claude_profile_options_and_step_limits_become_flags() {
    let mut step = claude("claude-stream-success-tool-use");
    let profile = &mut step.request.profile;
    profile.model = Some("claude-sonnet-4-5".to_owned());
    profile.permission_mode = Some("dontAsk".to_owned());
    profile.allowed_tools = vec!["Read".to_owned(), "Edit".to_owned()];
    profile.disallowed_tools = vec!["WebFetch".to_owned()];
    profile.append_system_prompt = Some("Be brief.".to_owned());
    profile.add_dirs = vec!["/srv/docs".into()];
    step.request.max_turns = Some(12);
    step.request.max_budget_usd = Some(2.5);
    let path = record(&mut step);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::Completed, "{}", run.cause);
    let expected = [
        "-p",
        "--verbose",
        "--output-format",
        "stream-json",
        "--model",
        "claude-sonnet-4-5",
        "--permission-mode",
        "dontAsk",
        "--allowedTools",
        "Read,Edit",
        "--disallowedTools",
        "WebFetch",
        "--max-turns",
        "12",
        "--max-budget-usd",
        "2.5",
        "--append-system-prompt",
        "Be brief.",
        "--add-dir",
        "/srv/docs",
    ];
    assert_eq!(received(&path)["argv"], serde_json::json!(expected));
}

#[tokio::test]
async fn codex_profile_options_become_flags() {
    let mut step = codex("codex-exec-json-success");
    let profile = &mut step.request.profile;
    profile.model = Some("gpt-5".to_owned());
    let effort: tnh_conductor::runner::profile::ConfigValue =
        serde_json::from_str("\"high\"").unwrap();
    profile
        .config
        .insert("model_reasoning_effort".to_owned(), effort);
    profile.add_dirs = vec!["/srv/docs".into()];
    let path = record(&mut step);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::Completed, "{}", run.cause);
    let argv = received(&path)["argv"].clone();
    let argv: Vec<&str> = argv
        .as_array()
        .unwrap()
        .iter()
        .map(|arg| arg.as_str().unwrap())
        .collect();
    let tail = &argv[9..];
    assert_eq!(
        tail,
        [
            "-m",
            "gpt-5",
            "-c",
            "model_reasoning_effort=high",
            "--add-dir",
            "/srv/docs",
            "-"
        ]
    );
}
