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
    let output = repo.conductor_exits(&["journal", "--date", &today], 0);
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
fn the_journal_lists_a_killed_run_under_blockers_and_says_how_to_continue() {
    let repo = RunRepo::new();
    let workflow = repo.workflow("crash.yaml");
    repo.run_killed_at(&workflow, 8);
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

    let run_id = run_dir.file_name().unwrap().to_str().unwrap().to_owned();
    // A run that needs `resume` is a blocker, not work in progress.
    let blockers = journal
        .split("## Blockers & Decisions Needed")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .unwrap();
    assert!(
        blockers.contains(&format!(
            "- {run_id} (crash.v1) stopped: the driving process is gone; `tnh-conductor resume` continues the run"
        )),
        "{journal}"
    );
    let in_progress = journal.split("## In Progress").nth(1).unwrap();
    let in_progress = in_progress.split("\n## ").next().unwrap();
    assert!(!in_progress.contains(&run_id), "{journal}");
    let status = stdout_text(&repo.conductor(&["status", &run_id, "--json"]));
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["lifecycle_state"], "blocked", "{status}");
    assert_eq!(status["pid"], serde_json::Value::Null);
}

/// One damaged line of a run's event log hides nothing after it: the journal says the log is
/// damaged and still lists the run's policy violation; `runs show` and `runs events` print
/// what they can read, then fail naming the line.
#[test]
fn a_damaged_event_line_is_reported_and_hides_nothing_after_it() {
    let repo = RunRepo::new();
    let (code, result, _) = repo.run(&repo.workflow("unsafe.yaml"), &[]);
    assert_eq!(code, Some(1), "{result}");
    let run_id = result["run_id"].as_str().unwrap().to_owned();
    let events_path = repo.run_dir(&run_id).join("events.ndjson");
    let text = std::fs::read_to_string(&events_path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut damaged = lines.clone();
    damaged[1] = "{ this is not an event";
    std::fs::write(&events_path, format!("{}\n", damaged.join("\n"))).unwrap();

    let journal = repo.conductor(&["journal", "--format", "json"]);
    let data: serde_json::Value = serde_json::from_slice(&journal.stdout).unwrap();
    let blockers = data["blockers"].to_string();
    assert!(
        blockers.contains("its event log is damaged") && blockers.contains("line 2"),
        "{blockers}"
    );
    assert_eq!(data["policy_violations"].as_array().unwrap().len(), 1);

    let show = repo.conductor(&["runs", "show", &run_id]);
    assert_eq!(show.status.code(), Some(4));
    assert!(
        stdout_text(&show).contains("policy violation — forbidden path"),
        "{}",
        stdout_text(&show)
    );
    assert!(stderr_text(&show).contains("line 2: not a valid event line"));
    assert!(
        !stderr_text(&show).contains("more damaged"),
        "the gap the bad line leaves is not a second problem: {}",
        stderr_text(&show)
    );
    let events = repo.conductor(&["runs", "events", &run_id]);
    assert_eq!(events.status.code(), Some(4));
    assert_eq!(stdout_text(&events).lines().count(), lines.len() - 1);
}

/// `journal --since` a day after today printed an
/// inverted range ("2099-01-01 to <today>") and exited 0; it is a usage error.
#[test]
fn a_since_day_after_today_is_refused() {
    let repo = RunRepo::new();
    let output = repo.conductor(&["journal", "--since", "2099-01-01"]);
    assert_eq!(output.status.code(), Some(2), "{}", stdout_text(&output));
    assert!(
        stderr_text(&output).contains("--since 2099-01-01 is after today"),
        "{}",
        stderr_text(&output)
    );
    repo.conductor_exits(&["journal", "--since", "2020-01-01"], 0);
}

/// `journal --date` a day after today printed
/// a journal listing today's waiting runs as in progress on that day, while `--since` refused
/// it. Both refuse a day after today (exit 2, nothing printed on stdout).
#[test]
fn a_date_after_today_is_refused_like_since() {
    let repo = RunRepo::new();
    let (code, waiting, output) = repo.run(&repo.workflow("gate.yaml"), &[]);
    assert_eq!(code, Some(3), "{waiting}{}", stderr_text(&output));
    let output = repo.conductor(&["journal", "--date", "2099-01-01"]);
    assert_eq!(output.status.code(), Some(2), "{}", stdout_text(&output));
    assert!(stdout_text(&output).is_empty(), "{}", stdout_text(&output));
    assert!(
        stderr_text(&output).contains("--date 2099-01-01 is after today"),
        "{}",
        stderr_text(&output)
    );
    let today = jiff::Timestamp::now().strftime("%Y-%m-%d").to_string();
    let output = repo.conductor_exits(&["journal", "--date", &today], 0);
    assert!(
        stdout_text(&output).contains(waiting["run_id"].as_str().unwrap()),
        "{}",
        stdout_text(&output)
    );
}

/// The journal chose runs by the day they started only, so
/// a gate waiting since the evening before was missing from today's journal, and a run that
/// ended the next day was reported as completed on the day it started. A run belongs to every
/// day from its start to its end (to today while it goes on); on a day before its end it is in
/// progress, saying when it ended.
#[test]
fn a_run_shows_on_every_day_it_went_on() {
    let repo = RunRepo::new();
    let (code, finished, output) = repo.run(&repo.workflow("linear.yaml"), &[]);
    assert_eq!(code, Some(0), "{finished}{}", stderr_text(&output));
    let finished = finished["run_id"].as_str().unwrap().to_owned();
    let (code, waiting, output) = repo.run(&repo.workflow("gate.yaml"), &[]);
    assert_eq!(code, Some(3), "{waiting}{}", stderr_text(&output));
    let waiting = waiting["run_id"].as_str().unwrap().to_owned();
    let redate = |run_id: &str, started: &str, ended: Option<&str>| {
        let path = repo.run_dir(run_id).join("metadata.json");
        let mut metadata: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        metadata["started_at"] = started.into();
        if let Some(ended) = ended {
            metadata["ended_at"] = ended.into();
        }
        std::fs::write(&path, metadata.to_string()).unwrap();
    };
    redate(
        &finished,
        "2026-01-01T23:50:00Z",
        Some("2026-01-02T00:10:00Z"),
    );
    redate(&waiting, "2026-01-01T23:55:00Z", None);
    let journal = |day: &str| -> serde_json::Value {
        let output = repo.conductor_exits(&["journal", "--date", day, "--format", "json"], 0);
        serde_json::from_slice(&output.stdout).unwrap()
    };
    let ids = |entries: &serde_json::Value| -> Vec<String> {
        entries
            .as_array()
            .unwrap()
            .iter()
            .map(|entry| entry["run_id"].as_str().unwrap().to_owned())
            .collect()
    };

    let first = journal("2026-01-01");
    assert!(ids(&first["completed"]).is_empty(), "{first}");
    assert_eq!(
        ids(&first["in_progress"]),
        [finished.clone(), waiting.clone()]
    );
    assert!(
        first["in_progress"][0]["detail"]
            .as_str()
            .unwrap()
            .starts_with("went on past 2026-01-01; ended 2026-01-02T00:10:00Z (completed)"),
        "{first}"
    );
    let second = journal("2026-01-02");
    assert_eq!(ids(&second["completed"]), [finished.as_str()]);
    assert_eq!(ids(&second["in_progress"]), [waiting.as_str()]);
    let today = jiff::Timestamp::now().strftime("%Y-%m-%d").to_string();
    let now = journal(&today);
    assert!(ids(&now["completed"]).is_empty(), "{now}");
    assert_eq!(ids(&now["in_progress"]), [waiting.as_str()]);
    assert!(
        journal("2025-12-31")["in_progress"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}
