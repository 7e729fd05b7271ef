//! Path normalisation before any glob is matched: a path that is absolute or climbs out of the
//! worktree, and a symlink whose target leaves it, is a violation in itself and is never
//! matched against `allowed_paths` (where a lexical match could otherwise let it through).

/// Why a path is not a plain path inside the worktree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathEscape {
    /// `/etc/passwd`.
    Absolute,
    /// `../x`, `a/../../x`.
    ParentTraversal,
    /// An empty path or one with a NUL byte.
    Malformed,
}

impl PathEscape {
    /// A short description for the violation's detail.
    pub fn describe(&self) -> &'static str {
        match self {
            PathEscape::Absolute => "absolute path",
            PathEscape::ParentTraversal => "`..` climbs out of the worktree",
            PathEscape::Malformed => "empty or malformed path",
        }
    }
}

/// The normal form of a worktree-relative path: `/`-separated, no `.` or empty components,
/// `..` resolved lexically. Fails when the path is absolute or leaves the worktree.
pub fn normalize_path(path: &str) -> Result<String, PathEscape> {
    if path.is_empty() || path.contains('\0') {
        return Err(PathEscape::Malformed);
    }
    if path.starts_with('/') || path.starts_with('\\') || has_drive_prefix(path) {
        return Err(PathEscape::Absolute);
    }
    let mut components: Vec<&str> = Vec::new();
    for component in path.split('/') {
        match component {
            "" | "." => {}
            ".." => {
                if components.pop().is_none() {
                    return Err(PathEscape::ParentTraversal);
                }
            }
            other => components.push(other),
        }
    }
    if components.is_empty() {
        return Err(PathEscape::Malformed);
    }
    Ok(components.join("/"))
}

/// True when a symlink at `link_path` (worktree-relative) pointing at `target` resolves outside
/// the worktree. Absolute targets always count as outside: the worktree can move, and a link
/// into it by absolute path is not portable either.
pub fn symlink_escapes(link_path: &str, target: &str) -> bool {
    if target.is_empty() || target.starts_with('/') || has_drive_prefix(target) {
        return true;
    }
    let mut depth: Vec<&str> = link_path
        .split('/')
        .filter(|part| !part.is_empty())
        .collect();
    depth.pop();
    for component in target.split('/') {
        match component {
            "" | "." => {}
            ".." => {
                if depth.pop().is_none() {
                    return true;
                }
            }
            other => depth.push(other),
        }
    }
    false
}

fn has_drive_prefix(path: &str) -> bool {
    let bytes = path.as_bytes();
    bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':'
}
