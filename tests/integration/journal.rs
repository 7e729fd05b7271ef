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

/// A run whose driver was killed is not shown as running: the morning's reader learns that
/// it stopped and how to continue it, whatever process now has its old pid.
#[test]
fn the_journal_shows_a_killed_run_as_blocked_and_says_how_to_continue() {
    let repo = RunRepo::new();
    let workflow = repo.workflow("crash.yaml");
    let killed = crate::support::conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["run", "--json"])
        .arg(&workflow)
        .env("TNH_TEST_KILL_AT_EVENT", "8")
        .output()
        .unwrap();
    assert_eq!(killed.status.code(), None, "{}", stderr_text(&killed));
    let run_dir = std::fs::read_dir(repo.path().join(".tnh/run"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut status: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("status.json")).unwrap()).unwrap();
    assert_eq!(
        status["lifecycle_state"], "running",
        "as the driver left it"
    );
    // The dead driver's pid now names a live process (pids are reused): only the lock tells.
    status["pid"] = std::process::id().into();
    std::fs::write(run_dir.join("status.json"), status.to_string()).unwrap();

    let journal = stdout_text(&repo.conductor(&["journal"]));

    assert!(
        journal.contains(
            "`: blocked — the driving process is gone; `tnh-conductor resume` continues the run"
        ),
        "{journal}"
    );
    let run_id = run_dir.file_name().unwrap().to_str().unwrap().to_owned();
    let status = stdout_text(&repo.conductor(&["status", &run_id, "--json"]));
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["lifecycle_state"], "blocked", "{status}");
    assert_eq!(status["pid"], serde_json::Value::Null);
}
