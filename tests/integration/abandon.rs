//! `runs abandon`: a run waiting at a gate, or interrupted with its agent still alive, ends
//! `abandoned` — its processes stopped, every view saying so, its gates undecidable and
//! `resume` refused; a finished run and a run a live process drives are refused. And `runs clean
//! --all` keeps the journal's record of what it removes: a day reads the same after it.

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::kernel_support::{RunRepo, assert_contiguous, first_event};
use crate::support::{conductor, stderr_text, stdout_text};

/// Kills a pid on drop: what a failed test would otherwise leave running.
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.0), Signal::SIGKILL);
    }
}

/// A run of `gate.yaml` waiting at its blocking gate `review`.
fn waiting_run(repo: &RunRepo) -> String {
    let (run_id, result) = repo.run_exits(&repo.workflow("gate.yaml"), &[], 3);
    assert_eq!(result["state"], "waiting");
    run_id
}

/// Asserts every view of the run says `abandoned`, with the reason given.
#[track_caller]
fn assert_abandoned_everywhere(repo: &RunRepo, run_id: &str, reason: &str) {
    let status: serde_json::Value = serde_json::from_slice(
        &repo
            .conductor_exits(&["status", run_id, "--json"], 0)
            .stdout,
    )
    .unwrap();
    assert_eq!(status["lifecycle_state"], "abandoned", "{status}");
    assert!(
        status["reason"].as_str().unwrap().contains(reason),
        "{status}"
    );
    let text = stdout_text(&repo.conductor_exits(&["status", run_id], 0));
    assert!(text.contains("  state: abandoned\n"), "{text}");
    let listed: serde_json::Value =
        serde_json::from_slice(&repo.conductor_exits(&["runs", "list", "--json"], 0).stdout)
            .unwrap();
    let run = listed["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|run| run["run_id"] == run_id)
        .unwrap_or_else(|| panic!("{run_id} not listed: {listed}"));
    assert_eq!(run["state"], "abandoned", "{run}");
    let table = stdout_text(&repo.conductor_exits(&["runs", "list"], 0));
    assert!(
        table
            .lines()
            .any(|line| line.contains(run_id) && line.contains("abandoned")),
        "{table}"
    );
    let shown = stdout_text(&repo.conductor_exits(&["runs", "show", run_id], 0));
    assert!(shown.contains("abandoned"), "{shown}");
    let final_state =
        std::fs::read_to_string(repo.run_dir(run_id).join("final-state.txt")).unwrap();
    assert!(
        final_state.starts_with("abandoned operator "),
        "{final_state}"
    );
    let metadata = repo.json(run_id, "metadata.json");
    assert_eq!(metadata["termination"]["kind"], "abandoned", "{metadata}");
    assert!(metadata["ended_at"].is_string(), "{metadata}");
    let state = repo.json(run_id, "state.json");
    assert_eq!(state["phase"]["phase"], "finished", "{state}");
    assert_eq!(state["phase"]["end"], "abandoned", "{state}");
}

/// Asserts `resume` and gate decisions are refused (exit 2), saying the run was abandoned,
/// and that `gate list` does not list it.
#[track_caller]
fn assert_ended_for_good(repo: &RunRepo, run_id: &str) {
    let resumed = repo.conductor_exits(&["resume", run_id], 2);
    assert!(
        stderr_text(&resumed).contains(&format!("run `{run_id}` was abandoned")),
        "{}",
        stderr_text(&resumed)
    );
    let approved = repo.conductor_exits(&["gate", "approve", run_id, "--as", "alice"], 2);
    assert!(
        stderr_text(&approved).contains("its gates can no longer be decided"),
        "{}",
        stderr_text(&approved)
    );
    let shown = repo.conductor_exits(&["gate", "show", run_id], 2);
    assert!(
        stderr_text(&shown).contains("its gates can no longer be decided"),
        "{}",
        stderr_text(&shown)
    );
    let gates = stdout_text(&repo.conductor_exits(&["gate", "list"], 0));
    assert!(!gates.contains(run_id), "{gates}");
    let again = repo.conductor_exits(&["runs", "abandon", run_id], 2);
    assert!(
        stderr_text(&again).contains("was abandoned"),
        "{}",
        stderr_text(&again)
    );
}

#[test]
fn a_run_waiting_at_a_gate_is_abandoned_for_good() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo);

    let output = repo.conductor_exits(
        &[
            "runs",
            "abandon",
            &run_id,
            "--reason",
            "superseded",
            "--as",
            "carol",
        ],
        0,
    );

    assert!(
        stdout_text(&output).contains("abandoned by carol (superseded)"),
        "{}",
        stdout_text(&output)
    );
    assert_abandoned_everywhere(&repo, &run_id, "abandoned by carol (superseded)");
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let abandoned = first_event(&events, "run_abandoned");
    assert_eq!(abandoned["by"], "carol");
    assert_eq!(abandoned["reason"], "superseded");
    assert_eq!(abandoned["was"], "waiting");
    assert_eq!(abandoned["step_id"], "review");
    assert_eq!(events.last().unwrap()["event_type"], "run_abandoned");
    assert_ended_for_good(&repo, &run_id);
}

