//! What a guard's check covers. After a step it compares and puts back everything
//! ([`Scope::Everything`]). On `resume` of a visit whose process died, the repository-wide
//! part (protected and operator branches, tags, stash, notes and replace refs, other runs'
//! refs, git configuration files) may have been changed by the agent before it was killed or
//! by the operator since, which the guard cannot tell apart: [`RefGuard::compare`] lists
//! those changes without writing anything, so the operator can decide, and
//! [`Scope::RunOwn`] checks the rest (the run's own snapshot refs, work branch and worktree)
//! as usual while leaving them alone.

use super::{GuardReport, RefGuard, refs_prefix};
use crate::workspace::error::WorkspaceError;

/// Which changes a guard's check compares and puts back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scope {
    /// Everything the guard recorded: what a step's check does.
    #[default]
    Everything,
    /// Only the run's own refs (its snapshot refs, its work branch), its worktree's git files
    /// and its worktree: repository-wide refs and git configuration are neither compared nor
    /// put back (the operator kept them as theirs).
    RunOwn,
    /// Only repository-wide refs and git configuration, compared and reported
    /// (`restored: false`), never written: see [`RefGuard::compare`].
    Repository,
}

impl Scope {
    /// Whether a change to a ref or file (`own`: the run's) is looked at — `None` when not —
    /// and then whether it is put back.
    pub(super) fn of_ref(self, own: bool) -> Option<bool> {
        match (self, own) {
            (Scope::Everything, _) => Some(true),
            (Scope::RunOwn, true) => Some(true),
            (Scope::Repository, false) => Some(false),
            (Scope::RunOwn, false) | (Scope::Repository, true) => None,
        }
    }
}

impl RefGuard {
    /// The guard with its check limited to `scope`.
    pub fn with_scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    /// The repository-wide refs and git configuration files that changed since the guard
    /// recorded them — what [`check`](Self::check) would put back outside the run's own refs
    /// and worktree — compared without writing anything (every change `restored: false`).
    pub fn compare(&self) -> Result<GuardReport, WorkspaceError> {
        let guard = self.clone().with_scope(Scope::Repository);
        let mut report = GuardReport::default();
        // What would hang git (a FIFO in the place of `.git/config`) goes even so.
        let watched = guard.watched_paths()?;
        // Notices of other runs' guards are neither read nor written: nothing is charged or
        // put back.
        let mut shared = super::shared::Shared::new(&guard, false);
        guard.clear_special_files(&watched, &mut report, &shared)?;
        let (listing, packed_now) = guard.list_refs()?;
        let (mut guarded, others) = guard.split(listing.values.clone());
        let (others_before, others) = guard.settle(others, &packed_now);
        let beside = super::beside::Beside::new(&guard, &listing);
        let stash_log = guard.compare_stash(&guarded, &beside, &mut report)?;
        if stash_log.is_some() {
            match guard.refs.get(super::STASH) {
                Some(before) => guarded.insert(super::STASH.to_owned(), before.clone()),
                None => guarded.remove(super::STASH),
            };
        }
        guard.compare_refs(&guarded, &beside, &mut report)?;
        guard.compare_other_refs(&others_before, &others, &mut report)?;
        guard.compare_branches_and_other_runs(&others_before, &others, &beside, &mut report)?;
        let stash_log = stash_log.map(|contents| (guard.stash_log(), contents));
        guard.restore_files(&watched, &mut report, stash_log, &mut shared)?;
        // Moved remote-tracking refs are evidence, never put back.
        report.remote_refs_changed.clear();
        Ok(report)
    }

    /// Whether a ref is the run's own: its work branch or one of its snapshot refs.
    pub(super) fn is_own_ref(&self, name: &str) -> bool {
        name == self.workspace.branch_ref()
            || name
                .strip_prefix(refs_prefix(self.workspace.run_id()).as_str())
                .is_some_and(|rest| rest.starts_with('/'))
    }
}
