//! Processes left behind by a driver that was killed, ended on `resume` before the
//! interrupted step runs again (two agents must never edit one worktree, nor two planners
//! judge one step). They are found two ways:
//!
//! - the step's process group, which the supervisor recorded in the visit's folder
//!   ([`crate::runner::PROCESS_GROUP_FILE`], the agent's and each validator's) while the step
//!   ran: every member is ended, a process that cleared its environment (`env -i`) but stayed
//!   in the group included, provided the group can be shown to be still the step's (a group
//!   id is a pid, and pids are reused: see [`crate::runner::kill_recorded_group`]);
//! - every agent, validator and planner of a run has `TNH_RUN_ID=<run_id>` in its
//!   environment, so the run's processes that left the group are found in `/proc`.
//!
//! The marked processes are killed first (the run's planner included), then what is left of
//! the recorded groups. One pass with a SIGKILL per pid misses a process that keeps forking
//! (its successor is born after the look); both stop before they kill, in passes until one
//! finds nothing.

use std::path::{Path, PathBuf};

pub use crate::runner::KilledProcesses;
use crate::runner::{GroupEnding, PROCESS_GROUP_FILE, RecordedGroup};

/// Kills every process (other than this one) whose environment names this run, in passes
/// until none is left (or a time limit, after which the survivors are reported). Processes
/// that cannot be inspected are skipped.
pub fn kill_run_orphans(run_id: &str) -> KilledProcesses {
    crate::runner::kill_marked("TNH_RUN_ID", run_id)
}

/// The file of an interrupted visit's folder that keeps the pids [`stop_before_checks`] killed,
/// until the visit's `step_interrupted` event lists them (see [`end_recorded_groups`]).
pub const STOPPED_ORPHANS_FILE: &str = crate::artifacts::VisitDir::STOPPED_ORPHANS;

/// [`STOPPED_ORPHANS_FILE`]: the pids a refused `resume` killed for the visit
/// (`tnh-conductor schema stopped-orphans`).
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
#[schemars(
    description = "`stopped_orphans.json`: the pids a refused `resume` killed for the interrupted visit, kept until the visit's `step_interrupted` event lists them. An older release wrote a bare list of pids; it is still read."
)]
pub struct StoppedOrphans {
    /// The version of this format.
    pub schema_version: u32,
    /// The pids killed, in order.
    #[schemars(inner(range(min = 1)))]
    pub pids: Vec<i32>,
}

/// What [`STOPPED_ORPHANS_FILE`] may hold: this format, or the bare list of pids an older
/// release wrote (a run that crashed under it is resumed by this one).
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum StoppedRecord {
    Versioned(StoppedOrphans),
    Unversioned(Vec<i32>),
}

/// Ends the run's orphans as `resume` begins, before it checks anything it may refuse for
/// (drift, repository changes, damaged or missing files, an edited workflow): a refusal
/// must not leave the crashed driver's agent running unsupervised, nor let it make more
/// changes after the operator was shown what changed. The run's marked processes are killed,
/// then, when the visit the run stopped in is known (`visit_dir`), what is left of its
/// recorded groups; the pids killed are kept in that folder ([`STOPPED_ORPHANS_FILE`]), so the
/// visit's `step_interrupted` event still lists them when a later `resume` records it.
pub fn stop_before_checks(run_id: &str, visit_dir: Option<&Path>) -> KilledProcesses {
    let orphans = kill_run_orphans(run_id);
    let Some(visit_dir) = visit_dir else {
        return orphans;
    };
    let orphans = end_groups(visit_dir, orphans);
    if !orphans.killed.is_empty() && visit_dir.is_dir() {
        let mut kept = stopped_before(visit_dir);
        kept.extend(&orphans.killed);
        kept.sort_unstable();
        kept.dedup();
        // Best effort: the pids are gone either way, and this is only their record.
        let record = StoppedOrphans {
            schema_version: crate::artifacts::SCHEMA_VERSION,
            pids: kept,
        };
        let _ = crate::artifacts::write_json_atomic(&visit_dir.join(STOPPED_ORPHANS_FILE), &record);
    }
    orphans
}