#[test]
fn an_interrupted_run_is_abandoned_and_its_leftover_agent_stopped() {
    let (repo, run_id, pid) = crate::resume_orphans::killed_while_tagging();
    let _cleanup = KillOnDrop(pid);
    assert!(
        crate::runner_support::is_alive(pid),
        "the agent outlived its conductor"
    );

    let output = repo.conductor(&["runs", "abandon", &run_id]);

    assert_eq!(output.status.code(), Some(0), "{}", stderr_text(&output));
    assert!(
        !crate::runner_support::is_alive(pid),
        "the leftover agent {pid} outlived `runs abandon`"
    );
    assert!(
        stderr_text(&output).contains(&pid.to_string()),
        "the pid stopped is said: {}",
        stderr_text(&output)
    );
    let by = std::env::var("USER").unwrap_or_else(|_| "operator".into());
    assert_abandoned_everywhere(&repo, &run_id, &format!("abandoned by {by}"));
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let abandoned = first_event(&events, "run_abandoned");
    assert_eq!(abandoned["by"], by.as_str());
    assert_eq!(abandoned["was"], "interrupted");
    assert_eq!(abandoned["step_id"], "agent");
    assert_eq!(abandoned["visit"], 1);
    assert!(abandoned.get("reason").is_none(), "{abandoned}");
    assert!(
        abandoned["stopped_pids"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!(pid)),
        "{abandoned}"
    );
    assert_ended_for_good(&repo, &run_id);
}

#[test]
fn a_finished_run_is_not_abandoned() {
    let repo = RunRepo::new();
    let (run_id, _) = repo.run_exits(&repo.workflow("linear.yaml"), &[], 0);
    let before = std::fs::read(repo.run_dir(&run_id).join("events.ndjson")).unwrap();

    let refused = repo.conductor_exits(&["runs", "abandon", &run_id], 2);

    assert!(
        stderr_text(&refused).contains(&format!("run `{run_id}` already ended (success")),
        "{}",
        stderr_text(&refused)
    );
    assert_eq!(
        std::fs::read(repo.run_dir(&run_id).join("events.ndjson")).unwrap(),
        before,
        "nothing recorded"
    );
    let status: serde_json::Value = serde_json::from_slice(
        &repo
            .conductor_exits(&["status", &run_id, "--json"], 0)
            .stdout,
    )
    .unwrap();
    assert_eq!(status["lifecycle_state"], "completed");
}

/// A run whose agent works until the test says (it reports through a FIFO that it started):
/// abandoning it while its conductor lives is refused; once the conductor is Ctrl-C'd, the
/// interrupted run is abandoned.
#[test]
fn a_run_its_driver_still_drives_is_refused_until_that_driver_is_stopped() {
    let (repo, child, run_id) = crate::kernel_interrupt::run_with_a_working_agent();
    let driver = child.id() as i32;
    let _cleanup = KillOnDrop(driver);

    let refused = repo.conductor_exits(&["runs", "abandon", &run_id], 2);

    let stderr = stderr_text(&refused);
    assert!(
        stderr.contains(&format!(
            "cannot abandon run `{run_id}`: run is being driven by process {driver}"
        )) && stderr.contains("Ctrl-C"),
        "{stderr}"
    );
    assert!(
        !repo
            .events(&run_id)
            .iter()
            .any(|event| event["event_type"] == "run_abandoned"),
        "nothing recorded"
    );

    kill(Pid::from_raw(driver), Signal::SIGINT).unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130), "{}", stderr_text(&output));
    repo.conductor_exits(&["runs", "abandon", &run_id, "--reason", "not needed"], 0);
    let by = std::env::var("USER").unwrap_or_else(|_| "operator".into());
    assert_abandoned_everywhere(&repo, &run_id, &format!("abandoned by {by} (not needed)"));
    assert_ended_for_good(&repo, &run_id);
}

/// The journal of today as Markdown and JSON.
fn journal_of(repo: &RunRepo, day: &str) -> (Vec<u8>, Vec<u8>) {
    let markdown = repo.conductor_exits(&["journal", "--date", day], 0).stdout;
    let json = repo
        .conductor_exits(&["journal", "--date", day, "--format", "json"], 0)
        .stdout;
    (markdown, json)
}

