//! What an agent prints, on disk and in the readable transcript: bounded in size, escaped for
//! the terminal, and never mistaken for a budget overrun.

use tnh_conductor::outcome::Outcome;
use tnh_conductor::runner::AgentKind;

use crate::runner_support::Step;

/// Writes `body` as an executable Python script in the step's temporary directory.
fn script(step: &Step, name: &str, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = step.dir.path().join(name);
    std::fs::write(&path, format!("#!/usr/bin/env python3\n{body}")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

#[tokio::test]
async fn the_transcript_shows_nul_and_terminal_control_bytes_escaped() {
    let step = Step::command(&[
        "sh",
        "-c",
        r"cat >/dev/null; printf 'nul\0in\0line\n\033[2J\033]0;pwned\007 tab\there\ndone\n'; printf 'err\033[31m\n' >&2",
    ]);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::Completed, "{}", run.cause);
    let transcript = std::fs::read(step.file("transcript.md")).unwrap();
    let text = String::from_utf8(transcript).expect("the transcript is UTF-8");
    assert!(
        !text
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t'),
        "no raw control character in the transcript: {text:?}"
    );
    assert!(text.contains(r"nul\x00in\x00line"), "{text}");
    assert!(text.contains(r"\x1b[2J\x1b]0;pwned\x07 tab	here"), "{text}");
    assert!(text.contains(r"err\x1b[31m"), "{text}");
    // The raw capture keeps the bytes as printed.
    let raw = std::fs::read(step.file("stdout.txt")).unwrap();
    assert!(raw.windows(3).any(|window| window == b"l\0i"));
}

/// The start of a fake `claude` in Python: reads the prompt, defines `event` (one JSON line,
/// flushed) and sends the init event.
const CLAUDE_PREAMBLE: &str = r#"import json, sys
sys.stdin.read()
def event(value):
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()
event({"type": "system", "subtype": "init", "session_id": "s1", "tools": []})
"#;

#[tokio::test]
async fn an_unreadable_claude_line_followed_by_a_readable_result_is_within_budget() {
    let mut step = Step::fake(AgentKind::Claude, "unused");
    let body = CLAUDE_PREAMBLE.to_owned()
        + r#"event({"type": "user", "session_id": "s1", "message": {"content": [
    {"type": "tool_result", "content": "x" * (40 * 1024 * 1024)}]}})
event({"type": "result", "subtype": "success", "is_error": False, "num_turns": 1,
       "result": "Done", "session_id": "s1", "total_cost_usd": 0.01})
"#;
    step.request.profile.binary = Some(script(&step, "claude", &body));
    step.request.remaining_run_budget_usd = Some(5.0);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::Completed, "{}", run.cause);
    assert_eq!(run.cost_usd, Some(0.01));
}

#[tokio::test]
async fn an_unreadable_claude_line_after_the_last_result_still_leaves_the_cost_unknown() {
    let mut step = Step::fake(AgentKind::Claude, "unused");
    let body = CLAUDE_PREAMBLE.to_owned()
        + r#"event({"type": "result", "subtype": "success", "is_error": False, "num_turns": 1,
       "result": "Done", "session_id": "s1", "total_cost_usd": 0.01})
event({"type": "result", "subtype": "success", "is_error": False, "num_turns": 2,
       "result": "x" * (40 * 1024 * 1024), "session_id": "s1", "total_cost_usd": 9.0})
"#;
    step.request.profile.binary = Some(script(&step, "claude", &body));
    step.request.remaining_run_budget_usd = Some(5.0);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::KilledPolicy, "{}", run.cause);
    assert!(run.cause.starts_with("budget_exhausted: "), "{}", run.cause);
}

/// An agent printing without end filled the disk. Its output now stops at
/// the profile's `max_output_mib` per stream: the group is stopped, the step is
/// `killed_policy`, and the first bytes up to the limit are kept.
#[tokio::test]
async fn an_agent_printing_without_end_on_stdout_is_stopped_at_its_output_limit() {
    let mut step = Step::command(&["sh", "-c", "cat >/dev/null; exec yes 'spam spam spam'"]);
    step.request.profile.max_output_mib = Some(1);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::KilledPolicy, "{}", run.cause);
    assert!(
        run.cause.starts_with(
            "output_limit: stdout.txt reached the output limit of 1 MiB (1048576 bytes)"
        ),
        "{}",
        run.cause
    );
    assert!(run.cause.contains("max_output_mib"), "{}", run.cause);
    let kept = std::fs::read(step.file("stdout.txt")).unwrap();
    assert_eq!(kept.len(), 1024 * 1024, "exactly the limit is kept");
    assert!(kept.starts_with(b"spam spam spam\nspam"));
    assert_eq!(run.supervised.stdout_bytes, 1024 * 1024);
    assert_eq!(run.metadata.outcome, "killed_policy");
    assert!(run.supervised.termination.sigterm_after_ms.is_some());
}

