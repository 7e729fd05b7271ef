//! Finding and signalling every process that belongs to a step.
//!
//! A step's processes are (a) its process group, which every descendant joins unless it
//! calls `setsid`/`setpgid`, and (b) every process whose environment carries the step's
//! supervision token (`TNH_SUPERVISION_ID`), which catches descendants that left the group
//! (a `setsid` escape, a double-forked daemon) because the environment is inherited across
//! `fork` and `exec`. Both are read from `/proc`, which also lets us ignore zombies: on this
//! kind of host PID 1 does not reap orphans, so `kill(-pgid, 0)` alone would report dead
//! processes as alive.
//!
//! Limitation: a descendant that both leaves the group and execs with a cleared environment
//! cannot be found this way (see docs/runners.md).

use std::collections::BTreeMap;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

/// The environment variable that marks every process of one step.
pub const SUPERVISION_TOKEN_VARIABLE: &str = "TNH_SUPERVISION_ID";

/// A process found alive that belonged to a step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StrayProcess {
    /// Its process id.
    pub pid: i32,
    /// Its command line (`/proc/PID/cmdline`, arguments joined by spaces).
    pub command: String,
    /// True when it had left the step's process group (`setsid` or `setpgid`).
    pub left_group: bool,
}

/// Signals the whole group and every token holder outside it; absent processes are fine.
pub(crate) fn signal_step(pgid: i32, token: &str, signal: Signal) {
    // ESRCH (group already empty) is the expected end state, not an error.
    let _ = killpg(Pid::from_raw(pgid), signal);
    for stray in find_step_processes(pgid, token) {
        if stray.left_group {
            let _ = kill(Pid::from_raw(stray.pid), signal);
        }
    }
}

/// Every live (non-zombie) process of the step: group members and token holders.
pub fn find_step_processes(pgid: i32, token: &str) -> Vec<StrayProcess> {
    // NUL-framed, so one token cannot match as the suffix of another variable.
    let needle = format!("\0{SUPERVISION_TOKEN_VARIABLE}={token}\0");
    let mut found = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let own_pid = std::process::id() as i32;
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == own_pid {
            continue;
        }
        let Some((state, group)) = read_state_and_group(pid) else {
            continue;
        };
        if state == 'Z' || state == 'X' {
            continue;
        }
        let in_group = group == pgid;
        if in_group || environment_contains(pid, needle.as_bytes()) {
            found.insert(
                pid,
                StrayProcess {
                    pid,
                    command: read_command(pid),
                    left_group: !in_group,
                },
            );
        }
    }
    found.into_values().collect()
}

/// Live processes (other than this one, zombies excluded) whose environment holds `NAME=value`:
/// how processes of a run are found again after the process that started them was killed.
pub fn processes_with_variable(name: &str, value: &str) -> Vec<i32> {
    let needle = format!("\0{name}={value}\0");
    let own_pid = std::process::id() as i32;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != own_pid)
        .filter(|&pid| matches!(read_state_and_group(pid), Some((state, _)) if state != 'Z' && state != 'X'))
        .filter(|&pid| environment_contains(pid, needle.as_bytes()))
        .collect()
}

/// Every live process in group `pgid` (used by tests and the final sweep).
pub fn live_group_members(pgid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            matches!(read_state_and_group(pid), Some((state, group)) if group == pgid && state != 'Z' && state != 'X')
        })
        .collect()
}

/// The state letter and process group of `pid`, from `/proc/PID/stat`.
fn read_state_and_group(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself contain spaces or parentheses, so
    // the fields are counted from the last `)`.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _parent = fields.next()?;
    let group = fields.next()?.parse().ok()?;
    Some((state, group))
}

fn environment_contains(pid: i32, needle: &[u8]) -> bool {
    // Other users' processes are unreadable (EACCES); they cannot be ours anyway.
    match std::fs::read(format!("/proc/{pid}/environ")) {
        Ok(environment) => {
            // The first variable has no NUL before it.
            environment.starts_with(&needle[1..])
                || memchr::memmem::find(&environment, needle).is_some()
        }
        Err(_) => false,
    }
}

fn read_command(pid: i32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let text = String::from_utf8_lossy(&raw);
    text.trim_end_matches('\0').replace('\0', " ")
}

/// A token unique to one supervised step on this machine.
pub(crate) fn new_token() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let sequence = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{}-{nanos:x}-{sequence}", std::process::id())
}
