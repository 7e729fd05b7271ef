//! One process drives a run at a time: an exclusive `flock` on `<run_dir>/lock`, released by
//! the kernel when the process exits (even when it is killed), holding the driver's pid so a
//! second `resume` can say who has it.
//!
//! A lock on a path can be fooled by whatever replaces the file at that path: a driver keeps
//! its lock on the file it opened even once that file is removed (an agent can write the run
//! directory; an operator may "tidy a stale lock"), and a newcomer would create a new file and
//! lock that. So a lock just taken is kept only if the path still names the file locked, and
//! if no live `tnh-conductor` drives the run through a lock file that was removed or replaced
//! (a process named by `status.json`, by the lock file, or holding an exclusive `flock` in the
//! kernel's table, with such a file open).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use crate::artifacts::{LifecycleState, RunDir, RunStatus};

/// The lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process drives the run.
    #[error(
        "run is being driven by {} (lock `{path}`){}",
        holder(pid.as_deref()),
        if *replaced { ", through a lock file that was removed or replaced since it took it" } else { "" }
    )]
    Held {
        /// The holder's pid as it recorded it; `None` when it has not written it yet (it
        /// writes it right after taking the lock).
        pid: Option<String>,
        /// The lock file.
        path: PathBuf,
        /// Whether the holder holds the lock on a file that no longer stands at `path` (it
        /// was removed or replaced while the run was driven).
        replaced: bool,
    },
    /// Something else than a regular file stands where the lock file should be (a symbolic
    /// link an agent planted, a FIFO, a folder): it is never opened through, so that taking
    /// the lock cannot empty a file elsewhere or hang.
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

/// How many times the lock file is opened again when it was removed or replaced between its
/// opening and its locking (a `runs clean` removing the run, a second newcomer).
const REOPEN_ATTEMPTS: usize = 3;

impl RunLock {
    /// Takes the lock without waiting.
    pub fn acquire(path: &Path) -> Result<Self, LockError> {
        let io = |source| LockError::Io {
            path: path.to_path_buf(),
            source,
        };
        for _ in 0..REOPEN_ATTEMPTS {
            let file = open_lock_file(path).map_err(|error| match error {
                LockFileError::NotAFile(what) => LockError::NotAFile {
                    path: path.to_path_buf(),
                    what: what.to_owned(),
                },
                LockFileError::Io(source) => io(source),
            })?;
            let locked = FileId::of(&file.metadata().map_err(io)?);
            let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => lock,
                Err((mut file, _)) => {
                    return Err(LockError::Held {
                        pid: pid_in(&mut file),
                        path: path.to_path_buf(),
                        replaced: false,
                    });
                }
            };
            // The file locked is the run's lock only while the path still names it.
            if FileId::at(path) != Some(locked) {
                continue;
            }
            let previous = pid_in(&mut lock);
            let recorded = previous
                .and_then(|pid| pid.parse().ok())
                .into_iter()
                .chain(driver_in_status(path));
            if let Some(pid) = driver_elsewhere(path, Some(locked), recorded) {
                return Err(LockError::Held {
                    pid: Some(pid.to_string()),
                    path: path.to_path_buf(),
                    replaced: true,
                });
            }
            lock.set_len(0).map_err(io)?;
            lock.seek(SeekFrom::Start(0)).map_err(io)?;
            writeln!(lock, "{}", std::process::id()).map_err(io)?;
            return Ok(Self { _lock: lock });
        }
        // Replaced again each time: another process is at it.
        Err(LockError::Held {
            pid: None,
            path: path.to_path_buf(),
            replaced: false,
        })
    }
}

