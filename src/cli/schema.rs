//! `tnh-conductor schema NAME`: print the JSON Schema of a document or artifact format.

use clap::{Args, ValueEnum};

use super::Output;
use crate::error::{Error, ExitStatus, Result};

/// `schema`.
#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// The document or artifact format.
    #[arg(value_enum)]
    pub name: SchemaName,
}

/// Formats with a published JSON Schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SchemaName {
    /// Workflow documents (also in `schemas/workflow.v1.json`).
    Workflow,
    /// Harness reports written by script validators.
    HarnessReport,
    /// The planner input envelope.
    PlannerInput,
    /// The planner decision.
    PlannerDecision,
    /// Step manifests.
    Manifest,
    /// Lines of `events.ndjson`.
    Event,
    /// The `workspace_status` artifact (changed paths of a step).
    WorkspaceStatus,
    /// The `policy_summary` artifact.
    PolicySummary,
    /// The record of a rollback.
    RollbackRecord,
    /// `metadata.json` of a run.
    RunMetadata,
    /// `status.json` of a run.
    RunStatus,
    /// `guard_state.json`: what the guard recorded before an agent step, kept while it runs.
    GuardState,
    /// `runner_metadata.json`: how an agent step's process ran.
    RunnerMetadata,
    /// `validation_report.json`: each validator of a RUN_VALIDATION visit.
    ValidationReport,
    /// `gate_request.json`: what a GATE asks, with the review context.
    GateRequest,
    /// `gate_outcome.json`: how a blocking gate was decided.
    GateOutcome,
    /// `planner_attempts.json`: each try of an external planner backend.
    PlannerAttempts,
    /// `state.json`: the kernel's resumable state.
    State,
    /// `process_group.json`: a step's process group while it runs, for `resume` after a crash.
    ProcessGroup,
    /// `stopped_orphans.json`: the pids a refused `resume` killed.
    StoppedOrphans,
    /// Lines of an agent step's `runlog.ndjson` (`tnh runlog append`).
    RunlogEntry,
    /// The output of `validate --format json`.
    ValidateOutput,
    /// `inputs.json`: the inputs an agent step's prompt was rendered with.
    PromptInputs,
    /// The output of `run --json` and `resume --json`.
    RunResult,
    /// The output of `runs list --json`.
    RunsList,
    /// The output of `journal --format json`.
    Journal,
    /// `.tnh/history/<run_id>.json`: what the journal keeps of a run `runs clean --all` removed.
    RunHistory,
    /// `.tnh/finished-runs.json`: the finished runs `gate list` and `journal` need not read.
    FinishedRuns,
    /// The output of `tnh context --json`.
    TnhContext,
    /// The output of `tnh test|lint|typecheck --json`.
    TnhCheck,
    /// The output of `doctor --json`.
    Doctor,
}

