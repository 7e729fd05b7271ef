//! `resume`: continuing an interrupted or crashed run, after every check it may refuse for
//! has passed with nothing written.

use std::path::{Path, PathBuf};

use super::change_records::{
    digest, record_config_change, record_params_change, record_workflow_change,
};
use super::continuation::{Continuation, check_planner_override, continuation};
use super::drift::{drifted, record_accepted_drift};
use super::driver::RunEnd;
use super::guard_recovery::{
    UnusableGuardState, describe_repository_changes, repository_changes_of_interrupted_visit,
    unusable_guard_state,
};
use super::launch::{drive, pin_loaded_modules, run_context};
use super::lock::RunLock;
use super::planner_recovery::planner_owns_change;
use super::recorder::Recorder;
use super::recovery::{
    Recovery, recover_interrupted_visit, replay_started_visit, visit_in_progress,
};
use super::recreate::create_again;
use super::run::{RunSummary, check_recorded_repository, find_run_dir, workspace_record};
use super::run_error::RunError;
use super::start::{interrupted_before_start, keep_record, record_run_started};
use super::state::{Phase, RunState};
use crate::artifacts::EventPayload;
use crate::artifacts::event_payload::{RunResumed, WorktreeRecreated};
use crate::artifacts::{EventLog, EventType, RunDir, RunMetadata};
use crate::config::Config;
use crate::ids::RunId;
use crate::prompt::Catalog;
use crate::runner::Cancellation;
use crate::workflow::model::Workflow;
use crate::workspace::Workspace;

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

/// What `resume` needs.
#[allow(missing_debug_implementations)] // the observer is a closure
pub struct ResumeRequest {
    /// The repository the run directory is found in.
    pub repo: PathBuf,
    /// The run to continue.
    pub run_id: RunId,
    /// The configuration; the run's recorded `--planner` applies when it names none.
    pub config: Config,
    /// `--accept-drift`: continue with the worktree as it is now when it changed since the
    /// last checkpoint, recorded as a `drift_accepted` event.
    pub accept_drift: bool,
    /// What to do with repository-wide changes since the interrupted step started.
    pub repository: RepositoryChanges,
    /// `--skip-guard-check`: go on when the guard state of the visit the run stopped in is
    /// damaged or missing (see [`RunError::GuardStateUnusable`]), without checking that
    /// visit, and record a `guard_check_skipped` event; a readable guard state is checked
    /// whatever it says.
    pub skip_guard_check: bool,
    /// Shown every event as it is recorded.
    pub observer: Option<super::recorder::Observer>,
}

impl ResumeRequest {
    /// A plain `resume` of `run_id`: no drift nor repository change accepted, the guard
    /// check not skipped, no observer.
    pub fn new(repo: impl Into<PathBuf>, run_id: RunId, config: Config) -> Self {
        ResumeRequest {
            repo: repo.into(),
            run_id,
            config,
            accept_drift: false,
            repository: RepositoryChanges::Refuse,
            skip_guard_check: false,
            observer: None,
        }
    }
}

/// A run opened for `resume`: its lock held (for as long as this lives), its orphans
/// stopped, its checkpoint read (or a fresh state for a run killed before its first one).
struct Opened {
    run_dir: RunDir,
    _lock: RunLock,
    recorder: Recorder,
    events: Vec<crate::artifacts::Event>,
    state: RunState,
    /// Killed while its worktree was created, before `run_started`.
    never_started: bool,
}

/// The run's worktree as `resume` continues in it.
enum Worktree {
    /// Opened, made again from scratch, or checked out again (`true`) from the work branch.
    Ready(Box<Workspace>, bool),
    /// Its creation, started over, was interrupted by the operator: the step the run starts
    /// with.
    Interrupted(String),
}

