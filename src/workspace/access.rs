//! The owner's access to the worktree. An agent can take away its own access to what it
//! wrote (`chmod 000 secret/`, `chmod 000 notes.txt`, `chmod a-w src/`). Git then skips an
//! unreadable folder with a mere warning — the change inside would escape the capture and
//! the policy check — and can neither hash an unreadable file nor rewrite or remove files in
//! a read-only folder, so a rollback would fail.
//!
//! Git records no permission bit but the executable one, so giving the owner back read
//! access to every file and full access to every folder changes nothing a snapshot records.
//! It is done only when git reports a refused access, and the paths changed are reported in
//! the capture's `workspace_status` or the rollback's record.

use std::collections::HashSet;
use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use std::ffi::{CStr, CString};

use nix::dir::{Dir, Type};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, renameat};
use nix::sys::stat::{FchmodatFlags, Mode, SFlag, fchmodat, fstatat};
use nix::unistd::{UnlinkatFlags, unlinkat};

use walkdir::WalkDir;

use super::error::WorkspaceError;

/// What a folder needs for git to list, hash and rewrite it: read, write and search.
const FOLDER_ACCESS: u32 = 0o700;
/// What a file needs for git to hash it.
const FILE_ACCESS: u32 = 0o400;

/// True when git's stderr says it was refused access to a path (git runs with English
/// messages; see `Git::command`).
pub(crate) fn access_denied(stderr: &str) -> bool {
    stderr.contains("Permission denied")
}

/// Gives the owner read, write and search access to the folder `root` itself (without it,
/// git cannot even start there, nor can anything inside be inspected); returns whether it had
/// to. One `stat` when nothing is wrong.
pub(crate) fn restore_root_access(root: &Path) -> Result<bool, WorkspaceError> {
    let metadata = std::fs::symlink_metadata(root).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            WorkspaceError::Missing {
                path: root.to_owned(),
                reason: "the worktree folder was deleted".to_owned(),
            }
        } else {
            WorkspaceError::io("inspect", root, source)
        }
    })?;
    let mode = metadata.permissions().mode();
    if mode & FOLDER_ACCESS == FOLDER_ACCESS {
        return Ok(false);
    }
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(mode | FOLDER_ACCESS))
        .map_err(|source| WorkspaceError::io("give the owner access to", root, source))?;
    Ok(true)
}

/// Gives the owner read access to every file and read, write and search access to every
/// folder under `root`, `root` included. Symlinks are never followed. Returns the paths
/// changed, relative to `root` (`.` for the root itself), sorted.
pub(crate) fn restore_owner_access(root: &Path) -> Result<Vec<String>, WorkspaceError> {
    let mut restored = Vec::new();
    if restore_root_access(root)? {
        restored.push(".".to_owned());
    }
    // The walker lists a folder as it meets it, before its access is given back: a folder it
    // could not list is walked again from itself once it can be.
    let mut pending = vec![root.to_path_buf()];
    while let Some(start) = pending.pop() {
        restore_below(root, &start, &mut restored, &mut pending)?;
    }
    restored.sort();
    Ok(restored)
}

