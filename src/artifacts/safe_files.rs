//! Creating and reading files in folders an agent can write to.
//!
//! A step's visit folder is the agent's `$TNH_STEP_DIR`, and an agent knows the whole run
//! directory (`$TNH_RUN_DIR`): anything the conductor writes there may meet a symbolic link,
//! a hard link, a FIFO or a folder the agent left under the very name the conductor is about
//! to use. So the conductor never opens an existing entry for writing: it creates a new file
//! with `O_CREAT|O_EXCL|O_NOFOLLOW` (removing whatever held the name first: a link is removed,
//! never followed), or writes a fresh temporary file and renames it over the name (a rename
//! replaces a link itself, never its target). And it reads back only regular files, opened
//! with `O_NOFOLLOW|O_NONBLOCK` (a FIFO cannot block the open) and never past a bound.

use std::fs::{File, OpenOptions};
use std::io::{Error, ErrorKind, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;

/// How often a name an agent keeps re-creating is cleared before the conductor gives up.
const ATTEMPTS: usize = 3;

/// Creates `path` as a new, empty file with `mode` (less the umask), opened for writing.
///
/// Whatever held the name (a file, a symbolic or hard link, a FIFO, a folder) is removed
/// first, never opened: the new file is always the conductor's own inode. A device node is
/// the one exception: it is neither removed (a conductor run as root must never delete
/// `/dev/null`) nor replaced, but written as it is — only root can make one, and root needs
/// no conductor to write a device.
pub fn create_new(path: &Path, mode: u32) -> std::io::Result<File> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let opened = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(OFlag::O_NOFOLLOW.bits())
            .open(path);
        match opened {
            Err(error) if error.kind() == ErrorKind::AlreadyExists && attempt < ATTEMPTS => {
                let kind = std::fs::symlink_metadata(path)?.file_type();
                if kind.is_char_device() || kind.is_block_device() {
                    return OpenOptions::new()
                        .write(true)
                        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NOCTTY).bits())
                        .open(path);
                }
                remove_entry(path)?;
            }
            other => return other,
        }
    }
}

/// Writes `bytes` to `path` as a new file (see [`create_new`]), readable like every other
/// artifact (0666 less the umask), not fsynced.
pub fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    create_new(path, 0o666)?.write_all(bytes)
}

/// Removes the entry `path` names without following it: a folder with what it holds, anything
/// else by its name only. A missing entry is no error.
pub fn remove_entry(path: &Path) -> std::io::Result<()> {
    let removed = match std::fs::symlink_metadata(path) {
        Err(error) => Err(error),
        Ok(metadata) if metadata.is_dir() => std::fs::remove_dir_all(path),
        Ok(metadata)
            if metadata.file_type().is_char_device() || metadata.file_type().is_block_device() =>
        {
            Err(Error::new(
                ErrorKind::InvalidInput,
                "it is a device, which the conductor never removes",
            ))
        }
        Ok(_) => std::fs::remove_file(path),
    };
    match removed {
        Err(error) if error.kind() == ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Opens `path` for reading if it is a regular file: a symbolic link is not followed, and a
/// FIFO, a device or a folder is refused (without blocking on a FIFO that has no writer).
pub fn open_regular(path: &Path) -> std::io::Result<File> {
    open_checked(path, false)
}

/// [`open_regular`] for a path whose links its caller has already checked: they are followed.
pub fn open_regular_following(path: &Path) -> std::io::Result<File> {
    open_checked(path, true)
}

fn open_checked(path: &Path, follow: bool) -> std::io::Result<File> {
    let mut flags = OFlag::O_NONBLOCK | OFlag::O_NOCTTY;
    if !follow {
        flags |= OFlag::O_NOFOLLOW;
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits())
        .open(path)
        .map_err(|error| match error.raw_os_error() {
            Some(code) if code == nix::errno::Errno::ELOOP as i32 => Error::new(
                ErrorKind::InvalidInput,
                "it is a symbolic link, which the conductor does not follow",
            ),
            _ => error,
        })?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!("it is {}, not a regular file", kind_name(kind)),
        ));
    }
    Ok(file)
}

