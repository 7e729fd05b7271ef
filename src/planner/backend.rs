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

use std::path::PathBuf;
use std::time::Duration;

use super::{Decision, Status, guard, rules};
use crate::config::Config;
use crate::workflow::yaml::Node;

/// How long a planner may take unless its profile says `timeout:`.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// Tries before giving up, unless the profile says `attempts:`.
const DEFAULT_ATTEMPTS: usize = 2;

/// The most of a raw answer kept in the attempt record.
const RAW_LIMIT: usize = 16 * 1024;

/// The most of an HTTP response body read.
const BODY_LIMIT: u64 = 8 * 1024 * 1024;

/// The most of a planner process's stderr kept in its attempt record: the end of it, where a
/// failing program says why.
pub const STDERR_LIMIT: u64 = 64 * 1024;

/// The most of a planner process's stdout (and of codex's `-o` file) kept, on disk and in
/// memory: a planner that prints more is stopped and the attempt fails.
pub const OUTPUT_LIMIT: u64 = 4 * 1024 * 1024;

/// The longest wait an HTTP 429 `Retry-After` may impose before the next attempt.
const RETRY_AFTER_MAX: Duration = Duration::from_secs(60);

/// The wait before retrying an HTTP 429 that names no `Retry-After`.
const RETRY_AFTER_DEFAULT: Duration = Duration::from_secs(1);

/// The prompt model backends get when the step names none (and for decision vectors).
pub const DEFAULT_PROMPT: &str = "Judge the evidence of this EVALUATE step against the planner contract: `success` when the work is done and validated, `partial` when it falls short but is fixable (give fix_instructions), `blocked` when the environment prevents progress (give blockers), `unsafe` on any policy event or contradiction that hides a failure, `needs_human` when a person must decide.";

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

/// The external backends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExternalKind {
    /// Any program: envelope on stdin, decision on stdout.
    Command {
        /// argv.
        argv: Vec<String>,
    },
    /// Claude Code in print mode with a JSON schema.
    Claude {
        /// The binary (`TNH_CLAUDE_BIN` wins).
        binary: Option<String>,
        /// `--model`.
        model: Option<String>,
    },
    /// `codex exec` with an output schema.
    Codex {
        /// The binary (`TNH_CODEX_BIN` wins).
        binary: Option<String>,
        /// `--model`.
        model: Option<String>,
        /// `-c key=value` pairs.
        config: Vec<(String, String)>,
    },
    /// An OpenAI-compatible chat completions endpoint.
    Http {
        /// The endpoint (`…/v1/chat/completions`).
        url: String,
        /// The model name sent.
        model: String,
        /// The variable holding the bearer token, if any.
        api_key_env: Option<String>,
    },
}

/// What a backend is asked.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The planner envelope.
    pub envelope: &'a serde_json::Value,
    /// The rendered planner prompt (model backends send it; `command` gets the envelope only).
    pub prompt: &'a str,
    /// Where planner processes run (the run's worktree), else the current directory.
    pub cwd: Option<&'a std::path::Path>,
    /// The run's `TNH_*` variables (`TNH_RUN_ID`, `TNH_STEP_DIR`, …), given to planner
    /// processes like to agents, so that `resume` finds and kills a planner a killed conductor
    /// left running; `None` outside a run (`planner check`).
    pub run_variables: Option<&'a std::collections::BTreeMap<String, String>>,
    /// The run's cancellation (Ctrl-C, SIGTERM): a planner process is stopped like an agent,
    /// an HTTP call is abandoned, and no new attempt starts once it fires.
    pub cancellation: &'a crate::runner::Cancellation,
}

/// One try of an external backend, for the record.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct PlannerAttempts {
    /// The version of this format.
    pub schema_version: u32,
    /// The tries, in order.
    pub attempts: Vec<Attempt>,
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
        reason: String,
    },
    /// The operator interrupted the run while the planner was being asked: nobody decided.
    Interrupted,
}

/// The keys a planner definition may have (docs/planner.md).
const DEFINITION_KEYS: &[&str] = &[
    "kind",
    "argv",
    "binary",
    "model",
    "config",
    "url",
    "api_key_env",
    "timeout",
    "attempts",
    "pass_env",
];

/// The kinds that read each definition key besides `kind` (every other kind would ignore it,
/// so it is refused there; `kind: rules` takes no other key).
const KEY_KINDS: &[(&str, &[&str])] = &[
    ("argv", &["command"]),
    ("binary", &["claude", "codex"]),
    ("model", &["claude", "codex", "http"]),
    ("config", &["codex"]),
    ("url", &["http"]),
    ("api_key_env", &["http"]),
    ("timeout", &["command", "claude", "codex", "http"]),
    ("attempts", &["command", "claude", "codex", "http"]),
    ("pass_env", &["command", "claude", "codex"]),
];

/// The key of a definition of `kind` that kind would ignore, with why, if any.
fn ignored_key<'n>(name: &str, node: &'n Node, kind: &str) -> Option<(&'n Node, String)> {
    node.as_map()?.iter().find_map(|(key, _)| {
        let text = key.as_str()?;
        let (_, kinds) = KEY_KINDS.iter().find(|(known, _)| *known == text)?;
        if kinds.contains(&kind) {
            return None;
        }
        let takers = kinds
            .iter()
            .map(|kind| format!("`kind: {kind}`"))
            .collect::<Vec<_>>()
            .join(", ");
        Some((
            key,
            format!(
                "planner `{name}` is `kind: {kind}`, which would ignore `{text}`; only {takers} take{} it",
                if kinds.len() == 1 { "s" } else { "" }
            ),
        ))
    })
}

/// The planner an EVALUATE asks when neither `run --planner`, the step's `planner:` nor
/// `defaults.planner` names one: the profile configured as `default`, else the built-in
/// `rules`.
pub fn default_planner_name(config: &Config) -> &'static str {
    if config.planners.contains_key("default") {
        "default"
    } else {
        "rules"
    }
}

