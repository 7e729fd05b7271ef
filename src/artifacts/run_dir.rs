//! Paths of one run directory.

use std::path::{Path, PathBuf};

use crate::ids::RunId;

/// The file name of a manifest.
const MANIFEST: &str = "manifest.json";

/// `<repo>/<artifacts_root>/<run_id>/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir {
    root: PathBuf,
}

impl RunDir {
    /// The run directory of `run_id` under `artifacts_root` (absolute, or relative to `repo`).
    pub fn new(repo: &Path, artifacts_root: &str, run_id: &RunId) -> Self {
        Self {
            root: repo.join(artifacts_root).join(run_id.as_str()),
        }
    }

    /// A run directory at a known path.
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The folder itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `metadata.json`.
    pub fn metadata(&self) -> PathBuf {
        self.root.join("metadata.json")
    }

    /// `metadata.json` as recorded. A file that is not valid run metadata (cut short, edited)
    /// is [`super::ArtifactsError::MetadataDamaged`]: the run directory is damaged, and
    /// commands that need the run's record refuse it (exit 2) rather than fail.
    pub fn read_metadata(&self) -> Result<super::RunMetadata, super::ArtifactsError> {
        super::read_json(&self.metadata(), "run metadata").map_err(|error| match error {
            super::ArtifactsError::Json { path, source, .. } => {
                super::ArtifactsError::MetadataDamaged { path, source }
            }
            other => other,
        })
    }

    /// `status.json`.
    pub fn status(&self) -> PathBuf {
        self.root.join("status.json")
    }

    /// `final-state.txt`.
    pub fn final_state(&self) -> PathBuf {
        self.root.join("final-state.txt")
    }

    /// `events.ndjson`.
    pub fn events(&self) -> PathBuf {
        self.root.join("events.ndjson")
    }

    /// `state.json`.
    pub fn state(&self) -> PathBuf {
        self.root.join("state.json")
    }

    /// `lock`: held by the one process driving the run.
    pub fn lock(&self) -> PathBuf {
        self.root.join("lock")
    }

    /// `artifacts/<step_id>/`.
    pub fn step_dir(&self, step_id: &str) -> PathBuf {
        self.root.join("artifacts").join(step_id)
    }

    /// `artifacts/<step_id>/<visit>/`.
    pub fn visit_dir(&self, step_id: &str, visit: u32) -> PathBuf {
        self.step_dir(step_id).join(visit.to_string())
    }

    /// `artifacts/<step_id>/<visit>/`, with the names of the files it holds.
    pub fn visit(&self, step_id: &str, visit: u32) -> super::VisitDir {
        super::VisitDir::at(self.visit_dir(step_id, visit))
    }

    /// Creates `artifacts/<step_id>/<visit>/` as real folders (a link or a file an agent left
    /// in the place of one is replaced, never followed) and returns it.
    pub fn create_visit_dir(
        &self,
        step_id: &str,
        visit: u32,
    ) -> Result<PathBuf, super::ArtifactsError> {
        let visit_name = visit.to_string();
        super::safe_files::create_real_folders(&self.root, &["artifacts", step_id, &visit_name])
            .map(|(folder, _replaced)| folder)
            .map_err(super::ArtifactsError::io(
                "create the step folder",
                self.visit_dir(step_id, visit),
            ))
    }

    /// `artifacts/<step_id>/manifest.json`: the latest visit's manifest.
    pub fn step_manifest(&self, step_id: &str) -> PathBuf {
        self.step_dir(step_id).join(MANIFEST)
    }

    /// `artifacts/<step_id>/<visit>/manifest.json`.
    pub fn visit_manifest(&self, step_id: &str, visit: u32) -> PathBuf {
        self.visit_dir(step_id, visit).join(MANIFEST)
    }

    /// A path relative to the run directory, as manifests record it.
    pub fn relative(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .to_string_lossy()
            .into_owned()
    }
}
