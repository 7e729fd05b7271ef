//! The kernel's durable state: everything needed to continue a run after a crash, written
//! atomically to `state.json` at every transition.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where the run is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum Phase {
    /// The next thing to do is to start this visit of this step.
    Ready {
        /// The step.
        step_id: String,
        /// The visit about to start.
        visit: u32,
    },
    /// This visit started and has not been recorded as finished: a crash here means the step
    /// was interrupted.
    Running {
        /// The step.
        step_id: String,
        /// The visit in flight.
        visit: u32,
    },
    /// A blocking gate waits for a human.
    Waiting {
        /// The gate step.
        step_id: String,
        /// Its visit.
        visit: u32,
    },
    /// The run ended.
    Finished {
        /// How.
        end: End,
        /// The last step.
        step_id: String,
        /// Why.
        reason: String,
    },
}

/// How a finished run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum End {
    /// A success STOP: exit 0.
    Success,
    /// A failure STOP: exit 1.
    Failure,
    /// A runtime error: exit 4.
    Error,
}

impl End {
    /// The word used in records.
    pub fn name(self) -> &'static str {
        match self {
            End::Success => "success",
            End::Failure => "failure",
            End::Error => "error",
        }
    }
}

/// Safety facts the kernel carries between steps (DESIGN §4).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Safety {
    /// A step's diff broke the policy and no ROLLBACK has removed it since: every EVALUATE
    /// returns `unsafe` (rule 1).
    pub policy_violation: Option<String>,
    /// Whether a `pre_step` rollback would undo the pending violation: its snapshot (taken
    /// before the most recent RUN_AGENT) is not newer than the violating visit. An agent step
    /// that ran after the violation moves the `pre_step` snapshot past it; then only a
    /// `pre_run` rollback clears it.
    #[serde(default = "yes")]
    pub pre_step_undoes_violation: bool,
    /// A harness report proposed goldens and no blocking GATE was approved since: the run
    /// cannot reach a success STOP (rule 2). Holds the step that reported them.
    pub goldens_pending: Option<String>,
}

fn yes() -> bool {
    true
}

/// `state.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunState {
    /// The format's version.
    pub schema_version: u32,
    /// The run.
    pub run_id: String,
    /// The workflow.
    pub workflow_id: String,
    /// Where the run is.
    pub phase: Phase,
    /// Visits started per step.
    pub visits: BTreeMap<String, u32>,
    /// Routes taken so far.
    pub transitions: u32,
    /// The last outcome or status of each step.
    pub last_outcomes: BTreeMap<String, String>,
    /// Safety facts.
    pub safety: Safety,
    /// Cost reported by agents so far, in US dollars.
    pub spent_usd: f64,
    /// The last event this state accounts for.
    pub events_seq: u64,
    /// The worktree as the last mutable step left it (checked for drift on resume).
    #[serde(default)]
    pub fingerprint: Option<crate::workspace::Fingerprint>,
}

impl RunState {
    /// The state of a run about to start at `entry_step`.
    pub fn new(run_id: &str, workflow_id: &str, entry_step: &str) -> Self {
        Self {
            schema_version: crate::artifacts::SCHEMA_VERSION,
            run_id: run_id.to_owned(),
            workflow_id: workflow_id.to_owned(),
            phase: Phase::Ready {
                step_id: entry_step.to_owned(),
                visit: 1,
            },
            visits: BTreeMap::new(),
            transitions: 0,
            last_outcomes: BTreeMap::new(),
            safety: Safety::default(),
            spent_usd: 0.0,
            events_seq: 0,
            fingerprint: None,
        }
    }

    /// Visits started of a step.
    pub fn visits_of(&self, step_id: &str) -> u32 {
        self.visits.get(step_id).copied().unwrap_or(0)
    }
}
