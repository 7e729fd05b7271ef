//! The workspace of a run: a managed git worktree on its own branch, snapshots of it, what
//! changed since a snapshot, rollback, and the guard around protected refs.
//!
//! This module is the only place that touches git. Every mutable step runs in the run's
//! worktree (`<repo>/.tnh/worktrees/<run_id>/`, branch `tnh/<workflow_id>/<run_id>`), never in
//! the operator's checkout, which this module never writes. Heavy operations use the git CLI
//! (argv only) because it is faster than libgit2 for checkouts and status; see
//! `docs/workspace.md` for the choice per operation and the benchmark against git itself.
//!
//! A step, as the kernel drives it:
//!
//! 1. `snapshot_pre_step(step, visit)` and `guard(&protected)` before the agent runs;
//! 2. `guard.verify()` after it (protected refs put back, commits and config edits reported);
//! 3. `capture_since(&snapshot, patch_file)` for `workspace_diff` and `workspace_status`;
//! 4. `policy::check` on the status and the guard report; `rollback(target)` when asked.

mod access;
mod attributes;
mod capture;
mod error;
mod git;
mod git_config;
mod guard;
mod index_file;
pub mod land;
pub(crate) mod operator_checkout;
mod remembered;
mod repositories;
mod result_commit;
pub mod retention;
mod rollback;
pub mod runs;
mod scratch_tree;
mod snapshot;
#[cfg(test)]
mod test_support;
mod worktree;

pub use capture::{
    Capture, ChangeKind, ChangedFile, DiffStat, WORKSPACE_STATUS_SCHEMA_VERSION, WorkspaceStatus,
    diffstat_of, workspace_status_schema,
};
pub use error::WorkspaceError;
pub use guard::Scope as GuardScope;
pub use guard::{
    ALWAYS_PROTECTED, BranchMove, Bytes, Checked, CheckoutEntry, CommittedChange, GIT_LINK,
    GUARD_STATE_FILE, GUARD_STATE_SCHEMA_VERSION, GuardReport, GuardState, GuardedFile, LeftForRun,
    RefChange, RefClass, RefGuard, RunActivity, SCRATCH_INDEX, SHARED_CHANGES_DIR, SharedChange,
};
pub use operator_checkout::FileIdentity;
pub use result_commit::{
    CommitIdentity, FALLBACK_EMAIL, FALLBACK_NAME, ResultCommit, base_branch, run_trailer,
};
pub use rollback::{
    InterruptedRollback, ROLLBACK_RECORD_SCHEMA_VERSION, RollbackRecord, RollbackStart,
    RollbackTarget, rollback_record_schema,
};
pub use snapshot::{Fingerprint, Snapshot, refs_prefix};
pub use worktree::{Workspace, WorkspaceRecord, work_branch_name};
