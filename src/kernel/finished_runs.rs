//! The index of finished runs, `.tnh/finished-runs.json`: which runs ended, the days each
//! went on, how it ended and its workflow. `gate list`, `journal` and the viewer's pages look
//! at every run of the repository; with it they skip the finished ones they need not read,
//! so a repository that keeps thousands of runs answers as fast as a new one.
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
    /// Each finished run whose directory is there, by run id.
    pub runs: BTreeMap<String, FinishedRun>,
    /// Each finished run `runs clean --all` removed, by run id: the journal reads its record
    /// in `.tnh/history/` only for the days it went on.
    #[serde(default)]
    pub removed: BTreeMap<String, FinishedRun>,
}

/// The days a finished run went on, as its `metadata.json` records them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FinishedRun {
    /// The day it started (`YYYY-MM-DD`, UTC): the day of `started_at`.
    pub started: String,
    /// The day it ended (`YYYY-MM-DD`, UTC): the day of `ended_at`.
    pub ended: String,
    /// How it ended, as `status.json` says (`completed`, `failed`, `abandoned`): the runs
    /// page filters by it without reading the run. Absent from entries written before it
    /// was kept, and from removed runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Its workflow's id, for the same filter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
}

/// The index as one command reads and extends it.
#[derive(Debug)]
pub struct FinishedIndex {
    path: PathBuf,
    known: FinishedRuns,
    changed: bool,
    /// How many runs (and removed runs) were asked about and known: when that is all of them,
    /// every run the index knows is still there and nothing needs dropping.
    hits: std::cell::Cell<usize>,
    removed_hits: std::cell::Cell<usize>,
}

impl FinishedIndex {
    /// The index of the repository `repo`: empty when there is none or it cannot be read.
    pub fn load(repo: &Path) -> Self {
        let path = repo.join(FINISHED_RUNS_FILE);
        Self {
            known: read_index(&path).unwrap_or_default(),
            path,
            changed: false,
            hits: std::cell::Cell::new(0),
            removed_hits: std::cell::Cell::new(0),
        }
    }

    /// The run `run_id`, when it is known to have finished. Each run is asked about once.
    pub fn get(&self, run_id: &str) -> Option<&FinishedRun> {
        found(&self.known.runs, run_id, &self.hits)
    }

    /// The removed run `run_id`, when its kept record was read before. Each is asked about once.
    pub fn get_removed(&self, run_id: &str) -> Option<&FinishedRun> {
        found(&self.known.removed, run_id, &self.removed_hits)
    }

    /// Adds the run `run_id` (in `run_dir`) when its files say it finished: `state.json` says
    /// so and `metadata.json` records its end.
    pub fn learn(&mut self, run_dir: &RunDir, run_id: &str) {
        if let Some(run) = finished_run(run_dir) {
            self.changed |= self.known.runs.insert(run_id.to_owned(), run.clone()) != Some(run);
        }
    }

    /// Adds the removed run `run_id` from its kept record's start and end (RFC 3339): a record
    /// with an end was written after the run finished, and is never written again.
    pub fn learn_removed(&mut self, run_id: &str, started_at: &str, ended_at: &str) {
        if let (Some(started), Some(ended)) = (day_of(started_at), day_of(ended_at)) {
            let run = FinishedRun {
                started,
                ended,
                state: None,
                workflow: None,
            };
            self.changed |= self.known.removed.insert(run_id.to_owned(), run.clone()) != Some(run);
        }
    }

    /// Writes the index back when it changed, keeping only the runs of `runs` (the run
    /// directories still there) and, when given, the removed runs of `removed` (the records
    /// kept of them), each asked about once with [`Self::get`] and [`Self::get_removed`]. A
    /// failure is not an error: the next command reads the runs again.
    pub fn save(mut self, runs: &[String], removed: Option<&[String]>) {
        let mut changed = self.changed;
        changed |= prune(&mut self.known.runs, self.hits.get(), runs);
        if let Some(removed) = removed {
            changed |= prune(&mut self.known.removed, self.removed_hits.get(), removed);
        }
        if !changed {
            return;
        }
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

/// The entry of `run_id` in `known`, counted in `hits`; one whose days are not days (written
/// by hand, or damaged) is not an entry.
fn found<'a>(
    known: &'a BTreeMap<String, FinishedRun>,
    run_id: &str,
    hits: &std::cell::Cell<usize>,
) -> Option<&'a FinishedRun> {
    let run = known
        .get(run_id)
        .filter(|run| is_day(&run.started) && is_day(&run.ended))?;
    hits.set(hits.get() + 1);
    Some(run)
}

/// Drops the runs of `known` not in `present`, and those whose days are not days, unless all
/// were asked about and found (then all are there, and sound); says whether any was dropped.
fn prune(known: &mut BTreeMap<String, FinishedRun>, hits: usize, present: &[String]) -> bool {
    if hits == known.len() {
        return false;
    }
    let present: BTreeSet<&str> = present.iter().map(String::as_str).collect();
    let before = known.len();
    known.retain(|run_id, run| {
        present.contains(run_id.as_str()) && is_day(&run.started) && is_day(&run.ended)
    });
    known.len() != before
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
    let (lifecycle, ..) = super::recorder::describe(&state);
    Some(FinishedRun {
        started: day_of(&metadata.started_at)?,
        ended: day_of(metadata.ended_at.as_deref()?)?,
        state: Some(lifecycle.name().to_owned()),
        workflow: Some(metadata.workflow_id),
    })
}

/// The day of an RFC 3339 time, as the journal reads it: its first ten characters.
fn day_of(stamp: &str) -> Option<String> {
    stamp.get(..10).filter(|day| is_day(day)).map(str::to_owned)
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
        // Written back without it.
        index.save(&["20261201T080001Z-abcdef".to_owned()], None);
        let index = FinishedIndex::load(repo.path());
        assert!(index.known.runs.is_empty(), "{:?}", index.known);
    }
}
