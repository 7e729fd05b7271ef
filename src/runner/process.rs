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

/// How one step's processes are recognised: its process group, its supervision token, and
/// the moment its leader was about to start, before which none of them can have been born.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StepMark {
    /// The leader's pid, which is the group id (0 until the leader exists).
    pub(crate) pgid: i32,
    /// The value of [`SUPERVISION_TOKEN_VARIABLE`] in every process of the step.
    pub(crate) token: String,
    /// Clock ticks since boot (the unit of `/proc/PID/stat`'s start time), rounded down and
    /// less one, taken before the leader was started.
    pub(crate) born_after: u64,
}

impl StepMark {
    /// The mark of a step whose leader is about to be started.
    pub(crate) fn before_start() -> StepMark {
        StepMark {
            pgid: 0,
            token: new_token(),
            born_after: ticks_since_boot().saturating_sub(1),
        }
    }
}

/// Now, in the clock ticks since boot that `/proc/PID/stat` counts start times in (0 when the
/// clock cannot be read, which makes every process a candidate).
fn ticks_since_boot() -> u64 {
    let ticks_per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|&ticks| ticks > 0)
        .unwrap_or(100) as u64;
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).map_or(0, |now| {
        let nanos = now.tv_sec() as u64 * 1_000_000_000 + now.tv_nsec() as u64;
        nanos / (1_000_000_000 / ticks_per_second)
    })
}

/// Signals the whole group and every token holder outside it; absent processes are fine.
pub(crate) fn signal_step(mark: &StepMark, signal: Signal) {
    // ESRCH (group already empty) is the expected end state, not an error.
    let _ = killpg(Pid::from_raw(mark.pgid), signal);
    for stray in find_step_processes(mark) {
        if stray.left_group {
            let _ = kill(Pid::from_raw(stray.pid), signal);
        }
    }
}

/// Every live (non-zombie) process of the step: group members and token holders.
///
/// Only processes born since the step began can hold its token, so the environment (the
/// costly read) is looked at only for those: on a busy host most processes are older.
pub(crate) fn find_step_processes(mark: &StepMark) -> Vec<StrayProcess> {
    // NUL-framed, so one token cannot match as the suffix of another variable.
    let needle = format!("\0{SUPERVISION_TOKEN_VARIABLE}={}\0", mark.token);
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
        let Some(stat) = read_stat(pid) else {
            continue;
        };
        if stat.state == 'Z' || stat.state == 'X' {
            continue;
        }
        let in_group = stat.group == mark.pgid;
        let may_hold_token = stat.started >= mark.born_after;
        if in_group || (may_hold_token && environment_contains(pid, needle.as_bytes())) {
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
        .filter(|&pid| read_stat(pid).is_some_and(|stat| stat.is_live()))
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
        .filter(|&pid| read_stat(pid).is_some_and(|stat| stat.group == pgid && stat.is_live()))
        .collect()
}

/// What the supervisor reads of `/proc/PID/stat`.
struct Stat {
    /// The state letter (`R`, `S`, `Z`, …).
    state: char,
    /// The process group.
    group: i32,
    /// The start time, in clock ticks since boot.
    started: u64,
}

impl Stat {
    fn is_live(&self) -> bool {
        self.state != 'Z' && self.state != 'X'
    }
}

fn read_stat(pid: i32) -> Option<Stat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself contain spaces or parentheses, so
    // the fields are counted from the last `)`: state, ppid, pgrp, …, starttime (the 20th).
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().take(20).collect();
    Some(Stat {
        state: fields.first()?.chars().next()?,
        group: fields.get(2)?.parse().ok()?,
        started: fields.get(19)?.parse().ok()?,
    })
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

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;

    use super::*;

    /// A process outside any step's group that carries `mark`'s token, killed when dropped.
    struct TokenHolder(std::process::Child);

    impl TokenHolder {
        /// Returns once the holder has exec'd, so its `/proc/PID/environ` holds the token: the
        /// shell says so on stdout, then becomes `sleep` (same pid, same environment).
        fn start(mark: &StepMark) -> TokenHolder {
            use std::io::BufRead;
            let mut child = std::process::Command::new("sh")
                .args(["-c", "echo started; exec sleep 30"])
                .env(SUPERVISION_TOKEN_VARIABLE, &mark.token)
                .stdout(std::process::Stdio::piped())
                .process_group(0)
                .spawn()
                .unwrap();
            let mut line = String::new();
            let stdout = child.stdout.take().unwrap();
            std::io::BufReader::new(stdout)
                .read_line(&mut line)
                .unwrap();
            assert_eq!(line, "started\n");
            TokenHolder(child)
        }
    }

    impl Drop for TokenHolder {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// A fresh mark (with a group no process has) and a running holder of its token.
    fn holder_of_a_fresh_mark() -> (StepMark, TokenHolder) {
        let mut mark = StepMark::before_start();
        mark.pgid = -1;
        let holder = TokenHolder::start(&mark);
        (mark, holder)
    }

    #[test]
    fn a_token_holder_born_after_the_mark_is_found_outside_the_group() {
        let (mark, holder) = holder_of_a_fresh_mark();
        let found = find_step_processes(&mark);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].pid, holder.0.id() as i32);
        assert!(found[0].left_group);
    }

    #[test]
    fn a_process_born_before_the_mark_is_not_a_token_holder() {
        let (mut mark, _holder) = holder_of_a_fresh_mark();
        // As if the step had begun after the holder was born.
        mark.born_after = ticks_since_boot() + 1;
        assert!(find_step_processes(&mark).is_empty());
    }
}
