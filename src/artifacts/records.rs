//! Record types that several layers write into the run directory: the planner's status and
//! blockers, the diffstat of a change, and the names of files a visit's folder holds. They
//! live here, below the planner and the workspace that produce them, so that the artifact
//! schemas can name them; those modules re-export them at their usual places.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::outcome::Outcome;

/// The file a visit's guard state is saved in, in the visit's folder, while its agent runs.
pub const GUARD_STATE_FILE: &str = super::VisitDir::GUARD_STATE;

/// A blocker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Blocker {
    /// A stable code (`policy_violation`, `missing_artifact`, …).
    pub code: String,
    /// What blocks.
    pub summary: String,
    /// An artifact path or reference, if any.
    #[serde(default)]
    pub evidence_ref: Option<String>,
    /// `low`, `medium` or `high`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<String>,
}

/// A planner status: the five EVALUATE outcomes.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// All required checks satisfied.
    Success,
    /// Recoverable failures with a fix path.
    Partial,
    /// No safe forward action.
    Blocked,
    /// A human must decide.
    NeedsHuman,
    /// Untrusted state.
    Unsafe,
}

impl Status {
    /// The outcome EVALUATE routes on.
    pub fn outcome(self) -> Outcome {
        match self {
            Status::Success => Outcome::Success,
            Status::Partial => Outcome::Partial,
            Status::Blocked => Outcome::Blocked,
            Status::NeedsHuman => Outcome::NeedsHuman,
            Status::Unsafe => Outcome::Unsafe,
        }
    }

    /// The blocker severity a guard raise to this status carries.
    pub fn severity(self) -> &'static str {
        match self {
            Status::Success | Status::Partial => "low",
            Status::Blocked => "medium",
            Status::NeedsHuman | Status::Unsafe => "high",
        }
    }

    /// The snake_case name.
    pub fn name(self) -> &'static str {
        self.outcome().as_str()
    }
}

/// Totals of a change, for evidence summaries.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct DiffStat {
    /// Paths changed.
    pub files_changed: u64,
    /// Lines added.
    pub insertions: u64,
    /// Lines removed.
    pub deletions: u64,
    /// Binary files among the changed paths.
    pub binary_files: u64,
}

impl DiffStat {
    /// True when nothing changed.
    pub fn is_empty(&self) -> bool {
        self.files_changed == 0
    }
}

impl fmt::Display for DiffStat {
    /// One line: `3 files changed, +10 -2 (1 binary)`, or `no changes`.
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return formatter.write_str("no changes");
        }
        let plural = if self.files_changed == 1 { "" } else { "s" };
        write!(
            formatter,
            "{} file{plural} changed, +{} -{}",
            self.files_changed, self.insertions, self.deletions
        )?;
        if self.binary_files > 0 {
            write!(formatter, " ({} binary)", self.binary_files)?;
        }
        Ok(())
    }
}
