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

use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::sys::stat::{FchmodatFlags, Mode, fchmodat};

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
    let mut folders = vec![PathBuf::new()];
    while let Some(relative) = folders.pop() {
        let folder = root.join(&relative);
        let handle =
            File::open(&folder).map_err(|source| WorkspaceError::io("open", &folder, source))?;
        let entries = std::fs::read_dir(&folder)
            .map_err(|source| WorkspaceError::io("list", &folder, source))?;
        for entry in entries {
            let entry = entry.map_err(|source| WorkspaceError::io("list", &folder, source))?;
            let path = entry.path();
            // `DirEntry::metadata` does not follow symlinks.
            let metadata = entry
                .metadata()
                .map_err(|source| WorkspaceError::io("inspect", &path, source))?;
            let kind = metadata.file_type();
            if kind.is_symlink() {
                continue;
            }
            let needed = if kind.is_dir() {
                FOLDER_ACCESS
            } else {
                FILE_ACCESS
            };
            let mode = metadata.permissions().mode() & 0o7777;
            let name = entry.file_name();
            if mode & needed != needed {
                // Relative to the open folder and without following a symlink, so an entry
                // swapped for a link meanwhile cannot redirect the change outside the worktree.
                fchmodat(
                    &handle,
                    name.as_os_str(),
                    Mode::from_bits_truncate(mode | needed),
                    FchmodatFlags::NoFollowSymlink,
                )
                .map_err(|errno| {
                    WorkspaceError::io("give the owner access to", &path, errno.into())
                })?;
                restored.push(relative.join(&name).to_string_lossy().into_owned());
            }
            if kind.is_dir() {
                folders.push(relative.join(&name));
            }
        }
    }
    restored.sort();
    Ok(restored)
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
