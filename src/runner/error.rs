//! The runner's error type: what could not be done before or around supervising a process.
//!
//! An agent that runs and fails is not an error here — it is an outcome (`error`,
//! `killed_*`) with a cause. These errors mean the step could not be run or recorded at all.

use std::path::PathBuf;

use super::supervisor::ProcessKind;

/// Running or recording a step failed.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// The program of an agent, validator or planner could not be started.
    #[error("failed to spawn {} `{name}`: `{program}` {reason}", kind.name())]
    Spawn {
        /// What the process is.
        kind: super::supervisor::ProcessKind,
        /// The profile name (`claude-code`, `scripted`), validator id or planner name.
        name: String,
        /// The program that was looked up.
        program: String,
        /// Why, as a lowercase fragment (`not found on PATH`).
        reason: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Reading or writing a step file failed.
    #[error("failed to {action} `{path}`: {source}")]
    Io {
        /// What was being done (`create`, `write`, `read`).
        action: &'static str,
        /// The file concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The step folder no longer leads where it did when the agent started: the agent put a
    /// link to somewhere else in its place (or in the place of a folder above it).
    #[error(
        "the step folder `{path}` was replaced while the agent ran (it now leads to `{now}`); no evidence is written through it"
    )]
    FolderReplaced {
        /// The step folder.
        path: PathBuf,
        /// Where it leads now (or why that cannot be known).
        now: String,
    },
    /// An agent profile is unusable.
    #[error("invalid agent profile `{agent}`: {message}")]
    Profile {
        /// The profile name.
        agent: String,
        /// What is wrong with it.
        message: String,
    },
    /// No profile of that name is configured or built in.
    #[error("unknown agent `{agent}`")]
    UnknownAgent {
        /// The name asked for.
        agent: String,
        /// The names that exist.
        known: Vec<String>,
    },
    /// Writing the runner metadata failed.
    #[error("failed to serialize runner metadata: {0}")]
    Json(#[from] serde_json::Error),
}

impl RunnerError {
    /// A line telling the operator what to do.
    pub fn hint(&self) -> Option<String> {
        match self {
            // The program was found; what it was given cannot be passed to a process.
            RunnerError::Spawn { kind, source, .. }
                if source.kind() == std::io::ErrorKind::InvalidInput =>
            {
                Some(format!(
                    "an argument, environment value or path of the {} contains a NUL byte (or is otherwise not something a process can receive): remove it where it is written (.tnh/config.yaml, the workflow, or the value a script computed)",
                    kind.name()
                ))
            }
            // A relative path, resolved, that does not exist: the resolved path is in the
            // message, and what it was resolved against.
            RunnerError::Spawn {
                kind: ProcessKind::Agent | ProcessKind::Planner,
                program,
                source,
                reason,
                ..
            } if source.kind() == std::io::ErrorKind::NotFound
                && reason.contains("resolved against the repository root") =>
            {
                Some(format!(
                    "create `{program}`, or correct the path in .tnh/config.yaml (or TNH_CLAUDE_BIN / TNH_CODEX_BIN / TNH_GEMINI_BIN); a relative program path is resolved against the repository root (the folder holding `.tnh/`), not the run's worktree, so an uncommitted script there is found; in a run, `tnh-conductor resume RUN_ID` then runs the step again"
                ))
            }
            RunnerError::Spawn {
                kind: ProcessKind::Agent,
                program,
                ..
            } => Some(format!(
                "install `{program}` or point the profile (or TNH_CLAUDE_BIN / TNH_CODEX_BIN / TNH_GEMINI_BIN) at it; in a run, `tnh-conductor resume RUN_ID` then runs the step again"
            )),
            RunnerError::Spawn {
                kind: ProcessKind::Validator,
                name,
                program,
                ..
            } => Some(format!(
                "install `{program}` where the validator's PATH finds it (its own `env: {{PATH: …}}` if it sets one, else the conductor's), or name it by its full path in the argv of `validators.{name}` or the entrypoint; in a run, `tnh-conductor resume RUN_ID` then runs the step again"
            )),
            RunnerError::Spawn {
                kind: ProcessKind::Planner,
                name,
                program,
                ..
            } => Some(format!(
                "install `{program}` or fix the argv of `planners.{name}` in .tnh/config.yaml (TNH_CLAUDE_BIN / TNH_CODEX_BIN for claude and codex planners)"
            )),
            RunnerError::Io { action, .. } if action.starts_with("enter") => {
                Some("check that the worktree exists (was it removed or not created?)".to_owned())
            }
            RunnerError::Io { .. } => {
                Some("check that the step directory exists and is writable".to_owned())
            }
            RunnerError::FolderReplaced { .. } => Some(
                "the agent tampered with the run directory: inspect the folder and where it leads, then start a new run"
                    .to_owned(),
            ),
            RunnerError::Profile { .. } => {
                Some("fix the `agents:` entry in .tnh/config.yaml".to_owned())
            }
            RunnerError::UnknownAgent { known, .. } => Some(format!(
                "known agents: {}; add a profile under `agents:` in .tnh/config.yaml",
                known.join(", ")
            )),
            RunnerError::Json(_) => None,
        }
    }

    /// An I/O error on `path`.
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        RunnerError::Io {
            action,
            path: path.into(),
            source,
        }
    }

    /// A spawn failure, with the reason worded for the operator.
    pub(crate) fn spawn(
        kind: ProcessKind,
        name: &str,
        program: &str,
        source: std::io::Error,
    ) -> Self {
        let reason = match source.kind() {
            // A program named by a path is looked for there, not on PATH.
            std::io::ErrorKind::NotFound if program.contains('/') => "does not exist".to_owned(),
            std::io::ErrorKind::NotFound => "not found on PATH".to_owned(),
            std::io::ErrorKind::PermissionDenied => "is not executable".to_owned(),
            // Rust refuses to start a process whose argv, environment or working directory
            // holds a NUL byte; the program itself is not at fault.
            std::io::ErrorKind::InvalidInput => {
                format!("was not started: what it was to be given is invalid ({source})")
            }
            _ => format!("could not be started: {source}"),
        };
        RunnerError::Spawn {
            kind,
            name: name.to_owned(),
            program: program.to_owned(),
            reason,
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A NUL byte in a validator's computed `env` value was reported as
    /// "`/usr/bin/unshare` could not be started" with the hint to install unshare. A refusal
    /// to pass what the process was given is now worded as such, without blaming the program.
    #[test]
    fn a_nul_byte_in_what_a_process_is_given_does_not_blame_the_program() {
        let refused = std::process::Command::new("/bin/sh")
            .env("XA", "a\0b")
            .spawn()
            .expect_err("a NUL byte in the environment cannot be passed");
        let error = RunnerError::spawn(ProcessKind::Validator, "s", "/usr/bin/unshare", refused);
        let message = error.to_string();
        assert!(
            message.contains("was not started: what it was to be given is invalid")
                && !message.contains("could not be started"),
            "{message}"
        );
        let hint = error.hint().unwrap();
        assert!(
            hint.contains("NUL byte") && !hint.contains("install"),
            "{hint}"
        );
    }
}