/// Checks the planner definition `name` of `config` (its node is `node`) where the
/// configuration is read: a mapping of known keys, of a known kind, with what that kind needs.
/// The error says where and what.
pub fn check_definition(
    name: &str,
    node: &Node,
    config: &Config,
) -> Result<(), (crate::workflow::yaml::Pos, String)> {
    let Some(entries) = node.as_map() else {
        return Err((
            node.pos,
            format!(
                "planner `{name}` must be a mapping such as `{{kind: rules}}` or `{{kind: command, argv: [...]}}`"
            ),
        ));
    };
    for (key, _) in entries {
        let Some(text) = key.as_str() else {
            return Err((key.pos, format!("keys of planner `{name}` must be strings")));
        };
        if !DEFINITION_KEYS.contains(&text) {
            let hint =
                match crate::workflow::diagnostic::nearest(text, DEFINITION_KEYS.iter().copied()) {
                    Some(near) => format!("did you mean `{near}`?"),
                    None => format!("the keys are {}", DEFINITION_KEYS.join(", ")),
                };
            return Err((
                key.pos,
                format!("planner `{name}` has an unknown key `{text}`; {hint}"),
            ));
        }
    }
    // A key the kind does not read (an http planner's `argv`) would configure nothing.
    if let Some(kind) = node.get("kind").and_then(Node::as_str)
        && ["command", "claude", "codex", "http"].contains(&kind)
        && let Some((key, message)) = ignored_key(name, node, kind)
    {
        return Err((key.pos, message));
    }
    Backend::from_config(name, config)
        .map(drop)
        .map_err(|message| {
            // At the key the message names, when the definition has it.
            let at = DEFINITION_KEYS
                .iter()
                .find(|key| {
                    message.contains(&format!("`{key}`"))
                        || (**key == "kind" && message.contains("has kind"))
                        || message.contains(&format!(": {key} "))
                })
                .and_then(|key| node.get(key));
            (at.map_or(node.pos, |value| value.pos), message)
        })
}

