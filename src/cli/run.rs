//! `tnh-conductor run WORKFLOW` and `tnh-conductor resume RUN_ID`.

use std::path::PathBuf;

use clap::Args;

use super::{Cli, Output, load_config, repo_root};
use crate::error::{Error, ExitStatus, Result};
use crate::ids::RunId;
use crate::kernel::End;
use crate::kernel::driver::RunEnd;
use crate::kernel::preflight::Problem;
use crate::kernel::run::{
    RepositoryChanges, ResumeRequest, RunError, RunRequest, RunSummary, check_run, resume_run,
    start_checked,
};

/// `run WORKFLOW`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The workflow file.
    pub workflow: PathBuf,
    /// A run parameter, `name=value` (the value is parsed as YAML).
    #[arg(short = 'p', long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    /// The ref the work branch starts from.
    #[arg(long, default_value = "HEAD")]
    pub base: String,
    /// Planner profile overriding the workflow's.
    #[arg(long)]
    pub planner: Option<String>,
    /// Ask inline at blocking gates instead of exiting 3.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: the name to decide as at the prompt (checked against the gate's
    /// `approvers`; default: $USER).
    #[arg(long = "as", value_name = "NAME", requires = "wait")]
    pub reviewer: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Only run the checks before a run (functions, validators, agent and planner CLIs,
    /// parameters, prompt inputs): exit 0 when all is well, 2 otherwise; nothing is created.
    #[arg(long, conflicts_with_all = ["wait", "json"])]
    pub check: bool,
}

/// `resume RUN_ID`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The run to continue.
    pub run_id: String,
    /// Ask inline at blocking gates instead of exiting 3.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: the name to decide as at the prompt (checked against the gate's
    /// `approvers`; default: $USER).
    #[arg(long = "as", value_name = "NAME", requires = "wait")]
    pub reviewer: Option<String>,
    /// Continue although the worktree drifted from the recorded state; for a run killed in an
    /// agent or validation step, also keep the repository's refs and git configuration changed
    /// since that step started as they are (yours).
    #[arg(long)]
    pub accept_drift: bool,
    /// For a run killed in an agent or validation step: put the repository's refs and git
    /// configuration changed since that step started back as they were (the step's), recorded
    /// as policy violations of the interrupted visit.
    #[arg(long)]
    pub put_back: bool,
    /// For a run killed in an agent or validation step whose saved guard state is damaged or
    /// missing: go on without checking what that step's process did outside the worktree (its
    /// refs, git configuration and the operator's checkout are left as they are), recorded as
    /// a `guard_check_skipped` event. A readable guard state is checked anyway.
    #[arg(long)]
    pub skip_guard_check: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Starts a run; exits 0/1 at a success/failure STOP, 3 at a gate, 4 on a runtime error, 130
/// when interrupted, 2 when nothing could start.
pub fn cmd_run(cli: &Cli, args: &RunArgs, output: &mut Output) -> Result<ExitStatus> {
    if !args.workflow.exists() {
        return Err(Error::Usage {
            message: format!("no workflow file `{}`", args.workflow.display()),
            hint: Some(
                "check the path (relative paths start at the current folder); the repository's shipped workflows are in workflows/"
                    .to_owned(),
            ),
        });
    }
    let mut config = load_config(cli)?;
    config.planner_override = args.planner.clone();
    let request = RunRequest {
        repo: repo_root(cli)?,
        workflow_path: args.workflow.clone(),
        params: args.params.clone(),
        base: args.base.clone(),
        config,
        observer: super::progress::observer(!args.json && !cli.quiet),
    };
    let repo = request.repo.clone();
    let checked = check_run(request).map_err(|error| run_failure(error, output))?;
    for warning in checked.warnings() {
        output.diagnostic_styled(&render_problem(warning, &checked.file(), output.color()));
    }
    if args.check {
        output.print(&format!(
            "{}: ok — the workflow ({} steps), its parameters, prompt inputs, validators and agent and planner CLIs are ready{}\n",
            checked.file(),
            checked.steps(),
            match checked.warnings().len() {
                0 => String::new(),
                count => format!(" ({count} warning(s) above)"),
            }
        ));
        return Ok(ExitStatus::Success);
    }
    if !args.json {
        output.note(&format!("running {}", args.workflow.display()));
    }
    let result = start_checked(checked);
    let result = ask_at_gates(
        cli,
        &repo,
        result,
        (args.wait, args.reviewer.as_deref()),
        args.json,
        output,
    );
    report(result, args.json, output)
}

