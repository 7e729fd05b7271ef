//! The kernel's durable state: everything needed to continue a run after a crash, written
//! atomically to `state.json` at every transition.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::artifacts::{ArtifactsError, RunDir, SCHEMA_VERSION, read_json};

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
    /// The operator ended it (`runs abandon`) while it waited at a gate or stood interrupted:
    /// nothing of it runs or can be decided any more.
    Abandoned,
}

impl End {
    /// The word used in records.
    pub fn name(self) -> &'static str {
        match self {
            End::Success => "success",
            End::Failure => "failure",
            End::Error => "error",
            End::Abandoned => "abandoned",
        }
    }
}

/// Safety facts the kernel carries between steps.
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
    /// Visits started per step (the number of the last one started).
    pub visits: BTreeMap<String, u32>,
    /// Visits per step that never finished: interrupted (Ctrl-C, SIGTERM, a crash) or unable
    /// to start (a missing program). They keep their numbers and evidence, but do not count
    /// toward `max_visits`: `resume` runs the step again.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub interrupted_visits: BTreeMap<String, u32>,
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
            interrupted_visits: BTreeMap::new(),
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

    /// Visits of a step that never finished (interrupted, or unable to start).
    pub fn interrupted_visits_of(&self, step_id: &str) -> u32 {
        self.interrupted_visits.get(step_id).copied().unwrap_or(0)
    }

    /// Records that a visit of a step never finished, so it does not count toward the step's
    /// `max_visits`.
    pub fn count_interrupted_visit(&mut self, step_id: &str) {
        *self
            .interrupted_visits
            .entry(step_id.to_owned())
            .or_insert(0) += 1;
    }
}

/// Why a run's recorded state cannot be used. Refused before anything of the run is written.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The file could not be read at all (gone, not a regular file, a permission).
    #[error(transparent)]
    Read(ArtifactsError),
    /// `state.json` holds no run state (truncated, edited, overwritten).
    #[error("`{}` is not a valid run state: {message}", path.display())]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What is wrong, with its line and column.
        message: String,
    },
    /// A file of the run was written by a newer release, whose fields this one does not know:
    /// continuing would drop them from the files it rewrites.
    #[error(
        "`{}` was written by a newer tnh-conductor: its `{field}` is {found}, and this release ({}) reads up to {supported}",
        path.display(),
        env!("CARGO_PKG_VERSION")
    )]
    Newer {
        /// The file.
        path: PathBuf,
        /// The version field (`schema_version`, `schema_versions.event`, …).
        field: String,
        /// The version it holds.
        found: u64,
        /// The newest version this release reads.
        supported: u32,
    },
}

impl StateError {
    /// Whether the run is left as it was (nothing was read into it or written): the files
    /// need the operator, not another try.
    pub fn is_usage(&self) -> bool {
        !matches!(self, StateError::Read(_))
    }

    /// What to do about it.
    pub fn hint(&self) -> Option<String> {
        match self {
            StateError::Read(error) => error.hint(),
            StateError::Damaged { path, .. } => Some(format!(
                "nothing was changed; put `{}` back (from a backup or a copy of the run \
                 directory) and try again, or start a new run; `tnh-conductor runs show RUN_ID` \
                 shows what the other files say",
                path.display()
            )),
            StateError::Newer { .. } => Some(
                "nothing was changed; use the newer tnh-conductor that wrote this run to resume, \
                 decide or roll it back (`tnh-conductor --version` says which release this is)"
                    .to_owned(),
            ),
        }
    }
}

/// `field` of a record, refused when it is newer than `supported`.
fn check_version(
    path: &Path,
    field: &str,
    value: Option<&serde_json::Value>,
) -> Result<(), StateError> {
    match value.and_then(serde_json::Value::as_u64) {
        Some(found) if found > u64::from(SCHEMA_VERSION) => Err(StateError::Newer {
            path: path.to_path_buf(),
            field: field.to_owned(),
            found,
            supported: SCHEMA_VERSION,
        }),
        _ => Ok(()),
    }
}

/// Reads `state.json`: a file a newer release wrote (a higher `schema_version`) is refused,
/// never read with its unknown fields dropped.
pub fn read_state(path: &Path) -> Result<RunState, StateError> {
    let damaged = |message: String| StateError::Damaged {
        path: path.to_path_buf(),
        message,
    };
    let value: serde_json::Value = read_json(path, "run state").map_err(|error| match error {
        ArtifactsError::Json { source, .. } => damaged(source.to_string()),
        other => StateError::Read(other),
    })?;
    check_version(path, "schema_version", value.get("schema_version"))?;
    serde_json::from_value(value).map_err(|error| damaged(error.to_string()))
}

/// Refuses a run whose `metadata.json` or `state.json` a newer release wrote (their
/// `schema_version`, or a version in the metadata's `schema_versions`, is higher than this
/// release's), before anything of the run is opened for writing. Files that cannot be read are
/// left to the readers that need them, which say what is wrong.
pub fn check_run_versions(run_dir: &RunDir) -> Result<(), StateError> {
    let metadata = run_dir.metadata();
    if let Ok(value) = read_json::<serde_json::Value>(&metadata, "run metadata") {
        check_version(&metadata, "schema_version", value.get("schema_version"))?;
        if let Some(versions) = value.get("schema_versions").and_then(|v| v.as_object()) {
            for (name, version) in versions {
                check_version(&metadata, &format!("schema_versions.{name}"), Some(version))?;
            }
        }
    }
    let state = run_dir.state();
    if state.is_file()
        && let Ok(value) = read_json::<serde_json::Value>(&state, "run state")
    {
        check_version(&state, "schema_version", value.get("schema_version"))?;
    }
    Ok(())
}
