//! Killed at any instant (SIGKILL right after each event is written), a run resumes to the same
//! terminal state and worktree as an uninterrupted run, with contiguous events and no step
//! completed twice — for a linear workflow at every event, and for the builder loop (fix loop,
//! queued review) at 50 random events.

use std::collections::BTreeSet;
use std::path::Path;

use crate::kernel_support::{RunRepo, assert_contiguous, event_types, first_event, real_git};
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
    let run_id = repo.only_run_id();
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
    // Every event is a kill point, the last (`run_completed`, before the final checkpoint)
    // included: well over 20 instants, spread over agent steps, the evaluation and the STOP.
    let points: Vec<u64> = (1..=total).collect();
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
        // A route the killed process recorded is not recorded again by the recovery.
        let mut routed = BTreeSet::new();
        for event in resumed
            .events
            .iter()
            .filter(|event| event["event_type"] == "route_selected")
        {
            let key = (
                event["step_id"].as_str().unwrap().to_owned(),
                event["visit"].as_u64().unwrap(),
            );
            assert!(
                routed.insert(key.clone()),
                "kill point {seq}: {key:?} routed twice"
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
        // The success STOP's commit is recorded once, whenever the process died around it.
        let committed = |events: &[serde_json::Value]| {
            events
                .iter()
                .filter(|event| event["event_type"] == "run_committed")
                .count()
        };
        assert_eq!(
            committed(&resumed.events),
            committed(&reference.events),
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

    let refused = repo.conductor_exits(&["resume", &run_id], 2);
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

    repo.conductor_exits(&["resume", "--accept-drift", &run_id], 0);
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

    repo.conductor_exits(&["resume", &run_id], 0);
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

    let status = repo.conductor_exits(&["status", "--json", &run_id], 0);
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

    repo.conductor_exits(&["resume", &run_id], 0);
    let rewritten: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&status_file).unwrap()).unwrap();
    assert_eq!(rewritten["lifecycle_state"], "completed");
}

/// A killed run showed as `running` in `status`, `runs list` and
/// `journal` whenever the pid in its `status.json` belonged to a live `tnh-conductor` process
/// (another run's driver, a `status --watch`, which can be given the dead driver's pid), even
/// though the kernel's lock table showed nobody holding the run's lock. The pid now counts only
/// when that table cannot be read.
#[test]
fn a_killed_run_whose_pid_went_to_another_conductor_reads_as_blocked() {
    let reference = uninterrupted(CRASH);
    let kill_at = seq_of(&reference.events, "step_started", 1);
    let (repo, run_id) = killed_at(CRASH, kill_at);
    // A live process named `tnh-conductor` that does not hold the run's lock: a copy of
    // `sleep` under that name, waiting until it is killed.
    let bin = repo.path().join(".git/other-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let other = bin.join("tnh-conductor");
    let sleep = ["/bin/sleep", "/usr/bin/sleep"]
        .into_iter()
        .find(|path| Path::new(path).is_file())
        .expect("sleep");
    std::fs::copy(sleep, &other).unwrap();
    let mut other = std::process::Command::new(&other)
        .arg("600")
        .spawn()
        .unwrap();
    let status_file = repo.run_dir(&run_id).join("status.json");
    let mut recorded: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&status_file).unwrap()).unwrap();
    assert_eq!(recorded["lifecycle_state"], "running", "{recorded}");
    recorded["pid"] = other.id().into();
    std::fs::write(&status_file, recorded.to_string()).unwrap();

    let status = repo.conductor(&["status", "--json", &run_id]);
    let listed = repo.conductor(&["runs", "list", "--json"]);
    let _ = other.kill();
    let _ = other.wait();

    assert_eq!(status.status.code(), Some(0), "{}", stderr_text(&status));
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["lifecycle_state"], "blocked", "{status}");
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.contains(&run_id) && listed.contains("blocked") && !listed.contains("running"),
        "{listed}"
    );
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

    repo.conductor_exits(&["resume", &run_id], 0);
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

