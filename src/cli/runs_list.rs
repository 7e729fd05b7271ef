//! `tnh-conductor runs list`: every run, newest first, with what is wrong with its files.

use std::fmt::Write as _;
use std::path::Path;

use super::output::one_line;
use super::runs::{state_damage, status_of};
use super::{Cli, Output, repo_root};
use crate::artifacts::{LifecycleState, RunDir, RunMetadata};
use crate::error::{ExitStatus, Result};
use crate::kernel::run::DEFAULT_ARTIFACTS_ROOT;

/// What `runs list --json` prints.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct RunsList {
    /// The format's version.
    pub schema_version: u32,
    /// Every run (the most recent ones with `--limit`), newest first.
    pub runs: Vec<RunRow>,
}

/// One run of `runs list --json`.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct RunRow {
    /// The run.
    pub run_id: String,
    /// `running`, `waiting`, `blocked`, `failed`, `completed` or `abandoned` (absent when
    /// `status.json` and `state.json` are unreadable).
    pub state: Option<String>,
    /// The step it is at.
    pub step: Option<String>,
    /// Its workflow.
    pub workflow_id: Option<String>,
    /// When it started (RFC 3339); absent when its metadata is damaged.
    pub started_at: Option<String>,
    /// What is wrong with its files, when something is: a `metadata.json` that cannot be
    /// read, a `state.json` that is damaged, written by a newer release, or missing while the
    /// run waits at a gate; with what to do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub damaged: Option<String>,
    /// The deadline (RFC 3339) of the gate the run waits at, when it has passed: nothing
    /// drives the run, and `resume` or any decision times the gate out (its `gate_timed_out`
    /// route).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate_deadline_passed: Option<String>,
    /// Where `land` brought the run (`main`, `origin` for a push alone), when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub landed: Option<String>,
}

/// `runs list`: every run, newest first.
pub fn cmd_runs_list(
    cli: &Cli,
    json: bool,
    limit: Option<usize>,
    output: &mut Output,
) -> Result<ExitStatus> {
    let root = repo_root(cli)?.join(DEFAULT_ARTIFACTS_ROOT);
    let rows: Vec<RunRow> = run_ids(&root, limit)
        .into_iter()
        .map(|id| list_row(&root, id))
        .collect();
    note_problems(&rows, output);
    if json {
        let list = RunsList {
            schema_version: crate::artifacts::SCHEMA_VERSION,
            runs: rows,
        };
        output.print(&format!("{}\n", serde_json::to_string_pretty(&list)?));
    } else if rows.is_empty() {
        output.note("no runs yet: start one with `tnh-conductor run WORKFLOW`");
    } else {
        output.print(&list_text(rows));
    }
    Ok(ExitStatus::Success)
}

/// The ids of the runs under `root`, newest first, the `limit` most recent ones when given.
fn run_ids(root: &Path, limit: Option<usize>) -> Vec<String> {
    let mut ids: Vec<String> = match std::fs::read_dir(root) {
        Ok(entries) => entries
            .filter_map(|entry| entry.ok())
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| crate::artifacts::is_run_id(name))
            .collect(),
        Err(_) => Vec::new(),
    };
    ids.sort_unstable_by(|left, right| right.cmp(left));
    // Run ids start with their start time: the first ones are the most recent, and only
    // those are read.
    ids.truncate(limit.unwrap_or(usize::MAX));
    ids
}

/// One run's row, from its `status.json`, `metadata.json` and `state.json`.
fn list_row(root: &Path, id: String) -> RunRow {
    let run_dir = RunDir::at(root.join(&id));
    let status = status_of(&run_dir).ok();
    let mut row = RunRow {
        state: status
            .as_ref()
            .map(|status| status.lifecycle_state.name().to_owned()),
        step: status
            .as_ref()
            .and_then(|status| status.current_step_id.clone()),
        run_id: id,
        workflow_id: None,
        started_at: None,
        damaged: None,
        gate_deadline_passed: None,
        landed: None,
    };
    row.gate_deadline_passed = status
        .as_ref()
        .filter(|status| status.lifecycle_state == LifecycleState::Waiting)
        .and_then(|status| Some((status.current_step_id.as_deref()?, status.visit?)))
        .and_then(|(step, visit)| crate::kernel::gate::gate_deadline_passed(&run_dir, step, visit));
    // A run whose metadata cannot be read is listed, not hidden: with what `status.json`
    // says of it, and what is wrong.
    let mut damage = Vec::new();
    match run_dir.read_metadata() {
        Ok(metadata) => {
            row.landed = landed_where(&metadata);
            row.workflow_id = Some(metadata.workflow_id);
            row.started_at = Some(metadata.started_at);
        }
        Err(error) => {
            row.workflow_id = status.as_ref().map(|status| status.workflow_id.clone());
            damage.push(format!(
                "{error}; restore the file (from a backup) to resume or decide the run"
            ));
        }
    }
    damage.extend(state_damage(&run_dir, status.as_ref()));
    if !damage.is_empty() {
        row.damaged = Some(damage.join("; and "));
    }
    row
}

/// A warning for each damaged run and a note for each gate past its deadline.
fn note_problems(rows: &[RunRow], output: &mut Output) {
    for row in rows {
        if let Some(damage) = &row.damaged {
            output.note(&format!("warning: run {} is damaged: {damage}", row.run_id));
        }
        if let Some(deadline) = &row.gate_deadline_passed {
            output.note(&format!(
                "note: run {} waits at a gate {}",
                row.run_id,
                crate::kernel::journal::deadline_passed_text(&row.run_id, deadline)
            ));
        }
    }
}

/// The table `runs list` prints: one line per run.
fn list_text(rows: Vec<RunRow>) -> String {
    let mut text = String::new();
    for row in rows {
        let or_dash = |value: &Option<String>| value.clone().unwrap_or_else(|| "-".into());
        let step = or_dash(&row.step);
        let step = if row.damaged.is_some() {
            format!("{step} (damaged)")
        } else {
            step
        };
        let step = if row.gate_deadline_passed.is_some() {
            format!("{step} (past its deadline)")
        } else {
            step
        };
        let step = match &row.landed {
            Some(place) => format!("{step} (landed: {})", one_line(place)),
            None => step,
        };
        let _ = writeln!(
            text,
            "{}  {:10} {:20} {step}",
            row.run_id,
            or_dash(&row.state),
            or_dash(&row.workflow_id),
        );
    }
    text
}

/// Where a run was landed: the branches, else the remotes pushed to.
fn landed_where(metadata: &RunMetadata) -> Option<String> {
    let into: Vec<&str> = metadata
        .landings
        .iter()
        .filter_map(|landing| landing.into.as_deref())
        .collect();
    let pushed: Vec<&str> = metadata
        .landings
        .iter()
        .filter_map(|landing| landing.remote.as_deref())
        .collect();
    let places = if into.is_empty() { pushed } else { into };
    (!places.is_empty()).then(|| places.join(", "))
}