/// Continues an interrupted or crashed run.
pub fn resume_run(request: ResumeRequest) -> Result<RunSummary, RunError> {
    // Before any work: a signal while the interrupted visit is recovered (orphans killed, its
    // snapshot restored) is noticed once that is done, and the run stops before its next step.
    let cancellation = super::interrupts::listen().map_err(RunError::Runtime)?;
    let repo = request.repo.as_path();
    let run_id = request.run_id;
    // The run's lock is held for as long as `opened` lives: to the end of the drive.
    let opened = open_for_resume(repo, run_id.as_str(), request.observer, &cancellation)?;
    let (run_dir, events) = (&opened.run_dir, &opened.events);
    let (mut recorder, mut state) = (opened.recorder, opened.state);
    let metadata: RunMetadata = recorder.metadata().clone();
    let (continued, pinned) =
        continuation_of(repo, &metadata, request.config, run_dir, &recorder, &state)?;
    let (loaded, params) = (continued.loaded, continued.params);
    let record = workspace_record(&metadata);
    let (workspace, recreated) = match worktree(
        opened.never_started,
        &record,
        &metadata,
        &mut recorder,
        &cancellation,
    )? {
        Worktree::Ready(workspace, recreated) => (*workspace, recreated),
        Worktree::Interrupted(step_id) => {
            return Ok(RunSummary {
                run_id,
                run_dir: run_dir.root().to_path_buf(),
                worktree: record.worktree_path.clone(),
                end: RunEnd::Interrupted { step_id },
            });
        }
    };
    replay_started_visit(&loaded.workflow, run_dir, &mut state)?;
    let checks = Checks {
        run_id: run_id.as_str(),
        workflow: &loaded.workflow,
        workspace: &workspace,
        run_dir,
        state: &state,
        events,
        recreated,
        accept_drift: request.accept_drift,
        repository: request.repository,
        skip_guard_check: request.skip_guard_check,
    };
    let (planners, unusable) = checks.refuse_before_writing()?;
    // A gate decision recorded by a process that died before taking its route stands (its
    // events follow the checkpoint, so this comes before anything else is recorded).
    super::gate::finish_interrupted_decision(&mut recorder, &mut state)?;
    let recreated_branch = recreated.then_some(record.branch.as_str());
    record_resumed(&mut recorder, &state, &workspace, recreated_branch)?;
    record_workflow_change(&mut recorder, digest(&loaded.source))?;
    record_config_change(&mut recorder, &loaded.config)?;
    record_params_change(&mut recorder, &params)?;
    super::pins::record_prompts_change(&mut recorder, continued.prompts)?;
    if request.accept_drift {
        record_accepted_drift(
            &loaded.workflow,
            &workspace,
            &mut recorder,
            &mut state,
            planners,
        )?;
    }
    let recovery = Recovery {
        workflow: &loaded.workflow,
        operator_checkout: loaded.config.operator_checkout,
        workspace: &workspace,
        repository: request.repository,
        unusable: unusable.as_ref(),
    };
    recover_interrupted_visit(&recovery, &mut recorder, &mut state)?;
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
        run_id,
        run_dir: run_dir.root().to_path_buf(),
        worktree: workspace.path().to_path_buf(),
        end,
    })
}

/// Finds the run, takes its lock, stops its orphans, and reads its checkpoint and events;
/// refuses a run that ended (abandoned or finished), once an interrupted `runs abandon` is
/// finished.
fn open_for_resume(
    repo: &Path,
    run_id: &str,
    observer: Option<super::recorder::Observer>,
    cancellation: &Cancellation,
) -> Result<Opened, RunError> {
    let run_dir = find_run_dir(repo, run_id)?;
    // A moved or copied repository is refused before anything is done: the orphans below are
    // found by run id, which a copy shares with the original's live run.
    check_recorded_repository(repo, &run_dir, run_id)?;
    let lock = RunLock::acquire(&run_dir.lock())?;
    // With the lock held no driver is alive: what is left of the run's processes is stopped
    // before anything `resume` may refuse for is checked.
    stop_orphans_first(&run_dir, run_id);
    // A run a newer release wrote is refused before anything of it is opened for writing.
    super::state::check_run_versions(&run_dir)?;
    let mut recorder = Recorder::open(run_dir.clone())?;
    recorder.observe(super::recorder::with_test_signal(observer, cancellation));
    let events = EventLog::read_all(&run_dir.events())?;
    let checkpointed = run_dir.state().is_file();
    let mut state = checkpoint(&run_dir, &recorder, &events, run_id)?;
    // A driver killed while it created the worktree (before `run_started`) left it missing or
    // half made: it is made again from scratch. A run with a checkpoint did start, whatever
    // its log says (a log that lost what the checkpoint accounts for was refused on opening):
    // its worktree holds work and is never removed.
    let never_started = !checkpointed
        && !events
            .iter()
            .any(|event| event.event_type() == EventType::RunStarted);
    // A `runs abandon` killed after its event stands: the run is ended now.
    super::abandon::finish_interrupted_abandon(&mut recorder, &mut state)?;
    refuse_ended(run_id, &state)?;
    Ok(Opened {
        run_dir,
        _lock: lock,
        recorder,
        events,
        state,
        never_started,
    })
}

