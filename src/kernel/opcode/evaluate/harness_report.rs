//! The harness report as the envelope carries it: parsed, and cut to a bound that keeps its
//! verdict (failing cases first, at least one case).

use super::super::StepContext;
use crate::artifacts::{ArtifactRole, StepManifest};
use crate::planner::input::Omitted;

/// The most of a harness report the envelope carries, as JSON; a larger one is cut (see
/// [`bounded_report`]) with a note naming the report's path.
const HARNESS_REPORT_LIMIT: usize = 32 * 1024;

/// The largest harness report read at all: what RUN_VALIDATION keeps of a validator's file.
const HARNESS_REPORT_READ_LIMIT: u64 = 64 * 1024 * 1024;

/// The last harness report among the manifests, parsed and bounded to
/// [`HARNESS_REPORT_LIMIT`] bytes of JSON.
pub(super) fn harness_report(
    context: &StepContext<'_>,
    manifests: &[StepManifest],
) -> Option<serde_json::Value> {
    let entry = manifests
        .iter()
        .rev()
        .find_map(|manifest| manifest.artifact(ArtifactRole::HarnessReport))?;
    let path = context.recorder.run_dir().root().join(&entry.path);
    let read = crate::artifacts::safe_files::read_regular(&path, HARNESS_REPORT_READ_LIMIT);
    let report = match read {
        Ok((bytes, false)) => match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(report) => bounded_report(report, bytes.len(), &entry.path),
            Err(error) => Omitted::note(format!(
                "the harness report {} cannot be read as JSON: {error}",
                entry.path
            )),
        },
        Ok((_, true)) => Omitted::note(format!(
            "the harness report {} is larger than {HARNESS_REPORT_READ_LIMIT} bytes: not read",
            entry.path
        )),
        // Gone or replaced since its step listed it: nothing to send, as before it existed.
        Err(_) => return None,
    };
    Some(report)
}

/// The note a cut report carries as `truncated`: what was kept, and where the whole is.
#[derive(serde::Serialize)]
struct Truncated {
    /// What was kept and left out.
    note: String,
    /// The whole report, relative to the run directory.
    report: String,
    /// Its size.
    bytes: usize,
    /// How many cases the report lists, when it lists them.
    #[serde(skip_serializing_if = "Option::is_none")]
    cases_total: Option<usize>,
    /// How many of them were kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    cases_kept: Option<usize>,
    /// How many did not pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    cases_not_passed: Option<usize>,
}

/// The size of `value` as JSON.
fn json_size(value: &serde_json::Value) -> usize {
    serde_json::to_vec(value).map_or(0, |text| text.len())
}

/// `text` cut to `limit` characters, saying how long it was.
pub(super) fn cut_text(text: &str, limit: usize) -> String {
    if text.chars().count() > limit {
        let kept: String = text.chars().take(limit).collect();
        format!("{kept}… [cut: {} bytes in all]", text.len())
    } else {
        text.to_owned()
    }
}

/// `value` made small: strings cut to `text` characters (saying how long they were), lists
/// and maps to their first `items` entries (saying how many there were), nothing deeper than
/// `depth` levels.
pub(super) fn shrink(
    value: &serde_json::Value,
    text: usize,
    items: usize,
    depth: usize,
) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(string) => Value::String(cut_text(string, text)),
        Value::Array(_) | Value::Object(_) if depth == 0 => {
            Value::String(format!("[cut: {} bytes of JSON]", json_size(value)))
        }
        Value::Array(list) => {
            let mut kept: Vec<Value> = list
                .iter()
                .take(items)
                .map(|item| shrink(item, text, items, depth - 1))
                .collect();
            if list.len() > items {
                kept.push(Value::String(format!(
                    "[cut: {} more entries]",
                    list.len() - items
                )));
            }
            Value::Array(kept)
        }
        Value::Object(map) => {
            let mut kept: serde_json::Map<String, Value> = map
                .iter()
                .take(items)
                .map(|(key, item)| {
                    let key: String = key.chars().take(text).collect();
                    (key, shrink(item, text, items, depth - 1))
                })
                .collect();
            if map.len() > items {
                kept.insert(
                    "[cut]".to_owned(),
                    Value::String(format!("{} more keys", map.len() - items)),
                );
            }
            Value::Object(kept)
        }
        other => other.clone(),
    }
}

