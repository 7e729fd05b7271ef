//! The `claude` backend: Claude Code in print mode (`claude -p --output-format json
//! --json-schema …`), the decision read from the `structured_output` of its result object.

use super::decision::{DecisionError, decision_from, parse_decision};
use super::process::{Invocation, ProcessError, cli_binary, run_process};
use super::request::{model_prompt, schema_text};
use super::{Asked, AttemptError, External, Request};
use crate::planner::Decision;

/// Why Claude's answer holds no decision.
#[derive(Debug, thiserror::Error)]
pub enum ClaudeError {
    /// Its output holds no `result` object.
    #[error("claude printed no result object")]
    NoResult,
    /// Its result object says it failed (`is_error`).
    #[error("claude reported an error ({subtype}): {result}")]
    Reported {
        /// The result's `subtype`.
        subtype: String,
        /// The result's text, which says why.
        result: String,
    },
    /// Its `structured_output` is not a decision.
    #[error(transparent)]
    StructuredOutput(DecisionError),
    /// It gave no `structured_output`, and its result text holds no decision either.
    #[error("claude returned no structured_output, and its result text is no decision ({reason})")]
    NoStructuredOutput {
        /// Why the result text is no decision.
        reason: DecisionError,
    },
    /// The process failed, and its result object says why.
    #[error("{failure}; {reason}")]
    Failed {
        /// How the process ended.
        failure: Box<ProcessError>,
        /// What its result object says.
        reason: Box<ClaudeError>,
    },
}

/// One attempt of a `claude` planner.
pub(super) fn ask(
    external: &External,
    request: &Request<'_>,
    binary: &Option<String>,
    model: &Option<String>,
) -> Asked {
    let program = cli_binary("TNH_CLAUDE_BIN", binary, "claude");
    let mut args: Vec<String> = [
        "-p",
        "--output-format",
        "json",
        "--permission-mode",
        "dontAsk",
        "--json-schema",
    ]
    .map(str::to_owned)
    .to_vec();
    args.push(schema_text());
    if let Some(model) = model {
        args.extend(["--model".to_owned(), model.clone()]);
    }
    let invocation = Invocation {
        program: &program,
        args: &args,
        input: model_prompt(request).into_bytes(),
    };
    let run = match run_process(external, request, invocation, None) {
        Ok(run) => run,
        Err(error) => return Asked::process(String::new(), Err(error.into()), None),
    };
    // A failed Claude still prints its result object, which says why (`is_error`).
    let answer = match (run.failure, run.not_utf8) {
        (Some(failure), _) => Err(match claude_decision(&run.stdout) {
            Err(reason) => ClaudeError::Failed {
                failure: Box::new(failure),
                reason: Box::new(reason),
            }
            .into(),
            Ok(_) => failure.into(),
        }),
        (None, Some(not_utf8)) => Err(not_utf8.into()),
        (None, None) => claude_decision(&run.stdout).map_err(AttemptError::from),
    };
    Asked::process(run.stdout, answer, run.stderr)
}

/// The decision in Claude's `result` object: `structured_output`, else a JSON `result` text.
fn claude_decision(stdout: &str) -> Result<Decision, ClaudeError> {
    let whole = serde_json::from_str::<serde_json::Value>(stdout.trim())
        .ok()
        .filter(|event| event["type"] == "result");
    let result = whole
        .or_else(|| {
            stdout
                .lines()
                .rev()
                .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
                .find(|event| event["type"] == "result")
        })
        .ok_or(ClaudeError::NoResult)?;
    if result["is_error"] == true {
        return Err(ClaudeError::Reported {
            subtype: result["subtype"].as_str().unwrap_or("unknown").to_owned(),
            result: result["result"].as_str().unwrap_or_default().to_owned(),
        });
    }
    match result.get("structured_output") {
        Some(value) if !value.is_null() => {
            decision_from(value.clone()).map_err(ClaudeError::StructuredOutput)
        }
        _ => parse_decision(result["result"].as_str().unwrap_or_default())
            .map_err(|reason| ClaudeError::NoStructuredOutput { reason }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::Status;

    #[test]
    fn claude_answers_are_read_from_structured_output_or_a_json_result() {
        let structured = r#"{"type":"result","subtype":"success","is_error":false,"result":"ok","structured_output":{"status":"partial","blockers":[],"risk_flags":[]}}"#;
        assert_eq!(claude_decision(structured).unwrap().status, Status::Partial);
        let text = r#"{"type":"result","subtype":"success","is_error":false,"result":"```json\n{\"status\":\"success\"}\n```"}"#;
        assert_eq!(claude_decision(text).unwrap().status, Status::Success);
        let plain =
            r#"{"type":"result","subtype":"success","is_error":false,"result":"Hello from mock."}"#;
        assert!(
            claude_decision(plain)
                .unwrap_err()
                .to_string()
                .contains("no structured_output")
        );
        let failed =
            r#"{"type":"result","subtype":"success","is_error":true,"result":"Not logged in"}"#;
        assert_eq!(
            claude_decision(failed).unwrap_err().to_string(),
            "claude reported an error (success): Not logged in"
        );
    }
}
