//! The Claude Code adapter: `claude -p --verbose --output-format stream-json`, the prompt on
//! stdin, and a reader for its event stream.
//!
//! Facts from the captures this relies on: `--output-format stream-json` requires `--verbose`;
//! the final `result` event carries `is_error`, `subtype`, `num_turns`, `total_cost_usd`,
//! `usage` and `permission_denials`; an authentication failure is an `assistant` event with
//! `"error": "authentication_failed"` and a `result` whose subtype is **`success`** but whose
//! `is_error` is true — so `is_error` decides, never the subtype. Keys are read by name
//! because their order changes between CLI versions.

use std::path::Path;

use serde_json::Value;

use super::{Invocation, StepRequest, StreamSummary, binary};
use crate::runner::artifacts::{PermissionDenial, TokenUsage};
use crate::runner::progress::CaptureFormat;
use crate::runner::transcript::{EVENT_CAP, for_each_line};

/// The argv for a request (without the prompt, which goes to stdin).
pub(crate) fn invocation(request: &StepRequest) -> Invocation {
    let profile = &request.profile;
    let mut args: Vec<String> = ["-p", "--verbose", "--output-format", "stream-json"]
        .map(String::from)
        .into();
    let mut option = |flag: &str, value: String| {
        args.push(flag.to_owned());
        args.push(value);
    };
    if let Some(model) = &profile.model {
        option("--model", model.clone());
    }
    if let Some(mode) = &profile.permission_mode {
        option("--permission-mode", mode.clone());
    }
    if !profile.allowed_tools.is_empty() {
        option("--allowedTools", profile.allowed_tools.join(","));
    }
    if !profile.disallowed_tools.is_empty() {
        option("--disallowedTools", profile.disallowed_tools.join(","));
    }
    if let Some(turns) = request.max_turns {
        option("--max-turns", turns.to_string());
    }
    // Never more than what is left of the run budget.
    let budget = match (request.max_budget_usd, request.remaining_run_budget_usd) {
        (Some(step), Some(remaining)) => Some(step.min(remaining)),
        (step, remaining) => step.or(remaining),
    };
    if let Some(budget) = budget {
        option("--max-budget-usd", budget.to_string());
    }
    if let Some(text) = &profile.append_system_prompt {
        option("--append-system-prompt", text.clone());
    }
    for dir in &profile.add_dirs {
        option("--add-dir", dir.display().to_string());
    }
    args.extend(profile.extra_args.iter().cloned());
    Invocation {
        program: binary(request, "TNH_CLAUDE_BIN", "claude"),
        args,
        format: CaptureFormat::ClaudeStreamJson,
    }
}

#[derive(Debug, Default)]
struct Reading {
    summary: StreamSummary,
    authentication_failed: bool,
    result: Option<Value>,
    highest_cost: Option<f64>,
    /// A line too long to read came after the last readable cost: what it reported is unknown.
    unread_since_cost: bool,
}

/// Reads the stream: session, turns, cost, usage, denials, the answer, and any failure.
pub(crate) fn summarize(stdout: &Path) -> std::io::Result<StreamSummary> {
    let mut reading = Reading::default();
    for_each_line(stdout, EVENT_CAP, |line| {
        match serde_json::from_slice::<Value>(line) {
            Ok(event) if event.is_object() => observe(&mut reading, event),
            _ if line.iter().all(u8::is_ascii_whitespace) => {}
            _ => {
                reading.summary.unparsed_lines += 1;
                // Cut at the cap: it may have been the `result`, with a cost nobody read.
                reading.unread_since_cost |= line.len() >= EVENT_CAP;
            }
        }
    })?;
    // Costs are cumulative: a readable cost after an unreadable line bounds whatever that line
    // reported, so only one with no readable cost after it leaves the cost unknown.
    reading.summary.overlong_event = reading.unread_since_cost;
    Ok(conclude(reading))
}

fn observe(reading: &mut Reading, event: Value) {
    if let Some(session) = text(&event, "session_id") {
        reading.summary.session_id.get_or_insert(session);
    }
    match event.get("type").and_then(Value::as_str) {
        Some("assistant")
            if event.get("error").and_then(Value::as_str) == Some("authentication_failed") =>
        {
            reading.authentication_failed = true;
        }
        Some("result") => {
            // Costs are cumulative: a later, smaller one must not undo a higher one, and a
            // negative one counts as nothing.
            if let Some(cost) = event.get("total_cost_usd").and_then(Value::as_f64) {
                let cost = cost.max(0.0);
                reading.highest_cost =
                    Some(reading.highest_cost.map_or(cost, |seen| seen.max(cost)));
                reading.unread_since_cost = false;
            }
            reading.result = Some(event);
        }
        _ => {}
    }
}

fn conclude(mut reading: Reading) -> StreamSummary {
    let Some(result) = reading.result else {
        reading.summary.failure =
            Some("no_result: the stream ended without a `result` event".to_owned());
        return reading.summary;
    };
    let summary = &mut reading.summary;
    summary.turns = result.get("num_turns").and_then(Value::as_u64);
    summary.cost_usd = reading.highest_cost;
    summary.usage = result.get("usage").map(usage);
    summary.permission_denials = denials(&result);
    summary.final_response = text(&result, "result");
    let is_error = result
        .get("is_error")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if is_error {
        let authentication = reading.authentication_failed
            || matches!(
                result.get("api_error_status").and_then(Value::as_u64),
                Some(401 | 403)
            );
        summary.failure = Some(failure_cause(&result, authentication));
        // An error text is not an answer.
        summary.final_response = None;
    }
    reading.summary
}

fn failure_cause(result: &Value, authentication: bool) -> String {
    let subtype = text(result, "subtype").unwrap_or_else(|| "unknown".to_owned());
    let errors: Vec<String> = result
        .get("errors")
        .and_then(Value::as_array)
        .map(|errors| {
            errors
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let detail = text(result, "result").or_else(|| (!errors.is_empty()).then(|| errors.join("; ")));
    let code = if authentication {
        "authentication_failed".to_owned()
    } else {
        format!("agent_error ({subtype})")
    };
    match detail {
        Some(detail) => format!("{code}: {detail}"),
        None => code,
    }
}

fn usage(value: &Value) -> TokenUsage {
    let count = |key: &str| value.get(key).and_then(Value::as_u64).unwrap_or(0);
    TokenUsage {
        input_tokens: count("input_tokens"),
        output_tokens: count("output_tokens"),
        cache_read_input_tokens: count("cache_read_input_tokens"),
        cache_creation_input_tokens: count("cache_creation_input_tokens"),
        reasoning_output_tokens: value
            .pointer("/output_tokens_details/thinking_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    }
}

fn denials(result: &Value) -> Vec<PermissionDenial> {
    let Some(list) = result.get("permission_denials").and_then(Value::as_array) else {
        return Vec::new();
    };
    list.iter()
        .map(|denial| PermissionDenial {
            tool_name: text(denial, "tool_name").unwrap_or_else(|| "unknown".to_owned()),
            tool_use_id: text(denial, "tool_use_id"),
            tool_input: denial.get("tool_input").cloned(),
        })
        .collect()
}

fn text(value: &Value, key: &str) -> Option<String> {
    value.get(key).and_then(Value::as_str).map(str::to_owned)
}
