//! A visit's page: its prompt, the agent's transcript (tool calls folded, long entries cut
//! with the rest a click away), the final answer, the change per file with line numbers,
//! validator results, the planner's evidence and decision, the gate's request and outcome,
//! and policy violations. Every text is the agent's or comes from it: all of it is escaped.

use std::fmt::Write as _;

use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

use super::files::{Content, inside, read};
use super::html::{Delivery, escape, page, pre};
use super::run_page::Links;
use crate::artifacts::{
    GateOutcome, GateRequest, RunDir, StepManifest, ValidationReport, VisitDir, read_json,
};
use crate::planner::{Decision, PlannerInput};
use crate::policy::PolicySummary;

/// The most bytes of one file a page shows (the file's own link shows all of it).
const SHOWN_BYTES: u64 = 256 * 1024;

/// The most bytes the raw file route sends.
const RAW_BYTES: u64 = 64 * 1024 * 1024;

/// A transcript entry longer than this is cut, the rest folded.
const ENTRY_CHARS: usize = 4000;

/// The most lines of one file's diff shown; a longer one is summarised.
const DIFF_FILE_LINES: usize = 3000;

/// The served page of a visit.
pub(super) fn served(
    repo: usize,
    run_dir: &RunDir,
    run_id: &str,
    step_id: &str,
    visit: u32,
) -> Response {
    let folder = RunDir::visit_relative(step_id, visit);
    if let Err(refused) = inside(run_dir.root(), &folder) {
        return (StatusCode::FORBIDDEN, Html(escape(&refused.0))).into_response();
    }
    let active = crate::kernel::run_status::read_status(run_dir)
        .is_ok_and(|status| status.lifecycle_state == crate::artifacts::LifecycleState::Running);
    let body = format!(
        "<p><a href=\"/r/{repo}/{}\">← run {}</a></p>{}",
        super::html::segment(run_id),
        escape(run_id),
        body(run_dir, run_id, step_id, visit, Links::Served(repo), active)
    );
    Html(page(
        &format!("{step_id} #{visit} of {run_id}"),
        &body,
        Delivery::Served { live: false },
    ))
    .into_response()
}

/// A file of the run directory as plain text (never rendered as HTML by the browser).
pub(super) fn raw_file(run_dir: &RunDir, relative: &str) -> Response {
    let path = match inside(run_dir.root(), relative) {
        Ok(path) => path,
        Err(refused) => return (StatusCode::FORBIDDEN, refused.0).into_response(),
    };
    match read(&path, RAW_BYTES) {
        Ok(Content::Text { text, .. }) => {
            ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response()
        }
        Ok(Content::Binary { size }) => (
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("(a binary file of {size} bytes)"),
        )
            .into_response(),
        Ok(Content::Missing) => super::server::not_found("no such file (yet)"),
        Err(refused) => (StatusCode::FORBIDDEN, refused.0).into_response(),
    }
}

/// One visit's sections.
pub(super) fn body(
    run_dir: &RunDir,
    run_id: &str,
    step_id: &str,
    visit: u32,
    links: Links,
    active: bool,
) -> String {
    let folder = RunDir::visit_relative(step_id, visit);
    let Ok(root) = inside(run_dir.root(), &folder) else {
        return "<p class=\"refused\">not a visit of the run</p>".to_owned();
    };
    let visit_dir = VisitDir::at(root);
    let manifest = read_json::<StepManifest>(&visit_dir.manifest(), "step manifest").ok();
    let mut html = format!(
        "<h2 id=\"visit-{}-{visit}\">{} #{visit}</h2>",
        super::html::segment(step_id),
        escape(step_id)
    );
    match &manifest {
        Some(manifest) => {
            let _ = write!(
                html,
                "<p>{} — {} ({} → {})</p>",
                escape(&manifest.opcode),
                escape(&manifest.termination),
                escape(&manifest.started_at),
                escape(&manifest.ended_at)
            );
        }
        None if active => html.push_str(&super::html::being_written("The visit")),
        None => html.push_str("<p>No manifest: the visit did not end.</p>"),
    }
    let file = |name: &str| Section {
        relative: format!("{folder}/{name}"),
        link: links.file(run_id, &format!("{folder}/{name}")),
        active,
    };
    html.push_str(&file(VisitDir::PROMPT).shown(run_dir, "Prompt", pre));
    html.push_str(&file(VisitDir::TRANSCRIPT).shown(run_dir, "Transcript", fold_transcript));
    html.push_str(&file(VisitDir::FINAL_RESPONSE).shown(run_dir, "Final answer", pre));
    html.push_str(&file(VisitDir::WORKSPACE_DIFF).shown(run_dir, "Change", diff_html));
    html.push_str(&violations(&visit_dir));
    let root = visit_dir.root();
    html.push_str(&record::<ValidationReport>(
        &root.join(VisitDir::VALIDATION_REPORT),
        "Validators",
    ));
    html.push_str(&record::<PlannerInput>(
        &root.join(VisitDir::PLANNER_INPUT),
        "Planner evidence",
    ));
    html.push_str(&record::<Decision>(
        &root.join(VisitDir::PLANNER_DECISION),
        "Planner decision",
    ));
    html.push_str(&record::<GateRequest>(
        &root.join(VisitDir::GATE_REQUEST),
        "Gate request",
    ));
    html.push_str(&record::<GateOutcome>(
        &root.join(VisitDir::GATE_OUTCOME),
        "Gate outcome",
    ));
    html
}

