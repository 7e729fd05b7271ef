//! One process drives a run at a time: an exclusive `flock` on `<run_dir>/lock`, released by
//! the kernel when the process exits (even when it is killed), holding the driver's pid so a
//! second `resume` can say who has it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;

use nix::fcntl::{Flock, FlockArg};

use crate::artifacts::{LifecycleState, RunDir, RunStatus};

/// The lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process drives the run.
    #[error("run is being driven by {} (lock `{path}`)", holder(pid.as_deref()))]
    Held {
        /// The holder's pid as it recorded it; `None` when it has not written it yet (it
        /// writes it right after taking the lock).
        pid: Option<String>,
        /// The lock file.
        path: PathBuf,
    },
    /// Something else than a regular file stands where the lock file should be (a symbolic
    /// link an agent planted, a FIFO): it is never opened through, so that taking the lock
    /// cannot empty a file elsewhere or hang.
    #[error("the lock file `{path}` is {what}, not a regular file: the conductor does not open it")]
    NotAFile {
        /// The lock file.
        path: PathBuf,
        /// What stands there.
        what: String,
    },
    /// The lock file could not be used.
    #[error("failed to lock `{path}`: {source}")]
    Io {
        /// The lock file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// Who holds a lock: `process PID`, or `another process` when the holder took it an instant
/// ago and has not written its pid yet.
fn holder(pid: Option<&str>) -> String {
    pid.map_or_else(
        || "another process".to_owned(),
        |pid| format!("process {pid}"),
    )
}

/// The held lock; dropping it releases the run.
#[derive(Debug)]
pub struct RunLock {
    _lock: Flock<File>,
}

impl RunLock {
    /// Takes the lock without waiting.
    pub fn acquire(path: &Path) -> Result<Self, LockError> {
        let io = |source| LockError::Io {
            path: path.to_path_buf(),
            source,
        };
        // A link is not followed and a FIFO does not block the open: the file is checked to be
        // a regular one before it is locked, truncated and written.
        let not_a_file = |what: String| LockError::NotAFile {
            path: path.to_path_buf(),
            what,
        };
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .custom_flags((nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits())
            .open(path)
            .map_err(|error| {
                if error.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) {
                    not_a_file("a symbolic link".to_owned())
                } else {
                    io(error)
                }
            })?;
        let kind = file.metadata().map_err(io)?.file_type();
        if !kind.is_file() {
            return Err(not_a_file(
                crate::artifacts::safe_files::kind_name(kind).to_owned(),
            ));
        }
        let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => lock,
            Err((mut file, _)) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                let pid = Some(pid.trim().to_owned()).filter(|pid| !pid.is_empty());
                return Err(LockError::Held {
                    pid,
                    path: path.to_path_buf(),
                });
            }
        };
        lock.set_len(0).map_err(io)?;
        lock.seek(SeekFrom::Start(0)).map_err(io)?;
        writeln!(lock, "{}", std::process::id()).map_err(io)?;
        Ok(Self { _lock: lock })
    }
}

/// Whether a process holds the lock now, read from the kernel's table of locks
/// (`/proc/locks`) without touching the lock: taking it even briefly could make a `resume`
/// starting at that instant find it held. Locks are matched by inode (some file systems,
/// overlays among them, report another device there than `stat` does). A missing lock file
/// is not held; where the table cannot be read, the pid the holder wrote in the lock file is
/// looked up instead.
pub fn is_held(path: &Path) -> bool {
    held_in_table(path).unwrap_or_else(|| holder_in_file_is_conductor(path))
}

/// Whether the kernel's table of locks shows the lock held; `None` when the table cannot be
/// read (only then may a pid stand in for it).
fn held_in_table(path: &Path) -> Option<bool> {
    use std::os::unix::fs::MetadataExt;
    let Ok(metadata) = std::fs::metadata(path) else {
        return Some(false);
    };
    let table = std::fs::read_to_string(LOCK_TABLE).ok()?;
    // `1: FLOCK  ADVISORY  WRITE 21206 fe:00:10010786 0 EOF`: device and inode last.
    let inode = metadata.ino().to_string();
    Some(table.lines().any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.get(1) == Some(&"FLOCK")
            && fields
                .get(5)
                .and_then(|place| place.rsplit(':').next())
                .is_some_and(|found| found == inode)
    }))
}

/// The kernel's table of locks.
const LOCK_TABLE: &str = "/proc/locks";

/// Whether the pid the holder wrote in the lock file is a live `tnh-conductor`.
fn holder_in_file_is_conductor(path: &Path) -> bool {
    let pid = crate::artifacts::safe_files::read_regular_text(path).unwrap_or_default();
    pid.trim().parse().is_ok_and(is_conductor)
}

/// Whether process `pid` is alive and runs `tnh-conductor` (a pid the kernel gave to another
/// program since is not the driver).
fn is_conductor(pid: u32) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let program = cmdline.split(|byte| *byte == 0).next().unwrap_or_default();
    Path::new(std::ffi::OsStr::from_bytes(program))
        .file_name()
        .is_some_and(|name| name.as_bytes().starts_with(b"tnh-conductor"))
}

/// A status as it stands: one that says `running` while no process holds the run's lock was
/// left by a driver that was killed, and is `blocked` until resumed. The kernel's table of
/// locks decides; the pids (the lock file's, `status.json`'s) are looked at only where that
/// table cannot be read, since a pid alone may have been given to another process since —
/// another `tnh-conductor` among them.
pub fn checked_status(run_dir: &RunDir, mut status: RunStatus) -> RunStatus {
    if status.lifecycle_state != LifecycleState::Running {
        return status;
    }
    let lock = run_dir.lock();
    let driven = match held_in_table(&lock) {
        Some(held) => held,
        None => holder_in_file_is_conductor(&lock) || status.pid.is_some_and(is_conductor),
    };
    if !driven {
        status.lifecycle_state = LifecycleState::Blocked;
        status.pid = None;
        status.reason =
            Some("the driving process is gone; `tnh-conductor resume` continues the run".into());
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_pid() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let held = RunLock::acquire(&path).unwrap();
        let refused = RunLock::acquire(&path).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains(&format!("process {}", std::process::id())),
            "{refused}"
        );
        drop(held);
        assert!(RunLock::acquire(&path).is_ok());
    }

    #[test]
    fn a_holder_that_has_not_written_its_pid_yet_is_another_process() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let held = RunLock::acquire(&path).unwrap();
        // The instant between the holder's `flock` and its writing its pid.
        std::fs::write(&path, "").unwrap();
        let refused = RunLock::acquire(&path).unwrap_err().to_string();
        assert!(refused.contains("driven by another process"), "{refused}");
        assert!(!refused.contains("unknown"), "{refused}");
        drop(held);
    }

    #[test]
    fn is_held_tells_a_held_lock_from_a_free_or_missing_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        assert!(!is_held(&path), "missing");
        let held = RunLock::acquire(&path).unwrap();
        assert!(is_held(&path));
        drop(held);
        assert!(!is_held(&path), "released");
        assert!(RunLock::acquire(&path).is_ok(), "looking does not keep it");
    }
}
