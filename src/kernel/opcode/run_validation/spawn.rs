//! Starting one validator: its command line (in a network namespace of its own when it is
//! denied the network), its sanitised environment and limits, and its supervision, recorded
//! in its folder of the visit so that `resume` can end it if this process dies meanwhile.

use std::path::Path;
use std::time::Duration;

use crate::artifacts::VisitDir;
use crate::artifacts::{EventPayload, event_payload::RunnerStarted};
use crate::runner::{
    CaptureFormat, Limits as RunnerLimits, ProcessKind, ProcessSpec, Supervised,
    validator_environment,
};
use crate::workflow::model::{Limits, NetworkAccess, ValidatorEntry, ValidatorSpec};

use super::super::validators::{self, Command};
use super::super::{OpcodeError, StepContext};
use super::planning::{self, Evaluated, Plan};
use super::{Ran, not_run, results};

pub(super) const MIB: u64 = 1024 * 1024;

/// One validator about to run: its id, its entry (none for a registered validator named by
/// itself), what its entry resolved to, and its folder of the visit.
#[derive(Clone, Copy)]
pub(super) struct Validator<'a> {
    pub(super) id: &'a str,
    pub(super) spec: Option<&'a ValidatorSpec>,
    pub(super) plan: &'a Plan,
    pub(super) command: &'a Command,
    pub(super) folder: &'a Path,
}

/// How one validator was run and how it ended.
pub(super) struct Spawned {
    pub(super) supervised: Supervised,
    /// How it reached the network, as the report records it.
    pub(super) network: &'static str,
    /// The host variables left out of its environment.
    pub(super) dropped: Vec<String>,
    /// The most bytes its stdout (and its stderr) kept.
    pub(super) output_limit: u64,
    pub(super) timeout: Option<Duration>,
}

/// Runs one entry of the step's `run`: resolves it, supervises its process, and judges what
/// it left. A validator that cannot be resolved is recorded as not run.
pub(super) fn run_one(
    context: &mut StepContext<'_>,
    entry: &ValidatorEntry,
    evaluated: Evaluated,
    limits: &Limits,
) -> Result<Ran, OpcodeError> {
    let (id, spec) = match entry {
        ValidatorEntry::Named(name) => (name.value.clone(), None),
        ValidatorEntry::Spec(spec) => (spec.id.value.clone(), Some(spec.as_ref())),
    };
    let plan = planning::plan(context, spec, &id, evaluated)?;
    let command = match plan.command.clone() {
        Ok(command) => command,
        Err((outcome, reason)) => return Ok(not_run(&id, outcome, reason)),
    };
    let visit_dir = context.visit_dir()?;
    let folder = VisitDir::at(&visit_dir).validator_dir(&id);
    crate::artifacts::safe_files::create_real_folders(&visit_dir, &[VisitDir::VALIDATORS, &id])
        .map_err(crate::artifacts::ArtifactsError::io("create", &folder))?;
    let validator = Validator {
        id: &id,
        spec,
        plan: &plan,
        command: &command,
        folder: &folder,
    };
    let spawned = supervise(context, validator, limits)?;
    results::judge(context, validator, &visit_dir, spawned)
}

/// Starts the validator in its working directory and waits for it under the supervisor.
fn supervise(
    context: &mut StepContext<'_>,
    validator: Validator<'_>,
    limits: &Limits,
) -> Result<Spawned, OpcodeError> {
    let Validator {
        id,
        spec,
        plan,
        command,
        folder,
    } = validator;
    let (environment, dropped) =
        validator_environment(&context.run.host_env, &plan.env, &context.tnh_variables());
    let (mut argv, network) = command_line(id, command, &environment, plan)?;
    // Bounded like an agent's: a validator printing without end stops at the limit instead of
    // filling the disk that holds the run's evidence.
    let output_limit = output_limit_bytes(spec);
    let timeout = effective_timeout(plan, limits, context);
    let runner_limits = runner_limits(context, limits, output_limit, timeout);
    let program = argv.remove(0);
    let process = ProcessSpec {
        kind: ProcessKind::Validator,
        agent: id.to_owned(),
        program,
        args: argv,
        cwd: plan.cwd.clone(),
        env: environment,
        stdin: Vec::new(),
        stdout_path: folder.join(VisitDir::STDOUT_TXT),
        stderr_path: folder.join(VisitDir::STDERR_TXT),
        format: CaptureFormat::Text,
        limits: runner_limits,
        remaining_budget_usd: None,
    };
    let step = (context.step_id().to_owned(), context.visit);
    let started = RunnerStarted {
        validator: Some(id.to_owned()),
        argv: Some(command.argv.clone()),
        agent: None,
    };
    context.recorder.event(
        Some((&step.0, step.1)),
        EventPayload::RunnerStarted(started),
    )?;
    let cancellation = context.run.cancellation.clone();
    // Recorded in the validator's folder while it runs: how `resume` ends the group if this
    // process dies meanwhile.
    let record = folder.join(crate::runner::PROCESS_GROUP_FILE);
    let supervised = context
        .run
        .runtime
        .block_on(async move {
            tokio::spawn(async move {
                crate::runner::supervise_recorded(process, cancellation, Some(&record)).await
            })
            .await
        })
        .map_err(|error| OpcodeError::Other(format!("the validator task failed: {error}")))??;
    Ok(Spawned {
        supervised,
        network,
        dropped,
        output_limit,
        timeout,
    })
}