/// A harness report as the envelope carries it: whole when its JSON fits in
/// [`HARNESS_REPORT_LIMIT`] bytes; else its identity and `summary` counts, its
/// `proposed_goldens` (the first 50), then its cases — failing ones (any status but `passed`)
/// first — each shrunk, as many as fit, and a `truncated` note naming `path`, the report's
/// size and what was kept. At least one case is kept when the report has any, so the guard
/// reads the same verdict from the cut report (every case passed, or not) as from the whole.
fn bounded_report(report: serde_json::Value, bytes: usize, path: &str) -> serde_json::Value {
    use serde_json::Value;
    if json_size(&report) <= HARNESS_REPORT_LIMIT {
        return report;
    }
    let Value::Object(mut fields) = report else {
        return Omitted::note(format!(
            "the harness report is {bytes} bytes and not an object; see {path}"
        ));
    };
    let mut kept = serde_json::Map::new();
    let goldens_total = keep_head(&mut fields, &mut kept);
    let cases = fields.remove("cases");
    let ux_flags = fields.remove("ux_flags");
    let others: Vec<String> = fields.keys().cloned().collect();
    let mut note = Truncated {
        note: String::new(),
        report: path.to_owned(),
        bytes,
        cases_total: None,
        cases_kept: None,
        cases_not_passed: None,
    };
    let summary_of_cases = keep_cases(cases, &mut kept, &mut note);
    let mut dropped = others;
    if let Some(flags) = ux_flags {
        let flags = shrink(&flags, 300, 16, 2);
        if json_size(&Value::Object(kept.clone())) + json_size(&flags) + 1024
            <= HARNESS_REPORT_LIMIT
        {
            kept.insert("ux_flags".to_owned(), flags);
        } else {
            dropped.insert(0, "ux_flags".to_owned());
        }
    }
    let mut text = format!(
        "the harness report is {bytes} bytes (more than {HARNESS_REPORT_LIMIT}): kept its summary, {summary_of_cases}"
    );
    if let Some(total) = goldens_total.filter(|total| *total > 50) {
        text.push_str(&format!(", the first 50 of {total} proposed goldens"));
    }
    if !dropped.is_empty() {
        text.push_str(&format!("; left out: {}", dropped.join(", ")));
    }
    text.push_str(&format!("; the whole report is {path}"));
    note.note = text;
    kept.insert(
        "truncated".to_owned(),
        serde_json::to_value(note).unwrap_or_default(),
    );
    Value::Object(kept)
}

/// Moves a cut report's identity, `summary` and first 50 `proposed_goldens` (each shrunk) from
/// `fields` to `kept`; how many goldens there were, when they are a list.
fn keep_head(
    fields: &mut serde_json::Map<String, serde_json::Value>,
    kept: &mut serde_json::Map<String, serde_json::Value>,
) -> Option<usize> {
    use serde_json::Value;
    for key in ["suite_id", "version", "generated_at"] {
        if let Some(value) = fields.remove(key) {
            kept.insert(key.to_owned(), shrink(&value, 200, 8, 1));
        }
    }
    if let Some(summary) = fields.remove("summary") {
        kept.insert("summary".to_owned(), shrink(&summary, 200, 32, 2));
    }
    let goldens = fields.remove("proposed_goldens");
    let goldens_total = goldens.as_ref().and_then(Value::as_array).map(Vec::len);
    match goldens {
        // The first 50, each shortened; the note says how many there were.
        Some(Value::Array(goldens)) => {
            let first = goldens
                .iter()
                .take(50)
                .map(|golden| shrink(golden, 300, 8, 1))
                .collect();
            kept.insert("proposed_goldens".to_owned(), Value::Array(first));
        }
        Some(other) => {
            kept.insert("proposed_goldens".to_owned(), shrink(&other, 300, 8, 1));
        }
        None => {}
    }
    goldens_total
}

