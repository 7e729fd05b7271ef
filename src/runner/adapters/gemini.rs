//! The Gemini CLI adapter: `gemini -p "" --output-format stream-json --skip-trust
//! --approval-mode auto_edit`, the prompt on stdin (the CLI appends `-p` to what stdin gave),
//! and a reader for its events.
//!
//! Facts this relies on, seen from the real CLI against a loopback model: the stream is JSON
//! lines `init` (`session_id`, `model`), `message` (`role`, `content`, `delta: true` for the
//! model's text in pieces), `tool_use`, `tool_result`, `error` (not fatal) and a final
//! `result` with `status` (`success` or `error` with an `error` object) and `stats` (tokens).
//! Exit codes: 42 input error, 52 authentication, 53 turn limit; with exit 52 no `result` is
//! printed. A missing `result` is a failure. The conductor made the worktree, so the CLI's
//! folder-trust question (exit 55 in a new folder) is answered with `--skip-trust`. Gemini
//! reports no cost, so its steps never consume the run budget.

use std::path::Path;

use serde_json::Value;

use super::{Invocation, StepRequest, StreamSummary, binary};
use crate::runner::artifacts::TokenUsage;
use crate::runner::progress::CaptureFormat;
use crate::runner::transcript::{EVENT_CAP, for_each_line};

/// The approval mode when the profile sets none: edits are the agent's job.
const DEFAULT_APPROVAL_MODE: &str = "auto_edit";

/// The argv for a request (the prompt goes to stdin).
pub(crate) fn invocation(request: &StepRequest) -> Invocation {
    let profile = &request.profile;
    let mut args: Vec<String> = ["-p", "", "--output-format", "stream-json", "--skip-trust"]
        .map(String::from)
        .into();
    let approval = profile
        .approval_mode
        .clone()
        .unwrap_or_else(|| DEFAULT_APPROVAL_MODE.to_owned());
    args.extend(["--approval-mode".to_owned(), approval]);
    if let Some(model) = &profile.model {
        args.extend(["-m".to_owned(), model.clone()]);
    }
    if profile.sandbox.as_deref() == Some("true") {
        args.push("--sandbox".to_owned());
    }
    for dir in &profile.add_dirs {
        args.extend([
            "--include-directories".to_owned(),
            dir.display().to_string(),
        ]);
    }
    args.extend(profile.extra_args.iter().cloned());
    Invocation {
        program: binary(request, "TNH_GEMINI_BIN", "gemini"),
        args,
        format: CaptureFormat::GeminiStreamJson,
    }
}

#[derive(Debug, Default)]
struct Reading {
    summary: StreamSummary,
    turns: u64,
    /// The model is answering: the last event was its text or a tool call.
    in_model_turn: bool,
    /// The model's text since the last tool call or result: the final answer, at the end.
    answer: String,
    last_error: Option<String>,
    result: Option<Value>,
}

/// Reads the stream; `exit_code` explains a stream that ended without a `result`.
pub(crate) fn summarize(stdout: &Path, exit_code: Option<i32>) -> std::io::Result<StreamSummary> {
    let mut reading = Reading::default();
    for_each_line(stdout, EVENT_CAP, |line| {
        match serde_json::from_slice::<Value>(line) {
            Ok(event) if event.is_object() => observe(&mut reading, event),
            _ if line.iter().all(u8::is_ascii_whitespace) => {}
            _ => reading.summary.unparsed_lines += 1,
        }
    })?;
    Ok(conclude(reading, exit_code))
}

fn observe(reading: &mut Reading, event: Value) {
    let kind = event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let role = event.get("role").and_then(Value::as_str);
    let model_event = kind == "tool_use" || (kind == "message" && role == Some("assistant"));
    if model_event && !reading.in_model_turn {
        reading.turns += 1;
    }
    reading.in_model_turn = model_event;
    match kind {
        "init" => reading.summary.session_id = text(&event, "session_id"),
        "message" if role == Some("assistant") => {
            let content = event.get("content").and_then(Value::as_str).unwrap_or("");
            // Without `delta`, a message is whole and replaces what came before.
            if event.get("delta").and_then(Value::as_bool) != Some(true) {
                reading.answer.clear();
            }
            reading.answer.push_str(content);
        }
        "tool_use" | "tool_result" => reading.answer.clear(),
        "error" => reading.last_error = text(&event, "message"),
        "result" => reading.result = Some(event),
        _ => {}
    }
}

fn conclude(reading: Reading, exit_code: Option<i32>) -> StreamSummary {
    let mut summary = reading.summary;
    summary.turns = (reading.turns > 0).then_some(reading.turns);
    let Some(result) = reading.result else {
        summary.failure = Some(without_result(exit_code, reading.last_error));
        return summary;
    };
    summary.usage = result.get("stats").map(usage);
    if text(&result, "status").as_deref() == Some("success") {
        let answer = reading.answer.trim();
        summary.final_response = (!answer.is_empty()).then(|| answer.to_owned());
        return summary;
    }
    let error = result.get("error").unwrap_or(&Value::Null);
    let message = text(error, "message")
        .or(reading.last_error)
        .unwrap_or_else(|| "the result says the session failed".to_owned());
    let code = match exit_code {
        Some(52) => "authentication_failed".to_owned(),
        _ if super::mentions_authentication(&message) => "authentication_failed".to_owned(),
        Some(53) => "agent_error (turn_limit)".to_owned(),
        _ => format!(
            "agent_error ({})",
            text(error, "type").unwrap_or_else(|| "error".to_owned())
        ),
    };
    summary.failure = Some(format!("{code}: {message}"));
    summary
}

