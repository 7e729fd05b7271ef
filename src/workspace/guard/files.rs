//! The git files a guard watches (configuration, hooks, the files that say where the
//! repository and the worktree are): listed, anything in their place that would hang git
//! cleared before git runs, and their links and contents put back.

use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::super::error::WorkspaceError;
use super::super::git_config;
use super::{GuardReport, RefGuard, shared};

impl RefGuard {
    /// Every file the guard watches: those it recorded and those its configuration names now
    /// (a hook the agent added). Listed once per check, for [`Self::clear_special_files`] and
    /// [`Self::restore_files`].
    pub(super) fn watched_paths(&self) -> Result<BTreeSet<PathBuf>, WorkspaceError> {
        let mut paths: BTreeSet<PathBuf> = self.files.keys().cloned().collect();
        paths.extend(self.guarded_files()?);
        Ok(paths)
    }

    pub(super) fn guarded_files(&self) -> Result<Vec<PathBuf>, WorkspaceError> {
        let common = &self.workspace.common_dir;
        let mut paths = vec![
            common.join("config"),
            common.join("config.worktree"),
            common.join("info").join("exclude"),
            common.join("info").join("attributes"),
            // History as git reads it: grafted or cut parents, borrowed object stores.
            common.join("info").join("grafts"),
            common.join("shallow"),
            common.join("objects").join("info").join("alternates"),
            // The operator's stash entries below the top one live only in its reflog.
            self.stash_log(),
            // What the operator's next checkout materialises.
            common.join("info").join("sparse-checkout"),
            self.workspace.worktree_git_dir.join("config.worktree"),
            // Where git finds the repository of the worktree and the worktree itself:
            // rewritten, they would make the conductor's own git commands read another
            // repository (with its configuration and hooks) or lose the worktree.
            self.workspace.worktree_git_dir.join("commondir"),
            self.workspace.worktree_git_dir.join("gitdir"),
            // The lock every run takes to add or remove a worktree: a FIFO there hung them all.
            common.join(super::super::worktree::WORKTREES_LOCK),
        ];
        paths.extend(git_config::standard_files());
        let mut hook_dirs = vec![common.join("hooks")];
        hook_dirs.extend(self.hook_dirs.iter().cloned());
        for module in &self.module_dirs {
            paths.push(module.join("config"));
            hook_dirs.push(module.join("hooks"));
        }
        for hooks in &hook_dirs {
            list_hooks(hooks, &mut paths)?;
        }
        Ok(paths)
    }

    /// Before any git command: each watched file that is now a link it was not, or neither a
    /// regular file nor a link (a FIFO, a socket, a device, a folder), is put back to a link
    /// as it was or removed (its contents are written back by [`Self::restore_files`]), and
    /// reported. A file that was already such an entry before the step is left alone.
    pub(super) fn clear_special_files(
        &self,
        paths: &BTreeSet<PathBuf>,
        report: &mut GuardReport,
        shared: &shared::Shared<'_>,
    ) -> Result<(), WorkspaceError> {
        let stash_log = self.stash_log();
        for path in paths {
            let recorded_special = self
                .files
                .get(path)
                .is_some_and(|before| before.as_deref() == Some(NOT_A_REGULAR_FILE));
            let own = path.starts_with(&self.workspace.worktree_git_dir);
            let Some(restore) = self.scope.of_ref(own) else {
                continue;
            };
            if recorded_special {
                continue;
            }
            // A check that only compares (`resume` asking the operator first) still removes
            // what would hang git, and nothing else. A link of a file the runs share put back
            // is announced to them first.
            if restore
                && !own
                && *path != stash_log
                && std::fs::read_link(path).ok().as_ref() != self.links.get(path)
            {
                let found = read_optional(path)?;
                let recorded = self.files.get(path).cloned().flatten();
                let contents = (found.as_deref(), recorded.as_deref());
                shared.notify(path, &self.display_name(path), contents, true)?;
            }
            let mut changed = restore && self.restore_link(path)?;
            if let Ok(metadata) = path.symlink_metadata() {
                let kind = metadata.file_type();
                if kind.is_dir() && restore {
                    std::fs::remove_dir_all(path)
                        .map_err(|source| WorkspaceError::io("remove", path, source))?;
                    changed = true;
                } else if !kind.is_file() && !kind.is_symlink() {
                    std::fs::remove_file(path)
                        .map_err(|source| WorkspaceError::io("remove", path, source))?;
                    changed = true;
                }
            }
            if changed {
                report.git_config_changed.push(self.display_name(path));
            }
        }
        Ok(())
    }

