//! The journal page: the review journal of a day for each served repository, as
//! `tnh-conductor journal` prints it.

use std::fmt::Write as _;
use std::path::PathBuf;

use super::html::{Delivery, escape, page, pre};

/// The journal page's query.
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct JournalQuery {
    /// `YYYY-MM-DD` (default: today, UTC).
    #[serde(default)]
    date: String,
}

/// A day as the journal takes it, or `None` when `text` is not one.
fn day(text: &str) -> Option<String> {
    let date: jiff::civil::Date = text.parse().ok()?;
    Some(date.strftime("%Y-%m-%d").to_string())
}

/// The journal page.
pub(super) fn render(repos: &[PathBuf], query: &JournalQuery) -> String {
    let today = jiff::Timestamp::now().strftime("%Y-%m-%d").to_string();
    let date = day(&query.date).unwrap_or(today);
    let mut body = format!(
        "<h1>Journal of {}</h1><form class=\"filters\" method=\"get\" action=\"/journal\">\
         <input name=\"date\" type=\"date\" value=\"{}\"><button>Show</button></form>",
        escape(&date),
        escape(&date)
    );
    for repo in repos {
        let journal = crate::kernel::journal::build_journal(repo, &date, None);
        if repos.len() > 1 {
            let _ = write!(body, "<h2>{}</h2>", escape(&repo.display().to_string()));
        }
        body.push_str(&pre(&journal.to_markdown()));
    }
    page("Journal", &body, Delivery::Served { live: false })
}
