//! `tnh-conductor schema NAME`.

use clap::Args;

use super::Output;
use crate::error::{Error, ExitStatus, Result};

/// `schema`.
#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// The document or artifact format.
    pub name: String,
}

/// Prints a JSON Schema.
pub fn cmd_schema(_args: &SchemaArgs, _output: &mut Output) -> Result<ExitStatus> {
    Err(Error::NotImplemented {
        command: "schema".into(),
    })
}