impl Backend {
    /// The backend a planner profile names (`rules`/`default` exist without configuration).
    pub fn from_config(name: &str, config: &Config) -> Result<Self, String> {
        let Some(node) = config.planners.get(name) else {
            return match name {
                "rules" | "default" => Ok(Backend::Rules),
                other => Err(format!(
                    "planner `{other}` is not defined under `planners:`"
                )),
            };
        };
        // A key present with the wrong type is an error naming it, never taken as absent.
        let text = |key: &str| -> Result<Option<String>, String> {
            match node.get(key) {
                None => Ok(None),
                Some(value) => match value.to_json() {
                    serde_json::Value::String(text) => Ok(Some(text)),
                    other => Err(format!(
                        "planner `{name}`: `{key}` must be a string, got {other}"
                    )),
                },
            }
        };
        let list = |key: &str| -> Result<Vec<String>, String> {
            match node.get(key) {
                None => Ok(Vec::new()),
                Some(value) => match value.to_json() {
                    serde_json::Value::Array(items)
                        if items.iter().all(serde_json::Value::is_string) =>
                    {
                        Ok(items
                            .into_iter()
                            .filter_map(|item| item.as_str().map(str::to_owned))
                            .collect())
                    }
                    other => Err(format!(
                        "planner `{name}`: `{key}` must be a list of strings, got {other}"
                    )),
                },
            }
        };
        let Some(kind) = text("kind")? else {
            return Err(format!(
                "planner `{name}` has no `kind`; add one of `kind: rules`, `command`, `claude`, `codex` or `http`"
            ));
        };
        let kind = match kind.as_str() {
            "rules" => {
                if let Some((key, _)) = node
                    .as_map()
                    .into_iter()
                    .flatten()
                    .find(|(key, _)| key.as_str() != Some("kind"))
                {
                    return Err(format!(
                        "planner `{name}` is `kind: rules`, which takes no other key, but has `{}`",
                        key.as_str().unwrap_or_default()
                    ));
                }
                return Ok(Backend::Rules);
            }
            "command" => {
                let argv = list("argv")?;
                if argv.is_empty() {
                    return Err(format!("planner `{name}` has no `argv`"));
                }
                ExternalKind::Command { argv }
            }
            "claude" => ExternalKind::Claude {
                binary: text("binary")?,
                model: text("model")?,
            },
            "codex" => ExternalKind::Codex {
                binary: text("binary")?,
                model: text("model")?,
                config: node
                    .get("config")
                    .and_then(Node::as_map)
                    .map(|entries| {
                        entries
                            .iter()
                            .filter_map(|(key, value)| {
                                let value = match value.to_json() {
                                    serde_json::Value::String(text) => text,
                                    other => other.to_string(),
                                };
                                Some((key.as_str()?.to_owned(), value))
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            },
            "http" => {
                let url = text("url")?.ok_or_else(|| format!("planner `{name}` has no `url`"))?;
                let scheme = url
                    .split_once("://")
                    .map(|(scheme, rest)| (scheme.to_ascii_lowercase(), rest));
                match scheme {
                    Some((scheme, rest))
                        if (scheme == "http" || scheme == "https")
                            && !rest.is_empty()
                            && !rest.starts_with('/')
                            && !url.chars().any(char::is_whitespace) => {}
                    _ => {
                        return Err(format!(
                            "planner `{name}`: `url` `{}` is not an http:// or https:// URL",
                            redact(&url, &url)
                        ));
                    }
                }
                ExternalKind::Http {
                    model: text("model")?
                        .ok_or_else(|| format!("planner `{name}` has no `model`"))?,
                    api_key_env: text("api_key_env")?,
                    url,
                }
            }
            other => {
                return Err(format!(
                    "planner `{name}` has kind `{other}`; the kinds are rules, command, claude, codex, http"
                ));
            }
        };
        let timeout = match text("timeout")? {
            Some(value) => {
                let timeout = crate::workflow::duration::parse_duration(&value)
                    .map_err(|error| format!("planner `{name}`: timeout `{value}`: {error}"))?;
                if timeout.is_zero() {
                    return Err(format!(
                        "planner `{name}`: timeout `{value}` would kill every attempt at once; give a positive duration such as `2m`"
                    ));
                }
                timeout
            }
            None => DEFAULT_TIMEOUT,
        };
        let attempts = match node.get("attempts").map(Node::to_json) {
            Some(serde_json::Value::Number(number)) => number
                .as_u64()
                .filter(|count| (1..=10).contains(count))
                .ok_or_else(|| format!("planner `{name}`: attempts must be 1 to 10"))?
                as usize,
            Some(other) => {
                return Err(format!(
                    "planner `{name}`: attempts must be a number, got {other}"
                ));
            }
            None => DEFAULT_ATTEMPTS,
        };
        let mut pass_env = list("pass_env")?;
        if pass_env.is_empty() {
            pass_env = match &kind {
                ExternalKind::Claude { .. } => vec!["ANTHROPIC_API_KEY".into()],
                ExternalKind::Codex { .. } => vec!["CODEX_API_KEY".into(), "OPENAI_API_KEY".into()],
                _ => Vec::new(),
            };
        }
        Ok(Backend::External(External {
            name: name.to_owned(),
            kind,
            timeout,
            attempts,
            pass_env,
            root: config.root.clone(),
        }))
    }

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

/// The decision for a request, through the backend and then the guard, with the record of
/// each attempt of an external backend.
pub fn decide(backend: &Backend, request: &Request<'_>) -> (Verdict, Vec<Attempt>) {
    let Backend::External(external) = backend else {
        let decision = rules::decide(request.envelope);
        let verdict = Verdict::Decided {
            answered: Some(decision.status),
            decision,
            decided_by: "rules".into(),
        };
        return (verdict, Vec::new());
    };
    let mut attempts = Vec::new();
    let mut last_error = String::new();
    let mut wait = None;
    for number in 1..=external.attempts {
        if let Some(wait) = wait.take()
            && !sleep_unless_cancelled(request.cancellation, wait)
        {
            return (Verdict::Interrupted, attempts);
        }
        if request.cancellation.is_cancelled() {
            return (Verdict::Interrupted, attempts);
        }
        let Asked {
            raw,
            answer,
            retry_after,
            stderr,
        } = ask(external, request);
        let raw = bounded(raw);
        let answer = answer.and_then(|decision| within_limits(&decision).map(|()| decision));
        if request.cancellation.is_cancelled() {
            attempts.push(Attempt {
                attempt: number,
                ok: false,
                error: Some("interrupted by the operator".into()),
                raw,
                stderr,
            });
            return (Verdict::Interrupted, attempts);
        }
        wait = retry_after;
        match answer {
            Ok(decision) => {
                attempts.push(Attempt {
                    attempt: number,
                    ok: true,
                    error: None,
                    raw,
                    stderr,
                });
                if let Err(reason) = legal(&decision, request.envelope) {
                    return (Verdict::Illegal { decision, reason }, attempts);
                }
                let answered = Some(decision.status);
                let decision =
                    guard::guard(decision, &guard::Facts::from_envelope(request.envelope));
                let verdict = Verdict::Decided {
                    decision,
                    decided_by: external.name.clone(),
                    answered,
                };
                return (verdict, attempts);
            }
            Err(error) => {
                attempts.push(Attempt {
                    attempt: number,
                    ok: false,
                    error: Some(error.clone()),
                    raw,
                    stderr,
                });
                last_error = error;
            }
        }
    }
    let summary = format!(
        "planner `{}` failed {} time(s); last: {last_error}",
        external.name, external.attempts
    );
    let (decision, decided_by) = failed(summary, request.envelope);
    (
        Verdict::Decided {
            decision,
            decided_by,
            answered: None,
        },
        attempts,
    )
}

/// The kernel's decision when no backend answered: `blocked` with `planner_error`, guarded
/// like any answer (a policy event still makes it `unsafe`).
pub fn failed(summary: String, envelope: &serde_json::Value) -> (Decision, String) {
    let mut decision = Decision::status(Status::Blocked);
    decision.raise(Status::Blocked, "planner_error", summary);
    (
        guard::guard(decision, &guard::Facts::from_envelope(envelope)),
        "kernel".into(),
    )
}

/// Rejects a `next_step` outside the envelope's `allowed_next_steps`.
fn legal(decision: &Decision, envelope: &serde_json::Value) -> Result<(), String> {
    let Some(next) = decision.next_step.as_deref() else {
        return Ok(());
    };
    let allowed: Vec<&str> = envelope["allowed_next_steps"]
        .as_array()
        .map(|steps| steps.iter().filter_map(|step| step.as_str()).collect())
        .unwrap_or_default();
    if allowed.contains(&next) {
        Ok(())
    } else {
        Err(format!(
            "the planner chose next_step `{next}`, which is not in allowed_next_steps [{}]",
            allowed.join(", ")
        ))
    }
}

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

/// The decision in a text: the whole text, or the first fenced JSON block in it (a fence
/// marked `json` in any case, or unmarked), prose around it allowed. Parsed straight into a
/// [`Decision`], so a key given twice is refused rather than the last one winning.
fn parse_decision(text: &str) -> Result<Decision, String> {
    let trimmed = text.trim();
    let body = if trimmed.starts_with('{') {
        trimmed
    } else {
        fenced_block(trimmed).unwrap_or(trimmed)
    };
    serde_json::from_str::<Decision>(body.trim()).map_err(|error| {
        if serde_json::from_str::<serde::de::IgnoredAny>(body.trim()).is_ok() {
            format!("the answer is not a valid decision: {error}")
        } else {
            format!("the answer is not JSON: {error}")
        }
    })
}

/// The body of the first fenced block of `text` marked `json` (any case) or unmarked.
fn fenced_block(text: &str) -> Option<&str> {
    let mut offset = 0;
    let mut opened: Option<usize> = None;
    for line in text.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        let trimmed = line.trim();
        match opened {
            None => {
                if let Some(info) = trimmed.strip_prefix("```")
                    && (info.is_empty() || info.eq_ignore_ascii_case("json"))
                {
                    opened = Some(offset);
                }
            }
            Some(body_start) => {
                if trimmed == "```" {
                    return Some(&text[body_start..start]);
                }
            }
        }
    }
    None
}

/// The most of each part of a decision accepted: more is refused as a failed attempt, so one
/// answer cannot fill events, manifests and the next envelope.
pub mod limits {
    /// Risk flags in one decision.
    pub const RISK_FLAGS: usize = 32;
    /// Characters of one risk flag or blocker code.
    pub const NAME_CHARS: usize = 100;
    /// Blockers in one decision.
    pub const BLOCKERS: usize = 32;
    /// Characters of a blocker's summary or evidence reference.
    pub const SUMMARY_CHARS: usize = 2000;
    /// Bytes of `fix_instructions` as JSON.
    pub const FIX_INSTRUCTIONS_BYTES: usize = 16 * 1024;
    /// Characters of `next_step`.
    pub const NEXT_STEP_CHARS: usize = 200;
}

/// Refuses a decision past [`limits`], saying which part and the limit.
fn within_limits(decision: &Decision) -> Result<(), String> {
    let too_long = |what: &str, text: &str, limit: usize| {
        let count = text.chars().count();
        if count > limit {
            Err(format!(
                "the decision is too large: {what} has {count} characters (at most {limit})"
            ))
        } else {
            Ok(())
        }
    };
    if decision.risk_flags.len() > limits::RISK_FLAGS {
        return Err(format!(
            "the decision is too large: {} risk_flags (at most {})",
            decision.risk_flags.len(),
            limits::RISK_FLAGS
        ));
    }
    if decision.blockers.len() > limits::BLOCKERS {
        return Err(format!(
            "the decision is too large: {} blockers (at most {})",
            decision.blockers.len(),
            limits::BLOCKERS
        ));
    }
    for flag in &decision.risk_flags {
        too_long("a risk flag", flag, limits::NAME_CHARS)?;
    }
    for blocker in &decision.blockers {
        too_long("a blocker code", &blocker.code, limits::NAME_CHARS)?;
        too_long("a blocker summary", &blocker.summary, limits::SUMMARY_CHARS)?;
        if let Some(reference) = &blocker.evidence_ref {
            too_long("a blocker evidence_ref", reference, limits::SUMMARY_CHARS)?;
        }
        if let Some(severity) = &blocker.severity {
            too_long("a blocker severity", severity, limits::NAME_CHARS)?;
        }
    }
    if let Some(next) = &decision.next_step {
        too_long("next_step", next, limits::NEXT_STEP_CHARS)?;
    }
    if let Some(fix) = &decision.fix_instructions {
        let bytes = serde_json::to_vec(fix).map_or(0, |text| text.len());
        if bytes > limits::FIX_INSTRUCTIONS_BYTES {
            return Err(format!(
                "the decision is too large: fix_instructions is {bytes} bytes of JSON (at most {})",
                limits::FIX_INSTRUCTIONS_BYTES
            ));
        }
    }
    Ok(())
}

fn decision_from(value: serde_json::Value) -> Result<Decision, String> {
    serde_json::from_value::<Decision>(value)
        .map_err(|error| format!("the answer is not a valid decision: {error}"))
}

/// What one attempt gave.
struct Asked {
    /// The raw answer (unbounded here).
    raw: String,
    /// The decision in it, or why there is none.
    answer: Result<Decision, String>,
    /// How long to wait before the next attempt, when the backend asked for a pause (HTTP 429).
    retry_after: Option<Duration>,
    /// The end of the planner process's stderr (see [`Attempt::stderr`]).
    stderr: Option<String>,
}

/// One attempt: the raw answer, the decision in it, the wait the backend asked for, and what
/// a planner process wrote on stderr.
fn ask(external: &External, request: &Request<'_>) -> Asked {
    let (raw, answer, stderr) = match &external.kind {
        ExternalKind::Command { argv } => {
            let input = serde_json::to_vec(request.envelope).unwrap_or_default();
            match run_process(external, request, &argv[0], &argv[1..], input, None) {
                Ok(run) => {
                    let answer = match (&run.failure, &run.not_utf8) {
                        (Some(failure), _) => Err(failure.clone()),
                        (None, Some(not_utf8)) => Err(not_utf8.clone()),
                        (None, None) => parse_decision(&run.stdout),
                    };
                    (run.stdout, answer, run.stderr)
                }
                Err(error) => (String::new(), Err(error), None),
            }
        }
        ExternalKind::Claude { binary, model } => ask_claude(external, request, binary, model),
        ExternalKind::Codex {
            binary,
            model,
            config,
        } => ask_codex(external, request, binary, model, config),
        ExternalKind::Http {
            url,
            model,
            api_key_env,
        } => {
            let (raw, answer, retry_after) =
                ask_http(external, request, url, model, api_key_env.as_deref());
            return Asked {
                raw,
                answer,
                retry_after,
                stderr: None,
            };
        }
    };
    Asked {
        raw,
        answer,
        retry_after: None,
        stderr,
    }
}

/// The instruction model backends get after the rendered prompt.
fn model_prompt(request: &Request<'_>) -> String {
    let envelope = serde_json::to_string_pretty(request.envelope).unwrap_or_default();
    format!(
        "{}\n\n## Evidence envelope\n\n```json\n{envelope}\n```\n\nAnswer with one JSON object that conforms to the planner decision schema: `status` (success, partial, blocked, unsafe or needs_human), `next_step` (one of allowed_next_steps, or null), `fix_instructions` (null, or {{objective, constraints: [strings], edits: [{{target, action, rationale}}], verification: [{{command, expected_signal}}]}} with `objective` required), `blockers` (list of {{code, summary}}), `risk_flags` (list of strings). Do not edit any file.\n",
        request.prompt.trim_end()
    )
}

/// What the CLIs are given as their structured-output schema (see `answer_schema`).
fn schema_text() -> String {
    super::answer_schema::answer_schema_text()
}

fn ask_claude(
    external: &External,
    request: &Request<'_>,
    binary: &Option<String>,
    model: &Option<String>,
) -> (String, Result<Decision, String>, Option<String>) {
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
    let input = model_prompt(request).into_bytes();
    let run = match run_process(external, request, &program, &args, input, None) {
        Ok(run) => run,
        Err(error) => return (String::new(), Err(error), None),
    };
    // A failed Claude still prints its result object, which says why (`is_error`).
    let answer = match (&run.failure, &run.not_utf8) {
        (Some(failure), _) => Err(match claude_decision(&run.stdout) {
            Err(reason) => format!("{failure}; {reason}"),
            Ok(_) => failure.clone(),
        }),
        (None, Some(not_utf8)) => Err(not_utf8.clone()),
        (None, None) => claude_decision(&run.stdout),
    };
    (run.stdout, answer, run.stderr)
}

/// The decision in Claude's `result` object: `structured_output`, else a JSON `result` text.
fn claude_decision(stdout: &str) -> Result<Decision, String> {
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
        .ok_or_else(|| "claude printed no result object".to_owned())?;
    if result["is_error"] == true {
        return Err(format!(
            "claude reported an error ({}): {}",
            result["subtype"].as_str().unwrap_or("unknown"),
            result["result"].as_str().unwrap_or_default()
        ));
    }
    match result.get("structured_output") {
        Some(value) if !value.is_null() => decision_from(value.clone()),
        _ => parse_decision(result["result"].as_str().unwrap_or_default()).map_err(|error| {
            format!(
                "claude returned no structured_output, and its result text is no decision ({error})"
            )
        }),
    }
}

fn ask_codex(
    external: &External,
    request: &Request<'_>,
    binary: &Option<String>,
    model: &Option<String>,
    config: &[(String, String)],
) -> (String, Result<Decision, String>, Option<String>) {
    let folder = match tempfile::tempdir() {
        Ok(folder) => folder,
        Err(error) => return (String::new(), Err(error.to_string()), None),
    };
    let schema = folder.path().join("decision.schema.json");
    let answer_file = folder.path().join("decision.json");
    if let Err(error) = std::fs::write(&schema, schema_text()) {
        return (String::new(), Err(error.to_string()), None);
    }
    let program = cli_binary("TNH_CODEX_BIN", binary, "codex");
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
    let input = model_prompt(request).into_bytes();
    let run = match run_process(external, request, &program, &args, input, Some(&folder)) {
        Ok(run) => run,
        Err(error) => return (String::new(), Err(error), None),
    };
    let stderr = run.stderr;
    // Why codex failed is in its `--json` events on stdout (`turn.failed`, `error`), not in
    // the banner it prints on stderr.
    if let Some(failure) = run.failure {
        let failure = match codex_failure(&run.stdout) {
            Some(reason) => format!("{failure}; {reason}"),
            None => failure,
        };
        return (run.stdout, Err(failure), stderr);
    }
    let (raw, answer) = match read_capped(&answer_file) {
        Ok((text, not_utf8)) => {
            let answer = match not_utf8 {
                Some(error) => Err(format!("codex's -o file: {error}")),
                None => parse_decision(&text),
            };
            (text, answer)
        }
        Err(ReadError::TooLarge) => (
            String::new(),
            Err(format!(
                "codex's -o file holds more than {OUTPUT_LIMIT} bytes: the answer is refused"
            )),
        ),
        Err(ReadError::Refused(why)) => (
            run.stdout,
            Err(format!(
                "codex's -o file `{}` was not read: {why}; only a regular file is an answer",
                answer_file.display()
            )),
        ),
        Err(ReadError::Missing) => (
            run.stdout.clone(),
            Err(match codex_failure(&run.stdout) {
                Some(reason) => format!("codex wrote no final message to its -o file; {reason}"),
                None => "codex wrote no final message to its -o file".into(),
            }),
        ),
    };
    (raw, answer, stderr)
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

/// Why a bounded read gave nothing.
#[derive(Debug)]
enum ReadError {
    /// The file is absent.
    Missing,
    /// The file holds more than [`OUTPUT_LIMIT`] bytes.
    TooLarge,
    /// Something else than a regular file holds the name (a FIFO, a symbolic link, a
    /// folder, a device), or it could not be read: why.
    Refused(String),
}

/// Reads at most [`OUTPUT_LIMIT`] bytes of a file the planner process could replace (its
/// `-o` file, the folder of its captures), decoded lossily, with the reason when it is not
/// UTF-8. Only a regular file is read, opened with `O_NOFOLLOW|O_NONBLOCK`
/// ([`safe_files::open_regular`](crate::artifacts::safe_files::open_regular)): a FIFO without
/// a writer would block a plain `open` forever, out of reach of the planner's timeout and of
/// the operator's Ctrl-C, and a link could lead anywhere (`/dev/zero`, a secret).
fn read_capped(path: &std::path::Path) -> Result<(String, Option<String>), ReadError> {
    let refused = |error: std::io::Error| match error.kind() {
        std::io::ErrorKind::NotFound => ReadError::Missing,
        _ => ReadError::Refused(error.to_string()),
    };
    let file = crate::artifacts::safe_files::open_regular(path).map_err(refused)?;
    let (bytes, more) =
        crate::artifacts::safe_files::read_bounded(file, OUTPUT_LIMIT).map_err(refused)?;
    if more {
        return Err(ReadError::TooLarge);
    }
    Ok(decode(bytes))
}

/// The end of a planner process's captured stderr, for its attempt record: at most
/// [`STDERR_LIMIT`] bytes, decoded lossily, after a line saying how many bytes were cut when it
/// wrote more; `None` when it wrote nothing. Like the stdout beside it, the capture is read only
/// as a regular file (the planner knows the folder and could put a FIFO or a link there): what
/// was found instead is said.
fn stderr_tail(path: &std::path::Path) -> Option<String> {
    use std::io::{Seek, SeekFrom};
    let file = match crate::artifacts::safe_files::open_regular(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return None,
        Err(error) => return Some(format!("[the captured stderr was not read: {error}]")),
    };
    let length = file.metadata().map_or(0, |metadata| metadata.len());
    if length == 0 {
        return None;
    }
    let cut = length.saturating_sub(STDERR_LIMIT);
    let mut file = file;
    let read = file
        .seek(SeekFrom::Start(cut))
        .and_then(|_| crate::artifacts::safe_files::read_bounded(file, STDERR_LIMIT));
    let mut bytes = match read {
        Ok((bytes, _)) => bytes,
        Err(error) => return Some(format!("[the captured stderr was not read: {error}]")),
    };
    if cut == 0 {
        return Some(String::from_utf8_lossy(&bytes).into_owned());
    }
    // The cut may fall inside a character: its remaining bytes go with the cut part.
    let partial = bytes
        .iter()
        .take(3)
        .take_while(|byte| **byte & 0xC0 == 0x80)
        .count();
    bytes.drain(..partial);
    let cut = cut + partial as u64;
    Some(format!(
        "[the first {cut} of {length} bytes of stderr are cut; the last {} follow]\n{}",
        bytes.len(),
        String::from_utf8_lossy(&bytes)
    ))
}

/// Text from bytes: kept lossily when not UTF-8, with a message saying so.
fn decode(bytes: Vec<u8>) -> (String, Option<String>) {
    match String::from_utf8(bytes) {
        Ok(text) => (text, None),
        Err(error) => {
            let at = error.utf8_error().valid_up_to();
            let text = String::from_utf8_lossy(error.as_bytes()).into_owned();
            (
                text,
                Some(format!(
                    "the answer is not UTF-8 (invalid byte at offset {at}); it is kept with U+FFFD in place of the invalid bytes"
                )),
            )
        }
    }
}

fn ask_http(
    external: &External,
    request: &Request<'_>,
    url: &str,
    model: &str,
    api_key_env: Option<&str>,
) -> (String, Result<Decision, String>, Option<Duration>) {
    let body = serde_json::json!({
        "model": model,
        "temperature": 0,
        "messages": [
            { "role": "system", "content": "You are the planner of tnh-conductor. You judge the evidence of an AI coding run and answer with one JSON planner decision." },
            { "role": "user", "content": model_prompt(request) },
        ],
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "planner_decision",
                "strict": true,
                "schema": super::answer_schema::answer_schema(),
            },
        },
    });
    let host = crate::runner::HostEnv::from_process();
    let key = api_key_env
        .and_then(|name| host.get(name))
        .map(str::to_owned);
    let timeout = external.timeout;
    let target = url.to_owned();
    // The call runs on its own thread so that Ctrl-C can stop the wait: an abandoned call
    // ends by itself within the planner's timeout, and its answer is dropped.
    let exchange = move || post(&target, timeout, key.as_deref(), body.to_string());
    let Some(exchange) = unless_cancelled(request.cancellation, exchange) else {
        return (
            String::new(),
            Err("interrupted by the operator".into()),
            None,
        );
    };
    let Exchange {
        status,
        text,
        unread,
        retry_after,
        location,
    } = match exchange {
        Ok(exchange) => exchange,
        Err(error) => {
            let message = redact(&format!("POST {url}: {error}"), url);
            return (String::new(), Err(message), None);
        }
    };
    let text = redact(&text, url);
    // What is wrong with the body as read (cut, not UTF-8): said with any other failure, and a
    // failure by itself when the answer is otherwise good.
    let unread = unread.map(|problem| redact(&problem, url));
    let and_unread = |error: String| match &unread {
        Some(problem) => format!("{error}; {problem}"),
        None => error,
    };
    // Redirects are not followed: a 302 would become a GET without the envelope, and what
    // another URL answers would be taken as the judgement of this evidence.
    if status.is_redirection() {
        let target = match location {
            Some(location) => format!(" to `{}`", redact(&redact(&location, &location), url)),
            None => " without a Location".to_owned(),
        };
        return (
            text,
            Err(and_unread(format!(
                "the server answered HTTP {status}, a redirect{target}, which a planner does not follow; set the planner's `url` to the endpoint itself"
            ))),
            None,
        );
    }
    if !status.is_success() {
        let head: String = text.chars().take(200).collect();
        let wait = (status.as_u16() == 429).then(|| {
            retry_after
                .unwrap_or(RETRY_AFTER_DEFAULT)
                .min(RETRY_AFTER_MAX)
        });
        let error = match wait {
            Some(wait) => format!(
                "the server answered HTTP {status} (it asks to wait {} s before retrying): {head}",
                wait.as_secs_f64()
            ),
            None => format!("the server answered HTTP {status}: {head}"),
        };
        return (text, Err(and_unread(error)), wait);
    }
    if let Some(problem) = unread {
        return (text, Err(problem), None);
    }
    let answer = serde_json::from_str::<serde_json::Value>(&text)
        .map_err(|error| format!("the response is not JSON: {error}"))
        .and_then(|response| {
            let message = &response["choices"][0]["message"];
            if let Some(refusal) = message["refusal"].as_str() {
                return Err(format!("the model refused: {refusal}"));
            }
            message["content"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| "the response has no choices[0].message.content".to_owned())
        })
        .and_then(|content| parse_decision(&content));
    (text, answer, None)
}

/// What an HTTP server answered.
struct Exchange {
    status: ureq::http::StatusCode,
    /// The body as read (at most [`BODY_LIMIT`] bytes), decoded lossily.
    text: String,
    /// Why `text` is not the whole answer as sent, when it is not: cut at the limit, cut by a
    /// failed read (a timeout, a reset), not UTF-8.
    unread: Option<String>,
    retry_after: Option<Duration>,
    /// The `Location` of a redirect.
    location: Option<String>,
}

/// One POST with a global timeout, reading at most [`BODY_LIMIT`] of the answer; a redirect
/// is returned as it is, never followed.
fn post(url: &str, timeout: Duration, key: Option<&str>, body: String) -> Result<Exchange, String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let mut call = agent.post(url).header("Content-Type", "application/json");
    if let Some(key) = key {
        call = call.header("Authorization", &format!("Bearer {key}"));
    }
    let mut response = call.send(body).map_err(|error| error.to_string())?;
    let status = response.status();
    // `Retry-After: SECONDS` (an HTTP date is not honoured: the default pause applies).
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let location = response.headers().get("location").map(|value| {
        String::from_utf8_lossy(value.as_bytes())
            .chars()
            .take(500)
            .collect()
    });
    let (bytes, cut) = read_body(response.body_mut().as_reader());
    let (text, not_utf8) = decode_body(bytes, cut.is_some());
    let unread = match (cut, not_utf8) {
        (Some(cut), Some(not_utf8)) => Some(format!("{cut}; {not_utf8}")),
        (cut, not_utf8) => cut.or(not_utf8),
    };
    Ok(Exchange {
        status,
        text,
        unread,
        retry_after,
        location,
    })
}

/// At most [`BODY_LIMIT`] bytes of an answer's body, what was read kept whatever happens,
/// with why the read stopped short when it did (the limit, a timeout, a reset).
fn read_body(mut reader: impl std::io::Read) -> (Vec<u8>, Option<String>) {
    let mut bytes = Vec::new();
    let mut chunk = vec![0_u8; 64 * 1024];
    loop {
        match reader.read(&mut chunk) {
            Ok(0) => return (bytes, None),
            Ok(count) => {
                bytes.extend_from_slice(&chunk[..count]);
                if bytes.len() as u64 > BODY_LIMIT {
                    bytes.truncate(BODY_LIMIT as usize);
                    return (
                        bytes,
                        Some(format!(
                            "the answer is larger than {BODY_LIMIT} bytes: its first {BODY_LIMIT} bytes were read and the rest dropped, so it is refused"
                        )),
                    );
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => {
                let read = bytes.len();
                return (
                    bytes,
                    Some(format!(
                        "reading the answer failed after {read} bytes ({error}): the answer is cut there, so it is refused"
                    )),
                );
            }
        }
    }
}

/// The text of a body, kept lossily when not UTF-8 with a message saying so (as [`decode`]);
/// a body `cut` inside a character is not called "not UTF-8" for that last, partial one.
fn decode_body(bytes: Vec<u8>, cut: bool) -> (String, Option<String>) {
    match std::str::from_utf8(&bytes) {
        Err(error) if cut && error.error_len().is_none() => {
            (String::from_utf8_lossy(&bytes).into_owned(), None)
        }
        _ => decode(bytes),
    }
}

/// `text` with the credentials of `url` (its user information and the values of its query)
/// replaced by `***`, so that no message recorded in the run directory holds them: the URL
/// itself is written redacted, and a credential of 4 characters or more quoted elsewhere in
/// the text is masked too.
pub fn redact(text: &str, url: &str) -> String {
    let (scheme, rest) = url
        .split_once("://")
        .map_or(("", url), |(scheme, rest)| (scheme, rest));
    let (rest, fragment) = rest
        .split_once('#')
        .map_or((rest, None), |(rest, fragment)| (rest, Some(fragment)));
    let (rest, query) = rest
        .split_once('?')
        .map_or((rest, None), |(rest, query)| (rest, Some(query)));
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let mut secrets: Vec<&str> = Vec::new();
    let host = match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            secrets.push(userinfo);
            secrets.extend(userinfo.split(':'));
            format!("***@{host}")
        }
        None => authority.to_owned(),
    };
    let mut redacted = if scheme.is_empty() {
        format!("{host}{path}")
    } else {
        format!("{scheme}://{host}{path}")
    };
    if let Some(query) = query {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, value)) => {
                    secrets.push(value);
                    format!("{name}=***")
                }
                None => pair.to_owned(),
            })
            .collect();
        redacted.push('?');
        redacted.push_str(&pairs.join("&"));
    }
    if let Some(fragment) = fragment {
        redacted.push('#');
        redacted.push_str(fragment);
    }
    let mut text = text.replace(url, &redacted);
    secrets.retain(|secret| secret.chars().count() >= 4);
    // Longest first, so that a whole user information goes before its parts.
    secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    for secret in secrets {
        text = text.replace(secret, "***");
    }
    text
}