/// The validator's command line, and how it reaches the network as the report records it.
fn command_line(
    id: &str,
    command: &Command,
    environment: &[(String, String)],
    plan: &Plan,
) -> Result<(Vec<String>, &'static str), OpcodeError> {
    Ok(match plan.network {
        NetworkAccess::Deny if let Some(helper) = validators::isolation_helper() => (
            // The helper is the conductor's; the validator's program is found on the
            // validator's own PATH, as it would be without isolation, and a program found
            // nowhere is the validator's spawn failure, not a failing check.
            std::iter::once(helper.display().to_string())
                .chain(["-rn", "--"].iter().map(|part| (*part).to_owned()))
                .chain(std::iter::once(isolated_program(
                    id,
                    command,
                    environment,
                    plan,
                )?))
                .chain(command.argv.iter().skip(1).cloned())
                .collect::<Vec<_>>(),
            "denied (own network namespace)",
        ),
        NetworkAccess::Deny => (
            command.argv.clone(),
            "not isolated: unshare is not available here",
        ),
        NetworkAccess::Allow => (command.argv.clone(), "allowed"),
    })
}

/// The supervisor's limits for the validator: its output bounded, its timeout, and the step's
/// (else the workflow's) idle timeout.
fn runner_limits(
    context: &StepContext<'_>,
    limits: &Limits,
    output_limit: u64,
    timeout: Option<Duration>,
) -> RunnerLimits {
    let defaults = RunnerLimits::default();
    RunnerLimits {
        timeout: timeout.unwrap_or(defaults.timeout),
        idle_timeout: limits
            .idle_timeout
            .as_ref()
            .or(context.run.workflow.defaults.limits.idle_timeout.as_ref())
            .map(|at| at.value),
        max_stdout_bytes: Some(output_limit),
        max_stderr_bytes: Some(output_limit),
        ..defaults
    }
}

/// The most bytes a validator's stdout (and its stderr) keeps per visit: its own
/// `max_output_mib`, or the agents' default.
fn output_limit_bytes(spec: Option<&ValidatorSpec>) -> u64 {
    spec.and_then(|spec| spec.max_output_mib.as_ref())
        .map_or(crate::runner::DEFAULT_MAX_OUTPUT_MIB, |mib| {
            u64::from(mib.value)
        })
        * MIB
}

/// The validator's program by path, looked up on its own `PATH` in its working directory.
fn isolated_program(
    id: &str,
    command: &Command,
    environment: &[(String, String)],
    plan: &Plan,
) -> Result<String, OpcodeError> {
    let program = command.argv.first().map_or("", String::as_str);
    crate::runner::supervisor::find_program(program, environment, &plan.cwd)
        .map(|path| path.display().to_string())
        .ok_or_else(|| {
            let missing = std::io::Error::from(std::io::ErrorKind::NotFound);
            crate::runner::RunnerError::spawn(ProcessKind::Validator, id, program, missing).into()
        })
}

/// The validator's own `timeout`, else the step's, else the workflow default.
fn effective_timeout(
    plan: &Plan,
    limits: &Limits,
    context: &StepContext<'_>,
) -> Option<std::time::Duration> {
    let defaults = &context.run.workflow.defaults.limits;
    plan.timeout
        .or(limits.timeout.as_ref().map(|at| at.value))
        .or(defaults.timeout.as_ref().map(|at| at.value))
}
