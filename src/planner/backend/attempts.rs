//! Asking a backend for a decision: each attempt recorded, retried on failure, the answer
//! checked against the envelope and guarded, and the kernel's decision when none came.

use super::DefinitionError;
use super::claude::ClaudeError;
use super::codex::CodexError;
use super::decision::{DecisionError, NotUtf8, within_limits};
use super::http::HttpError;
use super::process::ProcessError;
use super::{Asked, Backend, External, Request, Verdict, ask};
use crate::planner::{Decision, PlannerInput, Status, guard, rules};

/// The most of a raw answer kept in the attempt record.
const RAW_LIMIT: usize = 16 * 1024;

/// One try of an external backend, for the record.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Attempt {
    /// 1-based.
    pub attempt: usize,
    /// Whether it produced a valid decision.
    pub ok: bool,
    /// Why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The raw answer, bounded.
    pub raw: String,
    /// What the planner process wrote on stderr, when it wrote anything: at most the last
    /// 64 KiB ([`STDERR_LIMIT`]), decoded lossily (U+FFFD for bytes that are not UTF-8); when
    /// it wrote more, a first line says how many bytes were cut. Absent for `http` planners.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
}

/// `planner_attempts.json`: every try of an external backend in one EVALUATE visit.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct PlannerAttempts {
    /// The version of this format.
    pub schema_version: u32,
    /// The tries, in order.
    pub attempts: Vec<Attempt>,
}