/// The run's checkpoint. A driver killed before its first checkpoint leaves no state.json:
/// the run starts over from its entry step (its events are kept). A run that went past that
/// checkpoint and lost its state.json is refused: starting over would run its visits again
/// under the same numbers, over their artifacts.
fn checkpoint(
    run_dir: &RunDir,
    recorder: &Recorder,
    events: &[crate::artifacts::Event],
    run_id: &str,
) -> Result<RunState, RunError> {
    if run_dir.state().is_file() {
        return Ok(super::state::read_state(&run_dir.state())?);
    }
    if let Some(evidence) = checkpointed_evidence(run_dir, events) {
        return Err(RunError::StateMissing {
            run_id: run_id.to_owned(),
            path: run_dir.state(),
            evidence,
        });
    }
    let metadata = recorder.metadata();
    Ok(RunState::new(
        &metadata.run_id,
        &metadata.workflow_id,
        &metadata.entry_step,
    ))
}

/// Refuses to resume a run that ended: abandoned for good, or finished.
fn refuse_ended(run_id: &str, state: &RunState) -> Result<(), RunError> {
    match &state.phase {
        Phase::Finished {
            end: super::state::End::Abandoned,
            reason,
            ..
        } => Err(RunError::Abandoned {
            run_id: run_id.to_owned(),
            reason: reason.clone(),
        }),
        Phase::Finished { end, reason, .. } => Err(RunError::Finished {
            run_id: run_id.to_owned(),
            how: format!("{}: {reason}", end.name()),
        }),
        _ => Ok(()),
    }
}

/// What the run continues with (see [`continuation`]), under the planner it was started
/// with unless `config` names one, and the repository modules it pinned.
fn continuation_of(
    repo: &Path,
    metadata: &RunMetadata,
    mut config: Config,
    run_dir: &RunDir,
    recorder: &Recorder,
    state: &RunState,
) -> Result<
    (
        Continuation,
        Option<std::collections::BTreeMap<String, String>>,
    ),
    RunError,
> {
    let catalog = Catalog::load(Some(repo))?;
    let recorded = config.planner_override.is_none();
    if recorded {
        config.planner_override = metadata.planner_override.clone();
    }
    let continued = continuation(repo, metadata, config, catalog, run_dir, state)?;
    check_planner_override(&continued.loaded.config, recorded)?;
    let pinned = super::pins::pinned_script_modules(recorder)?;
    Ok((continued, pinned))
}

/// The run's worktree: made again from scratch for a run killed while it was created, else
/// opened, or checked out again from the work branch when its folder was deleted (by an
/// agent or a person; what it held uncommitted shows as drift).
fn worktree(
    never_started: bool,
    record: &crate::workspace::WorkspaceRecord,
    metadata: &RunMetadata,
    recorder: &mut Recorder,
    cancellation: &Cancellation,
) -> Result<Worktree, RunError> {
    if !never_started {
        let (workspace, recreated) = Workspace::open_or_recreate(record)?;
        return Ok(Worktree::Ready(Box::new(workspace), recreated));
    }
    let workspace = match create_again(record, metadata) {
        Ok(workspace) => workspace,
        Err(_) if cancellation.is_cancelled() => {
            let how = interrupted_before_start(recorder, cancellation)?;
            return Ok(Worktree::Interrupted(how));
        }
        Err(error) => return Err(error),
    };
    let created = workspace.record().clone();
    recorder.update_metadata(|metadata| keep_record(metadata, &created))?;
    record_run_started(recorder)?;
    Ok(Worktree::Ready(Box::new(workspace), false))
}