    /// Puts the watched files back as they were; `settled` is a file and the contents it
    /// must have instead (the stash's reflog when it keeps other runs' entries). What this
    /// guard puts back of the files the repository's runs share is announced to the other
    /// runs first, and a change one of their guards put back during the step is this run's
    /// too ([`shared`]).
    pub(super) fn restore_files(
        &self,
        paths: &BTreeSet<PathBuf>,
        report: &mut GuardReport,
        settled: Option<(PathBuf, Vec<u8>)>,
        shared: &mut shared::Shared<'_>,
    ) -> Result<(), WorkspaceError> {
        // The files first, then the notices: a file found put back comes with its notice
        // (written before the file was).
        let mut found = Vec::new();
        for path in paths.iter().cloned() {
            let own = path.starts_with(&self.workspace.worktree_git_dir);
            let Some(restore) = self.scope.of_ref(own) else {
                continue;
            };
            // The link first (a file the agent replaced by a symlink to another of the
            // operator's files must not be written through), then the contents.
            let link_changed = if restore {
                self.restore_link(&path)?
            } else {
                std::fs::read_link(&path).ok().as_ref() != self.links.get(&path)
            };
            let now = read_optional(&path)?;
            found.push((path, own, restore, link_changed, now));
        }
        shared.load();
        let stash_log = self.stash_log();
        let mut charged = Vec::new();
        for (path, own, restore, link_changed, now) in found {
            let name = self.display_name(&path);
            let before = match &settled {
                Some((settled, contents)) if *settled == path => Some(contents.clone()),
                _ => self.files.get(&path).cloned().flatten(),
            };
            let contents_changed = now != before;
            let is_shared = !own && path != stash_log;
            if contents_changed && restore && is_shared && !link_changed {
                // What this run recorded was a change another run's agent had made before
                // this step started, and that run's guard put it back since: writing the
                // record would bring the change back. Kept as put back, and charged.
                if let Some(change) = shared.put_back_before(&path, before.as_deref(), &now) {
                    charged.push(change);
                    continue;
                }
            }
            if contents_changed && restore {
                if is_shared {
                    let contents = (now.as_deref(), before.as_deref());
                    shared.notify(&path, &name, contents, false)?;
                }
                write_optional(&path, before.as_deref())?;
            }
            if (link_changed || contents_changed) && !report.git_config_changed.contains(&name) {
                report.git_config_changed.push(name);
            }
        }
        charged.extend(shared.charges(&self.files));
        for change in charged {
            if !report.git_config_changed.contains(&change.path) {
                report.git_config_put_back_by_other_runs.push(change);
            }
        }
        Ok(())
    }

    /// Puts back what `path` was as a link: the symlink it was (to the same target), or no
    /// symlink at all. True when it had changed.
    fn restore_link(&self, path: &Path) -> Result<bool, WorkspaceError> {
        let before = self.links.get(path);
        let now = std::fs::read_link(path).ok();
        if now.as_ref() == before {
            return Ok(false);
        }
        let is_entry = path
            .symlink_metadata()
            .is_ok_and(|metadata| !metadata.is_dir());
        if is_entry {
            std::fs::remove_file(path)
                .map_err(|source| WorkspaceError::io("remove", path, source))?;
        }
        if let Some(target) = before {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|source| WorkspaceError::io("restore", parent, source))?;
            }
            std::os::unix::fs::symlink(target, path)
                .map_err(|source| WorkspaceError::io("restore the link", path, source))?;
        }
        Ok(true)
    }

    fn display_name(&self, path: &Path) -> String {
        let common = &self.workspace.common_dir;
        let worktree = &self.workspace.worktree_git_dir;
        if let Ok(relative) = path.strip_prefix(worktree) {
            format!("worktree/{}", relative.display())
        } else if let Ok(relative) = path.strip_prefix(common) {
            relative.display().to_string()
        } else {
            path.display().to_string()
        }
    }
}

