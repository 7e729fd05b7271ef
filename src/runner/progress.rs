//! What counts as progress in an agent's output, per capture format.
//!
//! The idle timer must not be fooled by an agent that keeps printing while getting nowhere:
//! the captures show Claude emitting `system/api_retry` events and Codex emitting
//! `Reconnecting...` errors for minutes. So for structured streams only a new event that is
//! not retry noise is progress; for plain commands any output is progress (a progress bar
//! without newlines is still a live program). The observer also reads reported costs so the
//! supervisor can enforce the run-level budget while the agent runs.

use serde_json::Value;

/// Which output stream a line came from.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// What one complete line meant.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LineSignal {
    /// The agent made progress (resets the idle timer).
    pub progress: bool,
    /// Retry/reconnect noise: output that is explicitly not progress.
    pub noise: bool,
    /// A cumulative cost the agent reported, in US dollars.
    pub reported_cost_usd: Option<f64>,
}

/// How the supervisor interprets output lines.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum CaptureFormat {
    /// Plain text: any output is progress.
    Text,
    /// Claude Code `--output-format stream-json`.
    ClaudeStreamJson,
    /// Codex `exec --json`.
    CodexJson,
    /// Gemini CLI `--output-format stream-json`.
    GeminiStreamJson,
}

impl CaptureFormat {
    /// Whether every complete line must be examined (structured streams).
    pub fn examines_lines(self) -> bool {
        !matches!(self, CaptureFormat::Text)
    }

    /// Classifies one complete line (without its newline); never fails on bad input.
    pub fn classify(self, stream: Stream, line: &[u8]) -> LineSignal {
        match self {
            CaptureFormat::Text => PROGRESS,
            // The JSON stream is the agent's heartbeat; stderr carries logs such as
            // Codex's repeated "failed to connect" errors, which are not progress.
            _ if stream == Stream::Stderr => LineSignal::default(),
            CaptureFormat::ClaudeStreamJson => classify_claude(line),
            CaptureFormat::CodexJson => classify_codex(line),
            // No retry noise of its own on stdout was seen: every line is progress.
            CaptureFormat::GeminiStreamJson => classify_gemini(line),
        }
    }
}

const PROGRESS: LineSignal = LineSignal {
    progress: true,
    noise: false,
    reported_cost_usd: None,
};

const NOISE: LineSignal = LineSignal {
    progress: false,
    noise: true,
    reported_cost_usd: None,
};

fn parse_event(line: &[u8]) -> Option<Value> {
    let value: Value = serde_json::from_slice(line).ok()?;
    value.is_object().then_some(value)
}

fn classify_claude(line: &[u8]) -> LineSignal {
    let Some(event) = parse_event(line) else {
        // Not an event (garbage, a truncated giant line): still a sign of life, but the
        // stream format was broken; the adapter reports it from the transcript.
        return if line.iter().all(u8::is_ascii_whitespace) {
            LineSignal::default()
        } else {
            PROGRESS
        };
    };
    let kind = event.get("type").and_then(Value::as_str);
    let subtype = event.get("subtype").and_then(Value::as_str);
    if kind == Some("system") && subtype == Some("api_retry") {
        return NOISE;
    }
    LineSignal {
        // A negative cost would refund the run budget: it counts as nothing.
        reported_cost_usd: event
            .get("total_cost_usd")
            .and_then(Value::as_f64)
            .map(|cost| cost.max(0.0)),
        ..PROGRESS
    }
}

fn classify_gemini(line: &[u8]) -> LineSignal {
    if line.iter().all(u8::is_ascii_whitespace) {
        LineSignal::default()
    } else {
        PROGRESS
    }
}

fn classify_codex(line: &[u8]) -> LineSignal {
    let Some(event) = parse_event(line) else {
        return if line.iter().all(u8::is_ascii_whitespace) {
            LineSignal::default()
        } else {
            PROGRESS
        };
    };
    let kind = event.get("type").and_then(Value::as_str);
    let message = event.get("message").and_then(Value::as_str).unwrap_or("");
    if kind == Some("error") && message.starts_with("Reconnecting...") {
        return NOISE;
    }
    PROGRESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_and_reconnect_events_are_noise() {
        let retry = br#"{"type":"system","subtype":"api_retry","attempt":1}"#;
        let reconnect =
            br#"{"type":"error","message":"Reconnecting... 2/5 (stream disconnected)"}"#;
        let claude = CaptureFormat::ClaudeStreamJson.classify(Stream::Stdout, retry);
        let codex = CaptureFormat::CodexJson.classify(Stream::Stdout, reconnect);
        assert!(claude.noise && !claude.progress);
        assert!(codex.noise && !codex.progress);
    }

    #[test]
    fn other_events_are_progress_and_costs_are_read() {
        let result = br#"{"type":"result","is_error":false,"total_cost_usd":0.25}"#;
        let signal = CaptureFormat::ClaudeStreamJson.classify(Stream::Stdout, result);
        assert!(signal.progress);
        assert_eq!(signal.reported_cost_usd, Some(0.25));
        let final_error = br#"{"type":"error","message":"unexpected status 401"}"#;
        assert!(
            CaptureFormat::CodexJson
                .classify(Stream::Stdout, final_error)
                .progress
        );
    }

    #[test]
    fn garbage_never_panics() {
        for line in [&b"\xff\xfe not json"[..], b"{\"type\":", b"[1,2]", b""] {
            let _ = CaptureFormat::ClaudeStreamJson.classify(Stream::Stdout, line);
            let _ = CaptureFormat::CodexJson.classify(Stream::Stdout, line);
        }
        assert!(
            !CaptureFormat::CodexJson
                .classify(Stream::Stderr, b"ERROR x")
                .progress
        );
    }
}
