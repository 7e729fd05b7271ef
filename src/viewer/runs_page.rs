//! The runs page: every run of the served repositories, newest first, filtered by state,
//! workflow and day, a page at a time. Only the runs a page shows are read, and, with a
//! filter, the ones it passes over that the index of finished runs does not know.

use std::fmt::Write as _;
use std::path::Path;

use super::html::{Delivery, escape, page, segment, short_time, table};
use crate::artifacts::{LifecycleState, RunDir, is_run_id};
use crate::kernel::finished_runs::FinishedIndex;
use crate::kernel::run::DEFAULT_ARTIFACTS_ROOT;

/// Runs on one page.
const PAGE_SIZE: usize = 50;

/// The filters of the runs page (its query).
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct Filters {
    /// `running`, `waiting`, … (empty: any).
    #[serde(default)]
    state: String,
    /// A workflow id (empty: any).
    #[serde(default)]
    workflow: String,
    /// A day, `YYYY-MM-DD`: runs started that day (empty: any).
    #[serde(default)]
    date: String,
    /// 1, 2, …
    #[serde(default)]
    page: Option<usize>,
}

/// Every run id of the repositories, newest first, with its repository's number.
fn run_ids(repos: &[std::path::PathBuf]) -> Vec<(String, usize)> {
    let mut ids = Vec::new();
    for (index, repo) in repos.iter().enumerate() {
        let Ok(entries) = std::fs::read_dir(repo.join(DEFAULT_ARTIFACTS_ROOT)) else {
            continue;
        };
        ids.extend(
            entries
                .flatten()
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .filter(|name| is_run_id(name))
                .map(|name| (name, index)),
        );
    }
    // Run ids start with their start time.
    ids.sort_unstable_by(|left, right| right.cmp(left));
    ids
}

/// Whether the run passes the filters. The day is told by its id; the state and workflow of
/// a finished run by the index of finished runs, of any other run by its records (a finished
/// run read so is added to the index).
fn passes(
    filters: &Filters,
    mut index: Option<&mut FinishedIndex>,
    run_dir: &RunDir,
    run_id: &str,
) -> bool {
    let day: String = filters.date.chars().filter(char::is_ascii_digit).collect();
    if !day.is_empty() && !run_id.starts_with(&day) {
        return false;
    }
    if filters.state.is_empty() && filters.workflow.is_empty() {
        return true;
    }
    let known = index
        .as_deref()
        .and_then(|index| index.get(run_id))
        .cloned();
    let state = match known.as_ref().and_then(|run| run.state.clone()) {
        Some(state) => Some(state),
        None if filters.state.is_empty() => None,
        None => {
            let state = crate::kernel::run_status::read_status(run_dir)
                .ok()
                .map(|status| status.lifecycle_state);
            if state.is_some_and(|state| {
                matches!(
                    state,
                    LifecycleState::Completed | LifecycleState::Failed | LifecycleState::Abandoned
                )
            }) && let Some(index) = index.as_deref_mut()
            {
                index.learn(run_dir, run_id);
            }
            state.map(|state| state.name().to_owned())
        }
    };
    if !filters.state.is_empty() && state.as_deref() != Some(filters.state.as_str()) {
        return false;
    }
    if filters.workflow.is_empty() {
        return true;
    }
    let workflow = match known.as_ref().and_then(|run| run.workflow.clone()) {
        Some(workflow) => Some(workflow),
        None => {
            let metadata = run_dir.read_metadata().ok();
            // A run with an end may have finished: the index learns it when it did.
            if metadata
                .as_ref()
                .is_some_and(|metadata| metadata.ended_at.is_some())
                && known.is_none()
                && let Some(index) = index
            {
                index.learn(run_dir, run_id);
            }
            metadata.map(|metadata| metadata.workflow_id)
        }
    };
    workflow.as_deref() == Some(filters.workflow.as_str())
}

/// One row of the table.
fn row(repo: &Path, repo_index: usize, run_id: &str, several: bool) -> (Vec<String>, bool) {
    let run_dir = RunDir::at(repo.join(DEFAULT_ARTIFACTS_ROOT).join(run_id));
    let (metadata, damage) = crate::kernel::journal::metadata_of(repo, &run_dir, run_id);
    let record = crate::kernel::journal_record::record_of(&run_dir, &metadata, damage.as_deref());
    let status = crate::kernel::run_status::read_status(&run_dir).ok();
    let state = record.lifecycle_state.name();
    let step = status
        .and_then(|status| status.current_step_id)
        .unwrap_or_default();
    let mut cells = vec![format!(
        "<a href=\"/r/{repo_index}/{}\">{}</a>",
        segment(run_id),
        escape(run_id)
    )];
    if several {
        cells.push(escape(&repo.display().to_string()));
    }
    cells.extend([
        format!("<span class=\"state-{state}\">{state}</span>"),
        escape(&record.workflow),
        escape(&step),
        escape(&short_time(&record.started_at)),
        escape(
            &record
                .ended_at
                .as_deref()
                .map(short_time)
                .unwrap_or_default(),
        ),
        escape(&record.diffstat),
        escape(record.landed.as_deref().unwrap_or("")),
    ]);
    let live = state == "running";
    (cells, live)
}

