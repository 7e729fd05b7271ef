//! Which validators a RUN_VALIDATION step runs and how: the registered ones that are neither
//! configured nor detectable (the step refused before anything runs), the computed fields of
//! each entry evaluated up front, and each entry resolved just before it runs.

use std::path::{Path, PathBuf};

use crate::artifacts::{
    NotConfigured, UnconfiguredValidation, UnresolvedStatus, UnresolvedValidator, ValidationReport,
    write_json_new,
};
use crate::document::yaml::Node;
use crate::outcome::Outcome;
use crate::workflow::model::{
    NetworkAccess, NodeList, RunValidation, ValidatorEntry, ValidatorKind, ValidatorSpec,
};

use super::super::validators::{self, Command};
use super::super::{OpcodeError, StepContext};
use super::VALIDATION_REPORT;

/// The registered validators of the step (named, or inline `builtin`) that are neither
/// configured nor detectable in the worktree, with why.
pub(super) fn unconfigured(
    context: &StepContext<'_>,
    validation: &RunValidation,
) -> Vec<(String, String)> {
    let worktree = context.workspace.path();
    validation
        .run
        .iter()
        .filter_map(|entry| {
            let id = match entry {
                ValidatorEntry::Named(name) => &name.value,
                ValidatorEntry::Spec(spec) if spec.kind.value == ValidatorKind::Builtin => {
                    &spec.id.value
                }
                ValidatorEntry::Spec(_) => return None,
            };
            validators::registered(id, &context.run.config, worktree)
                .err()
                .map(|reason| (id.clone(), reason))
        })
        .collect()
}

/// Records the visit's `validation_report.json` — status `not_configured` for each validator
/// that cannot be resolved, `not_run` for the others — and the error that ends the run.
pub(super) fn refuse_unconfigured(
    visit_dir: &Path,
    validation: &RunValidation,
    unconfigured: Vec<(String, String)>,
) -> Result<OpcodeError, OpcodeError> {
    let validators = validation
        .run
        .iter()
        .map(|entry| {
            let id = match entry {
                ValidatorEntry::Named(name) => name.value.clone(),
                ValidatorEntry::Spec(spec) => spec.id.value.clone(),
            };
            let record = match unconfigured.iter().find(|(name, _)| *name == id) {
                Some((_, reason)) => UnresolvedValidator {
                    status: UnresolvedStatus::NotConfigured,
                    cause: format!("{reason}: set validators.{id} in .tnh/config.yaml"),
                    exit_code: (),
                },
                None => UnresolvedValidator {
                    status: UnresolvedStatus::NotRun,
                    cause: "not run: another validator of the step is not configured".to_owned(),
                    exit_code: (),
                },
            };
            (id, record)
        })
        .collect();
    let report = ValidationReport::NotConfigured(UnconfiguredValidation {
        schema_version: crate::artifacts::SCHEMA_VERSION,
        status: NotConfigured::NotConfigured,
        validators,
    });
    write_json_new(&visit_dir.join(VALIDATION_REPORT), &report)?;
    Ok(OpcodeError::ValidatorsNotConfigured {
        names: unconfigured.into_iter().map(|(name, _)| name).collect(),
    })
}

/// A computed single-text field (`entrypoint`, `cwd`, `report`, one `env` value): `None` when
/// its value is `()`, which leaves the field unset.
fn evaluate_text(
    context: &StepContext<'_>,
    node: &Node,
    what: &str,
) -> Result<Option<String>, OpcodeError> {
    let script_context = context.script_context()?;
    Ok(context
        .run
        .script
        .evaluate_field_text(node, &script_context, what)?)
}

/// A computed list field (`args`, `artifacts`); items whose value is `()` are left out.
fn evaluate_list(
    context: &StepContext<'_>,
    list: &NodeList,
    what: &str,
) -> Result<Vec<String>, OpcodeError> {
    let script_context = context.script_context()?;
    Ok(context
        .run
        .script
        .evaluate_field_list(list, &script_context, what)?)
}

/// What an inline validator's fields gave, evaluated before any validator of the step runs
/// (all `None`/empty for a registered validator named by itself).
#[derive(Debug, Default)]
pub(super) struct Evaluated {
    args: Vec<String>,
    entrypoint: Option<String>,
    /// The `cwd` as given, with where it is written.
    cwd: Option<(String, crate::document::yaml::Pos)>,
    env: Vec<(String, String)>,
    globs: Vec<String>,
    report: Option<String>,
}