/// The schema of `name`, when this release publishes it.
pub fn schema_of(name: SchemaName) -> Option<serde_json::Value> {
    match name {
        SchemaName::Workflow => Some(crate::workflow::schema::workflow_schema()),
        SchemaName::Manifest => Some(schema_value::<crate::artifacts::StepManifest>()),
        SchemaName::Event => Some(schema_value::<crate::artifacts::Event>()),
        SchemaName::RunMetadata => Some(schema_value::<crate::artifacts::RunMetadata>()),
        SchemaName::RunStatus => Some(schema_value::<crate::artifacts::RunStatus>()),
        SchemaName::WorkspaceStatus => Some(crate::workspace::workspace_status_schema()),
        SchemaName::PolicySummary => Some(crate::policy::policy_summary_schema()),
        SchemaName::RollbackRecord => Some(crate::workspace::rollback_record_schema()),
        SchemaName::GuardState => Some(schema_value::<crate::workspace::GuardState>()),
        SchemaName::HarnessReport => Some(crate::artifacts::harness_report_schema()),
        SchemaName::PlannerInput => Some(crate::planner::input_schema()),
        SchemaName::PlannerDecision => Some(crate::planner::decision_schema()),
        SchemaName::Doctor => Some(crate::doctor::doctor_schema()),
        SchemaName::RunnerMetadata => Some(crate::runner::runner_metadata_schema()),
        SchemaName::ValidationReport => {
            Some(written_schema::<crate::artifacts::ValidationReport>())
        }
        SchemaName::GateRequest => Some(written_schema::<crate::artifacts::GateRequest>()),
        SchemaName::GateOutcome => Some(written_schema::<crate::artifacts::GateOutcome>()),
        SchemaName::PlannerAttempts => {
            Some(schema_value::<crate::planner::backend::PlannerAttempts>())
        }
        SchemaName::State => Some(schema_value::<crate::kernel::RunState>()),
        SchemaName::ProcessGroup => Some(written_schema::<crate::runner::RecordedGroup>()),
        SchemaName::StoppedOrphans => {
            Some(written_schema::<crate::kernel::orphans::StoppedOrphans>())
        }
        SchemaName::RunlogEntry => Some(written_schema::<crate::artifacts::RunlogEntry>()),
        SchemaName::ValidateOutput => Some(super::validate::validate_output_schema()),
        SchemaName::PromptInputs => Some(schema_value::<crate::artifacts::PromptInputs>()),
        SchemaName::RunResult => Some(schema_value::<super::run::RunResult>()),
        SchemaName::RunsList => Some(schema_value::<super::runs_list::RunsList>()),
        SchemaName::Journal => Some(crate::kernel::journal::journal_schema()),
        SchemaName::RunHistory => Some(schema_value::<crate::kernel::journal_record::RunRecord>()),
        SchemaName::FinishedRuns => {
            Some(schema_value::<crate::kernel::finished_runs::FinishedRuns>())
        }
        SchemaName::TnhContext => Some(schema_value::<crate::tnh::ContextReport>()),
        SchemaName::TnhCheck => Some(schema_value::<crate::tnh::CheckReport>()),
    }
}

fn schema_value<T: schemars::JsonSchema>() -> serde_json::Value {
    schemars::schema_for!(T).to_value()
}

/// The schema of a record as this release writes it: every key it writes is required, even
/// those its readers take as empty when a record of an older release lacks them.
fn written_schema<T: schemars::JsonSchema>() -> serde_json::Value {
    schemars::generate::SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value()
}

/// Prints a JSON Schema.
pub fn cmd_schema(args: &SchemaArgs, output: &mut Output) -> Result<ExitStatus> {
    let Some(schema) = schema_of(args.name) else {
        let name = args
            .name
            .to_possible_value()
            .map(|value| value.get_name().to_owned())
            .unwrap_or_default();
        return Err(Error::NotImplemented {
            command: format!("schema {name}"),
        });
    };
    output.print(&format!("{}\n", serde_json::to_string_pretty(&schema)?));
    Ok(ExitStatus::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The records whose schema says what this release writes.
    const WRITTEN: [SchemaName; 6] = [
        SchemaName::GateRequest,
        SchemaName::GateOutcome,
        SchemaName::ValidationReport,
        SchemaName::RunlogEntry,
        SchemaName::ProcessGroup,
        SchemaName::StoppedOrphans,
    ];

    #[test]
    fn a_written_record_schema_requires_every_key_and_refuses_others() {
        for name in WRITTEN {
            let schema = schema_of(name).unwrap();
            assert!(jsonschema::validator_for(&schema).is_ok(), "{schema}");
        }
        let validator =
            jsonschema::validator_for(&schema_of(SchemaName::GateOutcome).unwrap()).unwrap();
        let mut outcome = serde_json::json!({
            "schema_version": 1, "run_id": "r", "step_id": "g", "visit": 1,
            "decision": "gate_approved", "reviewer": null, "comment": null, "decided_at": "t",
        });
        assert!(validator.is_valid(&outcome));
        outcome["approved_by_planner"] = serde_json::json!(true);
        assert!(!validator.is_valid(&outcome));
        // Read as empty when missing, but always written: required.
        let mut outcome = outcome.as_object().unwrap().clone();
        outcome.remove("approved_by_planner");
        outcome.remove("comment");
        assert!(!validator.is_valid(&outcome.into()));
    }
}
