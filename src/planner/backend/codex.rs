//! The `codex` backend: `codex exec --output-schema FILE -o FILE`, the decision read from the
//! `-o` file, and why it failed from its `--json` events.

use std::path::{Path, PathBuf};

use super::decision::{NotUtf8, parse_decision};
use super::process::{
    Invocation, OUTPUT_LIMIT, ProcessError, ReadError, cli_binary, read_capped, run_process,
};
use super::request::{model_prompt, schema_text};
use super::{Asked, AttemptError, External, Request};
use crate::planner::Decision;

/// Why Codex's answer holds no decision.
#[derive(Debug, thiserror::Error)]
pub enum CodexError {
    /// The process failed, and its `--json` events say why.
    #[error("{failure}; {reason}")]
    Failed {
        /// How the process ended.
        failure: Box<ProcessError>,
        /// What its events say (a `turn.failed` or `error` event).
        reason: String,
    },
    /// Its `-o` file is not UTF-8.
    #[error("codex's -o file: {0}")]
    AnswerNotUtf8(NotUtf8),
    /// Its `-o` file is larger than [`OUTPUT_LIMIT`].
    #[error("codex's -o file holds more than {OUTPUT_LIMIT} bytes: the answer is refused")]
    AnswerTooLarge,
    /// Its `-o` file is not a regular file, or could not be read.
    #[error(
        "codex's -o file `{}` was not read: {reason}; only a regular file is an answer",
        path.display()
    )]
    AnswerRefused {
        /// The `-o` file.
        path: PathBuf,
        /// Why.
        reason: std::io::Error,
    },
    /// It wrote no `-o` file; its `--json` events may say why.
    #[error(
        "codex wrote no final message to its -o file{}",
        reason.as_ref().map(|reason| format!("; {reason}")).unwrap_or_default()
    )]
    NoAnswer {
        /// What its events say, if anything (a `turn.failed` or `error` event).
        reason: Option<String>,
    },
}

/// One attempt of a `codex` planner.
pub(super) fn ask(
    external: &External,
    request: &Request<'_>,
    binary: &Option<String>,
    model: &Option<String>,
    config: &[(String, String)],
) -> Asked {
    match ask_in_folder(external, request, binary, model, config) {
        Ok(asked) => asked,
        Err(error) => Asked::process(String::new(), Err(error.into()), None),
    }
}

/// One attempt, the schema and the answer in a folder of their own; an error when that folder
/// cannot be prepared or the process cannot run.
fn ask_in_folder(
    external: &External,
    request: &Request<'_>,
    binary: &Option<String>,
    model: &Option<String>,
    config: &[(String, String)],
) -> Result<Asked, ProcessError> {
    let folder = tempfile::tempdir()?;
    let schema = folder.path().join("decision.schema.json");
    let answer_file = folder.path().join("decision.json");
    std::fs::write(&schema, schema_text())?;
    let program = cli_binary("TNH_CODEX_BIN", binary, "codex");
    let args = arguments(&schema, &answer_file, model, config);
    let invocation = Invocation {
        program: &program,
        args: &args,
        input: model_prompt(request).into_bytes(),
    };
    let run = run_process(external, request, invocation, Some(&folder))?;
    let stderr = run.stderr;
    // Why codex failed is in its `--json` events on stdout (`turn.failed`, `error`), not in
    // the banner it prints on stderr.
    if let Some(failure) = run.failure {
        let error: AttemptError = match codex_failure(&run.stdout) {
            Some(reason) => CodexError::Failed {
                failure: Box::new(failure),
                reason,
            }
            .into(),
            None => failure.into(),
        };
        return Ok(Asked::process(run.stdout, Err(error), stderr));
    }
    let (raw, answer) = read_answer(&answer_file, run.stdout);
    Ok(Asked::process(raw, answer, stderr))
}

/// The arguments of `codex exec`, the prompt read from stdin.
fn arguments(
    schema: &Path,
    answer_file: &Path,
    model: &Option<String>,
    config: &[(String, String)],
) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "exec".into(),
        "--json".into(),
        "--skip-git-repo-check".into(),
        "--sandbox".into(),
        "read-only".into(),
        "--output-schema".into(),
        schema.display().to_string(),
        "-o".into(),
        answer_file.display().to_string(),
    ];
    if let Some(model) = model {
        args.extend(["--model".to_owned(), model.clone()]);
    }
    for (key, value) in config {
        args.extend(["-c".to_owned(), format!("{key}={value}")]);
    }
    args.push("-".into());
    args
}

/// The raw answer and the decision in the `-o` file of a codex that exited cleanly; its
/// `stdout` is the raw answer when the file holds none.
fn read_answer(answer_file: &Path, stdout: String) -> (String, Result<Decision, AttemptError>) {
    match read_capped(answer_file) {
        Ok((text, not_utf8)) => {
            let answer = match not_utf8 {
                Some(error) => Err(CodexError::AnswerNotUtf8(error).into()),
                None => parse_decision(&text).map_err(AttemptError::from),
            };
            (text, answer)
        }
        Err(ReadError::TooLarge) => (String::new(), Err(CodexError::AnswerTooLarge.into())),
        Err(ReadError::Refused(reason)) => {
            let path = answer_file.to_path_buf();
            (
                stdout,
                Err(CodexError::AnswerRefused { path, reason }.into()),
            )
        }
        Err(ReadError::Missing) => {
            let reason = codex_failure(&stdout);
            (stdout, Err(CodexError::NoAnswer { reason }.into()))
        }
    }
}

/// The reason codex gave for failing in its `--json` events: the last `turn.failed` error,
/// else the last `error` event that is not a reconnection notice.
fn codex_failure(stdout: &str) -> Option<String> {
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let message = |event: &serde_json::Value, pointer: &str| {
        event
            .pointer(pointer)
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    };
    events
        .iter()
        .rev()
        .find(|event| event["type"] == "turn.failed")
        .map(|event| {
            format!(
                "turn.failed: {}",
                message(event, "/error/message").unwrap_or_else(|| "turn failed".into())
            )
        })
        .or_else(|| {
            events
                .iter()
                .rev()
                .filter(|event| event["type"] == "error")
                .filter_map(|event| message(event, "/message"))
                .find(|text| !text.starts_with("Reconnecting..."))
                .map(|text| format!("error: {text}"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_codex_names_its_turn_failed_error() {
        let stdout = "{\"type\":\"error\",\"message\":\"Reconnecting... 1/5\"}\n{\"type\":\"turn.failed\",\"error\":{\"message\":\"unexpected status 401\"}}\n";
        assert_eq!(
            codex_failure(stdout).as_deref(),
            Some("turn.failed: unexpected status 401")
        );
        let errors = "{\"type\":\"error\",\"message\":\"quota exceeded\"}\n{\"type\":\"error\",\"message\":\"Reconnecting... 2/5\"}\n";
        assert_eq!(
            codex_failure(errors).as_deref(),
            Some("error: quota exceeded")
        );
        assert_eq!(codex_failure("banner"), None);
    }

    #[test]
    fn a_missing_answer_file_says_why_codex_gave_none() {
        let folder = tempfile::tempdir().unwrap();
        let stdout = "{\"type\":\"turn.failed\",\"error\":{\"message\":\"quota\"}}\n";
        let (raw, answer) = read_answer(&folder.path().join("decision.json"), stdout.into());
        assert_eq!(raw, stdout);
        assert_eq!(
            answer.unwrap_err().to_string(),
            "codex wrote no final message to its -o file; turn.failed: quota"
        );
    }
}