/// Why a lock file could not be opened.
#[derive(Debug)]
pub(crate) enum LockFileError {
    /// Something else than a regular file stands there (`a FIFO`, `a folder`, …).
    NotAFile(&'static str),
    /// The file system refused.
    Io(std::io::Error),
}

/// Opens (creating it if needed) a lock file for reading and writing, never through a link
/// and never waiting on a FIFO: what stands at `path` must be a regular file. Shared by the
/// run lock and the repository's worktree lock.
pub(crate) fn open_lock_file(path: &Path) -> Result<File, LockFileError> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .custom_flags((nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits())
        .open(path)
        .map_err(|error| {
            // A link (`ELOOP`), a folder (`EISDIR`), a FIFO or device that cannot be opened
            // so: named by what stands there, not by the error.
            match std::fs::symlink_metadata(path) {
                Ok(metadata) if !metadata.is_file() => LockFileError::NotAFile(
                    crate::artifacts::safe_files::kind_name(metadata.file_type()),
                ),
                _ if error.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) => {
                    LockFileError::NotAFile("a symbolic link")
                }
                _ => LockFileError::Io(error),
            }
        })?;
    let kind = file.metadata().map_err(LockFileError::Io)?.file_type();
    if !kind.is_file() {
        return Err(LockFileError::NotAFile(
            crate::artifacts::safe_files::kind_name(kind),
        ));
    }
    Ok(file)
}

/// The pid written in an open lock file, read from its start.
fn pid_in(file: &mut File) -> Option<String> {
    let mut pid = String::new();
    let _ = file.seek(SeekFrom::Start(0));
    let _ = Read::take(&mut *file, 64).read_to_string(&mut pid);
    Some(pid.trim().to_owned()).filter(|pid| !pid.is_empty())
}

/// The driver `status.json` (beside the lock file) names, while it says the run is running.
fn driver_in_status(lock: &Path) -> Option<u32> {
    let status = RunDir::at(lock.parent()?).status();
    let status: RunStatus = crate::artifacts::read_json(&status, "run status").ok()?;
    (status.lifecycle_state == LifecycleState::Running)
        .then_some(status.pid)
        .flatten()
}

/// A file's identity: its device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    fn of(metadata: &std::fs::Metadata) -> Self {
        Self {
            dev: metadata.dev(),
            ino: metadata.ino(),
        }
    }

    /// The identity of the entry at `path` (a link not followed); `None` when there is none.
    fn at(path: &Path) -> Option<Self> {
        std::fs::symlink_metadata(path)
            .ok()
            .map(|metadata| Self::of(&metadata))
    }
}

/// A live `tnh-conductor` other than this process that drives the run through another file
/// than `except` — a lock file removed, replaced or renamed in the run directory since it took
/// its lock: among the `recorded` pids (the lock file's, `status.json`'s) and the holders of
/// exclusive `flock`s in the kernel's table. A process is counted when it has open a file
/// under the lock's name (the kernel adds ` (deleted)` to a removed one), or a file of the
/// run directory on which the table shows it holding an exclusive `flock` (a lock renamed
/// there). A recorded pid is counted too when its open files cannot be read (another user's
/// process, `hidepid`), since it may then be the driver.
fn driver_elsewhere(
    lock: &Path,
    except: Option<FileId>,
    recorded: impl IntoIterator<Item = u32>,
) -> Option<u32> {
    let name = lock_name(lock)?;
    let folder_device = std::fs::metadata(name.parent()?).ok()?.dev();
    let own = std::process::id();
    let recorded: Vec<u32> = recorded.into_iter().collect();
    let table = crate::proc::locks().unwrap_or_default();
    let held: Vec<LockEntry> = table.lines().filter_map(parse_lock_line).collect();
    let mut seen = std::collections::BTreeSet::new();
    recorded
        .iter()
        .copied()
        .chain(held.iter().map(|entry| entry.pid))
        .filter(|pid| *pid != own && *pid != 0 && seen.insert(*pid))
        .find(|pid| {
            if !is_conductor(*pid) {
                return false;
            }
            let holds = |id: FileId| {
                let devices = [split_device(id.dev), split_device(folder_device)];
                held.iter().any(|entry| {
                    entry.pid == *pid && entry.ino == id.ino && devices.contains(&entry.device)
                })
            };
            match has_open(*pid, &name, except, holds) {
                Some(open) => open,
                None => recorded.contains(pid),
            }
        })
}

/// The lock file's absolute name as the kernel shows it in `/proc/PID/fd` (its folder's links
/// resolved); `None` when its folder is gone.
fn lock_name(lock: &Path) -> Option<PathBuf> {
    let folder = std::fs::canonicalize(lock.parent()?).ok()?;
    Some(folder.join(lock.file_name()?))
}

