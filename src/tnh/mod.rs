//! The agent-facing commands (`tnh context`, `tnh diff`, …). Agents learn them from `--help`
//! alone, so every command says what it prints and how to narrow it.

use clap::{Parser, Subcommand};

use crate::error::ExitStatus;

/// Small commands for agents working inside a tnh-conductor run.
#[derive(Debug, Parser)]
#[command(name = "tnh", version, about, long_about = None)]
pub struct TnhCli {
    #[command(subcommand)]
    pub command: TnhCommand,
}

/// The agent-facing commands of DESIGN §1.
#[derive(Debug, Subcommand)]
pub enum TnhCommand {
    /// Repository, run and step context, sized for a prompt.
    Context,
    /// Changes against the run's base.
    Diff,
    /// Run the `tests` validator and summarise.
    Test,
    /// Run the `lint` validator and summarise.
    Lint,
    /// Run the `typecheck` validator and summarise.
    Typecheck,
    /// Architecture decision records.
    Adr,
    /// The current step's run log.
    Runlog,
}

/// The entry point of the `tnh` binary.
pub fn main() -> std::process::ExitCode {
    let cli = match TnhCli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let usage_error = error.use_stderr();
            let _ = error.print();
            return if usage_error {
                ExitStatus::Usage.into()
            } else {
                ExitStatus::Success.into()
            };
        }
    };
    let name = format!("{:?}", cli.command).to_lowercase();
    eprintln!("error: `tnh {name}` is not implemented yet");
    ExitStatus::Usage.into()
}