/// `resume` of a run killed in an agent step checked the visit against the
/// guard state saved when the dead step started, so the operator's own work since the kill — a
/// commit on `main`, a new tag, a git configuration edit — was "put back" as the agent's
/// (`main` rewound under the operator's checkout, the tag deleted) and the run went on to exit
/// 0. Now `resume` refuses (exit 2), listing the changes and changing nothing; with
/// `--accept-drift` they are kept as the operator's and listed in a `repository_changes_kept`
/// event.
#[test]
fn resume_refuses_repository_changes_made_since_a_killed_agent_step_and_keeps_them_when_accepted() {
    let reference = uninterrupted(CRASH);
    let (repo, run_id) = killed_at(CRASH, seq_of(&reference.events, "runner_started", 1));
    let saved = repo
        .run_dir(&run_id)
        .join("artifacts/extend/1/guard_state.json");
    assert!(saved.is_file(), "killed while the agent step runs");
    // The operator's work in their own checkout while the run is stopped.
    let main_before = repo.repo.git(&["rev-parse", "main"]);
    repo.repo.write("morning.txt", "the operator's work\n");
    repo.repo.git(&["add", "morning.txt"]);
    repo.repo.git(&["commit", "-qm", "operator: morning work"]);
    repo.repo.git(&["tag", "v1.0"]);
    repo.repo.git(&["config", "operator.setting", "yes"]);
    let main = repo.repo.git(&["rev-parse", "main"]);
    assert_ne!(main, main_before);
    let events_before = repo.events(&run_id).len();

    let refused = repo.conductor(&["resume", &run_id]);

    let stderr = stderr_text(&refused);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    for listed in [
        format!(
            "`refs/heads/main` (protected branch): {}",
            &main_before[..12]
        ),
        format!("`refs/tags/v1.0` (tag): (none) → {}", &main[..12]),
        "git configuration file `config` changed".to_owned(),
        "--accept-drift".to_owned(),
        "--put-back".to_owned(),
    ] {
        assert!(stderr.contains(&listed), "{listed:?} not in {stderr}");
    }
    assert_eq!(repo.repo.git(&["rev-parse", "main"]), main, "nothing moved");
    assert_eq!(repo.repo.git(&["rev-parse", "v1.0"]), main);
    assert_eq!(repo.repo.git(&["config", "operator.setting"]), "yes");
    assert_eq!(
        repo.events(&run_id).len(),
        events_before,
        "nothing recorded"
    );
    assert!(saved.is_file(), "the visit is still to be checked");

    let accepted = repo.conductor(&["resume", "--accept-drift", &run_id]);

    assert_eq!(
        accepted.status.code(),
        Some(0),
        "{}",
        stderr_text(&accepted)
    );
    assert_eq!(repo.repo.git(&["rev-parse", "main"]), main, "main kept");
    assert_eq!(repo.repo.git(&["rev-parse", "v1.0"]), main, "tag kept");
    assert_eq!(repo.repo.git(&["config", "operator.setting"]), "yes");
    assert_eq!(
        repo.repo
            .git(&["status", "--porcelain", "--", "morning.txt"]),
        "",
        "the operator's checkout agrees with its HEAD"
    );
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let kept = first_event(&events, "repository_changes_kept");
    assert_eq!(
        (&kept["step_id"], &kept["visit"]),
        (&"extend".into(), &1.into())
    );
    let refs: Vec<&str> = kept["ref_changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|change| change["refname"].as_str().unwrap())
        .collect();
    assert_eq!(refs, ["refs/heads/main", "refs/tags/v1.0"], "{kept}");
    assert_eq!(kept["git_config_changed"], serde_json::json!(["config"]));
    assert!(
        !events
            .iter()
            .any(|event| event["event_type"] == "policy_violation"),
        "the operator's changes were charged to the agent"
    );
    let interrupted = first_event(&events, "step_interrupted");
    assert_eq!(
        interrupted["guard_report"]["ref_changes"],
        serde_json::json!([]),
        "{interrupted}"
    );
    assert_eq!(
        std::fs::read_to_string(repo.run_dir(&run_id).join("final-state.txt")).unwrap(),
        reference.final_state
    );
}

/// When the conductor is killed during `git worktree add`: before git made anything, or once
/// git made the branch and began the checkout (one tracked file not written yet).
#[derive(Clone, Copy, Debug)]
enum WorktreeKill {
    BeforeGit,
    HalfCheckedOut,
}

/// Runs `crash.yaml` in a repository holding a committed `kept.txt` that no step touches, with
/// a `git` on `PATH` that SIGKILLs the conductor (its parent) at `kill` during `git worktree
/// add`. Returns the repository and the run id of the run directory left behind (`None` when
/// none was).
fn killed_in_worktree_add(kill: WorktreeKill) -> (RunRepo, Option<String>) {
    let repo = RunRepo::new();
    repo.repo.write("kept.txt", "committed before the run\n");
    repo.repo.commit_all("a file no step touches");
    // Inside `.git`, where the operator's checkout does not see it.
    let bin = repo.path().join(".git/fake-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let real = real_git();
    let during = match kill {
        WorktreeKill::BeforeGit => "kill -9 $PPID; exit 1".to_owned(),
        WorktreeKill::HalfCheckedOut => format!(
            "\"{}\" \"$@\" || exit $?\n  eval \"path=\\${{$(($# - 1))}}\"\n  rm \"$path/kept.txt\"\n  kill -9 $PPID; exit 1",
            real.display()
        ),
    };
    let script = format!(
        "#!/bin/sh\nif [ \"$1\" = worktree ] && [ \"$2\" = add ]; then\n  {during}\nfi\nexec \"{}\" \"$@\"\n",
        real.display()
    );
    let git = bin.join("git");
    std::fs::write(&git, script).unwrap();
    std::fs::set_permissions(&git, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = std::env::join_paths(
        std::iter::once(bin).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let output = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["run", "--json"])
        .arg(repo.workflow("crash.yaml"))
        .env("PATH", path)
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        None,
        "{kill:?}: the conductor was not killed: {}",
        stderr_text(&output)
    );
    let run_id = std::fs::read_dir(repo.path().join(".tnh/run"))
        .ok()
        .and_then(|mut entries| entries.next())
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned());
    (repo, run_id)
}

/// A conductor killed while it creates the run's worktree leaves a run that `runs list` shows
/// and `resume` starts over — its worktree made again from scratch, its branch and `pre_run`
/// at the base commit — and that `runs clean --all` removes once it has ended: never a
/// worktree and `tnh/…` branch no command knows about.
#[test]
fn a_run_killed_while_its_worktree_is_created_is_listed_resumed_and_cleaned() {
    let reference = {
        let repo = RunRepo::new();
        repo.repo.write("kept.txt", "committed before the run\n");
        repo.repo.commit_all("a file no step touches");
        let (code, result, output) = repo.run(&repo.workflow("crash.yaml"), &[]);
        assert_eq!(code, Some(0), "{result}{}", stderr_text(&output));
        let run_id = result["run_id"].as_str().unwrap().to_owned();
        finish(
            &repo,
            &run_id,
            &repo.path().join(".tnh/worktrees").join(&run_id),
        )
    };
    for kill in [WorktreeKill::BeforeGit, WorktreeKill::HalfCheckedOut] {
        let (repo, run_id) = killed_in_worktree_add(kill);
        let run_id = run_id.unwrap_or_else(|| panic!("{kill:?}: no run directory was left"));
        let metadata = repo.json(&run_id, "metadata.json");
        let worktree = repo.path().join(".tnh/worktrees").join(&run_id);
        assert_eq!(
            metadata["worktree_path"].as_str().map(Path::new),
            Some(
                worktree
                    .canonicalize()
                    .unwrap_or(worktree.clone())
                    .as_path()
            ),
            "{kill:?}: {metadata}"
        );
        assert_eq!(
            metadata["branch"],
            format!("tnh/crash/{run_id}"),
            "{kill:?}"
        );
        if let WorktreeKill::HalfCheckedOut = kill {
            assert!(
                !worktree.join("kept.txt").exists(),
                "the checkout was cut short"
            );
        }
        let listed = repo.conductor(&["runs", "list", "--json"]);
        assert!(
            String::from_utf8_lossy(&listed.stdout).contains(&run_id),
            "{kill:?}: `runs list` does not show the run: {}",
            String::from_utf8_lossy(&listed.stdout)
        );
        let status = repo.conductor(&["status", "--json", &run_id]);
        let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
        assert_eq!(status["lifecycle_state"], "blocked", "{kill:?}: {status}");

        let resumed = repo.conductor(&["resume", "--json", &run_id]);
        assert_eq!(
            resumed.status.code(),
            Some(0),
            "{kill:?}: {}",
            stderr_text(&resumed)
        );
        let resumed = finish(&repo, &run_id, &worktree);
        assert_eq!(resumed.final_state, reference.final_state, "{kill:?}");
        assert_eq!(
            resumed.tree, reference.tree,
            "{kill:?}: the worktree differs"
        );
        assert_contiguous(&resumed.events);
        let types = event_types(&resumed.events);
        assert_eq!(types[0], "run_started", "{kill:?}: {types:?}");
        assert_eq!(
            types.iter().filter(|kind| *kind == "run_started").count(),
            1,
            "{kill:?}: {types:?}"
        );
        let base = repo.repo.git(&["rev-parse", "main"]);
        assert_eq!(resumed.events[0]["base_sha"], base.as_str(), "{kill:?}");
        assert_eq!(
            repo.json(&run_id, "metadata.json")["base_sha"],
            base.as_str()
        );
        assert_eq!(
            repo.repo
                .git(&["rev-parse", &format!("refs/tnh/runs/{run_id}/pre_run")]),
            base,
            "{kill:?}"
        );

        repo.conductor_exits(&["runs", "clean", "--all"], 0);
        assert!(!worktree.exists(), "{kill:?}: the worktree is left");
        assert_eq!(
            repo.repo.git(&["branch", "--list", "tnh/*"]),
            "",
            "{kill:?}"
        );
        assert!(!repo.run_dir(&run_id).exists(), "{kill:?}");
    }
}

/// A run whose `state.json` is gone after its first checkpoint is refused (exit 2, nothing
/// written): starting over from the entry step would run visits already recorded again under
/// the same numbers, over their artifacts.
#[test]
fn resume_refuses_a_run_whose_state_file_is_gone_after_its_first_checkpoint() {
    let reference = uninterrupted(CRASH);
    let kill_at = seq_of(&reference.events, "step_started", 1);
    let (repo, run_id) = killed_at(CRASH, kill_at);
    let run_dir = repo.run_dir(&run_id);
    std::fs::remove_file(run_dir.join("state.json")).unwrap();
    let events_before = std::fs::read(run_dir.join("events.ndjson")).unwrap();
    let manifest = run_dir.join("artifacts/write/1/manifest.json");
    let manifest_before = std::fs::read(&manifest).unwrap();

    let resumed = repo.conductor(&["resume", &run_id]);

    assert_eq!(resumed.status.code(), Some(2), "{}", stderr_text(&resumed));
    let stderr = stderr_text(&resumed);
    assert!(
        stderr.contains("state.json")
            && stderr.contains("went past its first checkpoint")
            && stderr.contains("`step_started` of `write` #1"),
        "{stderr}"
    );
    assert!(
        stderr.contains("put `"),
        "the hint says what to do: {stderr}"
    );
    assert_eq!(
        std::fs::read(run_dir.join("events.ndjson")).unwrap(),
        events_before,
        "nothing is recorded"
    );
    assert_eq!(std::fs::read(&manifest).unwrap(), manifest_before);
    assert!(!run_dir.join("state.json").exists());
}

/// A run killed before its first checkpoint (right after `run_started`) has no `state.json`
/// either: it starts over from its entry step.
#[test]
fn a_run_killed_before_its_first_checkpoint_starts_over() {
    let (repo, run_id) = killed_at(CRASH, 1);
    assert!(!repo.run_dir(&run_id).join("state.json").exists());
    repo.conductor_exits(&["resume", &run_id], 0);
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let types = event_types(&events);
    assert_eq!(
        &types[..3],
        ["run_started", "run_resumed", "step_started"],
        "{types:?}"
    );
}

/// A `resume` killed right after it recorded the interrupted visit (`step_interrupted`), before
/// its checkpoint: the next `resume` recognises that record instead of writing a second one
/// for the same visit.
#[test]
fn a_resume_killed_after_recording_the_interrupted_visit_records_it_once() {
    let reference = uninterrupted(CRASH);
    let kill_at = seq_of(&reference.events, "step_started", 1);
    let started = &reference.events[usize::try_from(kill_at).unwrap() - 1];
    let (step, visit) = (
        started["step_id"].as_str().unwrap().to_owned(),
        started["visit"].as_u64().unwrap(),
    );
    let (repo, run_id) = killed_at(CRASH, kill_at);
    // The resume records `run_resumed`, then the interrupted visit.
    let interrupted_seq = repo.events(&run_id).len() + 2;
    let killed = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["resume", &run_id])
        .env("TNH_TEST_KILL_AT_EVENT", interrupted_seq.to_string())
        .output()
        .unwrap();
    assert_eq!(killed.status.code(), None, "{}", stderr_text(&killed));
    assert_eq!(
        repo.events(&run_id).last().unwrap()["event_type"],
        "step_interrupted"
    );

    repo.conductor_exits(&["resume", &run_id], 0);
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let of_step = |event_type: &str| -> Vec<u64> {
        events
            .iter()
            .filter(|event| event["event_type"] == event_type && event["step_id"] == step)
            .map(|event| event["visit"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(of_step("step_interrupted"), [visit]);
    assert_eq!(of_step("step_started"), [visit, visit + 1]);
    assert_eq!(of_step("step_completed"), [visit + 1]);
    let manifest = repo.json(&run_id, &format!("artifacts/{step}/{visit}/manifest.json"));
    assert_eq!(manifest["termination"], "interrupted", "{manifest}");
    assert_eq!(
        std::fs::read_to_string(repo.run_dir(&run_id).join("final-state.txt")).unwrap(),
        reference.final_state
    );
}

/// Runs `crash.yaml` (or resumes `run_id`) with the conductor sending itself SIGTERM right
/// after recording event `seq` (`TNH_TEST_SIGNAL_AT_EVENT`), as `systemctl stop` would at that
/// instant.
fn signalled_at(repo: &RunRepo, resume: Option<&str>, seq: u64) -> std::process::Output {
    let mut command = conductor();
    command.arg("--repo").arg(repo.path());
    match resume {
        Some(run_id) => command.args(["resume", "--json", run_id]),
        None => command
            .args(["run", "--json"])
            .arg(repo.workflow(CRASH.workflow)),
    };
    command
        .env("TNH_TEST_SIGNAL_AT_EVENT", seq.to_string())
        .output()
        .unwrap()
}

/// A signal that arrives once the agent has ended on its own (`runner_completed` recorded,
/// its result being captured) keeps the finished visit — recorded as completed, with its
/// manifest — and stops the run before the next step: `resume` never runs that (paid) agent
/// session again.
#[test]
fn a_signal_after_the_agent_finished_keeps_the_visit_and_stops_before_the_next_step() {
    let reference = uninterrupted(CRASH);
    let at = seq_of(&reference.events, "runner_completed", 0);
    let repo = repo_for(CRASH);

    let output = signalled_at(&repo, None, at);

    assert_eq!(output.status.code(), Some(130), "{}", stderr_text(&output));
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["detail"], "stopped before step `extend`", "{result}");
    let run_id = repo.only_run_id();
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let types = event_types(&events);
    let completed = types
        .iter()
        .position(|kind| kind == "step_completed")
        .unwrap_or_else(|| panic!("the finished visit was thrown away: {types:?}"));
    assert_eq!(events[completed]["step_id"], "write");
    assert_eq!(events[completed]["outcome"], "completed");
    assert_eq!(
        types.last().map(String::as_str),
        Some("run_interrupted"),
        "{types:?}"
    );
    assert_eq!(events.last().unwrap()["next_step"], "extend");
    assert!(
        !events
            .iter()
            .any(|event| event["event_type"] == "step_started" && event["step_id"] == "extend"),
        "the next step started: {types:?}"
    );
    assert_eq!(
        repo.json(&run_id, "artifacts/write/1/manifest.json")["termination"],
        "completed"
    );
    assert_eq!(
        repo.json(&run_id, "status.json")["lifecycle_state"],
        "blocked"
    );

    repo.conductor_exits(&["resume", &run_id], 0);
    let worktree = repo.path().join(".tnh/worktrees").join(&run_id);
    let resumed = finish(&repo, &run_id, &worktree);
    assert_eq!(resumed.final_state, reference.final_state);
    assert_eq!(resumed.tree, reference.tree);
    assert_contiguous(&resumed.events);
    let agent_sessions = resumed
        .events
        .iter()
        .filter(|event| event["event_type"] == "runner_started" && event["step_id"] == "write")
        .count();
    assert_eq!(agent_sessions, 1, "the finished agent ran again");
    assert!(
        !event_types(&resumed.events).contains(&"step_interrupted".to_owned()),
        "{:?}",
        event_types(&resumed.events)
    );
}

/// SIGTERM while `resume` recovers an interrupted visit (orphans killed, its snapshot
/// restored) no longer kills it with the default action (exit 143, half recorded): the
/// recovery is finished and recorded, and the run stops before its next step with exit 130;
/// the next `resume` completes it.
#[test]
fn a_signal_during_the_recovery_of_resume_ends_it_130_resumable() {
    let reference = uninterrupted(CRASH);
    // Killed while the second agent step runs: `resume` restores its snapshot.
    let (repo, run_id) = killed_at(CRASH, seq_of(&reference.events, "runner_started", 1));
    // `run_resumed` is the first event `resume` records, before the recovery.
    let at = repo.events(&run_id).len() as u64 + 1;

    let output = signalled_at(&repo, Some(&run_id), at);

    assert_eq!(output.status.code(), Some(130), "{}", stderr_text(&output));
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let types = event_types(&events);
    assert_eq!(events[at as usize - 1]["event_type"], "run_resumed");
    assert!(types.contains(&"step_interrupted".to_owned()), "{types:?}");
    assert_eq!(
        types.last().map(String::as_str),
        Some("run_interrupted"),
        "{types:?}"
    );
    assert_eq!(
        repo.json(&run_id, "status.json")["lifecycle_state"],
        "blocked"
    );

    repo.conductor_exits(&["resume", &run_id], 0);
    let worktree = repo.path().join(".tnh/worktrees").join(&run_id);
    let resumed = finish(&repo, &run_id, &worktree);
    assert_eq!(resumed.final_state, reference.final_state);
    assert_eq!(resumed.tree, reference.tree);
    assert_contiguous(&resumed.events);
    let interrupted = resumed
        .events
        .iter()
        .filter(|event| event["event_type"] == "step_interrupted")
        .count();
    assert_eq!(interrupted, 1);
}

/// A `PATH` whose `git` runs `during` (a shell snippet) when asked for `git worktree add`,
/// then the real git; the folder holding it.
fn git_on_path_doing(repo: &RunRepo, during: &str) -> std::ffi::OsString {
    crate::kernel_support::git_on_path_when(
        repo,
        "[ \"$1\" = worktree ] && [ \"$2\" = add ]",
        during,
    )
}

/// SIGTERM while `run` creates the worktree (`git worktree add` running) no longer kills the
/// conductor with the default action (exit 143, `git` left running): git is let finish, the
/// run stops before its first step with exit 130, and `resume` completes it.
#[test]
fn a_signal_while_the_worktree_is_created_ends_the_run_130_resumable() {
    let reference = uninterrupted(CRASH);
    let repo = repo_for(CRASH);
    let path = git_on_path_doing(&repo, "kill -TERM $PPID");

    let output = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["run", "--json"])
        .arg(repo.workflow(CRASH.workflow))
        .env("PATH", path)
        .output()
        .unwrap();

    assert_eq!(output.status.code(), Some(130), "{}", stderr_text(&output));
    let run_id = repo.only_run_id();
    assert_eq!(
        repo.json(&run_id, "status.json")["lifecycle_state"],
        "blocked"
    );
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["state"], "interrupted", "{result}");

    repo.conductor_exits(&["resume", &run_id], 0);
    let worktree = repo.path().join(".tnh/worktrees").join(&run_id);
    let resumed = finish(&repo, &run_id, &worktree);
    assert_eq!(resumed.final_state, reference.final_state);
    assert_eq!(resumed.tree, reference.tree);
    assert_contiguous(&resumed.events);
    let types = event_types(&resumed.events);
    assert_eq!(
        types.iter().filter(|kind| *kind == "run_started").count(),
        1,
        "{types:?}"
    );
}

