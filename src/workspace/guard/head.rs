//! The worktree's HEAD and the operator's: read from their files, the worktree's attached to
//! the work branch again, the operator's reported when it moved.

use std::collections::BTreeMap;

use super::super::error::WorkspaceError;
use super::super::worktree::Workspace;
use super::{GuardReport, RefChange, RefClass, RefGuard, SYMREF, read_optional};

/// Where the worktree's HEAD points, as its `HEAD` file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::workspace) enum Head {
    /// `ref: <name>`.
    Attached(String),
    /// A commit id.
    Detached(String),
    /// Not readable as a file (a reftable repository, or something unexpected): ask git.
    Unknown,
}

impl Head {
    /// What a `HEAD` file of the files ref backend says: `ref: NAME`, a commit id, or
    /// something else (`Unknown`).
    pub(super) fn parse(text: &str) -> Head {
        let text = text.trim();
        if let Some(name) = text.strip_prefix(SYMREF) {
            return Head::Attached(name.to_owned());
        }
        let is_commit_id =
            matches!(text.len(), 40 | 64) && text.bytes().all(|byte| byte.is_ascii_hexdigit());
        if is_commit_id {
            Head::Detached(text.to_owned())
        } else {
            Head::Unknown
        }
    }
}

/// The commit `head` points at, from a listing of refs; `None` when only git can say (or the
/// branch it names does not exist).
pub(super) fn head_commit(head: &Head, listing: &BTreeMap<String, String>) -> Option<String> {
    match head {
        // A branch's listed object is its commit; anything else may need peeling.
        Head::Attached(name) if name.starts_with("refs/heads/") => listing.get(name).cloned(),
        Head::Detached(commit) => Some(commit.clone()),
        Head::Attached(_) | Head::Unknown => None,
    }
}

impl Workspace {
    /// Attaches the worktree's HEAD to the work branch. Written directly where git keeps it as
    /// a file: a HEAD the agent garbled makes git refuse to run in the worktree at all.
    pub(in crate::workspace) fn attach_head(&self) -> Result<(), WorkspaceError> {
        let branch_ref = self.branch_ref();
        if self.common_dir.join("reftable").exists() {
            return self.git.run(["symbolic-ref", "HEAD", branch_ref.as_str()]);
        }
        // Replaced in one rename, as git does: a git command reading HEAD meanwhile (the line
        // count a rollback runs beside its reset) must never find it empty.
        let head = self.worktree_git_dir.join("HEAD");
        let temporary = self.worktree_git_dir.join("HEAD.tnh-new");
        std::fs::write(&temporary, format!("ref: {branch_ref}\n"))
            .map_err(|source| WorkspaceError::io("write", &temporary, source))?;
        std::fs::rename(&temporary, &head)
            .map_err(|source| WorkspaceError::io("replace", &head, source))
    }

    /// Makes the work branch a plain ref again if the agent made it a symbolic ref (naming
    /// `main`, say), pointing at `commit`: a reset on the work branch would otherwise move
    /// the ref it names. True when it had to.
    pub(in crate::workspace) fn unlink_work_branch(
        &self,
        commit: &str,
    ) -> Result<bool, WorkspaceError> {
        let branch_ref = self.branch_ref();
        let symbolic = if self.common_dir.join("reftable").exists() {
            self.repo_git
                .succeeds(["symbolic-ref", "--quiet", branch_ref.as_str()])?
        } else {
            read_optional(&self.common_dir.join(&branch_ref))?
                .is_some_and(|bytes| bytes.starts_with(SYMREF.as_bytes()))
        };
        if symbolic {
            self.repo_git
                .run(["update-ref", "--no-deref", branch_ref.as_str(), commit])?;
        }
        Ok(symbolic)
    }

    /// The worktree's `HEAD` file, as git writes it for the files ref backend. A repository
    /// with another backend (reftable) keeps a placeholder there, so its HEAD is `Unknown`.
    pub(in crate::workspace) fn read_head(&self) -> Head {
        if self.common_dir.join("reftable").exists() {
            return Head::Unknown;
        }
        let path = self.worktree_git_dir.join("HEAD");
        let text = match crate::artifacts::safe_files::read_regular(&path, 4096) {
            Ok((bytes, _)) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(error) => {
                // A FIFO (or a link, a folder) an agent put there would hang every git
                // command in the worktree: it goes, and the worktree's HEAD is found missing
                // and attached to the work branch again.
                if error.kind() == std::io::ErrorKind::InvalidInput {
                    let _ = std::fs::remove_file(&path);
                }
                return Head::Unknown;
            }
        };
        Head::parse(&text)
    }

    /// True when the worktree's HEAD is attached to the work branch.
    pub(in crate::workspace) fn head_on_work_branch(&self, head: &Head) -> bool {
        let branch_ref = self.branch_ref();
        match head {
            Head::Unknown => self
                .git
                .text(["symbolic-ref", "--quiet", "HEAD"])
                .is_ok_and(|current| current == branch_ref),
            Head::Attached(name) => *name == branch_ref,
            Head::Detached(_) => false,
        }
    }
}

impl RefGuard {
    pub(super) fn check_operator_head(
        &self,
        report: &mut GuardReport,
    ) -> Result<(), WorkspaceError> {
        let path = self.workspace.common_dir.join("HEAD");
        let now = read_optional(&path)?;
        if now == self.operator_head {
            return Ok(());
        }
        let text = |value: &Option<Vec<u8>>| {
            value
                .as_deref()
                .map(|bytes| String::from_utf8_lossy(bytes).trim().to_owned())
        };
        // Reported, not restored: whoever moved it also changed the checkout's files, and
        // putting HEAD back under them would leave the operator's checkout inconsistent.
        report.ref_changes.push(RefChange {
            refname: "HEAD".to_owned(),
            class: RefClass::OperatorHead,
            before: text(&self.operator_head),
            after: text(&now),
            restored: false,
        });
        Ok(())
    }

    pub(super) fn reattach_worktree_head(
        &self,
        attached: bool,
        branch_exists: bool,
        report: &mut GuardReport,
    ) -> Result<(), WorkspaceError> {
        let branch_ref = self.workspace.branch_ref();
        if !branch_exists {
            // Without its branch the run could be neither resumed nor rolled back: recreate it
            // where HEAD was before the step.
            self.workspace.repo_git.run([
                "update-ref",
                "--no-deref",
                branch_ref.as_str(),
                self.worktree_head.as_str(),
            ])?;
            report.worktree_head_restored = true;
        }
        if !attached {
            self.workspace.attach_head()?;
            report.worktree_head_restored = true;
        }
        Ok(())
    }
}