/// The runs page.
pub(super) fn render(repos: &[std::path::PathBuf], filters: &Filters) -> String {
    let page_number = filters.page.unwrap_or(1).max(1);
    let skip = (page_number - 1) * PAGE_SIZE;
    let several = repos.len() > 1;
    let mut passed = 0;
    let mut rows = Vec::new();
    let mut more = false;
    let mut any_live = false;
    let ids = run_ids(repos);
    // The index is read whole: only for a filter that needs it.
    let mut indexes: Vec<FinishedIndex> = if filters.state.is_empty() && filters.workflow.is_empty()
    {
        Vec::new()
    } else {
        repos.iter().map(|repo| FinishedIndex::load(repo)).collect()
    };
    for (run_id, index) in &ids {
        let Some(repo) = repos.get(*index) else {
            continue;
        };
        let run_dir = RunDir::at(repo.join(DEFAULT_ARTIFACTS_ROOT).join(run_id));
        if !passes(filters, indexes.get_mut(*index), &run_dir, run_id) {
            continue;
        }
        passed += 1;
        if passed <= skip {
            continue;
        }
        if rows.len() == PAGE_SIZE {
            more = true;
            break;
        }
        let (cells, live) = row(repo, *index, run_id, several);
        any_live |= live;
        rows.push(cells);
    }
    for (number, finished) in indexes.into_iter().enumerate() {
        let own: Vec<String> = ids
            .iter()
            .filter(|(_, index)| *index == number)
            .map(|(run_id, _)| run_id.clone())
            .collect();
        finished.save(&own, None);
    }
    let mut headers = vec!["run"];
    if several {
        headers.push("repository");
    }
    headers.extend([
        "state", "workflow", "step", "started", "ended", "changes", "landed",
    ]);
    let mut body = String::from("<h1>Runs</h1>");
    body.push_str(&filter_form(filters));
    if rows.is_empty() {
        body.push_str("<p>No runs match.</p>");
    } else {
        body.push_str(&table("runs", &headers, &rows));
    }
    body.push_str(&paging(filters, page_number, more));
    if any_live {
        // Runs that move are shown again every few seconds; nothing else on the page needs it.
        body.push_str(
            "<p class=\"writing\">Runs on this page are running: the page refreshes.</p>",
        );
    }
    let html = page("Runs", &body, Delivery::Served { live: false });
    if any_live {
        return html.replacen(
            "<head>",
            "<head><meta http-equiv=\"refresh\" content=\"5\">",
            1,
        );
    }
    html
}

fn filter_form(filters: &Filters) -> String {
    let mut options = String::from("<option value=\"\">any state</option>");
    for state in [
        "running",
        "waiting",
        "blocked",
        "decided",
        "failed",
        "completed",
        "abandoned",
    ] {
        let selected = if filters.state == state {
            " selected"
        } else {
            ""
        };
        let _ = write!(options, "<option{selected}>{state}</option>");
    }
    format!(
        "<form class=\"filters\" method=\"get\" action=\"/\">\
         <select name=\"state\">{options}</select>\
         <input name=\"workflow\" placeholder=\"workflow\" value=\"{}\">\
         <input name=\"date\" type=\"date\" value=\"{}\">\
         <button>Filter</button></form>",
        escape(&filters.workflow),
        escape(&filters.date)
    )
}

fn paging(filters: &Filters, page_number: usize, more: bool) -> String {
    let link = |number: usize, text: &str| {
        format!(
            "<a href=\"/?state={}&amp;workflow={}&amp;date={}&amp;page={number}\">{text}</a> ",
            segment(&filters.state),
            segment(&filters.workflow),
            segment(&filters.date)
        )
    };
    let mut html = String::from("<p class=\"paging\">");
    if page_number > 1 {
        html.push_str(&link(page_number - 1, "← newer"));
    }
    let _ = write!(html, "page {page_number} ");
    if more {
        html.push_str(&link(page_number + 1, "older →"));
    }
    html.push_str("</p>");
    html
}
