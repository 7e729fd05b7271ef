//! A successful run's result as a commit: at a success STOP the worktree's files (the same
//! tree a snapshot records) become one commit on the work branch whose parent is the run's
//! base, written with the operator's git identity. The worktree's index is then that commit's
//! tree, so the worktree is clean on the branch's new tip.
//!
//! The commit names its run in a `Tnh-Run:` trailer: a process that died after writing it and
//! before recording it finds it on the branch and records it instead of committing again.

use std::path::Path;
use std::process::Command;

use serde::{Deserialize, Serialize};

use super::error::WorkspaceError;
use super::worktree::Workspace;

/// The identity a result commit is written with when git has none configured.
pub const FALLBACK_NAME: &str = "tnh-conductor";
/// Its e-mail.
pub const FALLBACK_EMAIL: &str = "tnh-conductor@localhost";

/// Who a commit is written by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CommitIdentity {
    /// The name.
    pub name: String,
    /// The e-mail address.
    pub email: String,
    /// Whether it is the repository's configured identity (`user.name`/`user.email`, or the
    /// `GIT_AUTHOR_*`/`GIT_COMMITTER_*` variables); otherwise it is the fallback
    /// `tnh-conductor <tnh-conductor@localhost>`.
    pub configured: bool,
}

impl CommitIdentity {
    /// The author (`who`: `GIT_AUTHOR_IDENT`) or committer (`GIT_COMMITTER_IDENT`) git would
    /// write in the repository at `repo_root`, else the fallback: a run that succeeded
    /// overnight is never lost for want of a configured name.
    pub fn of(repo_root: &Path, who: &str) -> Self {
        // The operator's own environment and configuration, not the fixed identity the
        // conductor's other git commands run with.
        let output = Command::new("git")
            .current_dir(repo_root)
            .args(["var", who])
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .env_remove("GIT_INDEX_FILE")
            .env("LC_MESSAGES", "C")
            .output();
        let parsed = output
            .ok()
            .filter(|output| output.status.success())
            .and_then(|output| parse_ident(&String::from_utf8_lossy(&output.stdout)));
        parsed.unwrap_or_else(|| Self {
            name: FALLBACK_NAME.to_owned(),
            email: FALLBACK_EMAIL.to_owned(),
            configured: false,
        })
    }

    pub(crate) fn signature(&self) -> Result<git2::Signature<'static>, git2::Error> {
        let time = git2::Time::new(unix_now(), 0);
        git2::Signature::new(&self.name, &self.email, &time)
    }
}

/// `Name <email> 1700000000 +0000` → name and e-mail.
fn parse_ident(line: &str) -> Option<CommitIdentity> {
    let line = line.trim();
    let open = line.rfind('<')?;
    let close = line[open..].find('>')? + open;
    let name = line[..open].trim();
    let email = line[open + 1..close].trim();
    (!name.is_empty() && !email.is_empty()).then(|| CommitIdentity {
        name: name.to_owned(),
        email: email.to_owned(),
        configured: true,
    })
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX)
        })
}

/// The commit a success STOP made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultCommit {
    /// The commit now at the work branch's tip.
    pub commit: String,
    /// Its tree: the worktree's files.
    pub tree: String,
    /// Its parent: the run's base.
    pub parent: String,
    /// Its author.
    pub author: CommitIdentity,
    /// It was on the branch already (written by a process that died before recording it).
    pub found: bool,
}

/// The trailer naming a commit's run.
pub fn run_trailer(run_id: &str) -> String {
    format!("Tnh-Run: {run_id}")
}

impl Workspace {
    /// Commits the worktree's files on the work branch (parent: the base), or finds the
    /// commit a process that died before recording it wrote. `None` when the worktree holds
    /// no change from the base: there is nothing to commit, and the branch stays.
    pub fn commit_result(&self, message: &str) -> Result<Option<ResultCommit>, WorkspaceError> {
        let git_error = |error: git2::Error| WorkspaceError::Git {
            command: "result commit (libgit2)".to_owned(),
            dir: self.path().to_owned(),
            stderr: error.message().to_owned(),
        };
        if let Some(found) = self.recorded_result().map_err(git_error)? {
            // The process that wrote it may have died before the worktree's index followed.
            self.worktree_tree()?;
            self.settle_on_result()?;
            return Ok(Some(found));
        }
        let tree = self.worktree_tree()?;
        let repository = git2::Repository::open(&self.common_dir).map_err(git_error)?;
        let base = repository
            .find_commit(git2::Oid::from_str(&self.record().base_sha).map_err(git_error)?)
            .map_err(git_error)?;
        if base.tree_id().to_string() == tree {
            return Ok(None);
        }
        let author = CommitIdentity::of(&self.record().repo_root, "GIT_AUTHOR_IDENT");
        let committer = CommitIdentity::of(&self.record().repo_root, "GIT_COMMITTER_IDENT");
        let tree_object = repository
            .find_tree(git2::Oid::from_str(&tree).map_err(git_error)?)
            .map_err(git_error)?;
        let commit = repository
            .commit(
                None,
                &author.signature().map_err(git_error)?,
                &committer.signature().map_err(git_error)?,
                message,
                &tree_object,
                &[&base],
            )
            .map_err(git_error)?;
        repository
            .reference(
                &self.branch_ref(),
                commit,
                true,
                "tnh: the run's result at its success STOP",
            )
            .map_err(git_error)?;
        self.settle_on_result()?;
        Ok(Some(ResultCommit {
            commit: commit.to_string(),
            tree,
            parent: base.id().to_string(),
            author,
            found: false,
        }))
    }

