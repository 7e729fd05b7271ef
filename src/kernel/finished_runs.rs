//! The index of finished runs, `.tnh/finished-runs.json`: which runs ended, and the days each
//! went on. `gate list` and `journal` look at every run of the repository; with it they skip
//! the finished ones they need not read, so a repository that keeps thousands of runs answers
//! as fast as a new one.
//!
//! It is sound because what it says never changes: a run whose `state.json` says it finished
//! never runs, waits or resumes again, and its `metadata.json` keeps its start and end (a
//! landing adds to it, nothing else). So it may lack runs (one that ended since, an entry lost
//! to two commands writing at once) but is never wrong: a run missing from it is read as it
//! always was. A run whose directory is gone is ignored and dropped at the next write; a file
//! that cannot be read or parsed counts as empty. Nothing depends on it being written.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::state::Phase;
use crate::artifacts::{RunDir, RunMetadata, SCHEMA_VERSION, read_json};

/// Where the index is kept, under the repository.
pub const FINISHED_RUNS_FILE: &str = ".tnh/finished-runs.json";

/// The largest index read back: 10,000 runs take well under a megabyte.
const INDEX_LIMIT: u64 = 64 * 1024 * 1024;

/// `.tnh/finished-runs.json` (`tnh-conductor schema finished-runs`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FinishedRuns {
    /// The format's version.
    pub schema_version: u32,
    /// Each finished run, by run id.
    pub runs: BTreeMap<String, FinishedRun>,
}

/// The days a finished run went on, as its `metadata.json` records them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FinishedRun {
    /// The day it started (`YYYY-MM-DD`, UTC): the day of `started_at`.
    pub started: String,
    /// The day it ended (`YYYY-MM-DD`, UTC): the day of `ended_at`.
    pub ended: String,
}

/// The index as one command reads and extends it.
#[derive(Debug)]
pub struct FinishedIndex {
    path: PathBuf,
    known: FinishedRuns,
    changed: bool,
    /// How many runs were asked about and known: when that is all of them, every run the index
    /// knows is still there and nothing needs dropping.
    hits: std::cell::Cell<usize>,
}

impl FinishedIndex {
    /// The index of the repository `repo`: empty when there is none or it cannot be read, and
    /// without the entries whose days are not dates.
    pub fn load(repo: &Path) -> Self {
        let path = repo.join(FINISHED_RUNS_FILE);
        let mut known = read_index(&path).unwrap_or_default();
        let before = known.runs.len();
        known
            .runs
            .retain(|_, run| is_day(&run.started) && is_day(&run.ended));
        let changed = known.runs.len() != before;
        Self {
            path,
            known,
            changed,
            hits: std::cell::Cell::new(0),
        }
    }

    /// The run `run_id`, when it is known to have finished. Each run is asked about once.
    pub fn get(&self, run_id: &str) -> Option<&FinishedRun> {
        let found = self.known.runs.get(run_id);
        if found.is_some() {
            self.hits.set(self.hits.get() + 1);
        }
        found
    }

    /// Adds the run `run_id` (in `run_dir`) when its files say it finished: `state.json` says
    /// so and `metadata.json` records its end.
    pub fn learn(&mut self, run_dir: &RunDir, run_id: &str) {
        if let Some(run) = finished_run(run_dir) {
            self.known.runs.insert(run_id.to_owned(), run);
            self.changed = true;
        }
    }

    /// Writes the index back when it changed, keeping only the runs of `present` (the run
    /// directories still there, each asked about once with [`Self::get`]). A failure is not an
    /// error: the next command reads the runs again.
    pub fn save(mut self, present: &[String]) {
        if !self.changed && self.hits.get() == self.known.runs.len() {
            return;
        }
        let present: BTreeSet<&str> = present.iter().map(String::as_str).collect();
        self.known
            .runs
            .retain(|run_id, _| present.contains(run_id.as_str()));
        self.known.schema_version = SCHEMA_VERSION;
        // Compact: it is read whole by every `gate list` and `journal`.
        if let Ok(bytes) = serde_json::to_vec(&self.known)
            && let Some(folder) = self.path.parent()
            && folder.is_dir()
        {
            let _ = crate::artifacts::replace_file(&self.path, &bytes);
        }
    }
}

fn read_index(path: &Path) -> Option<FinishedRuns> {
    // Only a regular file, and bounded: an agent runs as the operator and can write `.tnh/`.
    let (bytes, truncated) = crate::artifacts::safe_files::read_regular(path, INDEX_LIMIT).ok()?;
    if truncated {
        return None;
    }
    let index: FinishedRuns = serde_json::from_slice(&bytes).ok()?;
    (index.schema_version == SCHEMA_VERSION).then_some(index)
}

/// The days of the run in `run_dir`, when it finished.
fn finished_run(run_dir: &RunDir) -> Option<FinishedRun> {
    let state = super::state::read_state(&run_dir.state()).ok()?;
    if !matches!(state.phase, Phase::Finished { .. }) {
        return None;
    }
    let metadata = read_json::<RunMetadata>(&run_dir.metadata(), "run metadata").ok()?;
    let day = |stamp: &str| stamp.get(..10).filter(|day| is_day(day)).map(str::to_owned);
    Some(FinishedRun {
        started: day(&metadata.started_at)?,
        ended: day(metadata.ended_at.as_deref()?)?,
    })
}

/// `YYYY-MM-DD` in shape: days are only compared, as text (a full date check of every entry
/// would cost `gate list` more than the rest of the index).
fn is_day(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 10
        && bytes.iter().enumerate().all(|(index, byte)| match index {
            4 | 7 => *byte == b'-',
            _ => byte.is_ascii_digit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_garbled_or_foreign_index_reads_as_empty_and_bad_days_are_dropped() {
        let repo = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(repo.path().join(".tnh")).unwrap();
        let path = repo.path().join(FINISHED_RUNS_FILE);
        for text in [
            "{",
            r#"{"schema_version": 999, "runs": {}}"#,
            r#"{"schema_version": 1, "runs": {}, "extra": 1}"#,
        ] {
            std::fs::write(&path, text).unwrap();
            assert_eq!(FinishedIndex::load(repo.path()).known.runs.len(), 0);
        }
        std::fs::write(
            &path,
            r#"{"schema_version": 1, "runs": {
                "20261201T080000Z-abcdef": {"started": "2026-12-01", "ended": "2026-12-02"},
                "20261201T080001Z-abcdef": {"started": "2026-12-01", "ended": "someday"}}}"#,
        )
        .unwrap();
        let index = FinishedIndex::load(repo.path());
        assert!(index.get("20261201T080000Z-abcdef").is_some());
        assert!(index.get("20261201T080001Z-abcdef").is_none());
    }
}
