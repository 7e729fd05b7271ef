//! Whole-file replacement that a crash cannot tear: write a temporary file in the same folder,
//! fsync it, rename it over the target, fsync the folder.

use std::io::Write;
use std::path::Path;

use super::ArtifactsError;

/// Atomically replaces `path` with `bytes`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ArtifactsError> {
    let folder = path.parent().unwrap_or_else(|| Path::new("."));
    std::fs::create_dir_all(folder).map_err(ArtifactsError::io("create", folder))?;
    rename_into_place(path, bytes, true)?;
    // The rename is durable only once the folder's entry is.
    std::fs::File::open(folder)
        .and_then(|directory| directory.sync_all())
        .map_err(ArtifactsError::io("fsync", folder))
}

/// Writes `bytes` to a temporary file beside `path` (fsynced when `durable`) and renames it
/// over `path`, so no reader ever sees half of it.
fn rename_into_place(path: &Path, bytes: &[u8], durable: bool) -> Result<(), ArtifactsError> {
    use std::os::unix::fs::PermissionsExt;
    let folder = path.parent().unwrap_or_else(|| Path::new("."));
    // Readable like every other artifact (0666 less the umask), not the temporary file's
    // private 0600: a run directory is for the whole team to audit.
    let mut temporary = tempfile::Builder::new()
        .prefix(".tmp-")
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(folder)
        .map_err(ArtifactsError::io("create a temporary file in", folder))?;
    temporary
        .write_all(bytes)
        .map_err(ArtifactsError::io("write", temporary.path()))?;
    if durable {
        temporary
            .as_file()
            .sync_all()
            .map_err(ArtifactsError::io("fsync", temporary.path()))?;
    }
    // A rename replaces a file or a symbolic link (never its target) but not a folder: one
    // left under the name (by an agent: the name is the conductor's) is removed first.
    let temporary = match temporary.persist(path) {
        Err(error) if std::fs::symlink_metadata(path).is_ok_and(|found| found.is_dir()) => {
            super::safe_files::remove_entry(path)
                .map_err(ArtifactsError::io("remove the folder in the way of", path))?;
            error.file
        }
        other => {
            return other.map(drop).map_err(|error| ArtifactsError::Io {
                action: "rename into",
                path: path.to_path_buf(),
                source: error.error,
            });
        }
    };
    temporary
        .persist(path)
        .map(drop)
        .map_err(|error| ArtifactsError::Io {
            action: "rename into",
            path: path.to_path_buf(),
            source: error.error,
        })
}

/// Atomically makes `path` another name of the existing file `source` (a hard link under a
/// temporary name, renamed over `path`, then the folder fsynced). No new inode and no data is
/// written, which on some file systems costs far less than a copy. A file system without hard
/// links gets an atomic copy instead.
pub fn link_atomic(source: &Path, path: &Path) -> Result<(), ArtifactsError> {
    let folder = path.parent().unwrap_or_else(|| Path::new("."));
    std::fs::create_dir_all(folder).map_err(ArtifactsError::io("create", folder))?;
    let temporary = folder.join(format!(".tmp-link-{}", std::process::id()));
    let _ = std::fs::remove_file(&temporary);
    if std::fs::hard_link(source, &temporary).is_err() {
        let bytes = std::fs::read(source).map_err(ArtifactsError::io("read", source))?;
        return write_atomic(path, &bytes);
    }
    if std::fs::symlink_metadata(path).is_ok_and(|found| found.is_dir()) {
        super::safe_files::remove_entry(path)
            .map_err(ArtifactsError::io("remove the folder in the way of", path))?;
    }
    if let Err(source) = std::fs::rename(&temporary, path) {
        let _ = std::fs::remove_file(&temporary);
        return Err(ArtifactsError::Io {
            action: "rename into",
            path: path.to_path_buf(),
            source,
        });
    }
    std::fs::File::open(folder)
        .and_then(|directory| directory.sync_all())
        .map_err(ArtifactsError::io("fsync", folder))
}

/// Replaces `path` with `bytes` so that no reader ever sees it half-written, without the
/// fsyncs: for files that are derived from a durable one and rewritten from it on resume
/// (`status.json` from `state.json`).
pub fn replace_file(path: &Path, bytes: &[u8]) -> Result<(), ArtifactsError> {
    rename_into_place(path, bytes, false)
}

/// Serialises `value` as pretty JSON (with a final newline) and writes it atomically.
pub fn write_json_atomic<T: serde::Serialize>(
    path: &Path,
    value: &T,
) -> Result<(), ArtifactsError> {
    write_atomic(path, &json_bytes(path, value)?)
}

/// Serialises `value` as pretty JSON and replaces `path` with it like [`replace_file`].
pub fn replace_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), ArtifactsError> {
    replace_file(path, &json_bytes(path, value)?)
}

