//! Opt-in (`TNH_REAL_CLI_TESTS=1`): the real `claude` and `codex`, when on PATH, run without
//! credentials end as `error` with an authentication cause, within the timeout. Nothing is
//! installed here; a missing CLI skips its test.

use std::collections::BTreeMap;
use std::time::Duration;

use tnh_conductor::outcome::Outcome;
use tnh_conductor::runner::{AgentKind, HostEnv, resolve_profile};

use crate::runner_support::{Step, limits};

fn enabled_and_on_path(program: &str) -> bool {
    if std::env::var("TNH_REAL_CLI_TESTS").as_deref() != Ok("1") {
        return false;
    }
    let path = std::env::var("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path).any(|dir| dir.join(program).is_file());
    if !found {
        eprintln!("skipped: `{program}` is not on PATH");
    }
    found
}

async fn run_without_credentials(kind: AgentKind, name: &str) {
    let mut step = Step::command(&["unused"]);
    step.request.agent_name = name.to_owned();
    step.request.profile = resolve_profile(name, &BTreeMap::new()).unwrap();
    assert_eq!(step.request.profile.kind, kind);
    // An empty HOME: no stored login, and no API key is passed.
    let home = step.dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    step.request.host_env = HostEnv::from_pairs([
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("HOME", home.display().to_string()),
    ]);
    step.request.limits = limits(Duration::from_secs(120), Some(Duration::from_secs(60)));
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::Error, "{}", run.cause);
    assert!(
        run.cause.starts_with("authentication_failed"),
        "{}",
        run.cause
    );
}

#[tokio::test]
async fn real_claude_without_credentials_is_an_authentication_error() {
    if !enabled_and_on_path("claude") {
        return;
    }
    run_without_credentials(AgentKind::Claude, "claude-code").await;
}

#[tokio::test]
async fn real_codex_without_credentials_is_an_authentication_error() {
    if !enabled_and_on_path("codex") {
        return;
    }
    run_without_credentials(AgentKind::Codex, "codex").await;
}
