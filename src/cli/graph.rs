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

/// Problems that depend on where the workflow runs (the agents, validators and planners of a
/// configuration, the prompt library), not on its steps and routes: `graph` draws it anyway.
const NAMES_DEFINED_ELSEWHERE: [&str; 4] = [
    "unknown-agent",
    "unknown-validator",
    "unknown-planner",
    "unknown-prompt",
];

/// Draws a workflow whose steps and routes are valid; one whose only problems are names this
/// configuration does not define is drawn with a note; any other gets its diagnostics and
/// exit 2.
pub fn cmd_graph(cli: &super::Cli, args: &GraphArgs, output: &mut Output) -> Result<ExitStatus> {
    let known = known_names(cli)?;
    let shown = args.file.display().to_string();
    let checked = check_file(&args.file, &shown, &known);
    let drawable = checked
        .diagnostics
        .iter()
        .filter(|diagnostic| diagnostic.severity == crate::document::diagnostic::Severity::Error)
        .all(|diagnostic| NAMES_DEFINED_ELSEWHERE.contains(&diagnostic.code));
    let workflow = match checked.workflow {
        Some(workflow) if drawable => {
            for diagnostic in checked.diagnostics.iter().filter(|diagnostic| {
                diagnostic.severity == crate::document::diagnostic::Severity::Error
            }) {
                output.note(&format!(
                    "note: drawn although {} (line {}): pass the configuration it runs with (--config) to check it",
                    diagnostic.message, diagnostic.line
                ));
            }
            workflow
        }
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