/// Whether process `pid` has open, other than `except`, a file named `name` (or one removed
/// from there: the kernel adds ` (deleted)`), or a file in the same folder that `holds` (an
/// exclusive `flock` the process holds on it); `None` when its open files cannot be listed.
fn has_open(
    pid: u32,
    name: &Path,
    except: Option<FileId>,
    holds: impl Fn(FileId) -> bool,
) -> Option<bool> {
    let mut files = crate::proc::open_files(pid)?;
    Some(files.any(|file| {
        let named = file.name == name;
        if !named && file.name.parent() != name.parent() {
            return false;
        }
        let Ok(metadata) = file.metadata() else {
            return false;
        };
        let id = FileId::of(&metadata);
        Some(id) != except && (named || holds(id))
    }))
}

/// Whether a process holds the lock now, read from the kernel's table of locks
/// (`/proc/locks`) without touching the lock: taking it even briefly could make a `resume`
/// starting at that instant find it held. An exclusive `flock` on the file counts (its
/// device and inode; see [`devices_of`]), and a live `tnh-conductor` that drives the run
/// through a lock file removed or replaced since. A missing lock file is not held; where the
/// table cannot be read, the pid the holder wrote in the lock file is looked up instead.
pub fn is_held(path: &Path) -> bool {
    LockTable::read().is_held(path)
}

/// The kernel's table of locks read once, with the other live `tnh-conductor` processes that
/// hold a lock in it and their open files: whether each of many runs is driven is then told
/// with a `stat` of its lock file, not a read of the table (and of every driver's open files)
/// per run. A repository keeps every finished run, so that per-run cost would grow with each.
#[derive(Debug)]
pub struct LockTable {
    /// The held exclusive `flock`s; `None` when the table cannot be read.
    held: Option<Vec<LockEntry>>,
    /// Each other live `tnh-conductor` holding one, with its open files (the name the kernel
    /// shows, ` (deleted)` taken off, and the identity of the file); `None` when they cannot
    /// be listed.
    drivers: Vec<(u32, Option<OpenFiles>)>,
    /// The names of the folders those open files are in: a lock in another folder has no
    /// driver elsewhere, told without resolving its path.
    folders: std::collections::BTreeSet<std::ffi::OsString>,
}

impl LockTable {
    /// Reads the table and the holders' open files now.
    pub fn read() -> Self {
        let held: Option<Vec<LockEntry>> =
            crate::proc::locks().map(|table| table.lines().filter_map(parse_lock_line).collect());
        let own = std::process::id();
        let mut seen = std::collections::BTreeSet::new();
        let drivers: Vec<(u32, Option<OpenFiles>)> = held
            .iter()
            .flatten()
            .map(|entry| entry.pid)
            .filter(|pid| *pid != own && *pid != 0 && seen.insert(*pid))
            .filter(|pid| is_conductor(*pid))
            .map(|pid| (pid, open_files(pid)))
            .collect();
        let folders = drivers
            .iter()
            .filter_map(|(_, files)| files.as_ref())
            .flatten()
            .filter_map(|(target, _)| target.parent()?.file_name().map(ToOwned::to_owned))
            .collect();
        Self {
            held,
            drivers,
            folders,
        }
    }

    /// [`is_held`] as this table tells it.
    pub fn is_held(&self, path: &Path) -> bool {
        let Some(held) = &self.held else {
            return holder_in_file_is_conductor(path);
        };
        let found = std::fs::symlink_metadata(path).ok();
        // Most runs' locks are held by nobody: their inode is looked for before their folder's
        // device is read.
        let listed = |metadata: &&std::fs::Metadata| {
            metadata.is_file() && held.iter().any(|entry| entry.ino == metadata.ino())
        };
        if let Some(metadata) = found.as_ref().filter(listed) {
            let devices = devices_of(path, metadata);
            if held
                .iter()
                .any(|entry| entry.ino == metadata.ino() && devices.contains(&entry.device))
            {
                return true;
            }
        }
        self.driven_elsewhere(path, held, found.as_ref().map(FileId::of))
    }

