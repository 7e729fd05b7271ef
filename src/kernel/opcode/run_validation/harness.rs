//! A validator's harness report: where it was found and whether it is one the kernel accepts.

use std::path::Path;

use super::collect::MAX_ARTIFACT_FILE_BYTES;
use super::planning::Plan;

/// Where a harness report was found: among the validator's collected artifacts (relative to
/// its `artifacts/` folder), or written by the harness straight into the step's folder
/// (`report: "${step_dir}/…"`, relative to the visit folder), so it never enters the worktree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ReportPath {
    Collected(String),
    InStepFolder(String),
}

impl ReportPath {
    pub(super) fn as_str(&self) -> &str {
        match self {
            ReportPath::Collected(path) | ReportPath::InStepFolder(path) => path,
        }
    }
}

/// The harness report: the `report` path, else a collected `harness_report.json`.
/// A relative `report` names a collected artifact; an absolute one must lie in the step's
/// visit folder (`${step_dir}`). The kernel checks that it parses and has `suite_id`, `cases`
/// and `summary`, and that it matches the schema.
pub(super) fn harness_report(
    plan: &Plan,
    collected: &[String],
    folder: &Path,
    visit_dir: &Path,
) -> (Option<(ReportPath, serde_json::Value)>, Option<String>) {
    let wanted = plan.report.clone().or_else(|| {
        collected
            .iter()
            .find(|path| path.ends_with(crate::artifacts::VisitDir::HARNESS_REPORT))
            .cloned()
    });
    let Some(path) = wanted else {
        return (None, None);
    };
    let (file, found) = if Path::new(&path).is_absolute() {
        let inside = visit_dir.canonicalize().ok().and_then(|visit| {
            let real = Path::new(&path).canonicalize().ok()?;
            let relative = real.strip_prefix(&visit).ok()?.to_str()?.replace('\\', "/");
            Some((real, relative))
        });
        match inside {
            Some((real, relative)) => (real, ReportPath::InStepFolder(relative)),
            None if Path::new(&path).exists() => {
                return (
                    None,
                    Some(format!(
                        "harness report `{path}` is outside the step's folder: write it under `${{step_dir}}`, or in the worktree and list it in `artifacts`"
                    )),
                );
            }
            None => return (None, Some(format!("harness report `{path}` is missing"))),
        }
    } else {
        (folder.join(&path), ReportPath::Collected(path.clone()))
    };
    // In the step folder or the worktree, both the agent's: a FIFO must not block the read,
    // nor a link to `/dev/zero` fill memory.
    let text =
        crate::artifacts::safe_files::read_text_following(&file, MAX_ARTIFACT_FILE_BYTES).ok();
    let Some(text) = text else {
        return (None, Some(format!("harness report `{path}` is missing")));
    };
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(value) => {
            let absent: Vec<&str> = ["suite_id", "cases", "summary"]
                .into_iter()
                .filter(|key| value.get(key).is_none())
                .collect();
            let problems = crate::artifacts::harness_report_problems(&value);
            if absent.is_empty() && problems.is_empty() {
                (Some((found, value)), None)
            } else if absent.is_empty() {
                let message = format!(
                    "harness report `{path}` does not match `tnh-conductor schema harness-report`: {}",
                    problems.join("; ")
                );
                (None, Some(message))
            } else {
                (
                    None,
                    Some(format!(
                        "harness report `{path}` lacks {}",
                        absent.join(", ")
                    )),
                )
            }
        }
        Err(error) => (
            None,
            Some(format!(
                "harness report `{path}` is not valid JSON: {error}"
            )),
        ),
    }
}