/// Why one attempt of an external backend gave no decision.
#[derive(Debug, thiserror::Error)]
pub enum AttemptError {
    /// The planner process could not run, or failed.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// The answer is not UTF-8.
    #[error(transparent)]
    NotUtf8(#[from] NotUtf8),
    /// The answer holds no usable decision.
    #[error(transparent)]
    Decision(#[from] DecisionError),
    /// What Claude answered holds no decision.
    #[error(transparent)]
    Claude(#[from] ClaudeError),
    /// What Codex answered holds no decision.
    #[error(transparent)]
    Codex(#[from] CodexError),
    /// What the HTTP endpoint answered holds no decision.
    #[error(transparent)]
    Http(#[from] HttpError),
    /// The operator interrupted the run during the attempt.
    #[error("interrupted by the operator")]
    Interrupted,
}

/// Why no backend decided: the kernel decides instead, saying this in its `planner_error`
/// blocker.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The planner definition cannot be used.
    #[error(transparent)]
    Definition(#[from] DefinitionError),
    /// Every attempt failed.
    #[error(
        "planner `{planner}` failed {attempts} time(s); last: {}",
        last.as_ref().map(ToString::to_string).unwrap_or_default()
    )]
    Exhausted {
        /// The planner profile.
        planner: String,
        /// How many attempts were made.
        attempts: usize,
        /// Why the last one failed.
        last: Option<AttemptError>,
    },
}

/// A well-formed decision whose `next_step` is not among the envelope's
/// `allowed_next_steps`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the planner chose next_step `{next}`, which is not in allowed_next_steps [{}]",
    allowed.join(", ")
)]
pub struct IllegalNextStep {
    /// The step the planner chose.
    pub next: String,
    /// The steps it could choose.
    pub allowed: Vec<String>,
}

/// The decision for a request, through the backend and then the guard, with the record of
/// each attempt of an external backend.
pub fn decide(backend: &Backend, request: &Request<'_>) -> (Verdict, Vec<Attempt>) {
    let Backend::External(external) = backend else {
        let decision = rules::decide(request.input);
        let verdict = Verdict::Decided {
            answered: Some(decision.status),
            decision,
            decided_by: "rules".into(),
        };
        return (verdict, Vec::new());
    };
    let mut attempts = Vec::new();
    let mut last = None;
    let mut wait = None;
    for number in 1..=external.attempts {
        if let Some(wait) = wait.take()
            && !super::cancel::sleep_unless_cancelled(request.cancellation, wait)
        {
            return (Verdict::Interrupted, attempts);
        }
        if request.cancellation.is_cancelled() {
            return (Verdict::Interrupted, attempts);
        }
        let asked = ask(external, request);
        wait = asked.retry_after;
        match try_once(external, request, number, asked, &mut attempts) {
            Ok(verdict) => return (verdict, attempts),
            Err(error) => last = Some(error),
        }
    }
    let error = BackendError::Exhausted {
        planner: external.name.clone(),
        attempts: external.attempts,
        last,
    };
    let (decision, decided_by) = failed(&error, request.input);
    let verdict = Verdict::Decided {
        decision,
        decided_by,
        answered: None,
    };
    (verdict, attempts)
}

/// Records attempt `number` and what it comes to: a verdict (a decision, an illegal one, an
/// interruption), or why it failed, so that the next attempt is made.
fn try_once(
    external: &External,
    request: &Request<'_>,
    number: usize,
    asked: Asked,
    attempts: &mut Vec<Attempt>,
) -> Result<Verdict, AttemptError> {
    let Asked {
        raw,
        answer,
        stderr,
        ..
    } = asked;
    let raw = bounded(raw);
    let answer = answer.and_then(|decision| Ok(within_limits(&decision).map(|()| decision)?));
    let record = |error: Option<String>| {
        attempts.push(Attempt {
            attempt: number,
            ok: error.is_none(),
            error,
            raw,
            stderr,
        });
    };
    if request.cancellation.is_cancelled() {
        record(Some(AttemptError::Interrupted.to_string()));
        return Ok(Verdict::Interrupted);
    }
    let decision = match answer {
        Ok(decision) => decision,
        Err(error) => {
            record(Some(error.to_string()));
            return Err(error);
        }
    };
    record(None);
    if let Err(reason) = legal(&decision, request.input) {
        return Ok(Verdict::Illegal { decision, reason });
    }
    let answered = Some(decision.status);
    let decision = guard::guard(decision, &guard::Facts::from_input(request.input));
    Ok(Verdict::Decided {
        decision,
        decided_by: external.name.clone(),
        answered,
    })
}

/// The kernel's decision when no backend answered: `blocked` with `planner_error`, guarded
/// like any answer (a policy event still makes it `unsafe`).
pub fn failed(error: &BackendError, input: &PlannerInput) -> (Decision, String) {
    let mut decision = Decision::status(Status::Blocked);
    decision.raise(Status::Blocked, "planner_error", error.to_string());
    (
        guard::guard(decision, &guard::Facts::from_input(input)),
        "kernel".into(),
    )
}

/// Rejects a `next_step` outside the envelope's `allowed_next_steps`.
fn legal(decision: &Decision, input: &PlannerInput) -> Result<(), IllegalNextStep> {
    let Some(next) = decision.next_step.as_deref() else {
        return Ok(());
    };
    if input.allowed_next_steps.iter().any(|step| step == next) {
        Ok(())
    } else {
        Err(IllegalNextStep {
            next: next.to_owned(),
            allowed: input.allowed_next_steps.clone(),
        })
    }
}

/// A raw answer cut to [`RAW_LIMIT`] bytes for the record, saying so.
fn bounded(mut raw: String) -> String {
    if raw.len() > RAW_LIMIT {
        let mut end = RAW_LIMIT;
        while !raw.is_char_boundary(end) {
            end -= 1;
        }
        raw.truncate(end);
        raw.push_str("\n[truncated]");
    }
    raw
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempts_record_the_kernel_wrote_reads_back_and_writes_the_same_keys() {
        let record = serde_json::json!({
            "schema_version": 1,
            "attempts": [
                {"attempt": 1, "ok": false, "error": "the answer is not JSON: expected value at line 1 column 1",
                 "raw": "I think it is fine", "stderr": "warning: slow\n"},
                {"attempt": 2, "ok": true, "raw": "{\"status\": \"success\"}"},
            ],
        });
        let attempts: PlannerAttempts = serde_json::from_value(record.clone()).unwrap();
        assert_eq!(attempts.attempts[1].error, None);
        assert_eq!(serde_json::to_value(&attempts).unwrap(), record);
    }

    #[test]
    fn a_next_step_outside_the_allowed_ones_is_illegal() {
        let input = PlannerInput {
            allowed_next_steps: vec!["fix".into(), "gate".into()],
            ..PlannerInput::default()
        };
        let mut decision = Decision::status(Status::Partial);
        decision.next_step = Some("deploy".into());
        assert_eq!(
            legal(&decision, &input).unwrap_err().to_string(),
            "the planner chose next_step `deploy`, which is not in allowed_next_steps [fix, gate]"
        );
        decision.next_step = Some("gate".into());
        assert!(legal(&decision, &input).is_ok());
    }
}