/// With `--wait`, asks at each blocking gate the run reaches — when someone can answer: with
/// no terminal on stdin (a pipe, cron, CI) it says it will not ask and the run stays waiting.
fn ask_at_gates(
    cli: &Cli,
    repo: &std::path::Path,
    result: std::result::Result<RunSummary, RunError>,
    (wait, reviewer): (bool, Option<&str>),
    json: bool,
    output: &mut Output,
) -> std::result::Result<RunSummary, RunError> {
    if !wait {
        return result;
    }
    if !super::wait::interactive() {
        if let Ok(RunSummary {
            end: RunEnd::Waiting { step_id },
            ..
        }) = &result
        {
            output.note(&format!(
                "--wait: not asking at gate `{step_id}`: standard input and error are not both a terminal"
            ));
        }
        return result;
    }
    let options = super::wait::WaitOptions {
        reviewer,
        progress: !json && !cli.quiet,
    };
    super::wait::wait_at_gates(cli, repo, result, options, output)
}

/// Resumes a run.
pub fn cmd_resume(cli: &Cli, args: &ResumeArgs, output: &mut Output) -> Result<ExitStatus> {
    let repo = repo_root(cli)?;
    let result = resume_run(ResumeRequest {
        repo: repo.clone(),
        run_id: RunId::new(args.run_id.as_str()),
        config: super::config_for_run(cli, &repo, &args.run_id)?,
        accept_drift: args.accept_drift,
        repository: if args.put_back {
            RepositoryChanges::PutBack
        } else if args.accept_drift {
            RepositoryChanges::Keep
        } else {
            RepositoryChanges::Refuse
        },
        skip_guard_check: args.skip_guard_check,
        observer: super::progress::observer(!args.json && !cli.quiet),
    });
    let result = ask_at_gates(
        cli,
        &repo,
        result,
        (args.wait, args.reviewer.as_deref()),
        args.json,
        output,
    );
    report(result, args.json, output)
}

/// The CLI error of a failed run, resume or gate decision; an invalid workflow's diagnostics
/// are printed first, so "fix the problems above" has problems above it.
pub(super) fn run_failure(error: RunError, output: &mut Output) -> Error {
    match error {
        RunError::InvalidWorkflow { file, diagnostics } => {
            for diagnostic in &diagnostics {
                output.diagnostic_styled(&diagnostic.render(output.color()));
            }
            crate::workflow::WorkflowError::Invalid {
                file,
                errors: diagnostics.len(),
            }
            .into()
        }
        RunError::Checks {
            file,
            diagnostics,
            problems,
        } => {
            for diagnostic in &diagnostics {
                output.diagnostic_styled(&diagnostic.render(output.color()));
            }
            for problem in &problems {
                output.diagnostic_styled(&render_problem(problem, &file, output.color()));
            }
            Error::Run(Box::new(RunError::Checks {
                file,
                diagnostics,
                problems,
            }))
        }
        error => Error::Run(Box::new(error)),
    }
}

/// A problem of the checks before a run: at its place in the workflow like a diagnostic, or,
/// for the command line and the machine, without a place.
fn render_problem(problem: &Problem, file: &str, color: bool) -> String {
    let diagnostic = problem.diagnostic(file);
    if problem.pos.is_some() {
        return diagnostic.render(color);
    }
    let rendered = diagnostic.render(color);
    // The diagnostic's first line starts with `FILE:1:1: `; without a place, drop it.
    let prefix = format!("{file}:1:1");
    rendered
        .strip_prefix(&prefix)
        .or_else(|| rendered.strip_prefix(&format!("\x1b[1m{prefix}\x1b[0m")))
        .map(|rest| format!("run{rest}"))
        .unwrap_or(rendered)
}

/// What `run --json` and `resume --json` print.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct RunResult {
    /// The format's version.
    pub schema_version: u32,
    /// The run.
    pub run_id: String,
    /// `completed`, `failed`, `error`, `waiting`, `interrupted`, `stopped` or `abandoned`.
    pub state: String,
    /// How it ended, or why it waits or stopped.
    pub detail: String,
    /// The command's exit code.
    pub exit_code: i32,
    /// The run directory.
    pub run_dir: String,
    /// The run's worktree.
    pub worktree: String,
}

/// How a run's end reads: its exit status, the state word and the detail. `run`, `resume`,
/// `gate … --resume`, a gate decision that ends the run, and `demo` all say an end this way.
pub(super) struct EndLine {
    /// The command's exit status for this end.
    pub(super) status: ExitStatus,
    /// `completed`, `failed`, `error`, `waiting`, `interrupted` or `stopped`.
    pub(super) state: &'static str,
    /// How it ended, or why it waits or stopped.
    pub(super) detail: String,
}

