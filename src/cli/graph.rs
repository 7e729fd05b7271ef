//! `tnh-conductor graph FILE`.

use std::path::PathBuf;

use clap::Args;

use super::Output;
use crate::error::{Error, ExitStatus, Result};

/// `graph`.
#[derive(Debug, Args)]
pub struct GraphArgs {
    /// The workflow file.
    pub file: PathBuf,
}

/// Draws a workflow.
pub fn cmd_graph(_cli: &super::Cli, _args: &GraphArgs, _output: &mut Output) -> Result<ExitStatus> {
    Err(Error::NotImplemented {
        command: "graph".into(),
    })
}
