//! What `runs list`, `runs show`, `gate list` and `journal` show of runs that are not plain
//! finished runs: a run waiting at a gate, a run whose driver was killed mid-visit, a run whose
//! `metadata.json` is damaged (listed as damaged, never hidden).

use crate::kernel_support::RunRepo;
use crate::support::{conductor, stderr_text, stdout_text};

fn waiting_run(repo: &RunRepo) -> String {
    let (code, result, output) = repo.run(&repo.workflow("gate.yaml"), &[]);
    assert_eq!(code, Some(3), "{result}\n{}", stderr_text(&output));
    result["run_id"].as_str().unwrap().to_owned()
}

#[test]
fn runs_show_lists_the_gate_a_run_waits_at() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo);
    let shown = repo.conductor_exits(&["runs", "show", &run_id], 0);
    let text = stdout_text(&shown);
    let last = text.lines().last().unwrap();
    assert!(
        last.starts_with(&format!(
            "  review #1: waiting — Approve the feature of {run_id} (since "
        )),
        "{text}"
    );
    // Once decided, the visit is described by its outcome, not as waiting.
    repo.conductor_exits(&["gate", "approve", &run_id, "--as", "lead"], 0);
    let text = stdout_text(&repo.conductor(&["runs", "show", &run_id]));
    assert!(!text.contains("waiting —"), "{text}");
    assert!(text.contains("  review #1: gate_approved"), "{text}");
}

#[test]
fn runs_show_says_a_killed_runs_last_visit_did_not_finish() {
    let repo = RunRepo::new();
    repo.run_killed_at(&repo.workflow("crash.yaml"), 3);
    let run_id = repo.only_run_id();
    let text = stdout_text(&repo.conductor(&["runs", "show", &run_id]));
    assert!(
        text.contains("  write #1: stopped before it finished (started ")
            && text.contains(&format!("`tnh-conductor resume {run_id}` continues it")),
        "{text}"
    );
}

#[test]
fn a_run_with_damaged_metadata_is_listed_as_damaged_not_hidden() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo);
    let metadata = repo.run_dir(&run_id).join("metadata.json");
    std::fs::write(&metadata, "{\"trunc").unwrap();
    let names_the_damage = |text: &str| {
        text.contains(&format!(
            "`{}` is not a valid run metadata",
            metadata.display()
        ))
    };

    let listed = repo.conductor_exits(&["runs", "list"], 0);
    assert!(
        stdout_text(&listed).contains(&format!("{run_id}  waiting    gated")),
        "{}",
        stdout_text(&listed)
    );
    assert!(
        stderr_text(&listed).contains(&format!("run {run_id} is damaged"))
            && names_the_damage(&stderr_text(&listed)),
        "{}",
        stderr_text(&listed)
    );

    let listed = repo.conductor(&["runs", "list", "--json"]);
    let list: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(list["schema_version"], 1, "{list}");
    let rows = &list["runs"];
    assert_eq!(rows[0]["run_id"], run_id.as_str(), "{rows}");
    assert_eq!(rows[0]["state"], "waiting", "{rows}");
    assert!(
        names_the_damage(rows[0]["damaged"].as_str().unwrap()),
        "{rows}"
    );

    let gates = repo.conductor(&["gate", "list"]);
    let text = stdout_text(&gates);
    assert!(text.contains(&run_id) && text.contains("review"), "{text}");
    assert!(names_the_damage(&text), "{text}");

    let journal = repo.conductor(&["journal", "--format", "json"]);
    let data: serde_json::Value = serde_json::from_slice(&journal.stdout).unwrap();
    let blockers = data["blockers"].to_string();
    assert!(
        blockers.contains(&format!("{run_id} (gated.v?): its metadata is damaged"))
            && blockers.contains("is not a valid run metadata"),
        "{blockers}"
    );
    let waiting = data["pending_review"]
        .as_array()
        .unwrap()
        .iter()
        .find(|review| review["kind"] == "waiting")
        .unwrap_or_else(|| panic!("no waiting gate in {data}"));
    assert_eq!(waiting["run_id"], run_id.as_str(), "{data}");

    // `runs show` prints what the other files say, then names the damage (exit 2: the run directory is damaged).
    let shown = repo.conductor_exits(&["runs", "show", &run_id], 2);
    let text = stdout_text(&shown);
    assert!(
        text.contains("state:     waiting")
            && text.contains("metadata:  unreadable")
            && text.contains("  review #1: waiting"),
        "{text}"
    );
    assert!(
        names_the_damage(&stderr_text(&shown)),
        "{}",
        stderr_text(&shown)
    );
}

