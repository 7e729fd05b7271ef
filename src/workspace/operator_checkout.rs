//! The operator's checkout, watched around a step. The agent runs in its worktree, but it runs
//! as the operator and the checkout is a few folders up (`<repo>/.tnh/worktrees/<run_id>`): an
//! agent that edits `../../../src/lib.rs`, or finds the checkout through `git worktree list`,
//! changes the operator's files, which no capture of the worktree sees. The guard notes the
//! checkout's changed and untracked files before the step and compares after it; what differs
//! is reported (it cannot be put back: the operator may be editing the checkout too).
//!
//! The repository's own conductor files — `.tnh/config.yaml`, `.tnh/prompts/**` and
//! `.tnh/scripts/**` — are watched whatever git says of them: runs list `.tnh/` in
//! `.git/info/exclude`, so `git status` does not show an untracked prompt, yet an agent reaches
//! them from its worktree (`../../prompts/policy/x.md`), and a rewritten policy prompt or
//! configuration would judge the run's later steps.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::error::WorkspaceError;
use super::git::Git;

/// The checkout's files that differ from its HEAD or are untracked (not ignored), each with
/// what git says of it and its file's identity (size, modification and change times, inode,
/// mode): an edit changes the change time, which a process cannot set back.
pub(super) type CheckoutState = BTreeMap<Vec<u8>, (Vec<u8>, Option<FileIdentity>)>;

/// What identifies one version of a file without reading it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct FileIdentity {
    size: u64,
    mtime: i64,
    mtime_nsec: i64,
    ctime: i64,
    ctime_nsec: i64,
    inode: u64,
    mode: u32,
}

impl FileIdentity {
    /// Whether `other` names the same contents: the same file, size, mode and modification
    /// time. The change time is left out: a new hard link to the file moves it.
    pub(crate) fn same_contents_as(&self, other: &FileIdentity) -> bool {
        (
            self.size,
            self.mtime,
            self.mtime_nsec,
            self.inode,
            self.mode,
        ) == (
            other.size,
            other.mtime,
            other.mtime_nsec,
            other.inode,
            other.mode,
        )
    }

    /// The change time, in nanoseconds since the Unix epoch.
    pub(crate) fn changed_at_ns(&self) -> i128 {
        i128::from(self.ctime) * 1_000_000_000 + i128::from(self.ctime_nsec)
    }

    /// The identity of the file (or link) at `path`; `None` when there is none.
    pub(super) fn of(path: &Path) -> Option<FileIdentity> {
        std::fs::symlink_metadata(path)
            .ok()
            .map(|metadata| FileIdentity {
                size: metadata.len(),
                mtime: metadata.mtime(),
                mtime_nsec: metadata.mtime_nsec(),
                ctime: metadata.ctime(),
                ctime_nsec: metadata.ctime_nsec(),
                inode: metadata.ino(),
                mode: metadata.mode(),
            })
    }
}