/// One walk of [`restore_owner_access`] from the folder `start`; the folders given access
/// but not listed go to `again`.
fn restore_below(
    root: &Path,
    start: &Path,
    restored: &mut Vec<String>,
    again: &mut Vec<PathBuf>,
) -> Result<(), WorkspaceError> {
    let open = |folder: &Path| {
        File::open(folder).map_err(|source| WorkspaceError::io("open", folder, source))
    };
    // The open folders from `start` down to the parent of the entry at hand (the walk is
    // depth first), so each change is made relative to its open folder.
    let mut folders = vec![open(start)?];
    let mut given_access = HashSet::new();
    for next in WalkDir::new(start).min_depth(1) {
        let entry = match next {
            Ok(entry) => entry,
            Err(error) => {
                let folder = error.path().unwrap_or(start).to_path_buf();
                if given_access.contains(&folder) {
                    again.push(folder);
                    continue;
                }
                let source = error
                    .into_io_error()
                    .unwrap_or_else(|| std::io::Error::other("the walk failed"));
                return Err(WorkspaceError::io("list", folder, source));
            }
        };
        let path = entry.path();
        // Not following symlinks: the link's own metadata.
        let metadata = entry
            .metadata()
            .map_err(|error| WorkspaceError::io("inspect", path, error.into()))?;
        let kind = metadata.file_type();
        if kind.is_symlink() {
            continue;
        }
        folders.truncate(entry.depth());
        let parent = folders.last().ok_or_else(|| {
            WorkspaceError::io(
                "list",
                path,
                std::io::Error::other("its folder is not open"),
            )
        })?;
        let needed = if kind.is_dir() {
            FOLDER_ACCESS
        } else {
            FILE_ACCESS
        };
        let mode = metadata.permissions().mode() & 0o7777;
        if mode & needed != needed {
            // Relative to the open folder and without following a symlink, so an entry
            // swapped for a link meanwhile cannot redirect the change outside the worktree.
            fchmodat(
                parent,
                entry.file_name(),
                Mode::from_bits_truncate(mode | needed),
                FchmodatFlags::NoFollowSymlink,
            )
            .map_err(|errno| WorkspaceError::io("give the owner access to", path, errno.into()))?;
            let relative = path.strip_prefix(root).unwrap_or(path);
            restored.push(relative.to_string_lossy().into_owned());
            if kind.is_dir() {
                given_access.insert(path.to_path_buf());
            }
        }
        if kind.is_dir() {
            folders.push(open(path)?);
        }
    }
    Ok(())
}

/// The longest path, in bytes, the kernel accepts (`PATH_MAX` counts the final NUL).
const PATH_MAX: usize = nix::libc::PATH_MAX as usize;

/// An entry of the worktree git cannot reach: its path relative to the worktree, which git
/// uses, is too long for the kernel (`ENAMETOOLONG`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TooLong {
    /// Relative to the worktree.
    pub(crate) path: Vec<u8>,
    /// A folder (it stands for everything in it), else a file or a symlink.
    pub(crate) folder: bool,
}

