//! `run`: the checks before a run, then its run directory, its worktree and its drive.

use std::path::Path;

use super::change_records::{config_digest, digest, explicit_config_path};
use super::continuation::{Loaded, check_planner_override};
use super::driver::RunEnd;
use super::launch::{drive, pin_loaded_modules, run_context};
use super::lock::RunLock;
use super::recorder::Recorder;
use super::run::{DEFAULT_ARTIFACTS_ROOT, RunRequest, RunSummary};
use super::run_error::RunError;
use super::state::RunState;
use crate::artifacts::{ArtifactsError, RunDir, RunMetadata, SCHEMA_VERSION, new_run_id, now};
use crate::artifacts::{EventPayload, event_payload::RunStarted};
use crate::ids::{RunId, WorkflowId};
use crate::prompt::Catalog;
use crate::runner::Cancellation;
use crate::workflow::load::check_file_keeping_source;
use crate::workspace::Workspace;

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
        .any(|diagnostic| diagnostic.severity == crate::document::diagnostic::Severity::Error);
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
    let workflow = &loaded.workflow;
    let run_id = new_run_id();
    let workflow_id = WorkflowId::new(workflow.workflow_id.value.as_str());
    let planned = planned_record(&request.repo, &run_id, &workflow_id, &request.base)?;
    let metadata = new_metadata(&request, &loaded, &params, &planned, &run_id);
    let run_dir = RunDir::new(&request.repo, &metadata.artifacts_root, &run_id);
    let started_at = metadata.started_at.clone();
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

/// The metadata of a new run, written before its worktree is created: the worktree, branch
/// and base to come (`planned`); the base commit is known once the worktree is made from it.
fn new_metadata(
    request: &RunRequest,
    loaded: &Loaded,
    params: &serde_json::Map<String, serde_json::Value>,
    planned: &crate::workspace::WorkspaceRecord,
    run_id: &RunId,
) -> RunMetadata {
    let workflow = &loaded.workflow;
    let artifacts_root = workflow
        .defaults
        .artifacts_dir
        .as_ref()
        .map_or(DEFAULT_ARTIFACTS_ROOT, |dir| dir.value.as_str())
        .to_owned();
    let prompts = super::pins::prompt_digests(&request.repo);
    RunMetadata {
        schema_version: SCHEMA_VERSION,
        run_id: run_id.to_string(),
        workflow_id: WorkflowId::new(workflow.workflow_id.value.as_str()).to_string(),
        workflow_version: workflow.version.value,
        workflow_path: std::path::absolute(&request.workflow_path)
            .unwrap_or(request.workflow_path.clone())
            .display()
            .to_string(),
        started_at: now(),
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
    }
}

/// A run whose worktree could not be made because the operator interrupted its creation:
/// marked blocked (no event is recorded before `run_started`), for `resume` to start over.
/// Returns the step the run starts with.
pub(super) fn interrupted_before_start(
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
pub(super) fn keep_record(metadata: &mut RunMetadata, record: &crate::workspace::WorkspaceRecord) {
    metadata.repo_root = record.repo_root.display().to_string();
    metadata.worktree_path = record.worktree_path.display().to_string();
    metadata.branch = record.branch.clone();
    metadata.base_sha = record.base_sha.clone();
}

/// The `run_started` event, once the run's worktree exists.
pub(super) fn record_run_started(recorder: &mut Recorder) -> Result<(), RunError> {
    let metadata = recorder.metadata();
    let fields = RunStarted {
        workflow_id: metadata.workflow_id.clone(),
        base_sha: metadata.base_sha.clone(),
        params: metadata.params.clone(),
    };
    recorder.event(None, EventPayload::RunStarted(fields))?;
    Ok(())
}