#[test]
fn status_of_a_run_without_readable_status_or_state_does_not_promise_a_resume() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo);
    for file in ["status.json", "state.json"] {
        std::fs::write(repo.run_dir(&run_id).join(file), "{x").unwrap();
    }
    let status = stdout_text(&repo.conductor(&["status", &run_id]));
    assert!(
        status.contains(
            "`tnh-conductor resume` cannot continue the run until `state.json` is put back"
        ) && !status.contains("continues the run and rewrites it"),
        "{status}"
    );
    // Nothing was done: exit 2, naming the file.
    repo.conductor_exits(&["resume", &run_id], 2);

    let journal = repo.conductor(&["journal", "--format", "json"]);
    let data: serde_json::Value = serde_json::from_slice(&journal.stdout).unwrap();
    let blocker = data["blockers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|line| line.as_str())
        .find(|line| line.starts_with(&format!("{run_id} (gated.v1) stopped: ")))
        .unwrap_or_else(|| panic!("{data}"));
    assert!(
        blocker.contains("is not a valid run status") && blocker.contains("cannot continue"),
        "{blocker}"
    );
}

#[test]
fn gate_show_prints_the_diffstat_and_the_planner_decision_readably() {
    let repo = RunRepo::new();
    let workflow = repo.workflow_text(
        "judged.yaml",
        "workflow_id: judged\nversion: 1\ndescription: d\nentry_step: work\nsteps:\n  - {id: work, opcode: RUN_AGENT, agent: scripted, prompt: \"WRITE f.txt: one\\\\ntwo\", routes: {\"*\": judge}}\n  - id: judge\n    opcode: EVALUATE\n    prompt: planner.evaluate_step.v1\n    allowed_next_steps: [gate, fail]\n    routes: {success: gate, partial: fail, blocked: fail, unsafe: fail, needs_human: gate}\n  - {id: gate, opcode: GATE, gate: requires_approval, routes: {gate_approved: STOP, gate_rejected: fail}}\n  - {id: fail, opcode: STOP, outcome: failure}\n",
    );
    let (run, _) = repo.run_exits(&workflow, &[], 3);
    let run_id = run.as_str();
    let shown = stdout_text(&repo.conductor(&["gate", "show", run_id]));
    assert!(
        shown.contains("\n  diffstat:  1 file(s) +2 −0 (the whole run)\n  last step: `work` #1: 1 file(s) +2 −0\n"),
        "{shown}"
    );
    assert!(
        shown.contains("\n  planner:   success, no risk flags\n    decision: "),
        "{shown}"
    );
    assert!(!shown.contains('{'), "no raw JSON: {shown}");

    repo.conductor_exits(&["gate", "approve", run_id, "--resume"], 0);
    let refused = repo.conductor(&["gate", "show", run_id]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        stderr_text(&refused).contains(&format!(
            "run `{run_id}` is not waiting at a gate (it is finished (success))"
        )),
        "{}",
        stderr_text(&refused)
    );
}

/// A run held in an EVALUATE whose command planner waits, on a FIFO, for the test to let it
/// answer.
struct HeldPlanner {
    _fifos: tempfile::TempDir,
    answer: std::path::PathBuf,
    watcher: std::thread::JoinHandle<Option<i32>>,
    run_id: String,
}

