//! What reaches a run from outside it: a stop signal that reaches the agent (alone, or a
//! moment before the conductor), a signal the operator's launcher ignores (`nohup`, `&`), the
//! `PATH` an agent gets to find `tnh`, and the run-log entries of a visit that did not finish.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use crate::kernel_support::{RunRepo, assert_contiguous};
use crate::support::stderr_text;

/// A `PATH` with git and a shell, without the folder the test binaries are built in.
const BARE_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// A repository whose `waiter` agent runs `script` (sh) with the prompt on stdin, and a
/// one-step workflow `work` whose first prompt line is the path of a FIFO `started.fifo` and
/// whose second is the FIFO `go.fifo`. `completed` goes to a success STOP, anything else to
/// a failure STOP.
fn repo_with_agent(script: &str) -> (RunRepo, PathBuf, PathBuf, PathBuf) {
    let repo = RunRepo::new();
    let agent = repo.repo.write(".tnh/waiter.sh", script);
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "{config}  waiter:\n    kind: command\n    argv: [/bin/sh, \"{}\"]\n",
            agent.display()
        ),
    );
    let started = repo.path().join("started.fifo");
    let go = repo.path().join("go.fifo");
    for fifo in [&started, &go] {
        nix::unistd::mkfifo(fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    }
    let workflow = repo.workflow_text(
        "wait.yaml",
        &format!(
            "workflow_id: outside\nversion: 1\ndescription: d\nentry_step: work\nsteps:\n  - id: work\n    opcode: RUN_AGENT\n    agent: waiter\n    prompt: |\n      {}\n      {}\n    routes:\n      completed: done\n      \"*\": bad\n  - id: done\n    opcode: STOP\n  - id: bad\n    opcode: STOP\n    outcome: failure\n",
            started.display(),
            go.display()
        ),
    );
    (repo, workflow, started, go)
}

/// `tnh-conductor run --json WORKFLOW` in the background, with a `PATH` without the test
/// binaries' folder and the signals in `ignored` (names for `trap`) ignored, as `nohup` or a
/// shell's `&` leave them: the shell ignores them, then becomes the conductor.
fn spawn_run(repo: &RunRepo, workflow: &Path, ignored: &str) -> Child {
    spawn_run_with_path(repo, workflow, ignored, BARE_PATH.as_ref())
}

/// [`spawn_run`] with this `PATH`.
fn spawn_run_with_path(
    repo: &RunRepo,
    workflow: &Path,
    ignored: &str,
    path: &std::ffi::OsStr,
) -> Child {
    let trap = if ignored.is_empty() {
        String::new()
    } else {
        format!("trap '' {ignored}; ")
    };
    let mut command = Command::new("/bin/sh");
    command
        .arg("-c")
        .arg(format!("{trap}exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_tnh-conductor"))
        .arg("--repo")
        .arg(repo.path())
        .args(["run", "--json"])
        .arg(workflow)
        .env("PATH", path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command.spawn().unwrap()
}

/// What the agent wrote to the FIFO: opening it for reading waits until it has.
fn read_fifo(fifo: &Path) -> String {
    let mut text = String::new();
    std::fs::File::open(fifo)
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    text.trim().to_owned()
}

fn events_of<'a>(
    events: &'a [serde_json::Value],
    kind: &str,
    visit: u64,
) -> Vec<&'a serde_json::Value> {
    events
        .iter()
        .filter(|event| event["event_type"] == kind && event["visit"].as_u64() == Some(visit))
        .collect()
}

/// On its first visit, the agent tells the test its pid (it leads its process group) and then
/// works "forever"; on later visits it finishes at once.
const WORKS_FOREVER: &str = "read -r started\ncase \"$TNH_STEP_DIR\" in\n*/1)\n    echo \"$$\" > \"$started\"\n    exec sleep 3600\n    ;;\nesac\necho finished > done.txt\n";

