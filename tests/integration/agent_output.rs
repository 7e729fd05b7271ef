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

#[tokio::test]
async fn an_unreadable_claude_line_followed_by_a_readable_result_is_within_budget() {
    let mut step = Step::fake(AgentKind::Claude, "unused");
    let body = r#"import json, sys
sys.stdin.read()
def event(value):
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()
event({"type": "system", "subtype": "init", "session_id": "s1", "tools": []})
event({"type": "user", "session_id": "s1", "message": {"content": [
    {"type": "tool_result", "content": "x" * (40 * 1024 * 1024)}]}})
event({"type": "result", "subtype": "success", "is_error": False, "num_turns": 1,
       "result": "Done", "session_id": "s1", "total_cost_usd": 0.01})
"#;
    step.request.profile.binary = Some(script(&step, "claude", body));
    step.request.remaining_run_budget_usd = Some(5.0);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::Completed, "{}", run.cause);
    assert_eq!(run.cost_usd, Some(0.01));
}

#[tokio::test]
async fn an_unreadable_claude_line_after_the_last_result_still_leaves_the_cost_unknown() {
    let mut step = Step::fake(AgentKind::Claude, "unused");
    let body = r#"import json, sys
sys.stdin.read()
def event(value):
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()
event({"type": "system", "subtype": "init", "session_id": "s1", "tools": []})
event({"type": "result", "subtype": "success", "is_error": False, "num_turns": 1,
       "result": "Done", "session_id": "s1", "total_cost_usd": 0.01})
event({"type": "result", "subtype": "success", "is_error": False, "num_turns": 2,
       "result": "x" * (40 * 1024 * 1024), "session_id": "s1", "total_cost_usd": 9.0})
"#;
    step.request.profile.binary = Some(script(&step, "claude", body));
    step.request.remaining_run_budget_usd = Some(5.0);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::KilledPolicy, "{}", run.cause);
    assert!(run.cause.starts_with("budget_exhausted: "), "{}", run.cause);
}
