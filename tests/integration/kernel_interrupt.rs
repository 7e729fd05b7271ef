//! Ctrl-C ends the current step cleanly and exits 130; the run is resumable, and while it is
//! being driven a second `resume` is refused naming the process that holds it.

use std::io::Read;
use std::process::Stdio;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::kernel_support::{RunRepo, assert_contiguous, first_event};
use crate::support::{conductor, stderr_text};

fn processes_of_run(run_id: &str) -> Vec<i32> {
    tnh_conductor::runner::processes_with_variable("TNH_RUN_ID", run_id)
}

/// A run whose agent (on its first visit) has started and works "forever": the repository,
/// the conductor driving it, and the run id.
pub(crate) fn run_with_a_working_agent() -> (RunRepo, std::process::Child, String) {
    run_with_a_working_agent_limited("")
}

/// The same, with `defaults:` text (e.g. `"defaults:\n  limits: {max_visits: 1}\n"`).
fn run_with_a_working_agent_limited(defaults: &str) -> (RunRepo, std::process::Child, String) {
    let repo = RunRepo::new();
    let agent = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/agents/wait_for_interrupt.sh");
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "{config}  waiter:\n    kind: command\n    argv: [sh, \"{}\"]\n",
            agent.display()
        ),
    );
    let fifo = repo.path().join("started.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let workflow = repo.workflow_text(
        "wait.yaml",
        &format!("workflow_id: interrupt\nversion: 1\ndescription: d\nentry_step: work\n{defaults}steps:\n  - id: work\n    opcode: RUN_AGENT\n    agent: waiter\n    prompt: \"{}\"\n    routes:\n      completed: STOP\n      \"*\": STOP\n", fifo.display()),
    );
    let child = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["run", "--json"])
        .arg(&workflow)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Opening the FIFO for reading blocks until the agent has started and written to it.
    let mut started = String::new();
    std::fs::File::open(&fifo)
        .unwrap()
        .read_to_string(&mut started)
        .unwrap();
    assert_eq!(started.trim(), "started");
    let run_id = repo.only_run_id();
    (repo, child, run_id)
}

#[test]
fn ctrl_c_ends_the_step_exits_130_and_the_run_resumes() {
    let (repo, child, run_id) = run_with_a_working_agent();

    // `status` shows the step running and that its agent has printed nothing.
    let status = crate::support::stdout_text(&repo.conductor(&["status", &run_id]));
    assert!(
        status.contains("  step:  work (visit 1)\n  running for ")
            && status.contains("; no output yet\n"),
        "{status}"
    );

    let second = repo.conductor(&["resume", &run_id]);
    assert_eq!(second.status.code(), Some(2));
    assert!(
        stderr_text(&second).contains(&format!("being driven by process {}", child.id())),
        "{}",
        stderr_text(&second)
    );

    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130), "{}", stderr_text(&output));
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["state"], "interrupted");
    assert!(
        processes_of_run(&run_id).is_empty(),
        "a process of the run survived Ctrl-C"
    );
    assert_eq!(
        repo.json(&run_id, "status.json")["lifecycle_state"],
        "blocked"
    );
    let events = repo.events(&run_id);
    assert!(
        events
            .iter()
            .any(|event| event["event_type"] == "run_interrupted")
    );

    repo.conductor_exits(&["resume", "--json", &run_id], 0);
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let interrupted = first_event(&events, "step_interrupted");
    assert_eq!(
        (
            interrupted["step_id"].as_str(),
            interrupted["visit"].as_u64()
        ),
        (Some("work"), Some(1))
    );
    assert!(
        interrupted["restored"].is_object(),
        "the half-done visit was rolled back: {interrupted}"
    );
    let worktree = repo.path().join(".tnh/worktrees").join(&run_id);
    assert!(
        !worktree.join("partial.txt").exists(),
        "the interrupted visit's edits were kept"
    );
    assert!(worktree.join("done.txt").exists());
    let completed: Vec<u64> = events
        .iter()
        .filter(|event| event["event_type"] == "step_completed")
        .map(|event| event["visit"].as_u64().unwrap())
        .collect();
    assert_eq!(completed, [2]);
}

