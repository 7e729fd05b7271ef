//! The repositories libgit2 works in, opened once per process. Opening one makes libgit2
//! read `packed-refs` — every kept run's refs — the first time a ref is written or looked
//! up, while a repository kept open reads that file again only when it changed: a step then
//! costs the same with 10 or 10,000 kept runs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};

/// How many repositories stay open: a command works in one (its worktree and the repository
/// itself); the bound keeps a process that visits many from holding their files open.
const KEPT_OPEN: usize = 4;

/// Runs `work` with the repository at `path` (a worktree, or a repository's git folder),
/// opening it only if this process has not already.
pub(crate) fn with_repository<T>(
    path: &Path,
    work: impl FnOnce(&git2::Repository) -> Result<T, git2::Error>,
) -> Result<T, git2::Error> {
    static OPEN: OnceLock<Mutex<HashMap<PathBuf, git2::Repository>>> = OnceLock::new();
    let mut open = OPEN
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if !open.contains_key(path) {
        if open.len() >= KEPT_OPEN {
            open.clear();
        }
        open.insert(path.to_owned(), git2::Repository::open(path)?);
    }
    match open.get(path) {
        Some(repository) => work(repository),
        None => Err(git2::Error::from_str("the repository was not kept open")),
    }
}
