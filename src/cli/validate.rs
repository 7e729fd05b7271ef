//! `tnh-conductor validate FILE…`: every static check, every problem at once.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde::Serialize;

use super::{Output, known_names};
use crate::cli::Cli;
use crate::document::diagnostic::{Diagnostic, Severity};
use crate::error::{ExitStatus, Result};
use crate::workflow::load::check_file;

/// `validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Workflow files to check.
    #[arg(required = true, value_name = "WORKFLOW")]
    pub files: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// How diagnostics are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// `FILE:LINE:COL: error: message` and a hint line.
    Text,
    /// One JSON document.
    Json,
}

/// The JSON report of `validate --format json`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
struct Report<'a> {
    /// The version of this format.
    schema_version: u32,
    /// Whether every file is valid.
    valid: bool,
    /// Each file checked, in the order given.
    files: Vec<FileReport<'a>>,
}

/// One file's result.
#[derive(Debug, Serialize, schemars::JsonSchema)]
struct FileReport<'a> {
    /// The file, as given on the command line.
    file: String,
    /// Whether it has no error (warnings allowed).
    valid: bool,
    /// Every problem found, errors and warnings.
    diagnostics: &'a [Diagnostic],
}

/// The JSON Schema of the `validate --format json` output.
pub fn validate_output_schema() -> serde_json::Value {
    schemars::schema_for!(Report<'static>).to_value()
}

/// Checks workflow files: exit 0 all valid, 1 any invalid, 2 when a file could not be read.
pub fn cmd_validate(cli: &Cli, args: &ValidateArgs, output: &mut Output) -> Result<ExitStatus> {
    let known = known_names(cli)?;
    // Inside a repository, the validators a workflow names are resolved as `run` would.
    let repository = match super::optional_repo_root(cli)? {
        Some(repo) => Some((super::load_config(cli)?, repo)),
        None => None,
    };
    let checked: Vec<_> = args
        .files
        .iter()
        .map(|path| {
            let shown = path.display().to_string();
            let mut result = check_file(path, &shown, &known);
            if let (Some((config, repo)), Some(workflow)) = (&repository, &result.workflow) {
                let problems = crate::kernel::preflight::check_validators(workflow, config, repo);
                result
                    .diagnostics
                    .extend(problems.iter().map(|problem| problem.diagnostic(&shown)));
                result.diagnostics.sort_by_key(|diagnostic| {
                    (diagnostic.line, diagnostic.column, diagnostic.code)
                });
            }
            (shown, result)
        })
        .collect();
    let all_valid = checked.iter().all(|(_, result)| result.is_valid());
    let any_unreadable = checked.iter().any(|(_, result)| !result.readable);
    match args.format {
        Format::Json => {
            let report = Report {
                schema_version: crate::artifacts::SCHEMA_VERSION,
                valid: all_valid,
                files: checked
                    .iter()
                    .map(|(file, result)| FileReport {
                        file: file.clone(),
                        valid: result.is_valid(),
                        diagnostics: &result.diagnostics,
                    })
                    .collect(),
            };
            output.print(&format!("{}\n", serde_json::to_string_pretty(&report)?));
        }
        Format::Text => {
            for (file, result) in &checked {
                for diagnostic in &result.diagnostics {
                    output.print_styled(&diagnostic.render(output.color()));
                }
                if result.is_valid() {
                    output.print(&format!("{file}: valid\n"));
                }
            }
            let errors = checked
                .iter()
                .flat_map(|(_, result)| &result.diagnostics)
                .filter(|diagnostic| diagnostic.severity == Severity::Error)
                .count();
            let valid = checked
                .iter()
                .filter(|(_, result)| result.is_valid())
                .count();
            output.note(&format!(
                "{} file(s) checked: {valid} valid, {} invalid, {errors} error(s)",
                checked.len(),
                checked.len() - valid
            ));
        }
    }
    Ok(if any_unreadable {
        ExitStatus::Usage
    } else if all_valid {
        ExitStatus::Success
    } else {
        ExitStatus::Failure
    })
}
