//! `tnh-conductor rollback RUN_ID [--target pre_run|pre_step]`: the operator's manual rollback
//! of a run's worktree, with the same semantics as the ROLLBACK opcode. The record is printed
//! and kept in the run directory as `rollbacks/<n>.json`, so the rollback is part of the run's
//! evidence.

use std::path::Path;

use clap::Args;

use super::Output;
use crate::error::{Error, ExitStatus, Result};
use crate::kernel::operator_rollback::{AfterRollback, rollback_run};
use crate::workspace::RollbackTarget;

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

/// Rolls a run's worktree back, records it in the run directory and reports what was undone.
pub fn cmd_rollback(
    repo_root: &Path,
    args: &RollbackArgs,
    output: &mut Output,
) -> Result<ExitStatus> {
    let done = rollback_run(repo_root, &args.run_id, args.target)
        .map_err(|error| Error::Run(Box::new(error)))?;
    let record = &done.record;
    if done.recreated {
        output.note(&format!(
            "the worktree folder was gone: checked branch {} out again at {}",
            done.branch,
            done.worktree.display()
        ));
    }
    if let Some(attempt) = &record.interrupted_attempt {
        output.note(&format!(
            "an earlier rollback of this run (to {}, started {}, event {}) was interrupted and may already have reset the worktree: HEAD was {} then{}; what it undid is not counted in `undone` below",
            attempt.target,
            attempt.started_at,
            attempt.started_seq,
            short(&attempt.head_before),
            attempt
                .tree_before
                .as_deref()
                .map(|tree| format!(" and its files were tree {tree}"))
                .unwrap_or_default(),
        ));
    }
    if args.json {
        output.print(&format!("{}\n", serde_json::to_string_pretty(record)?));
    } else {
        output.print(&format!(
            "rolled back run {} to {} ({})\n  undone: {}\n  HEAD: {} -> {}\n  record: {}\n",
            record.run_id,
            record.target,
            record.snapshot.reference,
            record.before,
            short(&record.head_before),
            short(&record.head_after),
            done.record_file,
        ));
    }
    if let AfterRollback::Continues {
        waiting_gate,
        violation_cleared,
        violation_kept,
    } = &done.run
    {
        match waiting_gate {
            Some(gate) => output.note(&format!(
                "gate `{gate}` still waits, but the change it showed is gone: deciding it now needs `--accept-drift` (`tnh-conductor gate approve|reject {} --accept-drift`), which is recorded",
                record.run_id
            )),
            None => output.note(&format!(
                "`tnh-conductor resume {}` continues from this worktree",
                record.run_id
            )),
        }
        if let Some(violation) = violation_cleared {
            output.note(&format!(
                "the policy violation ({violation}) no longer makes EVALUATE unsafe"
            ));
        }
        if let Some(violation) = violation_kept {
            output.note(&format!(
                "the policy violation ({violation}) still stands: an agent step ran after it, so the pre_step snapshot does not undo it; `--target pre_run` does"
            ));
        }
    }
    Ok(ExitStatus::Success)
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}
