//! Reading captured output back with bounded memory, and rendering `transcript.md`, the
//! readable account of a step that a human opens first in the morning.
//!
//! The raw streams stay the evidence; this file is a view of them: the prompt, then one short
//! entry per event (assistant text, tool calls and results, retries, permission denials, the
//! result), capped in size so a runaway agent cannot produce an unreadable page, with control
//! characters other than newline and tab shown escaped (`\x1b`, `\x00`).

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use crate::artifacts::safe_files::open_regular;

use serde_json::Value;

use super::capture::LINE_CAP;
use super::progress::CaptureFormat;

/// The largest `transcript.md` written; the raw stream has the rest.
const MARKDOWN_LIMIT: usize = 2 * 1024 * 1024;
/// The longest excerpt of a single tool input or result.
const EXCERPT_LIMIT: usize = 2000;
/// How much of a plain-text stream is shown.
const TEXT_EXCERPT: u64 = 16 * 1024;

/// The longest event the adapters parse after the run. Larger than [`LINE_CAP`] because a
/// final `result` event carries the whole answer and must not be lost to truncation; still a
/// bound, so a runaway line cannot exhaust memory.
pub const EVENT_CAP: usize = 32 * 1024 * 1024;

/// Calls `visit` with every line of `path` (without its newline), holding at most `cap`
/// bytes of a line: a longer line is passed truncated.
///
/// `path` is in the agent's step folder, so only a regular file is read (a link to `/dev/zero`
/// or a FIFO put in the capture's place is refused), and no further than its length when
/// opened.
pub fn for_each_line(path: &Path, cap: usize, mut visit: impl FnMut(&[u8])) -> std::io::Result<()> {
    let file = open_regular(path)?;
    let length = file.metadata()?.len();
    let mut reader = BufReader::with_capacity(64 * 1024, file.take(length));
    let mut line = Vec::new();
    let mut pending = false;
    loop {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            if pending {
                visit(&line);
            }
            return Ok(());
        }
        let (piece, consumed, complete) = match memchr::memchr(b'\n', buffer) {
            Some(end) => (&buffer[..end], end + 1, true),
            None => (buffer, buffer.len(), false),
        };
        let room = cap.saturating_sub(line.len());
        line.extend_from_slice(&piece[..piece.len().min(room)]);
        pending = true;
        reader.consume(consumed);
        if complete {
            visit(&line);
            line.clear();
            pending = false;
        }
    }
}

