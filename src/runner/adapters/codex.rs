//! The Codex adapter: `codex exec --json -o FILE --sandbox workspace-write
//! --skip-git-repo-check -C WORKTREE -`, the prompt on stdin, and a reader for its events.
//!
//! Facts from the captures: the stream is `thread.started`, `turn.started`, `item.*`,
//! `turn.completed` (with `usage`) or `turn.failed`; `error` events saying `Reconnecting...`
//! are retries; `-o FILE` receives the last agent message. A `turn.failed` or a missing final
//! message is an `error`. Codex reports no cost, so it never consumes the run budget.

use std::path::Path;

use serde_json::Value;

use super::{Invocation, StepRequest, StreamSummary, binary};
use crate::artifacts::VisitDir;
use crate::runner::artifacts::TokenUsage;
use crate::runner::progress::CaptureFormat;
use crate::runner::transcript::{EVENT_CAP, for_each_line};

/// The argv for a request; `-` makes Codex read the prompt from stdin.
pub(crate) fn invocation(request: &StepRequest, step_dir: &Path) -> Invocation {
    let profile = &request.profile;
    let sandbox = profile
        .sandbox
        .clone()
        .unwrap_or_else(|| "workspace-write".to_owned());
    let final_response = step_dir.join(VisitDir::FINAL_RESPONSE);
    let mut args: Vec<String> = vec![
        "exec".into(),
        "--json".into(),
        "-o".into(),
        final_response.display().to_string(),
        "--sandbox".into(),
        sandbox,
        "--skip-git-repo-check".into(),
        "-C".into(),
        request.worktree.display().to_string(),
    ];
    if let Some(model) = &profile.model {
        args.extend(["-m".to_owned(), model.clone()]);
    }
    for (key, value) in &profile.config {
        args.extend(["-c".to_owned(), format!("{key}={value}")]);
    }
    for dir in &profile.add_dirs {
        args.extend(["--add-dir".to_owned(), dir.display().to_string()]);
    }
    args.extend(profile.extra_args.iter().cloned());
    args.push("-".to_owned());
    Invocation {
        program: binary(request, "TNH_CODEX_BIN", "codex"),
        args,
        format: CaptureFormat::CodexJson,
    }
}

#[derive(Debug, Default)]
struct Reading {
    summary: StreamSummary,
    usage: Option<TokenUsage>,
    turns: u64,
    last_message: Option<String>,
    last_error: Option<String>,
    turn_failure: Option<String>,
}

/// Reads the stream and the `-o` file.
pub(crate) fn summarize(
    stdout: &Path,
    final_response_file: &Path,
) -> std::io::Result<StreamSummary> {
    let mut reading = Reading::default();
    for_each_line(stdout, EVENT_CAP, |line| {
        match serde_json::from_slice::<Value>(line) {
            Ok(event) if event.is_object() => observe(&mut reading, &event),
            _ if line.iter().all(u8::is_ascii_whitespace) => {}
            _ => reading.summary.unparsed_lines += 1,
        }
    })?;
    // The CLI writes this file in the step folder, where the agent can put a FIFO or a link
    // to `/dev/zero` instead: only a regular file is read, and only so much of it.
    let written = crate::artifacts::safe_files::read_regular(final_response_file, EVENT_CAP as u64)
        .ok()
        .and_then(|(bytes, _)| String::from_utf8(bytes).ok())
        .filter(|text| !text.trim().is_empty());
    Ok(conclude(reading, written))
}

fn observe(reading: &mut Reading, event: &Value) {
    let message = |value: &Value| {
        value
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    match event.get("type").and_then(Value::as_str) {
        Some("thread.started") => {
            reading.summary.session_id = event
                .get("thread_id")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        Some("turn.completed") => {
            reading.turns += 1;
            if let Some(usage) = event.get("usage") {
                add_usage(reading.usage.get_or_insert_with(TokenUsage::default), usage);
            }
        }
        Some("turn.failed") => {
            reading.turns += 1;
            reading.turn_failure = event
                .get("error")
                .and_then(message)
                .or(Some("turn failed".to_owned()));
        }
        Some("error") => {
            if let Some(text) = message(event).filter(|text| !text.starts_with("Reconnecting...")) {
                reading.last_error = Some(text);
            }
        }
        Some("item.completed") => {
            let item = event.get("item").unwrap_or(&Value::Null);
            if item.get("type").and_then(Value::as_str) == Some("agent_message") {
                reading.last_message = item.get("text").and_then(Value::as_str).map(str::to_owned);
            }
        }
        _ => {}
    }
}

fn add_usage(total: &mut TokenUsage, usage: &Value) {
    let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
    total.input_tokens += count("input_tokens").saturating_sub(count("cached_input_tokens"));
    total.cache_read_input_tokens += count("cached_input_tokens");
    total.cache_creation_input_tokens += count("cache_write_input_tokens");
    total.output_tokens += count("output_tokens");
    total.reasoning_output_tokens += count("reasoning_output_tokens");
}

fn conclude(reading: Reading, written: Option<String>) -> StreamSummary {
    let mut summary = reading.summary;
    summary.turns = (reading.turns > 0).then_some(reading.turns);
    summary.usage = reading.usage;
    summary.final_response = written.or(reading.last_message);
    summary.failure = match (reading.turn_failure, &summary.final_response) {
        (Some(failure), _) => Some(classify_failure(&failure)),
        (None, None) => Some(match reading.last_error {
            Some(error) => format!("no_final_message: {error}"),
            None => "no_final_message: the agent ended without a final message".to_owned(),
        }),
        (None, Some(_)) => None,
    };
    summary
}

fn classify_failure(message: &str) -> String {
    let code = if super::mentions_authentication(message) {
        "authentication_failed"
    } else {
        "turn_failed"
    };
    format!("{code}: {message}")
}
