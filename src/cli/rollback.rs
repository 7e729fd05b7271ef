//! `tnh-conductor rollback RUN_ID [--target pre_run|pre_step]`: the operator's manual rollback
//! of a run's worktree, with the same semantics as the ROLLBACK opcode. The record is printed
//! and kept in the run directory as `rollbacks/<n>.json`, so the rollback is part of the run's
//! evidence.

use std::path::{Path, PathBuf};

use clap::Args;

use super::Output;
use crate::error::{Error, ExitStatus, Result};
use crate::workspace::runs::{find_repo_root, load_run};
use crate::workspace::{RollbackRecord, RollbackTarget, Workspace};

/// `rollback RUN_ID`.
#[derive(Debug, Args)]
pub struct RollbackArgs {
    /// The run whose worktree to roll back.
    pub run_id: String,
    /// `pre_run` (the run's base) or `pre_step` (before the most recent mutable step).
    #[arg(long, default_value = "pre_run", value_parser = parse_target)]
    pub target: RollbackTarget,
    /// Print the rollback record as JSON.
    #[arg(long)]
    pub json: bool,
}

fn parse_target(text: &str) -> std::result::Result<RollbackTarget, String> {
    text.parse()
}

/// Rolls a run's worktree back and reports what was undone.
pub fn cmd_rollback(
    repo: Option<&Path>,
    args: &RollbackArgs,
    output: &mut Output,
) -> Result<ExitStatus> {
    let start = repo.map_or_else(|| PathBuf::from("."), Path::to_owned);
    let repo_root = find_repo_root(&start)?;
    let run = load_run(&repo_root, &args.run_id)?;
    let (workspace, recreated) = Workspace::open_or_recreate(&run.record)?;
    if recreated {
        output.note(&format!(
            "the worktree folder was gone: checked branch {} out again at {}",
            run.record.branch,
            run.record.worktree_path.display()
        ));
    }
    let record = workspace.rollback(args.target)?;
    save_record(&run.dir, &record)?;
    if args.json {
        output.print(&format!("{}\n", serde_json::to_string_pretty(&record)?));
    } else {
        output.print(&format!(
            "rolled back run {} to {} ({})\n  undone: {}\n  HEAD: {} -> {}\n",
            record.run_id,
            record.target,
            record.snapshot.reference,
            record.before,
            short(&record.head_before),
            short(&record.head_after),
        ));
    }
    Ok(ExitStatus::Success)
}

fn save_record(run_dir: &Path, record: &RollbackRecord) -> Result<()> {
    let dir = run_dir.join("rollbacks");
    let io_error = |action, path: &Path, source| Error::Io {
        action,
        path: path.to_owned(),
        source,
    };
    std::fs::create_dir_all(&dir).map_err(|source| io_error("create", &dir, source))?;
    let count = std::fs::read_dir(&dir)
        .map_err(|source| io_error("read", &dir, source))?
        .count();
    let path = dir.join(format!("{}.json", count + 1));
    let text = serde_json::to_string_pretty(record)?;
    std::fs::write(&path, text).map_err(|source| io_error("write", &path, source))
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}