/// A visit cut short by a signal does not use up one of the step's `max_visits`: on its only
/// allowed visit, `resume` runs the step again (as visit 2, visit 1's evidence kept) and the
/// run ends as it would have.
#[test]
fn an_interrupted_visit_does_not_use_up_max_visits() {
    let (repo, child, run_id) =
        run_with_a_working_agent_limited("defaults:\n  limits: {max_visits: 1}\n");
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130), "{}", stderr_text(&output));

    let resumed = repo.conductor_exits(&["resume", "--json", &run_id], 0);
    let result: serde_json::Value = serde_json::from_slice(&resumed.stdout).unwrap();
    assert_eq!(result["state"], "completed", "{result}");
    let events = repo.events(&run_id);
    let interrupted = first_event(&events, "step_interrupted");
    assert_eq!(interrupted["visit"].as_u64(), Some(1), "{interrupted}");
    let completed: Vec<u64> = events
        .iter()
        .filter(|event| event["event_type"] == "step_completed")
        .map(|event| event["visit"].as_u64().unwrap())
        .collect();
    assert_eq!(completed, [2]);
    // The interrupted visit keeps its folder and evidence.
    let manifest = repo.json(&run_id, "artifacts/work/1/manifest.json");
    assert_eq!(manifest["termination"], "interrupted", "{manifest}");
    assert_eq!(
        repo.json(&run_id, "state.json")["interrupted_visits"]["work"],
        1
    );
}

/// SIGTERM (`systemctl stop`, `timeout`, a cancelled CI job) and SIGHUP (a closed terminal)
/// end the step as Ctrl-C does: by default they would kill the conductor alone and leave the
/// agent running with nobody supervising it.
#[test]
fn sigterm_and_sighup_end_the_step_like_ctrl_c_and_leave_no_process_behind() {
    for (signal, name) in [(Signal::SIGTERM, "SIGTERM"), (Signal::SIGHUP, "SIGHUP")] {
        let (repo, child, run_id) = run_with_a_working_agent();

        kill(Pid::from_raw(child.id() as i32), signal).unwrap();

        let output = child.wait_with_output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(130),
            "{name}: {}",
            stderr_text(&output)
        );
        assert!(
            processes_of_run(&run_id).is_empty(),
            "{name}: a process of the run survived"
        );
        let interrupted = first_event(&repo.events(&run_id), "run_interrupted").clone();
        assert_eq!(
            interrupted["cause"],
            format!("operator interrupt ({name})"),
            "{interrupted}"
        );
        assert_eq!(
            repo.json(&run_id, "status.json")["lifecycle_state"],
            "blocked"
        );
        let resumed = repo.conductor(&["resume", &run_id]);
        assert_eq!(
            resumed.status.code(),
            Some(0),
            "{name}: {}",
            stderr_text(&resumed)
        );
        // The interrupted visit says what ended it.
        let step = first_event(&repo.events(&run_id), "step_interrupted").clone();
        assert_eq!(
            step["cause"],
            format!("operator interrupt ({name})"),
            "{step}"
        );
        // Its evidence is listed in a manifest of its own.
        let manifest = repo.json(&run_id, "artifacts/work/1/manifest.json");
        assert_eq!(manifest["termination"], "interrupted", "{manifest}");
        let roles: Vec<&str> = manifest["artifacts"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|entry| entry["role"].as_str())
            .collect();
        assert!(
            roles.contains(&"runner_prompt") && roles.contains(&"runner_transcript"),
            "{manifest}"
        );
    }
}

/// `status --watch` on a run whose driver is killed ends by showing it blocked (with how to
/// continue), not with `running` left on the screen.
#[test]
fn status_watch_ends_showing_a_killed_run_blocked() {
    let (repo, mut child, run_id) = run_with_a_working_agent();
    let mut watch = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["--color", "never", "status", "--watch", &run_id])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(watch.stdout.take().unwrap()));
    // Reading blocks until the watch has shown the run running.
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let running = line == "  state: running";
        seen.push(line);
        if running {
            break;
        }
    }

    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    child.wait().unwrap();

    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    assert!(watch.wait().unwrap().success());
    assert!(
        rest.contains(&"  state: blocked".to_owned())
            && rest
                .iter()
                .any(|line| line.contains("the driving process is gone")),
        "{seen:?} then {rest:?}"
    );
    // The agent outlived the SIGKILLed conductor: resume ends it.
    repo.conductor_exits(&["resume", &run_id], 0);
    assert!(processes_of_run(&run_id).is_empty());
}
