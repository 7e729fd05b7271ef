//! Handing a loaded run to the driver: the context it is driven with, the repository modules
//! its script pins, and the drive itself.

use std::path::Path;

use super::continuation::Loaded;
use super::driver::{Driver, RunEnd};
use super::recorder::Recorder;
use super::run_error::RunError;
use super::state::RunState;
use crate::opcode::RunContext;
use crate::runner::Cancellation;
use crate::workspace::Workspace;

/// The context a run is driven with. Its script's repository modules come from `pinned` (the
/// copies the run pinned when it started) when given, else from the repository's
/// `.tnh/scripts/` (a run that has not pinned them yet, which then pins what its script
/// loaded).
pub(super) fn run_context(
    loaded: Loaded,
    params: serde_json::Map<String, serde_json::Value>,
    worktree: &Path,
    started_at: String,
    cancellation: Cancellation,
    pinned: Option<std::collections::BTreeMap<String, String>>,
) -> Result<RunContext, RunError> {
    let runtime = crate::runner::runtime::shared().map_err(RunError::Runtime)?;
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

/// Pins the repository modules the run's script loaded from its worktree (see
/// [`super::pins`]), before any agent runs.
pub(super) fn pin_loaded_modules(
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
pub(super) fn drive(
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
