//! The `policy_summary` artifact: the policy as requested, the policy as enforced, what is only
//! advisory, and the violations found. The kernel saves it for every mutable step so a
//! reviewer can see why a step was (or was not) marked unsafe.

use serde::{Deserialize, Serialize};

use super::check::{Policy, Violation};
use super::spec::{Operation, PolicySpec};
use crate::workspace::GuardReport;

/// Version of the `policy_summary` format.
pub const POLICY_SUMMARY_SCHEMA_VERSION: u32 = 1;

/// Rules enforced whatever a policy says.
pub const IMPLICIT_RULES: [&str; 4] = [
    "path_escape: absolute paths, `..` escapes and symlinks pointing outside the worktree",
    "protected_branches: main, master, configured branches and the operator's branch never move",
    "protected_tags: tags are never created, moved or deleted",
    "git_config: .git/config, .git/info, .git/hooks, the worktree's .git file and the operator's global git configuration are restored after every step",
];

/// The policy that was actually enforced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EffectivePolicy {
    /// Normalised `allowed_paths` globs (empty: any path).
    pub allowed_paths: Vec<String>,
    /// Normalised `forbidden_paths` globs.
    pub forbidden_paths: Vec<String>,
    /// Operation ids checked mechanically.
    pub enforced_operations: Vec<Operation>,
    /// Rules that hold for every policy.
    pub implicit_rules: Vec<String>,
    /// Whether a per-file `check` hook ran.
    pub check_hook: bool,
}

/// Whether the step's changes passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// No violation.
    Clean,
    /// At least one violation: the kernel marks the run unsafe until a rollback.
    Violation,
}

/// The `policy_summary` artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PolicySummary {
    /// Format version.
    pub schema_version: u32,
    /// The policy as the workflow requested it.
    pub requested: PolicySpec,
    /// The policy as enforced.
    pub effective: EffectivePolicy,
    /// `forbidden_operations` entries that are instructions to the agent, not checked.
    pub advisory: Vec<String>,
    /// How many changed paths were checked.
    pub checked_paths: usize,
    /// `clean` or `violation`.
    pub verdict: Verdict,
    /// Every violation.
    pub violations: Vec<Violation>,
    /// What the step did to refs and git configuration, as the guard found (and undid) it,
    /// whether or not the policy forbids it: commits, moved refs, changed configuration.
    #[serde(default)]
    pub guard_report: GuardReport,
}

impl PolicySummary {
    /// The summary of checking `checked_paths` changed paths against `policy`.
    pub fn new(
        policy: &Policy,
        checked_paths: usize,
        check_hook: bool,
        violations: Vec<Violation>,
    ) -> Self {
        let verdict = if violations.is_empty() {
            Verdict::Clean
        } else {
            Verdict::Violation
        };
        Self {
            schema_version: POLICY_SUMMARY_SCHEMA_VERSION,
            requested: policy.requested().clone(),
            effective: EffectivePolicy {
                allowed_paths: policy.allowed_paths().to_vec(),
                forbidden_paths: policy.forbidden_paths().to_vec(),
                enforced_operations: policy.enforced_operations().collect(),
                implicit_rules: IMPLICIT_RULES
                    .iter()
                    .map(|rule| (*rule).to_owned())
                    .collect(),
                check_hook,
            },
            advisory: policy.advisory().to_vec(),
            checked_paths,
            verdict,
            violations,
            guard_report: GuardReport::default(),
        }
    }

    /// The same summary recording what the guard found around the step.
    pub fn with_guard_report(mut self, guard_report: GuardReport) -> Self {
        self.guard_report = guard_report;
        self
    }
}

/// The JSON Schema of `policy_summary`.
pub fn policy_summary_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(PolicySummary)).unwrap_or_default()
}