/// A stop signal that reaches the agent from outside the conductor — `systemctl stop` with
/// `KillMode=control-group`, `kill -TERM` to every process, a container runtime — is not the
/// agent's own failure: the visit is never routed (here the error route would end the run as
/// failed); it is left interrupted, and `resume` runs the step again. Whether the conductor
/// gets the signal too (right after the agent) or not at all.
#[test]
fn an_agent_stopped_by_a_signal_from_outside_is_interrupted_never_routed() {
    for conductor_too in [false, true] {
        let (repo, workflow, started, _) = repo_with_agent(WORKS_FOREVER);
        let child = spawn_run(&repo, &workflow, "");
        let agent: i32 = read_fifo(&started).parse().unwrap();
        // The whole group of the agent, as a control-group stop does.
        killpg(Pid::from_raw(agent), Signal::SIGTERM).unwrap();
        if conductor_too {
            kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
        }
        let output = child.wait_with_output().unwrap();
        let what = format!("conductor signalled too: {conductor_too}");
        assert_eq!(
            output.status.code(),
            Some(130),
            "{what}: {}",
            stderr_text(&output)
        );
        let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(result["state"], "interrupted", "{what}: {result}");
        let run_id = result["run_id"].as_str().unwrap().to_owned();
        let events = repo.events(&run_id);
        assert!(
            events_of(&events, "step_completed", 1).is_empty()
                && !events
                    .iter()
                    .any(|event| event["event_type"] == "route_selected"),
            "{what}: the visit was routed: {events:#?}"
        );
        let interrupted = events
            .iter()
            .find(|event| event["event_type"] == "run_interrupted")
            .unwrap_or_else(|| panic!("{what}: no run_interrupted: {events:#?}"));
        let cause = interrupted["cause"].as_str().unwrap();
        assert!(cause.contains("SIGTERM"), "{what}: {cause}");
        if !conductor_too {
            assert!(cause.contains("from outside"), "{what}: {cause}");
        }
        assert_eq!(
            repo.json(&run_id, "status.json")["lifecycle_state"],
            "blocked"
        );

        let resumed = repo.conductor(&["resume", &run_id]);
        assert_eq!(
            resumed.status.code(),
            Some(0),
            "{what}: {}",
            stderr_text(&resumed)
        );
        let events = repo.events(&run_id);
        assert_contiguous(&events);
        let completed: Vec<u64> = events
            .iter()
            .filter(|event| event["event_type"] == "step_completed")
            .filter(|event| event["step_id"] == "work")
            .map(|event| event["visit"].as_u64().unwrap())
            .collect();
        assert_eq!(completed, [2], "{what}");
        let step = events_of(&events, "step_interrupted", 1);
        assert!(
            step.len() == 1 && step[0]["cause"].as_str().unwrap().contains("SIGTERM"),
            "{what}: {step:#?}"
        );
        assert_eq!(
            std::fs::read_to_string(repo.run_dir(&run_id).join("final-state.txt")).unwrap(),
            "completed success done\n",
            "{what}"
        );
    }
}

