//! Starting and resuming runs: everything between the command line and the driver loop.

use std::path::{Path, PathBuf};

use super::driver::{DriveError, Driver, RunEnd};
use super::lock::{LockError, RunLock};
use super::params::ParamError;
use super::recorder::{Payload, Recorder, payload};
use super::state::{Phase, RunState};
use super::transition::StepReport;
use crate::artifacts::{
    ArtifactsError, EventLog, EventType, GATE_REQUEST_FILE, RunDir, RunMetadata, SCHEMA_VERSION,
    is_run_id, new_run_id, now,
};
use crate::config::{Config, OperatorCheckout};
use crate::ids::{RunId, StepId, WorkflowId};
use crate::opcode::RunContext;
use crate::outcome::Outcome;
use crate::policy::{Policy, PolicySpec};
use crate::prompt::Catalog;
use crate::runner::Cancellation;
use crate::workflow::diagnostic::Diagnostic;
use crate::workflow::load::check_file_keeping_source;
use crate::workflow::model::{Opcode, Workflow};
use crate::workspace::{
    Fingerprint, GUARD_STATE_FILE, GuardReport, GuardScope, RollbackTarget, Workspace,
    WorkspaceError,
};

/// The default parent of run directories.
pub const DEFAULT_ARTIFACTS_ROOT: &str = ".tnh/run/";

