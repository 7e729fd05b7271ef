//! Planner backends: `rules` (in process) and `command` (the envelope on stdin, a decision
//! JSON on stdout, supervised like any process). A backend that fails or answers something
//! that is not a valid decision is retried once, then the kernel decides `blocked` with the
//! blocker `planner_error`.

use std::time::Duration;

use super::{Decision, Status, guard, rules};
use crate::config::Config;

/// How long a command planner may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(300);

/// Tries before giving up.
const ATTEMPTS: usize = 2;

/// A planner backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// The deterministic OA06 derivation.
    Rules,
    /// Any program: envelope on stdin, decision on stdout.
    Command {
        /// The profile name.
        name: String,
        /// argv.
        argv: Vec<String>,
    },
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
        match node
            .get("kind")
            .and_then(|kind| kind.as_str())
            .unwrap_or("rules")
        {
            "rules" => Ok(Backend::Rules),
            "command" => {
                let argv: Vec<String> = node
                    .get("argv")
                    .and_then(|argv| argv.as_seq())
                    .map(|items| {
                        items
                            .iter()
                            .filter_map(|item| item.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                if argv.is_empty() {
                    return Err(format!("planner `{name}` has no `argv`"));
                }
                Ok(Backend::Command {
                    name: name.to_owned(),
                    argv,
                })
            }
            other => Err(format!(
                "planner kind `{other}` of `{name}` is not available in this release (rules, command)"
            )),
        }
    }

    /// A name for records.
    pub fn name(&self) -> &str {
        match self {
            Backend::Rules => "rules",
            Backend::Command { name, .. } => name,
        }
    }
}

/// The decision for an envelope, through the backend and then the guard; `decided_by` says
/// whether the backend or the kernel (after the backend failed) decided.
pub fn decide(backend: &Backend, envelope: &serde_json::Value) -> (Decision, String) {
    let Backend::Command { argv, .. } = backend else {
        return (rules::decide(envelope), "rules".into());
    };
    let mut answer = Err(String::new());
    for _ in 0..ATTEMPTS {
        answer = ask_command(argv, envelope).and_then(|decision| legal(decision, envelope));
        if answer.is_ok() {
            break;
        }
    }
    match answer {
        Ok(decision) => (
            guard::guard(decision, &guard::Facts::from_envelope(envelope)),
            backend.name().to_owned(),
        ),
        Err(reason) => failed(
            format!("planner `{}` failed: {reason}", backend.name()),
            envelope,
        ),
    }
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

/// Rejects a `next_step` outside the envelope's `allowed_next_steps` (OA06 §6).
fn legal(decision: Decision, envelope: &serde_json::Value) -> Result<Decision, String> {
    let Some(next) = decision.next_step.as_deref() else {
        return Ok(decision);
    };
    let allowed = envelope["allowed_next_steps"]
        .as_array()
        .is_some_and(|steps| steps.iter().any(|step| step == next));
    if allowed {
        Ok(decision)
    } else {
        Err(format!("next_step `{next}` is not in allowed_next_steps"))
    }
}

/// Runs a command planner once.
fn ask_command(argv: &[String], envelope: &serde_json::Value) -> Result<Decision, String> {
    let input = serde_json::to_vec(envelope).map_err(|error| error.to_string())?;
    let folder = tempfile::tempdir().map_err(|error| error.to_string())?;
    let limits = crate::runner::Limits {
        timeout: COMMAND_TIMEOUT,
        idle_timeout: None,
        ..Default::default()
    };
    let spec = crate::runner::ProcessSpec {
        agent: "planner".into(),
        program: argv[0].clone(),
        args: argv[1..].to_vec(),
        cwd: std::env::current_dir().map_err(|error| error.to_string())?,
        env: crate::runner::validator_environment(
            &crate::runner::HostEnv::from_process(),
            &[],
            &Default::default(),
        )
        .0,
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
    let supervised = runtime
        .block_on(crate::runner::supervise(
            spec,
            crate::runner::Cancellation::never(),
        ))
        .map_err(|error| error.to_string())?;
    if supervised.outcome != crate::outcome::Outcome::Completed {
        return Err(format!(
            "the planner ended {}: {}",
            supervised.outcome, supervised.cause
        ));
    }
    let stdout =
        std::fs::read_to_string(folder.path().join("stdout")).map_err(|error| error.to_string())?;
    serde_json::from_str::<Decision>(stdout.trim())
        .map_err(|error| format!("the answer is not a valid decision: {error}"))
}