impl HeldPlanner {
    /// Starts the run and returns once its planner has the envelope.
    fn start(repo: &RunRepo) -> Self {
        let fifos = tempfile::tempdir().unwrap();
        let asked = fifos.path().join("asked");
        let answer = fifos.path().join("answer");
        for fifo in [&asked, &answer] {
            let made = std::process::Command::new("mkfifo")
                .arg(fifo)
                .status()
                .unwrap();
            assert!(made.success());
        }
        let judge = repo.repo.write(
            "judge.sh",
            &format!(
                "#!/bin/sh\ncat >/dev/null\necho asked > '{}'\nread line < '{}'\necho '{{\"status\":\"success\",\"risk_flags\":[],\"blockers\":[]}}'\n",
                asked.display(),
                answer.display()
            ),
        );
        let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
        repo.repo.write(
            ".tnh/config.yaml",
            &format!(
                "{config}planners:\n  judge: {{kind: command, argv: [sh, \"{}\"]}}\n",
                judge.display()
            ),
        );
        let workflow = repo.workflow_text(
            "judged.yaml",
            "workflow_id: judged\nversion: 1\ndescription: d\nentry_step: work\nsteps:\n  - {id: work, opcode: RUN_AGENT, agent: scripted, prompt: \"WRITE f.txt: x\", routes: {\"*\": judge}}\n  - id: judge\n    opcode: EVALUATE\n    planner: judge\n    prompt: planner.evaluate_step.v1\n    allowed_next_steps: [fail]\n    routes: {success: STOP, partial: fail, blocked: fail, unsafe: fail, needs_human: fail}\n  - {id: fail, opcode: STOP, outcome: failure}\n",
        );
        let running = conductor()
            .arg("--repo")
            .arg(repo.path())
            .args(["run", "--json"])
            .arg(&workflow)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let asked_path = asked.clone();
        let watcher = std::thread::spawn(move || {
            let mut running = running;
            let code = running.wait().unwrap().code();
            // A run that ended without asking would leave the read below blocked for ever:
            // open and close the writing end (refused when nobody reads any more).
            use std::os::unix::fs::OpenOptionsExt;
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(nix::libc::O_NONBLOCK)
                .open(&asked_path);
            code
        });
        // Blocks until the planner has its envelope.
        let said = std::fs::read_to_string(&asked).unwrap();
        assert_eq!(said, "asked\n", "the run ended before asking the planner");
        Self {
            _fifos: fifos,
            answer,
            watcher,
            run_id: repo.only_run_id(),
        }
    }

    /// Lets the planner answer and returns the run's exit code.
    fn release(self) -> Option<i32> {
        std::fs::write(&self.answer, "go\n").unwrap();
        self.watcher.join().unwrap()
    }
}

/// `status` during an EVALUATE says the run waits for the planner, not that a file the
/// conductor wrote is the step's "last output".
#[test]
fn status_during_an_evaluate_says_it_waits_for_the_planner() {
    let repo = RunRepo::new();
    let held = HeldPlanner::start(&repo);
    let status = stdout_text(&repo.conductor(&["status", &held.run_id]));
    assert_eq!(held.release(), Some(0));
    assert!(
        status.contains("; waiting for the planner's decision (asked ")
            && !status.contains("last output"),
        "{status}"
    );
}