    /// Whether a driver holds the run through another file than `except`: one named as the
    /// lock (or removed from there), or one in the lock's folder it holds a lock on.
    fn driven_elsewhere(&self, lock: &Path, held: &[LockEntry], except: Option<FileId>) -> bool {
        if self.folders.is_empty() {
            return false;
        }
        // The folder's own name tells, unless it is a link (it is then resolved below).
        let folder = lock.parent();
        let in_a_drivers_folder = folder
            .and_then(Path::file_name)
            .is_some_and(|name| self.folders.contains(name));
        let linked = || folder.is_some_and(|folder| !folder.is_dir() || folder.is_symlink());
        if !in_a_drivers_folder && !linked() {
            return false;
        }
        let Some(name) = lock_name(lock) else {
            return false;
        };
        let Some(folder_device) = name
            .parent()
            .and_then(|folder| std::fs::metadata(folder).ok())
            .map(|metadata| metadata.dev())
        else {
            return false;
        };
        self.drivers.iter().any(|(pid, files)| {
            files.iter().flatten().any(|(target, id)| {
                let named = *target == name;
                if !named && target.parent() != name.parent() || Some(*id) == except {
                    return false;
                }
                let devices = [split_device(id.dev), split_device(folder_device)];
                named
                    || held.iter().any(|entry| {
                        entry.pid == *pid && entry.ino == id.ino && devices.contains(&entry.device)
                    })
            })
        })
    }
}

/// A process's open files: the name the kernel shows (` (deleted)` taken off) and the file's
/// identity.
type OpenFiles = Vec<(PathBuf, FileId)>;

/// The files process `pid` has open; `None` when they cannot be listed.
fn open_files(pid: u32) -> Option<OpenFiles> {
    let files = crate::proc::open_files(pid)?;
    Some(
        files
            .filter_map(|file| {
                let metadata = file.metadata().ok()?;
                Some((file.name, FileId::of(&metadata)))
            })
            .collect(),
    )
}

/// Whether the kernel's table of locks shows an exclusive `flock` on the lock file; `None`
/// when the table cannot be read (only then may a pid stand in for it).
fn held_in_table(path: &Path) -> Option<bool> {
    let Ok(metadata) = std::fs::symlink_metadata(path) else {
        return Some(false);
    };
    let table = crate::proc::locks()?;
    if !metadata.is_file() {
        return Some(false);
    }
    let devices = devices_of(path, &metadata);
    Some(held_in(&table, &devices, metadata.ino()))
}

/// The process the kernel's table of locks shows holding an exclusive `flock` on the file at
/// `path`, when it shows one (and names it: a holder in another pid namespace is `0` there).
pub(crate) fn exclusive_holder(path: &Path) -> Option<u32> {
    let metadata = std::fs::symlink_metadata(path).ok()?;
    let table = crate::proc::locks()?;
    let devices = devices_of(path, &metadata);
    table
        .lines()
        .filter_map(parse_lock_line)
        .find(|entry| entry.ino == metadata.ino() && devices.contains(&entry.device))
        .map(|entry| entry.pid)
        .filter(|pid| *pid != 0)
}

/// The devices `/proc/locks` may show for the file at `path`, as (major, minor): its own
/// (`st_dev`), and its folder's. On an overlay file system a regular file reports the device
/// of the layer that holds it while the kernel's table shows the overlay's, which a folder
/// reports.
fn devices_of(path: &Path, metadata: &std::fs::Metadata) -> Vec<(u64, u64)> {
    let mut devices = vec![split_device(metadata.dev())];
    if let Some(folder) = path
        .parent()
        .and_then(|parent| std::fs::metadata(parent).ok())
    {
        devices.push(split_device(folder.dev()));
    }
    devices
}

/// A device number as its (major, minor) pair, as `/proc/locks` shows it.
fn split_device(dev: u64) -> (u64, u64) {
    (
        nix::sys::stat::major(dev as nix::libc::dev_t),
        nix::sys::stat::minor(dev as nix::libc::dev_t),
    )
}

