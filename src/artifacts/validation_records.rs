//! `validation_report.json`: each validator of a RUN_VALIDATION visit by id — how it ran, or
//! (status `not_configured`) why the step could not start.
//!
//! The two shapes of the report, and the shapes of one validator's entry, are told apart by
//! their keys (a report that ran has an `outcome`, a refused one a `status`; a validator that
//! ran has its `argv`). Readers are tolerant of other keys an older release did not write; the
//! published schema says what this release writes, every key of it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::outcome::Outcome;

/// `validation_report.json`: each validator of a RUN_VALIDATION visit by id — how it ran, or
/// (status `not_configured`) why the step could not start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum ValidationReport {
    /// The validators ran (or some could not be started).
    Ran(RanValidation),
    /// A validator is neither configured nor detectable: none ran.
    NotConfigured(UnconfiguredValidation),
}

/// The report of a RUN_VALIDATION visit whose validators ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RanValidation {
    /// The version of this format.
    #[serde(default)]
    pub schema_version: u32,
    /// The step's outcome: a kill wins over an error, an error over completion.
    pub outcome: ValidationOutcome,
    /// Each validator's record, by id.
    #[serde(default)]
    pub validators: BTreeMap<String, ValidatorRecord>,
}

/// The report of a RUN_VALIDATION visit refused before any validator ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct UnconfiguredValidation {
    /// The version of this format.
    #[serde(default)]
    pub schema_version: u32,
    /// Always `not_configured`.
    pub status: NotConfigured,
    /// Each validator of the step, by id: why it was not run.
    #[serde(default)]
    pub validators: BTreeMap<String, UnresolvedValidator>,
}

/// The status of a refused validation report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NotConfigured {
    /// A validator of the step is neither configured nor detectable.
    NotConfigured,
}

/// A validator of a refused step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct UnresolvedValidator {
    /// `not_configured` for a validator that cannot be resolved, `not_run` for the others.
    pub status: UnresolvedStatus,
    /// Why, with what to do.
    #[serde(default)]
    pub cause: String,
    /// Always `null`: it did not run.
    #[serde(default)]
    pub exit_code: (),
}

/// Why a validator of a refused step was not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum UnresolvedStatus {
    /// Neither configured nor detectable.
    NotConfigured,
    /// Another validator of the step is not configured.
    NotRun,
}

/// The mechanical outcomes a validator (or a RUN_VALIDATION step) ends with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ValidationOutcome {
    /// It exited 0 and left what it declared.
    Completed,
    /// It failed, could not run, or lacked a declared artifact.
    Error,
    /// Its wall-clock limit was reached.
    KilledTimeout,
    /// It made no progress for its idle limit.
    KilledIdle,
    /// A policy ended it.
    KilledPolicy,
}

impl ValidationOutcome {
    /// The outcome of a process as the report records it; an outcome no process ends with
    /// (a planner's or a gate's) is an error.
    pub fn of(outcome: Outcome) -> Self {
        match outcome {
            Outcome::Completed => ValidationOutcome::Completed,
            Outcome::KilledTimeout => ValidationOutcome::KilledTimeout,
            Outcome::KilledIdle => ValidationOutcome::KilledIdle,
            Outcome::KilledPolicy => ValidationOutcome::KilledPolicy,
            _ => ValidationOutcome::Error,
        }
    }

    /// The outcome the kernel routes on.
    pub fn outcome(self) -> Outcome {
        match self {
            ValidationOutcome::Completed => Outcome::Completed,
            ValidationOutcome::Error => Outcome::Error,
            ValidationOutcome::KilledTimeout => Outcome::KilledTimeout,
            ValidationOutcome::KilledIdle => Outcome::KilledIdle,
            ValidationOutcome::KilledPolicy => Outcome::KilledPolicy,
        }
    }
}

/// One validator's entry in a report that ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum ValidatorRecord {
    /// It ran.
    Ran(Box<ValidatorRun>),
    /// It could not be started (or one before it could not).
    NotStarted(ValidatorNotStarted),
}

impl ValidatorRecord {
    /// Its outcome.
    pub fn outcome(&self) -> ValidationOutcome {
        match self {
            ValidatorRecord::Ran(run) => run.outcome,
            ValidatorRecord::NotStarted(record) => record.outcome,
        }
    }

    /// Why it ended as it did.
    pub fn cause(&self) -> &str {
        match self {
            ValidatorRecord::Ran(run) => &run.cause,
            ValidatorRecord::NotStarted(record) => &record.cause,
        }
    }

    /// Its exit code, when it exited.
    pub fn exit_code(&self) -> Option<i32> {
        match self {
            ValidatorRecord::Ran(run) => run.exit_code,
            ValidatorRecord::NotStarted(_) => None,
        }
    }

    /// The signal that ended it, when one did.
    pub fn signal(&self) -> Option<i32> {
        match self {
            ValidatorRecord::Ran(run) => run.signal,
            ValidatorRecord::NotStarted(_) => None,
        }
    }

    /// How it reached the network (`not run` when it did not run).
    pub fn network(&self) -> &str {
        match self {
            ValidatorRecord::Ran(run) => &run.network,
            ValidatorRecord::NotStarted(_) => NOT_RUN,
        }
    }

    /// The declared artifacts it did not leave.
    pub fn missing_artifacts(&self) -> &[String] {
        match self {
            ValidatorRecord::Ran(run) => &run.missing_artifacts,
            ValidatorRecord::NotStarted(_) => &[],
        }
    }
}

