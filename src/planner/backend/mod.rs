//! Planner backends: `rules` (in process), `command` (the envelope on stdin, a decision JSON on
//! stdout), `claude` (`claude -p --output-format json --json-schema …`, reading
//! `structured_output`), `codex` (`codex exec --output-schema FILE -o FILE`) and `http` (an
//! OpenAI-compatible `/v1/chat/completions` endpoint with a JSON-schema response format).
//!
//! Every answer is parsed against the decision schema and passes the guard. A backend that
//! fails (spawn error, timeout, non-JSON, schema mismatch) is retried, then the kernel decides
//! `blocked` with the blocker `planner_error`. A well-formed decision naming a `next_step`
//! outside `allowed_next_steps` is not retried: it is returned as [`Verdict::Illegal`] so the
//! run can end with the offending decision saved.
//!
//! This module holds the backend types and the dispatch of one attempt to the backend asked;
//! each backend lives in a file of its own, beside the backend made of a configured definition
//! (the configuration reads and checks definitions: [`crate::config::planners`]), the parsing
//! of decisions, the retries, and the supervision of planner processes.

mod attempts;
mod cancel;
mod claude;
mod codex;
mod command;
mod decision;
mod definition;
mod http;
mod process;
mod request;

use std::path::PathBuf;
use std::time::Duration;

use super::{Decision, Status};

pub use crate::config::planners::{
    DefinitionError, ExternalKind, check_definition, default_planner_name,
};
pub use crate::text::redact;
pub use attempts::{
    Attempt, AttemptError, BackendError, IllegalNextStep, PlannerAttempts, decide, failed,
};
pub use claude::ClaudeError;
pub use codex::CodexError;
pub use decision::{DecisionError, NotUtf8, limits};
pub use http::{Cut, HttpError, Unread};
pub use process::{OUTPUT_LIMIT, ProcessError, ReadError, STDERR_LIMIT};
pub use request::{DEFAULT_PROMPT, Request};

/// A planner backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// The deterministic planner derivation.
    Rules,
    /// A program or model service.
    External(External),
}

/// A configured external planner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct External {
    /// The profile name.
    pub name: String,
    /// What is asked.
    pub kind: ExternalKind,
    /// How long one attempt may take.
    pub timeout: Duration,
    /// Attempts before the kernel decides.
    pub attempts: usize,
    /// Host variables passed through to the process (API keys).
    pub pass_env: Vec<String>,
    /// The repository root a relative program path (`argv: ["./judge.sh"]`, `binary`,
    /// `TNH_CLAUDE_BIN`) is resolved against, when known (see
    /// [`crate::runner::adapters::resolve_program`]).
    pub root: Option<PathBuf>,
}

/// What the backend's answer comes to.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// A decision, guarded; `decided_by` names the backend or `kernel` after a failure.
    Decided {
        /// The guarded decision.
        decision: Decision,
        /// Who decided.
        decided_by: String,
        /// The status the backend answered, before the guard (`None` when the kernel decided).
        answered: Option<Status>,
    },
    /// A well-formed decision whose `next_step` is not allowed (a hard runtime error).
    Illegal {
        /// The decision as the backend gave it.
        decision: Decision,
        /// What is wrong.
        reason: IllegalNextStep,
    },
    /// The operator interrupted the run while the planner was being asked: nobody decided.
    Interrupted,
}

impl Backend {
    /// A name for records.
    pub fn name(&self) -> &str {
        match self {
            Backend::Rules => "rules",
            Backend::External(external) => &external.name,
        }
    }

    /// Whether the backend reads the rendered prompt (a model).
    pub fn reads_prompt(&self) -> bool {
        matches!(
            self,
            Backend::External(External {
                kind: ExternalKind::Claude { .. }
                    | ExternalKind::Codex { .. }
                    | ExternalKind::Http { .. },
                ..
            })
        )
    }
}

/// What one attempt gave.
struct Asked {
    /// The raw answer (unbounded here).
    raw: String,
    /// The decision in it, or why there is none.
    answer: Result<Decision, AttemptError>,
    /// How long to wait before the next attempt, when the backend asked for a pause (HTTP 429).
    retry_after: Option<Duration>,
    /// The end of the planner process's stderr (see [`Attempt::stderr`]).
    stderr: Option<String>,
}

impl Asked {
    /// What a planner process gave: it never asks for a pause.
    fn process(
        raw: String,
        answer: Result<Decision, AttemptError>,
        stderr: Option<String>,
    ) -> Self {
        Asked {
            raw,
            answer,
            retry_after: None,
            stderr,
        }
    }
}

/// One attempt: the raw answer, the decision in it, the wait the backend asked for, and what
/// a planner process wrote on stderr.
fn ask(external: &External, request: &Request<'_>) -> Asked {
    match &external.kind {
        ExternalKind::Command { argv } => command::ask(external, request, argv),
        ExternalKind::Claude { binary, model } => claude::ask(external, request, binary, model),
        ExternalKind::Codex {
            binary,
            model,
            config,
        } => codex::ask(external, request, binary, model, config),
        ExternalKind::Http {
            url,
            model,
            api_key_env,
        } => http::ask(external, request, url, model, api_key_env.as_deref()),
    }
}
