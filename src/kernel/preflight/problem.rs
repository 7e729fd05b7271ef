//! What the checks before a run find: each problem with its place, its severity, a stable
//! code and a hint, shown like a workflow diagnostic.

use crate::document::diagnostic::{Diagnostic, Severity};
use crate::document::yaml::Pos;
use crate::runner::AgentKind;
use crate::runner::probe::VersionCheck;
use crate::workflow::model::Step;

use super::super::params::ParamError;

/// One problem found before a run: where (the step and the workflow position, when it has
/// them), how serious, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The step it concerns.
    pub step: Option<String>,
    /// Where in the workflow file; `None` for the command line or the machine.
    pub pos: Option<Pos>,
    /// An error stops the run; a warning is shown and the run goes on.
    pub severity: Severity,
    /// What is wrong.
    pub kind: ProblemKind,
}

/// What a check found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProblemKind {
    /// A `-p` argument or a required parameter.
    #[error(transparent)]
    Param(ParamError),
    /// A prompt's required input is named from a parameter the run does not have.
    #[error(
        "prompt `{prompt}` requires input `{input}`, given from parameter `{param}`, which this run does not have (not given with -p, no default)"
    )]
    PromptInput {
        /// The prompt reference.
        prompt: String,
        /// The input.
        input: String,
        /// The parameter it is taken from.
        param: String,
    },
    /// A validator neither configured nor detectable.
    #[error("{reason}")]
    ValidatorUnresolved {
        /// The validator.
        name: String,
        /// Why it cannot be resolved.
        reason: String,
    },
    /// A validator's program is not found.
    #[error(
        "validator `{name}` runs `{program}`, which is not found ({})",
        where_looked(program)
    )]
    ValidatorProgram {
        /// The validator.
        name: String,
        /// argv[0].
        program: String,
        /// Whether the command was detected from the repository (not configured).
        detected: bool,
    },
    /// A Python validator's module does not import.
    #[error(
        "validator `{name}` runs `{command}`, but `{python}` cannot import `{module}`: {detail}"
    )]
    PythonModule {
        /// The validator.
        name: String,
        /// The command, as one line.
        command: String,
        /// The interpreter.
        python: String,
        /// The module `-m` names.
        module: String,
        /// What the import said.
        detail: String,
    },
    /// An agent profile cannot be used.
    #[error("agent `{agent}`: {message}")]
    AgentProfile {
        /// The profile.
        agent: String,
        /// Why.
        message: String,
    },
    /// An agent's or planner's program is not found.
    #[error("{role} `{name}` runs `{program}`, which is not found ({})", missing_where(program, resolved.as_ref()))]
    CliMissing {
        /// `agent` or `planner`.
        role: &'static str,
        /// The profile.
        name: String,
        /// The program as it would be started.
        program: String,
        /// `claude`, `codex`, or `None` for a command.
        cli: Option<AgentKind>,
        /// A relative path (`./agent.sh`) resolved, and the repository root it was resolved
        /// against.
        resolved: Option<(String, String)>,
    },
    /// A Claude or Codex CLI whose version the adapters were not tested with.
    #[error("`{program}` ({}) {}", cli.name(), describe_version(check))]
    CliVersion {
        /// The program.
        program: String,
        /// `claude` or `codex`.
        cli: AgentKind,
        /// What `--version` said, compared with the tested versions.
        check: VersionCheck,
    },
}

fn where_looked(program: &str) -> &'static str {
    if program.contains('/') {
        "no executable file at that path"
    } else {
        "not on PATH"
    }
}

fn missing_where(program: &str, resolved: Option<&(String, String)>) -> String {
    match resolved {
        Some((path, root)) => format!(
            "no executable file at `{path}`: `{program}` as written, resolved against the repository root `{root}`"
        ),
        None => where_looked(program).to_owned(),
    }
}

fn describe_version(check: &VersionCheck) -> String {
    match check {
        VersionCheck::Tested(found) => format!("is version {found}, a tested one"),
        VersionCheck::Newer { found, newest } => {
            format!(
                "is version {found}, newer than the newest the adapters were tested with ({newest})"
            )
        }
        VersionCheck::Older { found, oldest } => {
            format!("is version {found}, older than the oldest the adapters know ({oldest})")
        }
        VersionCheck::Unknown(reason) => format!("did not say its version: {reason}"),
    }
}

/// The npm package of a CLI.
fn package_of(cli: AgentKind) -> &'static str {
    match cli {
        AgentKind::Codex => "@openai/codex",
        AgentKind::Gemini => "@google/gemini-cli",
        AgentKind::Claude | AgentKind::Command => "@anthropic-ai/claude-code",
    }
}