/// `status --watch` printed a frame only when status.json
/// changed, so while a step ran its "running for 0s" line never aged and a hanging agent looked
/// fresh. The watch prints a new frame as the times read differently; it still ends with the run.
#[test]
fn status_watch_shows_the_time_a_step_has_run_growing() {
    use std::io::BufRead;
    let repo = RunRepo::new();
    let held = HeldPlanner::start(&repo);
    let mut watch = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["--color", "never", "status", "--watch", &held.run_id])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = watch.stdout.take().unwrap();
    let (sender, frames) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = sender.send(line);
        }
    });
    // Reads frames until two of them say different times for the same running step; a watch
    // that never reprints fails here instead of leaving the test waiting for ever.
    let mut activities: Vec<String> = Vec::new();
    while activities.len() < 2 {
        let Ok(line) = frames.recv_timeout(std::time::Duration::from_secs(60)) else {
            break;
        };
        if line.contains("running for") && !activities.contains(&line) {
            activities.push(line);
        }
    }
    let released = held.release();
    assert_eq!(activities.len(), 2, "no second frame: {activities:?}");
    assert_eq!(released, Some(0));
    reader.join().unwrap();
    let rest: Vec<String> = frames.try_iter().collect();
    assert!(watch.wait().unwrap().success());
    assert!(
        rest.iter().any(|line| line.contains("state: completed")),
        "{rest:?}"
    );
}

/// What an agent writes reaches the operator's terminal through `runs show` (its last stderr
/// line becomes the step's cause): escape sequences in it are shown, never obeyed.
#[test]
fn runs_show_escapes_the_terminal_controls_an_agent_wrote() {
    let repo = RunRepo::new();
    let agent = repo.path().join(".tnh/ansi-agent.sh");
    std::fs::write(
        &agent,
        "cat >/dev/null\nprintf 'real failure\\n\\033]0;PWNED\\007\\033[2K\\r\\033[32mall tests passed\\033[0m\\n' >&2\nexit 1\n",
    )
    .unwrap();
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "{config}  ansi:\n    kind: command\n    argv: [sh, \"{}\"]\n",
            agent.display()
        ),
    );
    let workflow = repo.workflow_text(
        "ansi.yaml",
        "workflow_id: ansi\nversion: 1\ndescription: d\nentry_step: work\nsteps:\n  - {id: work, opcode: RUN_AGENT, agent: ansi, prompt: go, routes: {\"*\": STOP}}\n",
    );
    let (_, result, output) = repo.run(&workflow, &[]);
    let run_id = result["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", stderr_text(&output)));
    let shown = stdout_text(&repo.conductor(&["runs", "show", run_id]));
    assert!(
        !shown.contains('\u{1b}') && !shown.contains('\u{7}'),
        "{shown:?}"
    );
    assert!(shown.contains("\\x1b]0;PWNED\\x07"), "{shown}");
}

#[test]
fn runs_show_names_a_missing_or_unreadable_visit_manifest() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo);
    let manifest = repo
        .run_dir(&run_id)
        .join("artifacts/implement/1/manifest.json");
    assert!(manifest.is_file(), "{}", manifest.display());
    std::fs::write(&manifest, "{\"bad").unwrap();
    let shown = repo.conductor(&["runs", "show", &run_id]);
    let text = stdout_text(&shown);
    assert_eq!(
        shown.status.code(),
        Some(4),
        "{text}\n{}",
        stderr_text(&shown)
    );
    assert!(
        text.contains(
            "  implement #1: completed (manifest artifacts/implement/1/manifest.json unreadable"
        ),
        "{text}"
    );
    assert!(
        !text.contains("implement #1: completed (0 artifacts)"),
        "{text}"
    );
    assert!(
        stderr_text(&shown).contains("manifest.json"),
        "{}",
        stderr_text(&shown)
    );
    // The visit's folder deleted: said missing, the rest still shown.
    std::fs::remove_dir_all(repo.run_dir(&run_id).join("artifacts/implement/1")).unwrap();
    let shown = repo.conductor(&["runs", "show", &run_id]);
    let text = stdout_text(&shown);
    assert_eq!(
        shown.status.code(),
        Some(4),
        "{text}\n{}",
        stderr_text(&shown)
    );
    assert!(
        text.contains(
            "  implement #1: completed (manifest artifacts/implement/1/manifest.json missing"
        ),
        "{text}"
    );
    assert!(text.contains("  review #1: waiting — "), "{text}");
}

