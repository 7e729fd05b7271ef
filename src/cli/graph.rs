//! `tnh-conductor graph FILE --format mermaid|dot`: draw steps and routes.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::{Output, known_names};
use crate::error::{ExitStatus, Result};
use crate::workflow::WorkflowError;
use crate::workflow::graph::{GraphFormat, render_graph};
use crate::workflow::load::check_file;

/// `graph`.
#[derive(Debug, Args)]
pub struct GraphArgs {
    /// The workflow file.
    #[arg(value_name = "WORKFLOW")]
    pub file: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Mermaid)]
    pub format: Format,
}

/// Graph output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A Mermaid flowchart (renders on GitHub and in most Markdown viewers).
    Mermaid,
    /// Graphviz DOT (`| dot -Tsvg > wf.svg`).
    Dot,
}

/// Draws a valid workflow; an invalid one gets its diagnostics and exit 2.
pub fn cmd_graph(cli: &super::Cli, args: &GraphArgs, output: &mut Output) -> Result<ExitStatus> {
    let known = known_names(cli)?;
    let shown = args.file.display().to_string();
    let checked = check_file(&args.file, &shown, &known);
    let workflow = match checked.workflow {
        Some(workflow) if checked.is_valid() => workflow,
        _ => {
            for diagnostic in &checked.diagnostics {
                output.diagnostic_styled(&diagnostic.render(output.color()));
            }
            return Err(WorkflowError::Invalid {
                file: shown,
                errors: checked.diagnostics.len(),
            }
            .into());
        }
    };
    let format = match args.format {
        Format::Mermaid => GraphFormat::Mermaid,
        Format::Dot => GraphFormat::Dot,
    };
    output.print(&render_graph(&workflow, format));
    Ok(ExitStatus::Success)
}