/// Why a run could not start or continue.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The workflow is invalid (its diagnostics are attached; nothing was started).
    #[error("workflow `{file}` is invalid")]
    InvalidWorkflow {
        /// The file.
        file: String,
        /// Its diagnostics.
        diagnostics: Vec<Diagnostic>,
    },
    /// A parameter is wrong (nothing was started).
    #[error(transparent)]
    Param(#[from] ParamError),
    /// The checks before a run found problems (nothing was started): the workflow's
    /// diagnostics and what the checks found, each with where and a hint.
    #[error(
        "{} before the run of `{file}` started",
        problem_count(diagnostics, problems)
    )]
    Checks {
        /// The workflow file.
        file: String,
        /// The workflow's diagnostics (its static checks).
        diagnostics: Vec<Diagnostic>,
        /// What the checks before a run found, errors and warnings.
        problems: Vec<super::preflight::Problem>,
    },
    /// The workspace refused or failed.
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    /// The run directory failed.
    #[error(transparent)]
    Artifacts(#[from] ArtifactsError),
    /// Another process drives the run.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// The prompt library is broken.
    #[error(transparent)]
    Prompt(#[from] crate::prompt::PromptError),
    /// The script could not be compiled.
    #[error(transparent)]
    Script(#[from] crate::script::ScriptError),
    /// No such run.
    #[error("no run `{run_id}` in `{dir}`")]
    UnknownRun {
        /// The id given.
        run_id: String,
        /// Where runs were looked for.
        dir: PathBuf,
    },
    /// The run already ended.
    #[error("run `{run_id}` already ended ({how})")]
    Finished {
        /// The run.
        run_id: String,
        /// How it ended.
        how: String,
    },
    /// The operator abandoned the run (`runs abandon`): it cannot be continued or decided.
    #[error("run `{run_id}` was {reason}")]
    Abandoned {
        /// The run.
        run_id: String,
        /// The reason recorded as its end: `abandoned by NAME (WHY)`.
        reason: String,
    },
    /// `runs abandon` refused.
    #[error(transparent)]
    Abandon(#[from] super::abandon::AbandonError),
    /// The async runtime could not start.
    #[error("failed to start the async runtime: {0}")]
    Runtime(std::io::Error),
    /// The run's state cannot be used: damaged, or written by a newer release.
    #[error(transparent)]
    State(#[from] super::state::StateError),
    /// Driving failed.
    #[error(transparent)]
    Drive(#[from] DriveError),
    /// A gate could not be decided.
    #[error(transparent)]
    Gate(#[from] super::gate::GateError),
    /// The worktree changed since the run's last checkpoint.
    #[error("the worktree changed since the run's last checkpoint (tree {} → {}, HEAD {} → {}){}", short(&recorded.tree), short(&found.tree), short(&recorded.head), short(&found.head), if *recreated { "; its folder had been deleted and was checked out again from the work branch" } else { "" })]
    Drift {
        /// What the state recorded.
        recorded: Fingerprint,
        /// What the worktree holds now.
        found: Fingerprint,
        /// The worktree folder was gone and was checked out again from the work branch.
        recreated: bool,
    },
    /// `state.json` is gone from a run that went past its first checkpoint: starting over
    /// would run its visits again under the same numbers, over their artifacts.
    #[error("run `{run_id}` has no `{}`, but it went past its first checkpoint ({evidence}): resuming would run its steps again over the artifacts of the visits it recorded", path.display())]
    StateMissing {
        /// The run.
        run_id: String,
        /// Where `state.json` should be.
        path: PathBuf,
        /// What shows the run had checkpointed.
        evidence: String,
    },
    /// `run --planner NAME` (kept in the metadata for `resume`) names a planner that is not
    /// defined: checked before anything starts, instead of every EVALUATE ending
    /// `planner_error`.
    #[error("planner `{name}` is not defined ({}); the defined planners are {}", if *recorded { "the run was started with `--planner` naming it" } else { "given with --planner" }, known.join(", "))]
    UnknownPlanner {
        /// The name given.
        name: String,
        /// The defined planners (`default`, `rules` and the configured ones).
        known: Vec<String>,
        /// Whether it comes from the run's metadata (`resume`) rather than this command line.
        recorded: bool,
    },
    /// The step the run is in (or about to start) is gone from the edited workflow: refused
    /// before anything is written, so that restoring the step lets the run continue.
    #[error(
        "run `{run_id}` {how} step `{step_id}`, which the edited workflow `{file}` no longer has"
    )]
    StepRemoved {
        /// The run.
        run_id: String,
        /// The step.
        step_id: String,
        /// Where the run is: `stopped in`, `stopped before`, `waits at`.
        how: &'static str,
        /// The workflow file.
        file: String,
    },
    /// A repository module the run pinned when it started is missing or changed in the run
    /// directory: refused rather than reading the worktree's (which agents change).
    #[error("run `{run_id}` pinned the repository module `{file}` when it started, but its copy `{}` is damaged: {problem}", path.display())]
    PinnedModule {
        /// The run.
        run_id: String,
        /// The module (`.tnh/scripts/…`).
        file: String,
        /// Its pinned copy in the run directory.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// The run stopped in the middle of a step, which only `resume` can settle.
    #[error("run `{run_id}` stopped in the middle of step `{step_id}` (visit {visit})")]
    StepInProgress {
        /// The run.
        run_id: String,
        /// The step.
        step_id: String,
        /// Its visit.
        visit: u32,
    },
    /// Refs or git configuration of the repository changed since the step (an agent or a
    /// validation, whose guard state was saved) the run stopped in started: by its process
    /// before it was killed, or by the operator since — the
    /// guard cannot tell which. Refused before anything is written or put back.
    #[error("run `{run_id}` stopped in the middle of step `{step_id}` (visit {visit}), and the repository changed since that step started:{}\nthese may be the step's (its agent or validator ran until it was killed) or yours since", changes.iter().map(|change| format!("\n  - {change}")).collect::<String>())]
    RepositoryChanged {
        /// The run.
        run_id: String,
        /// The step.
        step_id: String,
        /// Its visit.
        visit: u32,
        /// Each change: `REF (CLASS): BEFORE → NOW`, or a git configuration file that changed.
        changes: Vec<String>,
    },
    /// The guard state the visit the run stopped in saved before its agent or validators
    /// started (`guard_state.json`) is damaged, or missing although the events show that its
    /// process started and the visit never ended: what that process may have changed outside
    /// the worktree cannot be checked. Refused before anything is written or put back, unless
    /// `resume --skip-guard-check`.
    #[error("run `{run_id}` stopped in the middle of step `{step_id}` (visit {visit}), and the guard state saved before its {process} started, `{}`, {problem}: what the {process} may have changed outside the worktree before {} killed cannot be checked — the repository's refs (protected and operator branches, tags, stash, notes, other runs' refs), its git configuration (`.git/config`, hooks, the git configuration files it names) and the operator's checkout and HEAD", path.display(), if *process == "agent" { "it was" } else { "they were" })]
    GuardStateUnusable {
        /// The run.
        run_id: String,
        /// The step.
        step_id: String,
        /// Its visit.
        visit: u32,
        /// `guard_state.json` in the visit's folder.
        path: PathBuf,
        /// What is wrong with it: `is damaged (…)`, `is missing although …`.
        problem: String,
        /// `agent` or `validators`.
        process: &'static str,
    },
    /// The run's `metadata.json` records another repository than the one its run directory is
    /// in: the repository was moved or copied since the run started. Its worktree, work branch
    /// and snapshot refs are (or were) the recorded repository's, so nothing is done here.
    #[error("run `{run_id}` was started in the repository `{}`, but its run directory is in `{}`: the repository was {} since the run started", recorded.display(), found.display(), if *recorded_exists { "copied (or its run directory was)" } else { "moved or renamed" })]
    OtherRepository {
        /// The run.
        run_id: String,
        /// `metadata.json`'s `repo_root`.
        recorded: PathBuf,
        /// The repository the command runs in, which holds the run directory.
        found: PathBuf,
        /// Whether the recorded repository is still there.
        recorded_exists: bool,
    },
    /// The workflow file the run was started from is no longer where it was.
    #[error("run `{run_id}` was started from the workflow `{}`, which is gone", path.display())]
    WorkflowGone {
        /// The run.
        run_id: String,
        /// Where the file was.
        path: PathBuf,
        /// Its SHA-256 when the run started, when recorded.
        sha256: Option<String>,
    },
}

fn problem_count(diagnostics: &[Diagnostic], problems: &[super::preflight::Problem]) -> String {
    let errors = diagnostics
        .iter()
        .filter(|diagnostic| diagnostic.severity == crate::workflow::diagnostic::Severity::Error)
        .count()
        + problems.iter().filter(|problem| problem.is_error()).count();
    match errors {
        1 => "1 problem was found".to_owned(),
        many => format!("{many} problems were found"),
    }
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

impl RunError {
    /// Whether nothing was started or changed (exit 2) rather than a runtime failure (exit 4).
    pub fn is_usage(&self) -> bool {
        match self {
            RunError::InvalidWorkflow { .. }
            | RunError::Checks { .. }
            | RunError::Param(_)
            | RunError::Lock(_)
            | RunError::UnknownRun { .. }
            | RunError::Finished { .. }
            | RunError::Abandoned { .. }
            | RunError::Abandon(_)
            | RunError::Prompt(_)
            | RunError::Drift { .. }
            | RunError::StepInProgress { .. }
            | RunError::RepositoryChanged { .. }
            | RunError::GuardStateUnusable { .. }
            | RunError::StateMissing { .. }
            | RunError::UnknownPlanner { .. }
            | RunError::WorkflowGone { .. }
            | RunError::StepRemoved { .. }
            | RunError::PinnedModule { .. }
            | RunError::OtherRepository { .. }
            | RunError::Gate(_) => true,
            RunError::Workspace(error) => error.exit_status() == crate::exit::ExitStatus::Usage,
            RunError::Artifacts(error) => error.is_refusal(),
            RunError::State(error) => error.is_usage(),
            _ => false,
        }
    }

    /// Whether it stopped on Ctrl-C or a stop signal with nothing lost (exit 130, the run can
    /// be resumed): a wait for the worktree lock that was interrupted.
    pub fn is_interrupted(&self) -> bool {
        matches!(self, RunError::Workspace(error)
            if error.exit_status() == crate::exit::ExitStatus::Interrupted)
    }

    /// What to do about it.
    pub fn hint(&self) -> Option<String> {
        match self {
            RunError::InvalidWorkflow { file, .. } => Some(format!(
                "fix the problems above; `tnh-conductor validate {file}` checks again"
            )),
            RunError::Param(error) => Some(error.hint()),
            RunError::Checks { file, .. } => Some(format!(
                "nothing was created; fix the problems above, then `tnh-conductor run --check {file}` checks again"
            )),
            RunError::Workspace(error) => error.hint(),
            RunError::Artifacts(error) => error.hint(),
            RunError::Lock(super::lock::LockError::Held { .. }) => Some(
                "wait for that process to finish, or stop it; a killed process releases the lock"
                    .into(),
            ),
            // No other process is involved: the lock file itself could not be opened or written.
            RunError::Lock(super::lock::LockError::NotAFile { path, what }) => Some(format!(
                "something replaced the run's lock file (an agent runs as you and can write the \
                 run directory); once no process drives the run, remove it (`rm {}{}`) and try \
                 again: the next command creates it afresh",
                if what == "a folder" { "-r " } else { "" },
                path.display()
            )),
            RunError::Lock(super::lock::LockError::Io { .. }) => Some(
                "make the run directory writable (a read-only mount or wrong owner) or free disk \
                 space, then try again"
                    .into(),
            ),
            RunError::Prompt(error) => error.hint(),
            RunError::Script(error) => error.hint(),
            RunError::UnknownRun { .. } => Some("list runs with `tnh-conductor runs list`".into()),
            RunError::WorkflowGone { sha256, .. } => Some(format!(
                "the run routes by that file: put it back at that path{} (from version control or \
                 a backup), then try again; nothing was changed",
                sha256
                    .as_deref()
                    .map(|sha| format!(" (its SHA-256 was {sha})"))
                    .unwrap_or_default()
            )),
            RunError::OtherRepository { run_id, recorded, recorded_exists: true, .. } => Some(format!(
                "nothing was changed: a copy never drives the original's worktree nor writes \
                 into its `.git`; continue the run where it started (`tnh-conductor --repo {} \
                 resume {run_id}`), or start a new run here with `tnh-conductor run`",
                recorded.display()
            )),
            RunError::OtherRepository { run_id, recorded, found, .. } => Some(format!(
                "nothing was changed: the run's worktree, work branch and snapshots are recorded \
                 with absolute paths under `{}`; move the repository back there and `tnh-conductor \
                 resume {run_id}`, or start a new run here with `tnh-conductor run` (the evidence \
                 of `{run_id}` stays readable in `{}`)",
                recorded.display(),
                found.display()
            )),
            RunError::Finished { run_id, .. } => Some(format!(
                "see `tnh-conductor runs show {run_id}`; start a new run with `tnh-conductor run`"
            )),
            RunError::Abandoned { run_id, .. } => Some(format!(
                "nothing was changed; an abandoned run is ended for good: see `tnh-conductor runs show {run_id}`, and start a new run with `tnh-conductor run`"
            )),
            RunError::Abandon(super::abandon::AbandonError::Driven { run_id, .. }) => Some(format!(
                "nothing was changed; stop that process first (Ctrl-C in its terminal, or `kill -INT PID`; a gate decision, a rollback or a `runs clean` is done in a moment), then `tnh-conductor runs abandon {run_id}` again"
            )),
            RunError::Abandon(super::abandon::AbandonError::NoName { .. }) => Some(
                "nothing was changed; say who ends the run with `--as NAME` (the default is $USER, which is empty here)".into(),
            ),
            RunError::Drift { .. } => Some("inspect the worktree (`git -C WORKTREE status`); `--accept-drift` on `resume` or on the gate decision continues with the changes (recorded as an event), or discard them with `tnh-conductor rollback RUN_ID --target pre_step` (the last agent step's work goes too) or `--target pre_run`, then resume or decide again".into()),
            RunError::StateMissing { run_id, path, .. } => Some(format!("nothing was changed; put `{}` back (from a backup or a copy of the run directory) and resume again, or start a new run with `tnh-conductor run WORKFLOW`; the evidence of `{run_id}` stays in its directory (`tnh-conductor runs show {run_id}`)", path.display())),
            RunError::UnknownPlanner { name, known, recorded } => {
                let near = crate::workflow::diagnostic::nearest(name, known.iter().map(String::as_str))
                    .map(|near| format!("did you mean `{near}`? "))
                    .unwrap_or_default();
                Some(if *recorded {
                    format!("{near}nothing was changed; define `{name}` again under `planners:` in .tnh/config.yaml, then resume")
                } else {
                    format!("{near}nothing was started; pass one of the defined planners, or define `{name}` under `planners:` in .tnh/config.yaml")
                })
            }
            RunError::StepRemoved { run_id, step_id, file, .. } => Some(format!("nothing was changed; restore step `{step_id}` in `{file}` (or the file as the run started with it: its SHA-256 is `workflow_sha256` in metadata.json), then `tnh-conductor resume {run_id}` again; the run stays resumable")),
            RunError::PinnedModule { run_id, file, .. } => Some(format!("nothing was changed; put the copy back (the run directory's `scripts/` holds the text of `{file}` as the run started; `git show BASE_SHA:{file}` gives it when it was committed), then resume again, or start a new run; the evidence of `{run_id}` stays in its directory")),
            RunError::RepositoryChanged { run_id, .. } => Some(format!("nothing was changed or put back; if they are yours, `tnh-conductor resume {run_id} --accept-drift` keeps them as they are (recorded as a `repository_changes_kept` event); if they are the step's, `tnh-conductor resume {run_id} --put-back` puts them back as they were when the step started (recorded as policy violations of the interrupted visit)")),
            RunError::GuardStateUnusable { run_id, path, .. } => Some(format!("nothing was changed or put back; put `{}` back (from a backup or a copy of the run directory) and resume again, or check them yourself (`git show-ref`, `git status` and `git config --list --show-origin` in the repository) and go on without the check: `tnh-conductor resume {run_id} --skip-guard-check` (recorded as a `guard_check_skipped` event of the interrupted visit)", path.display())),
            RunError::StepInProgress { run_id, .. } => Some(format!("`tnh-conductor resume {run_id}` puts that step's snapshot back and runs it again; roll back when the run waits at a gate or has ended")),
            RunError::Gate(super::gate::GateError::NotWaiting { .. }) => Some("list waiting gates with `tnh-conductor gate list`".into()),
            RunError::Gate(super::gate::GateError::Abandoned { run_id, .. }) => Some(format!("nothing was decided; `tnh-conductor runs show {run_id}` shows what the run did; start a new run with `tnh-conductor run`")),
            RunError::Gate(super::gate::GateError::DiedAtGate { run_id, .. }) => Some(format!("nothing was decided; `tnh-conductor resume {run_id}` requests the gate again (as a new visit), then decide it")),
            RunError::Gate(super::gate::GateError::RolledBack { .. }) => Some("nothing was decided; `--accept-drift` decides on what the worktree holds now (recorded as a `drift_accepted` event); `git -C WORKTREE status` shows what it holds".into()),
            RunError::Gate(super::gate::GateError::NotApprover { .. }) => Some("decide as one of the approvers: `--as NAME`".into()),
            RunError::Gate(super::gate::GateError::NoReviewer { .. }) => Some("nothing was decided; say who decides with `--as NAME` (the default is $USER, which is empty here); a gate left waiting stays waiting".into()),
            RunError::Gate(super::gate::GateError::AlreadyDecided { run_id, ended: None, .. }) => Some(format!("its route is taken now: `tnh-conductor resume {run_id}` continues the run")),
            RunError::Gate(super::gate::GateError::AlreadyDecided { run_id, ended: Some(end), .. }) => Some(format!("its route ended the run ({end}); `tnh-conductor runs show {run_id}` shows how")),
            RunError::Gate(super::gate::GateError::TimedOut { run_id, ended: None, .. }) => Some(format!("the run follows its `gate_timed_out` route: `tnh-conductor resume {run_id}` continues it; a longer `timeout:` on the gate gives reviewers more time")),
            RunError::Gate(super::gate::GateError::TimedOut { run_id, ended: Some(end), .. }) => Some(format!("its `gate_timed_out` route ended the run ({end}); `tnh-conductor runs show {run_id}` shows how; a longer `timeout:` on the gate gives reviewers more time")),
            RunError::State(error) => error.hint(),
            RunError::Drive(error) => error.hint(),
            RunError::Runtime(_) => None,
        }
    }
}

/// What `run` needs.
#[allow(missing_debug_implementations)] // the observer is a closure
pub struct RunRequest {
    /// The repository.
    pub repo: PathBuf,
    /// The workflow file.
    pub workflow_path: PathBuf,
    /// `-p name=value` arguments.
    pub params: Vec<String>,
    /// The base ref.
    pub base: String,
    /// The configuration.
    pub config: Config,
    /// Shown every event as it is recorded.
    pub observer: Option<super::recorder::Observer>,
}

/// A run's outcome as the command line reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSummary {
    /// The run.
    pub run_id: RunId,
    /// The run directory.
    pub run_dir: PathBuf,
    /// The worktree.
    pub worktree: PathBuf,
    /// How the drive ended.
    pub end: RunEnd,
}

/// What `resume` does with repository-wide changes — protected and operator branches, tags,
/// stash, notes and replace refs, other runs' refs, git configuration files: anything the
/// guard puts back — found since the step (an agent step or a validation) the run stopped in
/// started. Its agent or validator may have made them before it was killed, or the operator
/// since.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RepositoryChanges {
    /// Refuse, listing them (the default): nothing is changed until the operator decides.
    #[default]
    Refuse,
    /// Keep them as the operator's (`--accept-drift`): left as they are, listed in a
    /// `repository_changes_kept` event.
    Keep,
    /// Put them back as the agent's (`--put-back`): recorded as policy violations of the
    /// interrupted visit.
    PutBack,
}

/// A validated workflow with what a run needs around it.
struct Loaded {
    workflow: Workflow,
    source: String,
    path: PathBuf,
    config: Config,
    catalog: Catalog,
}

/// Loads the workflow a run was started from, for `resume` and gate decisions: a file that is
/// no longer there is said to be gone (with the digest it had), not an invalid workflow.
fn load_recorded_workflow(
    metadata: &RunMetadata,
    config: Config,
    catalog: Catalog,
) -> Result<Loaded, RunError> {
    let path = Path::new(&metadata.workflow_path);
    if !path.exists() {
        return Err(RunError::WorkflowGone {
            run_id: metadata.run_id.clone(),
            path: path.to_path_buf(),
            sha256: metadata.workflow_sha256.clone(),
        });
    }
    load_workflow(path, config, catalog)
}

fn load_workflow(path: &Path, config: Config, catalog: Catalog) -> Result<Loaded, RunError> {
    let mut known = config.known_names();
    known.prompts = catalog.clone();
    let shown = path.display().to_string();
    let (checked, bytes) = check_file_keeping_source(path, &shown, &known);
    let valid = checked.is_valid();
    match (checked.workflow, bytes) {
        (Some(workflow), Some(bytes)) if valid => {
            let source = String::from_utf8_lossy(&bytes).into_owned();
            Ok(Loaded {
                workflow,
                source,
                path: path.to_path_buf(),
                config,
                catalog,
            })
        }
        _ => Err(RunError::InvalidWorkflow {
            file: shown,
            diagnostics: checked.diagnostics,
        }),
    }
}

/// The context a run is driven with. Its script's repository modules come from `pinned` (the
/// copies the run pinned when it started) when given, else from the repository's
/// `.tnh/scripts/` (a run that has not pinned them yet, which then pins what its script
/// loaded).
fn run_context(
    loaded: Loaded,
    params: serde_json::Map<String, serde_json::Value>,
    worktree: &Path,
    started_at: String,
    cancellation: Cancellation,
    pinned: Option<std::collections::BTreeMap<String, String>>,
) -> Result<RunContext, RunError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(RunError::Runtime)?;
    let options = crate::script::HostOptions {
        file: loaded.path.display().to_string(),
        source: loaded.source,
        root: Some(worktree.to_path_buf()),
        limits: crate::script::Limits::default(),
    };
    let mut script = crate::script::ScriptHost::new(options)?;
    // Repository modules come from the operator's repository, as its prompts do (`validate`
    // checked they are there), never from the worktree agents edit.
    if let Some(repository) = loaded.catalog.repository() {
        script.read_modules_from(repository)?;
    }
    if let Some(modules) = pinned {
        script.use_pinned_modules(modules);
    }
    if let Some(text) = &loaded.workflow.script {
        script.load_script(text)?;
    }
    Ok(RunContext {
        workflow: loaded.workflow,
        config: loaded.config,
        catalog: loaded.catalog,
        params,
        host_env: crate::runner::HostEnv::from_process(),
        cancellation,
        runtime,
        script,
        started_at,
    })
}

/// Starts a run: validates, checks parameters, creates the run directory and then the
/// worktree, drives.
///
/// The run directory (with `metadata.json` naming the worktree and branch to come, and the
/// run's lock held) exists before the worktree is created: a process killed while `git
/// worktree add` runs leaves a run that `runs list` shows and `resume` starts over (its
/// worktree made again from scratch), never a worktree and branch no command knows about.
pub fn start_run(request: RunRequest) -> Result<RunSummary, RunError> {
    start_checked(check_run(request)?)
}

/// A run that passed the checks before a run, ready to start.
#[allow(missing_debug_implementations)] // the request's observer is a closure
pub struct CheckedRun {
    request: RunRequest,
    loaded: Loaded,
    params: serde_json::Map<String, serde_json::Value>,
    warnings: Vec<super::preflight::Problem>,
}

impl CheckedRun {
    /// What the checks found that does not stop the run (a CLI newer than the tested ones).
    pub fn warnings(&self) -> &[super::preflight::Problem] {
        &self.warnings
    }

    /// The workflow file, as diagnostics name it.
    pub fn file(&self) -> String {
        self.loaded.path.display().to_string()
    }

    /// How many steps the workflow has (for the summary of `run --check`).
    pub fn steps(&self) -> usize {
        self.loaded.workflow.steps.len()
    }
}

/// The checks before a run (see [`super::preflight`]): the workflow's static checks, the
/// parameters, prompt inputs, validators, agent and planner CLIs — every problem at once, as
/// [`RunError::Checks`], before anything is created.
pub fn check_run(request: RunRequest) -> Result<CheckedRun, RunError> {
    let catalog = Catalog::load(Some(&request.repo))?;
    check_planner_override(&request.config, false)?;
    let mut known = request.config.known_names();
    known.prompts = catalog.clone();
    let path = &request.workflow_path;
    let shown = path.display().to_string();
    let (checked, bytes) = check_file_keeping_source(path, &shown, &known);
    let (Some(workflow), Some(bytes)) = (checked.workflow, bytes) else {
        return Err(RunError::InvalidWorkflow {
            file: shown,
            diagnostics: checked.diagnostics,
        });
    };
    let subject = super::preflight::Subject {
        workflow: &workflow,
        config: &request.config,
        catalog: &catalog,
        repo: &request.repo,
        params: &request.params,
    };
    let (params, problems) = super::preflight::check(&subject);
    let invalid = checked
        .diagnostics
        .iter()
        .any(|diagnostic| diagnostic.severity == crate::workflow::diagnostic::Severity::Error);
    let (params, warnings) = match params {
        Some(params) if !problems.iter().any(super::preflight::Problem::is_error) => {
            (params, problems)
        }
        _ => {
            return Err(RunError::Checks {
                file: shown,
                diagnostics: checked.diagnostics,
                problems,
            });
        }
    };
    if invalid {
        return Err(RunError::InvalidWorkflow {
            file: shown,
            diagnostics: checked.diagnostics,
        });
    }
    let loaded = Loaded {
        workflow,
        source: String::from_utf8_lossy(&bytes).into_owned(),
        path: path.clone(),
        config: request.config.clone(),
        catalog,
    };
    Ok(CheckedRun {
        request,
        loaded,
        params,
        warnings,
    })
}

/// Starts a run that passed its checks.
pub fn start_checked(checked: CheckedRun) -> Result<RunSummary, RunError> {
    let CheckedRun {
        request,
        loaded,
        params,
        ..
    } = checked;
    // Before any work: a signal during the worktree's creation must not kill the conductor
    // alone, with `git` still writing the checkout.
    let cancellation = super::interrupts::listen().map_err(RunError::Runtime)?;
    let prompts = super::pins::prompt_digests(&request.repo);
    let workflow = &loaded.workflow;
    let run_id = new_run_id();
    let workflow_id = WorkflowId::new(workflow.workflow_id.value.as_str());
    let planned = planned_record(&request.repo, &run_id, &workflow_id, &request.base)?;
    let artifacts_root = workflow
        .defaults
        .artifacts_dir
        .as_ref()
        .map_or(DEFAULT_ARTIFACTS_ROOT, |dir| dir.value.as_str())
        .to_owned();
    let run_dir = RunDir::new(&request.repo, &artifacts_root, &run_id);
    let started_at = now();
    let metadata = RunMetadata {
        schema_version: SCHEMA_VERSION,
        run_id: run_id.to_string(),
        workflow_id: workflow_id.to_string(),
        workflow_version: workflow.version.value,
        workflow_path: std::path::absolute(&request.workflow_path)
            .unwrap_or(request.workflow_path.clone())
            .display()
            .to_string(),
        started_at: started_at.clone(),
        artifacts_root,
        entry_step: workflow.entry_step.value.to_string(),
        ended_at: None,
        last_step_id: None,
        termination: None,
        schema_versions: [
            ("metadata", SCHEMA_VERSION),
            ("event", SCHEMA_VERSION),
            ("manifest", SCHEMA_VERSION),
            ("state", SCHEMA_VERSION),
        ]
        .into_iter()
        .map(|(name, version)| (name.to_owned(), version))
        .collect(),
        repo_root: planned.repo_root.display().to_string(),
        worktree_path: planned.worktree_path.display().to_string(),
        branch: planned.branch.clone(),
        base_ref: planned.base_ref.clone(),
        // Known once the worktree is created from it.
        base_sha: String::new(),
        params: params.clone(),
        planner_override: loaded.config.planner_override.clone(),
        workflow_sha256: Some(digest(&loaded.source)),
        config_sha256: Some(config_digest(&loaded.config)),
        config_path: explicit_config_path(&request.repo, &loaded.config),
        // Pinned once the script is loaded, before any agent runs.
        script_modules: None,
        prompts_sha256: Some(prompts),
        base_branch: crate::workspace::base_branch(&planned.repo_root, &request.base),
        result_commit: None,
        landings: Vec::new(),
    };
    let mut recorder = Recorder::create(run_dir.clone(), metadata)?;
    recorder.observe(super::recorder::with_test_signal(
        request.observer,
        &cancellation,
    ));
    let _lock = RunLock::acquire(&run_dir.lock())?;
    let mut state = RunState::new(
        run_id.as_str(),
        workflow_id.as_str(),
        workflow.entry_step.value.as_str(),
    );
    // `runs list` and `status` show the run as running (blocked once this process is gone)
    // while its worktree is being created.
    recorder.write_status(&state, None, Some(std::process::id()))?;
    // Older finished runs' checkouts go before this one's is made (and git scans them all).
    crate::workspace::retention::prune_finished_checkouts(
        &planned.repo_root,
        loaded.config.retention.finished_checkouts,
    );
    // A signal while git creates the worktree is noticed once git is done (it runs to its
    // end: a conductor gone before it would leave it writing the checkout unsupervised).
    let workspace =
        match Workspace::create(&request.repo, &run_id, &workflow_id, Some(&request.base)) {
            Ok(workspace) => workspace,
            // The same signal ended git too (Ctrl-C reaches the terminal's whole process
            // group): the run is kept, and `resume` makes its worktree again from scratch.
            Err(_) if cancellation.is_cancelled() => {
                let how = interrupted_before_start(&mut recorder, &cancellation)?;
                return Ok(RunSummary {
                    run_id,
                    run_dir: run_dir.root().to_path_buf(),
                    worktree: planned.worktree_path.clone(),
                    end: RunEnd::Interrupted { step_id: how },
                });
            }
            Err(error) => {
                // Refused before git created anything (a base that does not resolve, a branch
                // that exists): nothing was started, so no run is left either. A worktree git
                // began to create keeps its run directory, which `resume` starts over from.
                if !planned.worktree_path.exists() {
                    let _ = std::fs::remove_dir_all(run_dir.root());
                }
                return Err(error.into());
            }
        };
    let record = workspace.record().clone();
    recorder.update_metadata(|metadata| keep_record(metadata, &record))?;
    record_run_started(&mut recorder)?;
    recorder.commit(&mut state, None)?;
    let keep = loaded.config.retention.finished_checkouts;
    // A signal noticed by now stops the run before its first step (the driver checks).
    let context = run_context(
        loaded,
        params,
        workspace.path(),
        started_at,
        cancellation,
        None,
    );
    pin_loaded_modules(&mut recorder, &context)?;
    let end = drive(context, &workspace, &mut recorder, state, keep)?;
    Ok(RunSummary {
        run_id,
        run_dir: run_dir.root().to_path_buf(),
        worktree: workspace.path().to_path_buf(),
        end,
    })
}

/// A run whose worktree could not be made because the operator interrupted its creation:
/// marked blocked (no event is recorded before `run_started`), for `resume` to start over.
/// Returns the step the run starts with.
fn interrupted_before_start(
    recorder: &mut Recorder,
    cancellation: &Cancellation,
) -> Result<String, RunError> {
    let signal = cancellation.cause().unwrap_or_else(|| "Ctrl-C".to_owned());
    recorder.write_blocked(&format!(
        "interrupted by the operator ({signal}) while its worktree was created; `tnh-conductor resume {}` makes it again and starts the run",
        recorder.metadata().run_id
    ))?;
    Ok(recorder.metadata().entry_step.clone())
}

/// Pins the repository modules the run's script loaded from its worktree (see
/// [`super::pins`]), before any agent runs.
fn pin_loaded_modules(
    recorder: &mut Recorder,
    context: &Result<RunContext, RunError>,
) -> Result<(), RunError> {
    if let Ok(context) = context {
        super::pins::pin_script_modules(recorder, &context.script.repository_modules())?;
    }
    Ok(())
}

/// Drives the run from `state`, or, when its context could not be made (the workflow's
/// script does not load), ends it with that reason. A run that finishes packs its refs, and
/// older finished runs beyond the `keep` most recent lose their checkout.
fn drive(
    context: Result<RunContext, RunError>,
    workspace: &Workspace,
    recorder: &mut Recorder,
    mut state: RunState,
    keep: usize,
) -> Result<RunEnd, RunError> {
    let end = match context {
        Ok(context) => Driver {
            run: &context,
            workspace,
            recorder,
            state,
        }
        .drive()?,
        Err(error) => unloadable(recorder, &mut state, &error)?,
    };
    if matches!(end, RunEnd::Finished { .. }) {
        // An optimisation only: refs left loose are read the same.
        let _ = workspace.pack_run_refs();
        crate::workspace::retention::prune_finished_checkouts(&workspace.record().repo_root, keep);
    }
    Ok(end)
}

/// A run whose workflow script cannot be loaded — it, or a module it imports, throws or loops
/// at its top level (a module that is missing or does not compile is refused before the run
/// starts, when the workflow is validated) — ends with that reason recorded, instead of
/// staying marked running with nothing said.
fn unloadable(
    recorder: &mut Recorder,
    state: &mut RunState,
    error: &RunError,
) -> Result<RunEnd, RunError> {
    let reason = match error.hint() {
        Some(hint) => format!("the workflow could not be loaded: {error} (hint: {hint})"),
        None => format!("the workflow could not be loaded: {error}"),
    };
    Ok(super::driver::finish_with_error(recorder, state, reason)?)
}

/// Refuses a `--planner` override that names no defined planner (`default`, `rules` or one
/// under `planners:`), before anything is started or written.
fn check_planner_override(config: &Config, recorded: bool) -> Result<(), RunError> {
    let Some(name) = &config.planner_override else {
        return Ok(());
    };
    let known = config.known_names().planners;
    if known.contains(name) {
        return Ok(());
    }
    Err(RunError::UnknownPlanner {
        name: name.clone(),
        known,
        recorded,
    })
}

/// The workspace record `Workspace::create` will make for a run, known before it runs (but
/// the base commit, which is resolved as the worktree is created).
fn planned_record(
    repo: &Path,
    run_id: &RunId,
    workflow_id: &WorkflowId,
    base: &str,
) -> Result<crate::workspace::WorkspaceRecord, RunError> {
    let root = crate::workspace::runs::find_repo_root(repo)?;
    let root = root
        .canonicalize()
        .map_err(ArtifactsError::io("resolve", &root))?;
    Ok(crate::workspace::WorkspaceRecord {
        run_id: run_id.clone(),
        worktree_path: root.join(".tnh").join("worktrees").join(run_id.as_str()),
        repo_root: root,
        branch: crate::workspace::work_branch_name(workflow_id, run_id),
        base_ref: base.to_owned(),
        base_sha: String::new(),
    })
}

/// Keeps the created workspace's record in the metadata (the base ref as the operator gave
/// it stays).
fn keep_record(metadata: &mut RunMetadata, record: &crate::workspace::WorkspaceRecord) {
    metadata.repo_root = record.repo_root.display().to_string();
    metadata.worktree_path = record.worktree_path.display().to_string();
    metadata.branch = record.branch.clone();
    metadata.base_sha = record.base_sha.clone();
}

/// The `run_started` event, once the run's worktree exists.
fn record_run_started(recorder: &mut Recorder) -> Result<(), RunError> {
    let metadata = recorder.metadata();
    let fields = payload([
        ("workflow_id", metadata.workflow_id.clone().into()),
        ("base_sha", metadata.base_sha.clone().into()),
        ("params", serde_json::Value::Object(metadata.params.clone())),
    ]);
    recorder.event(EventType::RunStarted, None, fields)?;
    Ok(())
}

/// The SHA-256 of a workflow's text, as `metadata.json` keeps it.
fn digest(source: &str) -> String {
    crate::artifacts::sha256_hex(source.as_bytes())
}

/// The SHA-256 of the configuration file as it was read, `none` without one.
fn config_digest(config: &Config) -> String {
    config.sha256.clone().unwrap_or_else(|| "none".to_owned())
}

/// The configuration file of a run started with `--config`, absolute, as `metadata.json`
/// records it: `None` when the run uses the repository's own `.tnh/config.yaml` (or none).
fn explicit_config_path(repo: &Path, config: &Config) -> Option<String> {
    let path = config.path.as_ref()?;
    let own = std::fs::canonicalize(repo.join(".tnh/config.yaml")).ok();
    let found = std::fs::canonicalize(path)
        .or_else(|_| std::path::absolute(path))
        .ok()?;
    (own.as_ref() != Some(&found)).then(|| found.display().to_string())
}

/// The configuration a run continues with when no `--config` is given: the file it was
/// started with (`metadata.json`'s `config_path`), else the repository's.
pub fn recorded_config(metadata: &RunMetadata) -> Result<Config, crate::config::ConfigError> {
    Config::load(
        Some(Path::new(&metadata.repo_root)),
        metadata.config_path.as_deref().map(Path::new),
    )
}

/// A run continues with the configuration as it is now: when its file differs from the one
/// the run started (or last continued) with, a `config_changed` event says so. An agent can
/// edit that file (it runs as the operator), so the change is on the record.
fn record_config_change(recorder: &mut Recorder, config: &Config) -> Result<(), RunError> {
    let recorded = recorder.metadata().config_sha256.clone();
    let path = config
        .path
        .as_ref()
        .map_or_else(String::new, |path| path.display().to_string());
    record_file_change(
        recorder,
        EventType::ConfigChanged,
        path,
        recorded,
        config_digest(config),
        |metadata, found| metadata.config_sha256 = Some(found),
    )?;
    let repo = PathBuf::from(&recorder.metadata().repo_root);
    let used = explicit_config_path(&repo, config);
    if recorder.metadata().config_path != used {
        recorder.update_metadata(|metadata| metadata.config_path = used)?;
    }
    Ok(())
}

/// A run continues with its workflow file as it is now (`found`, the digest of the text just
/// loaded): when that differs from the file it started (or last continued) with, a
/// `workflow_changed` event says so.
fn record_workflow_change(recorder: &mut Recorder, found: String) -> Result<(), RunError> {
    let metadata = recorder.metadata();
    let (path, recorded) = (
        metadata.workflow_path.clone(),
        metadata.workflow_sha256.clone(),
    );
    record_file_change(
        recorder,
        EventType::WorkflowChanged,
        path,
        recorded,
        found,
        |metadata, found| metadata.workflow_sha256 = Some(found),
    )
}

/// When the digest `found` of a file the run reads differs from the one `recorded` in the
/// metadata, records `event` with the path and both digests and keeps the new digest with
/// `keep`. Runs recorded without a digest are left alone.
fn record_file_change(
    recorder: &mut Recorder,
    event: EventType,
    path: String,
    recorded: Option<String>,
    found: String,
    keep: impl FnOnce(&mut RunMetadata, String),
) -> Result<(), RunError> {
    let Some(recorded) = recorded else {
        return Ok(());
    };
    if recorded == found {
        return Ok(());
    }
    let fields = payload([
        ("path", path.into()),
        ("recorded_sha256", recorded.into()),
        ("found_sha256", found.clone().into()),
    ]);
    recorder.event(event, None, fields)?;
    recorder.update_metadata(|metadata| keep(metadata, found))?;
    Ok(())
}

/// The workflow a run was started with, loaded and validated again (for gate decisions), and
/// checked against the run in `state` before anything is recorded: the step it is at must
/// still be a step, and its parameters must fit the declarations. Then a change of the file,
/// of the parameters (defaults of new ones) and of the repository's prompts is recorded.
pub fn workflow_of(recorder: &mut Recorder, state: &RunState) -> Result<Workflow, RunError> {
    let metadata = recorder.metadata();
    let repo = PathBuf::from(&metadata.repo_root);
    let config = recorded_config(metadata).map_err(|error| {
        RunError::Artifacts(ArtifactsError::Io {
            action: "load the configuration of",
            path: repo.clone(),
            source: std::io::Error::other(error.to_string()),
        })
    })?;
    let catalog = Catalog::load(Some(&repo))?;
    let Continuation {
        loaded,
        params,
        prompts,
    } = continuation(&repo, metadata, config, catalog, recorder.run_dir(), state)?;
    record_workflow_change(recorder, digest(&loaded.source))?;
    record_params_change(recorder, &params)?;
    super::pins::record_prompts_change(recorder, prompts)?;
    Ok(loaded.workflow)
}

/// What a run continues with (by `resume` or a gate decision): its workflow as the file is
/// now, its parameters resolved against it, and the digests of the repository's prompts.
struct Continuation {
    loaded: Loaded,
    params: super::params::Rechecked,
    prompts: std::collections::BTreeMap<String, String>,
}

/// Loads the run's workflow again and checks that the run still fits it — its current step is
/// a step, its parameters the declared types — before anything is written: a refusal leaves
/// the run as it was, resumable once fixed. The changes are recorded by the caller.
fn continuation(
    repo: &Path,
    metadata: &RunMetadata,
    config: Config,
    catalog: Catalog,
    run_dir: &RunDir,
    state: &RunState,
) -> Result<Continuation, RunError> {
    let prompts = super::pins::prompt_digests(repo);
    let loaded = load_recorded_workflow(metadata, config, catalog)?;
    check_current_step(&loaded, run_dir, state)?;
    let params = recheck_params(&loaded.workflow, &metadata.params)?;
    Ok(Continuation {
        loaded,
        params,
        prompts,
    })
}

/// The run directory of a run id under the repository's default artifacts root.
pub fn find_run_dir(repo: &Path, run_id: &str) -> Result<RunDir, RunError> {
    let root = repo.join(DEFAULT_ARTIFACTS_ROOT);
    // A run folder whose metadata.json is missing is still the run: the commands say what is
    // missing and show what they can read, rather than deny that the run exists.
    if !is_run_id(run_id) || !root.join(run_id).is_dir() {
        return Err(RunError::UnknownRun {
            run_id: run_id.to_owned(),
            dir: root,
        });
    }
    Ok(RunDir::at(root.join(run_id)))
}

/// Refuses to act on a run whose `metadata.json` records another repository than `repo`, the
/// one its run directory was found in: the repository was moved, or copied, since the run
/// started. The run's worktree, work branch and snapshot refs are named by absolute paths of
/// the recorded repository, so continuing would fail half-way (moved) or drive the
/// original's worktree and write refs into its `.git` (copied). A `metadata.json` that cannot
/// be read is left to the readers that need it, which say what is wrong.
pub(crate) fn check_recorded_repository(
    repo: &Path,
    run_dir: &RunDir,
    run_id: &str,
) -> Result<(), RunError> {
    let Ok(metadata) =
        crate::artifacts::read_json::<RunMetadata>(&run_dir.metadata(), "run metadata")
    else {
        return Ok(());
    };
    let recorded = PathBuf::from(&metadata.repo_root);
    let found = crate::workspace::runs::find_repo_root(repo)
        .ok()
        .and_then(|root| root.canonicalize().ok())
        .unwrap_or_else(|| repo.to_path_buf());
    let same = match recorded.canonicalize() {
        Ok(recorded) => recorded == found,
        Err(_) => false,
    };
    if same || metadata.repo_root.is_empty() {
        return Ok(());
    }
    Err(RunError::OtherRepository {
        run_id: run_id.to_owned(),
        recorded_exists: recorded.exists(),
        recorded,
        found,
    })
}

/// Continues an interrupted or crashed run.
///
/// `skip_guard_check` (`resume --skip-guard-check`) goes on when the guard state of the visit
/// the run stopped in is damaged or missing (see [`RunError::GuardStateUnusable`]), without
/// checking that visit, and records a `guard_check_skipped` event; a readable guard state is
/// checked whatever it says.
pub fn resume_run(
    repo: &Path,
    run_id: &str,
    config: Config,
    accept_drift: bool,
    repository: RepositoryChanges,
    skip_guard_check: bool,
    observer: Option<super::recorder::Observer>,
) -> Result<RunSummary, RunError> {
    // Before any work: a signal while the interrupted visit is recovered (orphans killed, its
    // snapshot restored) is noticed once that is done, and the run stops before its next step.
    let cancellation = super::interrupts::listen().map_err(RunError::Runtime)?;
    let run_dir = find_run_dir(repo, run_id)?;
    // A moved or copied repository is refused before anything is done: the orphans below are
    // found by run id, which a copy shares with the original's live run.
    check_recorded_repository(repo, &run_dir, run_id)?;
    let _lock = RunLock::acquire(&run_dir.lock())?;
    // With the lock held no driver is alive: what is left of the run's processes is stopped
    // before anything `resume` may refuse for is checked.
    stop_orphans_first(&run_dir, run_id);
    // A run a newer release wrote is refused before anything of it is opened for writing.
    super::state::check_run_versions(&run_dir)?;
    let mut recorder = Recorder::open(run_dir.clone())?;
    recorder.observe(super::recorder::with_test_signal(observer, &cancellation));
    let events = EventLog::read_all(&run_dir.events())?;
    // A driver killed before its first checkpoint leaves no state.json: the run starts over
    // from its entry step (its events are kept). A run that went past that checkpoint and
    // lost its state.json is refused: starting over would run its visits again under the same
    // numbers, over their artifacts.
    let checkpointed = run_dir.state().is_file();
    let mut state: RunState = if checkpointed {
        super::state::read_state(&run_dir.state())?
    } else {
        if let Some(evidence) = checkpointed_evidence(&run_dir, &events) {
            return Err(RunError::StateMissing {
                run_id: run_id.to_owned(),
                path: run_dir.state(),
                evidence,
            });
        }
        let metadata = recorder.metadata();
        RunState::new(
            &metadata.run_id,
            &metadata.workflow_id,
            &metadata.entry_step,
        )
    };
    // A driver killed while it created the worktree (before `run_started`) left it missing or
    // half made: it is made again from scratch. A run with a checkpoint did start, whatever
    // its log says (a log that lost what the checkpoint accounts for was refused on opening):
    // its worktree holds work and is never removed.
    let never_started = !checkpointed
        && !events
            .iter()
            .any(|event| event.event_type == EventType::RunStarted);
    // A `runs abandon` killed after its event stands: the run is ended now.
    super::abandon::finish_interrupted_abandon(&mut recorder, &mut state)?;
    if let Phase::Finished {
        end: super::state::End::Abandoned,
        reason,
        ..
    } = &state.phase
    {
        return Err(RunError::Abandoned {
            run_id: run_id.to_owned(),
            reason: reason.clone(),
        });
    }
    if let Phase::Finished { end, reason, .. } = &state.phase {
        return Err(RunError::Finished {
            run_id: run_id.to_owned(),
            how: format!("{}: {reason}", end.name()),
        });
    }
    let metadata: RunMetadata = recorder.metadata().clone();
    let catalog = Catalog::load(Some(repo))?;
    let mut config = config;
    let recorded = config.planner_override.is_none();
    if recorded {
        config.planner_override = metadata.planner_override.clone();
    }
    let Continuation {
        loaded,
        params,
        prompts,
    } = continuation(repo, &metadata, config, catalog, &run_dir, &state)?;
    check_planner_override(&loaded.config, recorded)?;
    let pinned = super::pins::pinned_script_modules(&recorder)?;
    let record = workspace_record(&metadata);
    let (workspace, recreated) = if never_started {
        let workspace = match create_again(&record, &metadata) {
            Ok(workspace) => workspace,
            Err(_) if cancellation.is_cancelled() => {
                let how = interrupted_before_start(&mut recorder, &cancellation)?;
                return Ok(RunSummary {
                    run_id: RunId::new(run_id),
                    run_dir: run_dir.root().to_path_buf(),
                    worktree: record.worktree_path.clone(),
                    end: RunEnd::Interrupted { step_id: how },
                });
            }
            Err(error) => return Err(error),
        };
        let created = workspace.record().clone();
        recorder.update_metadata(|metadata| keep_record(metadata, &created))?;
        record_run_started(&mut recorder)?;
        (workspace, false)
    } else {
        // A worktree folder deleted by an agent or a person is checked out again from the work
        // branch; what it held uncommitted shows as drift.
        Workspace::open_or_recreate(&record)?
    };
    replay_started_visit(&loaded.workflow, &run_dir, &mut state)?;
    // An EVALUATE visit whose planner changed the worktree: that change is recorded as the
    // planner's below, never drift.
    let planners = planner_owns_change(&run_dir, &loaded.workflow, &state, &events);
    if !accept_drift
        && let Some((recorded, found)) = drifted(&loaded.workflow, &workspace, &state, planners)?
    {
        // Refused before anything is written: the run stays exactly as it was.
        return Err(RunError::Drift {
            recorded,
            found,
            recreated,
        });
    }
    // The guard state the interrupted step saved is damaged, or was deleted after its process
    // started: what that process did to the repository cannot be checked. Refused (nothing
    // written, nothing put back) until it is put back or the operator skips the check.
    let unusable = unusable_guard_state(&run_dir, &workspace, &state, &events);
    if let Some(unusable) = &unusable
        && !skip_guard_check
    {
        return Err(RunError::GuardStateUnusable {
            run_id: run_id.to_owned(),
            step_id: unusable.step_id.clone(),
            visit: unusable.visit,
            path: unusable.path.clone(),
            problem: unusable.problem.clone(),
            process: unusable.process,
        });
    }
    // Refs and git configuration changed since the interrupted step started: refused
    // (nothing written, nothing put back) until the operator says whose they are.
    if repository == RepositoryChanges::Refuse
        && unusable.is_none()
        && let Some((step_id, visit, found)) =
            repository_changes_of_interrupted_visit(&run_dir, &workspace, &state, &events)?
        && !found.is_clean()
    {
        return Err(RunError::RepositoryChanged {
            run_id: run_id.to_owned(),
            step_id,
            visit,
            changes: describe_repository_changes(&found),
        });
    }
    // A gate decision recorded by a process that died before taking its route stands (its
    // events follow the checkpoint, so this comes before anything else is recorded).
    super::gate::finish_interrupted_decision(&mut recorder, &mut state)?;
    recorder.event(
        EventType::RunResumed,
        None,
        payload([("from_seq", state.events_seq.into())]),
    )?;
    if recreated {
        let fields = payload([
            ("path", workspace.path().display().to_string().into()),
            ("branch", record.branch.clone().into()),
        ]);
        recorder.event(EventType::WorktreeRecreated, None, fields)?;
    }
    record_workflow_change(&mut recorder, digest(&loaded.source))?;
    record_config_change(&mut recorder, &loaded.config)?;
    record_params_change(&mut recorder, &params)?;
    super::pins::record_prompts_change(&mut recorder, prompts)?;
    record_accepted_drift(
        &loaded.workflow,
        &workspace,
        &mut recorder,
        &mut state,
        (accept_drift, planners),
    )?;
    recover_interrupted_visit(
        &loaded.workflow,
        loaded.config.operator_checkout,
        &workspace,
        &mut recorder,
        &mut state,
        (repository, unusable.as_ref()),
    )?;
    recorder.commit(&mut state, None)?;
    if super::gate::resolve_if_timed_out(&mut recorder, &mut state)? {
        recorder.commit(&mut state, None)?;
    }
    let unpinned = pinned.is_none();
    let keep = loaded.config.retention.finished_checkouts;
    let context = run_context(
        loaded,
        params.values,
        workspace.path(),
        metadata.started_at.clone(),
        cancellation,
        pinned,
    );
    // A run that had not pinned its modules (killed before it loaded its script, which only
    // happens before any agent ran; or started by a release that did not pin them) pins them
    // now.
    if unpinned {
        pin_loaded_modules(&mut recorder, &context)?;
    }
    let end = drive(context, &workspace, &mut recorder, state, keep)?;
    Ok(RunSummary {
        run_id: RunId::new(run_id),
        run_dir: run_dir.root().to_path_buf(),
        worktree: workspace.path().to_path_buf(),
        end,
    })
}

/// Ends what is left of the run's processes (a crashed driver's agent, validator or planner)
/// as `resume` begins, before any check it may refuse for — drift, repository changes, a
/// damaged file, an edited workflow — so that a refusal never leaves them running without a
/// time limit, and `--accept-drift` keeps only the changes the operator was shown. The visit
/// the run stopped in, when `state.json` and the log say which, gets its recorded process
/// groups ended too and keeps the pids killed for its `step_interrupted` event (see
/// [`super::orphans::stop_before_checks`]).
fn stop_orphans_first(run_dir: &RunDir, run_id: &str) {
    let visit_dir = super::state::read_state(&run_dir.state())
        .ok()
        .and_then(|state| visit_in_progress(run_dir, &state).ok().flatten())
        .map(|(step_id, visit)| run_dir.visit_dir(&step_id, visit));
    super::orphans::stop_before_checks(run_id, visit_dir.as_deref());
}

/// What shows that a run without `state.json` went past its first checkpoint: an event only a
/// driver writes after it (a step, a route, a gate, an end…), or a visit's folder. `None` for a
/// run killed before it, which starts over.
fn checkpointed_evidence(run_dir: &RunDir, events: &[crate::artifacts::Event]) -> Option<String> {
    // What `run` and a `resume` that starts over record before their first checkpoint.
    let before_checkpoint = [
        EventType::RunStarted,
        EventType::RunResumed,
        EventType::WorktreeRecreated,
        EventType::WorkflowChanged,
        EventType::ConfigChanged,
        EventType::PromptsChanged,
        EventType::ParamsChanged,
    ];
    if let Some(event) = events
        .iter()
        .find(|event| !before_checkpoint.contains(&event.event_type))
    {
        let step = match (&event.step_id, event.visit) {
            (Some(step), Some(visit)) => format!(" of `{step}` #{visit}"),
            (Some(step), None) => format!(" of `{step}`"),
            _ => String::new(),
        };
        let kind = serde_json::to_value(event.event_type)
            .ok()
            .and_then(|value| value.as_str().map(str::to_owned))
            .unwrap_or_else(|| format!("{:?}", event.event_type));
        return Some(format!("event {} is `{kind}`{step}", event.seq));
    }
    let artifacts = run_dir.root().join("artifacts");
    let visited = std::fs::read_dir(&artifacts)
        .map(|mut entries| entries.next().is_some())
        .unwrap_or(false);
    visited.then(|| format!("`{}` holds step folders", artifacts.display()))
}

/// The worktree of a run killed while it was being created, made again from scratch: what git
/// had made of it (a folder checked out halfway, the work branch) is removed first, unless the
/// branch is there, which is checked out again (nothing ran on it yet: it is the base commit).
fn create_again(
    record: &crate::workspace::WorkspaceRecord,
    metadata: &RunMetadata,
) -> Result<Workspace, RunError> {
    stop_leftover_git(&record.worktree_path);
    if Workspace::remove_worktree(record).is_err() {
        // `git worktree remove` refuses a folder whose checkout git never finished; no step
        // ran in it, so nothing in it is anyone's work.
        if record.worktree_path.exists() {
            std::fs::remove_dir_all(&record.worktree_path)
                .map_err(ArtifactsError::io("remove", &record.worktree_path))?;
        }
        Workspace::remove_worktree(record)?;
    }
    let workspace = match Workspace::open_or_recreate(record) {
        Ok((workspace, _)) => workspace,
        // Killed before git made the branch: made as `run` would have, from the base commit
        // when it was known.
        Err(WorkspaceError::Missing { .. }) => {
            let base = if metadata.base_sha.is_empty() {
                metadata.base_ref.as_str()
            } else {
                metadata.base_sha.as_str()
            };
            let workspace = Workspace::create(
                &record.repo_root,
                &record.run_id,
                &WorkflowId::new(metadata.workflow_id.as_str()),
                Some(base),
            )?;
            let created = crate::workspace::WorkspaceRecord {
                base_ref: metadata.base_ref.clone(),
                ..workspace.record().clone()
            };
            return Ok(Workspace::open(&created)?);
        }
        Err(error) => return Err(error.into()),
    };
    // `git worktree add -b` made the branch at the base commit, and nothing ran on it since.
    let branch = format!("refs/heads/{}", record.branch);
    let base_sha = workspace
        .repo_git
        .text(["rev-parse", "--verify", branch.as_str()])?;
    let pre_run = format!("{}/pre_run", crate::workspace::refs_prefix(&record.run_id));
    workspace
        .repo_git
        .run(["update-ref", pre_run.as_str(), base_sha.as_str()])?;
    let created = crate::workspace::WorkspaceRecord {
        base_sha,
        ..record.clone()
    };
    Ok(Workspace::open(&created)?)
}

/// The `git` processes that a SIGKILLed `run` or `resume` left creating a worktree: `git
/// worktree add` (which names the folder) and the checkout it runs in the folder. They are
/// killed, and waited for, before the half-made folder is removed: removing it while they
/// still write into it fails (`Directory not empty`), or leaves their files in the new
/// checkout. Only `git` processes are looked at; one that cannot be inspected is skipped.
fn stop_leftover_git(worktree: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let own = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    let mut killed = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<u32>().ok())
            .filter(|pid| *pid != own)
        else {
            continue;
        };
        let proc_dir = entry.path();
        let is_git = std::fs::read_to_string(proc_dir.join("comm"))
            .is_ok_and(|comm| comm.trim_end() == "git");
        if !is_git {
            continue;
        }
        let works_in =
            std::fs::read_link(proc_dir.join("cwd")).is_ok_and(|cwd| cwd.starts_with(worktree));
        let names = std::fs::read(proc_dir.join("cmdline")).is_ok_and(|command| {
            command
                .split(|byte| *byte == 0)
                .any(|arg| Path::new(std::ffi::OsStr::from_bytes(arg)).starts_with(worktree))
        });
        let Ok(raw) = i32::try_from(pid) else {
            continue;
        };
        if (works_in || names)
            && nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(raw),
                nix::sys::signal::Signal::SIGKILL,
            )
            .is_ok()
        {
            killed.push(raw);
        }
    }
    // Gone, or a zombie its new parent has not reaped yet: either way it writes nothing more.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while killed
        .iter()
        .any(|pid| crate::runner::process::read_stat(*pid).is_some_and(|stat| stat.is_live()))
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Refuses a run whose current step — the one it stopped in, waits at or starts next — the
/// edited workflow no longer has, before anything is written (the run stays resumable once
/// the step is restored).
fn check_current_step(loaded: &Loaded, run_dir: &RunDir, state: &RunState) -> Result<(), RunError> {
    let (step_id, how) = match &state.phase {
        Phase::Running { step_id, .. } => (step_id, "stopped in"),
        Phase::Waiting { step_id, .. } => (step_id, "waits at"),
        Phase::Ready { step_id, .. } if visit_in_progress(run_dir, state)?.is_some() => {
            (step_id, "stopped in")
        }
        Phase::Ready { step_id, .. } => (step_id, "stopped before"),
        Phase::Finished { .. } => return Ok(()),
    };
    if loaded.workflow.step(step_id).is_some() {
        return Ok(());
    }
    Err(RunError::StepRemoved {
        run_id: state.run_id.clone(),
        step_id: step_id.clone(),
        how,
        file: loaded.path.display().to_string(),
    })
}

/// The run's recorded parameters resolved against the workflow as it is now (see
/// [`super::params::recheck_params`]).
fn recheck_params(
    workflow: &Workflow,
    recorded: &serde_json::Map<String, serde_json::Value>,
) -> Result<super::params::Rechecked, RunError> {
    Ok(super::params::recheck_params(workflow, recorded)?)
}

/// Records what re-resolving the parameters changed (a `params_changed` event with the new
/// parameters' defaults and the names no longer declared) and keeps the resolved parameters in
/// `metadata.json`; nothing when nothing changed.
fn record_params_change(
    recorder: &mut Recorder,
    params: &super::params::Rechecked,
) -> Result<(), RunError> {
    // A gate decision finished on the way may have recorded it already.
    if recorder.metadata().params == params.values {
        return Ok(());
    }
    let fields = payload([
        ("added", serde_json::Value::Object(params.added.clone())),
        (
            "removed",
            serde_json::Value::Array(params.removed.iter().cloned().map(Into::into).collect()),
        ),
    ]);
    recorder.event(EventType::ParamsChanged, None, fields)?;
    let values = params.values.clone();
    recorder.update_metadata(|metadata| metadata.params = values)?;
    Ok(())
}

/// The driver does not checkpoint when a visit starts; its `step_started` event, made durable
/// before the step does anything, stands for it. Replaying that event on the checkpoint (the
/// same pure `start_step` the driver applied) gives the state the driver held: the visit
/// running, which `recover_interrupted_visit` then handles.
fn replay_started_visit(
    workflow: &Workflow,
    run_dir: &RunDir,
    state: &mut RunState,
) -> Result<(), RunError> {
    if matches!(state.phase, Phase::Ready { .. })
        && visit_in_progress(run_dir, state)?.is_some()
        && let Ok(running) = super::transition::start_step(workflow, state)
    {
        *state = running;
    }
    Ok(())
}

/// The visit a run was in the middle of when its driver stopped: the checkpoint's running
/// visit, or its next visit when a `step_started` event for it follows the checkpoint.
pub(crate) fn visit_in_progress(
    run_dir: &RunDir,
    state: &RunState,
) -> Result<Option<(String, u32)>, RunError> {
    match &state.phase {
        Phase::Running { step_id, visit } => Ok(Some((step_id.clone(), *visit))),
        Phase::Ready { step_id, visit } => {
            let events = EventLog::read_all(&run_dir.events())?;
            let started = events.iter().any(|event| {
                event.seq > state.events_seq
                    && event.event_type == EventType::StepStarted
                    && event.step_id.as_deref() == Some(step_id.as_str())
                    && event.visit == Some(*visit)
            });
            Ok(started.then(|| (step_id.clone(), *visit)))
        }
        Phase::Waiting { .. } | Phase::Finished { .. } => Ok(None),
    }
}

/// The workspace a run's metadata records.
pub(super) fn workspace_record(metadata: &RunMetadata) -> crate::workspace::WorkspaceRecord {
    crate::workspace::WorkspaceRecord {
        run_id: RunId::new(metadata.run_id.clone()),
        repo_root: PathBuf::from(&metadata.repo_root),
        worktree_path: PathBuf::from(&metadata.worktree_path),
        branch: metadata.branch.clone(),
        base_ref: metadata.base_ref.clone(),
        base_sha: metadata.base_sha.clone(),
    }
}

/// Before a gate decision: the worktree must still be the one the gate's checkpoint recorded,
/// since that is what the reviewer was shown. A change is refused (nothing recorded), or with
/// `accept_drift` recorded as a `drift_accepted` event and taken as the new checkpoint.
pub(super) fn check_drift_before_decision(
    workflow: &Workflow,
    recorder: &mut Recorder,
    state: &mut RunState,
    accept_drift: bool,
) -> Result<(), RunError> {
    let record = workspace_record(recorder.metadata());
    let (workspace, recreated) = Workspace::open_or_recreate(&record)?;
    // A run waiting at a gate is in no visit: no planner's change is exempt.
    if accept_drift {
        return record_accepted_drift(workflow, &workspace, recorder, state, (true, false));
    }
    match drifted(workflow, &workspace, state, false)? {
        Some((recorded, found)) => Err(RunError::Drift {
            recorded,
            found,
            recreated,
        }),
        None => Ok(()),
    }
}

/// The recorded and current fingerprints, when the worktree changed since the last checkpoint.
///
/// A visit that was running when the process died is exempt when the worktree goes back to
/// its own pre-step snapshot anyway, or when it is a step that may change the worktree without
/// one (a validation, a rollback). An agent step with no snapshot yet never reached its agent:
/// its worktree must still be the checkpoint's. An EVALUATE is exempt when `planners` (see
/// [`planner_owns_change`]): what changed is its planner's, recorded as its violation.
fn drifted(
    workflow: &Workflow,
    workspace: &Workspace,
    state: &RunState,
    planners: bool,
) -> Result<Option<(Fingerprint, Fingerprint)>, RunError> {
    let Some(recorded) = state.fingerprint.clone() else {
        return Ok(None);
    };
    if let Phase::Running { step_id, visit } = &state.phase {
        let opcode = workflow.step(step_id).map(|step| step.body.opcode());
        // An EVALUATE, a GATE or a STOP changes no file: a change found after one was made by
        // someone else, and is drift like any other — unless an EVALUATE's planner process
        // was caught changing it, or was running when the process died.
        if matches!(opcode, Some(Opcode::RunValidation | Opcode::Rollback))
            || (opcode == Some(Opcode::RunAgent)
                && own_snapshot_is_latest(workspace, state, step_id, *visit)?)
            || (opcode == Some(Opcode::Evaluate) && planners)
        {
            return Ok(None);
        }
    }
    let found = workspace.fingerprint()?;
    // A success STOP commits the worktree's files before the run's end is checkpointed: the
    // same files on the run's own result commit are the kernel's doing.
    let committed_here = found.tree == recorded.tree
        && found.head != recorded.head
        && workspace.is_result_commit(&found.head)?;
    if found == recorded || committed_here {
        return Ok(None);
    }
    Ok(Some((recorded, found)))
}

/// Whether the latest pre-step snapshot is the one taken for this visit.
fn own_snapshot_is_latest(
    workspace: &Workspace,
    state: &RunState,
    step_id: &str,
    visit: u32,
) -> Result<bool, RunError> {
    let own = format!(
        "{}/pre_step/{step_id}/{visit}",
        crate::workspace::refs_prefix(&RunId::new(state.run_id.clone()))
    );
    Ok(workspace
        .latest_pre_step()?
        .is_some_and(|snapshot| snapshot.reference == own))
}

fn record_accepted_drift(
    workflow: &Workflow,
    workspace: &Workspace,
    recorder: &mut Recorder,
    state: &mut RunState,
    (accept_drift, planners): (bool, bool),
) -> Result<(), RunError> {
    if !accept_drift {
        return Ok(());
    }
    let Some((recorded, found)) = drifted(workflow, workspace, state, planners)? else {
        return Ok(());
    };
    let fields = payload([
        (
            "recorded",
            serde_json::to_value(&recorded).unwrap_or_default(),
        ),
        ("found", serde_json::to_value(&found).unwrap_or_default()),
    ]);
    recorder.event(EventType::DriftAccepted, None, fields)?;
    state.fingerprint = Some(found);
    Ok(())
}

/// A visit marked running when the process died: if its `step_completed` was recorded after
/// the last checkpoint, its route is taken now; otherwise it is recorded as interrupted, the
/// worktree goes back to the visit's pre-step snapshot, and the step runs again as a new visit.
///
/// `unusable` is the visit's damaged or missing guard state, which `resume --skip-guard-check`
/// goes on without: the visit is not checked, and a `guard_check_skipped` event says so.
fn recover_interrupted_visit(
    workflow: &Workflow,
    operator_checkout: OperatorCheckout,
    workspace: &Workspace,
    recorder: &mut Recorder,
    state: &mut RunState,
    (repository, unusable): (RepositoryChanges, Option<&UnusableGuardState>),
) -> Result<(), RunError> {
    let Phase::Running { step_id, visit } = state.phase.clone() else {
        return Ok(());
    };
    let events = EventLog::read_all(&recorder.run_dir().events())?;
    // A `resume` killed after it recorded the visit as interrupted (its orphans killed, its
    // snapshot restored) but before its checkpoint: that record stands, and only what followed
    // it is done now.
    let recorded = events.iter().rev().find(|event| {
        event.seq > state.events_seq
            && event.event_type == EventType::StepInterrupted
            && event.step_id.as_deref() == Some(step_id.as_str())
            && event.visit == Some(visit)
    });
    if let Some(recorded) = recorded {
        let cause = recorded.payload.get("cause").cloned().unwrap_or_default();
        // An evaluation's violations were recorded before that record: carried now.
        let planner = PlannerVisit::of(workflow, &events, (&step_id, visit));
        if let Some(planner) = planner {
            planner.recover(workflow, workspace, recorder, state, None)?;
        }
        // The resume that recorded it was killed before it removed the saved guard state.
        crate::opcode::remove_guard_state(
            &recorder
                .run_dir()
                .visit_dir(&step_id, visit)
                .join(GUARD_STATE_FILE),
        )?;
        record_interrupted_manifest(workflow, recorder, &events, (&step_id, visit), cause)?;
        state.count_interrupted_visit(&step_id);
        state.phase = Phase::Ready {
            step_id,
            visit: visit + 1,
        };
        return Ok(());
    }
    let orphans = super::orphans::kill_run_orphans(&state.run_id);
    let completed = events.iter().rev().find(|event| {
        event.event_type == EventType::StepCompleted
            && event.step_id.as_deref() == Some(step_id.as_str())
            && event.visit == Some(visit)
    });
    if let Some(event) = completed {
        let outcome = event
            .payload
            .get("outcome")
            .and_then(|value| value.as_str())
            .and_then(|text| text.parse::<Outcome>().ok());
        if let Some(outcome) = outcome {
            // An evaluation whose planner changed the worktree: its route carries the
            // violation; the checkpoint takes the worktree as the planner left it.
            if PlannerVisit::of(workflow, &events, (&step_id, visit)).is_some()
                && planner_change_recorded(&events, &step_id, visit)
            {
                state.fingerprint = Some(workspace.fingerprint()?);
            }
            let report = StepReport {
                outcome,
                policy_violation: event
                    .payload
                    .get("policy_violation")
                    .and_then(|value| value.as_str())
                    .map(str::to_owned),
                proposed_goldens: event
                    .payload
                    .get("proposed_goldens")
                    .and_then(serde_json::Value::as_bool)
                    .unwrap_or(false),
                stop_reason: event.text("stop_reason").map(str::to_owned),
            };
            return take_recorded_route(workflow, recorder, state, &step_id, visit, &report);
        }
    }
    // Why the visit did not finish: it could not start (a missing program, an unconfigured
    // validator), the operator interrupted it (Ctrl-C, SIGTERM, SIGHUP), or else the driving
    // process died during it.
    let of_this_visit = |kind: EventType, field: &str| {
        events.iter().rev().find_map(|event| {
            let this_visit = event.event_type == kind
                && event.step_id.as_deref() == Some(step_id.as_str())
                && event.visit == Some(visit);
            this_visit.then(|| event.text(field)).flatten()
        })
    };
    let cause = match (
        of_this_visit(EventType::StepFailed, "error"),
        of_this_visit(EventType::RunInterrupted, "cause"),
    ) {
        (Some(error), _) => format!("the step could not run: {error}"),
        (None, Some(interrupt)) => interrupt.to_owned(),
        (None, None) => "the driving process ended during the step".to_owned(),
    };
    // What is left of the step's recorded process groups: members without `TNH_RUN_ID` too.
    let visit_dir = recorder.run_dir().visit_dir(&step_id, visit);
    let orphans = super::orphans::end_recorded_groups(&visit_dir, orphans);
    // A planner process was running (or not yet checked) when the process died.
    let planner_ran = guard_saved(recorder.run_dir(), &step_id, visit);
    let mut fields: Payload = payload([
        ("cause", cause.into()),
        ("killed_orphans", orphans.killed.into()),
    ]);
    if !orphans.survivors.is_empty() {
        // Still alive after seconds of stopping and killing: said, never hidden.
        fields.insert("surviving_orphans".into(), orphans.survivors.into());
    }
    // A `resume --skip-guard-check` killed after it recorded the skip does not check again.
    let skipped = of_this_visit(EventType::GuardCheckSkipped, "reason").is_some();
    match unusable.filter(|unusable| unusable.is_of(&step_id, visit)) {
        _ if skipped => {}
        Some(unusable) => {
            let skip = payload([
                ("guard_state", unusable.path.display().to_string().into()),
                (
                    "reason",
                    format!("the guard state {}", unusable.problem).into(),
                ),
                ("by", "operator".into()),
            ]);
            recorder.event(EventType::GuardCheckSkipped, Some((&step_id, visit)), skip)?;
        }
        None => check_interrupted_agent(
            workspace,
            operator_checkout,
            recorder,
            (&step_id, visit),
            &mut fields,
            repository,
        )?,
    }
    if let Some(planner) = PlannerVisit::of(workflow, &events, (&step_id, visit)) {
        let found = PlannerFound {
            guard_report: fields.get("guard_report"),
            operator_checkout,
            planner_ran,
        };
        planner.recover(workflow, workspace, recorder, state, Some(found))?;
    }
    if own_snapshot_is_latest(workspace, state, &step_id, visit)? {
        let record = workspace.rollback(RollbackTarget::PreStep)?;
        fields.insert(
            "restored".into(),
            serde_json::to_value(&record).unwrap_or_default(),
        );
    }
    let cause = fields.get("cause").cloned().unwrap_or_default();
    recorder.event(EventType::StepInterrupted, Some((&step_id, visit)), fields)?;
    // Removed once the visit is recorded as interrupted (not when it was checked): a `resume`
    // killed in between checks it again, instead of finding it gone.
    crate::opcode::remove_guard_state(
        &recorder
            .run_dir()
            .visit_dir(&step_id, visit)
            .join(GUARD_STATE_FILE),
    )?;
    record_interrupted_manifest(workflow, recorder, &events, (&step_id, visit), cause)?;
    // The visit never finished: it keeps its number and folder, but not a `max_visits` slot.
    state.count_interrupted_visit(&step_id);
    state.phase = Phase::Ready {
        step_id: step_id.clone(),
        visit: visit + 1,
    };
    let _ = StepId::new(step_id);
    Ok(())
}

/// The manifest of a visit that did not finish (termination `interrupted`), listing every file
/// its step left in the visit's folder — an agent's prompt, raw output, stderr and run log, a
/// validation's validator outputs and collected artifacts, an evaluation's planner input, a
/// rollback's record… — so the evidence of an interrupted visit is in the run's record like
/// any other's; the entries of its run log become `agent_runlog` events unless they already
/// are. Its opcode is the one the visit ran with (its `step_started` event), not the edited
/// workflow's. A rollback that reset the worktree before it was interrupted keeps what it
/// undid in the summary (`rollback`). A visit that already has its manifest keeps it.
fn record_interrupted_manifest(
    workflow: &Workflow,
    recorder: &mut Recorder,
    events: &[crate::artifacts::Event],
    (step_id, visit): (&str, u32),
    cause: serde_json::Value,
) -> Result<(), RunError> {
    use crate::artifacts::StepManifest;
    let run_dir = recorder.run_dir().clone();
    if run_dir.visit_manifest(step_id, visit).exists() {
        return Ok(());
    }
    // The agent's run-log entries become events once: here, unless the driver did it when the
    // operator's interrupt cut the visit short.
    if !super::driver::runlog_recorded(events, (step_id, visit)) {
        super::driver::ingest_runlog(recorder, step_id, visit)?;
    }
    let visit_dir = run_dir.visit_dir(step_id, visit);
    let artifacts = interrupted_visit_files(&visit_dir)
        .into_iter()
        .map(|(name, role, media_type)| crate::artifacts::ArtifactEntry {
            role,
            path: run_dir.relative(&visit_dir.join(name)),
            media_type: media_type.to_owned(),
            required: false,
            important: true,
        })
        .collect();
    let started = events.iter().find(|event| {
        event.event_type == EventType::StepStarted
            && event.step_id.as_deref() == Some(step_id)
            && event.visit == Some(visit)
    });
    let started_at = started
        .map(|event| event.timestamp.clone())
        .unwrap_or_default();
    let opcode = started
        .and_then(|event| event.text("opcode"))
        .map(str::to_owned)
        .or_else(|| {
            workflow
                .step(step_id)
                .map(|step| step.body.opcode().name().to_owned())
        })
        .unwrap_or_default();
    let mut evidence_summary = serde_json::json!({ "interrupted": true, "cause": cause });
    if let Ok((bytes, false)) =
        crate::artifacts::safe_files::read_regular(&visit_dir.join(ROLLBACK_RECORD), 1024 * 1024)
        && let Ok(record) = serde_json::from_slice::<serde_json::Value>(&bytes)
    {
        evidence_summary["rollback"] = record;
    }
    let manifest = StepManifest {
        schema_version: SCHEMA_VERSION,
        step_id: step_id.to_owned(),
        opcode,
        visit,
        started_at,
        ended_at: now(),
        termination: "interrupted".to_owned(),
        evidence_summary,
        artifacts,
        timings_ms: None,
    };
    Ok(recorder.write_manifest(&manifest)?)
}

/// The record a ROLLBACK visit writes once it reset the worktree.
const ROLLBACK_RECORD: &str = "rollback.json";

/// The files an interrupted visit's step left in its folder, by the names the opcodes write
/// (`validators/<id>/…` for a validation's validators), each with its role and media type, in
/// a stable order. What the conductor keeps only while a step runs (the saved guard state, the
/// process-group records, the pids a refused `resume` killed) and anything else an agent
/// left there are not evidence of the step, and are not listed; nothing is followed.
fn interrupted_visit_files(
    visit_dir: &Path,
) -> Vec<(String, crate::artifacts::ArtifactRole, &'static str)> {
    use crate::artifacts::ArtifactRole as Role;
    use crate::runner::artifacts::names;
    let top: [(&str, Role, &str); 22] = [
        (names::PROMPT, Role::RunnerPrompt, "text/markdown"),
        (
            crate::artifacts::PROMPT_INPUTS_FILE,
            Role::PromptInputs,
            "application/json",
        ),
        (
            names::STDOUT_JSONL,
            Role::RunnerTranscript,
            "application/x-ndjson",
        ),
        (names::STDOUT_TEXT, Role::RunnerTranscript, "text/plain"),
        (names::STDERR, Role::RunnerStderr, "text/plain"),
        (
            "transcript.md",
            Role::RunnerTranscriptMarkdown,
            "text/markdown",
        ),
        (
            "final_response.md",
            Role::RunnerFinalResponse,
            "text/markdown",
        ),
        (
            "runner_metadata.json",
            Role::RunnerMetadata,
            "application/json",
        ),
        (
            crate::artifacts::RUNLOG_FILE,
            Role::AgentRunlog,
            "application/x-ndjson",
        ),
        ("workspace.diff", Role::WorkspaceDiff, "text/x-diff"),
        (
            "workspace_status.json",
            Role::WorkspaceStatus,
            "application/json",
        ),
        (
            "policy_summary.json",
            Role::PolicySummary,
            "application/json",
        ),
        (
            "validation_report.json",
            Role::ValidationReport,
            "application/json",
        ),
        (
            "harness_report.json",
            Role::HarnessReport,
            "application/json",
        ),
        ("planner_input.json", Role::PlannerInput, "application/json"),
        (
            "planner_decision.json",
            Role::PlannerDecision,
            "application/json",
        ),
        ("planner_prompt.md", Role::PlannerPrompt, "text/markdown"),
        (
            "planner_attempts.json",
            Role::PlannerAttempts,
            "application/json",
        ),
        (GATE_REQUEST_FILE, Role::GateRequest, "application/json"),
        ("run.diff", Role::WorkspaceDiff, "text/x-diff"),
        ("gate_outcome.json", Role::GateOutcome, "application/json"),
        (ROLLBACK_RECORD, Role::RollbackRecord, "application/json"),
    ];
    let is_file = |path: &Path| {
        std::fs::symlink_metadata(path).is_ok_and(|metadata| metadata.file_type().is_file())
    };
    let mut files: Vec<(String, Role, &'static str)> = top
        .into_iter()
        .filter(|(name, _, _)| is_file(&visit_dir.join(name)))
        .map(|(name, role, media_type)| (name.to_owned(), role, media_type))
        .collect();
    files.extend(
        crate::artifacts::tool_logs(visit_dir)
            .into_iter()
            .map(|name| (name, Role::ToolLog, "text/plain")),
    );
    let validators = visit_dir.join("validators");
    let mut ids: Vec<String> = std::fs::read_dir(&validators)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
        .filter_map(|entry| entry.file_name().into_string().ok())
        .collect();
    ids.sort();
    for id in ids {
        let folder = validators.join(&id);
        for (name, role, media_type) in [
            ("stdout.txt", Role::ValidationStdout, "text/plain"),
            ("stderr.txt", Role::ValidationStderr, "text/plain"),
            (
                "harness_report.json",
                Role::HarnessReport,
                "application/json",
            ),
        ] {
            if is_file(&folder.join(name)) {
                files.push((format!("validators/{id}/{name}"), role, media_type));
            }
        }
        let collected = folder.join("artifacts");
        let mut found = Vec::new();
        collect_files(&collected, "", &mut found, 0);
        found.sort();
        files.extend(found.into_iter().map(|path| {
            (
                format!("validators/{id}/artifacts/{path}"),
                Role::ValidationArtifact,
                "application/octet-stream",
            )
        }));
    }
    files
}

/// The regular files under `dir` (links not followed, at most 16 folders deep and 10 000
/// files), as paths relative to it.
fn collect_files(dir: &Path, prefix: &str, found: &mut Vec<String>, depth: usize) {
    if depth > 16 || found.len() >= 10_000 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let relative = format!("{prefix}{name}");
        if kind.is_file() && found.len() < 10_000 {
            found.push(relative);
        } else if kind.is_dir() {
            collect_files(&entry.path(), &format!("{relative}/"), found, depth + 1);
        }
    }
}

/// An agent step whose driving process died (a crash, a power loss, or an agent that killed
/// it) before its guard could check it: the guard saved before the agent started checks it
/// now — protected refs and git configuration are put back, the worktree's HEAD re-attached —
/// and what it found is recorded in the `step_interrupted` event (`guard_report`) and as
/// `policy_violation` events of the interrupted visit, by the rules that need no policy
/// (protected refs, the operator's HEAD and checkout — the latter as `operator_checkout` in
/// the configuration says).
///
/// With [`RepositoryChanges::Keep`] (`resume --accept-drift`), the repository-wide changes
/// found now (once the visit's orphans are gone) are the operator's: listed in a
/// `repository_changes_kept` event and left as they are; the guard then checks only the run's
/// own refs and worktree (and reports the operator's HEAD and checkout). Otherwise —
/// `--put-back`, or nothing changed when `resume` looked — everything is checked and put back.
fn check_interrupted_agent(
    workspace: &Workspace,
    operator_checkout: OperatorCheckout,
    recorder: &mut Recorder,
    (step_id, visit): (&str, u32),
    fields: &mut Payload,
    repository: RepositoryChanges,
) -> Result<(), RunError> {
    let saved = recorder
        .run_dir()
        .visit_dir(step_id, visit)
        .join(GUARD_STATE_FILE);
    let Some(mut guard) = workspace.load_guard(&saved)? else {
        return Ok(());
    };
    let kept = match repository {
        RepositoryChanges::Keep => Some(guard.compare()?).filter(|found| !found.is_clean()),
        RepositoryChanges::Refuse | RepositoryChanges::PutBack => None,
    };
    if let Some(kept) = kept {
        let changes = payload([
            (
                "ref_changes",
                serde_json::to_value(&kept.ref_changes).unwrap_or_default(),
            ),
            (
                "git_config_changed",
                serde_json::to_value(&kept.git_config_changed).unwrap_or_default(),
            ),
            ("by", "operator".into()),
        ]);
        recorder.event(
            EventType::RepositoryChangesKept,
            Some((step_id, visit)),
            changes,
        )?;
        guard = guard.with_scope(GuardScope::RunOwn);
    }
    let report = guard.verify()?;
    fields.insert(
        "guard_report".into(),
        serde_json::to_value(&report).unwrap_or_default(),
    );
    let violations = Policy::compile(&PolicySpec::default())
        .map(|policy| {
            policy
                .with_operator_checkout(operator_checkout)
                .check_guard_report(&report)
        })
        .unwrap_or_default();
    for violation in violations {
        let fields = payload([(
            "violation",
            serde_json::to_value(&violation).unwrap_or_default(),
        )]);
        recorder.event(EventType::PolicyViolation, Some((step_id, visit)), fields)?;
    }
    Ok(())
}

/// The repository-wide changes since the visit the run stopped in started (compared
/// with the guard state it saved; nothing written), with the visit; `None` when the run did
/// not stop in a visit still to be checked (no saved guard state, or the visit's end
/// or its interruption already recorded).
fn repository_changes_of_interrupted_visit(
    run_dir: &RunDir,
    workspace: &Workspace,
    state: &RunState,
    events: &[crate::artifacts::Event],
) -> Result<Option<(String, u32, GuardReport)>, RunError> {
    let Phase::Running { step_id, visit } = &state.phase else {
        return Ok(None);
    };
    let settled = events.iter().any(|event| {
        matches!(
            event.event_type,
            EventType::StepCompleted | EventType::StepInterrupted
        ) && event.step_id.as_deref() == Some(step_id.as_str())
            && event.visit == Some(*visit)
    });
    if settled {
        return Ok(None);
    }
    let saved = run_dir.visit_dir(step_id, *visit).join(GUARD_STATE_FILE);
    let Some(guard) = workspace.load_guard(&saved)? else {
        return Ok(None);
    };
    Ok(Some((step_id.clone(), *visit, guard.compare()?)))
}

/// The guard state of the visit the run stopped in, when it cannot be used although `resume`
/// needs it to check the visit: see [`unusable_guard_state`].
#[derive(Debug, Clone)]
struct UnusableGuardState {
    step_id: String,
    visit: u32,
    /// `guard_state.json` in the visit's folder.
    path: PathBuf,
    /// `is damaged (…)`, `is missing although …`.
    problem: String,
    /// `agent` or `validators`.
    process: &'static str,
}

impl UnusableGuardState {
    fn is_of(&self, step_id: &str, visit: u32) -> bool {
        self.step_id == step_id && self.visit == visit
    }
}

/// The guard state (`guard_state.json`) of the visit the run stopped in, when `resume` would
/// check the visit against it and cannot:
///
/// - it is there but damaged (not JSON, cut short, written by a newer release, unreadable),
///   and the visit's end, its interruption or a skipped check is not recorded yet;
/// - it is gone although the events show that the visit's process started (a
///   `runner_started` event: an agent step records it once its guard state is saved, a
///   validation before each validator) and that nothing after it ended the visit while the
///   driving process was alive — no `runner_completed` (the driver saw the process end and
///   checked it itself), `step_failed` (its process could not start, or the step failed
///   after its check), `run_interrupted` (an operator's signal, after the check), nor the
///   visit's end. Only the driving process removes the file, once the step is checked, so an
///   agent or a person deleted it, and what the agent did is unchecked.
///
/// A visit whose agent never started (its program missing) has no guard state, and needs none.
fn unusable_guard_state(
    run_dir: &RunDir,
    workspace: &Workspace,
    state: &RunState,
    events: &[crate::artifacts::Event],
) -> Option<UnusableGuardState> {
    let Phase::Running { step_id, visit } = &state.phase else {
        return None;
    };
    let of_visit = |kinds: &[EventType]| {
        events.iter().find(|event| {
            kinds.contains(&event.event_type)
                && event.step_id.as_deref() == Some(step_id.as_str())
                && event.visit == Some(*visit)
        })
    };
    if of_visit(&[
        EventType::StepCompleted,
        EventType::StepInterrupted,
        EventType::GuardCheckSkipped,
    ])
    .is_some()
    {
        return None;
    }
    let process = match of_visit(&[EventType::StepStarted]).and_then(|event| event.text("opcode")) {
        Some("RUN_VALIDATION") => "validators",
        _ => "agent",
    };
    let path = run_dir.visit_dir(step_id, *visit).join(GUARD_STATE_FILE);
    let problem = match workspace.load_guard(&path) {
        Ok(Some(_)) => return None,
        Err(WorkspaceError::Io {
            action: "parse",
            source,
            ..
        }) => format!("is damaged ({source})"),
        Err(error @ WorkspaceError::UnknownGuardState { .. }) => {
            format!("cannot be read ({error}; a newer tnh-conductor wrote it)")
        }
        Err(error) => format!("cannot be used ({error})"),
        Ok(None) => {
            let started = of_visit(&[EventType::RunnerStarted])?;
            let ended = of_visit(&[
                EventType::RunnerCompleted,
                EventType::StepFailed,
                EventType::RunInterrupted,
            ]);
            if ended.is_some() {
                return None;
            }
            format!(
                "is missing, although the events show that the {process} started (event {}, `runner_started`) and the visit never ended: only the conductor removes it, once the step is checked",
                started.seq
            )
        }
    };
    Some(UnusableGuardState {
        step_id: step_id.clone(),
        visit: *visit,
        path,
        problem,
        process,
    })
}

/// One line per repository-wide change: `REF (CLASS): BEFORE → NOW`, or the git
/// configuration file that changed.
fn describe_repository_changes(report: &GuardReport) -> Vec<String> {
    let value = |value: &Option<String>| {
        value
            .as_deref()
            .map_or_else(|| "(none)".to_owned(), |value| short(value).to_owned())
    };
    let refs = report.ref_changes.iter().map(|change| {
        let class = serde_json::to_value(change.class)
            .ok()
            .and_then(|class| class.as_str().map(|class| class.replace('_', " ")))
            .unwrap_or_default();
        format!(
            "`{}` ({class}): {} → {}",
            change.refname,
            value(&change.before),
            value(&change.after)
        )
    });
    let files = report
        .git_config_changed
        .iter()
        .map(|file| format!("git configuration file `{file}` changed"));
    refs.chain(files).collect()
}

fn take_recorded_route(
    workflow: &Workflow,
    recorder: &mut Recorder,
    state: &mut RunState,
    step_id: &str,
    visit: u32,
    report: &StepReport,
) -> Result<(), RunError> {
    let completion = super::routing::Completion::Recovered;
    super::routing::record_route(
        workflow,
        recorder,
        state,
        (step_id, visit),
        report,
        completion,
    )?;
    Ok(())
}

/// An EVALUATE visit the run stopped in (by its `step_started` event's opcode, else the
/// workflow's). EVALUATE changes nothing, and its planner process runs in the worktree, so
/// what changed since the visit started is its planner's (docs/planner.md): never drift.
struct PlannerVisit<'a> {
    step_id: &'a str,
    visit: u32,
}

