//! The runner's contract with the kernel: environment filtering, cancellation, spawn errors,
//! the artifact list and the published `runner_metadata` schema.

use std::time::Duration;

use tnh_conductor::outcome::Outcome;
use tnh_conductor::runner::{
    CancelHandle, Cancellation, HostEnv, RunnerError, run_agent, runner_metadata_schema,
};

use crate::runner_support::{Step, limits, zoo};

#[tokio::test]
async fn only_allowlisted_passed_through_and_step_variables_reach_the_agent() {
    let mut step = Step::command(&["sh", &zoo("echo-prompt.sh")]);
    step.request.profile.pass_env = vec!["ANTHROPIC_API_KEY".to_owned()];
    step.request.host_env = HostEnv::from_pairs([
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("HOME", "/home/dev".to_owned()),
        ("ANTHROPIC_API_KEY", "key".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "secret".to_owned()),
        ("TNH_CLAUDE_BIN", "/opt/claude".to_owned()),
    ]);
    step.set("TNH_STEP_ID", "implement")
        .set("TNH_RUN_ID", "20261121T000000Z-abcdef");
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::Completed);
    let stdout = step.read("stdout.txt");
    let names: Vec<&str> = stdout
        .split("--- environment\n")
        .nth(1)
        .unwrap()
        .lines()
        .collect();
    let expected = [
        "ANTHROPIC_API_KEY",
        "HOME",
        "PATH",
        "PWD",
        "TNH_RUN_ID",
        "TNH_STEP_ID",
        "TNH_SUPERVISION_ID",
    ];
    // `PWD` is added by the shell itself.
    assert_eq!(names, expected);
    assert!(
        !run.metadata
            .environment_names
            .contains(&"AWS_SECRET_ACCESS_KEY".to_owned())
    );
}

#[tokio::test]
async fn a_missing_program_is_a_spawn_error_that_says_so() {
    let step = Step::command(&["tnh-no-such-agent-program"]);
    let error = run_agent(&step.request, Cancellation::never())
        .await
        .unwrap_err();
    assert!(matches!(error, RunnerError::Spawn { .. }));
    assert_eq!(
        error.to_string(),
        "failed to spawn agent `zoo`: `tnh-no-such-agent-program` not found on PATH"
    );
    assert!(error.hint().unwrap().contains("TNH_CLAUDE_BIN"));
    // A program named by a path is not looked for on PATH.
    let step = Step::command(&["/nonexistent/agent.sh"]);
    let error = run_agent(&step.request, Cancellation::never())
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "failed to spawn agent `zoo`: `/nonexistent/agent.sh` does not exist"
    );
}

#[tokio::test]
async fn cancellation_before_the_start_ends_the_step_gracefully() {
    let step = Step::command(&["sh", &zoo("silent-hang.sh")]);
    let (handle, cancel) = CancelHandle::new();
    handle.cancel();
    let run = step.run_with(cancel).await;
    assert_eq!(run.outcome, Outcome::KilledPolicy);
    assert_eq!(run.cause, "cancelled: the operator interrupted the run");
    assert!(
        run.supervised.termination.sigkill_after_ms.is_none(),
        "SIGTERM was enough"
    );
}

#[tokio::test]
async fn a_second_cancellation_kills_at_once_without_waiting_for_the_grace_period() {
    let mut step = Step::command(&["sh", &zoo("ignores-sigterm.sh")]);
    step.request.limits.grace = Duration::from_secs(600);
    let (handle, cancel) = CancelHandle::new();
    handle.cancel();
    handle.cancel();
    let run = step.run_with(cancel).await;
    assert_eq!(run.outcome, Outcome::KilledPolicy);
    assert!(run.supervised.termination.sigkill_after_ms.is_some());
}

#[tokio::test]
async fn cancellation_during_the_run_ends_the_step() {
    let mut step = Step::command(&["sh", &zoo("silent-hang.sh")]);
    step.request.limits = limits(Duration::from_secs(60), None);
    let (handle, cancel) = CancelHandle::new();
    // The operator presses Ctrl-C a moment after the start.
    let operator = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        handle.cancel();
    });
    let run = step.run_with(cancel).await;
    operator.await.unwrap();
    assert_eq!(run.outcome, Outcome::KilledPolicy);
    assert!(run.cause.starts_with("cancelled"));
}

#[tokio::test]
async fn artifacts_are_listed_with_roles_and_the_metadata_matches_its_schema() {
    let step = Step::command(&["sh", &zoo("echo-prompt.sh")]);
    let run = step.run().await;
    let roles: Vec<(&str, &str)> = run
        .artifacts
        .iter()
        .map(|record| (record.role.as_str(), record.path.as_str()))
        .collect();
    assert_eq!(
        roles,
        [
            ("runner_prompt", "prompt.md"),
            ("runner_transcript", "stdout.txt"),
            ("runner_stderr", "stderr.txt"),
            ("runner_transcript_markdown", "transcript.md"),
            ("runner_metadata", "runner_metadata.json"),
            ("runner_final_response", "final_response.md"),
        ]
    );
    for record in &run.artifacts {
        assert!(
            step.file(&record.path).exists(),
            "{} was written",
            record.path
        );
    }
    let schema = runner_metadata_schema();
    assert_eq!(schema["title"], "RunnerMetadata");
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    let written: serde_json::Value =
        serde_json::from_str(&step.read("runner_metadata.json")).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&written)
        .map(|error| error.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
    let mut broken = written.clone();
    broken["outcome"] = serde_json::json!(3);
    assert!(!validator.is_valid(&broken), "the schema checks types");
}

#[tokio::test]
async fn a_missing_worktree_is_reported_as_such_not_as_a_missing_program() {
    let mut step = Step::command(&["sh", &zoo("echo-prompt.sh")]);
    step.request.worktree = step.dir.path().join("no-such-worktree");
    let error = run_agent(&step.request, Cancellation::never())
        .await
        .unwrap_err();
    let message = error.to_string();
    assert!(
        message.starts_with("failed to enter working directory `"),
        "{message}"
    );
    assert!(
        message.ends_with("no-such-worktree`: not a directory"),
        "{message}"
    );
}
