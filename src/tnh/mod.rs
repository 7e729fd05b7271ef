//! The agent-facing commands (`tnh context`, `tnh diff`, …). Agents learn them from `--help`
//! alone, so every command says what it prints, how to narrow it and how it exits. Output is
//! small and exact; a closed pipe (`| head`) is not an error.

mod adr;
mod check;
mod config;
mod context;
mod diff;
mod git;
pub mod runlog;

pub use check::CheckReport;
pub use context::ContextReport;

use std::io::Write;

use clap::{Parser, Subcommand};

use crate::exit::ExitStatus;

/// Small commands for coding agents working inside a tnh-conductor run (or any git repository).
///
/// Inside a run, the TNH_RUN_ID, TNH_RUN_DIR, TNH_STEP_ID, TNH_STEP_DIR, TNH_WORKTREE and
/// TNH_BASE_SHA variables tell each command where it is. Exit codes: 0 success, 1 the checked
/// tool ran and did not pass (test/lint/typecheck print its own exit code), 2 bad usage, not in
/// a repository or run, or the tool could not be run.
#[derive(Debug, Parser)]
#[command(name = "tnh", version, about, long_about)]
pub struct TnhCli {
    #[command(subcommand)]
    pub command: TnhCommand,
}

/// The agent-facing commands.
#[derive(Debug, Subcommand)]
pub enum TnhCommand {
    /// Where you are: repository, branch, base, changed files, run and step, ADRs, commands.
    Context(context::ContextArgs),
    /// Changes against the run's base (TNH_BASE_SHA, else the merge-base with main/master).
    Diff(diff::DiffArgs),
    /// Run the `tests` validator and print a short summary; exits 0 if it passed, 1 if not.
    #[command(after_help = check::check_help!(
        "  tnh test\n  tnh test -- --nocapture my_test\n  tnh test --json"
    ))]
    Test(check::CheckArgs),
    /// Run the `lint` validator and print a short summary; exits 0 if it passed, 1 if not.
    #[command(after_help = check::check_help!("  tnh lint\n  tnh lint --json\n  tnh lint -- --fix"))]
    Lint(check::CheckArgs),
    /// Run the `typecheck` validator and print a short summary; exits 0 if it passed, 1 if not.
    #[command(after_help = check::check_help!("  tnh typecheck\n  tnh typecheck --json"))]
    Typecheck(check::CheckArgs),
    /// Architecture decision records: `tnh adr list`, `tnh adr open ID`.
    #[command(subcommand)]
    Adr(adr::AdrCommand),
    /// The current step's run log: `tnh runlog append --kind note --message TEXT`.
    #[command(subcommand)]
    Runlog(runlog::RunlogCommand),
}

/// A `tnh` command failed in a way the agent should read.
#[derive(Debug)]
pub struct TnhError {
    message: String,
    hint: Option<String>,
}

impl TnhError {
    fn new(message: impl Into<String>, hint: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            hint: Some(hint.into()),
        }
    }
}

/// The result of a `tnh` command: the exit status, or an error for stderr (exit 2).
pub type TnhResult = Result<ExitStatus, TnhError>;

/// Writes to stdout; a closed pipe stops output quietly.
pub(crate) fn print(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
}

/// Writes a note to stderr (what an agent should know beside the command's output).
pub(crate) fn note(text: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "{text}");
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
    let result = match &cli.command {
        TnhCommand::Context(args) => context::run(args),
        TnhCommand::Diff(args) => diff::run(args),
        TnhCommand::Test(args) => check::run("tests", args),
        TnhCommand::Lint(args) => check::run("lint", args),
        TnhCommand::Typecheck(args) => check::run("typecheck", args),
        TnhCommand::Adr(command) => adr::run(command),
        TnhCommand::Runlog(command) => runlog::run(command),
    };
    match result {
        Ok(status) => status.into(),
        Err(error) => {
            let mut stderr = std::io::stderr();
            let _ = writeln!(stderr, "error: {}", error.message);
            if let Some(hint) = error.hint {
                let _ = writeln!(stderr, "  hint: {hint}");
            }
            ExitStatus::Usage.into()
        }
    }
}
