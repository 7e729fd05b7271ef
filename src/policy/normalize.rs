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
/// the worktree, judged on this link alone (every other path taken for a plain folder).
/// Absolute targets always count as outside: the worktree can move, and a link into it by
/// absolute path is not portable either. [`resolve_symlink`] also follows the other links.
pub fn symlink_escapes(link_path: &str, target: &str) -> bool {
    resolve_symlink(link_path, target, &mut |_| LinkLookup::NotALink).is_err()
}

/// The most symlinks followed while resolving one link's target (as Linux's `MAXSYMLINKS`);
/// a longer chain is taken for a loop.
pub const MAX_SYMLINK_HOPS: usize = 40;

/// What is at a worktree-relative path, as far as resolving symlinks goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkLookup {
    /// A folder, a file, or nothing: not followed.
    NotALink,
    /// A symlink, with its target as written in it.
    Link(String),
    /// It could not be told (unreadable, or a target that is not UTF-8).
    Unknown,
}

/// Why a symlink's target does not resolve inside the worktree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SymlinkEscape {
    /// The target, or the target of a link it goes through, is absolute (or empty).
    Absolute {
        /// The link whose target is absolute (the checked link itself or one it goes through).
        link: String,
    },
    /// A `..` climbs above the worktree root once the links on the way are followed.
    AboveRoot,
    /// More than [`MAX_SYMLINK_HOPS`] links were followed: a loop.
    Loop,
    /// A link on the way could not be read.
    Unresolvable {
        /// The path that could not be told a link or not.
        path: String,
    },
}

impl SymlinkEscape {
    /// A short description for the violation's detail.
    pub fn describe(&self) -> String {
        match self {
            SymlinkEscape::Absolute { link } => format!("`{link}` has an absolute target"),
            SymlinkEscape::AboveRoot => "it climbs above the worktree root".to_owned(),
            SymlinkEscape::Loop => {
                format!("a symlink loop (more than {MAX_SYMLINK_HOPS} links followed)")
            }
            SymlinkEscape::Unresolvable { path } => format!("`{path}` could not be read"),
        }
    }
}

/// Resolves the target of the symlink at `link_path` as the operating system would: component
/// by component from the link's folder, following every symlink met on the way (`lookup` says
/// what is at a worktree-relative path), with `..` taken after the links before it are
/// followed. Returns the worktree-relative path it lands on (empty for the root), or why it
/// leaves the worktree: an absolute target anywhere on the way, a `..` above the root, a loop.
/// A path that does not exist is passed through lexically, which can only find more escapes
/// than the operating system would.
pub fn resolve_symlink(
    link_path: &str,
    target: &str,
    lookup: &mut dyn FnMut(&str) -> LinkLookup,
) -> Result<String, SymlinkEscape> {
    if is_absolute_target(target) {
        return Err(SymlinkEscape::Absolute {
            link: link_path.to_owned(),
        });
    }
    let mut pending: Vec<String> = Vec::new();
    push_components(&mut pending, target);
    let mut folder: Vec<&str> = link_path.split('/').collect();
    folder.pop();
    pending.extend(folder.into_iter().rev().map(str::to_owned));
    let mut resolved: Vec<String> = Vec::new();
    let mut hops = 0;
    while let Some(component) = pending.pop() {
        match component.as_str() {
            "" | "." => {}
            ".." => {
                if resolved.pop().is_none() {
                    return Err(SymlinkEscape::AboveRoot);
                }
            }
            _ => {
                resolved.push(component);
                let path = resolved.join("/");
                match lookup(&path) {
                    LinkLookup::NotALink => {}
                    LinkLookup::Unknown => return Err(SymlinkEscape::Unresolvable { path }),
                    LinkLookup::Link(next) => {
                        hops += 1;
                        if hops > MAX_SYMLINK_HOPS {
                            return Err(SymlinkEscape::Loop);
                        }
                        if is_absolute_target(&next) {
                            return Err(SymlinkEscape::Absolute { link: path });
                        }
                        resolved.pop();
                        push_components(&mut pending, &next);
                    }
                }
            }
        }
    }
    Ok(resolved.join("/"))
}

/// Pushes `path`'s components on a stack so that the first is popped first.
fn push_components(pending: &mut Vec<String>, path: &str) {
    pending.extend(path.split('/').rev().map(str::to_owned));
}

fn is_absolute_target(target: &str) -> bool {
    target.is_empty() || target.starts_with('/') || has_drive_prefix(target)
}

/// What is at `path` (worktree-relative, without symlinks before its last component) in the
/// worktree at `root` on disk.
pub fn lookup_on_disk(root: &std::path::Path, path: &str) -> LinkLookup {
    let full = root.join(path);
    match std::fs::symlink_metadata(&full) {
        Ok(metadata) if metadata.file_type().is_symlink() => match std::fs::read_link(&full) {
            Ok(target) => match target.into_os_string().into_string() {
                Ok(target) => LinkLookup::Link(target),
                Err(_) => LinkLookup::Unknown,
            },
            Err(_) => LinkLookup::Unknown,
        },
        Ok(_) => LinkLookup::NotALink,
        Err(error)
            if matches!(
                error.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            LinkLookup::NotALink
        }
        Err(_) => LinkLookup::Unknown,
    }
}

