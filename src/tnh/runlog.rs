//! `tnh runlog append`: a structured note from the agent into the current step's run log.
//!
//! The kernel owns the event stream's `seq`, so the agent never writes `events.ndjson`: it
//! appends one JSON line to `$TNH_STEP_DIR/runlog.ndjson` (O_APPEND, one write a line), and the
//! kernel turns each line into an `agent_runlog` event when the step ends.

use std::io::Write;

use clap::{Subcommand, ValueEnum};

use super::{TnhError, TnhResult, print};
use crate::artifacts::{RunlogEntry, RunlogKind};
use crate::exit::ExitStatus;

/// `tnh runlog …`.
#[derive(Debug, Subcommand)]
pub enum RunlogCommand {
    /// Append an entry to the current step's run log (inside a run only).
    #[command(
        after_help = "Examples:\n  tnh runlog append --kind decision --message \"Kept the old API; see ADR-7\"\n  tnh runlog append --kind blocker --message \"Tests need a database\" --ref tests/db.rs\n\n\
Entries become `agent_runlog` events of the run when the step ends.\n\n\
Exit codes: 0 recorded; 2 outside a run, an empty message, or the step folder cannot be written."
    )]
    Append {
        /// What kind of entry.
        #[arg(long, value_enum)]
        kind: Kind,
        /// The entry.
        #[arg(long)]
        message: String,
        /// A file or artifact it refers to.
        #[arg(long = "ref", value_name = "PATH")]
        reference: Option<String>,
    },
}

/// Kinds of run-log entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    /// Something worth knowing.
    Note,
    /// A choice made, and why.
    Decision,
    /// Something that stops progress.
    Blocker,
    /// A question for a human.
    Question,
}

impl From<Kind> for RunlogKind {
    fn from(kind: Kind) -> Self {
        match kind {
            Kind::Note => RunlogKind::Note,
            Kind::Decision => RunlogKind::Decision,
            Kind::Blocker => RunlogKind::Blocker,
            Kind::Question => RunlogKind::Question,
        }
    }
}

pub use crate::artifacts::RUNLOG_FILE;

/// Runs `tnh runlog …`.
pub fn run(command: &RunlogCommand) -> TnhResult {
    let RunlogCommand::Append {
        kind,
        message,
        reference,
    } = command;
    let step_dir = std::env::var("TNH_STEP_DIR")
        .ok()
        .filter(|dir| !dir.is_empty())
        .ok_or_else(|| {
            TnhError::new(
                "not inside a tnh-conductor run (TNH_STEP_DIR is not set)",
                "runlog entries belong to a run's step; use it from an agent step",
            )
        })?;
    if message.trim().is_empty() {
        return Err(TnhError::new(
            "the message is empty",
            "say what to record with --message",
        ));
    }
    let entry = RunlogEntry {
        schema_version: crate::artifacts::SCHEMA_VERSION,
        timestamp: crate::artifacts::now(),
        kind: (*kind).into(),
        message: message.clone(),
        reference: reference.clone(),
        step_id: std::env::var("TNH_STEP_ID").ok(),
    };
    let mut line = serde_json::to_vec(&entry).unwrap_or_default();
    line.push(b'\n');
    let path = std::path::Path::new(&step_dir).join(RUNLOG_FILE);
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(&line))
        .map_err(|error| {
            TnhError::new(
                format!("cannot append to {}: {error}", path.display()),
                "check the step folder",
            )
        })?;
    print("recorded\n");
    Ok(ExitStatus::Success)
}