/// Lists the checkout's state with one `git status` that takes no lock and writes nothing
/// (`--no-optional-locks`), so it never gets in the way of the operator's own git commands.
/// `git_dir` is the main checkout's git folder (the repository's common folder), which holds
/// its index — `root/.git` for most, elsewhere for a submodule or a `--separate-git-dir` one.
pub(super) fn state(
    repo_git: &Git,
    root: &Path,
    git_dir: &Path,
) -> Result<CheckoutState, WorkspaceError> {
    let listing = repo_git.bytes([
        "--no-optional-locks",
        "status",
        "--porcelain=v2",
        "-z",
        "--untracked-files=all",
        "--no-renames",
    ])?;
    let mut state = CheckoutState::new();
    for record in listing.split(|byte| *byte == 0) {
        // `1 <xy> <sub> <mH> <mI> <mW> <hH> <hI> <path>`, `u <xy> … <path>`, `? <path>`.
        let fields = match record.first() {
            Some(b'1') => 9,
            Some(b'u') => 11,
            Some(b'?') => 2,
            _ => continue,
        };
        let mut parts = record.splitn(fields, |byte| *byte == b' ');
        let head: Vec<&[u8]> = parts.by_ref().take(fields - 1).collect();
        let Some(path) = parts.next() else { continue };
        let identity = FileIdentity::of(&root.join(OsStr::from_bytes(path)));
        state.insert(path.to_vec(), (head.join(&b' '), identity));
    }
    // `git status` believes an index entry flagged assume-unchanged or skip-worktree: an agent
    // that flags one of the operator's files and then edits it would be invisible to it. The
    // flagged files are watched by their identity instead.
    for path in flagged(&git_dir.join("index")) {
        let identity = FileIdentity::of(&root.join(OsStr::from_bytes(&path)));
        state
            .entry(path)
            .or_insert_with(|| (FLAGGED.to_vec(), identity));
    }
    for path in conductor_files(root) {
        let identity = FileIdentity::of(&root.join(OsStr::from_bytes(&path)));
        state
            .entry(path)
            .or_insert_with(|| (CONDUCTOR_FILE.to_vec(), identity));
    }
    Ok(state)
}

/// The repository's conductor files and folders, relative to its root, watched by identity
/// whatever `git status` says of them.
pub const CONDUCTOR_FILES: [&str; 3] = [".tnh/config.yaml", ".tnh/prompts", ".tnh/scripts"];

/// How a conductor file `git status` does not list is recorded in the checkout's state.
const CONDUCTOR_FILE: &[u8] = b"conductor file";

/// The files at and under the conductor paths of the checkout at `root` (the folders walked
/// without following symlinks inside them), relative to `root`.
fn conductor_files(root: &Path) -> Vec<Vec<u8>> {
    let mut found = Vec::new();
    for path in CONDUCTOR_FILES {
        let full = root.join(path);
        if !full.is_dir() {
            if std::fs::symlink_metadata(&full).is_ok() {
                found.push(path.as_bytes().to_vec());
            }
            continue;
        }
        for entry in walkdir::WalkDir::new(&full)
            .min_depth(1)
            .into_iter()
            .flatten()
        {
            if entry.file_type().is_dir() {
                continue;
            }
            if let Ok(relative) = entry.path().strip_prefix(root) {
                found.push(relative.as_os_str().as_bytes().to_vec());
            }
        }
    }
    found
}

/// How a flagged entry of the operator's index is recorded in the checkout's state.
const FLAGGED: &[u8] = b"flagged in the index";

/// The paths of the index at `index` flagged assume-unchanged or skip-worktree, read
/// in-process (through libgit2 when the reader does not know the file); none when there is
/// no readable index.
fn flagged(index: &Path) -> Vec<Vec<u8>> {
    if let Some(entries) = super::index_file::read_entries(index) {
        return entries
            .into_iter()
            .filter(super::index_file::IndexEntry::is_flagged)
            .map(|entry| entry.path)
            .collect();
    }
    let Ok(index) = git2::Index::open(index) else {
        return Vec::new();
    };
    let valid = git2::IndexEntryFlag::VALID.bits();
    let skip = git2::IndexEntryExtendedFlag::SKIP_WORKTREE.bits();
    index
        .iter()
        .filter(|entry| entry.flags & valid != 0 || entry.flags_extended & skip != 0)
        .map(|entry| entry.path)
        .collect()
}

/// The paths whose state differs between `before` and `after`, sorted.
pub(super) fn changed(before: &CheckoutState, after: &CheckoutState) -> Vec<String> {
    let mut paths: Vec<&Vec<u8>> = before
        .iter()
        .filter(|(path, entry)| after.get(*path) != Some(entry))
        .map(|(path, _)| path)
        .chain(after.keys().filter(|path| !before.contains_key(*path)))
        .collect();
    paths.sort();
    paths.dedup();
    paths
        .into_iter()
        .map(|path| String::from_utf8_lossy(path).into_owned())
        .collect()
}