/// Pretty JSON with a final newline, as every JSON record is written.
fn json_bytes<T: serde::Serialize>(path: &Path, value: &T) -> Result<Vec<u8>, ArtifactsError> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|source| ArtifactsError::Json {
        what: "record",
        path: path.to_path_buf(),
        source,
    })?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Reads a JSON file.
pub fn read_json<T: serde::de::DeserializeOwned>(
    path: &Path,
    what: &'static str,
) -> Result<T, ArtifactsError> {
    // Records live in folders an agent can write: a link or a FIFO in a record's place is
    // refused, never followed or waited on.
    let mut bytes = Vec::new();
    super::safe_files::open_regular(path)
        .and_then(|mut file| std::io::Read::read_to_end(&mut file, &mut bytes))
        .map_err(ArtifactsError::io("read", path))?;
    serde_json::from_slice(&bytes).map_err(|source| ArtifactsError::Json {
        what,
        path: path.to_path_buf(),
        source,
    })
}

/// Writes a file that belongs to one step visit (a new folder per visit, so nobody reads it
/// half-written: the manifest that points at it is written after it). It is fsynced but not
/// renamed into place, which spares the file system a temporary inode per artifact. The file
/// is always a new one: whatever an agent left under its name in the folder it can write to
/// (a link to the operator's `.git/config`, a FIFO) is removed, never written through.
pub fn write_json_new<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), ArtifactsError> {
    write_json_with_mode(path, value, 0o666)
}

/// Writes a step file that copies what the step was given (as the runner writes `prompt.md`):
/// not fsynced, since it can be rebuilt from the workflow and the run's records, and each
/// fsync costs a step about a millisecond on a shared disk.
pub fn write_json_unsynced<T: serde::Serialize>(
    path: &Path,
    value: &T,
) -> Result<(), ArtifactsError> {
    let bytes = json_bytes(path, value)?;
    super::safe_files::write_new(path, &bytes).map_err(ArtifactsError::io("write", path))
}

/// [`write_json_new`] for a file only its owner may read (0600): one that holds copies of the
/// operator's own files.
pub fn write_json_private<T: serde::Serialize>(
    path: &Path,
    value: &T,
) -> Result<(), ArtifactsError> {
    write_json_with_mode(path, value, 0o600)
}

fn write_json_with_mode<T: serde::Serialize>(
    path: &Path,
    value: &T,
    mode: u32,
) -> Result<(), ArtifactsError> {
    let bytes = json_bytes(path, value)?;
    if let Some(folder) = path.parent() {
        std::fs::create_dir_all(folder).map_err(ArtifactsError::io("create", folder))?;
    }
    let mut file =
        super::safe_files::create_new(path, mode).map_err(ArtifactsError::io("create", path))?;
    file.write_all(&bytes)
        .map_err(ArtifactsError::io("write", path))?;
    file.sync_data().map_err(ArtifactsError::io("fsync", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_whole_file_and_leaves_no_temporary_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        write_atomic(&path, b"first").unwrap();
        write_atomic(&path, b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(names, ["state.json"]);
    }

    #[test]
    fn a_link_names_the_same_file_and_follows_a_new_source() {
        let dir = tempfile::tempdir().unwrap();
        let visit = dir.path().join("1").join("manifest.json");
        let latest = dir.path().join("manifest.json");
        write_atomic(&visit, b"first visit").unwrap();
        link_atomic(&visit, &latest).unwrap();
        assert_eq!(std::fs::read(&latest).unwrap(), b"first visit");
        let second = dir.path().join("2").join("manifest.json");
        write_atomic(&second, b"second visit").unwrap();
        link_atomic(&second, &latest).unwrap();
        assert_eq!(std::fs::read(&latest).unwrap(), b"second visit");
        // Another name of the same file, not a copy (this file system has hard links).
        use std::os::unix::fs::MetadataExt;
        let inode = |path: &Path| std::fs::metadata(path).unwrap().ino();
        assert_eq!(inode(&latest), inode(&second));
        // The first visit's file is untouched, and no temporary name is left behind.
        assert_eq!(std::fs::read(&visit).unwrap(), b"first visit");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter(|name| !name.chars().all(|c| c.is_ascii_digit()))
            .collect();
        assert_eq!(names, ["manifest.json"]);
    }

    #[test]
    fn replaced_files_are_as_readable_as_created_ones() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let created = dir.path().join("created");
        std::fs::write(&created, b"x").unwrap();
        let replaced = dir.path().join("state.json");
        write_atomic(&replaced, b"x").unwrap();
        let derived = dir.path().join("status.json");
        replace_file(&derived, b"x").unwrap();
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&replaced), mode(&created));
        assert_eq!(mode(&derived), mode(&created));
    }

    #[test]
    fn a_replaced_file_is_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("status.json");
        replace_json(&path, &serde_json::json!({"state": "running"})).unwrap();
        replace_json(&path, &serde_json::json!({"state": "completed"})).unwrap();
        let read: serde_json::Value = read_json(&path, "status").unwrap();
        assert_eq!(read["state"], "completed");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
