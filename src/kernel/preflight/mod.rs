//! The checks before a run: everything `run` can resolve before it creates a worktree, a
//! branch or a run directory — the parameters and the prompt inputs taken from them, the
//! validators each RUN_VALIDATION names and their programs, the agent and planner CLIs the
//! workflow uses (found, and a version the adapters know) — so that a mistake is reported
//! at once, every one of them together, instead of after an hour of agent work.
//!
//! The workflow's own static checks (`validate`, an expression's unknown function among them)
//! run before these; `run` reports both together. Nothing here writes anything.

mod problem;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use problem::{Problem, ProblemKind};

use super::params::{ParamError, collect_params};
use crate::config::Config;
use crate::document::diagnostic::Severity;
use crate::document::yaml::{Node, Pos, Value};
use crate::opcode::validators;
use crate::prompt::Catalog;
use crate::runner::probe::{self, VersionCheck};
use crate::runner::{AgentKind, AgentProfile};
use crate::workflow::model::{
    Inputs, PromptSpec, Step, StepBody, ValidatorEntry, ValidatorKind, Workflow,
};

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
fn agent_program(profile: &AgentProfile) -> (Option<String>, Option<AgentKind>) {
    let binary = |variable: &str, default: &str| {
        std::env::var(variable)
            .ok()
            .filter(|value| !value.is_empty())
            .or_else(|| profile.binary.clone())
            .unwrap_or_else(|| default.to_owned())
    };
    match profile.kind {
        AgentKind::Command => (profile.argv.first().cloned(), None),
        AgentKind::Claude => (
            Some(binary("TNH_CLAUDE_BIN", "claude")),
            Some(AgentKind::Claude),
        ),
        AgentKind::Codex => (
            Some(binary("TNH_CODEX_BIN", "codex")),
            Some(AgentKind::Codex),
        ),
        AgentKind::Gemini => (
            Some(binary("TNH_GEMINI_BIN", "gemini")),
            Some(AgentKind::Gemini),
        ),
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
            Some(AgentKind::Claude),
        ),
        ExternalKind::Codex { binary, .. } => (
            Some(env_binary("TNH_CODEX_BIN", binary, "codex")),
            Some(AgentKind::Codex),
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
    clis: BTreeMap<PathBuf, (AgentKind, String)>,
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
        cli: Option<AgentKind>,
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
                let check = probe::check_version(*cli, path);
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
                        cli: *cli,
                        check,
                    },
                })
            })
            .collect()
    }
}
