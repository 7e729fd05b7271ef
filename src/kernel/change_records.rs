//! What a continued run records about files it reads that changed since it started (or last
//! continued): its workflow, its configuration and its parameters.

use std::path::{Path, PathBuf};

use super::recorder::Recorder;
use super::run_error::RunError;
use crate::artifacts::event_payload::{FileChanged, ParamsChanged};
use crate::artifacts::{EventPayload, RunMetadata};
use crate::config::Config;

/// The SHA-256 of a workflow's text, as `metadata.json` keeps it.
pub(super) fn digest(source: &str) -> String {
    crate::artifacts::sha256_hex(source.as_bytes())
}

/// The SHA-256 of the configuration file as it was read, `none` without one.
pub(super) fn config_digest(config: &Config) -> String {
    config.sha256.clone().unwrap_or_else(|| "none".to_owned())
}

/// The configuration file of a run started with `--config`, absolute, as `metadata.json`
/// records it: `None` when the run uses the repository's own `.tnh/config.yaml` (or none).
pub(super) fn explicit_config_path(repo: &Path, config: &Config) -> Option<String> {
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
pub(super) fn record_config_change(
    recorder: &mut Recorder,
    config: &Config,
) -> Result<(), RunError> {
    let recorded = recorder.metadata().config_sha256.clone();
    let path = config
        .path
        .as_ref()
        .map_or_else(String::new, |path| path.display().to_string());
    record_file_change(
        recorder,
        EventPayload::ConfigChanged,
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
pub(super) fn record_workflow_change(
    recorder: &mut Recorder,
    found: String,
) -> Result<(), RunError> {
    let metadata = recorder.metadata();
    let (path, recorded) = (
        metadata.workflow_path.clone(),
        metadata.workflow_sha256.clone(),
    );
    record_file_change(
        recorder,
        EventPayload::WorkflowChanged,
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
    event: fn(FileChanged) -> EventPayload,
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
    let fields = FileChanged {
        path,
        recorded_sha256: recorded,
        found_sha256: found.clone(),
    };
    recorder.event(None, event(fields))?;
    recorder.update_metadata(|metadata| keep(metadata, found))?;
    Ok(())
}

/// Records what re-resolving the parameters changed (a `params_changed` event with the new
/// parameters' defaults and the names no longer declared) and keeps the resolved parameters in
/// `metadata.json`; nothing when nothing changed.
pub(super) fn record_params_change(
    recorder: &mut Recorder,
    params: &super::params::Rechecked,
) -> Result<(), RunError> {
    // A gate decision finished on the way may have recorded it already.
    if recorder.metadata().params == params.values {
        return Ok(());
    }
    let fields = ParamsChanged {
        added: params.added.clone(),
        removed: params.removed.clone(),
    };
    recorder.event(None, EventPayload::ParamsChanged(fields))?;
    let values = params.values.clone();
    recorder.update_metadata(|metadata| metadata.params = values)?;
    Ok(())
}
