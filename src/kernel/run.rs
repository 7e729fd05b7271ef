//! Runs as the command line names them: where their directories are, what starting one
//! takes and what a drive reports. Starting ([`super::start`]), resuming ([`super::resume`])
//! and the recovery of an interrupted visit ([`super::recovery`]) live in their own files;
//! their entry points are re-exported here.

use std::path::{Path, PathBuf};

pub use super::change_records::recorded_config;
pub use super::continuation::workflow_of;
use super::driver::RunEnd;
pub use super::resume::{RepositoryChanges, ResumeRequest, resume_run};
pub use super::run_error::RunError;
pub use super::start::{CheckedRun, check_run, start_checked, start_run};
use crate::artifacts::{RunDir, RunMetadata, is_run_id};
use crate::config::Config;
use crate::ids::RunId;

/// The default parent of run directories.
pub const DEFAULT_ARTIFACTS_ROOT: &str = ".tnh/run/";

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
