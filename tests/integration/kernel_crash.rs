//! Killed at any instant (SIGKILL right after each event is written), a run resumes to the same
//! terminal state and worktree as an uninterrupted run, with contiguous events and no step
//! completed twice — for a linear workflow at every event, and for the builder loop (fix loop,
//! queued review) at 50 random events.

use std::collections::BTreeSet;
use std::path::Path;

use crate::kernel_support::{RunRepo, assert_contiguous, event_types, first_event};
use crate::support::{conductor, git_in, stderr_text};

/// The tree of a worktree's files (untracked included), without touching its index.
fn tree_of(worktree: &Path) -> String {
    let index = worktree.parent().unwrap().join(format!(
        "{}.tree-index",
        worktree.file_name().unwrap().to_string_lossy()
    ));
    let run = |args: &[&str]| {
        let output = crate::support::git_command(worktree)
            .env("GIT_INDEX_FILE", &index)
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    };
    run(&["add", "-A"]);
    let tree = run(&["write-tree"]);
    let _ = std::fs::remove_file(index);
    tree
}

struct Finished {
    final_state: String,
    tree: String,
    events: Vec<serde_json::Value>,
}

fn finish(repo: &RunRepo, run_id: &str, worktree: &Path) -> Finished {
    Finished {
        final_state: std::fs::read_to_string(repo.run_dir(run_id).join("final-state.txt")).unwrap(),
        tree: tree_of(worktree),
        events: repo.events(run_id),
    }
}

/// A workflow fixture and what its repository needs.
#[derive(Clone, Copy)]
struct Scenario {
    workflow: &'static str,
    validators: &'static str,
}

const CRASH: Scenario = Scenario {
    workflow: "crash.yaml",
    validators: "",
};

/// The builder loop: its `tests` validator fails until the fix step writes `working`.
const BUILDER_LOOP: Scenario = Scenario {
    workflow: "builder_loop.yaml",
    validators: "validators:\n  tests: {argv: [sh, -c, \"grep -q working feature.txt\"]}\n",
};

fn repo_for(scenario: Scenario) -> RunRepo {
    let repo = RunRepo::new();
    let config = repo.path().join(".tnh/config.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{text}{}", scenario.validators)).unwrap();
    repo
}

fn uninterrupted(scenario: Scenario) -> Finished {
    let repo = repo_for(scenario);
    let (code, result, output) = repo.run(&repo.workflow(scenario.workflow), &[]);
    assert_eq!(code, Some(0), "{result}{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap().to_owned();
    finish(
        &repo,
        &run_id,
        Path::new(result["worktree"].as_str().unwrap()),
    )
}

/// Runs with the kernel killed right after event `seq`; returns the repository and the run id.
fn killed_at(scenario: Scenario, seq: u64) -> (RunRepo, String) {
    let repo = repo_for(scenario);
    let workflow = repo.workflow(scenario.workflow);
    let output = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["run", "--json"])
        .arg(&workflow)
        .env("TNH_TEST_KILL_AT_EVENT", seq.to_string())
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        None,
        "kill point {seq}: the kernel was not killed: {}",
        stderr_text(&output)
    );
    let run_id = std::fs::read_dir(repo.path().join(".tnh/run"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name()
        .to_string_lossy()
        .into_owned();
    (repo, run_id)
}

/// Runs with the kernel killed right after event `seq`, then resumes; returns the end.
fn killed_then_resumed(scenario: Scenario, seq: u64) -> Finished {
    let (repo, run_id) = killed_at(scenario, seq);
    let status = repo.conductor(&["status", "--json", &run_id]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert!(
        status["lifecycle_state"] == "blocked" || status["lifecycle_state"] == "completed",
        "kill point {seq}: {status}"
    );
    let resumed = repo.conductor(&["resume", "--json", &run_id]);
    let result: serde_json::Value = serde_json::from_slice(&resumed.stdout).unwrap_or_default();
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "kill point {seq}: {result}{}",
        stderr_text(&resumed)
    );
    let worktree = repo.path().join(".tnh/worktrees").join(&run_id);
    assert_eq!(
        git_in(repo.path(), &["rev-parse", "--abbrev-ref", "HEAD"]),
        "main",
        "the operator's branch moved"
    );
    finish(&repo, &run_id, &worktree)
}

#[test]
fn a_run_killed_at_any_event_resumes_to_the_same_end() {
    let reference = uninterrupted(CRASH);
    let total = reference.events.len() as u64;
    assert!(
        total >= 30,
        "the workflow should produce enough kill points, got {total} events"
    );
    // Every event but the last is a kill point (the last ends the run): well over 20 instants,
    // spread over agent steps, the evaluation and the STOP.
    let points: Vec<u64> = (1..total).collect();
    assert!(points.len() >= 20);
    check_kill_points(CRASH, &reference, &points);
}

/// The builder loop (a failing validation, a `partial` evaluation, a fix, a passing
/// validation, `success`, a queued review) killed at 50 instants drawn at random (a fixed seed,
/// so a failure reproduces) from its event sequence.
#[test]
fn the_builder_loop_killed_at_50_random_instants_resumes_to_the_same_end() {
    let reference = uninterrupted(BUILDER_LOOP);
    let steps: Vec<&str> = reference
        .events
        .iter()
        .filter(|event| event["event_type"] == "step_completed")
        .map(|event| event["step_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        steps,
        [
            "implement",
            "validate",
            "evaluate",
            "fix",
            "validate",
            "evaluate",
            "review"
        ],
        "the reference run goes through the fix loop"
    );
    let total = reference.events.len() as u64;
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let points: Vec<u64> = (0..50)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            1 + state % (total - 1)
        })
        .collect();
    check_kill_points(BUILDER_LOOP, &reference, &points);
}

