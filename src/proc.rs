//! What the conductor reads of Linux's `/proc`, in one place: the processes there are, a
//! process's status line, command line, environment, open files, working directory and
//! children, the kernel's table of locks, the boot id and this process's own status and
//! memory. Every reader returns `None` (or nothing) where the file cannot be read: a process
//! that ended meanwhile, or another user's, is simply not there for us.
//!
//! A small module rather than the `procfs` crate: a dozen short reads, some of them on hot
//! paths (the supervisor's sweep, the script host's memory reading), and the crate's
//! dependencies would outweigh them.

use std::fs::File;
use std::path::{Path, PathBuf};

/// The kernel's table of locks.
pub const LOCKS: &str = "/proc/locks";

/// The folder of process `pid`.
fn dir(pid: impl std::fmt::Display) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}"))
}

/// The pids of every process (the numeric names of `/proc`); empty when it cannot be listed.
pub fn pids() -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .collect()
}

/// Whether process `pid` is there (a zombie included).
pub fn exists(pid: i32) -> bool {
    dir(pid).exists()
}

/// What is read of `/proc/PID/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// The state letter (`R`, `S`, `Z`, …).
    pub state: char,
    /// The parent's pid.
    pub parent: i32,
    /// The process group.
    pub group: i32,
    /// The session.
    pub session: i32,
    /// The start time, in clock ticks since boot.
    pub started: u64,
}

impl Stat {
    /// Neither a zombie nor dead.
    pub fn is_live(&self) -> bool {
        self.state != 'Z' && self.state != 'X'
    }
}

/// The status line of process `pid`.
pub fn stat(pid: i32) -> Option<Stat> {
    let stat = std::fs::read_to_string(dir(pid).join("stat")).ok()?;
    parse_stat(&stat)
}

/// A `/proc/PID/stat` line's fields.
fn parse_stat(stat: &str) -> Option<Stat> {
    // The command name is in parentheses and may itself contain spaces or parentheses, so
    // the fields are counted from the last `)`: state, ppid, pgrp, …, starttime (the 20th).
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().take(20).collect();
    Some(Stat {
        state: fields.first()?.chars().next()?,
        parent: fields.get(1)?.parse().ok()?,
        group: fields.get(2)?.parse().ok()?,
        session: fields.get(3)?.parse().ok()?,
        started: fields.get(19)?.parse().ok()?,
    })
}

/// The short command name (`comm`) of process `pid`, its line break trimmed.
pub fn command_name(pid: u32) -> Option<String> {
    let comm = std::fs::read_to_string(dir(pid).join("comm")).ok()?;
    Some(comm.trim_end().to_owned())
}

/// The command line of process `pid`, its arguments each ended by a NUL.
pub fn command_line(pid: impl std::fmt::Display) -> Option<Vec<u8>> {
    std::fs::read(dir(pid).join("cmdline")).ok()
}

/// The environment of process `pid`, `NAME=value` entries each ended by a NUL; other users'
/// processes are unreadable (`None`).
pub fn environment(pid: i32) -> Option<Vec<u8>> {
    std::fs::read(dir(pid).join("environ")).ok()
}

/// The working directory of process `pid`.
pub fn working_directory(pid: u32) -> Option<PathBuf> {
    std::fs::read_link(dir(pid).join("cwd")).ok()
}

/// A file a process has open.
#[derive(Debug, Clone)]
pub struct OpenFile {
    /// Its name as the kernel shows it, ` (deleted)` taken off.
    pub name: PathBuf,
    /// Its descriptor's link in `/proc/PID/fd`.
    descriptor: PathBuf,
}

impl OpenFile {
    /// The open file's own metadata (through the descriptor: a file renamed or deleted since
    /// it was opened included).
    pub fn metadata(&self) -> std::io::Result<std::fs::Metadata> {
        std::fs::metadata(&self.descriptor)
    }
}

/// The files process `pid` has open, read one by one as the caller goes; `None` when they
/// cannot be listed.
pub fn open_files(pid: u32) -> Option<impl Iterator<Item = OpenFile>> {
    use std::os::unix::ffi::OsStrExt;
    let entries = std::fs::read_dir(dir(pid).join("fd")).ok()?;
    Some(entries.flatten().filter_map(|entry| {
        let descriptor = entry.path();
        let target = std::fs::read_link(&descriptor).ok()?;
        let target = target.as_os_str().as_bytes();
        let name = target.strip_suffix(b" (deleted)").unwrap_or(target);
        Some(OpenFile {
            name: PathBuf::from(std::ffi::OsStr::from_bytes(name)),
            descriptor,
        })
    }))
}

/// The threads of process `pid`; `None` when the process is gone.
pub fn threads(pid: i32) -> Option<Vec<i32>> {
    let entries = std::fs::read_dir(dir(pid).join("task")).ok()?;
    Some(
        entries
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
            .collect(),
    )
}

/// The children list of thread `thread` of process `pid` (`/proc/PID/task/TID/children`:
/// pids separated by spaces), which kernels built without it do not have.
pub fn children(pid: i32, thread: i32) -> Option<String> {
    let path = dir(pid).join(format!("task/{thread}/children"));
    std::fs::read_to_string(path).ok()
}

/// The kernel's table of locks (`/proc/locks`).
pub fn locks() -> Option<String> {
    std::fs::read_to_string(LOCKS).ok()
}

/// The kernel's boot id, empty when it cannot be read.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|text| text.trim().to_owned())
        .unwrap_or_default()
}

/// This process's status (`/proc/self/status`).
pub fn own_status() -> Option<String> {
    std::fs::read_to_string("/proc/self/status").ok()
}

/// This process's memory figures (`/proc/self/statm`), opened to be read again and again.
pub fn own_memory_file() -> Option<File> {
    File::open(Path::new("/proc/self/statm")).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields() {
        let line = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 777 0 0";
        let stat = parse_stat(line).unwrap();
        assert_eq!(
            (
                stat.state,
                stat.parent,
                stat.group,
                stat.session,
                stat.started
            ),
            ('S', 1, 42, 42, 777)
        );
        assert!(parse_stat("42 (x) S 1").is_none());
    }

    #[test]
    fn this_process_is_found_with_its_own_status() {
        let own = std::process::id();
        let pid = i32::try_from(own).unwrap();
        assert!(pids().contains(&pid) && exists(pid));
        let stat = stat(pid).unwrap();
        assert!(stat.is_live());
        assert_eq!(stat.group, nix::unistd::getpgrp().as_raw());
        assert!(command_line(own).is_some_and(|line| !line.is_empty()));
        assert!(threads(pid).is_some_and(|threads| threads.contains(&pid)));
    }
}