fn has_drive_prefix(path: &str) -> bool {
    let bytes = path.as_bytes();
    bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':'
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::{LinkLookup, SymlinkEscape, lookup_on_disk, resolve_symlink};

    /// One table row: the links (the checked one first) and the resolution.
    type Case = (
        Vec<(&'static str, &'static str)>,
        Result<String, SymlinkEscape>,
    );

    /// Resolves `link` through the symlinks of `links` (path, target), the first of which is
    /// the link checked.
    fn resolve(links: &[(&str, &str)]) -> Result<String, SymlinkEscape> {
        let map: HashMap<&str, &str> = links.iter().copied().collect();
        let (path, target) = links[0];
        resolve_symlink(path, target, &mut |path| match map.get(path) {
            Some(target) => LinkLookup::Link((*target).to_owned()),
            None => LinkLookup::NotALink,
        })
    }

    #[test]
    fn a_target_is_resolved_through_the_other_links_of_the_worktree() {
        let above = Err(SymlinkEscape::AboveRoot);
        let cases: Vec<Case> = vec![
            // One link on its own, as before.
            (vec![("docs/link", "../README.md")], Ok("README.md".into())),
            (
                vec![("docs/a/link", "../../src/lib.rs")],
                Ok("src/lib.rs".into()),
            ),
            (vec![("link", "..")], above.clone()),
            (vec![("link", ".")], Ok(String::new())),
            // The chain of the security review: each link is inside on its own.
            (vec![("d/b", "..")], Ok(String::new())),
            (vec![("w", "d/b/.."), ("d/b", "..")], above.clone()),
            (
                vec![("t", "w/run/w/.."), ("w", "d/b/.."), ("d/b", "..")],
                above.clone(),
            ),
            (
                vec![
                    ("op", "t/worktrees/run/t/.."),
                    ("t", "w/run/w/.."),
                    ("w", "d/b/.."),
                    ("d/b", ".."),
                ],
                above.clone(),
            ),
            // Links that resolve inside pass, through other links too.
            (vec![("w", "d/b/x"), ("d/b", "..")], Ok("x".into())),
            (
                vec![("a/l", "../s/lib.rs"), ("s", "src")],
                Ok("src/lib.rs".into()),
            ),
            (
                vec![("l", "s/../README.md"), ("s", "src/deep")],
                Ok("src/README.md".into()),
            ),
            // `..` after a link is taken from where the link lands, not lexically.
            (vec![("l", "up/.."), ("up", "..")], above.clone()),
            (vec![("l", "inner/.."), ("inner", "a/b")], Ok("a".into())),
            // An absolute target anywhere on the way.
            (
                vec![("l", "abs/x"), ("abs", "/etc")],
                Err(SymlinkEscape::Absolute { link: "abs".into() }),
            ),
            (
                vec![("l", "/etc")],
                Err(SymlinkEscape::Absolute { link: "l".into() }),
            ),
            // Loops are escapes.
            (vec![("l", "l")], Err(SymlinkEscape::Loop)),
            (vec![("a", "b"), ("b", "a")], Err(SymlinkEscape::Loop)),
            (vec![("x", "x/..")], Err(SymlinkEscape::Loop)),
        ];
        for (links, expected) in cases {
            assert_eq!(resolve(&links), expected, "{links:?}");
        }
    }

    #[test]
    fn forty_links_in_a_row_resolve_and_forty_one_are_a_loop() {
        let names: Vec<String> = (0..=42).map(|index| format!("l{index}")).collect();
        let chain = |length: usize| -> Vec<(&str, &str)> {
            (0..length)
                .map(|index| (names[index].as_str(), names[index + 1].as_str()))
                .collect()
        };
        // The checked link's own target is not a hop: l0 → l1 … → l41 follows 40 links.
        assert_eq!(resolve(&chain(41)), Ok("l41".into()));
        assert_eq!(resolve(&chain(42)), Err(SymlinkEscape::Loop));
    }

    #[test]
    fn links_on_disk_are_followed_even_when_the_change_does_not_list_them() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path();
        std::fs::create_dir_all(dir.join("d/real")).unwrap();
        std::os::unix::fs::symlink("..", dir.join("d/b")).unwrap();
        std::os::unix::fs::symlink("real", dir.join("d/inside")).unwrap();
        let mut on_disk = |path: &str| lookup_on_disk(dir, path);
        assert_eq!(
            resolve_symlink("w", "d/b/..", &mut on_disk),
            Err(SymlinkEscape::AboveRoot)
        );
        assert_eq!(
            resolve_symlink("w", "d/inside/..", &mut on_disk),
            Ok("d".into())
        );
        assert_eq!(
            resolve_symlink("w", "d/missing/../real", &mut on_disk),
            Ok("d/real".into())
        );
        assert_eq!(lookup_on_disk(dir, "d/real/x/y"), LinkLookup::NotALink);
    }
}