#[tokio::test]
async fn an_agent_printing_without_end_on_stderr_is_stopped_at_its_output_limit() {
    let mut step = Step::command(&["sh", "-c", "cat >/dev/null; exec yes 'noise' >&2"]);
    step.request.profile.max_output_mib = Some(1);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::KilledPolicy, "{}", run.cause);
    assert!(
        run.cause.starts_with("output_limit: stderr.txt reached"),
        "{}",
        run.cause
    );
    assert_eq!(
        std::fs::metadata(step.file("stderr.txt")).unwrap().len(),
        1024 * 1024
    );
}

#[tokio::test]
async fn output_below_the_limit_completes() {
    let mut step = Step::command(&[
        "sh",
        "-c",
        "cat >/dev/null; head -c 1048576 /dev/zero | tr '\\0' x",
    ]);
    step.request.profile.max_output_mib = Some(1);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::Completed, "{}", run.cause);
    assert_eq!(run.supervised.stdout_bytes, 1024 * 1024);
}

#[tokio::test]
async fn a_zero_output_limit_is_refused_with_the_profile_named() {
    let mut step = Step::command(&["true"]);
    step.request.profile.max_output_mib = Some(0);
    let error = tnh_conductor::runner::run_agent(
        &step.request,
        tnh_conductor::runner::Cancellation::never(),
    )
    .await
    .expect_err("a zero limit is refused");
    let message = error.to_string();
    assert!(
        message.contains("zoo") && message.contains("max_output_mib"),
        "{message}"
    );
}

/// When the disk holding the step folder fills up, the step
/// must still end with a recorded outcome that names the disk, not stop the run with nothing
/// recorded. Needs a small file system: a tmpfs mounted in a user namespace (`unshare -rm`);
/// where user namespaces are not allowed the test says so and does nothing.
#[test]
fn a_full_disk_under_the_step_folder_ends_the_step_recorded() {
    use std::process::Command;
    let probe = Command::new("unshare")
        .args(["-rm", "true"])
        .output()
        .map(|output| output.status.success());
    if !matches!(probe, Ok(true)) {
        eprintln!("skipped: `unshare -rm` (user namespaces) is not available here");
        return;
    }
    let repo = crate::support::TempRepo::new();
    repo.write(
        ".tnh/config.yaml",
        "agents:\n  spam: { kind: command, argv: [sh, -c, \"cat >/dev/null; exec yes 'spam spam spam'\"] }\n",
    );
    repo.write(
        "wf.yaml",
        "workflow_id: spam\nversion: 1\ndescription: prints without end\nentry_step: agent\n\
         defaults:\n  limits: {timeout: 60s, idle_timeout: 30s}\nsteps:\n\
         \x20 - id: agent\n    opcode: RUN_AGENT\n    agent: spam\n    prompt: Say spam.\n\
         \x20   routes: {completed: ok, \"*\": bad}\n\
         \x20 - id: ok\n    opcode: STOP\n\
         \x20 - id: bad\n    opcode: STOP\n    outcome: failure\n",
    );
    repo.commit_all("workflow");
    let runs = repo.path().join(".tnh/run");
    std::fs::create_dir_all(&runs).unwrap();
    let copy = tempfile::tempdir().unwrap();
    // The run folder lives on a 16 MiB tmpfs; once the conductor is done it is copied out
    // (the mount ends with the namespace).
    let script = r#"mount -t tmpfs -o size=16m tmpfs "$1/.tnh/run" || exit 99
"$2" --repo "$1" run "$1/wf.yaml" >"$3/out.txt" 2>"$3/err.txt"
echo $? >"$3/code.txt"
cp -r "$1/.tnh/run" "$3/run""#;
    let status = Command::new("timeout")
        .args(["120", "unshare", "-rm", "sh", "-c", script, "sh"])
        .arg(repo.path())
        .arg(env!("CARGO_BIN_EXE_tnh-conductor"))
        .arg(copy.path())
        .status()
        .unwrap();
    assert!(status.success(), "the script ran: {status}");
    let read = |name: &str| std::fs::read_to_string(copy.path().join(name)).unwrap_or_default();
    let run = std::fs::read_dir(copy.path().join("run"))
        .unwrap()
        .filter_map(Result::ok)
        .find(|entry| entry.path().is_dir())
        .expect("a run folder")
        .path();
    let metadata = std::fs::read_to_string(run.join("artifacts/agent/1/runner_metadata.json"))
        .unwrap_or_else(|error| {
            panic!(
                "the step was recorded ({error}); conductor said {} / {}",
                read("out.txt"),
                read("err.txt")
            )
        });
    let metadata: serde_json::Value = serde_json::from_str(&metadata).unwrap();
    assert_eq!(metadata["outcome"], "error", "{metadata}");
    let cause = metadata["cause"].as_str().unwrap();
    assert!(
        cause.starts_with("capture_failed: cannot write stdout.txt")
            && cause.contains("No space left on device")
            && cause.contains("the disk holding"),
        "{cause}"
    );
    let events = std::fs::read_to_string(run.join("events.ndjson")).unwrap_or_default();
    assert!(events.contains("runner_completed"), "{events}");
    assert!(events.contains("step_completed"), "{events}");
    assert_eq!(read("code.txt").trim(), "1", "{}", read("err.txt"));
}