fn check_kill_points(scenario: Scenario, reference: &Finished, points: &[u64]) {
    for &seq in points {
        let resumed = killed_then_resumed(scenario, seq);
        assert_eq!(
            resumed.final_state, reference.final_state,
            "kill point {seq}"
        );
        assert_eq!(
            resumed.tree, reference.tree,
            "kill point {seq}: the worktree differs"
        );
        assert_contiguous(&resumed.events);
        let mut completed = BTreeSet::new();
        for event in resumed
            .events
            .iter()
            .filter(|event| event["event_type"] == "step_completed")
        {
            let key = (
                event["step_id"].as_str().unwrap().to_owned(),
                event["visit"].as_u64().unwrap(),
            );
            assert!(
                completed.insert(key.clone()),
                "kill point {seq}: {key:?} completed twice"
            );
        }
        let types: Vec<&str> = resumed
            .events
            .iter()
            .map(|event| event["event_type"].as_str().unwrap())
            .collect();
        assert_eq!(
            types
                .iter()
                .filter(|kind| **kind == "run_completed")
                .count(),
            1,
            "kill point {seq}: {types:?}"
        );
        assert!(types.contains(&"run_resumed"), "kill point {seq}");
    }
}

/// The sequence number of the `n`-th event of a type in a finished reference run.
fn seq_of(events: &[serde_json::Value], event_type: &str, nth: usize) -> u64 {
    events
        .iter()
        .filter(|event| event["event_type"] == event_type)
        .nth(nth)
        .unwrap()["seq"]
        .as_u64()
        .unwrap()
}

#[test]
fn resume_refuses_a_worktree_edited_by_hand_unless_the_drift_is_accepted() {
    let reference = uninterrupted(CRASH);
    // Killed as the second step starts: the first step's result is checkpointed.
    let kill_at = seq_of(&reference.events, "step_started", 1);
    let (repo, run_id) = killed_at(CRASH, kill_at);
    let worktree = repo.path().join(".tnh/worktrees").join(&run_id);
    std::fs::write(worktree.join("hello.txt"), "edited by hand\n").unwrap();
    let events_before = repo.events(&run_id).len();

    let refused = repo.conductor(&["resume", &run_id]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr_text(&refused));
    assert!(
        stderr_text(&refused).contains("the worktree changed since the run's last checkpoint"),
        "{}",
        stderr_text(&refused)
    );
    assert!(stderr_text(&refused).contains("--accept-drift"));
    assert_eq!(
        repo.events(&run_id).len(),
        events_before,
        "a refused resume must record nothing"
    );

    let accepted = repo.conductor(&["resume", "--accept-drift", &run_id]);
    assert_eq!(
        accepted.status.code(),
        Some(0),
        "{}",
        stderr_text(&accepted)
    );
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let drift = first_event(&events, "drift_accepted");
    assert_ne!(drift["recorded"]["tree"], drift["found"]["tree"]);
    assert_eq!(
        std::fs::read_to_string(worktree.join("hello.txt")).unwrap(),
        "edited by hand\nmore\n"
    );
}