impl EndLine {
    /// The end of the run whose directory is `run_dir`.
    pub(super) fn of(end: &RunEnd, run_dir: &std::path::Path) -> Self {
        let (status, state, detail) = match end {
            RunEnd::Finished {
                end: End::Success,
                reason,
            } => (ExitStatus::Success, "completed", reason.clone()),
            RunEnd::Finished {
                end: End::Failure,
                reason,
            } => (ExitStatus::Failure, "failed", reason.clone()),
            RunEnd::Finished {
                end: End::Error,
                reason,
            } => (ExitStatus::Runtime, "error", reason.clone()),
            // Only `runs abandon` ends a run so, never a driver; said as it is if one ever does.
            RunEnd::Finished {
                end: End::Abandoned,
                reason,
            } => (ExitStatus::Runtime, "abandoned", reason.clone()),
            RunEnd::Waiting { step_id } => (
                ExitStatus::Waiting,
                "waiting",
                format!("gate `{step_id}` waits for a decision"),
            ),
            RunEnd::Interrupted { step_id } => (
                ExitStatus::Interrupted,
                "interrupted",
                interrupted_detail(run_dir, step_id),
            ),
            // The run is kept, resumable once the cause is fixed: a runtime error's exit code.
            RunEnd::Stopped { reason, .. } => (ExitStatus::Runtime, "stopped", reason.clone()),
        };
        Self {
            status,
            state,
            detail,
        }
    }

    /// `run ID: STATE — DETAIL`, on one line: the detail may hold text an agent chose (a file
    /// name, a STOP reason read from a file), which must not print lines of its own.
    pub(super) fn line(&self, run_id: &str) -> String {
        format!(
            "run {run_id}: {} — {}",
            self.state,
            super::one_line(&self.detail)
        )
    }
}

fn report(
    result: std::result::Result<RunSummary, RunError>,
    json: bool,
    output: &mut Output,
) -> Result<ExitStatus> {
    let summary = match result {
        Ok(summary) => summary,
        Err(error) => return Err(run_failure(error, output)),
    };
    let EndLine {
        status,
        state,
        detail,
    } = EndLine::of(&summary.end, &summary.run_dir);
    if json {
        let value = RunResult {
            schema_version: crate::artifacts::SCHEMA_VERSION,
            run_id: summary.run_id.to_string(),
            state: state.to_owned(),
            detail: detail.clone(),
            exit_code: i32::from(status.code()),
            run_dir: summary.run_dir.display().to_string(),
            worktree: summary.worktree.display().to_string(),
        };
        output.print(&format!("{}\n", serde_json::to_string_pretty(&value)?));
    } else {
        let line = EndLine {
            status,
            state,
            detail,
        }
        .line(summary.run_id.as_str());
        output.print(&format!(
            "{line}\n  run directory: {}\n  worktree:      {}\n",
            summary.run_dir.display(),
            summary.worktree.display()
        ));
        match &summary.end {
            RunEnd::Waiting { step_id } => {
                // A gate with approvers refuses anyone else: the hint names one.
                let approver = first_approver(&summary.run_dir, step_id)
                    .map(|name| format!(" --as {name}"))
                    .unwrap_or_default();
                output.note(&format!(
                    "approve with `tnh-conductor gate approve {}{approver} --resume`",
                    summary.run_id
                ));
            }
            RunEnd::Interrupted { .. } => output.note(&format!(
                "continue with `tnh-conductor resume {}`",
                summary.run_id
            )),
            _ => {}
        }
    }
    Ok(status)
}

/// Where an interrupted run stopped, from its state: in the middle of a step (left running
/// for `resume` to run again), between steps (before `step_id`, or before the first when its
/// worktree was being created), or at the `--wait` prompt of a gate that still waits.
fn interrupted_detail(run_dir: &std::path::Path, step_id: &str) -> String {
    let state: Option<crate::kernel::RunState> =
        crate::artifacts::read_json(&run_dir.join(crate::artifacts::RunDir::STATE), "run state")
            .ok();
    match state.map(|state| state.phase) {
        Some(crate::kernel::Phase::Running { step_id, .. }) => {
            format!("step `{step_id}` was interrupted")
        }
        Some(crate::kernel::Phase::Waiting { step_id, .. }) => {
            format!("interrupted at the prompt; gate `{step_id}` still waits for a decision")
        }
        _ => format!("stopped before step `{step_id}`"),
    }
}

/// The first approver the waiting gate `step_id` names, from its latest visit's request.
fn first_approver(run_dir: &std::path::Path, step_id: &str) -> Option<String> {
    let run_dir = crate::artifacts::RunDir::at(run_dir);
    let manifest: crate::artifacts::StepManifest =
        crate::artifacts::read_json(&run_dir.step_manifest(step_id), "manifest").ok()?;
    let request = crate::kernel::gate::request_of(&run_dir, step_id, manifest.visit).ok()?;
    request.approvers.into_iter().next()
}
