//! Whole-file replacement that a crash cannot tear: write a temporary file in the same folder,
//! fsync it, rename it over the target, fsync the folder.

use std::io::Write;
use std::path::Path;

use super::ArtifactsError;

/// Atomically replaces `path` with `bytes`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ArtifactsError> {
    let folder = path.parent().unwrap_or_else(|| Path::new("."));
    std::fs::create_dir_all(folder).map_err(ArtifactsError::io("create", folder))?;
    let mut temporary = tempfile::Builder::new()
        .prefix(".tmp-")
        .tempfile_in(folder)
        .map_err(ArtifactsError::io("create a temporary file in", folder))?;
    temporary
        .write_all(bytes)
        .map_err(ArtifactsError::io("write", temporary.path()))?;
    temporary
        .as_file()
        .sync_all()
        .map_err(ArtifactsError::io("fsync", temporary.path()))?;
    temporary
        .persist(path)
        .map_err(|error| ArtifactsError::Io {
            action: "rename into",
            path: path.to_path_buf(),
            source: error.error,
        })?;
    // The rename is durable only once the folder's entry is.
    std::fs::File::open(folder)
        .and_then(|directory| directory.sync_all())
        .map_err(ArtifactsError::io("fsync", folder))
}

/// Serialises `value` as pretty JSON (with a final newline) and writes it atomically.
pub fn write_json_atomic<T: serde::Serialize>(
    path: &Path,
    value: &T,
) -> Result<(), ArtifactsError> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|source| ArtifactsError::Json {
        what: "record",
        path: path.to_path_buf(),
        source,
    })?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

/// Reads a JSON file.
pub fn read_json<T: serde::de::DeserializeOwned>(
    path: &Path,
    what: &'static str,
) -> Result<T, ArtifactsError> {
    let bytes = std::fs::read(path).map_err(ArtifactsError::io("read", path))?;
    serde_json::from_slice(&bytes).map_err(|source| ArtifactsError::Json {
        what,
        path: path.to_path_buf(),
        source,
    })
}

/// Writes a file that belongs to one step visit (a new folder per visit, so nobody reads it
/// half-written: the manifest that points at it is written after it). It is fsynced but not
/// renamed into place, which spares the file system a temporary inode per artifact.
pub fn write_json_new<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), ArtifactsError> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|source| ArtifactsError::Json {
        what: "record",
        path: path.to_path_buf(),
        source,
    })?;
    bytes.push(b'\n');
    if let Some(folder) = path.parent() {
        std::fs::create_dir_all(folder).map_err(ArtifactsError::io("create", folder))?;
    }
    let mut file = std::fs::File::create(path).map_err(ArtifactsError::io("create", path))?;
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
}
