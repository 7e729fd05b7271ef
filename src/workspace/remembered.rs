//! What the end of one step read, handed to the start of the next agent step when nothing ran
//! between.
//!
//! An agent or validation step ends by reading the worktree (its capture writes the
//! worktree's tree) and the operator's checkout (its guard's check runs `git status` there);
//! the next agent step starts by reading both again (its pre-step snapshot, its guard). When
//! the kernel runs nothing in between — one agent step after another, or after an EVALUATE
//! whose planner runs in-process — the second reading finds what the first found, at the cost
//! of three git processes. So the first is remembered, and the kernel forgets it
//! ([`Workspace::forget_capture`]) as anything else that may change the worktree or the
//! checkout starts: a validation or a rollback step, a planner process, a gate (which may wait
//! for the operator), and a new drive of the run (after a wait, an interruption, a crash).
//! Someone editing either in the milliseconds between two steps is seen by the next step's
//! capture or guard, as an edit made while that step's agent runs is. (A validation step
//! already compares its changes with the tree the last checkpoint recorded, without reading
//! the worktree first.)

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::operator_checkout::CheckoutState;
use super::worktree::Workspace;

/// What the last step read at its end, shared by the clones of a workspace.
#[derive(Debug, Clone, Default)]
pub(crate) struct Remembered(Arc<Mutex<Readings>>);

#[derive(Debug, Default)]
struct Readings {
    /// The worktree's tree, as the last agent step's capture wrote it.
    tree: Option<String>,
    /// The operator's checkout, as the last guard check read it.
    checkout: Option<CheckoutState>,
}

impl Workspace {
    /// Remembers `tree`, the worktree as a step's capture just recorded it, for the next
    /// agent step's pre-step snapshot.
    pub fn remember_capture(&self, tree: &str) {
        self.readings().tree = Some(tree.to_owned());
    }

    /// Forgets what the last step read at its end: the next step reads the worktree and the
    /// operator's checkout again.
    pub fn forget_capture(&self) {
        *self.readings() = Readings::default();
    }

    /// The remembered tree, taken (a snapshot uses it once).
    pub(crate) fn take_remembered_tree(&self) -> Option<String> {
        self.readings().tree.take()
    }

    /// Remembers the operator's checkout as a guard check just read it.
    pub(super) fn remember_checkout(&self, checkout: CheckoutState) {
        self.readings().checkout = Some(checkout);
    }

    /// The remembered checkout, taken (a guard uses it once).
    pub(super) fn take_remembered_checkout(&self) -> Option<CheckoutState> {
        self.readings().checkout.take()
    }

    fn readings(&self) -> MutexGuard<'_, Readings> {
        // A panic while the lock was held left each reading either as it was or as it was
        // set: both are readings this workspace made.
        self.remembered
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::committed_workspace;
    use super::*;

    #[test]
    fn a_reading_is_taken_once_and_forgotten_with_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = committed_workspace(dir.path(), &[("a.txt", b"a\n")], "r1");
        let clone = workspace.clone();

        workspace.remember_capture("tree-1");
        assert_eq!(clone.take_remembered_tree().as_deref(), Some("tree-1"));
        assert_eq!(workspace.take_remembered_tree(), None);

        workspace.remember_capture("tree-2");
        workspace.remember_checkout(CheckoutState::new());
        clone.forget_capture();
        assert_eq!(workspace.take_remembered_tree(), None);
        assert_eq!(workspace.take_remembered_checkout(), None);
    }
}