    /// Whether `head` is this run's result commit at the work branch's tip: the kernel's
    /// own commit, not drift, when a process died after writing it and before recording the
    /// run's end.
    pub fn is_result_commit(&self, head: &str) -> Result<bool, WorkspaceError> {
        let found = self
            .recorded_result()
            .map_err(|error| WorkspaceError::Git {
                command: "result commit (libgit2)".to_owned(),
                dir: self.path().to_owned(),
                stderr: error.message().to_owned(),
            })?;
        Ok(found.is_some_and(|found| found.commit == head))
    }

    /// The result commit at the branch's tip, when a process wrote it and died before it was
    /// recorded: its parent is the base and it names this run.
    fn recorded_result(&self) -> Result<Option<ResultCommit>, git2::Error> {
        let repository = git2::Repository::open(&self.common_dir)?;
        let Ok(reference) = repository.find_reference(&self.branch_ref()) else {
            return Ok(None);
        };
        let tip = reference.peel_to_commit()?;
        let trailer = run_trailer(self.run_id().as_str());
        let names_run = tip
            .message()
            .is_ok_and(|message| message.lines().any(|line| line.trim() == trailer));
        let on_base =
            tip.parent_count() == 1 && tip.parent_id(0)?.to_string() == self.record().base_sha;
        if !names_run || !on_base {
            return Ok(None);
        }
        let author = tip.author();
        Ok(Some(ResultCommit {
            commit: tip.id().to_string(),
            tree: tip.tree_id().to_string(),
            parent: self.record().base_sha.clone(),
            author: CommitIdentity {
                name: author.name().unwrap_or_default().to_owned(),
                email: author.email().unwrap_or_default().to_owned(),
                configured: author.email().ok() != Some(FALLBACK_EMAIL),
            },
            found: true,
        }))
    }

    /// Leaves the worktree clean on the new tip: its HEAD attached to the work branch and its
    /// index the scratch index just written from its files (the commit's tree).
    fn settle_on_result(&self) -> Result<(), WorkspaceError> {
        let head = self.worktree_git_dir.join("HEAD");
        let attached = format!("ref: {}\n", self.branch_ref());
        if std::fs::read_to_string(&head).ok().as_deref() != Some(attached.as_str()) {
            self.git
                .run(["symbolic-ref", "HEAD", self.branch_ref().as_str()])?;
        }
        self.index_from_scratch()
    }
}

/// The local branch a run's base names, for `land`'s default target: the operator's current
/// branch when the base is `HEAD`, the branch itself when the base names one, else `None` (a
/// tag, a commit, a detached HEAD).
pub fn base_branch(repo_root: &Path, base_ref: &str) -> Option<String> {
    let repository = git2::Repository::open(repo_root).ok()?;
    if base_ref == "HEAD" {
        let head = repository.find_reference("HEAD").ok()?;
        let target = head.symbolic_target().ok()??;
        return target.strip_prefix("refs/heads/").map(str::to_owned);
    }
    let name = base_ref.strip_prefix("refs/heads/").unwrap_or(base_ref);
    repository
        .find_reference(&format!("refs/heads/{name}"))
        .ok()
        .map(|_| name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::test_support::{committed_workspace, git, put};

    #[test]
    fn a_result_committed_before_a_crash_is_found_not_committed_again() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = committed_workspace(dir.path(), &[("a.txt", b"a\n")], "R1");
        assert_eq!(workspace.commit_result("wf: nothing\n").unwrap(), None);
        put(workspace.path(), "b.txt", b"b\n");
        let message = format!("wf: b\n\n{}\n", run_trailer("R1"));
        let first = workspace.commit_result(&message).unwrap().unwrap();
        assert!(!first.found);
        assert_eq!(first.parent, workspace.record().base_sha);
        let again = workspace.commit_result(&message).unwrap().unwrap();
        assert!(again.found);
        assert_eq!(again.commit, first.commit);
        assert!(workspace.is_result_commit(&first.commit).unwrap());
        let status = git(workspace.path(), &["status", "--porcelain"]);
        assert!(status.is_empty(), "{}", String::from_utf8_lossy(&status));
    }

    #[test]
    fn an_ident_line_gives_name_and_email() {
        let parsed = parse_ident("Ada Lovelace <ada@example.org> 1700000000 +0100\n").unwrap();
        assert_eq!(parsed.name, "Ada Lovelace");
        assert_eq!(parsed.email, "ada@example.org");
        assert!(parsed.configured);
    }

    #[test]
    fn an_ident_line_without_email_is_refused() {
        assert_eq!(parse_ident("nobody 1700000000 +0000"), None);
        assert_eq!(parse_ident(" <a@b> 1 +0000"), None);
    }
}