/// The last `limit` bytes of a regular file as text (invalid UTF-8 replaced).
pub fn read_end(path: &Path, limit: u64) -> std::io::Result<String> {
    let mut file = open_regular(path)?;
    let length = file.metadata()?.len();
    file.seek(SeekFrom::Start(length.saturating_sub(limit)))?;
    let mut bytes = Vec::new();
    file.take(limit).read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The readable transcript of a step.
pub fn render(format: CaptureFormat, prompt: &str, stdout: &Path, stderr: &Path) -> String {
    let mut page = format!(
        "# Agent transcript\n\n## Prompt\n\n{}\n\n## Session\n\n",
        fence(prompt)
    );
    match format {
        CaptureFormat::Text => page.push_str(&text_section("stdout", stdout)),
        _ => {
            let _ = for_each_line(stdout, LINE_CAP, |line| {
                let entry = render_line(format, line);
                if page.len() < MARKDOWN_LIMIT && !entry.is_empty() {
                    // One paragraph per entry, so lists and blocks never run together.
                    page.push_str(entry.trim_end_matches('\n'));
                    page.push_str("\n\n");
                }
            });
            if page.len() >= MARKDOWN_LIMIT {
                page.push_str("\n*(transcript cut here; the raw stream has everything)*\n");
            }
        }
    }
    page.push_str(&text_section("stderr", stderr));
    // A page to be read in a terminal or an editor: what the agent printed keeps its text, but
    // a NUL (which makes tools take the page for binary) or an escape sequence (which would
    // clear or retitle the operator's terminal) is shown escaped, as the CLI shows it; the raw
    // streams keep the bytes.
    crate::text::terminal_safe(&page).into_owned()
}

fn text_section(name: &str, path: &Path) -> String {
    let Ok(metadata) = std::fs::metadata(path) else {
        return String::new();
    };
    if metadata.len() == 0 {
        return format!("*({name} was empty)*\n\n");
    }
    let excerpt = read_end(path, TEXT_EXCERPT).unwrap_or_default();
    let note = if metadata.len() > TEXT_EXCERPT {
        format!(" (last {TEXT_EXCERPT} of {} bytes)", metadata.len())
    } else {
        String::new()
    };
    format!("### {name}{note}\n\n{}\n\n", fence(&excerpt))
}

fn render_line(format: CaptureFormat, line: &[u8]) -> String {
    match serde_json::from_slice::<Value>(line) {
        Ok(event) if event.is_object() => match format {
            CaptureFormat::CodexJson => render_codex(&event),
            CaptureFormat::GeminiStreamJson => render_gemini(&event),
            _ => render_claude(&event),
        },
        _ if line.iter().all(u8::is_ascii_whitespace) => String::new(),
        _ => format!(
            "- *unparsed line:* `{}`\n",
            excerpt(&String::from_utf8_lossy(line)).replace('`', "'")
        ),
    }
}

fn render_claude(event: &Value) -> String {
    let kind = field(event, "type");
    let subtype = field(event, "subtype");
    match (kind, subtype) {
        ("system", "init") => format!("- *session started* (model `{}`)\n", field(event, "model")),
        ("system", "api_retry") => format!(
            "- *API retry, attempt {}*\n",
            event.get("attempt").unwrap_or(&Value::Null)
        ),
        ("system", "permission_denied") => {
            format!("- **permission denied:** `{}`\n", field(event, "tool_name"))
        }
        ("assistant" | "user", _) => render_claude_content(kind, event),
        ("result", _) => format!(
            "## Result\n\n- subtype: `{subtype}`, is_error: `{}`, turns: `{}`, cost: `{}` USD\n\n{}\n",
            event.get("is_error").unwrap_or(&Value::Null),
            event.get("num_turns").unwrap_or(&Value::Null),
            event.get("total_cost_usd").unwrap_or(&Value::Null),
            result_text(event)
        ),
        _ => format!(
            "- *{kind}{}{subtype}*\n",
            if subtype.is_empty() { "" } else { "/" }
        ),
    }
}

fn result_text(event: &Value) -> String {
    let errors: Vec<&str> = event
        .get("errors")
        .and_then(Value::as_array)
        .map(|errors| errors.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    match field(event, "result") {
        "" => errors
            .iter()
            .map(|error| format!("- error: {error}\n"))
            .collect(),
        text => text.to_owned(),
    }
}

fn render_claude_content(kind: &str, event: &Value) -> String {
    let blocks = event
        .pointer("/message/content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut entry = String::new();
    for block in &blocks {
        match field(block, "type") {
            "text" => entry.push_str(&format!("**{kind}:** {}\n\n", field(block, "text"))),
            "tool_use" => entry.push_str(&format!(
                "**tool call** `{}`:\n\n{}\n\n",
                field(block, "name"),
                fence(&excerpt(
                    &block.get("input").unwrap_or(&Value::Null).to_string()
                ))
            )),
            "tool_result" => {
                let content = match block.get("content") {
                    Some(Value::String(text)) => text.clone(),
                    Some(other) => other.to_string(),
                    None => String::new(),
                };
                entry.push_str(&format!(
                    "**tool result:**\n\n{}\n\n",
                    fence(&excerpt(&content))
                ));
            }
            _ => {}
        }
    }
    entry
}

fn render_codex(event: &Value) -> String {
    let item = event.get("item").unwrap_or(&Value::Null);
    match (field(event, "type"), field(item, "type")) {
        ("thread.started", _) => format!("- *thread started* (`{}`)\n", field(event, "thread_id")),
        ("turn.started", _) => "- *turn started*\n".to_owned(),
        ("item.completed", "agent_message") => {
            format!("**assistant:** {}\n\n", field(item, "text"))
        }
        ("item.completed", "command_execution") => {
            let output = field(item, "aggregated_output");
            let shown = if output.is_empty() {
                String::new()
            } else {
                fence(&excerpt(output))
            };
            format!(
                "**command** `{}` → exit code `{}`\n\n{shown}",
                field(item, "command"),
                item.get("exit_code").unwrap_or(&Value::Null),
            )
        }
        ("item.completed", "error") => format!("- *notice:* {}\n", field(item, "message")),
        ("error", _) => format!("- *error:* {}\n", field(event, "message")),
        ("turn.completed", _) => format!(
            "- *turn completed* (usage `{}`)\n",
            event.get("usage").unwrap_or(&Value::Null)
        ),
        ("turn.failed", _) => format!(
            "## Turn failed\n\n{}\n",
            event
                .pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or("")
        ),
        _ => String::new(),
    }
}

fn render_gemini(event: &Value) -> String {
    match (field(event, "type"), field(event, "role")) {
        ("init", _) => format!(
            "- *session started* (`{}`, model `{}`)\n",
            field(event, "session_id"),
            field(event, "model")
        ),
        // The model's text arrives in pieces (`delta`): each is shown as it came.
        ("message", "assistant") => format!("**assistant:** {}\n\n", field(event, "content")),
        ("message", _) => String::new(),
        ("tool_use", _) => format!(
            "**tool call** `{}`:\n\n{}\n\n",
            field(event, "tool_name"),
            fence(&excerpt(
                &event.get("parameters").unwrap_or(&Value::Null).to_string()
            ))
        ),
        ("tool_result", _) => {
            let output = match event.get("output") {
                Some(Value::String(text)) => fence(&excerpt(text)),
                _ => String::new(),
            };
            format!(
                "**tool result** (`{}`)\n\n{output}\n\n",
                field(event, "status")
            )
        }
        ("error", _) => format!("- *error:* {}\n", field(event, "message")),
        ("result", _) => format!(
            "## Result\n\n- status: `{}`, stats: `{}`\n\n{}\n",
            field(event, "status"),
            event.get("stats").unwrap_or(&Value::Null),
            event
                .pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or("")
        ),
        _ => String::new(),
    }
}

fn field<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or("")
}

fn excerpt(text: &str) -> String {
    if text.len() <= EXCERPT_LIMIT {
        return text.to_owned();
    }
    let mut end = EXCERPT_LIMIT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} more bytes]", &text[..end], text.len() - end)
}

/// A fenced block long enough not to be closed by backticks inside `text`.
fn fence(text: &str) -> String {
    let longest = text
        .split(|character| character != '`')
        .map(str::len)
        .max()
        .unwrap_or(0);
    let marker = "`".repeat(longest.max(2) + 1);
    format!("{marker}text\n{}\n{marker}", text.trim_end_matches('\n'))
}
