//! Claude Code and Codex adapters against fake CLIs replaying the real captured streams
//! (`tests/fixtures/agents/captures/`): every capture is classified as the real run was.

use std::time::Duration;

use serde_json::Value;
use tnh_conductor::outcome::Outcome;
use tnh_conductor::runner::{AgentKind, Cancellation, HostEnv};

use crate::runner_support::{Step, limits};
use crate::support::fixture;

fn claude(scenario: &str) -> Step {
    Step::fake(AgentKind::Claude, scenario)
}

fn codex(scenario: &str) -> Step {
    Step::fake(AgentKind::Codex, scenario)
}

/// A `claude` or `codex` agent played by the `sh` fake of the scenarios that never end
/// (`looping_cli.sh`): it prints its first line milliseconds after it is spawned, where the
/// idle timer starts, so a sub-second idle limit measures the agent's silence and not an
/// interpreter's start-up on a loaded machine.
fn looping(kind: AgentKind, scenario: &str) -> Step {
    let mut step = Step::fake(kind, scenario);
    let variable = match kind {
        AgentKind::Claude => "TNH_CLAUDE_BIN",
        _ => "TNH_CODEX_BIN",
    };
    step.request.host_env = HostEnv::from_pairs([
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("HOME", step.dir.path().display().to_string()),
        (
            variable,
            fixture("agents/looping_cli.sh").display().to_string(),
        ),
    ]);
    step
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
    let mut step = looping(AgentKind::Claude, "claude-api-retry-forever");
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
    // Enough decimals to see why: at four, both read $0.0001.
    assert_eq!(
        run.cause,
        "budget_exhausted: reported cost $0.000148 exceeds the remaining run budget $0.0001"
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
    let mut step = looping(AgentKind::Codex, "codex-reconnect-forever");
    step.request.limits = limits(Duration::from_secs(30), Some(Duration::from_millis(800)));
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::KilledIdle);
    assert!(
        run.cause.ends_with("(only retry/reconnect messages)"),
        "{}",
        run.cause
    );
}

/// A Codex stopped mid-turn (killed idle) kept its last agent message, and
/// the `-o` file it had written, as its final response; the guard read "Done: …" as a claim
/// of completion against an empty diff, and a retry became `unsafe`. A step that did not end
/// by itself now has no final response, whatever the agent kind.
#[tokio::test]
async fn a_codex_killed_mid_turn_has_no_final_response() {
    let mut step = looping(AgentKind::Codex, "codex-message-then-stall");
    step.request.limits = limits(Duration::from_secs(30), Some(Duration::from_millis(800)));
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::KilledIdle, "{}", run.cause);
    assert!(!run.metadata.final_response_present);
    assert!(
        std::fs::symlink_metadata(step.file("final_response.md")).is_err(),
        "the -o file of the unfinished turn is not left as the answer"
    );
    assert!(
        !run.artifacts
            .iter()
            .any(|artifact| artifact.role == "runner_final_response")
    );
    assert!(
        step.read("stdout.jsonl").contains("Hello from mock."),
        "the message stays in the stream"
    );
}

