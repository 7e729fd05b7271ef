//! Processes left behind by a driver that was killed: every agent, validator and planner of a
//! run has `TNH_RUN_ID=<run_id>` in its environment, so on resume they can be found in `/proc`
//! and killed before the interrupted step runs again (two agents must never edit one worktree,
//! nor two planners judge one step).

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Kills every process (other than this one) whose environment names this run; returns their
/// pids. Processes that cannot be inspected are skipped.
pub fn kill_run_orphans(run_id: &str) -> Vec<i32> {
    crate::runner::processes_with_variable("TNH_RUN_ID", run_id)
        .into_iter()
        .filter(|pid| kill(Pid::from_raw(*pid), Signal::SIGKILL).is_ok())
        .collect()
}
