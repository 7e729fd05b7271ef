//! `tnh-conductor validate FILE…`.

use std::path::PathBuf;

use clap::Args;

use super::Output;
use crate::error::{Error, ExitStatus, Result};

/// `validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Workflow files to check.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// Checks workflow files.
pub fn cmd_validate(_args: &ValidateArgs, _output: &mut Output) -> Result<ExitStatus> {
    Err(Error::NotImplemented {
        command: "validate".into(),
    })
}
