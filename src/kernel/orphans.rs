//! Processes left behind by a driver that was killed: every agent and validator of a run has
//! `TNH_RUN_ID=<run_id>` in its environment, so on resume they can be found in `/proc` and
//! killed before the interrupted step runs again (two agents must never edit one worktree).

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Kills every process (other than this one) whose environment names this run; returns their
/// pids. Processes that cannot be inspected are skipped.
pub fn kill_run_orphans(run_id: &str) -> Vec<i32> {
    let marker = format!("TNH_RUN_ID={run_id}");
    let own = std::process::id() as i32;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut killed = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == own {
            continue;
        }
        let Ok(environment) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if environment
            .split(|byte| *byte == 0)
            .any(|variable| variable == marker.as_bytes())
            && kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok()
        {
            killed.push(pid);
        }
    }
    killed
}
