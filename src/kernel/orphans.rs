//! Processes left behind by a driver that was killed: every agent, validator and planner of a
//! run has `TNH_RUN_ID=<run_id>` in its environment, so on resume they can be found in `/proc`
//! and killed before the interrupted step runs again (two agents must never edit one worktree,
//! nor two planners judge one step).
//!
//! One pass with a SIGKILL per pid misses a process that keeps forking (its successor is born
//! after the look); the runner's [`crate::runner::kill_marked`] stops and kills in passes
//! until one finds nothing.

pub use crate::runner::KilledProcesses;

/// Kills every process (other than this one) whose environment names this run, in passes
/// until none is left (or a time limit, after which the survivors are reported). Processes
/// that cannot be inspected are skipped.
pub fn kill_run_orphans(run_id: &str) -> KilledProcesses {
    crate::runner::kill_marked("TNH_RUN_ID", run_id)
}
