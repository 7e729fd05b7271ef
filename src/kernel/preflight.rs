//! The checks before a run: everything `run` can resolve before it creates a worktree, a
//! branch or a run directory — the parameters and the prompt inputs taken from them, the
//! validators each RUN_VALIDATION names and their programs, the agent and planner CLIs the
//! workflow uses (found, and a version the adapters know) — so that a mistake is reported
//! at once, every one of them together, instead of after an hour of agent work.
//!
//! The workflow's own static checks (`validate`, an expression's unknown function among them)
//! run before these; `run` reports both together. Nothing here writes anything.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::params::{ParamError, collect_params};
use crate::config::Config;
use crate::opcode::validators;
use crate::prompt::Catalog;
use crate::runner::probe::{self, VersionCheck};
use crate::runner::{AgentKind, AgentProfile};
use crate::workflow::diagnostic::{Diagnostic, Severity};
use crate::workflow::model::{
    Inputs, PromptSpec, Step, StepBody, ValidatorEntry, ValidatorKind, Workflow,
};
use crate::workflow::yaml::{Node, Pos, Value};

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
        cli: Option<&'static str>,
        /// A relative path (`./agent.sh`) resolved, and the repository root it was resolved
        /// against.
        resolved: Option<(String, String)>,
    },
    /// A Claude or Codex CLI whose version the adapters were not tested with.
    #[error("`{program}` ({cli}) {}", describe_version(check))]
    CliVersion {
        /// The program.
        program: String,
        /// `claude` or `codex`.
        cli: &'static str,
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
fn package_of(cli: &str) -> &'static str {
    if cli == "codex" {
        "@openai/codex"
    } else {
        "@anthropic-ai/claude-code"
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
                package_of(cli),
                if *cli == "codex" { "TNH_CODEX_BIN" } else { "TNH_CLAUDE_BIN" },
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
                    package_of(cli)
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
    fn error(step: &Step, pos: Pos, kind: ProblemKind) -> Self {
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

/// What the checks need.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// The workflow, decoded.
    pub workflow: &'a Workflow,
    /// The configuration.
    pub config: &'a Config,
    /// The prompt library.
    pub catalog: &'a Catalog,
    /// The repository: validators are detected from its checkout, relative programs found
    /// from its root.
    pub repo: &'a Path,
    /// The `-p name=value` arguments.
    pub params: &'a [String],
}

/// Runs every check. Returns the resolved parameters (when they are right) and every problem,
/// errors and warnings, in the order of the workflow.
pub fn check(
    subject: &Subject<'_>,
) -> (
    Option<serde_json::Map<String, serde_json::Value>>,
    Vec<Problem>,
) {
    let (params, errors) = collect_params(subject.workflow, subject.params);
    let mut problems: Vec<Problem> = errors
        .into_iter()
        .map(|error| param_problem(subject.workflow, error))
        .collect();
    let mut programs = Programs::default();
    for step in &subject.workflow.steps {
        match &step.body {
            StepBody::RunAgent(agent) => {
                check_prompt_inputs(subject, step, &params, &mut problems);
                check_agent(subject, step, &agent.agent, &mut programs, &mut problems);
            }
            StepBody::RunValidation(validation) => {
                for entry in &validation.run {
                    check_validator(subject, step, entry, &mut programs, &mut problems);
                }
            }
            StepBody::Evaluate(evaluate) => {
                check_planner(
                    subject,
                    step,
                    evaluate.planner.as_ref(),
                    &mut programs,
                    &mut problems,
                );
            }
            _ => {}
        }
    }
    problems.extend(programs.version_problems());
    let ready = !problems.iter().any(Problem::is_error);
    (ready.then_some(params), problems)
}

/// The validator checks alone, for `validate` inside a repository: every validator a
/// RUN_VALIDATION names is configured or detectable in `repo`, its program found, its Python
/// module importable.
pub fn check_validators(workflow: &Workflow, config: &Config, repo: &Path) -> Vec<Problem> {
    let catalog = Catalog::default();
    let subject = Subject {
        workflow,
        config,
        catalog: &catalog,
        repo,
        params: &[],
    };
    let mut programs = Programs::default();
    let mut problems = Vec::new();
    for step in &workflow.steps {
        if let StepBody::RunValidation(validation) = &step.body {
            for entry in &validation.run {
                check_validator(&subject, step, entry, &mut programs, &mut problems);
            }
        }
    }
    problems
}

/// A parameter problem, at the parameter's declaration when it has one.
fn param_problem(workflow: &Workflow, error: ParamError) -> Problem {
    let declared = |name: &str| {
        workflow
            .params
            .iter()
            .find(|param| param.name.value == name)
            .map(|param| param.name.pos)
    };
    let pos = match &error {
        ParamError::Missing { name, .. } | ParamError::WrongType { name, .. } => declared(name),
        _ => None,
    };
    Problem {
        step: None,
        pos,
        severity: Severity::Error,
        kind: ProblemKind::Param(error),
    }
}

/// A RUN_AGENT step's prompt inputs taken from parameters the run does not have: a name of
/// `inputs: [...]` that is a declared parameter, or a value that is exactly `${params.NAME}`
/// or `${{ params.NAME }}`.
fn check_prompt_inputs(
    subject: &Subject<'_>,
    step: &Step,
    params: &serde_json::Map<String, serde_json::Value>,
    problems: &mut Vec<Problem>,
) {
    let StepBody::RunAgent(agent) = &step.body else {
        return;
    };
    let PromptSpec::Reference(reference) = &agent.prompt.value else {
        return;
    };
    let Some(prompt) = subject.catalog.get(reference.as_str()) else {
        return;
    };
    let declared = |name: &str| {
        subject
            .workflow
            .params
            .iter()
            .any(|param| param.name.value == name)
    };
    let sources: Vec<(String, String, Pos)> = match &agent.inputs {
        Inputs::Names(names) => names
            .iter()
            .filter(|name| declared(&name.value))
            .map(|name| (name.value.clone(), name.value.clone(), name.pos))
            .collect(),
        Inputs::Values(values) => values
            .iter()
            .filter_map(|(name, node)| {
                param_of(node).map(|param| (name.value.clone(), param, node.pos))
            })
            .collect(),
        Inputs::Expression(_) | Inputs::None => Vec::new(),
    };
    for (input, param, pos) in sources {
        let required = prompt
            .inputs
            .iter()
            .any(|declared| declared.name == input && declared.required);
        if required && !params.contains_key(&param) {
            let kind = ProblemKind::PromptInput {
                prompt: reference.as_str().to_owned(),
                input,
                param,
            };
            problems.push(Problem::error(step, pos, kind));
        }
    }
}

/// The parameter a value is exactly: `${params.NAME}` or `${{ params.NAME }}`.
fn param_of(node: &Node) -> Option<String> {
    let Value::Str(text) = &node.value else {
        return None;
    };
    let inner = text
        .trim()
        .strip_prefix("${{")
        .and_then(|rest| rest.strip_suffix("}}"))
        .or_else(|| {
            text.trim()
                .strip_prefix("${")
                .and_then(|rest| rest.strip_suffix('}'))
        })?;
    let name = inner.trim().strip_prefix("params.")?;
    name.chars()
        .all(|ch| ch.is_alphanumeric() || ch == '_')
        .then(|| name.to_owned())
}

/// A validator the step names: configured or detectable, its program found, its Python
/// module importable.
fn check_validator(
    subject: &Subject<'_>,
    step: &Step,
    entry: &ValidatorEntry,
    programs: &mut Programs,
    problems: &mut Vec<Problem>,
) {
    let id = match entry {
        ValidatorEntry::Named(name) => name,
        ValidatorEntry::Spec(spec) if spec.kind.value == ValidatorKind::Builtin => &spec.id,
        // A script validator lives in the run directory, which does not exist yet.
        ValidatorEntry::Spec(_) => return,
    };
    let name = id.value.clone();
    // A name that is not a validator at all is `validate`'s to report, with a near name.
    if !subject.config.known_names().validators.contains(&name) {
        return;
    }
    let command = match validators::registered(&name, subject.config, subject.repo) {
        Ok(command) => command,
        Err(reason) => {
            let kind = ProblemKind::ValidatorUnresolved { name, reason };
            problems.push(Problem::error(step, id.pos, kind));
            return;
        }
    };
    let program = &command.argv[0];
    let Some(found) = programs.find(program, Some(subject.repo)) else {
        let kind = ProblemKind::ValidatorProgram {
            name,
            program: program.clone(),
            detected: command.detected,
        };
        problems.push(Problem::error(step, id.pos, kind));
        return;
    };
    if let Some(kind) = python_module_problem(&name, &command.argv, &found, subject.repo, programs)
    {
        problems.push(Problem::error(step, id.pos, kind));
    }
}

/// For `python… -m MODULE …`: whether the interpreter imports the module (asked once per
/// interpreter and module), run from the repository root as the validator runs from its
/// checkout.
fn python_module_problem(
    name: &str,
    argv: &[String],
    python: &Path,
    repo: &Path,
    programs: &mut Programs,
) -> Option<ProblemKind> {
    let interpreter = Path::new(&argv[0]).file_name()?.to_str()?;
    if !interpreter.starts_with("python") || argv.get(1).map(String::as_str) != Some("-m") {
        return None;
    }
    let module = argv.get(2)?.clone();
    let key = (python.to_path_buf(), module.clone());
    let answer = programs
        .imports
        .entry(key)
        .or_insert_with(|| {
            let statement = format!("import {module}");
            match probe::probe(
                python,
                &["-c", &statement],
                Some(repo),
                probe::PROBE_TIMEOUT,
            ) {
                Ok(answer) if answer.success => None,
                Ok(answer) => Some(last_line(&answer.output)),
                // A probe that could not run says nothing about the module.
                Err(_) => None,
            }
        })
        .clone()?;
    Some(ProblemKind::PythonModule {
        name: name.to_owned(),
        command: argv.join(" "),
        python: argv[0].clone(),
        module,
        detail: answer,
    })
}

fn last_line(text: &str) -> String {
    let line = text.trim().lines().last().unwrap_or("it failed");
    crate::text::one_line(&line.chars().take(300).collect::<String>()).into_owned()
}

/// A RUN_AGENT step's agent: its profile usable and its program found.
fn check_agent(
    subject: &Subject<'_>,
    step: &Step,
    agent: &crate::workflow::model::At<String>,
    programs: &mut Programs,
    problems: &mut Vec<Problem>,
) {
    let profile = configured_profiles(subject.config).and_then(|profiles| {
        crate::runner::resolve_profile(&agent.value, &profiles).map_err(|error| error.to_string())
    });
    let profile = match profile {
        Ok(profile) => profile,
        Err(message) => {
            // An unknown name is `validate`'s to report, at the same place.
            if !message.starts_with("unknown agent") {
                let kind = ProblemKind::AgentProfile {
                    agent: agent.value.clone(),
                    message,
                };
                problems.push(Problem::error(step, agent.pos, kind));
            }
            return;
        }
    };
    let (program, cli) = agent_program(&profile);
    let Some(program) = program else {
        return;
    };
    if programs
        .find_cli(&program, cli, subject.config.root.as_deref())
        .is_none()
    {
        let kind = ProblemKind::CliMissing {
            role: "agent",
            name: agent.value.clone(),
            resolved: resolved_from(&program, subject.config.root.as_deref()),
            program,
            cli,
        };
        problems.push(Problem::error(step, agent.pos, kind));
    }
}

fn configured_profiles(config: &Config) -> Result<BTreeMap<String, AgentProfile>, String> {
    config
        .agents
        .iter()
        .map(|(name, node)| {
            serde_json::from_value(node.to_json())
                .map(|profile| (name.clone(), profile))
                .map_err(|error| format!("the profile in the configuration is invalid: {error}"))
        })
        .collect()
}

/// The program an agent profile starts, and which CLI it is.
fn agent_program(profile: &AgentProfile) -> (Option<String>, Option<&'static str>) {
    let binary = |variable: &str, default: &str| {
        std::env::var(variable)
            .ok()
            .filter(|value| !value.is_empty())
            .or_else(|| profile.binary.clone())
            .unwrap_or_else(|| default.to_owned())
    };
    match profile.kind {
        AgentKind::Command => (profile.argv.first().cloned(), None),
        AgentKind::Claude => (Some(binary("TNH_CLAUDE_BIN", "claude")), Some("claude")),
        AgentKind::Codex => (Some(binary("TNH_CODEX_BIN", "codex")), Some("codex")),
    }
}

/// An EVALUATE step's planner: for a command, Claude or Codex backend, its program found.
fn check_planner(
    subject: &Subject<'_>,
    step: &Step,
    named: Option<&crate::workflow::model::At<String>>,
    programs: &mut Programs,
    problems: &mut Vec<Problem>,
) {
    use crate::planner::backend::{Backend, ExternalKind};
    let config = subject.config;
    let name = config
        .planner_override
        .clone()
        .or_else(|| named.map(|name| name.value.clone()))
        .or_else(|| {
            subject
                .workflow
                .defaults
                .planner
                .as_ref()
                .map(|name| name.value.clone())
        })
        .unwrap_or_else(|| crate::planner::backend::default_planner_name(config).to_owned());
    let pos = named
        .or(subject.workflow.defaults.planner.as_ref())
        .map_or(step.pos, |name| name.pos);
    // An undefined planner is refused where `--planner` or `validate` checks names.
    let Ok(Backend::External(external)) = Backend::from_config(&name, config) else {
        return;
    };
    let env_binary = |variable: &str, binary: &Option<String>, default: &str| {
        std::env::var(variable)
            .ok()
            .filter(|value| !value.is_empty())
            .or_else(|| binary.clone())
            .unwrap_or_else(|| default.to_owned())
    };
    let (program, cli) = match &external.kind {
        ExternalKind::Command { argv } => (argv.first().cloned(), None),
        ExternalKind::Claude { binary, .. } => (
            Some(env_binary("TNH_CLAUDE_BIN", binary, "claude")),
            Some("claude"),
        ),
        ExternalKind::Codex { binary, .. } => (
            Some(env_binary("TNH_CODEX_BIN", binary, "codex")),
            Some("codex"),
        ),
        ExternalKind::Http { .. } => (None, None),
    };
    let Some(program) = program else {
        return;
    };
    if programs
        .find_cli(&program, cli, external.root.as_deref())
        .is_none()
    {
        let kind = ProblemKind::CliMissing {
            role: "planner",
            resolved: resolved_from(&program, external.root.as_deref()),
            name,
            program,
            cli,
        };
        problems.push(Problem::error(step, pos, kind));
    }
}

/// A relative program path as resolved against `root`, and the root, when resolving changed it.
fn resolved_from(program: &str, root: Option<&Path>) -> Option<(String, String)> {
    let root = root?;
    let resolved = crate::runner::adapters::resolve_program(program, Some(root));
    (resolved != program).then(|| (resolved, root.display().to_string()))
}

/// What was found, each asked once: programs, Python imports, and the CLIs whose version to
/// ask.
#[derive(Debug, Default)]
struct Programs {
    found: BTreeMap<String, Option<PathBuf>>,
    imports: BTreeMap<(PathBuf, String), Option<String>>,
    clis: BTreeMap<PathBuf, (&'static str, String)>,
}

impl Programs {
    /// Where `program` (resolved against `root` when it is a relative path) is.
    fn find(&mut self, program: &str, root: Option<&Path>) -> Option<PathBuf> {
        let resolved = crate::runner::adapters::resolve_program(program, root);
        self.found
            .entry(resolved.clone())
            .or_insert_with(|| probe::find_program(&resolved))
            .clone()
    }

    /// [`Programs::find`], noting a Claude or Codex CLI for the version check.
    fn find_cli(
        &mut self,
        program: &str,
        cli: Option<&'static str>,
        root: Option<&Path>,
    ) -> Option<PathBuf> {
        let found = self.find(program, root)?;
        if let Some(cli) = cli {
            self.clis.insert(found.clone(), (cli, program.to_owned()));
        }
        Some(found)
    }

    /// One `--version` per CLI found: an older version than the adapters know is an error, a
    /// newer or unreadable one a warning.
    fn version_problems(&self) -> Vec<Problem> {
        self.clis
            .iter()
            .filter_map(|(path, (cli, program))| {
                let check = probe::check_version(cli, path);
                let severity = match check {
                    VersionCheck::Tested(_) => return None,
                    VersionCheck::Older { .. } => Severity::Error,
                    VersionCheck::Newer { .. } | VersionCheck::Unknown(_) => Severity::Warning,
                };
                Some(Problem {
                    step: None,
                    pos: None,
                    severity,
                    kind: ProblemKind::CliVersion {
                        program: program.clone(),
                        cli,
                        check,
                    },
                })
            })
            .collect()
    }
}