/// A file of the visit shown on the page.
struct Section {
    relative: String,
    link: Option<String>,
    active: bool,
}

impl Section {
    /// The file's text, or `None` (with what to say instead) when there is none to show.
    fn content(&self, run_dir: &RunDir) -> Result<(String, bool), String> {
        let path = inside(run_dir.root(), &self.relative)
            .map_err(|refused| format!("<p class=\"refused\">{}</p>", escape(&refused.0)))?;
        match read(&path, SHOWN_BYTES) {
            Ok(Content::Text { text, cut }) => Ok((text, cut)),
            Ok(Content::Binary { size }) => Err(format!("<p>(binary, {size} bytes)</p>")),
            Ok(Content::Missing) if self.active => Err(super::html::being_written("It")),
            Ok(Content::Missing) => Err(String::new()),
            Err(refused) => Err(format!("<p class=\"refused\">{}</p>", escape(&refused.0))),
        }
    }

    fn more(&self, cut: bool) -> String {
        match (&self.link, cut) {
            (Some(link), true) => format!(
                "<p>Cut at {} KiB: <a href=\"{}\">see all</a>.</p>",
                SHOWN_BYTES / 1024,
                escape(link)
            ),
            (None, true) => format!("<p>Cut at {} KiB.</p>", SHOWN_BYTES / 1024),
            _ => String::new(),
        }
    }

    /// The section: its title and the file rendered, or what to say instead; nothing for a
    /// file the visit does not have.
    fn shown(&self, run_dir: &RunDir, title: &str, render: impl FnOnce(&str) -> String) -> String {
        match self.content(run_dir) {
            Ok((text, _)) if text.trim().is_empty() => String::new(),
            Ok((text, cut)) => format!(
                "<h3>{}</h3>{}{}",
                escape(title),
                render(&text),
                self.more(cut)
            ),
            Err(instead) if instead.is_empty() => String::new(),
            Err(instead) => format!("<h3>{}</h3>{instead}", escape(title)),
        }
    }
}

/// The policy violations of the visit (its typed policy summary).
fn violations(visit_dir: &VisitDir) -> String {
    let Ok(policy) = read_json::<PolicySummary>(&visit_dir.policy_summary(), "policy summary")
    else {
        return String::new();
    };
    if policy.violations.is_empty() {
        return String::new();
    }
    let mut html = String::from("<h3>Policy violations</h3><ul>");
    for violation in &policy.violations {
        let _ = write!(
            html,
            "<li class=\"violation\">{}</li>",
            escape(&violation.to_string())
        );
    }
    html.push_str("</ul>");
    html
}

/// A record of the visit read through its type and shown whole; one that does not read
/// (being written, or damaged) says so instead.
fn record<T: serde::de::DeserializeOwned + serde::Serialize>(
    path: &std::path::Path,
    title: &str,
) -> String {
    if !path.exists() {
        return String::new();
    }
    let body = match crate::artifacts::read_json::<T>(path, "record") {
        Ok(value) => pre(&serde_json::to_string_pretty(&value).unwrap_or_default()),
        Err(error) => format!(
            "<p class=\"note\">being written, or unreadable: {}</p>",
            escape(&error.to_string())
        ),
    };
    format!("<h3>{}</h3>{body}", escape(title))
}

/// The transcript in entries: tool calls and results folded, long entries cut with the rest
/// folded below.
fn fold_transcript(text: &str) -> String {
    let mut entries: Vec<String> = Vec::new();
    for line in text.lines() {
        let starts = line.starts_with("**") || line.starts_with("### ") || entries.is_empty();
        if starts {
            entries.push(String::new());
        }
        if let Some(entry) = entries.last_mut() {
            entry.push_str(line);
            entry.push('\n');
        }
    }
    let mut html = String::new();
    for entry in entries {
        let first = entry.lines().next().unwrap_or_default();
        if first.starts_with("**tool") {
            let _ = write!(
                html,
                "<details><summary>{}</summary>{}</details>",
                escape(first),
                pre(&entry)
            );
        } else if let Some((cut, _)) = entry.char_indices().nth(ENTRY_CHARS) {
            let _ = write!(
                html,
                "{}<details><summary>show the rest ({} more bytes)</summary>{}</details>",
                pre(&entry[..cut]),
                entry.len() - cut,
                pre(&entry[cut..])
            );
        } else {
            html.push_str(&pre(&entry));
        }
    }
    html
}