#[test]
fn runs_started_one_after_another_sort_by_start_time() {
    let repo = RunRepo::new();
    // Runs a fraction of a second apart, most of them in one second: their ids sort in the
    // order they were started, as `runs list` and `ls .tnh/run | tail -1` rely on.
    let workflow = repo.workflow_text(
        "stop.yaml",
        "workflow_id: quick\nversion: 1\ndescription: ends at once\nentry_step: done\nsteps:\n  - id: done\n    opcode: STOP\n",
    );
    let started: Vec<String> = (0..6)
        .map(|_| {
            let (code, result, output) = repo.run(&workflow, &[]);
            assert_eq!(code, Some(0), "{result}\n{}", stderr_text(&output));
            result["run_id"].as_str().unwrap().to_owned()
        })
        .collect();
    let mut sorted = started.clone();
    sorted.sort();
    assert_eq!(started, sorted);
}

/// With its metadata.json missing, `status`, `runs show`,
/// `runs events` and `gate show` said "no run X" and pointed to `runs list`, which lists the
/// run as damaged. They find the run: `status` and `runs events` read their own files,
/// `runs show` and `gate show` name the missing file (exit 4) with a hint to restore it.
#[test]
fn a_run_without_its_metadata_file_is_still_found() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo);
    let metadata = repo.run_dir(&run_id).join("metadata.json");
    std::fs::remove_file(&metadata).unwrap();

    let status = repo.conductor_exits(&["status", &run_id], 0);
    assert!(stdout_text(&status).contains("state: waiting"));
    let events = repo.conductor_exits(&["runs", "events", &run_id], 0);
    assert!(stdout_text(&events).contains("\"gate_requested\""));
    for args in [&["runs", "show"][..], &["gate", "show"][..]] {
        let shown = repo.conductor(&[args, &[run_id.as_str()]].concat());
        assert_eq!(
            shown.status.code(),
            Some(4),
            "{args:?}: {}",
            stderr_text(&shown)
        );
        let stderr = stderr_text(&shown);
        assert!(
            stderr.contains(&format!("failed to read `{}`", metadata.display()))
                && stderr.contains("a file of the run directory is missing: restore it")
                && !stderr.contains("no run"),
            "{args:?}: {stderr}"
        );
    }
}

