//! `tnh-conductor journal [--date D] [--since D] [--format markdown|json]`.

use clap::{Args, ValueEnum};

use super::{Cli, Output, repo_root};
use crate::error::{Error, ExitStatus, Result};
use crate::kernel::journal::build_journal;

/// `journal`.
#[derive(Debug, Args)]
pub struct JournalArgs {
    /// The day to report, `YYYY-MM-DD`, up to today (default: today, UTC).
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
    /// The Markdown journal.
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
    // A day after today has no runs yet: the journal would list today's waiting runs as in
    // progress on it. Dates of the same form compare as text.
    let up_to_today = |option: &str, date: String, hint: &str| {
        if date > today {
            return Err(Error::usage(
                format!("{option} {date} is after today ({today}, UTC)"),
                hint,
            ));
        }
        Ok(date)
    };
    let (date, until) = match (&args.date, &args.since) {
        (Some(date), _) => (
            up_to_today(
                "--date",
                day(date)?,
                "give a day up to today; without --date the journal is today's",
            )?,
            None,
        ),
        (None, Some(since)) => (
            up_to_today(
                "--since",
                day(since)?,
                "give a day up to today, or `--date DAY` for one day",
            )?,
            Some(today.clone()),
        ),
        (None, None) => (today.clone(), None),
    };
    let journal = build_journal(&repo, &date, until.as_deref());
    match args.format {
        Format::Markdown => output.print(&journal.to_markdown()),
        Format::Json => output.print(&format!("{}\n", serde_json::to_string_pretty(&journal)?)),
    }
    Ok(ExitStatus::Success)
}
