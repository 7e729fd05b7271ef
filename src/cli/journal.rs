//! `tnh-conductor journal [--date D] [--since D] [--format markdown|json]`.

use clap::{Args, ValueEnum};

use super::{Cli, Output, repo_root};
use crate::error::{Error, ExitStatus, Result};
use crate::kernel::journal::build_journal;

/// `journal`.
#[derive(Debug, Args)]
pub struct JournalArgs {
    /// The day to report, `YYYY-MM-DD` (default: today, UTC).
    #[arg(long, conflicts_with = "since")]
    pub date: Option<String>,
    /// Report every day from this one through today.
    #[arg(long)]
    pub since: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Markdown)]
    pub format: Format,
}

/// Journal formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// The OA01.1 Markdown journal.
    Markdown,
    /// The same data as JSON.
    Json,
}

fn day(text: &str) -> Result<String> {
    text.parse::<jiff::civil::Date>()
        .map(|date| date.to_string())
        .map_err(|_| {
            Error::usage(
                format!("`{text}` is not a date"),
                "write dates as YYYY-MM-DD",
            )
        })
}

/// Prints the journal.
pub fn cmd_journal(cli: &Cli, args: &JournalArgs, output: &mut Output) -> Result<ExitStatus> {
    let repo = repo_root(cli)?;
    let today = jiff::Timestamp::now().strftime("%Y-%m-%d").to_string();
    let (date, until) = match (&args.date, &args.since) {
        (Some(date), _) => (day(date)?, None),
        (None, Some(since)) => {
            let since = day(since)?;
            // Dates of the same form compare as text.
            if since > today {
                return Err(Error::usage(
                    format!("--since {since} is after today ({today})"),
                    "give a day up to today, or `--date DAY` for one day",
                ));
            }
            (since, Some(today))
        }
        (None, None) => (today, None),
    };
    let journal = build_journal(&repo, &date, until.as_deref());
    match args.format {
        Format::Markdown => output.print(&journal.to_markdown()),
        Format::Json => output.print(&format!("{}\n", serde_json::to_string_pretty(&journal)?)),
    }
    Ok(ExitStatus::Success)
}
