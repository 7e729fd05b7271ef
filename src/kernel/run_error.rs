//! Why a run could not start or continue, with the exit status and the hint each refusal
//! gets.

use std::path::PathBuf;

use super::driver::DriveError;
use super::lock::LockError;
use super::params::ParamError;
use crate::artifacts::ArtifactsError;
use crate::document::diagnostic::Diagnostic;
use crate::workspace::{Fingerprint, WorkspaceError};

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
        .filter(|diagnostic| diagnostic.severity == crate::document::diagnostic::Severity::Error)
        .count()
        + problems.iter().filter(|problem| problem.is_error()).count();
    match errors {
        1 => "1 problem was found".to_owned(),
        many => format!("{many} problems were found"),
    }
}

pub(super) fn short(sha: &str) -> &str {
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
                let near = crate::document::diagnostic::nearest(name, known.iter().map(String::as_str))
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
