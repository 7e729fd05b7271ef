//! Arguments of the commands whose behaviour lands in later releases. They are declared now so
//! that `--help` shows the whole command tree; running one answers "not
//! implemented yet" with exit 2.

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// `init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Overwrite an existing `.tnh/config.yaml` (or the `--config FILE` to write).
    #[arg(long)]
    pub force: bool,
}

/// `runs …`.
#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// Every run, newest first.
    List {
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Only the N most recent runs.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
    },
    /// One run's metadata, steps and outcome.
    Show {
        /// The run.
        run_id: String,
    },
    /// A run's events.
    Events {
        /// The run.
        run_id: String,
        /// Keep printing new events as they arrive.
        #[arg(long)]
        follow: bool,
    },
    /// End a run that waits at a gate or stands interrupted, for good.
    Abandon {
        /// The run.
        run_id: String,
        /// Why, recorded with the run's end.
        #[arg(long)]
        reason: Option<String>,
        /// Who ends it (default: $USER).
        #[arg(long = "as", value_name = "NAME")]
        by: Option<String>,
    },
    /// Remove finished runs' worktrees.
    Clean {
        /// Only runs that ended longer ago than this (e.g. `7d`).
        #[arg(long, value_name = "DURATION")]
        older_than: Option<String>,
        /// Remove run directories and refs too.
        #[arg(long)]
        all: bool,
        /// Keep the N most recently finished runs whatever their age.
        #[arg(long, value_name = "N")]
        keep: Option<usize>,
    },
}

impl RunsCommand {
    /// The subcommand's name.
    pub fn name(&self) -> &'static str {
        match self {
            RunsCommand::List { .. } => "list",
            RunsCommand::Show { .. } => "show",
            RunsCommand::Events { .. } => "events",
            RunsCommand::Abandon { .. } => "abandon",
            RunsCommand::Clean { .. } => "clean",
        }
    }
}

/// `planner …`.
#[derive(Debug, Subcommand)]
pub enum PlannerCommand {
    /// Run decision vectors against a planner backend.
    Check {
        /// A directory of decision-vector JSON files.
        vectors_dir: PathBuf,
        /// The planner profile to check.
        #[arg(long)]
        planner: Option<String>,
    },
}

impl PlannerCommand {
    /// The subcommand's name.
    pub fn name(&self) -> &'static str {
        match self {
            PlannerCommand::Check { .. } => "check",
        }
    }
}