/// The text of the regular file `path` (see [`open_regular`]).
pub fn read_regular_text(path: &Path) -> std::io::Result<String> {
    let mut text = String::new();
    open_regular(path)?.read_to_string(&mut text)?;
    Ok(text)
}

/// Reads at most `limit` bytes of the regular file `path` (see [`open_regular`]); the second
/// value says whether the file held more.
pub fn read_regular(path: &Path, limit: u64) -> std::io::Result<(Vec<u8>, bool)> {
    read_bounded(open_regular(path)?, limit)
}

/// [`read_regular`] for a path whose links its caller has checked (they are followed): at
/// most `limit` bytes of the regular file it leads to, never blocking on a FIFO.
pub fn read_regular_following(path: &Path, limit: u64) -> std::io::Result<(Vec<u8>, bool)> {
    read_bounded(open_regular_following(path)?, limit)
}

/// The text of the regular file `path` leads to (links followed), at most `limit` bytes; a
/// FIFO, a device or a folder is refused without blocking, and text that is not UTF-8 is an
/// error (`InvalidData`).
pub fn read_text_following(path: &Path, limit: u64) -> std::io::Result<String> {
    let (bytes, _) = read_regular_following(path, limit)?;
    String::from_utf8(bytes).map_err(|error| Error::new(ErrorKind::InvalidData, error))
}

/// At most `limit` bytes of `file`, and whether it held more.
pub fn read_bounded(file: File, limit: u64) -> std::io::Result<(Vec<u8>, bool)> {
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    let more = bytes.len() as u64 > limit;
    bytes.truncate(limit as usize);
    Ok((bytes, more))
}

/// Copies at most `limit` bytes of the regular file `source` to `target`, a new file (see
/// [`create_new`]). `source` may be a link (its caller checked where it leads); a FIFO, a
/// device or a folder is refused without blocking.
pub fn copy_regular(source: &Path, target: &Path, limit: u64) -> std::io::Result<u64> {
    let file = open_regular_following(source)?;
    std::io::copy(&mut file.take(limit), &mut create_new(target, 0o666)?)
}