/// Runs `work` on a thread of its own and waits for it, unless the run is cancelled first
/// (then `None`, and the thread's result is dropped when it ends).
fn unless_cancelled<T: Send + 'static>(
    cancellation: &crate::runner::Cancellation,
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    if cancellation.is_cancelled() {
        return None;
    }
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Some(work());
    };
    let (sender, receiver) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("tnh-planner-call".into())
        .spawn(move || {
            let _ = sender.send(work());
        });
    if spawned.is_err() {
        return None;
    }
    let cancelled = cancelled(cancellation.clone());
    runtime.block_on(async move {
        tokio::select! {
            result = receiver => result.ok(),
            () = cancelled => None,
        }
    })
}

/// Sleeps `wait` unless the run is cancelled first; `false` when it was.
fn sleep_unless_cancelled(cancellation: &crate::runner::Cancellation, wait: Duration) -> bool {
    if cancellation.is_cancelled() {
        return false;
    }
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return true;
    };
    let cancelled = cancelled(cancellation.clone());
    runtime.block_on(async move {
        tokio::select! {
            () = tokio::time::sleep(wait) => true,
            () = cancelled => false,
        }
    })
}

/// Resolves once cancellation has been requested; never for a cancellation that cannot fire.
async fn cancelled(mut cancellation: crate::runner::Cancellation) {
    if cancellation.is_cancelled() {
        return;
    }
    if cancellation.next_request().await.is_some() {
        return;
    }
    std::future::pending::<()>().await;
}

