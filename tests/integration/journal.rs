//! The review journal of a set of real run directories: completed, failed, waiting and queued
//! runs, planner assessments and provenance, rendered deterministically.

use crate::kernel_support::RunRepo;
use crate::support::{fixture, stderr_text, stdout_text};

#[test]
fn the_journal_of_a_day_of_runs() {
    let repo = RunRepo::new();
    for (name, expected) in [
        ("linear.yaml", 0),
        ("fix_loop.yaml", 0),
        ("unsafe.yaml", 1),
        ("gate.yaml", 3),
    ] {
        let (code, result, output) = repo.run(&repo.workflow(name), &[]);
        assert_eq!(
            code,
            Some(expected),
            "{name}: {result}{}",
            stderr_text(&output)
        );
    }
    let today = jiff::Timestamp::now().strftime("%Y-%m-%d").to_string();
    let output = repo.conductor(&["journal", "--date", &today]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr_text(&output));
    let markdown = stdout_text(&output);
    let json = repo.conductor(&["journal", "--date", &today, "--format", "json"]);
    let data: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(data["completed"].as_array().unwrap().len(), 2);
    assert_eq!(
        data["pending_review"].as_array().unwrap().len(),
        2,
        "the waiting gate and the queued review"
    );
    let violations = data["policy_violations"].as_array().unwrap();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert_eq!(violations[0]["step"], "implement #1");
    assert_eq!(violations[0]["violation"]["rule"], ".github/**");
    insta::with_settings!({filters => vec![
        (r"\d{8}T\d{6}Z-[0-9a-f]{6}", "[RUN_ID]"),
        (r"\d{4}-\d{2}-\d{2}", "[DATE]"),
    ]}, {
        insta::assert_snapshot!(markdown);
    });
    // Another day has no runs.
    let empty = stdout_text(&repo.conductor(&["journal", "--date", "2001-01-01"]));
    assert!(empty.contains("## Completed Tasks\n- none"), "{empty}");
    let _ = fixture;
}
