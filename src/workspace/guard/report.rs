//! What a guard's check found: the report of what a step did to refs and repository
//! configuration, and the worktree's HEAD commit after it.

use serde::{Deserialize, Serialize};

use super::{BranchMove, LeftForRun, SharedChange};

/// What kind of ref an agent changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RefClass {
    /// A protected branch (`refs/heads/…`).
    ProtectedBranch,
    /// A tag: created, moved or deleted.
    Tag,
    /// The HEAD of the operator's checkout (`refs/heads/…` it names, or a detached commit);
    /// reported but not put back, since the checkout's files moved with it.
    OperatorHead,
    /// One of the run's own snapshot refs (`refs/tnh/runs/<run_id>/…`): an agent that moved
    /// `pre_run` to a commit holding its change would have a rollback keep that change.
    Snapshot,
    /// A replace ref (`refs/replace/…`, made by `git replace`): it makes every git command
    /// read another object in place of the one named, `main`'s commit included.
    Replace,
    /// A notes ref (`refs/notes/…`, made by `git notes`): notes are shown beside commits by
    /// `git log` and travel with a push of the notes ref, so an agent could attach "reviewed
    /// and approved" to `main`'s commit. Put back.
    Notes,
    /// `refs/stash`, which every worktree shares with the operator's checkout: an agent's
    /// `git stash drop` or `clear` would lose the operator's stashed work.
    Stash,
    /// A ref made a symbolic ref (or pointed elsewhere as one), such as the work branch made
    /// to name `refs/heads/main`: git writes through it, so the next update of that ref (a
    /// commit, a rollback's reset) would move the ref it names. Put back as a plain ref.
    SymbolicRef,
    /// A branch of the operator's that is not protected, moved or deleted (a new one is the
    /// agent's own): the operator's refs are never moved. Put back.
    OperatorBranch,
    /// A ref of another run — its snapshot refs (`refs/tnh/runs/<other>/…`) or its work
    /// branch (`refs/heads/tnh/<workflow>/<other>`) — moved, created or deleted while that
    /// run was not being driven: a later `rollback` or gate decision of that run would land
    /// on what the agent put there. Put back.
    OtherRun,
}

/// A protected ref that changed during a step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RefChange {
    /// The full ref name (`refs/heads/main`, `refs/tags/v1`, `HEAD`).
    pub refname: String,
    /// Which kind of ref.
    pub class: RefClass,
    /// Value before the step (`null`: did not exist).
    pub before: Option<String>,
    /// Value after the step (`null`: deleted).
    pub after: Option<String>,
    /// Whether it was put back to `before`.
    pub restored: bool,
}

/// What a step did to refs and repository configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GuardReport {
    /// Protected branches and tags that changed (restored) and the operator's HEAD (reported).
    pub ref_changes: Vec<RefChange>,
    /// Commits the step created (on the work branch or wherever it moved HEAD).
    pub commits: u64,
    /// The work branch's tip before and after the step, when the step moved it (a commit, a
    /// reset, a merge): what the branch carries out of the run changed, so the paths those
    /// commits changed are judged by the policy too
    /// ([`Workspace::committed_changes`]). Absent when the branch did not move.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_branch_moved: Option<BranchMove>,
    /// The worktree's HEAD had left the work branch (or the branch was deleted) and was
    /// re-attached (the branch recreated where it was before the step).
    pub worktree_head_restored: bool,
    /// The agent had taken the owner's access to the worktree folder itself away
    /// (`chmod 000 .`); it was given back so the step could be checked.
    #[serde(default)]
    pub worktree_access_restored: bool,
    /// The worktree folder was gone after the step (`rm -rf` of it): the work branch was
    /// checked out there again, so the step could be checked; what it held uncommitted is
    /// lost.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub worktree_recreated: bool,
    /// Lock files an agent killed inside a git command left in the worktree's git folder or
    /// on the work branch, removed so that git works in the next step.
    #[serde(default)]
    pub stale_locks_removed: Vec<String>,
    /// Remote-tracking refs that moved: evidence of a push or fetch.
    pub remote_refs_changed: Vec<String>,
    /// Refs of other runs that changed while those runs were driven (their lock held, or
    /// taken, during the step): their own work, so not put back, but listed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_runs_refs_changed: Vec<String>,
    /// Protected branches, tags and branches of the operator's moved during the step to a
    /// commit of another run driven meanwhile (or away from one): that run's agent moved them,
    /// so they are left for that run's guard, which puts them back and charges that run. Not
    /// put back here, not a violation of this run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_for_other_runs: Vec<LeftForRun>,
    /// Git configuration files that changed and were restored: under `.git` (`config`,
    /// `hooks/pre-commit`, …), the worktree's `.git` file, and the operator's global and
    /// system configuration with the files it names (full paths, e.g. `/home/me/.gitconfig`).
    pub git_config_changed: Vec<String>,
    /// Git configuration files (as `git_config_changed` names them) that changed during the
    /// step and that the guard of another run, whose step ended first, found and put back
    /// before this run's guard looked: this run's agent may have changed them as well as any
    /// other run driven meanwhile, so this run answers for them too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub git_config_put_back_by_other_runs: Vec<SharedChange>,
    /// The other runs driven while the step ran (their lock held, or taken, meanwhile): their
    /// agents could have made the changes this report lists of what runs share (git
    /// configuration, the operator's checkout), and written into this run's worktree, where
    /// it looks like this run's work. Not a finding by itself.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_runs_driven: Vec<String>,
    /// Files of the operator's checkout (relative to the repository root) that were changed,
    /// created or deleted while the step ran: the agent wrote outside its worktree, or the
    /// operator edited the checkout meanwhile. Not put back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operator_checkout_changed: Vec<String>,
}

impl GuardReport {
    /// Records that the change of `refname` was left for run `run_id`.
    pub(super) fn left_for(
        &mut self,
        refname: &str,
        run_id: String,
        before: Option<&String>,
        after: Option<&String>,
    ) {
        self.left_for_other_runs.push(LeftForRun {
            refname: refname.to_owned(),
            run_id,
            before: before.cloned(),
            after: after.cloned(),
        });
    }

    /// True when the step touched nothing guarded (the runs driven beside it are no
    /// finding).
    pub fn is_clean(&self) -> bool {
        GuardReport {
            other_runs_driven: Vec::new(),
            ..self.clone()
        } == GuardReport::default()
    }
}

/// What [`RefGuard::check`](super::RefGuard::check) found: the report, and the worktree's HEAD commit afterwards
/// (attached to the work branch again), which a checkpoint taken before anything else runs
/// reuses as its fingerprint's head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// What the step did to refs and repository configuration.
    pub report: GuardReport,
    /// The worktree's HEAD commit once the check put it back on the work branch.
    pub head: String,
}
