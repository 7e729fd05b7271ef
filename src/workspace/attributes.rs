//! Where the workspace's git reads `.gitattributes` from (`GIT_ATTR_SOURCE`): the run's base
//! commit, so attributes an agent writes in the worktree cannot change what is recorded.
//!
//! git looks an attribute file up in the source tree for every folder of every path it
//! diffs, and each look-up reads the trees on the way down from the root. Named by the base
//! commit, that was a third of a capture's time on a repository of 20,000 files
//! (`bench/workspace.sh`). So the source handed to git is a tree holding only the base's
//! attribute files, at the same paths and with the same modes and contents: what git finds
//! is the same, and a folder without one is known at once. It is built in-process (libgit2,
//! reading trees only) the first time a git command needs it, once per process.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// The name git reads attributes from in each folder.
const ATTRIBUTES_FILE: &[u8] = b".gitattributes";

/// Folders deeper than this are not walked (each level is a frame of the walk, and the first
/// git command may run on a thread with a small stack): the base commit itself is the source
/// then. A checkout cannot go this deep within a path of 4,096 bytes unless its folder names
/// are all of one or a few characters.
const MAX_DEPTH: usize = 256;

/// Git's mode of a folder in a tree.
const MODE_TREE: i32 = 0o040_000;

/// The attribute source of a workspace: its base commit, narrowed to its attribute files on
/// first use. Clones share the narrowed tree.
#[derive(Debug, Clone)]
pub(crate) struct AttrSource {
    commit: String,
    common_dir: PathBuf,
    narrowed: Arc<OnceLock<String>>,
}

impl AttrSource {
    /// The source for the base `commit` of the repository whose git folder is `common_dir`.
    pub(crate) fn new(commit: &str, common_dir: &Path) -> Self {
        Self {
            commit: commit.to_owned(),
            common_dir: common_dir.to_owned(),
            narrowed: Arc::new(OnceLock::new()),
        }
    }

    /// The tree-ish for `GIT_ATTR_SOURCE`: the tree of the base's attribute files, or the base
    /// commit itself when that tree could not be built (git then finds the same attributes,
    /// more slowly).
    pub(crate) fn tree_ish(&self) -> &str {
        self.narrowed.get_or_init(|| {
            attributes_tree(&self.common_dir, &self.commit).unwrap_or_else(|_| self.commit.clone())
        })
    }
}

/// Writes the tree of `commit`'s attribute files (every `.gitattributes` at any depth, and the
/// folders that lead to them) to the repository's objects and returns its id: the empty tree
/// when the commit has none.
pub(crate) fn attributes_tree(common_dir: &Path, commit: &str) -> Result<String, git2::Error> {
    let repository = git2::Repository::open_bare(common_dir)?;
    let tree = repository
        .find_commit(git2::Oid::from_str(commit)?)?
        .tree()?;
    let narrowed = match narrow(&repository, &tree, 0)? {
        Some(id) => id,
        None => repository.treebuilder(None)?.write()?,
    };
    Ok(narrowed.to_string())
}

/// The tree of `tree`'s attribute files, written; `None` when it holds none at any depth.
fn narrow(
    repository: &git2::Repository,
    tree: &git2::Tree<'_>,
    depth: usize,
) -> Result<Option<git2::Oid>, git2::Error> {
    if depth > MAX_DEPTH {
        return Err(git2::Error::from_str("folders nested too deep"));
    }
    let mut kept: Option<git2::TreeBuilder<'_>> = None;
    for entry in tree.iter() {
        let (id, mode) = match entry.kind() {
            Some(git2::ObjectType::Tree) => {
                match narrow(repository, &repository.find_tree(entry.id())?, depth + 1)? {
                    Some(id) => (id, MODE_TREE),
                    None => continue,
                }
            }
            // A file or a symlink of that name, as it is: git reads the same blob either way.
            Some(git2::ObjectType::Blob) if entry.name_bytes() == ATTRIBUTES_FILE => {
                (entry.id(), entry.filemode())
            }
            _ => continue,
        };
        let builder = match &mut kept {
            Some(builder) => builder,
            None => kept.insert(repository.treebuilder(None)?),
        };
        builder.insert(entry.name_bytes(), id, mode)?;
    }
    kept.map(|builder| builder.write()).transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::test_support;

    fn git(dir: &Path, args: &[&str]) -> String {
        String::from_utf8(test_support::git(dir, args))
            .unwrap()
            .trim()
            .to_owned()
    }

    /// The narrowed tree holds exactly the attribute files, at their paths, with their
    /// contents and modes; a commit without any gives the empty tree.
    #[test]
    fn the_narrowed_tree_holds_every_attribute_file_and_nothing_else() {
        let scratch = tempfile::tempdir().unwrap();
        let root = scratch.path();
        git(root, &["init", "-q", "-b", "main"]);
        std::fs::write(root.join("plain.txt"), "text\n").unwrap();
        git(root, &["add", "-A"]);
        git(root, &["commit", "-q", "-m", "none"]);
        let none = git(root, &["rev-parse", "HEAD"]);
        let files = [
            (".gitattributes", "*.bin binary\n"),
            ("a/b/c/.gitattributes", "*.txt -diff\n"),
            ("a/other.txt", "other\n"),
            ("z/.gitattributes", "* text=auto\n"),
        ];
        for (path, text) in files {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        std::os::unix::fs::symlink("../.gitattributes", root.join("a/.gitattributes")).unwrap();
        git(root, &["add", "-A"]);
        git(root, &["commit", "-q", "-m", "some"]);
        let some = git(root, &["rev-parse", "HEAD"]);
        let common_dir = root.join(".git");

        let empty = attributes_tree(&common_dir, &none).unwrap();
        let narrowed = attributes_tree(&common_dir, &some).unwrap();

        assert_eq!(
            empty,
            git(root, &["hash-object", "-t", "tree", "/dev/null"])
        );
        let listing = git(root, &["ls-tree", "-r", "--full-tree", &narrowed]);
        let original = git(root, &["ls-tree", "-r", "--full-tree", &some]);
        let expected: Vec<&str> = original
            .lines()
            .filter(|line| line.ends_with(".gitattributes"))
            .collect();
        assert_eq!(listing.lines().collect::<Vec<_>>(), expected);
        assert_eq!(expected.len(), 4, "{original}");
        assert!(listing.contains("120000"), "the symlink keeps its mode");
        let source = AttrSource::new(&some, &common_dir);
        assert_eq!(source.tree_ish(), narrowed);
        assert_eq!(source.clone().tree_ish(), narrowed, "clones share it");
        let broken = AttrSource::new("not a commit", &common_dir);
        assert_eq!(broken.tree_ish(), "not a commit", "falls back to the base");
    }

    /// A base whose folders nest deeper than the walk goes is its own attribute source.
    #[test]
    fn a_base_nested_too_deep_is_its_own_attribute_source() {
        let scratch = tempfile::tempdir().unwrap();
        let root = scratch.path();
        git(root, &["init", "-q", "-b", "main"]);
        let deep = root.join(vec!["a"; MAX_DEPTH + 2].join("/"));
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join(".gitattributes"), "* -diff\n").unwrap();
        git(root, &["add", "-A"]);
        git(root, &["commit", "-q", "-m", "deep"]);
        let commit = git(root, &["rev-parse", "HEAD"]);
        let common_dir = root.join(".git");

        assert!(attributes_tree(&common_dir, &commit).is_err());
        assert_eq!(AttrSource::new(&commit, &common_dir).tree_ish(), commit);
    }
}
