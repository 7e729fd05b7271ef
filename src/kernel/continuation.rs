//! Loading a run's workflow again to continue it (by `resume` or a gate decision), and
//! checking that the run still fits it before anything is written.

use std::path::{Path, PathBuf};

use super::change_records::{
    digest, record_params_change, record_workflow_change, recorded_config,
};
use super::recorder::Recorder;
use super::recovery::visit_in_progress;
use super::run_error::RunError;
use super::state::{Phase, RunState};
use crate::artifacts::{ArtifactsError, RunDir, RunMetadata};
use crate::config::Config;
use crate::prompt::Catalog;
use crate::workflow::load::check_file_keeping_source;
use crate::workflow::model::Workflow;

/// A validated workflow with what a run needs around it.
pub(super) struct Loaded {
    pub(super) workflow: Workflow,
    pub(super) source: String,
    pub(super) path: PathBuf,
    pub(super) config: Config,
    pub(super) catalog: Catalog,
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

/// Refuses a `--planner` override that names no defined planner (`default`, `rules` or one
/// under `planners:`), before anything is started or written.
pub(super) fn check_planner_override(config: &Config, recorded: bool) -> Result<(), RunError> {
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
pub(super) struct Continuation {
    pub(super) loaded: Loaded,
    pub(super) params: super::params::Rechecked,
    pub(super) prompts: std::collections::BTreeMap<String, String>,
}

/// Loads the run's workflow again and checks that the run still fits it — its current step is
/// a step, its parameters the declared types — before anything is written: a refusal leaves
/// the run as it was, resumable once fixed. The changes are recorded by the caller.
pub(super) fn continuation(
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