/// The repositories of the submodules under `common` (`.git/modules/<name>`, a name with
/// slashes as folders, nested submodules in their own `modules`).
pub(super) fn module_git_dirs(common: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = Vec::new();
    let mut walker = walkdir::WalkDir::new(common.join("modules"))
        .min_depth(1)
        .into_iter();
    while let Some(next) = walker.next() {
        let Ok(entry) = next else {
            continue;
        };
        if !entry.file_type().is_dir() {
            continue;
        }
        let dir = entry.path();
        // Inside a submodule's repository only its own `modules` holds more.
        let in_repository = dir
            .parent()
            .is_some_and(|parent| found.iter().any(|repository| repository == parent));
        if in_repository {
            if entry.file_name() != "modules" {
                walker.skip_current_dir();
            }
        } else if dir.join("HEAD").is_file() {
            found.push(dir.to_path_buf());
        }
    }
    found.sort();
    found
}

/// The hooks in a folder of hooks (none when it does not exist).
fn list_hooks(hooks: &Path, paths: &mut Vec<PathBuf>) -> Result<(), WorkspaceError> {
    match std::fs::read_dir(hooks) {
        Ok(entries) => {
            for entry in entries {
                let entry = entry.map_err(|source| WorkspaceError::io("list", hooks, source))?;
                // git runs a hook through a symlink too; it never runs the `.sample` files.
                let runnable = entry
                    .file_type()
                    .is_ok_and(|kind| kind.is_file() || kind.is_symlink());
                let sample = entry.file_name().as_bytes().ends_with(b".sample");
                if runnable && !sample {
                    paths.push(entry.path());
                }
            }
            Ok(())
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(WorkspaceError::io("list", hooks, source)),
    }
}

/// What [`read_optional`] gives for an entry that is there but cannot be read as a regular
/// file (a FIFO, a device, a folder, a file over [`WATCHED_FILE_LIMIT`]): never equal to a
/// regular file's contents, so such an entry in the place of one reads as a change.
const NOT_A_REGULAR_FILE: &[u8] = b"\0tnh-conductor: not a regular file\0";

/// How much of a watched file is read: git's configuration and ref files are small.
pub(super) const WATCHED_FILE_LIMIT: u64 = 64 * 1024 * 1024;

/// The contents of the watched file `path` (a link followed), `None` when there is none. Read
/// without blocking: a FIFO in its place is [`NOT_A_REGULAR_FILE`], never a hang.
pub(super) fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, WorkspaceError> {
    match crate::artifacts::safe_files::read_regular_following(path, WATCHED_FILE_LIMIT) {
        Ok((_, true)) => Ok(Some(NOT_A_REGULAR_FILE.to_vec())),
        Ok((bytes, false)) => Ok(Some(bytes)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) if error.kind() == std::io::ErrorKind::InvalidInput => {
            Ok(Some(NOT_A_REGULAR_FILE.to_vec()))
        }
        Err(source) => Err(WorkspaceError::io("read", path, source)),
    }
}

fn write_optional(path: &Path, contents: Option<&[u8]>) -> Result<(), WorkspaceError> {
    match contents {
        Some(bytes) => {
            // The agent may have removed the folder too (`~/.config/git/`).
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|source| WorkspaceError::io("restore", parent, source))?;
            }
            // What was not a regular file before the step cannot be written back.
            if bytes == NOT_A_REGULAR_FILE {
                return Ok(());
            }
            // Opened without blocking, and written only if it is a regular file: a link (kept
            // as it was) may lead to a FIFO now.
            use std::os::unix::fs::OpenOptionsExt;
            let restore = |source| WorkspaceError::io("restore", path, source);
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
                .open(path)
                .map_err(restore)?;
            if !file.metadata().map_err(restore)?.file_type().is_file() {
                return Err(restore(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "it is not a regular file",
                )));
            }
            file.set_len(0).map_err(restore)?;
            std::io::Write::write_all(&mut file, bytes).map_err(restore)
        }
        None => match std::fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(WorkspaceError::io("remove", path, source)),
        },
    }
}