/// Whether a `/proc/locks` text shows an exclusive `flock` held on the file with inode `ino`
/// on one of `devices`. Shared locks are not the conductor's (it takes only exclusive ones),
/// nor are POSIX locks, leases, or the lines of processes waiting for a lock (`->`).
fn held_in(table: &str, devices: &[(u64, u64)], ino: u64) -> bool {
    table
        .lines()
        .filter_map(parse_lock_line)
        .any(|entry| entry.ino == ino && devices.contains(&entry.device))
}

/// One held exclusive `flock` of the kernel's table.
#[derive(Debug, PartialEq, Eq)]
struct LockEntry {
    pid: u32,
    device: (u64, u64),
    ino: u64,
}

/// A line of `/proc/locks` when it is a held exclusive `flock`:
/// `1: FLOCK  ADVISORY  WRITE 21206 fe:00:10010786 0 EOF` — the device's major and minor
/// numbers in hexadecimal, then the inode in decimal.
fn parse_lock_line(line: &str) -> Option<LockEntry> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.get(1) != Some(&"FLOCK") || fields.get(3) != Some(&"WRITE") {
        return None;
    }
    let pid = fields.get(4)?.parse().ok()?;
    let mut place = fields.get(5)?.split(':');
    let major = u64::from_str_radix(place.next()?, 16).ok()?;
    let minor = u64::from_str_radix(place.next()?, 16).ok()?;
    let ino = place.next()?.parse().ok()?;
    Some(LockEntry {
        pid,
        device: (major, minor),
        ino,
    })
}

/// Whether the pid the holder wrote in the lock file is a live `tnh-conductor`.
fn holder_in_file_is_conductor(path: &Path) -> bool {
    let pid = crate::artifacts::safe_files::read_regular_text(path).unwrap_or_default();
    pid.trim().parse().is_ok_and(is_conductor)
}

/// Whether process `pid` is alive and runs `tnh-conductor` (a pid the kernel gave to another
/// program since is not the driver).
pub(crate) fn is_conductor(pid: u32) -> bool {
    let Some(cmdline) = crate::proc::command_line(pid) else {
        return false;
    };
    let program = cmdline.split(|byte| *byte == 0).next().unwrap_or_default();
    Path::new(std::ffi::OsStr::from_bytes(program))
        .file_name()
        .is_some_and(|name| name.as_bytes().starts_with(b"tnh-conductor"))
}