/// The binary for a CLI planner: the `TNH_*_BIN` override, the profile's, the default.
fn cli_binary(variable: &str, binary: &Option<String>, default: &str) -> String {
    std::env::var(variable)
        .ok()
        .filter(|value| !value.is_empty())
        .or_else(|| binary.clone())
        .unwrap_or_else(|| default.to_owned())
}

/// The `TNH_*` variables of a planner process: the host's (test scenarios, binary overrides),
/// then the run's, which win.
fn tnh_variables(request: &Request<'_>) -> std::collections::BTreeMap<String, String> {
    let mut variables: std::collections::BTreeMap<String, String> = std::env::vars()
        .filter(|(name, _)| name.starts_with("TNH_"))
        .collect();
    if let Some(run) = request.run_variables {
        variables.extend(
            run.iter()
                .map(|(name, value)| (name.clone(), value.clone())),
        );
    }
    variables
}

/// What a planner process left.
struct Finished {
    /// Its standard output, at most [`OUTPUT_LIMIT`] bytes decoded lossily (kept as the
    /// attempt's raw answer whatever happened).
    stdout: String,
    /// Set when stdout is not UTF-8, saying so.
    not_utf8: Option<String>,
    /// Why it did not exit cleanly (timeout, non-zero exit), with its last stderr line.
    failure: Option<String>,
    /// The end of what it wrote on stderr (see [`stderr_tail`]).
    stderr: Option<String>,
}