/// `runs events --follow` printed the events it had
/// read, then looked at `status.json` and ended once the run had: the events written in
/// between — the run's last ones, `run_completed` included — were never printed. A reader slow
/// to take the output (a pager, a pipe to another host) widened the gap to whole steps. Here
/// the follower is blocked on a full pipe while the run finishes.
#[test]
fn runs_events_follow_prints_every_event_up_to_the_runs_end() {
    use std::io::{BufRead, Read};
    let repo = RunRepo::new();
    let fifos = tempfile::tempdir().unwrap();
    let started = fifos.path().join("started");
    let go = fifos.path().join("go");
    for fifo in [&started, &go] {
        let made = std::process::Command::new("mkfifo")
            .arg(fifo)
            .status()
            .unwrap();
        assert!(made.success());
    }
    // A first step whose run log becomes a thousand large events (more than a pipe holds),
    // then a step that holds the run until the test lets it go.
    let burst = repo.repo.write(
        ".tnh/burst.py",
        "import json, os, sys\nsys.stdin.read()\nwith open(os.path.join(os.environ['TNH_STEP_DIR'], 'runlog.ndjson'), 'w') as f:\n    for i in range(1000):\n        f.write(json.dumps({'kind': 'note', 'message': 'entry %d ' % i + 'x' * 1000}) + '\\n')\nprint('done')\n",
    );
    let held = repo.repo.write(
        ".tnh/held.sh",
        &format!(
            "#!/bin/sh\ncat >/dev/null\necho started > '{}'\nread line < '{}'\necho done\n",
            started.display(),
            go.display()
        ),
    );
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "agents:\n  burst: {{kind: command, argv: [python3, \"{}\"]}}\n  held: {{kind: command, argv: [sh, \"{}\"]}}\n",
            burst.display(),
            held.display()
        ),
    );
    let workflow = repo.workflow_text(
        "follow.yaml",
        "workflow_id: follow\nversion: 1\ndescription: d\nentry_step: one\nsteps:\n  - {id: one, opcode: RUN_AGENT, agent: burst, prompt: burst, routes: {\"*\": two}}\n  - {id: two, opcode: RUN_AGENT, agent: held, prompt: hold, routes: {\"*\": STOP}}\n",
    );
    let running = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["run", "--json"])
        .arg(&workflow)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started_path = started.clone();
    let watcher = std::thread::spawn(move || {
        let mut running = running;
        let code = running.wait().unwrap().code();
        // A run that ended before its second step would leave the read below blocked.
        use std::os::unix::fs::OpenOptionsExt;
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(&started_path);
        code
    });
    assert_eq!(
        std::fs::read_to_string(&started).unwrap(),
        "started\n",
        "the run ended before its second step"
    );
    let run_id = repo.only_run_id();
    let mut follow = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["runs", "events", &run_id, "--follow"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(follow.stdout.take().unwrap());
    // The first line printed: the follower has read the log and is blocked printing it.
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    // The run ends while the follower cannot print.
    std::fs::write(&go, "go\n").unwrap();
    assert_eq!(watcher.join().unwrap(), Some(0));
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    assert!(follow.wait().unwrap().success());
    let printed: Vec<serde_json::Value> = format!("{first}{rest}")
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let recorded = repo.events(&run_id);
    assert_eq!(
        (
            printed.len(),
            printed.last().map(|event| event["event_type"].clone())
        ),
        (recorded.len(), Some("run_completed".into())),
        "the follower printed {} of {} events",
        printed.len(),
        recorded.len()
    );
}

/// A finished run whose `state.json` was damaged and whose `status.json`
/// was empty too (it is not fsynced: a power loss can leave it so) was listed as a plain
/// `blocked` run — no "(damaged)", no `damaged` field, no warning — although `metadata.json`
/// recorded its success. It is listed as it ended, and as damaged.
#[test]
fn a_finished_run_with_state_and_status_unreadable_is_listed_as_ended_and_damaged() {
    let repo = RunRepo::new();
    let (code, result, output) = repo.run(&repo.workflow("linear.yaml"), &[]);
    assert_eq!(code, Some(0), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap().to_owned();
    let state = repo.run_dir(&run_id).join("state.json");
    std::fs::write(&state, "{\"schema_ver").unwrap();
    std::fs::write(repo.run_dir(&run_id).join("status.json"), "").unwrap();
    let damage = format!("`{}` is not a valid run state", state.display());

    let listed = repo.conductor_exits(&["runs", "list"], 0);
    let row = stdout_text(&listed)
        .lines()
        .find(|line| line.starts_with(&run_id))
        .unwrap_or_default()
        .to_owned();
    assert!(
        row.contains("completed") && row.contains("(damaged)"),
        "{row}"
    );
    assert!(
        stderr_text(&listed).contains(&damage),
        "{}",
        stderr_text(&listed)
    );
    let listed = repo.conductor_exits(&["runs", "list", "--json"], 0);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed["runs"][0]["state"], "completed", "{listed}");
    assert!(
        listed["runs"][0]["damaged"]
            .as_str()
            .is_some_and(|damaged| damaged.contains(&damage)),
        "{listed}"
    );
    let shown = repo.conductor_exits(&["runs", "show", &run_id], 0);
    assert!(
        stdout_text(&shown).contains("damaged:") && stdout_text(&shown).contains(&damage),
        "{}",
        stdout_text(&shown)
    );
    assert!(
        !stdout_text(&shown).contains("blocked"),
        "{}",
        stdout_text(&shown)
    );
}