/// The same rule for a validator: one whose process group a stop signal from outside the
/// conductor ends is not a failing check. The visit is not routed `error` (which would send an
/// agent to fix tests that never failed); it is left interrupted, and `resume` runs it again.
#[test]
fn a_validator_stopped_by_a_signal_from_outside_is_interrupted_never_routed() {
    let repo = RunRepo::new();
    let outside = tempfile::tempdir().unwrap();
    let started = outside.path().join("started.fifo");
    nix::unistd::mkfifo(&started, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let marker = outside.path().join("ran-once");
    // First visit: tell the test its pid (it leads its group) and check "forever"; then pass.
    let validator = outside.path().join("check.sh");
    std::fs::write(
        &validator,
        format!(
            "#!/bin/sh
if [ -e '{marker}' ]; then exit 0; fi
: > '{marker}'
echo \"$$\" > '{started}'
exec sleep 3600
",
            marker = marker.display(),
            started = started.display()
        ),
    )
    .unwrap();
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "{config}validators:\n  slowcheck: {{argv: [/bin/sh, \"{}\"]}}\n",
            validator.display()
        ),
    );
    let workflow = repo.workflow_text(
        "check.yaml",
        "workflow_id: check\nversion: 1\ndescription: d\nentry_step: check\nsteps:\n  - id: check\n    opcode: RUN_VALIDATION\n    run: [slowcheck]\n    routes:\n      completed: done\n      \"*\": bad\n  - id: done\n    opcode: STOP\n  - id: bad\n    opcode: STOP\n    outcome: failure\n",
    );
    let child = spawn_run(&repo, &workflow, "");
    let validator_pid: i32 = read_fifo(&started).parse().unwrap();
    killpg(Pid::from_raw(validator_pid), Signal::SIGTERM).unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130), "{}", stderr_text(&output));
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["state"], "interrupted", "{result}");
    let run_id = result["run_id"].as_str().unwrap().to_owned();
    let events = repo.events(&run_id);
    assert!(
        events_of(&events, "step_completed", 1).is_empty()
            && !events
                .iter()
                .any(|event| event["event_type"] == "route_selected"),
        "the visit was routed: {events:#?}"
    );
    let interrupted = events
        .iter()
        .find(|event| event["event_type"] == "run_interrupted")
        .unwrap_or_else(|| panic!("no run_interrupted: {events:#?}"));
    assert_eq!(
        interrupted["cause"],
        "validator `slowcheck` was stopped by SIGTERM from outside the conductor"
    );
    assert_eq!(
        repo.json(&run_id, "status.json")["lifecycle_state"],
        "blocked"
    );

    repo.conductor_exits(&["resume", &run_id], 0);
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let completed: Vec<u64> = events
        .iter()
        .filter(|event| event["event_type"] == "step_completed")
        .filter(|event| event["step_id"] == "check")
        .map(|event| event["visit"].as_u64().unwrap())
        .collect();
    assert_eq!(completed, [2]);
    assert_eq!(
        std::fs::read_to_string(repo.run_dir(&run_id).join("final-state.txt")).unwrap(),
        "completed success done\n"
    );
}

/// `nohup tnh-conductor run …` (SIGHUP ignored) and a run started with `&` by a script (SIGINT
/// ignored): what the launcher ignored stays ignored, so closing the terminal does not stop an
/// overnight run.
#[test]
fn a_signal_ignored_when_the_conductor_starts_stays_ignored() {
    let script = "read -r started\nread -r go\necho \"$$\" > \"$started\"\nread -r line < \"$go\"\necho finished > done.txt\n";
    let (repo, workflow, started, go) = repo_with_agent(script);
    let child = spawn_run(&repo, &workflow, "HUP INT");
    read_fifo(&started);
    // The conductor is listening to its other signals by now: the ones ignored at start are
    // still ignored.
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let ignored = status
        .lines()
        .find_map(|line| line.strip_prefix("SigIgn:"))
        .map(|mask| u64::from_str_radix(mask.trim(), 16).unwrap())
        .unwrap();
    for number in [Signal::SIGHUP as u32, Signal::SIGINT as u32] {
        assert_ne!(
            ignored & (1 << (number - 1)),
            0,
            "signal {number}: {status}"
        );
    }
    let pid = Pid::from_raw(child.id() as i32);
    kill(pid, Signal::SIGHUP).unwrap();
    kill(pid, Signal::SIGINT).unwrap();
    // Let the agent finish. The FIFO is opened for reading and writing, which never waits for
    // the agent to open it (it may not have yet; had the signals stopped it, it never will),
    // and kept open until the run ends, so that "go" waits in the pipe for the agent's read.
    let mut fifo = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&go)
        .unwrap();
    std::io::Write::write_all(&mut fifo, b"go\n").unwrap();
    let output = child.wait_with_output().unwrap();
    drop(fifo);
    assert_eq!(output.status.code(), Some(0), "{}", stderr_text(&output));
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["state"], "completed", "{result}");
}

/// Agents are told to call `tnh`: the `tnh` beside the running conductor is found although
/// the operator's `PATH` does not hold its folder (a conductor started by its path, from a
/// build or an unpacked release), and its folder comes first.
#[test]
fn an_agent_finds_the_tnh_beside_the_conductor_when_path_does_not() {
    let script = "cat > /dev/null\necho \"PATH=$PATH\"\necho \"tnh=$(command -v tnh)\"\ntnh runlog append --kind note --message reached\n";
    let (repo, workflow, _, _) = repo_with_agent(script);
    let child = spawn_run(&repo, &workflow, "");
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr_text(&output));
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let run_id = result["run_id"].as_str().unwrap();
    let said =
        std::fs::read_to_string(repo.run_dir(run_id).join("artifacts/work/1/stdout.txt")).unwrap();
    let tnh = Path::new(env!("CARGO_BIN_EXE_tnh"));
    let folder = tnh.parent().unwrap().display().to_string();
    assert!(
        said.contains(&format!("PATH={folder}:{BARE_PATH}\n")),
        "{said}"
    );
    assert!(said.contains(&format!("tnh={}\n", tnh.display())), "{said}");
    let events = repo.events(run_id);
    assert_eq!(
        events_of(&events, "agent_runlog", 1).len(),
        1,
        "{events:#?}"
    );
}