/// Adds to `kept` as many of a cut report's `cases` as fit, failing ones first and at least
/// one, each shrunk; counts them in `note`, and says what was kept.
fn keep_cases(
    cases: Option<serde_json::Value>,
    kept: &mut serde_json::Map<String, serde_json::Value>,
    note: &mut Truncated,
) -> String {
    use serde_json::Value;
    let cases = match cases {
        Some(Value::Array(cases)) => cases,
        Some(other) => {
            kept.insert("cases".to_owned(), shrink(&other, 200, 8, 2));
            return String::from("no cases");
        }
        None => return String::from("no cases"),
    };
    let failing = |case: &Value| case.get("status").and_then(Value::as_str) != Some("passed");
    let ordered: Vec<&Value> = cases
        .iter()
        .filter(|case| failing(case))
        .chain(cases.iter().filter(|case| !failing(case)))
        .collect();
    let failing_total = cases.iter().filter(|case| failing(case)).count();
    // What the rest of the report takes, with room for the note.
    let mut used = json_size(&Value::Object(kept.clone())) + 1024;
    let mut chosen = Vec::new();
    for case in ordered {
        let case = shrink(case, 500, 16, 3);
        let size = json_size(&case) + 1;
        if !chosen.is_empty() && used + size > HARNESS_REPORT_LIMIT {
            break;
        }
        used += size;
        chosen.push(case);
    }
    let summary = format!(
        "{} of {} cases ({failing_total} not passed, listed first; long fields shortened)",
        chosen.len(),
        cases.len()
    );
    note.cases_total = Some(cases.len());
    note.cases_kept = Some(chosen.len());
    note.cases_not_passed = Some(failing_total);
    kept.insert("cases".to_owned(), Value::Array(chosen));
    summary
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report over the limit is cut to its summary and as many cases as
    /// fit, failing ones first, with a note naming the whole report; the guard reads the same
    /// verdict from the cut report as from the whole one.
    #[test]
    fn a_harness_report_is_bounded_keeping_its_verdict() {
        use crate::planner::guard::Facts;
        let small = serde_json::json!({"suite_id": "s", "summary": {"passed": 1}, "cases": [{"id": "a", "status": "passed"}]});
        assert_eq!(bounded_report(small.clone(), 10, "r.json"), small);
        let report = |statuses: &[&str], detail: usize| {
            let cases: Vec<serde_json::Value> = statuses
                .iter()
                .enumerate()
                .map(|(n, status)| serde_json::json!({"id": format!("c{n}"), "status": status, "detail": "d".repeat(detail)}))
                .collect();
            serde_json::json!({
                "suite_id": "s",
                "summary": {"passed": 1, "failed": 1},
                "cases": cases,
                "proposed_goldens": (0..80).map(|n| format!("g{n}.png")).collect::<Vec<_>>(),
                "ux_flags": [{"id": "contrast", "detail": "x".repeat(100_000)}],
                "extra": "kept out",
            })
        };
        let verdict = |report: &serde_json::Value| {
            let envelope = serde_json::json!({"evidence": {"harness_report": report}});
            let facts = Facts::from_input(&crate::planner::PlannerInput::read(&envelope));
            (facts.report_passed, facts.proposed_goldens)
        };
        for (statuses, detail) in [
            (vec!["passed"; 2000], 100),
            (vec!["passed"], 1_000_000),
            (
                [vec!["passed"; 1500], vec!["failed"], vec!["passed"; 1500]].concat(),
                100,
            ),
            (vec!["failed"], 1_000_000),
            (vec![], 0),
        ] {
            let whole = report(&statuses, detail);
            let cut = bounded_report(whole.clone(), 123_456, "artifacts/check/1/r.json");
            let size = json_size(&cut);
            assert!(
                size <= HARNESS_REPORT_LIMIT,
                "{} cases: {size} bytes",
                statuses.len()
            );
            assert_eq!(verdict(&cut), verdict(&whole), "{} cases", statuses.len());
            assert_eq!(cut["summary"], whole["summary"]);
            assert_eq!(cut["suite_id"], "s");
            let note = cut["truncated"]["note"].as_str().unwrap();
            assert!(
                note.ends_with("the whole report is artifacts/check/1/r.json"),
                "{note}"
            );
            assert!(note.contains("123456 bytes"), "{note}");
            assert!(
                note.contains("the first 50 of 80 proposed goldens"),
                "{note}"
            );
            assert!(note.contains("extra"), "{note}");
            assert!(cut.get("extra").is_none());
            let cases = cut["cases"].as_array().unwrap();
            assert_eq!(cases.is_empty(), statuses.is_empty());
            if statuses.contains(&"failed") {
                assert_eq!(cases[0]["status"], "failed", "the failing case first");
            }
        }
    }
}
