//! Confinement of host file access to one root directory (the run's worktree).
//!
//! A script names files with relative, `/`-separated paths. They are normalised lexically
//! first (so `a/../../x` is refused before touching the disk), then resolved on disk and
//! checked again, so a symlink inside the worktree cannot lead outside it.

use std::fs;
use std::path::{Component, Path, PathBuf};

/// A directory that file access is confined to.
#[derive(Debug, Clone)]
pub(crate) struct Sandbox {
    root: PathBuf,
    /// What the root is, for messages: "the worktree", "the repository".
    place: &'static str,
}

impl Sandbox {
    /// A sandbox rooted at the worktree `root`, which must exist.
    pub(crate) fn new(root: &Path) -> Result<Self, String> {
        Self::named(root, "the worktree")
    }

    /// A sandbox rooted at `root` (which must exist), called `place` in messages.
    pub(crate) fn named(root: &Path, place: &'static str) -> Result<Self, String> {
        let root = root.canonicalize().map_err(|error| {
            format!(
                "the root of {place}, `{}`, is unusable: {error}",
                root.display()
            )
        })?;
        Ok(Self { root, place })
    }

    /// The canonical root.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The on-disk path of an existing file or directory, refusing anything outside the root.
    /// `Ok(None)` when nothing exists there.
    pub(crate) fn existing(&self, path: &str) -> Result<Option<PathBuf>, String> {
        let relative = normalise(path)?;
        let joined = self.root.join(&relative);
        if fs::symlink_metadata(&joined).is_err() {
            return Ok(None);
        }
        let resolved = match joined.canonicalize() {
            Ok(resolved) => resolved,
            // A dangling symlink: nothing readable exists there.
            Err(_) => return Ok(None),
        };
        if !resolved.starts_with(&self.root) {
            return Err(format!(
                "`{path}` is a symlink that leads outside {}",
                self.place
            ));
        }
        Ok(Some(resolved))
    }

    /// Reads a UTF-8 file of at most `max_bytes` bytes.
    pub(crate) fn read_text(&self, path: &str, max_bytes: u64) -> Result<String, String> {
        let resolved = self
            .existing(path)?
            .ok_or_else(|| format!("`{path}` does not exist in {}", self.place))?;
        let metadata = fs::metadata(&resolved).map_err(|error| format!("`{path}`: {error}"))?;
        if !metadata.is_file() {
            return Err(format!("`{path}` is not a file"));
        }
        if metadata.len() > max_bytes {
            return Err(format!(
                "`{path}` is {} bytes; files read by scripts are limited to {max_bytes} bytes",
                metadata.len()
            ));
        }
        // Only a regular file, without blocking: a FIFO the agent left would hang the script.
        let (bytes, _) = crate::artifacts::safe_files::read_regular_following(&resolved, max_bytes)
            .map_err(|error| format!("`{path}`: {error}"))?;
        String::from_utf8(bytes).map_err(|_| format!("`{path}` is not UTF-8 text"))
    }
}

/// A relative path with `.` removed and `..` applied, `/`-separated; refuses absolute paths
/// and paths that climb above the root.
pub(crate) fn normalise(path: &str) -> Result<String, String> {
    if path.is_empty() {
        return Err("the path is empty".to_owned());
    }
    if path.contains('\0') {
        return Err("the path contains a NUL byte".to_owned());
    }
    let mut parts: Vec<&str> = Vec::new();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(part) => parts.push(
                part.to_str()
                    .ok_or_else(|| format!("`{path}` is not UTF-8"))?,
            ),
            Component::CurDir => {}
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return Err(format!("`{path}` leads outside the worktree"));
                }
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!(
                    "`{path}` is absolute; scripts name files relative to the worktree"
                ));
            }
        }
    }
    Ok(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalise_applies_dots_and_refuses_escapes() {
        assert_eq!(normalise("./src//a/../b.rs").unwrap(), "src/b.rs");
        assert_eq!(normalise("a/..").unwrap(), "");
        assert!(normalise("../x").unwrap_err().contains("outside"));
        assert!(normalise("a/../../x").unwrap_err().contains("outside"));
        assert!(normalise("/etc/passwd").unwrap_err().contains("absolute"));
        assert!(normalise("").is_err());
    }
}