#[test]
fn a_visit_started_after_the_last_checkpoint_is_recovered_from_its_event() {
    let reference = uninterrupted(CRASH);
    // Killed as the second step starts: only its `step_started` event says it began.
    let kill_at = seq_of(&reference.events, "step_started", 1);
    let started = &reference.events[usize::try_from(kill_at).unwrap() - 1];
    let (step, visit) = (
        started["step_id"].clone(),
        started["visit"].as_u64().unwrap(),
    );
    let (repo, run_id) = killed_at(CRASH, kill_at);

    let resumed = repo.conductor(&["resume", &run_id]);
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr_text(&resumed));
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let of_step = |event_type: &str| -> Vec<u64> {
        events
            .iter()
            .filter(|event| event["event_type"] == event_type && event["step_id"] == step)
            .map(|event| event["visit"].as_u64().unwrap())
            .collect()
    };
    // The started visit is recorded as interrupted and the step runs again as the next visit,
    // never as the same visit twice.
    assert_eq!(of_step("step_interrupted"), [visit]);
    assert_eq!(of_step("step_started"), [visit, visit + 1]);
    assert_eq!(of_step("step_completed"), [visit + 1]);
}

#[test]
fn a_lost_status_file_reads_as_blocked_and_resume_rewrites_it() {
    let reference = uninterrupted(CRASH);
    let kill_at = seq_of(&reference.events, "step_completed", 0);
    let (repo, run_id) = killed_at(CRASH, kill_at);
    // `status.json` is not fsynced: a power loss can leave it empty.
    let status_file = repo.run_dir(&run_id).join("status.json");
    std::fs::write(&status_file, "").unwrap();

    let status = repo.conductor(&["status", "--json", &run_id]);
    assert_eq!(status.status.code(), Some(0), "{}", stderr_text(&status));
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["lifecycle_state"], "blocked", "{status}");
    assert!(
        status["reason"].as_str().unwrap().contains("resume"),
        "{status}"
    );
    // Where the run is comes from its last checkpoint.
    let state = repo.json(&run_id, "state.json");
    assert!(state["phase"]["visit"].is_u64(), "{state}");
    assert_eq!(
        status["current_step_id"], state["phase"]["step_id"],
        "{status}"
    );
    assert_eq!(status["visit"], state["phase"]["visit"], "{status}");

    let resumed = repo.conductor(&["resume", &run_id]);
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr_text(&resumed));
    let rewritten: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&status_file).unwrap()).unwrap();
    assert_eq!(rewritten["lifecycle_state"], "completed");
}

#[test]
fn resume_records_a_workflow_file_that_changed_since_the_run_started() {
    let reference = uninterrupted(CRASH);
    assert!(
        !event_types(&reference.events).contains(&"workflow_changed".to_owned()),
        "an unchanged workflow records no change"
    );
    let kill_at = seq_of(&reference.events, "step_completed", 0);
    let (repo, run_id) = killed_at(CRASH, kill_at);
    let workflow = repo.workflow("crash.yaml");
    let text = std::fs::read_to_string(&workflow).unwrap();
    std::fs::write(
        &workflow,
        format!("{text}# edited while the run was stopped\n"),
    )
    .unwrap();

    let resumed = repo.conductor(&["resume", &run_id]);
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr_text(&resumed));
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let types = event_types(&events);
    let resumed_at = types.iter().position(|kind| kind == "run_resumed").unwrap();
    assert_eq!(types[resumed_at + 1], "workflow_changed", "{types:?}");
    let changed = &events[resumed_at + 1];
    assert_eq!(
        changed["path"].as_str().map(std::path::Path::new),
        Some(workflow.canonicalize().unwrap().as_path())
    );
}

#[test]
fn resume_records_a_configuration_that_changed_since_the_run_started() {
    let reference = uninterrupted(CRASH);
    assert!(
        !event_types(&reference.events).contains(&"config_changed".to_owned()),
        "an unchanged configuration records no change"
    );
    let kill_at = seq_of(&reference.events, "step_completed", 0);
    let (repo, run_id) = killed_at(CRASH, kill_at);
    let config = repo.path().join(".tnh/config.yaml");
    let recorded = repo.json(&run_id, "metadata.json")["config_sha256"].clone();
    assert!(recorded.is_string(), "{recorded}");
    // An agent (or a person) edits the validators the rest of the run will use.
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("{text}validators:\n  tests: {{ argv: [\"true\"] }}\n"),
    )
    .unwrap();

    let resumed = repo.conductor(&["resume", &run_id]);

    assert_eq!(resumed.status.code(), Some(0), "{}", stderr_text(&resumed));
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let changed = first_event(&events, "config_changed");
    assert_eq!(changed["recorded_sha256"], recorded);
    assert_eq!(
        changed["path"].as_str().map(std::path::Path::new),
        Some(config.as_path())
    );
    assert_eq!(
        repo.json(&run_id, "metadata.json")["config_sha256"],
        changed["found_sha256"]
    );
}
