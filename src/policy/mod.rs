//! Policy: post-hoc checks of a step's changes.
//!
//! A policy is English for the agent and code for the kernel: `allowed_paths` and
//! `forbidden_paths` globs and the machine-checkable `forbidden_operations` ids are enforced
//! here on the workspace status and the ref guard's report; any other entry is advisory text.
//! A violation makes the kernel mark the run unsafe; no planner can override it.
//!
//! ```text
//! let policy = Policy::compile(&spec)?;
//! let violations = policy.check(&status, &guard_report, hook);
//! let summary = PolicySummary::new(&policy, status.files.len(), hook.is_some(), violations);
//! ```

mod check;
mod error;
mod folder;
mod normalize;
mod spec;
mod summary;
pub mod tool_caches;

pub use check::{CheckHook, Policy, Violation, ViolationClass};
pub use error::PolicyError;
pub use normalize::{
    LinkLookup, MAX_SYMLINK_HOPS, PathEscape, SymlinkEscape, lookup_on_disk, normalize_path,
    resolve_symlink, symlink_escapes,
};
pub use spec::{CI_PATHS, LOCKFILES, Operation, PolicySpec};
pub use summary::{
    EffectivePolicy, IMPLICIT_RULES, POLICY_SUMMARY_SCHEMA_VERSION, PolicySummary, Verdict,
    policy_summary_schema,
};
