//! `serve` (the run viewer in a browser) and `report RUN_ID` (one run as an HTML file).

use std::path::PathBuf;

use clap::Args;

use super::{Cli, Output, repo_root, repo_roots};
use crate::error::{Error, ExitStatus, Result};
use crate::viewer::{ServeOptions, Viewer};

/// `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Where to listen, `HOST:PORT` (port 0: any free port).
    #[arg(long, value_name = "HOST:PORT", default_value = crate::viewer::DEFAULT_ADDRESS)]
    pub addr: String,
    /// Listen on an address other machines can reach (anyone with the token can then decide
    /// gates).
    #[arg(long)]
    pub allow_remote: bool,
}

/// `report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The run.
    pub run_id: String,
    /// Write the report to FILE (default: standard output).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Prints the URL (with its token) on the first line, then answers until stopped.
pub fn cmd_serve(cli: &Cli, args: &ServeArgs, output: &mut Output) -> Result<ExitStatus> {
    let viewer = Viewer::bind(ServeOptions {
        address: args.addr.clone(),
        allow_remote: args.allow_remote,
        repos: repo_roots(cli)?,
        program: std::env::current_exe().ok(),
    })?;
    output.print(&format!("{}\n", viewer.url()));
    if viewer.is_remote() {
        output.note(
            "warning: the viewer is reachable from other machines; anyone with the URL's token \
             can read runs and decide gates, and the connection is not encrypted",
        );
    }
    viewer.run()?;
    Ok(ExitStatus::Success)
}

/// Writes the report of a run.
pub fn cmd_report(cli: &Cli, args: &ReportArgs, output: &mut Output) -> Result<ExitStatus> {
    let html = crate::viewer::report_html(&repo_root(cli)?, &args.run_id)?;
    match &args.output {
        Some(path) => {
            std::fs::write(path, html).map_err(|source| Error::Io {
                action: "write",
                path: path.clone(),
                source,
            })?;
            output.note(&format!(
                "report of run {} written to {}",
                args.run_id,
                path.display()
            ));
        }
        None => output.print(&html),
    }
    Ok(ExitStatus::Success)
}