/// The pids an earlier `resume` killed for the visit before it refused (see
/// [`stop_before_checks`]), from a record of this release or of an older one.
fn stopped_before(visit_dir: &Path) -> Vec<i32> {
    crate::artifacts::safe_files::read_regular(&visit_dir.join(STOPPED_ORPHANS_FILE), 64 * 1024)
        .ok()
        .and_then(|(bytes, _)| serde_json::from_slice::<StoppedRecord>(&bytes).ok())
        .map(|record| match record {
            StoppedRecord::Versioned(record) => record.pids,
            StoppedRecord::Unversioned(pids) => pids,
        })
        .unwrap_or_default()
}

/// Kills what is left of the process groups recorded in the visit folder `visit_dir` (the
/// agent's, each validator's), when each is still the step's, and removes the records; the
/// members killed, and any that survived, are added to `orphans` (what
/// [`kill_run_orphans`] did), with those [`stop_before_checks`] killed for this visit before
/// (whose record is spent too).
pub fn end_recorded_groups(visit_dir: &Path, orphans: KilledProcesses) -> KilledProcesses {
    let KilledProcesses {
        mut killed,
        survivors,
    } = end_groups(visit_dir, orphans);
    let stopped = visit_dir.join(STOPPED_ORPHANS_FILE);
    killed.extend(stopped_before(visit_dir));
    let _ = std::fs::remove_file(stopped);
    killed.sort_unstable();
    killed.dedup();
    KilledProcesses { killed, survivors }
}

/// [`end_recorded_groups`] without the pids killed before.
fn end_groups(visit_dir: &Path, orphans: KilledProcesses) -> KilledProcesses {
    let KilledProcesses {
        mut killed,
        mut survivors,
    } = orphans;
    for record in group_records(visit_dir) {
        // Only a regular file, and a small one: the agent could plant a FIFO or a link here.
        let group = crate::artifacts::safe_files::read_regular(&record, 64 * 1024)
            .ok()
            .and_then(|(bytes, _)| serde_json::from_slice::<RecordedGroup>(&bytes).ok());
        if let Some(group) = group
            && let GroupEnding::Killed {
                killed: members,
                survivors: left,
            } = crate::runner::kill_recorded_group(&group)
        {
            killed.extend(members);
            survivors.extend(left);
        }
        // Spent either way: the group is gone, or it is not the step's any more.
        let _ = std::fs::remove_file(&record);
    }
    killed.sort_unstable();
    killed.dedup();
    survivors.sort_unstable();
    survivors.dedup();
    KilledProcesses { killed, survivors }
}

/// The group records in a visit's folder: the agent's, and each validator's
/// (`validators/<id>/`).
fn group_records(visit_dir: &Path) -> Vec<PathBuf> {
    let mut records = vec![visit_dir.join(PROCESS_GROUP_FILE)];
    if let Ok(entries) = std::fs::read_dir(visit_dir.join(crate::artifacts::VisitDir::VALIDATORS)) {
        records.extend(
            entries
                .flatten()
                .map(|entry| entry.path().join(PROCESS_GROUP_FILE)),
        );
    }
    records.retain(|record| record.is_file());
    records
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pids_are_read_from_a_versioned_record_or_an_older_releases_bare_list() {
        let folder = tempfile::tempdir().unwrap();
        let record = folder.path().join(STOPPED_ORPHANS_FILE);
        std::fs::write(&record, r#"{"schema_version": 1, "pids": [12, 34]}"#).unwrap();
        assert_eq!(stopped_before(folder.path()), [12, 34]);
        std::fs::write(&record, "[56, 78]").unwrap();
        assert_eq!(stopped_before(folder.path()), [56, 78]);
        std::fs::write(&record, "{\"pids\": \"damaged\"}").unwrap();
        assert!(stopped_before(folder.path()).is_empty());
    }
}