/// The `network` of a validator that did not run.
const NOT_RUN: &str = "not run";

/// How one validator ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ValidatorRun {
    /// Its command line.
    pub argv: Vec<String>,
    /// Where it ran.
    #[serde(default)]
    pub cwd: String,
    /// Detected from the worktree rather than configured.
    #[serde(default)]
    pub detected: bool,
    /// How it ended.
    pub outcome: ValidationOutcome,
    /// Why it ended as it did.
    #[serde(default)]
    pub cause: String,
    /// Its exit code, when it exited.
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    #[serde(default)]
    pub signal: Option<i32>,
    /// How long it ran.
    #[serde(default)]
    pub duration_ms: u64,
    /// Its wall-clock limit, when it had one.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// The declared artifacts collected, relative to its working directory.
    #[serde(default)]
    pub artifacts: Vec<String>,
    /// The declared artifacts it did not leave.
    #[serde(default)]
    pub missing_artifacts: Vec<String>,
    /// Patterns and files refused because they leave the worktree.
    #[serde(default)]
    pub refused_artifacts: Vec<NotedPath>,
    /// Files left out by the size caps.
    #[serde(default)]
    pub skipped_artifacts: Vec<NotedPath>,
    /// Its harness report, when it left one.
    #[serde(default)]
    pub harness_report: Option<String>,
    /// Whether its harness report proposed new golden files.
    #[serde(default)]
    pub proposed_goldens: bool,
    /// How it reached the network.
    #[serde(default)]
    pub network: String,
    /// The host variables left out of its environment.
    #[serde(default)]
    pub dropped_env: Vec<String>,
}

/// A path left out of what a validator left, with why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct NotedPath {
    /// The pattern or file.
    pub path: String,
    /// Why it was left out.
    pub reason: String,
}

/// A validator that could not be started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ValidatorNotStarted {
    /// How it is counted (an error).
    pub outcome: ValidationOutcome,
    /// Why it was not started.
    #[serde(default)]
    pub cause: String,
    /// Always `null`: it did not run.
    #[serde(default)]
    pub exit_code: (),
    /// Always `not run`.
    #[serde(default)]
    pub network: NotRun,
}

impl ValidatorNotStarted {
    /// A validator not started, counted as `outcome`, for `cause`.
    pub fn new(outcome: ValidationOutcome, cause: String) -> Self {
        Self {
            outcome,
            cause,
            exit_code: (),
            network: NotRun::NotRun,
        }
    }
}

/// The network of a validator that did not run.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub enum NotRun {
    /// It did not run.
    #[default]
    #[serde(rename = "not run")]
    NotRun,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same_keys(text: &str, record: &impl Serialize) {
        let written: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(serde_json::to_value(record).unwrap(), written);
    }

    #[test]
    fn a_report_that_ran_reads_back_and_writes_the_same_keys() {
        // A validator that ran and one that could not, as RUN_VALIDATION writes them.
        let text = r#"{"outcome":"error","schema_version":1,"validators":{"harness":{"argv":["sh","scripts/harness.sh"],"artifacts":["out/harness_report.json"],"cause":"exit 0","cwd":"/w","detected":false,"dropped_env":["API_KEY"],"duration_ms":12,"exit_code":0,"harness_report":"validators/harness/artifacts/out/harness_report.json","missing_artifacts":[],"network":"denied","outcome":"completed","proposed_goldens":false,"refused_artifacts":[{"path":"../x","reason":"leaves the worktree"}],"signal":null,"skipped_artifacts":[],"timeout_ms":null},"outside":{"cause":"could not run: no such file","exit_code":null,"network":"not run","outcome":"error"}}}"#;
        let report: ValidationReport = serde_json::from_str(text).unwrap();
        let ValidationReport::Ran(ran) = &report else {
            panic!("{report:?}")
        };
        assert_eq!(ran.outcome.outcome(), Outcome::Error);
        assert!(matches!(ran.validators["harness"], ValidatorRecord::Ran(_)));
        let outside = &ran.validators["outside"];
        assert!(matches!(outside, ValidatorRecord::NotStarted(_)));
        assert_eq!((outside.exit_code(), outside.network()), (None, "not run"));
        same_keys(text, &report);
    }

    #[test]
    fn a_refused_report_reads_back_and_writes_the_same_keys() {
        let text = r#"{"schema_version":1,"status":"not_configured","validators":{"harness_check":{"cause":"not run: another validator of the step is not configured","exit_code":null,"status":"not_run"},"lint":{"cause":"no lint found: set validators.lint in .tnh/config.yaml","exit_code":null,"status":"not_configured"}}}"#;
        let report: ValidationReport = serde_json::from_str(text).unwrap();
        let ValidationReport::NotConfigured(refused) = &report else {
            panic!("{report:?}")
        };
        assert_eq!(
            refused.validators["lint"].status,
            UnresolvedStatus::NotConfigured
        );
        same_keys(text, &report);
    }

    #[test]
    fn outcomes_no_process_ends_with_count_as_errors() {
        assert_eq!(
            ValidationOutcome::of(Outcome::KilledIdle),
            ValidationOutcome::KilledIdle
        );
        assert_eq!(
            ValidationOutcome::of(Outcome::GateQueued),
            ValidationOutcome::Error
        );
    }
}