/// On its first visit, the agent appends a blocker to its run log, tells the test its pid and
/// works "forever"; on later visits it appends a note and finishes.
fn runlog_then_forever() -> String {
    let tnh = env!("CARGO_BIN_EXE_tnh");
    format!(
        "read -r started\ncase \"$TNH_STEP_DIR\" in\n*/1)\n    {tnh} runlog append --kind blocker --message BLOCKER-1\n    echo \"$$\" > \"$started\"\n    exec sleep 3600\n    ;;\nesac\n{tnh} runlog append --kind note --message NOTE-2\n"
    )
}

fn runlog_messages(events: &[serde_json::Value], visit: u64) -> Vec<String> {
    events_of(events, "agent_runlog", visit)
        .iter()
        .map(|event| event["message"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// `tnh runlog append` entries of a visit the operator interrupted (SIGTERM), or whose
/// conductor was killed, become `agent_runlog` events — at the interruption, or when `resume`
/// records the visit — and only once.
#[test]
fn the_runlog_of_a_visit_that_did_not_finish_becomes_events_once() {
    for stop in [Signal::SIGTERM, Signal::SIGKILL] {
        let (repo, workflow, started, _) = repo_with_agent(&runlog_then_forever());
        let child = spawn_run(&repo, &workflow, "");
        read_fifo(&started);
        kill(Pid::from_raw(child.id() as i32), stop).unwrap();
        let output = child.wait_with_output().unwrap();
        let run_id = repo.only_run_id();
        if stop == Signal::SIGTERM {
            assert_eq!(output.status.code(), Some(130), "{}", stderr_text(&output));
            // Said at the interruption already.
            assert_eq!(runlog_messages(&repo.events(&run_id), 1), ["BLOCKER-1"]);
        }
        let resumed = repo.conductor(&["resume", &run_id]);
        assert_eq!(
            resumed.status.code(),
            Some(0),
            "{stop}: {}",
            stderr_text(&resumed)
        );
        let events = repo.events(&run_id);
        assert_contiguous(&events);
        assert_eq!(runlog_messages(&events, 1), ["BLOCKER-1"], "{stop}");
        assert_eq!(runlog_messages(&events, 2), ["NOTE-2"], "{stop}");
        let manifest = repo.json(&run_id, "artifacts/work/1/manifest.json");
        assert_eq!(manifest["termination"], "interrupted", "{manifest}");
    }
}

/// A visit whose step failed after its agent ran (the conductor's `git add` of the agent's
/// work failed) ends the run with an error; its run-log entries are events.
#[test]
fn the_runlog_of_a_failed_visit_becomes_events() {
    let tnh = env!("CARGO_BIN_EXE_tnh");
    let script = format!(
        "cat > /dev/null\n{tnh} runlog append --kind blocker --message BEFORE-FAILING\necho x > planted.txt\n"
    );
    let (repo, workflow, _, _) = repo_with_agent(&script);
    let path = crate::kernel_support::git_on_path_when(
        &repo,
        "[ \"$1\" = add ] && [ -e planted.txt ]",
        "echo 'fatal: the disk broke' >&2; exit 128",
    );
    let child = spawn_run_with_path(&repo, &workflow, "", &path);
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(4), "{}", stderr_text(&output));
    let run_id = repo.only_run_id();
    let events = repo.events(&run_id);
    assert!(
        !events_of(&events, "step_failed", 1).is_empty(),
        "{events:#?}"
    );
    assert_eq!(runlog_messages(&events, 1), ["BEFORE-FAILING"]);
}