#[tokio::test]
async fn codex_reconnecting_forever_without_idle_limit_is_killed_by_the_wall_clock() {
    let mut step = looping(AgentKind::Codex, "codex-reconnect-forever");
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

/// A Claude that exits 0 with its error on stderr only (a wrapper that
/// swallows the exit status) ended with a bare `no_result` cause: stderr was read only for a
/// non-zero exit, so `authentication_failed` and the reason were lost. Now the last stderr
/// line is read whenever the stream said nothing.
#[tokio::test]
async fn a_claude_exiting_0_with_its_error_on_stderr_only_keeps_the_reason() {
    let run = claude("claude-stderr-only-exit0").run().await;
    assert_eq!(run.outcome, Outcome::Error);
    assert_eq!(
        run.cause,
        "authentication_failed: Error: Invalid API key · Fix external API key"
    );
    let run = claude("claude-no-prompt-exit0").run().await;
    assert_eq!(run.outcome, Outcome::Error);
    assert_eq!(
        run.cause,
        "no_result: the stream ended without a `result` event; stderr: Error: Input must be provided either through stdin or as a prompt argument when using --print"
    );
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

/// A `result` line longer than the supervisor's 256 KiB line cap was never
/// read for its cost while the agent ran, and the adapter's whole-line reading afterwards did
/// not check the budget: a step that cost more than the run had left ended `completed`. Now
/// the adapter's reading ends it `killed_policy` with `budget_exhausted`, like a short line.
#[tokio::test]
async fn a_cost_on_a_result_line_longer_than_the_line_cap_still_exhausts_the_run_budget() {
    let mut step = claude("claude-huge-result");
    step.request.remaining_run_budget_usd = Some(0.0001);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::KilledPolicy, "{}", run.cause);
    assert_eq!(
        run.cause,
        "budget_exhausted: reported cost $0.000148 exceeds the remaining run budget $0.0001"
    );
    assert_eq!(run.cost_usd, Some(0.00014800000000000002));
    // Within budget, the same step completes.
    step.request.remaining_run_budget_usd = Some(1.0);
    assert_eq!(step.run().await.outcome, Outcome::Completed);
}

/// A line too long even for the adapter's 32 MiB
/// reading may be the `result` with a cost nobody could read; under a run budget it is not
/// taken for a step within budget.
#[tokio::test]
async fn a_result_line_too_long_to_read_is_not_taken_for_a_step_within_budget() {
    let mut step = claude("claude-giant-result");
    step.request.remaining_run_budget_usd = Some(1.0);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::KilledPolicy, "{}", run.cause);
    assert!(
        run.cause
            .starts_with("budget_exhausted: a stream line longer than 32 MiB could not be read"),
        "{}",
        run.cause
    );
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

/// A step whose run budget is already spent used to start anyway (a retry route started
/// claude four times on a spent budget); now the agent is not started and the step ends
/// `killed_policy` with `budget_exhausted`, like a step that overspends.
#[tokio::test]
async fn a_claude_step_is_not_started_when_the_run_budget_is_spent() {
    for remaining in [-0.000096, 0.0, 1e-12] {
        let mut step = claude("claude-stream-success-tool-use");
        step.request.remaining_run_budget_usd = Some(remaining);
        let path = record(&mut step);
        let run = tnh_conductor::runner::run_agent(&step.request, Cancellation::never())
            .await
            .unwrap();
        assert_eq!(run.outcome, Outcome::KilledPolicy, "{remaining}");
        assert!(
            run.cause
                .starts_with("budget_exhausted: the run budget is spent ($")
                && run.cause.ends_with("left); the agent was not started"),
            "{}",
            run.cause
        );
        assert!(!path.exists(), "claude was started with ${remaining} left");
        assert_eq!(run.cost_usd, None);
        assert_eq!(run.metadata.outcome, "killed_policy");
        for name in [
            "stdout.jsonl",
            "stderr.txt",
            "runner_metadata.json",
            "prompt.md",
        ] {
            assert!(step.file(name).is_file(), "{name}");
        }
    }
}

/// `--max-budget-usd` used to be the step's (or the whole run's) budget whatever was left;
/// it is capped at the remaining run budget.
#[tokio::test]
async fn claude_max_budget_is_capped_at_the_remaining_run_budget() {
    for (step_budget, remaining, expected) in [
        (Some(2.5), Some(0.5), "0.5"),
        (Some(0.25), Some(0.5), "0.25"),
        (None, Some(0.5), "0.5"),
    ] {
        let mut step = claude("claude-stream-success-tool-use");
        step.request.max_budget_usd = step_budget;
        step.request.remaining_run_budget_usd = remaining;
        let path = record(&mut step);
        step.run().await;
        let argv = received(&path)["argv"].clone();
        let argv: Vec<&str> = argv
            .as_array()
            .unwrap()
            .iter()
            .map(|arg| arg.as_str().unwrap())
            .collect();
        let at = argv
            .iter()
            .position(|arg| *arg == "--max-budget-usd")
            .unwrap();
        assert_eq!(argv[at + 1], expected, "{argv:?}");
    }
}

/// A negative reported cost used to refund the run budget (`total_cost_usd: -100` took
/// $400 off what four steps had spent); it counts as nothing.
#[tokio::test]
async fn a_negative_reported_cost_counts_as_nothing() {
    let mut step = claude("claude-negative-cost");
    step.request.remaining_run_budget_usd = Some(1.0);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::Completed, "{}", run.cause);
    assert_eq!(run.cost_usd, Some(0.0));
    assert_eq!(run.metadata.cost_usd, Some(0.0));
}

/// Costs are cumulative: a stream with a $5 result and then a $0.0001 one used to be charged
/// $0.0001; the highest is charged, and it ends the step when it passes the budget.
#[tokio::test]
async fn a_later_smaller_result_does_not_lower_the_cost() {
    let step = claude("claude-expensive-then-cheap");
    let run = step.run().await;
    assert_eq!(run.cost_usd, Some(5.0), "{}", run.cause);
    let mut step = claude("claude-expensive-then-cheap");
    step.request.remaining_run_budget_usd = Some(1.0);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::KilledPolicy);
    assert_eq!(
        run.cause,
        "budget_exhausted: reported cost $5.00 exceeds the remaining run budget $1.00"
    );
    assert_eq!(run.cost_usd, Some(5.0));
}

/// A cost equal to what is left, up to float rounding of the budget arithmetic, is not more.
#[tokio::test]
async fn a_cost_equal_to_the_remaining_budget_does_not_exhaust_it() {
    let mut step = claude("claude-stream-success-tool-use");
    // 0.00014800000000000002 reported; $0.0003 less $0.000152 is 0.00014799999999999997.
    let remaining: f64 = 0.0003 - 0.000152;
    assert!(0.000_148_000_000_000_000_02 > remaining);
    step.request.remaining_run_budget_usd = Some(remaining);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::Completed, "{}", run.cause);
}
