//! What the journal keeps of runs whose directory `runs clean --all` removed: one
//! [`RunRecord`] a run in `.tnh/history/<run_id>.json`, written just before the run directory
//! goes, and read back by the journal in its place. The record is the journal's whole view of
//! the run, so every past day's journal reads the same before and after a clean.
//!
//! It is written at the clean, not when the run ends: that is the only moment the run
//! directory's evidence is lost, and by then the record includes everything recorded after the
//! run's end as well (a landing, an operator's rollback).

use std::path::{Path, PathBuf};

use super::journal_record::{RunRecord, record_of};
use crate::artifacts::{ArtifactsError, RunDir, SCHEMA_VERSION, is_run_id};

/// Where the records are kept, under the repository.
pub const HISTORY_DIR: &str = ".tnh/history";

/// The largest record read back: a run of thousands of planner decisions stays far below.
const RECORD_LIMIT: u64 = 64 * 1024 * 1024;

/// The record of `run_id` under the repository `repo`.
pub fn history_file(repo: &Path, run_id: &str) -> PathBuf {
    repo.join(HISTORY_DIR).join(format!("{run_id}.json"))
}

/// Writes the journal's record of the run `run_id` (in `run_dir`), as the journal reads it
/// (a damaged `metadata.json` included), replacing an earlier one (of a clean that was stopped
/// before it removed the run). A folder whose name is not a run id is never in the journal:
/// nothing is kept of it.
pub fn keep_run(
    repo: &Path,
    run_dir: &RunDir,
    run_id: &str,
) -> Result<Option<PathBuf>, ArtifactsError> {
    if !is_run_id(run_id) {
        return Ok(None);
    }
    let (metadata, damage) = super::journal::metadata_of(repo, run_dir, run_id);
    let record = record_of(run_dir, &metadata, damage.as_deref());
    let folder = repo.join(HISTORY_DIR);
    std::fs::create_dir_all(&folder).map_err(ArtifactsError::io("create", &folder))?;
    let path = history_file(repo, run_id);
    crate::artifacts::write_json_atomic(&path, &record)?;
    Ok(Some(path))
}

/// The runs whose record is kept, sorted.
pub fn kept_runs(repo: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(repo.join(HISTORY_DIR)) else {
        return Vec::new();
    };
    let mut run_ids: Vec<String> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".json")
                .filter(|run_id| is_run_id(run_id))
                .map(str::to_owned)
        })
        .collect();
    run_ids.sort();
    run_ids
}

/// The records kept of `run_ids`, each with the run id of its file, and a line for each one
/// that cannot be read (damaged, or written by a newer release), which the journal lists as a
/// blocker rather than drop in silence.
pub fn read_history<'a>(
    repo: &Path,
    run_ids: impl IntoIterator<Item = &'a String>,
) -> (Vec<(&'a String, RunRecord)>, Vec<String>) {
    let mut records = Vec::new();
    let mut damaged = Vec::new();
    for run_id in run_ids {
        let path = history_file(repo, run_id);
        match read_record(&path) {
            Ok(record) => records.push((run_id, record)),
            Err(problem) => damaged.push(format!(
                "the journal's record of a removed run, `{}`, cannot be read: {problem}; the days that run went on are shown without it",
                path.display()
            )),
        }
    }
    (records, damaged)
}

fn read_record(path: &Path) -> Result<RunRecord, String> {
    // Only a regular file, and bounded: an agent runs as the operator and can write `.tnh/`.
    let (bytes, truncated) = crate::artifacts::safe_files::read_regular(path, RECORD_LIMIT)
        .map_err(|error| error.to_string())?;
    if truncated {
        return Err(format!("it is larger than {RECORD_LIMIT} bytes"));
    }
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|error| error.to_string())?;
    /// The version alone, read before the record's own type.
    #[derive(serde::Deserialize)]
    struct Versioned {
        #[serde(default, deserialize_with = "crate::artifacts::evidence::lenient")]
        schema_version: Option<u64>,
    }
    let versioned = <Versioned as serde::Deserialize>::deserialize(&value).ok();
    if let Some(version) = versioned.and_then(|versioned| versioned.schema_version)
        && version > u64::from(SCHEMA_VERSION)
    {
        return Err(format!(
            "it was written by a newer tnh-conductor (schema_version {version}; this release reads up to {SCHEMA_VERSION})"
        ));
    }
    serde_json::from_value(value).map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_or_newer_record_is_reported_and_other_names_are_ignored() {
        let repo = tempfile::tempdir().unwrap();
        let folder = repo.path().join(HISTORY_DIR);
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("20261206T010203Z-abcdef.json"), "{").unwrap();
        std::fs::write(
            folder.join("20261206T010204Z-abcdef.json"),
            r#"{"schema_version": 999}"#,
        )
        .unwrap();
        std::fs::write(folder.join("notes.json"), "{").unwrap();
        let kept = kept_runs(repo.path());
        assert_eq!(kept.len(), 2, "{kept:?}");
        let (records, damaged) = read_history(repo.path(), &kept);
        assert!(records.is_empty());
        assert_eq!(damaged.len(), 2, "{damaged:?}");
        assert!(damaged[1].contains("newer tnh-conductor"), "{damaged:?}");
    }
}