/// Whether a process is alive (a zombie is not).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat[stat.rfind(')').unwrap() + 1..]
            .split_whitespace()
            .next();
        !matches!(state, Some("Z" | "X"))
    })
}

/// A conductor SIGKILLed while `git worktree add` runs leaves that git running (here it
/// waits on a FIFO nobody writes). `resume` kills it before it removes the half-made folder
/// and creates the worktree again, instead of racing it.
#[test]
fn resume_stops_the_git_a_killed_run_left_creating_its_worktree() {
    let repo = repo_for(CRASH);
    let fifo = repo.path().join(".git/never.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let pid_file = repo.path().join(".git/leftover.pid");
    let path = git_on_path_doing(
        &repo,
        &format!(
            "echo $$ > \"{}\"; kill -9 $PPID; read line < \"{}\"",
            pid_file.display(),
            fifo.display()
        ),
    );
    let output = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["run", "--json"])
        .arg(repo.workflow(CRASH.workflow))
        .env("PATH", path)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), None, "{}", stderr_text(&output));
    let leftover: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(leftover), "the leftover git should still run");
    let run_id = repo.only_run_id();

    let resumed = repo.conductor(&["resume", &run_id]);

    let survived = alive(leftover);
    if survived {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(leftover),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr_text(&resumed));
    assert!(!survived, "the git left by the killed run still runs");
}

