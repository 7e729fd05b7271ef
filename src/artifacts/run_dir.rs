//! Paths of one run directory.

use std::path::{Path, PathBuf};

use crate::ids::RunId;

use super::VisitDir;

/// `<repo>/<artifacts_root>/<run_id>/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir {
    root: PathBuf,
}

impl RunDir {
    /// `metadata.json`: the run's identity, written once when it starts.
    pub const METADATA: &'static str = "metadata.json";
    /// `status.json`: where the run is, rewritten as it goes.
    pub const STATUS: &'static str = "status.json";
    /// `final-state.txt`: the run's final state, one word.
    pub const FINAL_STATE: &'static str = "final-state.txt";
    /// `events.ndjson`: the run's event log.
    pub const EVENTS: &'static str = "events.ndjson";
    /// `state.json`: the kernel's state, for `resume`.
    pub const STATE: &'static str = "state.json";
    /// `lock`: held by the one process driving the run.
    pub const LOCK: &'static str = "lock";
    /// `artifacts/`: a folder per step.
    pub const ARTIFACTS: &'static str = "artifacts";
    /// `scripts/`: the script modules the run pinned when it started.
    pub const SCRIPTS: &'static str = "scripts";
    /// `rollbacks/`: the records of the operator's rollbacks.
    pub const ROLLBACKS: &'static str = "rollbacks";

    /// The name of every file and folder at the top of a run directory, for a check that no
    /// other module spells one.
    pub const ALL: &'static [&'static str] = &[
        Self::METADATA,
        Self::STATUS,
        Self::FINAL_STATE,
        Self::EVENTS,
        Self::STATE,
        Self::LOCK,
        Self::ARTIFACTS,
        Self::SCRIPTS,
        Self::ROLLBACKS,
    ];

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
        self.root.join(Self::METADATA)
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
        self.root.join(Self::STATUS)
    }

    /// `final-state.txt`.
    pub fn final_state(&self) -> PathBuf {
        self.root.join(Self::FINAL_STATE)
    }

    /// `events.ndjson`.
    pub fn events(&self) -> PathBuf {
        self.root.join(Self::EVENTS)
    }

    /// `state.json`.
    pub fn state(&self) -> PathBuf {
        self.root.join(Self::STATE)
    }

    /// `lock`: held by the one process driving the run.
    pub fn lock(&self) -> PathBuf {
        self.root.join(Self::LOCK)
    }

    /// `artifacts/`.
    pub fn artifacts_dir(&self) -> PathBuf {
        self.root.join(Self::ARTIFACTS)
    }

    /// `scripts/`: the pinned script modules.
    pub fn scripts_dir(&self) -> PathBuf {
        self.root.join(Self::SCRIPTS)
    }

    /// `rollbacks/`: the operator's rollback records.
    pub fn rollbacks_dir(&self) -> PathBuf {
        self.root.join(Self::ROLLBACKS)
    }

    /// `artifacts/<step_id>/`.
    pub fn step_dir(&self, step_id: &str) -> PathBuf {
        self.artifacts_dir().join(step_id)
    }

    /// `artifacts/<step_id>/<visit>/`.
    pub fn visit_dir(&self, step_id: &str, visit: u32) -> PathBuf {
        self.step_dir(step_id).join(visit.to_string())
    }

    /// `artifacts/<step_id>/<visit>/`, with the names of the files it holds.
    pub fn visit(&self, step_id: &str, visit: u32) -> VisitDir {
        VisitDir::at(self.visit_dir(step_id, visit))
    }

    /// Creates `artifacts/<step_id>/<visit>/` as real folders (a link or a file an agent left
    /// in the place of one is replaced, never followed) and returns it.
    pub fn create_visit_dir(
        &self,
        step_id: &str,
        visit: u32,
    ) -> Result<PathBuf, super::ArtifactsError> {
        let visit_name = visit.to_string();
        super::safe_files::create_real_folders(&self.root, &[Self::ARTIFACTS, step_id, &visit_name])
            .map(|(folder, _replaced)| folder)
            .map_err(super::ArtifactsError::io(
                "create the step folder",
                self.visit_dir(step_id, visit),
            ))
    }

    /// `artifacts/<step_id>/manifest.json`: the latest visit's manifest.
    pub fn step_manifest(&self, step_id: &str) -> PathBuf {
        self.step_dir(step_id).join(VisitDir::MANIFEST)
    }

    /// `artifacts/<step_id>/<visit>/manifest.json`.
    pub fn visit_manifest(&self, step_id: &str, visit: u32) -> PathBuf {
        self.visit_dir(step_id, visit).join(VisitDir::MANIFEST)
    }

    /// `artifacts/<step_id>/<visit>`, relative to the run directory.
    pub fn visit_relative(step_id: &str, visit: u32) -> String {
        format!("{}/{step_id}/{visit}", Self::ARTIFACTS)
    }

    /// `artifacts/<step_id>/<visit>/<file>`, relative to the run directory, as manifests and
    /// events record it.
    pub fn visit_file_relative(step_id: &str, visit: u32, file: &str) -> String {
        format!("{}/{file}", Self::visit_relative(step_id, visit))
    }

    /// `rollbacks/<number>.json`, relative to the run directory: the `number`th operator
    /// rollback's record.
    pub fn rollback_record_relative(number: usize) -> String {
        format!("{}/{number}.json", Self::ROLLBACKS)
    }

    /// A path relative to the run directory, as manifests record it.
    pub fn relative(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .to_string_lossy()
            .into_owned()
    }
}