/// The environment variable that names a CLI's program.
fn binary_variable(cli: AgentKind) -> &'static str {
    match cli {
        AgentKind::Codex => "TNH_CODEX_BIN",
        AgentKind::Gemini => "TNH_GEMINI_BIN",
        AgentKind::Claude | AgentKind::Command => "TNH_CLAUDE_BIN",
    }
}

impl ProblemKind {
    /// A stable identifier, shown in brackets like a diagnostic's rule.
    pub fn code(&self) -> &'static str {
        match self {
            ProblemKind::Param(_) => "param",
            ProblemKind::PromptInput { .. } => "missing-input",
            ProblemKind::ValidatorUnresolved { .. } => "validator-not-configured",
            ProblemKind::ValidatorProgram { .. } => "validator-program-missing",
            ProblemKind::PythonModule { .. } => "python-module-missing",
            ProblemKind::AgentProfile { .. } => "agent-profile",
            ProblemKind::CliMissing { .. } => "program-missing",
            ProblemKind::CliVersion { .. } => "cli-version",
        }
    }

    /// What to do about it.
    pub fn hint(&self) -> String {
        match self {
            ProblemKind::Param(error) => error.hint(),
            ProblemKind::PromptInput { param, .. } => format!(
                "give `-p {param}=…`, or give the parameter a `default:` in the workflow"
            ),
            ProblemKind::ValidatorUnresolved { name, .. } => format!(
                "set `validators.{name}` in .tnh/config.yaml (e.g. `{name}: {{argv: [make, {name}]}}`), or drop it from the step's `run:`"
            ),
            ProblemKind::ValidatorProgram {
                name,
                program,
                detected: true,
            } => format!(
                "install `{program}`, or set `validators.{name}` in .tnh/config.yaml to the command that runs it here"
            ),
            ProblemKind::ValidatorProgram { name, program, .. } => format!(
                "install `{program}`, or fix `validators.{name}.argv` in .tnh/config.yaml"
            ),
            ProblemKind::PythonModule {
                name,
                python,
                module,
                ..
            } => format!(
                "install it for that interpreter (`{python} -m pip install {module}`, or activate the project's virtual environment before `run`), or set `validators.{name}` in .tnh/config.yaml"
            ),
            ProblemKind::AgentProfile { agent, .. } => {
                format!("fix `agents.{agent}` in .tnh/config.yaml")
            }
            ProblemKind::CliMissing {
                cli: Some(cli),
                role,
                name,
                ..
            } => format!(
                "install it with `npm install -g {}`, or point {} or `{}s.{name}.binary` at it",
                package_of(*cli),
                binary_variable(*cli),
                role
            ),
            ProblemKind::CliMissing {
                resolved: Some((path, _)),
                role,
                name,
                ..
            } => format!(
                "create `{path}`, or fix `{role}s.{name}` in .tnh/config.yaml: a relative path is resolved against the repository root (the folder holding `.tnh/`), not the run's worktree"
            ),
            ProblemKind::CliMissing { role, name, .. } => format!(
                "install it, or fix the `argv` of `{role}s.{name}` in .tnh/config.yaml"
            ),
            ProblemKind::CliVersion { cli, check, .. } => match check {
                VersionCheck::Older { .. } => format!(
                    "update it: `npm install -g {}@latest`",
                    package_of(*cli)
                ),
                _ => "the run goes on; if the agent's output is not understood, install a tested version".to_owned(),
            },
        }
    }

    /// The problem as a diagnostic of `file`, at `pos` (line 1 column 1 when it has none).
    fn diagnostic(
        &self,
        file: &str,
        pos: Option<Pos>,
        severity: Severity,
        step: Option<&str>,
    ) -> Diagnostic {
        let pos = pos.unwrap_or(Pos::new(1, 1));
        Diagnostic {
            file: file.to_owned(),
            line: pos.line,
            column: pos.column,
            severity,
            code: self.code(),
            message: match step {
                Some(step) => format!("step `{step}`: {self}"),
                None => self.to_string(),
            },
            hint: Some(self.hint()),
        }
    }
}

impl Problem {
    pub(super) fn error(step: &Step, pos: Pos, kind: ProblemKind) -> Self {
        Problem {
            step: Some(step.id.value.to_string()),
            pos: Some(pos),
            severity: Severity::Error,
            kind,
        }
    }

    /// Whether it stops the run.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// The problem as a diagnostic of the workflow `file` (a problem of the command line or
    /// the machine is placed at the file's start).
    pub fn diagnostic(&self, file: &str) -> Diagnostic {
        self.kind
            .diagnostic(file, self.pos, self.severity, self.step.as_deref())
    }
}