/// What `resume` found when it checked an interrupted EVALUATE visit by its saved guard.
struct PlannerFound<'a> {
    /// The `guard_report` of the visit's `step_interrupted` event, when it had a saved guard.
    guard_report: Option<&'a serde_json::Value>,
    operator_checkout: OperatorCheckout,
    /// The visit had saved its guard state: its planner process was running (or its check
    /// not recorded yet) when the process died, so the worktree's change is its.
    planner_ran: bool,
}

impl<'a> PlannerVisit<'a> {
    fn of(
        workflow: &Workflow,
        events: &[crate::artifacts::Event],
        (step_id, visit): (&'a str, u32),
    ) -> Option<Self> {
        let started = events.iter().rev().find(|event| {
            event.event_type == EventType::StepStarted
                && event.step_id.as_deref() == Some(step_id)
                && event.visit == Some(visit)
        });
        let evaluation = match started.and_then(|event| event.text("opcode")) {
            Some(opcode) => opcode == Opcode::Evaluate.name(),
            None => workflow
                .step(step_id)
                .is_some_and(|step| step.body.opcode() == Opcode::Evaluate),
        };
        evaluation.then_some(PlannerVisit { step_id, visit })
    }

    /// Records what the planner changed as violations of the visit, as an uninterrupted
    /// EVALUATE does: with `found` (the visit is being recorded as interrupted now), what the
    /// saved guard found that only a planner is charged with (a changed git configuration
    /// file, a commit, a push, a worktree HEAD moved off the work branch), and — when the
    /// planner was running as the process died — the worktree's change since the checkpoint
    /// the visit started from, unless the visit recorded its planner's change itself (Ctrl-C,
    /// or a crash after the check). Every violation of the visit is then carried into the
    /// run's safety state (pending until a ROLLBACK), and a worktree the
    /// planner changed becomes the checkpoint's.
    fn recover(
        &self,
        workflow: &Workflow,
        workspace: &Workspace,
        recorder: &mut Recorder,
        state: &mut RunState,
        found: Option<PlannerFound<'_>>,
    ) -> Result<(), RunError> {
        use crate::policy::{Violation, ViolationClass};
        let (step_id, visit) = (self.step_id, self.visit);
        let events = EventLog::read_all(&recorder.run_dir().events())?;
        let recorded: Vec<Violation> = events
            .iter()
            .filter(|event| {
                event.event_type == EventType::PolicyViolation
                    && event.step_id.as_deref() == Some(step_id)
                    && event.visit == Some(visit)
            })
            .filter_map(|event| {
                serde_json::from_value(event.payload.get("violation")?.clone()).ok()
            })
            .collect();
        let mut new = Vec::new();
        if let Some(found) = found {
            let who = planner_label(workflow, recorder, step_id);
            let report = found
                .guard_report
                .and_then(|report| serde_json::from_value::<GuardReport>(report.clone()).ok());
            if let Some(report) = report {
                // The scratch index is the conductor's: its own fingerprint after the
                // planner's check rewrites it, which a guard state not yet removed reports.
                new.extend(
                    crate::opcode::planner_guard_violations(&report, found.operator_checkout, &who)
                        .into_iter()
                        .filter(|violation| {
                            !recorded.contains(violation)
                                && violation.path.as_deref()
                                    != Some(crate::workspace::SCRATCH_INDEX)
                        }),
                );
            }
            let checked = recorded
                .iter()
                .any(|violation| violation.class == ViolationClass::PlannerChangedWorktree);
            if let Some(before) = state.fingerprint.clone()
                && found.planner_ran
                && !checked
            {
                let now = workspace.fingerprint()?;
                new.extend(crate::opcode::planner_worktree_change(
                    workspace, &who, &before, &now,
                )?);
            }
        }
        for violation in &new {
            let fields = payload([(
                "violation",
                serde_json::to_value(violation).unwrap_or_default(),
            )]);
            recorder.event(EventType::PolicyViolation, Some((step_id, visit)), fields)?;
        }
        let all: Vec<&Violation> = recorded.iter().chain(&new).collect();
        if let Some(first) = all.first() {
            let more = match all.len() {
                1 => String::new(),
                count => format!(" (and {} more)", count - 1),
            };
            let pending = state.safety.policy_violation.is_some();
            state.safety.policy_violation = Some(format!("{step_id}: {}{more}", first.detail));
            // The planner changed the worktree after the last agent step's snapshot: a
            // `pre_step` rollback undoes it, unless an older violation is pending.
            if !pending {
                state.safety.pre_step_undoes_violation = true;
            }
        }
        if all
            .iter()
            .any(|violation| violation.class == ViolationClass::PlannerChangedWorktree)
        {
            state.fingerprint = Some(workspace.fingerprint()?);
        }
        Ok(())
    }
}

/// How a recovered EVALUATE's planner is named in a violation: the run's `--planner`, the
/// step's `planner:`, `defaults.planner`, else "the planner" (the configured default).
fn planner_label(workflow: &Workflow, recorder: &Recorder, step_id: &str) -> String {
    let step = workflow.step(step_id).and_then(|step| match &step.body {
        crate::workflow::model::StepBody::Evaluate(evaluate) => evaluate.planner.as_ref(),
        _ => None,
    });
    recorder
        .metadata()
        .planner_override
        .clone()
        .or_else(|| step.map(|name| name.value.clone()))
        .or_else(|| {
            workflow
                .defaults
                .planner
                .as_ref()
                .map(|name| name.value.clone())
        })
        .map_or_else(
            || "the planner".to_owned(),
            |name| format!("planner `{name}`"),
        )
}

/// Whether the run stopped in an EVALUATE visit whose change of the worktree is its
/// planner's: the visit recorded its planner's change itself (the operator's interrupt, or a
/// crash after the check), or it still has its saved guard state — its planner process was
/// running when the process driving it died. A change found after an EVALUATE whose planner
/// never ran (the `rules` or an `http` planner, a crash before the planner started) is
/// someone else's: drift.
fn planner_owns_change(
    run_dir: &RunDir,
    workflow: &Workflow,
    state: &RunState,
    events: &[crate::artifacts::Event],
) -> bool {
    let Phase::Running { step_id, visit } = &state.phase else {
        return false;
    };
    PlannerVisit::of(workflow, events, (step_id, *visit)).is_some()
        && (planner_change_recorded(events, step_id, *visit)
            || guard_saved(run_dir, step_id, *visit))
}

/// Whether the visit's folder holds a saved guard state (whatever its shape).
fn guard_saved(run_dir: &RunDir, step_id: &str, visit: u32) -> bool {
    std::fs::symlink_metadata(run_dir.visit_dir(step_id, visit).join(GUARD_STATE_FILE)).is_ok()
}

/// Whether the visit recorded a `planner_changed_worktree` violation.
fn planner_change_recorded(events: &[crate::artifacts::Event], step_id: &str, visit: u32) -> bool {
    events.iter().any(|event| {
        event.event_type == EventType::PolicyViolation
            && event.step_id.as_deref() == Some(step_id)
            && event.visit == Some(visit)
            && event
                .payload
                .get("violation")
                .and_then(|violation| violation.get("class"))
                .and_then(serde_json::Value::as_str)
                == Some("planner_changed_worktree")
    })
}