/// What `resume` checks before it writes anything, and what the operator said to go on with.
struct Checks<'a> {
    run_id: &'a str,
    workflow: &'a Workflow,
    workspace: &'a Workspace,
    run_dir: &'a RunDir,
    state: &'a RunState,
    events: &'a [crate::artifacts::Event],
    /// The worktree's folder was checked out again from the work branch.
    recreated: bool,
    accept_drift: bool,
    repository: RepositoryChanges,
    skip_guard_check: bool,
}

impl Checks<'_> {
    /// Refuses, with nothing written, drift (unless accepted), a damaged or missing guard
    /// state of the interrupted visit (unless its check is skipped), and repository-wide
    /// changes since that visit started (unless the operator said whose they are). Returns
    /// whether the worktree's change is an interrupted EVALUATE's planner's, and the unusable
    /// guard state the operator goes on without.
    fn refuse_before_writing(&self) -> Result<(bool, Option<UnusableGuardState>), RunError> {
        let run_id = self.run_id;
        // An EVALUATE visit whose planner changed the worktree: that change is recorded as the
        // planner's, never drift.
        let planners = planner_owns_change(self.run_dir, self.workflow, self.state, self.events);
        if !self.accept_drift
            && let Some((recorded, found)) =
                drifted(self.workflow, self.workspace, self.state, planners)?
        {
            return Err(RunError::Drift {
                recorded,
                found,
                recreated: self.recreated,
            });
        }
        // The guard state the interrupted step saved is damaged, or was deleted after its
        // process started: what that process did to the repository cannot be checked.
        let unusable = unusable_guard_state(self.run_dir, self.workspace, self.state, self.events);
        if let Some(unusable) = &unusable
            && !self.skip_guard_check
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
        // until the operator says whose they are.
        if self.repository == RepositoryChanges::Refuse
            && unusable.is_none()
            && let Some((step_id, visit, found)) = repository_changes_of_interrupted_visit(
                self.run_dir,
                self.workspace,
                self.state,
                self.events,
            )?
            && !found.is_clean()
        {
            return Err(RunError::RepositoryChanged {
                run_id: run_id.to_owned(),
                step_id,
                visit,
                changes: describe_repository_changes(&found),
            });
        }
        Ok((planners, unusable))
    }
}

/// The `run_resumed` event, and `worktree_recreated` (with the work branch) when the
/// worktree's folder was checked out again.
fn record_resumed(
    recorder: &mut Recorder,
    state: &RunState,
    workspace: &Workspace,
    recreated_branch: Option<&str>,
) -> Result<(), RunError> {
    let resumed = RunResumed {
        from_seq: state.events_seq,
    };
    recorder.event(None, EventPayload::RunResumed(resumed))?;
    if let Some(branch) = recreated_branch {
        let fields = WorktreeRecreated {
            path: workspace.path().display().to_string(),
            branch: branch.to_owned(),
        };
        recorder.event(None, EventPayload::WorktreeRecreated(fields))?;
    }
    Ok(())
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
        .find(|event| !before_checkpoint.contains(&event.event_type()))
    {
        let step = match (&event.step_id, event.visit) {
            (Some(step), Some(visit)) => format!(" of `{step}` #{visit}"),
            (Some(step), None) => format!(" of `{step}`"),
            _ => String::new(),
        };
        let kind = serde_json::to_value(event.event_type())
            .ok()
            .and_then(|value| value.as_str().map(str::to_owned))
            .unwrap_or_else(|| format!("{:?}", event.event_type()));
        return Some(format!("event {} is `{kind}`{step}", event.seq));
    }
    let artifacts = run_dir.artifacts_dir();
    let visited = std::fs::read_dir(&artifacts)
        .map(|mut entries| entries.next().is_some())
        .unwrap_or(false);
    visited.then(|| format!("`{}` holds step folders", artifacts.display()))
}
