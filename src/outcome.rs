//! Mechanical outcomes of opcodes and planner statuses: the only keys `routes` may use.

use std::fmt;
use std::str::FromStr;

/// Every outcome an opcode can produce. Routing is `routes[outcome]` and nothing else.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The process or operation finished normally.
    Completed,
    /// The process failed, or a declared artifact was missing.
    Error,
    /// The wall-clock limit was reached.
    KilledTimeout,
    /// No progress was seen for the idle limit.
    KilledIdle,
    /// A policy ended the process (interactive prompt, budget, forbidden action).
    KilledPolicy,
    /// Planner status: the goal is met.
    Success,
    /// Planner status: progress, more work needed.
    Partial,
    /// Planner status: cannot proceed without outside change.
    Blocked,
    /// Planner status: the change is dangerous.
    Unsafe,
    /// Planner status: a human must decide.
    NeedsHuman,
    /// A blocking gate was approved.
    GateApproved,
    /// A blocking gate was rejected.
    GateRejected,
    /// A blocking gate passed its timeout.
    GateTimedOut,
    /// A non-blocking gate queued the work for review.
    GateQueued,
}

impl Outcome {
    /// Every outcome, in declaration order.
    pub const ALL: [Outcome; 14] = [
        Outcome::Completed,
        Outcome::Error,
        Outcome::KilledTimeout,
        Outcome::KilledIdle,
        Outcome::KilledPolicy,
        Outcome::Success,
        Outcome::Partial,
        Outcome::Blocked,
        Outcome::Unsafe,
        Outcome::NeedsHuman,
        Outcome::GateApproved,
        Outcome::GateRejected,
        Outcome::GateTimedOut,
        Outcome::GateQueued,
    ];

    /// The outcomes of a process-running opcode (RUN_AGENT, RUN_VALIDATION).
    pub const PROCESS: [Outcome; 5] = [
        Outcome::Completed,
        Outcome::Error,
        Outcome::KilledTimeout,
        Outcome::KilledIdle,
        Outcome::KilledPolicy,
    ];

    /// The planner statuses of EVALUATE.
    pub const PLANNER: [Outcome; 5] = [
        Outcome::Success,
        Outcome::Partial,
        Outcome::Blocked,
        Outcome::Unsafe,
        Outcome::NeedsHuman,
    ];

    /// The snake_case name used in workflow documents and artifacts.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Error => "error",
            Outcome::KilledTimeout => "killed_timeout",
            Outcome::KilledIdle => "killed_idle",
            Outcome::KilledPolicy => "killed_policy",
            Outcome::Success => "success",
            Outcome::Partial => "partial",
            Outcome::Blocked => "blocked",
            Outcome::Unsafe => "unsafe",
            Outcome::NeedsHuman => "needs_human",
            Outcome::GateApproved => "gate_approved",
            Outcome::GateRejected => "gate_rejected",
            Outcome::GateTimedOut => "gate_timed_out",
            Outcome::GateQueued => "gate_queued",
        }
    }

    /// Whether a bare `STOP` target reached through this outcome is a success stop.
    pub fn is_success_for_bare_stop(self) -> bool {
        matches!(
            self,
            Outcome::Completed | Outcome::Success | Outcome::GateApproved | Outcome::GateQueued
        )
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// The text was not the name of an outcome.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown outcome `{0}`")]
pub struct UnknownOutcome(pub String);

impl FromStr for Outcome {
    type Err = UnknownOutcome;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Outcome::ALL
            .into_iter()
            .find(|outcome| outcome.as_str() == text)
            .ok_or_else(|| UnknownOutcome(text.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_round_trips_through_its_name() {
        for outcome in Outcome::ALL {
            assert_eq!(outcome.as_str().parse::<Outcome>(), Ok(outcome));
            let json = serde_json::to_string(&outcome).unwrap();
            assert_eq!(json, format!("\"{}\"", outcome.as_str()));
        }
        assert!("finished".parse::<Outcome>().is_err());
    }
}