/// Opens the folder `name` in `parent`, never through a symlink.
fn open_folder_at(parent: impl std::os::fd::AsFd, name: &CStr) -> nix::Result<Dir> {
    Dir::openat(
        parent,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// The entries of `folder` but `.` and `..`, with whether each is a folder (never following
/// a symlink).
fn entries_of(folder: &mut Dir) -> nix::Result<Vec<(CString, bool)>> {
    let mut names = Vec::new();
    for entry in folder.iter() {
        let entry = entry?;
        let name = entry.file_name();
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        names.push((name.to_owned(), entry.file_type()));
    }
    names
        .into_iter()
        .map(|(name, kind)| {
            let is_folder = match kind {
                Some(kind) => kind == Type::Directory,
                None => {
                    let stat = fstatat(&*folder, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW)?;
                    SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFDIR
                }
            };
            Ok((name, is_folder))
        })
        .collect()
}

/// The entries under `root` whose path relative to `root` is too long for git to open a
/// folder (`PATH_MAX - 1` bytes and more: git opens it as `path/`) or to stat a file
/// (`PATH_MAX` bytes and more); the first such entry on each branch, not what it holds.
/// With `remove`, each is removed, a folder with everything in it. Walked relative to each
/// open folder (`openat`), so the absolute path's length never matters (which is why this
/// walk is not walkdir's: it opens each folder by its whole path, the very thing that fails
/// here), and never through a symlink; `root`'s own `.git` is skipped. A whole walk: called
/// only when git complained.
pub(crate) fn too_long_paths(root: &Path, remove: bool) -> Result<Vec<TooLong>, WorkspaceError> {
    let failed = |action: &'static str, relative: &[u8], errno: Errno| {
        let shown = String::from_utf8_lossy(relative);
        WorkspaceError::io(action, root.join(shown.as_ref()), errno.into())
    };
    let mut top = Dir::open(
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| failed("open", b"", errno))?;
    let mut found = Vec::new();
    let mut relative = Vec::new();
    walk_too_long(&mut top, &mut relative, remove, &mut found)
        .map_err(|(action, path, errno)| failed(action, &path, errno))?;
    Ok(found)
}

type WalkError = (&'static str, Vec<u8>, Errno);

fn walk_too_long(
    folder: &mut Dir,
    relative: &mut Vec<u8>,
    remove: bool,
    found: &mut Vec<TooLong>,
) -> Result<(), WalkError> {
    let entries = entries_of(folder).map_err(|errno| ("list", relative.clone(), errno))?;
    for (name, is_folder) in entries {
        let bytes = name.to_bytes();
        if relative.is_empty() && bytes == b".git" {
            continue;
        }
        let mark = relative.len();
        if !relative.is_empty() {
            relative.push(b'/');
        }
        relative.extend_from_slice(bytes);
        let limit = if is_folder { PATH_MAX - 1 } else { PATH_MAX };
        if relative.len() >= limit {
            if remove {
                remove_at(&*folder, &name, is_folder)
                    .map_err(|errno| ("remove", relative.clone(), errno))?;
            }
            found.push(TooLong {
                path: relative.clone(),
                folder: is_folder,
            });
        } else if is_folder {
            let mut child = open_folder_at(&*folder, &name)
                .map_err(|errno| ("open", relative.clone(), errno))?;
            walk_too_long(&mut child, relative, remove, found)?;
        }
        relative.truncate(mark);
    }
    Ok(())
}

/// Removes the entry `name` of `parent`, a folder with everything in it, never through a
/// symlink. A folder is emptied one level at a time: each non-empty folder inside is moved up
/// beside it first, so a tree of any depth is removed with two folders open.
fn remove_at(parent: &Dir, name: &CStr, is_folder: bool) -> nix::Result<()> {
    if !is_folder {
        match unlinkat(parent, name, UnlinkatFlags::NoRemoveDir) {
            Err(Errno::EISDIR) => {}
            other => return other,
        }
    }
    let mut queue = vec![name.to_owned()];
    let mut moved = 0_u64;
    while let Some(folder_name) = queue.pop() {
        let mut folder = open_folder_at(parent, folder_name.as_c_str())?;
        for (entry, _) in entries_of(&mut folder)? {
            match unlinkat(&folder, entry.as_c_str(), UnlinkatFlags::NoRemoveDir) {
                Err(Errno::EISDIR) => {}
                other => {
                    other?;
                    continue;
                }
            }
            match unlinkat(&folder, entry.as_c_str(), UnlinkatFlags::RemoveDir) {
                Err(Errno::ENOTEMPTY | Errno::EEXIST) => {}
                other => {
                    other?;
                    continue;
                }
            }
            let beside = loop {
                moved += 1;
                let candidate =
                    CString::new(format!(".tnh-removing-{moved}")).map_err(|_| Errno::EINVAL)?;
                match fstatat(parent, candidate.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                    Err(Errno::ENOENT) => break candidate,
                    Err(errno) => return Err(errno),
                    Ok(_) => {}
                }
            };
            renameat(&folder, entry.as_c_str(), parent, beside.as_c_str())?;
            queue.push(beside);
        }
        drop(folder);
        unlinkat(parent, folder_name.as_c_str(), UnlinkatFlags::RemoveDir)?;
    }
    Ok(())
}

/// Opens the folder `relative` under `root` one component at a time, never through a
/// symlink; `None` when it is not there or not a folder.
fn open_beneath(root: &Path, relative: &[u8]) -> Result<Option<Dir>, WorkspaceError> {
    let mut folder = Dir::open(
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| WorkspaceError::io("open", root, errno.into()))?;
    for component in relative.split(|byte| *byte == b'/') {
        if component.is_empty() {
            continue;
        }
        let Ok(name) = CString::new(component) else {
            return Ok(None);
        };
        folder = match open_folder_at(&folder, name.as_c_str()) {
            Ok(next) => next,
            Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP) => return Ok(None),
            Err(errno) => {
                let path = root.join(String::from_utf8_lossy(relative).as_ref());
                return Err(WorkspaceError::io("open", &path, errno.into()));
            }
        };
    }
    Ok(Some(folder))
}

/// Removes everything in the folder `relative` under `root` (the folder stays), never
/// through a symlink; returns whether it held anything. Nothing happens when it is not a
/// folder.
pub(crate) fn empty_folder(root: &Path, relative: &[u8]) -> Result<bool, WorkspaceError> {
    let Some(mut folder) = open_beneath(root, relative)? else {
        return Ok(false);
    };
    let path = || root.join(String::from_utf8_lossy(relative).as_ref());
    let entries = entries_of(&mut folder)
        .map_err(|errno| WorkspaceError::io("list", path(), errno.into()))?;
    for (name, is_folder) in &entries {
        remove_at(&folder, name, *is_folder).map_err(|errno| {
            let entry = path().join(String::from_utf8_lossy(name.to_bytes()).as_ref());
            WorkspaceError::io("remove", &entry, errno.into())
        })?;
    }
    Ok(!entries.is_empty())
}

/// Removes the file `relative` under `root`, reaching it without following a symlink.
pub(crate) fn remove_file_beneath(root: &Path, relative: &[u8]) -> Result<(), WorkspaceError> {
    let (folder, name) = match relative.iter().rposition(|byte| *byte == b'/') {
        Some(slash) => (&relative[..slash], &relative[slash + 1..]),
        None => (&b""[..], relative),
    };
    let path = || root.join(String::from_utf8_lossy(relative).as_ref());
    let Some(folder) = open_beneath(root, folder)? else {
        return Ok(());
    };
    let name = CString::new(name).map_err(|_| {
        WorkspaceError::io("remove", path(), std::io::ErrorKind::InvalidInput.into())
    })?;
    match unlinkat(&folder, name.as_c_str(), UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(errno) => Err(WorkspaceError::io("remove", path(), errno.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode_of(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    }

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// Folders get read, write and search back and files read, each folder before what it
    /// holds, other bits kept; symlinks and what they point at are left alone; only changed paths are
    /// listed.
    #[test]
    fn the_owner_gets_access_back_and_symlinks_are_not_followed() {
        let scratch = tempfile::tempdir().unwrap();
        let root = scratch.path().join("worktree");
        let outside = scratch.path().join("outside.txt");
        std::fs::write(&outside, "not ours\n").unwrap();
        std::fs::create_dir_all(root.join("hidden/deeper")).unwrap();
        std::fs::create_dir_all(root.join("read-only")).unwrap();
        std::fs::write(root.join("hidden/deeper/change.txt"), "x\n").unwrap();
        std::fs::write(root.join("unreadable.sh"), "#!/bin/sh\n").unwrap();
        std::fs::write(root.join("fine.txt"), "fine\n").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        chmod(&outside, 0o000);
        chmod(&root.join("hidden/deeper/change.txt"), 0o200);
        chmod(&root.join("unreadable.sh"), 0o111);
        chmod(&root.join("hidden/deeper"), 0o000);
        chmod(&root.join("hidden"), 0o100);
        chmod(&root.join("read-only"), 0o555);

        let restored = restore_owner_access(&root).unwrap();

        assert_eq!(
            restored,
            [
                "hidden",
                "hidden/deeper",
                "hidden/deeper/change.txt",
                "read-only",
                "unreadable.sh"
            ]
        );
        assert_eq!(mode_of(&root.join("hidden")), 0o700);
        assert_eq!(mode_of(&root.join("hidden/deeper")), 0o700);
        assert_eq!(mode_of(&root.join("hidden/deeper/change.txt")), 0o600);
        assert_eq!(mode_of(&root.join("read-only")), 0o755);
        assert_eq!(mode_of(&root.join("unreadable.sh")), 0o511);
        assert_eq!(mode_of(&outside), 0o000, "a symlink's target is not ours");
        assert!(
            restore_owner_access(&root).unwrap().is_empty(),
            "idempotent"
        );
    }

    #[test]
    fn a_root_without_access_is_restored_first() {
        let scratch = tempfile::tempdir().unwrap();
        let root = scratch.path().join("worktree");
        std::fs::create_dir_all(root.join("inner")).unwrap();
        chmod(&root, 0o500);
        assert_eq!(restore_owner_access(&root).unwrap(), ["."]);
        assert_eq!(mode_of(&root), 0o700);
    }

    #[test]
    fn access_denied_is_read_from_gits_messages() {
        assert!(access_denied(
            "warning: could not open directory 'secret/': Permission denied\n"
        ));
        assert!(access_denied(
            "error: unable to unlink old 'docs/a.md': Permission denied"
        ));
        assert!(!access_denied(
            "error: 'nested/' does not have a commit checked out"
        ));
    }
}