/// Evaluates the expressions of one entry of `run`: nothing here touches the worktree or
/// starts a process.
pub(super) fn evaluate(
    context: &StepContext<'_>,
    entry: &ValidatorEntry,
) -> Result<Evaluated, OpcodeError> {
    let ValidatorEntry::Spec(spec) = entry else {
        return Ok(Evaluated::default());
    };
    let entrypoint = match (&spec.kind.value, &spec.entrypoint) {
        (ValidatorKind::Script, Some(node)) => evaluate_text(context, node, "`entrypoint`")?,
        _ => None,
    };
    let cwd = match &spec.cwd {
        // `()` leaves it unset: the worktree's root.
        Some(node) => evaluate_text(context, node, "`cwd`")?.map(|given| (given, node.pos)),
        None => None,
    };
    let mut env = Vec::new();
    for (name, node) in &spec.env {
        let what = format!("the `env` value of `{}`", name.value);
        if let Some(value) = evaluate_text(context, node, &what)? {
            env.push((name.value.clone(), value));
        }
    }
    if let Some(node) = &spec.env_expression {
        let script_context = context.script_context()?;
        env.extend(context.run.script.evaluate_env(node, &script_context)?);
    }
    let report = match &spec.report {
        Some(node) => evaluate_text(context, node, "`report`")?,
        None => None,
    };
    Ok(Evaluated {
        args: evaluate_list(context, &spec.args, "`args`")?,
        entrypoint,
        cwd,
        env,
        globs: evaluate_list(context, &spec.artifacts, "`artifacts`")?,
        report,
    })
}

/// The command, cwd, extra environment, artifacts globs, report path and network of an entry.
pub(super) struct Plan {
    pub(super) command: Result<Command, (Outcome, String)>,
    pub(super) cwd: PathBuf,
    pub(super) env: Vec<(String, String)>,
    pub(super) globs: Vec<String>,
    pub(super) report: Option<String>,
    pub(super) network: NetworkAccess,
    pub(super) timeout: Option<std::time::Duration>,
}

/// Resolves an entry just before it runs: its command (a registered validator, or a script
/// entrypoint, whose file a validator before it may have written) and its `cwd` (which one
/// before it may have created).
pub(super) fn plan(
    context: &StepContext<'_>,
    spec: Option<&ValidatorSpec>,
    id: &str,
    evaluated: Evaluated,
) -> Result<Plan, OpcodeError> {
    let worktree = context.workspace.path().to_path_buf();
    let Some(spec) = spec else {
        let command = validators::registered(id, &context.run.config, &worktree)
            .map_err(|reason| (Outcome::Error, reason));
        return Ok(Plan {
            command,
            cwd: worktree,
            env: Vec::new(),
            globs: Vec::new(),
            report: None,
            network: NetworkAccess::Allow,
            timeout: None,
        });
    };
    let Evaluated {
        args,
        entrypoint,
        cwd,
        env,
        globs,
        report,
    } = evaluated;
    let command = match spec.kind.value {
        ValidatorKind::Builtin => validators::registered(id, &context.run.config, &worktree)
            .map(|mut command| {
                command.argv.extend(args);
                command
            })
            .map_err(|reason| (Outcome::Error, reason)),
        ValidatorKind::Script => {
            let record = context.workspace.record();
            validators::script(
                &entrypoint.unwrap_or_default(),
                args,
                context.recorder.run_dir().root(),
                &record.repo_root,
                &worktree,
                &context.run.config,
            )
            .map_err(|reason| (Outcome::KilledPolicy, format!("refused: {reason}")))
        }
    };
    let cwd = match cwd {
        Some((given, pos)) => {
            validators::working_directory(&worktree, &given).map_err(|reason| {
                OpcodeError::ValidatorCwd {
                    step: context.step_id().to_owned(),
                    validator: id.to_owned(),
                    at: format!("{}:{}", context.recorder.metadata().workflow_path, pos),
                    cwd: given,
                    reason,
                }
            })?
        }
        None => worktree,
    };
    // A script has no network unless it asks; a builtin (a test suite that may fetch its
    // dependencies) has the host's unless the entry says `network: deny`.
    let network = spec.network_access();
    Ok(Plan {
        command,
        cwd,
        env,
        globs,
        report,
        network,
        timeout: spec.timeout.as_ref().map(|timeout| timeout.value),
    })
}
