//! The tree object of the scratch index: what a snapshot and a capture record.
//!
//! A git process costs about two milliseconds, most of a step's own time on a small worktree.
//! `git write-tree` of a small scratch index is done in-process with libgit2, which writes the
//! same tree object from the same entries. git is kept for a large index, which libgit2 reads
//! more slowly than git's own process takes, and whenever libgit2 cannot open the repository
//! or read the index (a reftable or SHA-256 repository, a split index).

use super::error::WorkspaceError;
use super::git::Git;
use super::worktree::Workspace;

/// The largest scratch index whose tree is written in-process: libgit2 reads every entry of
/// the index, and from a few thousand entries on, git's own process is faster.
const IN_PROCESS_INDEX_LIMIT: u64 = 256 * 1024;

impl Workspace {
    /// The tree object of the scratch index, which `scratch` (git bound to it) has just brought
    /// up to date with the worktree.
    pub(crate) fn write_scratch_tree(&self, scratch: &Git) -> Result<String, WorkspaceError> {
        match self.write_tree_in_process() {
            Some(tree) => Ok(tree),
            None => scratch.text(["write-tree"]),
        }
    }

    /// The scratch index's tree written by libgit2, or `None` when git must write it.
    fn write_tree_in_process(&self) -> Option<String> {
        let index_path = self.scratch_index();
        let size = std::fs::symlink_metadata(&index_path).ok()?.len();
        if size > IN_PROCESS_INDEX_LIMIT {
            return None;
        }
        // Read into memory and never written back: the scratch index stays as git wrote it.
        let mut index = git2::Index::open(&index_path).ok()?;
        // What git leaves out of a tree (an entry only intended to be added) or refuses to
        // write (a conflict) is left to git: `add --all` leaves neither behind, normally.
        let intended = git2::IndexEntryExtendedFlag::INTENT_TO_ADD.bits();
        if index.has_conflicts()
            || index
                .iter()
                .any(|entry| entry.flags_extended & intended != 0)
        {
            return None;
        }
        // The repository itself, never through the worktree's `.git` file an agent can rewrite.
        let tree = super::repositories::with_repository(&self.common_dir, |repository| {
            index.write_tree_to(repository)
        })
        .ok()?;
        Some(tree.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{committed_workspace, git, put};

    #[test]
    fn the_tree_written_in_process_is_the_tree_git_writes() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = committed_workspace(
            dir.path(),
            &[("a.txt", b"a\n"), ("src/b.rs", b"fn b() {}\n")],
            "r1",
        );
        put(workspace.path(), "src/new.rs", b"new\n");
        std::fs::remove_file(workspace.path().join("a.txt")).unwrap();
        let scratch = workspace.refresh_scratch_index().unwrap();

        let in_process = workspace
            .write_tree_in_process()
            .expect("libgit2 writes it");

        let by_git = scratch.git.text(["write-tree"]).unwrap();
        assert_eq!(in_process, by_git);
        let listing = git(
            workspace.path(),
            &["ls-tree", "-r", "--name-only", &in_process],
        );
        assert_eq!(
            String::from_utf8(listing).unwrap(),
            "src/b.rs\nsrc/new.rs\n"
        );
    }
}