/// The cause of a stream with no `result` event, from the documented exit codes.
fn without_result(exit_code: Option<i32>, last_error: Option<String>) -> String {
    let said = last_error.map_or_else(String::new, |error| format!(": {error}"));
    match exit_code {
        Some(52) => format!("authentication_failed: gemini exited 52 (authentication){said}"),
        Some(53) => {
            format!("agent_error (turn_limit): gemini exited 53 (turn limit reached){said}")
        }
        Some(42) => format!("agent_error (input_error): gemini exited 42 (input error){said}"),
        _ => format!("no_result: the stream ended without a `result` event{said}"),
    }
}

fn usage(stats: &Value) -> TokenUsage {
    let count = |key: &str| stats.get(key).and_then(Value::as_u64);
    let cached = count("cached").unwrap_or(0);
    TokenUsage {
        // `input` is the prompt tokens not served from the cache.
        input_tokens: count("input")
            .unwrap_or_else(|| count("input_tokens").unwrap_or(0).saturating_sub(cached)),
        output_tokens: count("output_tokens").unwrap_or(0),
        cache_read_input_tokens: cached,
        cache_creation_input_tokens: 0,
        reasoning_output_tokens: count("thoughts").unwrap_or(0),
    }
}

fn text(value: &Value, key: &str) -> Option<String> {
    value.get(key).and_then(Value::as_str).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary_of(lines: &[&str], exit_code: Option<i32>) -> StreamSummary {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("stdout.jsonl");
        std::fs::write(&path, lines.join("\n")).unwrap();
        summarize(&path, exit_code).unwrap()
    }

    // What gemini 0.61.0 printed for a write_file call and an answer.
    const SUCCESS: &[&str] = &[
        r#"{"type":"init","timestamp":"t","session_id":"815a629f","model":"auto"}"#,
        r#"{"type":"message","timestamp":"t","role":"user","content":"do the task\n"}"#,
        r#"{"type":"tool_use","timestamp":"t","tool_name":"write_file","tool_id":"w1","parameters":{"file_path":"hello.txt","content":"hi\n"}}"#,
        r#"{"type":"tool_result","timestamp":"t","tool_id":"w1","status":"success"}"#,
        r#"{"type":"message","timestamp":"t","role":"assistant","content":"I wrote ","delta":true}"#,
        r#"{"type":"message","timestamp":"t","role":"assistant","content":"hello.txt.","delta":true}"#,
        r#"{"type":"result","timestamp":"t","status":"success","stats":{"total_tokens":84,"input_tokens":63,"output_tokens":21,"cached":3,"input":60,"duration_ms":602,"tool_calls":1}}"#,
    ];

    #[test]
    fn a_successful_session_gives_its_answer_turns_and_tokens() {
        let summary = summary_of(SUCCESS, Some(0));
        assert_eq!(summary.failure, None);
        assert_eq!(summary.session_id.as_deref(), Some("815a629f"));
        assert_eq!(
            summary.final_response.as_deref(),
            Some("I wrote hello.txt.")
        );
        assert_eq!(summary.turns, Some(2));
        let usage = summary.usage.unwrap();
        assert_eq!((usage.input_tokens, usage.output_tokens), (60, 21));
        assert_eq!(usage.cache_read_input_tokens, 3);
    }

    #[test]
    fn an_error_result_is_a_failure_and_a_401_an_authentication_one() {
        let unauthorized = r#"{"type":"result","status":"error","error":{"type":"unknown","message":"[API Error: {\"error\":{\"code\":401,\"message\":\"API key not valid.\"}}]"},"stats":{}}"#;
        let summary = summary_of(&[SUCCESS[0], unauthorized], Some(1));
        let failure = summary.failure.unwrap();
        assert!(failure.starts_with("authentication_failed: "), "{failure}");
        assert_eq!(summary.final_response, None);
        let cut = r#"{"type":"result","status":"error","error":{"type":"unknown","message":"[API Error: Incomplete JSON segment at the end]"}}"#;
        let failure = summary_of(&[SUCCESS[0], cut], Some(1)).failure.unwrap();
        assert_eq!(
            failure,
            "agent_error (unknown): [API Error: Incomplete JSON segment at the end]"
        );
    }

    #[test]
    fn a_stream_without_result_is_classified_by_the_exit_code() {
        let cases = [
            (Some(52), "authentication_failed: gemini exited 52"),
            (Some(53), "agent_error (turn_limit): gemini exited 53"),
            (Some(42), "agent_error (input_error): gemini exited 42"),
            (
                Some(0),
                "no_result: the stream ended without a `result` event",
            ),
            (None, "no_result: "),
        ];
        for (code, expected) in cases {
            let failure = summary_of(&SUCCESS[..4], code).failure.unwrap();
            assert!(failure.starts_with(expected), "{code:?}: {failure}");
        }
    }
}