/// A status as it stands: one that says `running` while no process holds the run's lock was
/// left by a driver that was killed, and is `blocked` until resumed. The kernel's table of
/// locks decides, together with the driver `status.json` names when it still has the run's
/// lock file open (one removed or replaced while it drives: it still drives); the pids alone
/// (the lock file's, `status.json`'s) are trusted only where that table cannot be read, since
/// a pid alone may have been given to another process since — another `tnh-conductor` among
/// them.
pub fn checked_status(run_dir: &RunDir, mut status: RunStatus) -> RunStatus {
    if status.lifecycle_state != LifecycleState::Running {
        return status;
    }
    let lock = run_dir.lock();
    let driven = match held_in_table(&lock) {
        Some(true) => true,
        Some(false) => driver_elsewhere(&lock, FileId::at(&lock), status.pid).is_some(),
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

    /// One read of the table tells each of many locks apart, as a read per lock does.
    #[test]
    fn a_table_read_once_tells_each_lock_held_or_free() {
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<PathBuf> = (0..3)
            .map(|index| {
                let run = dir.path().join(format!("run{index}"));
                std::fs::create_dir(&run).unwrap();
                run.join("lock")
            })
            .collect();
        std::fs::write(&paths[1], "").unwrap();
        let held = RunLock::acquire(&paths[2]).unwrap();
        let table = LockTable::read();
        let seen: Vec<bool> = paths.iter().map(|path| table.is_held(path)).collect();
        assert_eq!(seen, [false, false, true], "missing, free, held");
        assert_eq!(
            seen,
            paths.iter().map(|path| is_held(path)).collect::<Vec<_>>()
        );
        drop(held);
        assert!(!LockTable::read().is_held(&paths[2]), "released");
    }

    /// Entries of `/proc/locks` as this machine wrote them, a run's lock
    /// on ext4 (`fe:00`, inode 10068652) among them.
    const TABLE: &str = "\
1: FLOCK  ADVISORY  READ  4242 00:16:10068652 0 EOF
2: FLOCK  ADVISORY  WRITE 4343 00:1b:10068652 0 EOF
3: POSIX  ADVISORY  WRITE 4444 fe:00:10068652 0 EOF
4: OFDLCK ADVISORY  WRITE -1 fe:00:10068652 0 EOF
5: -> FLOCK  ADVISORY  WRITE 4545 fe:00:10068652 0 EOF
6: FLOCK  ADVISORY  WRITE 4646 fe:00:10068653 0 EOF
";

    #[test]
    fn only_an_exclusive_flock_on_the_same_device_and_inode_holds_a_lock() {
        let ext4 = [(0xfe, 0)];
        // A shared lock on another device, an exclusive one on another device, a POSIX lock,
        // an open file description lock, a waiter, another inode: none is the run's driver.
        assert!(!held_in(TABLE, &ext4, 10068652));
        let held = format!("{TABLE}7: FLOCK  ADVISORY  WRITE 4747 fe:00:10068652 0 EOF\n");
        assert!(held_in(&held, &ext4, 10068652));
        assert!(!held_in(&held, &[(0, 0x1b)], 10068653));
        // A device whose major number takes more than two hexadecimal digits.
        let wide = "1: FLOCK  ADVISORY  WRITE 4848 103:02:77 0 EOF\n";
        assert!(held_in(wide, &[(0x103, 2)], 77));
        assert!(!held_in(wide, &[(0x10, 2)], 77));
    }

    #[test]
    fn a_lock_line_is_read_with_its_pid_device_and_inode() {
        assert_eq!(
            parse_lock_line("2: FLOCK  ADVISORY  WRITE 4343 00:1b:599 0 EOF"),
            Some(LockEntry {
                pid: 4343,
                device: (0, 0x1b),
                ino: 599
            })
        );
        assert_eq!(
            parse_lock_line("1: FLOCK  ADVISORY  READ  4242 00:16:599 0 EOF"),
            None
        );
        assert_eq!(parse_lock_line("garbage"), None);
        assert_eq!(
            parse_lock_line("1: FLOCK  ADVISORY  WRITE x 00:16:599 0 EOF"),
            None
        );
    }

    /// The device `/proc/locks` shows for a lock this process takes is one [`devices_of`]
    /// accepts: the file's own or its folder's (overlay file systems show the latter).
    #[test]
    fn the_kernel_table_shows_a_device_the_lock_file_or_its_folder_reports() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let held = RunLock::acquire(&path).unwrap();
        let Some(table) = crate::proc::locks() else {
            return;
        };
        let metadata = std::fs::metadata(&path).unwrap();
        let own = std::process::id();
        let entry = table
            .lines()
            .filter_map(parse_lock_line)
            .find(|entry| entry.pid == own && entry.ino == metadata.ino())
            .expect("this process's lock in /proc/locks");
        assert!(
            devices_of(&path, &metadata).contains(&entry.device),
            "{entry:?} {:?}",
            devices_of(&path, &metadata)
        );
        drop(held);
    }

    /// A folder where the lock file should be is named as such, as a
    /// link or a FIFO is, not reported as an I/O failure (`EISDIR`).
    #[test]
    fn a_folder_link_or_fifo_in_the_lock_files_place_is_not_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        std::fs::create_dir(&path).unwrap();
        let error = RunLock::acquire(&path).unwrap_err();
        assert!(
            matches!(&error, LockError::NotAFile { what, .. } if what == "a folder"),
            "{error:?}"
        );
        std::fs::remove_dir(&path).unwrap();
        std::os::unix::fs::symlink(dir.path().join("missing"), &path).unwrap();
        let error = RunLock::acquire(&path).unwrap_err();
        assert!(
            matches!(&error, LockError::NotAFile { what, .. } if what == "a symbolic link"),
            "{error:?}"
        );
        assert!(
            !dir.path().join("missing").exists(),
            "not created through the link"
        );
        std::fs::remove_file(&path).unwrap();
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let error = RunLock::acquire(&path).unwrap_err();
        assert!(
            matches!(&error, LockError::NotAFile { what, .. } if what == "a FIFO"),
            "{error:?}"
        );
    }
}