#[test]
fn a_days_journal_reads_the_same_after_runs_clean_all() {
    let repo = RunRepo::new();
    // A run approved at its gate (with a queued review), a failed run (a policy violation, a
    // planner assessment, a rollback) and an abandoned run.
    let approved = waiting_run(&repo);
    repo.conductor_exits(
        &[
            "gate",
            "approve",
            &approved,
            "--as",
            "alice",
            "--comment",
            "ok",
            "--resume",
        ],
        0,
    );
    let (failed, _) = repo.run_exits(&repo.workflow("unsafe.yaml"), &[], 1);
    let abandoned = waiting_run(&repo);
    repo.conductor_exits(
        &["runs", "abandon", &abandoned, "--reason", "superseded"],
        0,
    );
    let today = jiff::Timestamp::now().strftime("%Y-%m-%d").to_string();
    let (markdown, json) = journal_of(&repo, &today);
    let text = String::from_utf8(markdown.clone()).unwrap();
    let abandoned_section = text
        .split("## Abandoned\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .unwrap_or_else(|| panic!("no Abandoned section:\n{text}"));
    assert!(
        abandoned_section.contains(&abandoned) && abandoned_section.contains("superseded"),
        "{text}"
    );
    // Neither in progress nor waiting for a review: its work is thrown away.
    for section in ["## In Progress\n", "## Pending Review\n"] {
        let listed = text.split(section).nth(1).unwrap();
        let listed = listed.split("\n## ").next().unwrap();
        assert!(!listed.contains(&abandoned), "{section}{text}");
    }
    assert!(text.contains(&failed) && text.contains(&approved), "{text}");
    let data: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(data["abandoned"][0]["state"], "abandoned", "{data}");
    assert_eq!(data["policy_violations"].as_array().unwrap().len(), 1);
    assert!(!data["planner_assessments"].as_array().unwrap().is_empty());

    let cleaned = repo.conductor_exits(&["runs", "clean", "--all"], 0);

    for run_id in [&approved, &failed, &abandoned] {
        assert!(
            !repo.run_dir(run_id).exists(),
            "{run_id} removed: {}",
            stdout_text(&cleaned)
        );
    }
    let (markdown_after, json_after) = journal_of(&repo, &today);
    assert_eq!(
        String::from_utf8(markdown_after).unwrap(),
        text,
        "the Markdown journal"
    );
    assert_eq!(
        String::from_utf8(json_after).unwrap(),
        String::from_utf8(json).unwrap(),
        "the JSON journal"
    );
    // Each kept record matches its published schema.
    let schema: serde_json::Value =
        serde_json::from_slice(&repo.conductor_exits(&["schema", "run-history"], 0).stdout)
            .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    for run_id in [&approved, &failed, &abandoned] {
        let path = repo.path().join(format!(".tnh/history/{run_id}.json"));
        let record: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert!(validator.is_valid(&record), "{record}");
    }
    // Another clean changes nothing of it.
    repo.conductor_exits(&["runs", "clean", "--all"], 0);
    assert_eq!(journal_of(&repo, &today).0, markdown);
}

/// A `runs abandon` killed right after it recorded its event, before its checkpoint: the
/// operator's decision stands — the next command that would continue or decide the run ends
/// it `abandoned` and refuses, with the one event recorded.
#[test]
fn an_abandon_killed_after_its_event_still_ends_the_run() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo);
    let next = repo.events(&run_id).len() + 1;
    let killed = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args([
            "runs",
            "abandon",
            &run_id,
            "--as",
            "carol",
            "--reason",
            "superseded",
        ])
        .env("TNH_TEST_KILL_AT_EVENT", next.to_string())
        .output()
        .unwrap();
    assert_eq!(killed.status.code(), None, "{}", stderr_text(&killed));
    assert_eq!(
        repo.json(&run_id, "state.json")["phase"]["phase"],
        "waiting"
    );

    let refused = repo.conductor_exits(&["gate", "approve", &run_id, "--as", "alice"], 2);

    assert!(
        stderr_text(&refused).contains("was abandoned by carol (superseded)"),
        "{}",
        stderr_text(&refused)
    );
    assert_abandoned_everywhere(&repo, &run_id, "abandoned by carol (superseded)");
    assert_ended_for_good(&repo, &run_id);
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let count = events
        .iter()
        .filter(|event| event["event_type"] == "run_abandoned")
        .count();
    assert_eq!(count, 1, "one decision, one event");
}