/// Runs a planner process once under the supervisor (own process group, timeout, stdin
/// closed after the input); anything but a clean exit is a `failure` naming the cause, beside
/// the output (an error only when the process could not run at all).
fn run_process(
    external: &External,
    request: &Request<'_>,
    program: &str,
    args: &[String],
    input: Vec<u8>,
    folder: Option<&tempfile::TempDir>,
) -> Result<Finished, String> {
    let own;
    let folder = match folder {
        Some(folder) => folder,
        None => {
            own = tempfile::tempdir().map_err(|error| error.to_string())?;
            &own
        }
    };
    let cwd: PathBuf = match request.cwd {
        Some(cwd) => cwd.to_path_buf(),
        None => std::env::current_dir().map_err(|error| error.to_string())?,
    };
    // A relative program path is the repository's, not the worktree's (where the planner runs).
    let written = program;
    let root = external.root.as_deref();
    let program = &crate::runner::adapters::resolve_program(written, root);
    let limits = crate::runner::Limits {
        timeout: external.timeout,
        idle_timeout: None,
        max_stdout_bytes: Some(OUTPUT_LIMIT),
        ..Default::default()
    };
    let host = crate::runner::HostEnv::from_process();
    let spec = crate::runner::ProcessSpec {
        kind: crate::runner::ProcessKind::Planner,
        agent: "planner".into(),
        program: program.to_owned(),
        args: args.to_vec(),
        cwd,
        env: crate::runner::env::agent_environment(
            &host,
            &external.pass_env,
            &tnh_variables(request),
        ),
        stdin: input,
        stdout_path: folder.path().join("stdout"),
        stderr_path: folder.path().join("stderr"),
        format: crate::runner::CaptureFormat::Text,
        limits,
        remaining_budget_usd: None,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| error.to_string())?;
    // Inside a run, the planner's group is recorded in the EVALUATE visit's folder while it
    // runs, like an agent's: `resume` ends it if this process dies meanwhile, members that
    // cleared their environment included.
    let record = request
        .run_variables
        .and_then(|run| run.get("TNH_STEP_DIR"))
        .filter(|dir| !dir.is_empty())
        .map(|dir| std::path::Path::new(dir).join(crate::runner::PROCESS_GROUP_FILE));
    let supervised = runtime
        .block_on(crate::runner::supervise_recorded(
            spec,
            request.cancellation.clone(),
            record.as_deref(),
        ))
        .map_err(|error| {
            let error = crate::runner::adapters::resolved_from(error, written, root);
            format!("`{written}` could not run: {error}")
        })?;
    // The supervisor kept at most OUTPUT_LIMIT bytes (and stopped the planner past them). The
    // planner knows the folder (its `-o` path is in it) and can put a FIFO or a link in place
    // of the capture: then its output is unknown, and the attempt failed.
    let stdout_path = folder.path().join("stdout");
    let (stdout, not_utf8, replaced) = match read_capped(&stdout_path) {
        Ok((stdout, not_utf8)) => (stdout, not_utf8, None),
        Err(ReadError::Refused(why)) => (
            String::new(),
            None,
            Some(format!(
                "`{program}`'s captured stdout `{}` was not read: {why}",
                stdout_path.display()
            )),
        ),
        Err(ReadError::Missing) => (
            String::new(),
            None,
            Some(format!(
                "`{program}`'s captured stdout `{}` was removed",
                stdout_path.display()
            )),
        ),
        Err(ReadError::TooLarge) => (
            String::new(),
            None,
            Some(format!(
                "`{program}`'s captured stdout `{}` holds more than {OUTPUT_LIMIT} bytes",
                stdout_path.display()
            )),
        ),
    };
    // Kept before the capture folder goes: why a planner failed is often only there.
    let stderr = stderr_tail(&folder.path().join("stderr"));
    let failure = (supervised.outcome != crate::outcome::Outcome::Completed).then(|| {
        let tail = supervised
            .tail
            .iter()
            .rev()
            .find(|line| {
                line.stream == crate::runner::Stream::Stderr && !line.text.trim().is_empty()
            })
            .map(|line| line.text.clone())
            .unwrap_or_default();
        format!(
            "`{program}` ended {}: {}{}",
            supervised.outcome,
            supervised.cause,
            if tail.is_empty() {
                String::new()
            } else {
                format!(" ({tail})")
            }
        )
    });
    Ok(Finished {
        stdout,
        not_utf8,
        stderr,
        failure: match (failure, replaced) {
            (Some(failure), Some(replaced)) => Some(format!("{failure}; {replaced}")),
            (failure, replaced) => failure.or(replaced),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
                .contains("no structured_output")
        );
        let failed =
            r#"{"type":"result","subtype":"success","is_error":true,"result":"Not logged in"}"#;
        assert!(
            claude_decision(failed)
                .unwrap_err()
                .contains("Not logged in")
        );
    }

    #[test]
    fn a_fenced_block_is_found_after_prose_and_in_any_case() {
        for text in [
            "Here is my decision:\n```json\n{\"status\": \"partial\"}\n```\nThanks.",
            "```JSON\n{\"status\": \"partial\"}\n```",
            "Decision:\n```\n{\"status\": \"partial\"}\n```",
            "  {\"status\": \"partial\"}  ",
        ] {
            assert_eq!(
                parse_decision(text).unwrap().status,
                Status::Partial,
                "{text}"
            );
        }
        assert!(parse_decision("```python\nprint(1)\n```").is_err());
    }

    #[test]
    fn a_decision_with_a_key_given_twice_is_refused() {
        let error = parse_decision(r#"{"status": "unsafe", "status": "success"}"#).unwrap_err();
        assert!(error.contains("duplicate field `status`"), "{error}");
        assert!(error.contains("not a valid decision"), "{error}");
        let error = parse_decision("not json").unwrap_err();
        assert!(error.contains("not JSON"), "{error}");
    }

    #[test]
    fn credentials_of_a_url_are_redacted_from_messages() {
        let url = "https://alice:pw-1@api.example.com/v1/chat?api_key=key-2&mode=x#frag";
        let message = redact(&format!("POST {url}: refused (pw-1, key-2)"), url);
        assert_eq!(
            message,
            "POST https://***@api.example.com/v1/chat?api_key=***&mode=***#frag: refused (***, ***)"
        );
        assert_eq!(redact("plain", "http://127.0.0.1:1/v1"), "plain");
    }

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
    fn a_decision_past_the_limits_is_refused() {
        let mut decision = Decision::status(Status::Partial);
        assert!(within_limits(&decision).is_ok());
        decision.risk_flags = vec!["flag".into(); limits::RISK_FLAGS + 1];
        assert!(within_limits(&decision).unwrap_err().contains("risk_flags"));
        decision.risk_flags = vec!["x".repeat(limits::NAME_CHARS + 1)];
        assert!(
            within_limits(&decision)
                .unwrap_err()
                .contains("a risk flag")
        );
        decision.risk_flags.clear();
        decision.fix_instructions = Some(crate::planner::FixInstructions {
            objective: "x".repeat(20_000),
            constraints: Vec::new(),
            edits: Vec::new(),
            verification: Vec::new(),
        });
        assert!(
            within_limits(&decision)
                .unwrap_err()
                .contains("fix_instructions")
        );
    }
}
