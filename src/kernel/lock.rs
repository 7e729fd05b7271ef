//! One process drives a run at a time: an exclusive `flock` on `<run_dir>/lock`, released by
//! the kernel when the process exits (even when it is killed), holding the driver's pid so a
//! second `resume` can say who has it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

/// The lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process drives the run.
    #[error("run is being driven by process {pid} (lock `{path}`)")]
    Held {
        /// The holder's pid as it recorded it.
        pid: String,
        /// The lock file.
        path: PathBuf,
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
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .map_err(io)?;
        let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => lock,
            Err((mut file, _)) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                let pid = if pid.trim().is_empty() {
                    "unknown".to_owned()
                } else {
                    pid.trim().to_owned()
                };
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
}
