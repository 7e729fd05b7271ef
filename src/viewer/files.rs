//! Reading a file of a run directory for a page: only a path inside the run directory, made
//! of plain names (no `..`, no `.`, nothing absolute), none of whose folders is a link, and
//! a regular file at the end (a link, a FIFO or a device is refused without being followed or
//! waited on). An agent can write into its visit's folder; nothing it plants leads out.

use std::path::{Component, Path, PathBuf};

use crate::artifacts::safe_files;

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Refused(pub(super) String);

/// A file's content as a page shows it.
#[derive(Debug)]
pub(super) enum Content {
    /// UTF-8 text (perhaps cut at the limit).
    Text {
        /// The text.
        text: String,
        /// Whether the file held more.
        cut: bool,
    },
    /// Not text: only its size is told.
    Binary {
        /// Bytes read (at most the limit).
        size: usize,
    },
    /// Not there (not written yet, or never).
    Missing,
}

/// `relative` (as written in a URL or a manifest) inside `root`, refused unless every part
/// is a plain name and nothing on the way is a link.
pub(super) fn inside(root: &Path, relative: &str) -> Result<PathBuf, Refused> {
    let refused = |why: &str| Err(Refused(format!("`{relative}`: {why}")));
    if relative.is_empty() || relative.contains('\0') || relative.contains('\\') {
        return refused("not a file of the run directory");
    }
    let mut path = root.to_path_buf();
    // The run directory itself must be a real folder too.
    if is_link(&path) {
        return refused("the run directory is a link");
    }
    for part in relative.split('/') {
        let mut components = Path::new(part).components();
        match (components.next(), components.next()) {
            (Some(Component::Normal(name)), None) if part != "." => path.push(name),
            _ => return refused("only plain names lead to a file of the run directory"),
        }
        if is_link(&path) {
            return refused("a link is never followed");
        }
    }
    Ok(path)
}

fn is_link(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|metadata| metadata.file_type().is_symlink())
}

/// At most `limit` bytes of the regular file `path` (whose folders [`inside`] checked).
pub(super) fn read(path: &Path, limit: u64) -> Result<Content, Refused> {
    match safe_files::read_regular(path, limit) {
        Ok((bytes, cut)) => Ok(text_or_binary(bytes, cut)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Content::Missing),
        Err(error) => Err(Refused(format!(
            "`{}`: {error}",
            path.file_name().unwrap_or_default().to_string_lossy()
        ))),
    }
}

/// Text when the bytes are UTF-8 (a cut may split a character: up to three bytes are
/// dropped) and hold no NUL, else binary.
fn text_or_binary(mut bytes: Vec<u8>, cut: bool) -> Content {
    if bytes.contains(&0) {
        return Content::Binary { size: bytes.len() };
    }
    match std::str::from_utf8(&bytes) {
        Ok(_) => {}
        Err(error) if cut && error.error_len().is_none() => bytes.truncate(error.valid_up_to()),
        Err(_) => return Content::Binary { size: bytes.len() },
    }
    match String::from_utf8(bytes) {
        Ok(text) => Content::Text { text, cut },
        Err(error) => Content::Binary {
            size: error.as_bytes().len(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_names_lead_inside() {
        let root = tempfile::tempdir().unwrap();
        assert!(inside(root.path(), "artifacts/a/1/prompt.md").is_ok());
        for bad in [
            "../x",
            "a/../../x",
            "/etc/passwd",
            "a//b",
            "./a",
            "",
            "a/.",
            "a\\..\\b",
        ] {
            assert!(inside(root.path(), bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_planted_link_is_refused() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("artifacts")).unwrap();
        std::os::unix::fs::symlink("/etc", root.path().join("artifacts/out")).unwrap();
        assert!(inside(root.path(), "artifacts/out/passwd").is_err());
        std::os::unix::fs::symlink("/etc/passwd", root.path().join("artifacts/p")).unwrap();
        assert!(inside(root.path(), "artifacts/p").is_err());
    }

    #[test]
    fn text_cut_inside_a_character_stays_text() {
        let bytes = "é".as_bytes()[..1].to_vec();
        assert!(matches!(text_or_binary(bytes, true), Content::Text { .. }));
        assert!(matches!(
            text_or_binary(vec![0, 1], false),
            Content::Binary { size: 2 }
        ));
    }
}
