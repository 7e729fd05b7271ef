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
    /// The planner input envelope (OA06 §2).
    PlannerInput,
    /// The planner decision (OA06 §3).
    PlannerDecision,
    /// Step manifests.
    Manifest,
    /// Lines of `events.ndjson`.
    Event,
}

/// The schema of `name`, when this release publishes it.
pub fn schema_of(name: SchemaName) -> Option<serde_json::Value> {
    match name {
        SchemaName::Workflow => Some(crate::workflow::schema::workflow_schema()),
        _ => None,
    }
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