/// A run killed in an EVALUATE (or a GATE, a STOP) was
/// exempt from the drift check, so a worktree edited by hand meanwhile resumed to success
/// with no `drift_accepted` event. Only validations and rollbacks (which change files without
/// a snapshot) and agent steps going back to their own snapshot are exempt.
#[test]
fn resume_after_a_kill_in_an_evaluate_refuses_a_worktree_edited_by_hand() {
    let reference = uninterrupted(CRASH);
    // The third step_started is the EVALUATE's.
    let kill_at = seq_of(&reference.events, "step_started", 2);
    assert_eq!(
        reference.events[usize::try_from(kill_at).unwrap() - 1]["step_id"],
        "evaluate"
    );
    let (repo, run_id) = killed_at(CRASH, kill_at);
    let worktree = repo.path().join(".tnh/worktrees").join(&run_id);
    std::fs::write(worktree.join("extra.txt"), "added by hand\n").unwrap();
    let events_before = repo.events(&run_id).len();
    let refused = repo.conductor_exits(&["resume", &run_id], 2);
    assert!(
        stderr_text(&refused).contains("the worktree changed since the run's last checkpoint"),
        "{}",
        stderr_text(&refused)
    );
    assert_eq!(
        repo.events(&run_id).len(),
        events_before,
        "nothing recorded"
    );
    repo.conductor_exits(&["resume", "--accept-drift", &run_id], 0);
    assert!(event_types(&repo.events(&run_id)).contains(&"drift_accepted".to_owned()));
}