/// A unified diff, one table per file with old and new line numbers; a binary file or a
/// huge one is summarised.
fn diff_html(diff: &str) -> String {
    let mut html = String::new();
    for file in split_files(diff) {
        let name = file_name(file);
        let _ = write!(html, "<h4>{}</h4>", escape(&name));
        if file.contains("\nBinary files ") || file.contains("\nGIT binary patch") {
            html.push_str("<p>(binary file changed)</p>");
            continue;
        }
        let count = file.lines().count();
        if count > DIFF_FILE_LINES {
            let _ = write!(
                html,
                "<p>(a change of {count} lines: too long to show here)</p>"
            );
            continue;
        }
        html.push_str(&file_table(file));
    }
    html
}

/// The diff cut at each `diff --git` header.
fn split_files(diff: &str) -> Vec<&str> {
    let mut starts: Vec<usize> = diff
        .match_indices("diff --git ")
        .filter(|(at, _)| *at == 0 || diff.as_bytes()[at - 1] == b'\n')
        .map(|(at, _)| at)
        .collect();
    if starts.first() != Some(&0) {
        starts.insert(0, 0);
    }
    starts
        .iter()
        .enumerate()
        .map(|(index, start)| &diff[*start..starts.get(index + 1).copied().unwrap_or(diff.len())])
        .filter(|file| !file.trim().is_empty())
        .collect()
}

/// The file a diff section changes: its `+++ b/…` name, else its header's.
fn file_name(file: &str) -> String {
    let plus = file.lines().find_map(|line| {
        line.strip_prefix("+++ b/")
            .or_else(|| line.strip_prefix("+++ "))
    });
    let minus = file.lines().find_map(|line| line.strip_prefix("--- a/"));
    // git ends a name holding a space with a tab on these lines.
    plus.filter(|name| *name != "/dev/null")
        .or(minus)
        .map(|name| name.trim_end_matches('\t').to_owned())
        .unwrap_or_else(|| {
            file.lines()
                .next()
                .unwrap_or_default()
                .trim_start_matches("diff --git ")
                .to_owned()
        })
}

fn file_table(file: &str) -> String {
    let (mut old, mut new) = (0_u64, 0_u64);
    let mut html = String::from("<table class=\"diff\">");
    let mut in_hunk = false;
    for line in file.lines() {
        if let Some(header) = line.strip_prefix("@@ ") {
            (old, new) = hunk_start(header);
            in_hunk = true;
            let _ = write!(
                html,
                "<tr class=\"hunk\"><td></td><td></td><td>{}</td></tr>",
                escape(line)
            );
            continue;
        }
        if !in_hunk {
            continue;
        }
        let (class, left, right) = match line.as_bytes().first() {
            Some(b'+') => {
                new += 1;
                ("add", String::new(), new.to_string())
            }
            Some(b'-') => {
                old += 1;
                ("del", old.to_string(), String::new())
            }
            Some(b'\\') => ("hunk", String::new(), String::new()),
            _ => {
                old += 1;
                new += 1;
                ("", old.to_string(), new.to_string())
            }
        };
        let _ = write!(
            html,
            "<tr class=\"{class}\"><td class=\"number\">{left}</td><td class=\"number\">{right}</td><td>{}</td></tr>",
            escape(line)
        );
    }
    html.push_str("</table>");
    html
}

/// The line before each side's first line of a hunk (`-12,3 +14,5 @@` → (11, 13)).
fn hunk_start(header: &str) -> (u64, u64) {
    let number = |prefix: char| {
        header
            .split_whitespace()
            .find_map(|part| part.strip_prefix(prefix))
            .and_then(|range| range.split(',').next())
            .and_then(|start| start.parse::<u64>().ok())
            .map_or(0, |start| start.saturating_sub(1))
    };
    (number('-'), number('+'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIFF: &str = "diff --git a/<script>.txt b/<script>.txt\nnew file mode 100644\n--- /dev/null\n+++ b/<script>.txt\n@@ -0,0 +1,2 @@\n+one\n+<img onerror=x>\ndiff --git a/bin b/bin\nBinary files a/bin and b/bin differ\n";

    #[test]
    fn each_file_is_numbered_and_escaped() {
        let html = diff_html(DIFF);
        assert!(html.contains("<h4>&lt;script&gt;.txt</h4>"), "{html}");
        assert!(html.contains("+&lt;img onerror=x&gt;"));
        assert!(html.contains("<td class=\"number\">2</td>"));
        assert!(html.contains("(binary file changed)"));
        assert!(!html.contains("<script>"));
    }

    #[test]
    fn tool_calls_are_folded() {
        let html = fold_transcript("**assistant:** hi <b>\n\n**tool call** `Bash`:\n\nls\n");
        assert!(html.contains("<details><summary>**tool call** `Bash`:</summary>"));
        assert!(html.contains("hi &lt;b&gt;"));
    }
}
