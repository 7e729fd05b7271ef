//! A run's page: what it is and where it stands, its workflow drawn with the path taken, and
//! its visits in order. Served live (new visits appear as events are written), or as the top
//! of a report.

use std::fmt::Write as _;

use super::html::{Delivery, duration_between, escape, page, segment, short_time, table};
use super::records::{RunView, VisitRow};
use crate::artifacts::{LifecycleState, RunDir};

/// Where a page's links lead: to the server's pages, or to sections of one report file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Links {
    /// `serve`: repository number.
    Served(usize),
    /// `report`: anchors.
    Report,
}

impl Links {
    /// The link to a visit.
    pub(super) fn visit(self, run_id: &str, step_id: &str, visit: u32) -> String {
        match self {
            Links::Served(repo) => format!(
                "/r/{repo}/{}/visit/{}/{visit}",
                segment(run_id),
                segment(step_id)
            ),
            Links::Report => format!("#visit-{}-{visit}", segment(step_id)),
        }
    }

    /// The link to a file of the run directory (none in a report: its text is inline).
    pub(super) fn file(self, run_id: &str, relative: &str) -> Option<String> {
        match self {
            Links::Served(repo) => {
                let parts: Vec<String> = relative.split('/').map(segment).collect();
                Some(format!(
                    "/r/{repo}/{}/file/{}",
                    segment(run_id),
                    parts.join("/")
                ))
            }
            Links::Report => None,
        }
    }
}

/// The served page of a run.
pub(super) fn served(repo: usize, run_dir: RunDir, run_id: &str) -> String {
    let view = RunView::load(&run_dir, run_id);
    let mut body = body(&view, Links::Served(repo));
    body.push_str(&land_form(repo, &view));
    page(
        &format!("Run {run_id}"),
        &body,
        Delivery::Served {
            live: view.may_move(),
        },
    )
}

/// The form that lands the run, for a run that succeeded and was not landed; else nothing.
fn land_form(repo: usize, view: &RunView) -> String {
    let Some(metadata) = &view.metadata else {
        return String::new();
    };
    let completed = view
        .status
        .as_ref()
        .is_some_and(|status| status.lifecycle_state == LifecycleState::Completed);
    if !completed || metadata.result_commit.is_none() || !metadata.landings.is_empty() {
        return String::new();
    }
    let into = escape(metadata.base_branch.as_deref().unwrap_or("its base branch"));
    format!(
        concat!(
            "<h2>Land</h2><form method=\"post\" action=\"/r/{repo}/{run}/land\">",
            "<p>Bring the run's commit into <code>{into}</code> ",
            "(as <code>tnh-conductor land</code> does).</p>",
            "<button>Land</button></form>"
        ),
        repo = repo,
        run = segment(&view.run_id),
        into = into
    )
}

/// The run's summary, graph and visits.
pub(super) fn body(view: &RunView, links: Links) -> String {
    let mut body = format!("<h1>Run {}</h1>", escape(&view.run_id));
    body.push_str(&summary(view));
    if let Links::Served(repo) = links
        && view
            .status
            .as_ref()
            .is_some_and(|status| status.lifecycle_state == LifecycleState::Waiting)
    {
        let _ = write!(
            body,
            "<p id=\"waiting\">It waits at a gate: <a href=\"/gates#run-{repo}-{}\">decide it</a>.</p>",
            segment(&view.run_id)
        );
    }
    if let Links::Served(_) = links {
        // Filled by live.js when the run moves on after the page was loaded: the summary
        // above is as loaded.
        body.push_str("<p id=\"moved\" class=\"note\" hidden></p>");
    }
    body.push_str("<h2>Workflow</h2>");
    let workflow = view
        .metadata
        .as_ref()
        .and_then(super::graph_svg::load_workflow);
    let current = view
        .status
        .as_ref()
        .and_then(|status| status.current_step_id.as_deref());
    body.push_str(&super::graph_svg::draw(
        workflow.as_ref(),
        &view.path_taken(),
        current,
    ));
    body.push_str("<h2>Visits</h2>");
    body.push_str(&visits_table(view, links));
    if view.events.torn {
        body.push_str(&super::html::being_written("The run's last event"));
    }
    body
}

fn summary(view: &RunView) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut add = |name: &str, value: String| {
        rows.push(vec![escape(name), escape(&value)]);
    };
    if let Some(status) = &view.status {
        add("state", status.lifecycle_state.name().to_owned());
        add("step", status.current_step_id.clone().unwrap_or_default());
        if let Some(reason) = &status.reason {
            add("reason", reason.clone());
        }
    }
    match &view.metadata {
        Some(metadata) => {
            add(
                "workflow",
                format!("{} v{}", metadata.workflow_id, metadata.workflow_version),
            );
            add("started", short_time(&metadata.started_at));
            if let Some(ended) = &metadata.ended_at {
                add("ended", short_time(ended));
                add("took", duration_between(&metadata.started_at, Some(ended)));
            }
            add("branch", metadata.branch.clone());
            if let Some(commit) = &metadata.result_commit {
                add("commit", commit.clone());
            }
            for landing in &metadata.landings {
                add(
                    "landed",
                    format!(
                        "{} at {}",
                        landing
                            .into
                            .clone()
                            .or_else(|| landing.remote.clone())
                            .unwrap_or_default(),
                        landing.at
                    ),
                );
            }
        }
        None => add(
            "metadata",
            "unreadable (being written, or damaged)".to_owned(),
        ),
    }
    table("summary", &["", ""], &rows)
}

fn visits_table(view: &RunView, links: Links) -> String {
    let rows: Vec<Vec<String>> = view
        .visits
        .iter()
        .map(|visit| visit_cells(visit, &view.run_id, links))
        .collect();
    let mut html = table(
        "visits",
        &[
            "step",
            "opcode",
            "outcome",
            "took",
            "agent",
            "turns",
            "cost",
            "changes",
            "violations",
            "what it did",
        ],
        &rows,
    );
    if let Links::Served(repo) = links {
        // The live script follows the event stream from where this page stopped reading.
        html = html.replacen(
            "<table class=\"visits\">",
            &format!(
                "<table class=\"visits\" id=\"visits\" data-events=\"/r/{repo}/{}/events\" \
                 data-offset=\"{}\" data-visit-base=\"/r/{repo}/{}/visit/\">",
                segment(&view.run_id),
                view.events.offset,
                segment(&view.run_id)
            ),
            1,
        );
    }
    html
}

fn visit_cells(visit: &VisitRow, run_id: &str, links: Links) -> Vec<String> {
    vec![
        format!(
            "<a href=\"{}\">{} #{}</a>",
            links.visit(run_id, &visit.step_id, visit.visit),
            escape(&visit.step_id),
            visit.visit
        ),
        escape(&visit.opcode),
        escape(visit.outcome.as_deref().unwrap_or("running")),
        escape(&duration_between(
            &visit.started_at,
            visit.ended_at.as_deref(),
        )),
        escape(visit.agent.as_deref().unwrap_or("")),
        visit
            .turns
            .map(|turns| turns.to_string())
            .unwrap_or_default(),
        visit
            .cost_usd
            .map(|cost| format!("${cost:.2}"))
            .unwrap_or_default(),
        escape(&visit.lines_changed),
        visit
            .violations
            .iter()
            .map(|violation| format!("<div class=\"violation\">{}</div>", escape(violation)))
            .collect(),
        visit
            .summary
            .iter()
            .map(|line| format!("<div>{}</div>", escape(line)))
            .collect(),
    ]
}