/// `root/part/…` as real folders: each part that is missing is created, and one that is not
/// a folder (a symbolic link to elsewhere, a file) is removed and created as one. Returns the
/// folder and a description of each part that had to be replaced.
pub fn create_real_folders(root: &Path, parts: &[&str]) -> std::io::Result<(PathBuf, Vec<String>)> {
    std::fs::create_dir_all(root)?;
    let mut folder = root.to_path_buf();
    let mut replaced = Vec::new();
    for part in parts {
        folder.push(part);
        match std::fs::symlink_metadata(&folder) {
            Ok(metadata) if metadata.is_dir() => continue,
            Ok(_) => {
                if let Some(found) = describe(&folder) {
                    replaced.push(found);
                }
                remove_entry(&folder)?;
            }
            Err(error) if error.kind() == ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
        match std::fs::create_dir(&folder) {
            Err(error) if error.kind() == ErrorKind::AlreadyExists => {
                // Created meanwhile: acceptable only as a real folder.
                if !std::fs::symlink_metadata(&folder)?.is_dir() {
                    return Err(Error::new(
                        ErrorKind::AlreadyExists,
                        format!("`{}` keeps being replaced", folder.display()),
                    ));
                }
            }
            other => other?,
        }
    }
    Ok((folder, replaced))
}

/// What the entry `path` is, without following it (`None` when there is none), named by its
/// last part: "`x` is a symbolic link to `/target`", "`x` is a FIFO", "`x` is a regular file
/// with 2 names (a hard link)".
pub fn describe(path: &Path) -> Option<String> {
    let metadata = std::fs::symlink_metadata(path).ok()?;
    let name = path
        .file_name()
        .unwrap_or(path.as_os_str())
        .to_string_lossy();
    let kind = metadata.file_type();
    Some(if kind.is_symlink() {
        let target = std::fs::read_link(path)
            .map(|target| target.display().to_string())
            .unwrap_or_default();
        format!("`{name}` is a symbolic link to `{target}`")
    } else if kind.is_file() && metadata.nlink() > 1 {
        format!(
            "`{name}` is a regular file with {} names (a hard link)",
            metadata.nlink()
        )
    } else {
        format!("`{name}` is {}", kind_name(kind))
    })
}

/// Clears what an agent left in `folder` under the conductor's names: names the conductor is
/// about to write (`written_after`) that are already there, and names it wrote before
/// (`created_before`) that now hold something else than a regular file of one name. Each is
/// described as [`describe`] does, then removed (so nothing in the folder points elsewhere or
/// passes for the conductor's record).
pub fn clear_unexpected_entries(
    folder: &Path,
    created_before: &[&str],
    written_after: &[&str],
) -> std::io::Result<Vec<String>> {
    let mut found = Vec::new();
    let replaced = created_before.iter().filter(|name| {
        std::fs::symlink_metadata(folder.join(name))
            .is_ok_and(|metadata| !metadata.file_type().is_file() || metadata.nlink() > 1)
    });
    for name in replaced.chain(written_after) {
        let path = folder.join(name);
        if let Some(description) = describe(&path) {
            found.push(description);
            match remove_entry(&path) {
                // A device node (only root makes one) stays; it was reported.
                Err(error) if error.kind() != ErrorKind::InvalidInput => return Err(error),
                _ => {}
            }
        }
    }
    Ok(found)
}

/// Adds "`NAME` was removed" to `found` (what [`clear_unexpected_entries`] reported) for each
/// of `names` — files the conductor created before a step's process ran — that is now gone
/// and not already reported.
pub fn note_removed(folder: &Path, names: &[&str], found: &mut Vec<String>) {
    for name in names {
        let reported = found
            .iter()
            .any(|entry| entry.starts_with(&format!("`{name}` ")));
        if !reported && std::fs::symlink_metadata(folder.join(name)).is_err() {
            found.push(format!("`{name}` was removed"));
        }
    }
}

/// What kind of entry a file type is, with its article ("a FIFO", "a folder").
pub fn kind_name(kind: std::fs::FileType) -> &'static str {
    if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_dir() {
        "a folder"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device"
    } else {
        "a regular file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_file_replaces_a_link_and_leaves_its_target_alone() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("config");
        std::fs::write(&target, b"operator's\n").unwrap();
        let symlink = dir.path().join("symlink.json");
        std::os::unix::fs::symlink(&target, &symlink).unwrap();
        let hard = dir.path().join("hard.json");
        std::fs::hard_link(&target, &hard).unwrap();
        write_new(&symlink, b"evidence").unwrap();
        write_new(&hard, b"evidence").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"operator's\n");
        for path in [&symlink, &hard] {
            let metadata = std::fs::symlink_metadata(path).unwrap();
            assert!(metadata.is_file() && metadata.nlink() == 1);
            assert_eq!(std::fs::read(path).unwrap(), b"evidence");
        }
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("runlog.ndjson");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        let error = open_regular(&fifo).unwrap_err();
        assert!(error.to_string().contains("a FIFO"), "{error}");
        let link = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let error = read_regular(&link, 16).unwrap_err();
        assert!(error.to_string().contains("symbolic link"), "{error}");
    }

    #[test]
    fn reading_stops_at_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        std::fs::write(&path, b"0123456789").unwrap();
        assert_eq!(read_regular(&path, 4).unwrap(), (b"0123".to_vec(), true));
        assert_eq!(
            read_regular(&path, 10).unwrap(),
            (b"0123456789".to_vec(), false)
        );
    }

    #[test]
    fn a_linked_folder_is_replaced_by_a_real_one() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let root = dir.path().join("run");
        std::fs::create_dir_all(root.join("artifacts")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, root.join("artifacts/step")).unwrap();
        let (folder, replaced) = create_real_folders(&root, &["artifacts", "step", "1"]).unwrap();
        assert_eq!(folder, root.join("artifacts/step/1"));
        assert!(
            !std::fs::symlink_metadata(root.join("artifacts/step"))
                .unwrap()
                .is_symlink()
        );
        assert_eq!(replaced.len(), 1, "{replaced:?}");
        assert!(replaced[0].contains("symbolic link"), "{replaced:?}");
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    }
}
