//! GATE: a blocking gate waits (exit 3), is decided by a human with `gate approve|reject`, and
//! the run resumes down the matching route; queued reviews continue at once; timeouts route.

use crate::kernel_support::{RunRepo, assert_contiguous, event_types, first_event};
use crate::support::{conductor, stderr_text, stdout_text};

/// The gate fixture with a review gate whose deadline passes at once (`timeout: 1ms`).
fn gate_timing_out_at_once() -> String {
    std::fs::read_to_string(crate::support::fixture("runs/gate.yaml"))
        .unwrap()
        .replace("timeout: 24h", "timeout: 1ms")
}

fn waiting_run(repo: &RunRepo, workflow_text: Option<String>) -> String {
    let workflow = match workflow_text {
        Some(text) => repo.workflow_text("gate.yaml", &text),
        None => repo.workflow("gate.yaml"),
    };
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(3), "{result}\n{}", stderr_text(&output));
    assert_eq!(result["state"], "waiting");
    result["run_id"].as_str().unwrap().to_owned()
}

#[test]
fn a_blocking_gate_waits_then_an_approval_with_resume_reaches_success() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo, None);
    assert_eq!(
        repo.json(&run_id, "status.json")["lifecycle_state"],
        "waiting"
    );
    assert_eq!(
        std::fs::read_to_string(repo.run_dir(&run_id).join("final-state.txt")).unwrap(),
        "waiting gate review\n"
    );
    let request = repo.json(&run_id, "artifacts/review/1/gate_request.json");
    assert_eq!(
        request["reason"],
        format!("Approve the feature of {run_id}")
    );
    // The whole change being approved, and the last step's own.
    assert_eq!(request["context"]["diff"], "artifacts/review/1/run.diff");
    assert_eq!(
        request["context"]["last_step"]["diff"],
        "artifacts/implement/1/workspace.diff"
    );
    assert!(request["deadline"].is_string());
    // The queued review continued at once.
    assert_eq!(
        repo.json(&run_id, "artifacts/queue/1/manifest.json")["termination"],
        "gate_queued"
    );

    let list = repo.conductor(&["gate", "list"]);
    assert!(
        stdout_text(&list).contains(&run_id) && stdout_text(&list).contains("review"),
        "{}",
        stdout_text(&list)
    );
    let show = repo.conductor(&["gate", "show", &run_id]);
    assert!(
        stdout_text(&show).contains("Approve the feature")
            && stdout_text(&show).contains("+the feature"),
        "{}",
        stdout_text(&show)
    );

    repo.conductor_exits(
        &[
            "gate",
            "approve",
            &run_id,
            "--as",
            "alice",
            "--comment",
            "looks right",
            "--resume",
        ],
        0,
    );
    let show = stdout_text(&repo.conductor(&["runs", "show", &run_id]));
    assert!(
        show.contains("decision: gate_approved by alice: \"looks right\""),
        "{show}"
    );
    let outcome = repo.json(&run_id, "artifacts/review/1/gate_outcome.json");
    assert_eq!(
        (
            outcome["decision"].as_str(),
            outcome["reviewer"].as_str(),
            outcome["comment"].as_str()
        ),
        (Some("gate_approved"), Some("alice"), Some("looks right"))
    );
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let types = event_types(&events);
    for kind in [
        "gate_requested",
        "gate_resolved",
        "human_feedback",
        "run_completed",
    ] {
        assert!(
            types.iter().any(|found| found == kind),
            "no {kind}: {types:?}"
        );
    }
    let feedback = first_event(&events, "human_feedback");
    assert_eq!(feedback["comments"], "looks right");
    assert_eq!(
        repo.json(&run_id, "status.json")["lifecycle_state"],
        "completed"
    );
}

#[test]
fn a_rejection_takes_the_reject_route() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo, None);
    let rejected = repo.conductor_exits(
        &[
            "gate",
            "reject",
            &run_id,
            "--as",
            "lead",
            "--comment",
            "not like this",
            "--resume",
        ],
        1,
    );
    assert!(
        stdout_text(&rejected).contains("failed"),
        "{}",
        stdout_text(&rejected)
    );
    assert_eq!(
        std::fs::read_to_string(repo.run_dir(&run_id).join("final-state.txt")).unwrap(),
        "failed failure failed\n"
    );
}

#[test]
fn a_gate_past_its_timeout_takes_the_timeout_route_on_resume() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo, Some(gate_timing_out_at_once()));
    repo.conductor_exits(&["resume", &run_id], 1);
    assert_eq!(
        repo.json(&run_id, "artifacts/review/1/gate_outcome.json")["decision"],
        "gate_timed_out"
    );
    assert_eq!(
        std::fs::read_to_string(repo.run_dir(&run_id).join("final-state.txt")).unwrap(),
        "failed failure timed_out\n"
    );
}

#[test]
fn wrong_deciders_and_repeated_decisions_change_nothing() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo, None);
    let events = repo.events(&run_id).len();
    let mallory = repo.conductor(&["gate", "approve", &run_id, "--as", "mallory"]);
    assert_eq!(mallory.status.code(), Some(2));
    assert!(
        stderr_text(&mallory)
            .contains("`mallory` is not an approver of gate `review` (approvers: lead, alice)"),
        "{}",
        stderr_text(&mallory)
    );
    assert_eq!(
        repo.events(&run_id).len(),
        events,
        "a refused decision recorded something"
    );
    let unknown = repo.conductor(&["gate", "approve", "20260101T000000Z-abcdef", "--as", "lead"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(stderr_text(&unknown).contains("no run `20260101T000000Z-abcdef`"));
    assert_eq!(
        repo.conductor(&["gate", "approve", &run_id, "--as", "lead"])
            .status
            .code(),
        Some(0)
    );
    let twice = repo.conductor(&["gate", "approve", &run_id, "--as", "lead"]);
    assert_eq!(twice.status.code(), Some(2));
    assert!(
        stderr_text(&twice).contains("is not waiting at a gate"),
        "{}",
        stderr_text(&twice)
    );
}

/// A decision must say who made it: an empty reviewer name (`--as ""`, or `$USER` set but
/// empty and no `--as`) is refused with exit 2 and a hint, and nothing is recorded; at the
/// `--wait` prompt too.
#[test]
fn a_decision_without_a_reviewer_name_is_refused() {
    let repo = RunRepo::new();
    let anyone = std::fs::read_to_string(crate::support::fixture("runs/gate.yaml"))
        .unwrap()
        .replace("    approvers: [lead, alice]\n", "");
    let run_id = waiting_run(&repo, Some(anyone.clone()));
    let events = repo.events(&run_id).len();
    let decide = |args: &[&str], user: &str| {
        conductor()
            .arg("--repo")
            .arg(repo.path())
            .args(["--color", "never", "gate"])
            .args(args)
            .arg(&run_id)
            .env("USER", user)
            .output()
            .unwrap()
    };
    for (args, user) in [
        (&["approve", "--as", ""][..], "bob"),
        (&["reject", "--as", "  "][..], "bob"),
        (&["approve"][..], ""),
    ] {
        let refused = decide(args, user);
        let stderr = stderr_text(&refused);
        assert_eq!(refused.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("no reviewer name") && stderr.contains("`--as NAME`"),
            "{args:?}: {stderr}"
        );
        assert_eq!(
            repo.events(&run_id).len(),
            events,
            "{args:?} recorded something"
        );
        assert!(
            !repo
                .run_dir(&run_id)
                .join("artifacts/review/1/gate_outcome.json")
                .exists()
        );
    }
    let approved = decide(&["approve"], "carol");
    assert_eq!(
        approved.status.code(),
        Some(0),
        "{}",
        stderr_text(&approved)
    );
    assert_eq!(
        repo.json(&run_id, "artifacts/review/1/gate_outcome.json")["reviewer"],
        "carol"
    );

    let repo = RunRepo::new();
    let workflow = repo.workflow_text("gate.yaml", &anyone);
    let transcript = run_wait_as(&repo, &workflow, &["--as", ""], "bob", &[]);
    assert!(
        transcript.contains("no reviewer name")
            && !transcript.contains("[a/r/s/l]")
            && transcript.trim_end().ends_with("exit=2"),
        "{transcript}"
    );
    let run_id = repo.only_run_id();
    assert_eq!(
        repo.json(&run_id, "status.json")["lifecycle_state"],
        "waiting"
    );
}

#[test]
fn of_two_concurrent_approvals_exactly_one_wins() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo, None);
    let spawn = || {
        conductor()
            .arg("--repo")
            .arg(repo.path())
            .args(["gate", "approve", &run_id, "--as", "lead"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (first, second) = (spawn(), spawn());
    let codes = [
        first.wait_with_output().unwrap().status.code(),
        second.wait_with_output().unwrap().status.code(),
    ];
    assert_eq!(
        codes.iter().filter(|code| **code == Some(0)).count(),
        1,
        "{codes:?}"
    );
    assert_eq!(
        codes.iter().filter(|code| **code == Some(2)).count(),
        1,
        "{codes:?}"
    );
    let resolved = repo
        .events(&run_id)
        .iter()
        .filter(|event| event["event_type"] == "gate_resolved" && event["step_id"] == "review")
        .count();
    assert_eq!(resolved, 1);
}

#[test]
fn status_and_gate_list_notice_a_timed_out_gate() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo, Some(gate_timing_out_at_once()));
    let status = repo.conductor(&["status", &run_id]);
    assert!(
        !stdout_text(&status).contains("state: waiting"),
        "{}",
        stdout_text(&status)
    );
    assert_eq!(
        repo.json(&run_id, "artifacts/review/1/gate_outcome.json")["decision"],
        "gate_timed_out"
    );
    assert!(!stdout_text(&repo.conductor(&["gate", "list"])).contains(&run_id));
    repo.conductor_exits(&["resume", &run_id], 1);
    assert_eq!(
        std::fs::read_to_string(repo.run_dir(&run_id).join("final-state.txt")).unwrap(),
        "failed failure timed_out\n"
    );
}

/// `gate list` that resolves a gate past its deadline says so, and how the route is taken,
/// instead of only "no gate is waiting".
#[test]
fn gate_list_says_which_gate_it_found_timed_out() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo, Some(gate_timing_out_at_once()));
    let list = repo.conductor(&["gate", "list"]);
    assert_eq!(list.status.code(), Some(0));
    assert!(
        !stdout_text(&list).contains(&run_id),
        "{}",
        stdout_text(&list)
    );
    let note = stderr_text(&list);
    assert!(
        note.contains(&format!("gate `review` of run {run_id} timed out"))
            && note.contains(&format!("`tnh-conductor resume {run_id}` takes that route")),
        "{note}"
    );
    assert_eq!(
        repo.json(&run_id, "artifacts/review/1/gate_outcome.json")["decision"],
        "gate_timed_out"
    );
}

/// `run --wait WORKFLOW` on a pseudo-terminal, typing `answers` (`PROMPT=ANSWER`) as the
/// prompts appear (tests/fixtures/pty/answer.py); its output ends with `exit=N`.
fn run_wait_answering(
    repo: &RunRepo,
    workflow: &std::path::Path,
    answers: &[&str],
) -> std::process::Output {
    std::process::Command::new("python3")
        .arg(crate::support::fixture("pty/answer.py"))
        .args(answers)
        .args(["--", env!("CARGO_BIN_EXE_tnh-conductor"), "--repo"])
        .arg(repo.path())
        .args(["run", "--wait"])
        .arg(workflow)
        .env("USER", "alice")
        .output()
        .unwrap()
}

#[test]
fn run_wait_asks_at_the_gate_on_a_terminal() {
    let repo = RunRepo::new();
    let workflow = repo.workflow("gate.yaml");
    let output = run_wait_answering(
        &repo,
        &workflow,
        &[
            "[a/r/s/l]: =s",
            "[a/r/s/l]: =a",
            "comment (optional): =ship it",
        ],
    );
    let transcript = stdout_text(&output);
    assert!(
        transcript.contains("gate `review`: Approve the feature"),
        "{transcript}"
    );
    assert!(
        transcript.contains("+the feature"),
        "`s` shows the diff: {transcript}"
    );
    assert!(transcript.trim_end().ends_with("exit=0"), "{transcript}");
    let run_id = repo.only_run_id();
    let outcome = repo.json(&run_id, "artifacts/review/1/gate_outcome.json");
    assert_eq!(
        (outcome["reviewer"].as_str(), outcome["comment"].as_str()),
        (Some("alice"), Some("ship it"))
    );
}

#[test]
fn run_wait_leaves_the_gate_waiting_when_asked() {
    let repo = RunRepo::new();
    let workflow = repo.workflow("gate.yaml");
    let output = run_wait_answering(&repo, &workflow, &["[a/r/s/l]: =l"]);
    assert!(
        stdout_text(&output).trim_end().ends_with("exit=3"),
        "{}",
        stdout_text(&output)
    );
}

/// End of input (Ctrl-D) at the prompt leaves the run waiting, as `l` does: nobody is there
/// to answer, and the run must not be resumed over and over.
#[test]
fn run_wait_leaves_the_gate_waiting_when_input_ends() {
    let repo = RunRepo::new();
    let workflow = repo.workflow("gate.yaml");
    let output = run_wait_answering(&repo, &workflow, &["[a/r/s/l]: =^D"]);
    let transcript = stdout_text(&output);
    assert!(transcript.trim_end().ends_with("exit=3"), "{transcript}");
    assert!(transcript.contains("input ended"), "{transcript}");
    assert!(!transcript.contains("time ran out"), "{transcript}");
    let run_id = repo.only_run_id();
    let types: Vec<String> = repo
        .events(&run_id)
        .iter()
        .map(|event| event["event_type"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(!types.iter().any(|kind| kind == "run_resumed"), "{types:?}");
    assert_eq!(
        repo.json(&run_id, "status.json")["lifecycle_state"],
        "waiting"
    );
}

/// Ctrl-C (typed on the terminal), SIGTERM or SIGHUP at the prompt ends the command at once
/// with exit 130; the run is left waiting at its gate, nothing decided or resumed.
#[test]
fn run_wait_ends_at_once_on_a_signal_at_the_prompt_and_leaves_the_gate_waiting() {
    for signal in ["^C", "!TERM", "!HUP"] {
        let repo = RunRepo::new();
        let workflow = repo.workflow("gate.yaml");
        let answer = format!("[a/r/s/l]: ={signal}");
        let output = run_wait_answering(&repo, &workflow, &[answer.as_str()]);
        let transcript = stdout_text(&output);
        assert!(
            transcript.trim_end().ends_with("exit=130"),
            "{signal}: {transcript}"
        );
        assert!(
            transcript.contains("the run is left waiting at gate `review`")
                && transcript.contains("gate `review` still waits for a decision"),
            "{signal}: {transcript}"
        );
        let run_id = repo.only_run_id();
        let events = repo.events(&run_id);
        assert!(
            !events
                .iter()
                .any(|event| event["event_type"] == "run_resumed"
                    || (event["event_type"] == "gate_resolved" && event["step_id"] == "review")),
            "{signal}: {:?}",
            event_types(&events)
        );
        assert_eq!(
            repo.json(&run_id, "status.json")["lifecycle_state"],
            "waiting",
            "{signal}"
        );
    }
}

/// `run --wait` with no terminal to ask on (a pipe, cron, CI) says it will not ask, then
/// leaves the run waiting (exit 3) with the command that decides it.
#[test]
fn run_wait_without_a_terminal_says_it_will_not_ask() {
    let repo = RunRepo::new();
    let workflow = repo.workflow("gate.yaml");
    let output = repo.conductor_exits(&["run", "--wait", workflow.to_str().unwrap()], 3);
    let stderr = stderr_text(&output);
    assert!(
        stderr.contains(
            "--wait: not asking at gate `review`: standard input and error are not both a terminal"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("gate approve"), "{stderr}");
}

/// A terminal that closes at the comment question — its input ends, or SIGHUP arrives —
/// decides nothing, as Ctrl-C there does: the answer `a` is not taken without its comment.
#[test]
fn run_wait_decides_nothing_when_the_terminal_closes_at_the_comment() {
    for closed in ["^D", "!HUP", "^C"] {
        let repo = RunRepo::new();
        let workflow = repo.workflow("gate.yaml");
        let comment = format!("comment (optional): ={closed}");
        let output = run_wait_answering(&repo, &workflow, &["[a/r/s/l]: =a", comment.as_str()]);
        let transcript = stdout_text(&output);
        let expected = if closed == "^D" { "exit=3" } else { "exit=130" };
        assert!(
            transcript.trim_end().ends_with(expected),
            "{closed}: {transcript}"
        );
        let run_id = repo.only_run_id();
        let events = repo.events(&run_id);
        assert!(
            !events
                .iter()
                .any(|event| (event["event_type"] == "gate_resolved"
                    && event["step_id"] == "review")
                    || event["event_type"] == "run_resumed"),
            "{closed}: {:?}",
            event_types(&events)
        );
        assert_eq!(
            repo.json(&run_id, "status.json")["lifecycle_state"],
            "waiting",
            "{closed}"
        );
    }
}

/// A gate decided from another shell while `run --wait` asks: the answer typed afterwards is
/// refused, and the prompt reports what the run really is now (completed) with its exit code,
/// instead of asking the stale gate again.
#[test]
fn run_wait_reports_the_real_end_when_the_gate_was_decided_elsewhere() {
    let repo = RunRepo::new();
    let workflow = repo.workflow("gate.yaml");
    let approve = format!(
        "$\"{}\" --repo \"{}\" gate approve \"$(ls \"{}\")\" --as lead --resume >/dev/null 2>&1",
        env!("CARGO_BIN_EXE_tnh-conductor"),
        repo.path().display(),
        repo.path().join(".tnh/run").display()
    );
    let output = run_wait_answering(
        &repo,
        &workflow,
        &[
            &format!("[a/r/s/l]: ={approve}"),
            "=a",
            "comment (optional): =",
            // Asked the stale gate again: ends the input, which would exit 3.
            "[a/r/s/l]: =^D",
        ],
    );
    let transcript = stdout_text(&output);
    assert!(transcript.trim_end().ends_with("exit=0"), "{transcript}");
    assert!(
        transcript.contains("decided by another process"),
        "{transcript}"
    );
    assert!(transcript.contains("completed"), "{transcript}");
    let run_id = repo.only_run_id();
    assert_eq!(
        std::fs::read_to_string(repo.run_dir(&run_id).join("final-state.txt")).unwrap(),
        "completed success review\n"
    );
    let decisions = repo
        .events(&run_id)
        .iter()
        .filter(|event| event["event_type"] == "gate_resolved" && event["step_id"] == "review")
        .count();
    assert_eq!(decisions, 1);
}

#[test]
fn run_wait_honours_the_gate_timeout_while_asking() {
    let repo = RunRepo::new();
    let workflow = repo.workflow_text("gate.yaml", &gate_timing_out_at_once());
    let output = run_wait_answering(&repo, &workflow, &[]);
    let transcript = stdout_text(&output);
    assert!(
        transcript.contains("the gate's time ran out"),
        "{transcript}"
    );
    assert!(transcript.trim_end().ends_with("exit=1"), "{transcript}");
}

/// `run --wait ARGS… WORKFLOW` on a pseudo-terminal as `$USER` `user`, typing `answers` as in
/// [`run_wait_answering`].
fn run_wait_as(
    repo: &RunRepo,
    workflow: &std::path::Path,
    args: &[&str],
    user: &str,
    answers: &[&str],
) -> String {
    let output = std::process::Command::new("python3")
        .arg(crate::support::fixture("pty/answer.py"))
        .args(answers)
        .args(["--", env!("CARGO_BIN_EXE_tnh-conductor"), "--repo"])
        .arg(repo.path())
        .args(["run", "--wait"])
        .args(args)
        .arg(workflow)
        .env("USER", user)
        .output()
        .unwrap();
    stdout_text(&output)
}

/// The gate fixture, its gate timing out `timeout` after it is requested.
fn gate_timing_out_after(timeout: &str) -> String {
    gate_timing_out_at_once().replace("timeout: 1ms", &format!("timeout: {timeout}"))
}

/// A shell command (for an answer `$…`) that returns once the deadline of the repository's one
/// waiting gate has passed, then runs `then`.
fn after_the_deadline(repo: &RunRepo, then: &str) -> String {
    let script = repo.repo.write(
        ".tnh/after_deadline.py",
        "import glob, json, sys, time, datetime\n\
         path = glob.glob(sys.argv[1] + '/.tnh/run/*/artifacts/review/1/gate_request.json')[0]\n\
         text = json.load(open(path))['deadline']\n\
         day, clock = text.rstrip('Z').split('T')\n\
         whole, _, fraction = clock.partition('.')\n\
         deadline = datetime.datetime.fromisoformat(day + 'T' + whole).replace(tzinfo=datetime.timezone.utc).timestamp() + float('0.' + (fraction or '0'))\n\
         while time.time() <= deadline + 0.05:\n    time.sleep(0.05)\n",
    );
    format!(
        "$python3 \"{}\" \"{}\" && {then}",
        script.display(),
        repo.path().display()
    )
}

/// The operator approved at the `--wait` prompt
/// before the gate's deadline, which passed while the comment prompt waited: the approval was
/// dropped, the gate timed out, and the prompt said "decided by another process meanwhile" —
/// there was none. The decision is as of the answer: recorded with the comment typed after
/// the deadline, `decided_at` the moment `a` was answered.
#[test]
fn run_wait_decides_as_of_the_answer_when_the_deadline_passes_at_the_comment() {
    let repo = RunRepo::new();
    let workflow = repo.workflow_text("gate.yaml", &gate_timing_out_after("5s"));
    let wait = after_the_deadline(&repo, "true");
    let transcript = run_wait_as(
        &repo,
        &workflow,
        &[],
        "alice",
        &[
            "[a/r/s/l]: =a",
            &format!("comment (optional): ={wait}"),
            "=typed after the deadline",
        ],
    );
    assert!(transcript.trim_end().ends_with("exit=0"), "{transcript}");
    assert!(
        !transcript.contains("another process") && !transcript.contains("time ran out"),
        "{transcript}"
    );
    let run_id = repo.only_run_id();
    let outcome = repo.json(&run_id, "artifacts/review/1/gate_outcome.json");
    assert_eq!(
        (
            outcome["decision"].as_str(),
            outcome["reviewer"].as_str(),
            outcome["comment"].as_str()
        ),
        (
            Some("gate_approved"),
            Some("alice"),
            Some("typed after the deadline")
        )
    );
    let request = repo.json(&run_id, "artifacts/review/1/gate_request.json");
    let at =
        |value: &serde_json::Value| value.as_str().unwrap().parse::<jiff::Timestamp>().unwrap();
    assert!(
        at(&outcome["decided_at"]) < at(&request["deadline"]),
        "decided as of the answer: {outcome}"
    );
}

/// The same, when another command (`gate list` here) noticed the deadline first and resolved
/// the gate as timed out while the comment was being typed: the prompt says so, instead of
/// "decided by another process", and the run takes its timeout route.
#[test]
fn run_wait_says_the_gate_timed_out_when_another_command_resolved_it_at_the_comment() {
    let repo = RunRepo::new();
    let workflow = repo.workflow_text("gate.yaml", &gate_timing_out_after("5s"));
    let list = format!(
        "\"{}\" --repo \"{}\" gate list >/dev/null 2>&1",
        env!("CARGO_BIN_EXE_tnh-conductor"),
        repo.path().display()
    );
    let wait = after_the_deadline(&repo, &list);
    let transcript = run_wait_as(
        &repo,
        &workflow,
        &[],
        "alice",
        &[
            "[a/r/s/l]: =a",
            &format!("comment (optional): ={wait}"),
            "=late",
        ],
    );
    assert!(transcript.trim_end().ends_with("exit=1"), "{transcript}");
    assert!(
        transcript.contains("gate `review` timed out before your decision was recorded")
            && !transcript.contains("decided by another process"),
        "{transcript}"
    );
    let run_id = repo.only_run_id();
    assert_eq!(
        std::fs::read_to_string(repo.run_dir(&run_id).join("final-state.txt")).unwrap(),
        "failed failure timed_out\n"
    );
}

/// The inline prompt always decided as `$USER`, so at a gate whose
/// approvers do not include it (`implement_adr`'s `final_review`, `approvers: [lead]`, the
/// README's first command) every approval was refused and asked again for ever. The prompt
/// says so before asking and asks which approver to decide as; `--as NAME` decides as NAME.
#[test]
fn run_wait_asks_which_approver_to_decide_as_and_takes_as() {
    let repo = RunRepo::new();
    let text = std::fs::read_to_string(crate::support::fixture("runs/gate.yaml"))
        .unwrap()
        .replace("approvers: [lead, alice]", "approvers: [lead]");
    let workflow = repo.workflow_text("gate.yaml", &text);
    let transcript = run_wait_as(
        &repo,
        &workflow,
        &[],
        "alice",
        &[
            "[a/r/s/l]: =a",
            "go back): =bob",
            "go back): =",
            "[a/r/s/l]: =a",
            "go back): =lead",
            "comment (optional): =fine",
        ],
    );
    assert!(transcript.trim_end().ends_with("exit=0"), "{transcript}");
    let run_id = repo.only_run_id();
    let warned = transcript
        .find("`alice` is not an approver of this gate (approvers: lead)")
        .unwrap_or_else(|| panic!("{transcript}"));
    assert!(
        warned < transcript.find("[a/r/s/l]").unwrap()
            && transcript.contains(&format!(
                "`tnh-conductor gate approve {run_id} --as lead --resume`"
            ))
            && transcript.contains("`bob` is not an approver of this gate"),
        "{transcript}"
    );
    let outcome = repo.json(&run_id, "artifacts/review/1/gate_outcome.json");
    assert_eq!(
        (outcome["reviewer"].as_str(), outcome["comment"].as_str()),
        (Some("lead"), Some("fine"))
    );

    let repo = RunRepo::new();
    let workflow = repo.workflow_text("gate.yaml", &text);
    let transcript = run_wait_as(
        &repo,
        &workflow,
        &["--as", "lead"],
        "alice",
        &["[a/r/s/l]: =a", "comment (optional): ="],
    );
    assert!(transcript.trim_end().ends_with("exit=0"), "{transcript}");
    assert!(!transcript.contains("not an approver"), "{transcript}");
    let run_id = repo.only_run_id();
    assert_eq!(
        repo.json(&run_id, "artifacts/review/1/gate_outcome.json")["reviewer"],
        "lead"
    );
}

/// The gate fixture with a step after the approval, so the run goes on after the prompt.
fn gate_then_a_step() -> String {
    std::fs::read_to_string(crate::support::fixture("runs/gate.yaml"))
        .unwrap()
        .replace("gate_approved: STOP", "gate_approved: finish")
        + "  - id: finish\n    opcode: RUN_AGENT\n    agent: scripted\n    prompt: \"WRITE done.txt: done\"\n    routes:\n      \"*\": STOP\n"
}

/// After a decision at the `--wait` prompt the live progress line was
/// left on the terminal and the summary appended to it (`… · run_completedrun 2026…`); and
/// with `--json` the run's progress still showed once it went on after the decision.
#[test]
fn run_wait_clears_the_progress_line_and_keeps_json_quiet() {
    let repo = RunRepo::new();
    let workflow = repo.workflow_text("gate.yaml", &gate_then_a_step());
    let transcript = run_wait_as(
        &repo,
        &workflow,
        &[],
        "alice",
        &["[a/r/s/l]: =a", "comment (optional): ="],
    );
    assert!(transcript.trim_end().ends_with("exit=0"), "{transcript}");
    let run_id = repo.only_run_id();
    let summary = transcript
        .find(&format!("run {run_id}: completed"))
        .unwrap_or_else(|| panic!("{transcript}"));
    assert!(
        transcript[..summary].ends_with('\n') || transcript[..summary].ends_with("\r\x1b[K"),
        "the summary starts a line of its own: {transcript:?}"
    );
    assert!(transcript.contains("finish #1"), "{transcript}");

    let repo = RunRepo::new();
    let workflow = repo.workflow_text("gate.yaml", &gate_then_a_step());
    let transcript = run_wait_as(
        &repo,
        &workflow,
        &["--json"],
        "alice",
        &["[a/r/s/l]: =a", "comment (optional): ="],
    );
    assert!(transcript.trim_end().ends_with("exit=0"), "{transcript}");
    let after = &transcript[transcript.find("comment (optional): ").unwrap()..];
    assert!(
        !after.contains("finish #1") && !after.contains('▶'),
        "no progress with --json: {after}"
    );
    assert!(after.contains("\"state\": \"completed\""), "{after}");
}

/// The workflow file is read again when a run continues, so an edit made while a run waits can
/// leave the decided outcome without a route: the run ends with a recorded runtime error.
#[test]
fn an_outcome_the_edited_workflow_does_not_route_ends_the_run_with_exit_4() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo, None);
    let original = std::fs::read_to_string(repo.workflow("gate.yaml")).unwrap();
    let start = original.find("  - id: review").unwrap();
    let end = original.find("  - id: failed").unwrap();
    let edited = format!(
        "{}  - id: review\n    opcode: GATE\n    gate: queue_for_review\n    routes:\n      gate_queued: STOP\n{}",
        &original[..start],
        &original[end..]
    );
    let workflow = repo.workflow_text("gate.yaml", &edited);
    let valid = repo.conductor(&["validate", workflow.to_str().unwrap()]);
    assert_eq!(valid.status.code(), Some(0), "{}", stdout_text(&valid));

    let approved =
        repo.conductor_exits(&["gate", "approve", &run_id, "--as", "lead", "--resume"], 4);
    let said = format!("{}{}", stdout_text(&approved), stderr_text(&approved));
    assert!(
        said.contains("gate_approved") && said.contains("review"),
        "{said}"
    );
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    // The audit trail says the workflow changed under the run, with both digests.
    let changed: Vec<_> = events
        .iter()
        .filter(|event| event["event_type"] == "workflow_changed")
        .collect();
    assert_eq!(changed.len(), 1, "{events:?}");
    assert_ne!(changed[0]["recorded_sha256"], changed[0]["found_sha256"]);
    assert_eq!(
        repo.json(&run_id, "metadata.json")["workflow_sha256"],
        changed[0]["found_sha256"]
    );
    let failed = events.last().unwrap();
    assert_eq!(failed["event_type"], "run_failed", "{failed}");
    assert!(
        failed.to_string().contains("gate_approved"),
        "the recorded error names the outcome: {failed}"
    );
    assert_eq!(
        repo.json(&run_id, "status.json")["lifecycle_state"],
        "failed"
    );
}

/// The worktree of a run waiting at a gate, deleted by hand.
fn delete_worktree(repo: &RunRepo, run_id: &str) -> std::path::PathBuf {
    let worktree = repo.path().join(".tnh/worktrees").join(run_id);
    std::fs::remove_dir_all(&worktree).unwrap();
    worktree
}

#[test]
fn resume_checks_a_deleted_worktree_out_again_and_records_it() {
    let repo = RunRepo::new();
    let text = std::fs::read_to_string(crate::support::fixture("runs/gate.yaml"))
        .unwrap()
        .replace("WRITE feature.txt: the feature", "SAY nothing to change");
    let run_id = waiting_run(&repo, Some(text));
    let worktree = delete_worktree(&repo, &run_id);

    let resumed = repo.conductor(&["resume", &run_id]);

    assert_eq!(resumed.status.code(), Some(3), "{}", stderr_text(&resumed));
    assert!(worktree.join(".git").is_file());
    let events = repo.events(&run_id);
    let recreated = first_event(&events, "worktree_recreated");
    assert_eq!(recreated["path"], worktree.display().to_string());
    assert_contiguous(&events);
}

#[test]
fn a_deleted_worktree_that_held_uncommitted_work_is_drift_until_accepted() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo, None);
    let worktree = delete_worktree(&repo, &run_id);
    let events_before = repo.events(&run_id).len();

    let refused = repo.conductor(&["resume", &run_id]);

    assert_eq!(refused.status.code(), Some(2), "{}", stderr_text(&refused));
    assert!(
        stderr_text(&refused)
            .contains("its folder had been deleted and was checked out again from the work branch"),
        "{}",
        stderr_text(&refused)
    );
    assert_eq!(
        repo.events(&run_id).len(),
        events_before,
        "nothing recorded"
    );
    assert!(worktree.join(".git").is_file());
    assert!(
        !worktree.join("feature.txt").exists(),
        "uncommitted work is lost"
    );

    let accepted = repo.conductor(&["resume", &run_id, "--accept-drift"]);

    assert_eq!(
        accepted.status.code(),
        Some(3),
        "{}",
        stderr_text(&accepted)
    );
    let events = repo.events(&run_id);
    first_event(&events, "drift_accepted");
    assert_contiguous(&events);
}

#[test]
fn an_approval_after_the_deadline_is_refused_and_the_gate_times_out() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo, Some(gate_timing_out_at_once()));

    let late = repo.conductor(&["gate", "approve", &run_id, "--as", "lead", "--resume"]);

    assert_eq!(late.status.code(), Some(2), "{}", stderr_text(&late));
    let stderr = stderr_text(&late);
    assert!(
        stderr.contains("gate `review`") && stderr.contains("timed out at"),
        "{stderr}"
    );
    assert!(stderr.contains("gate_timed_out` route"), "{stderr}");
    assert_eq!(
        repo.json(&run_id, "artifacts/review/1/gate_outcome.json")["decision"],
        "gate_timed_out"
    );
    repo.conductor_exits(&["resume", &run_id], 1);
    assert_eq!(
        std::fs::read_to_string(repo.run_dir(&run_id).join("final-state.txt")).unwrap(),
        "failed failure timed_out\n"
    );
}

/// A gate past its deadline says so in `gate show`; a late decision's hint is true when the
/// `gate_timed_out` route ended the run (it points to `runs show`, not to `resume`). A timeout
/// too long for a representable deadline is clamped to the last one, never `null`.
#[test]
fn a_gate_past_its_deadline_says_so_and_a_late_decision_says_what_happened() {
    let repo = RunRepo::new();
    let ends = gate_timing_out_at_once()
        .replace("gate_timed_out: timed_out", "gate_timed_out: STOP")
        .replace(
            "  - id: timed_out\n    opcode: STOP\n    outcome: failure\n    reason: nobody decided in time\n",
            "",
        );
    let run_id = waiting_run(&repo, Some(ends));
    let show = stdout_text(&repo.conductor_exits(&["gate", "show", &run_id], 0));
    assert!(
        show.contains("  deadline:  ") && show.contains("PASSED: the gate times out"),
        "{show}"
    );
    let late = repo.conductor_exits(&["gate", "approve", &run_id, "--as", "lead"], 2);
    let stderr = stderr_text(&late);
    assert!(
        stderr.contains("route ended the run (failure)")
            && stderr.contains(&format!("`tnh-conductor runs show {run_id}`"))
            && !stderr.contains("resume"),
        "{stderr}"
    );

    let repo = RunRepo::new();
    let run_id = waiting_run(
        &repo,
        Some(gate_timing_out_at_once().replace("timeout: 1ms", "timeout: 3000000d")),
    );
    let request = repo.json(&run_id, "artifacts/review/1/gate_request.json");
    assert!(
        request["deadline"]
            .as_str()
            .is_some_and(|deadline| deadline.starts_with("9999-")),
        "{request}"
    );
    let show = stdout_text(&repo.conductor_exits(&["gate", "show", &run_id], 0));
    assert!(
        show.contains("  deadline:  9999-") && !show.contains("PASSED"),
        "{show}"
    );
}

/// A decision refused because the workflow file became invalid records nothing: the gate
/// still waits, and the next decision is the only one in the log.
#[test]
fn a_decision_refused_for_an_invalid_workflow_records_nothing() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo, None);
    let workflow = repo.path().join("wf/gate.yaml");
    let valid = std::fs::read_to_string(&workflow).unwrap();
    std::fs::write(&workflow, valid.replace("routes:", "rotes:")).unwrap();
    let events_before = repo.events(&run_id).len();

    let refused = repo.conductor(&["gate", "approve", &run_id, "--as", "lead"]);

    assert_eq!(refused.status.code(), Some(2), "{}", stderr_text(&refused));
    assert!(
        stderr_text(&refused).contains("unknown key `rotes`"),
        "the problems are shown: {}",
        stderr_text(&refused)
    );
    assert_eq!(
        repo.events(&run_id).len(),
        events_before,
        "nothing recorded"
    );
    assert!(
        !repo
            .run_dir(&run_id)
            .join("artifacts/review/1/gate_outcome.json")
            .exists()
    );
    assert_eq!(
        repo.json(&run_id, "artifacts/review/1/manifest.json")["termination"],
        "waiting"
    );
    std::fs::write(&workflow, valid).unwrap();
    repo.conductor_exits(&["gate", "reject", &run_id, "--as", "lead", "--resume"], 1);
    let decisions: Vec<serde_json::Value> = repo
        .events(&run_id)
        .into_iter()
        .filter(|event| event["event_type"] == "gate_resolved" && event["step_id"] == "review")
        .map(|event| event["decision"].clone())
        .collect();
    assert_eq!(decisions, ["gate_rejected"]);
}

/// A rejection whose process died right after recording it stands: a later approval is
/// refused, and the run takes the rejection's route (by that decision or by `resume`).
#[test]
fn a_decision_interrupted_after_it_was_recorded_stands() {
    for then in ["approve", "resume"] {
        let repo = RunRepo::new();
        let run_id = waiting_run(&repo, None);
        let next_seq = repo.events(&run_id).len() + 1;
        let killed = conductor()
            .arg("--repo")
            .arg(repo.path())
            .args(["gate", "reject", &run_id, "--as", "alice"])
            .env("TNH_TEST_KILL_AT_EVENT", next_seq.to_string())
            .output()
            .unwrap();
        assert_eq!(killed.status.code(), None, "{}", stderr_text(&killed));
        assert_eq!(
            repo.events(&run_id).last().unwrap()["event_type"],
            "gate_resolved"
        );

        let later = match then {
            "approve" => repo.conductor(&["gate", "approve", &run_id, "--as", "lead"]),
            _ => repo.conductor(&["resume", &run_id]),
        };

        if then == "approve" {
            assert_eq!(later.status.code(), Some(2), "{}", stderr_text(&later));
            assert!(
                stderr_text(&later).contains("already decided (gate_rejected)"),
                "{}",
                stderr_text(&later)
            );
        } else {
            assert_eq!(later.status.code(), Some(1), "{}", stderr_text(&later));
        }
        let events = repo.events(&run_id);
        crate::kernel_support::assert_contiguous(&events);
        let decisions: Vec<&serde_json::Value> = events
            .iter()
            .filter(|event| event["event_type"] == "gate_resolved" && event["step_id"] == "review")
            .map(|event| &event["decision"])
            .collect();
        assert_eq!(decisions, ["gate_rejected"], "{then}");
        assert_eq!(
            repo.json(&run_id, "artifacts/review/1/manifest.json")["termination"],
            "gate_rejected",
            "{then}"
        );
        let completed = events
            .iter()
            .filter(|event| event["event_type"] == "step_completed" && event["step_id"] == "review")
            .count();
        assert_eq!(completed, 1, "{then}");
        if then == "approve" {
            repo.conductor_exits(&["resume", &run_id], 1);
        }
        assert_eq!(
            std::fs::read_to_string(repo.run_dir(&run_id).join("final-state.txt")).unwrap(),
            "failed failure failed\n",
            "{then}"
        );
    }
}

/// An approval whose process died right after recording it (`gate_resolved`) keeps the
/// reviewer's comment on the record: `resume`, finishing the decision, records the
/// `human_feedback` event the dead process did not.
#[test]
fn a_decision_interrupted_after_it_was_recorded_keeps_the_reviewers_feedback() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo, None);
    let next_seq = repo.events(&run_id).len() + 1;
    let comment = "LGTM, but watch the retry loop";
    let killed = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args([
            "gate",
            "approve",
            &run_id,
            "--as",
            "alice",
            "--comment",
            comment,
        ])
        .env("TNH_TEST_KILL_AT_EVENT", next_seq.to_string())
        .output()
        .unwrap();
    assert_eq!(killed.status.code(), None, "{}", stderr_text(&killed));
    assert_eq!(
        repo.events(&run_id).last().unwrap()["event_type"],
        "gate_resolved"
    );

    repo.conductor_exits(&["resume", &run_id], 0);
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let feedback: Vec<&serde_json::Value> = events
        .iter()
        .filter(|event| event["event_type"] == "human_feedback")
        .collect();
    assert_eq!(feedback.len(), 1, "{:?}", event_types(&events));
    let feedback = feedback[0];
    assert_eq!(
        (
            feedback["reviewer"].as_str(),
            feedback["comments"].as_str(),
            feedback["decision"].as_str(),
            feedback["step_id"].as_str(),
        ),
        (
            Some("alice"),
            Some(comment),
            Some("gate_approved"),
            Some("review")
        ),
        "{feedback}"
    );
    let types = event_types(&events);
    let resolved = types
        .iter()
        .position(|kind| kind == "gate_resolved")
        .unwrap();
    let fed = types
        .iter()
        .position(|kind| kind == "human_feedback")
        .unwrap();
    assert!(resolved < fed, "{types:?}");
}

/// The hint a waiting run prints names an approver when the gate has approvers: the command
/// it shows is accepted as is.
#[test]
fn the_approve_hint_names_an_approver_and_works_as_printed() {
    let repo = RunRepo::new();
    let workflow = repo.workflow("gate.yaml");
    let waiting = repo.conductor_exits(&["run", workflow.to_str().unwrap()], 3);
    let stderr = stderr_text(&waiting);
    let hint = stderr
        .lines()
        .find_map(|line| line.split("approve with `").nth(1))
        .and_then(|rest| rest.split('`').next())
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(hint.contains(" --as lead --resume"), "{hint}");

    let args: Vec<&str> = hint.split_whitespace().skip(1).collect();
    repo.conductor_exits(&args, 0);
}

/// A decision on a run whose `state.json` is gone changes nothing and says what is missing.
#[test]
fn a_decision_on_a_run_without_its_state_file_says_so_and_changes_nothing() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo, None);
    std::fs::remove_file(repo.run_dir(&run_id).join("state.json")).unwrap();
    let events_before = repo.events(&run_id).len();

    let refused = repo.conductor(&["gate", "approve", &run_id, "--as", "lead"]);

    assert_eq!(refused.status.code(), Some(2), "{}", stderr_text(&refused));
    let stderr = stderr_text(&refused);
    assert!(
        stderr.contains("state.json") && stderr.contains("put `"),
        "{stderr}"
    );
    assert_eq!(repo.events(&run_id).len(), events_before);
}

/// The reviewer decides on what the gate showed. A worktree changed while the run waits is
/// refused (exit 2, nothing recorded) even when the decision routes straight to STOP, and
/// accepted only when told, with a `drift_accepted` event.
#[test]
fn a_worktree_changed_while_the_gate_waits_is_refused_until_accepted() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo, None);
    let worktree = repo.json(&run_id, "metadata.json")["worktree_path"]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::write(
        std::path::Path::new(&worktree).join("unreviewed.txt"),
        "not shown to the reviewer\n",
    )
    .unwrap();
    let events_before = repo.events(&run_id).len();
    for verb in ["approve", "reject"] {
        let refused = repo.conductor_exits(&["gate", verb, &run_id, "--as", "alice"], 2);
        let message = stderr_text(&refused);
        assert!(
            message.contains("changed since the run's last checkpoint")
                && message.contains("--accept-drift"),
            "{message}"
        );
    }
    assert_eq!(
        repo.events(&run_id).len(),
        events_before,
        "nothing recorded"
    );
    assert_eq!(
        repo.json(&run_id, "status.json")["lifecycle_state"],
        "waiting"
    );

    repo.conductor_exits(
        &[
            "gate",
            "approve",
            &run_id,
            "--as",
            "alice",
            "--accept-drift",
        ],
        0,
    );
    let events = repo.events(&run_id);
    let drift = first_event(&events, "drift_accepted");
    assert_ne!(drift["recorded"]["tree"], drift["found"]["tree"]);
    assert_eq!(
        std::fs::read_to_string(repo.run_dir(&run_id).join("final-state.txt")).unwrap(),
        "completed success review\n"
    );
}

/// The reviewer sees the whole change being approved, not only the last step's: after a step
/// that changed nothing (a read-only review), the gate's diff and diffstat still hold what the
/// earlier step wrote, and the journal counts it too.
#[test]
fn a_gate_shows_the_whole_change_of_the_run_after_a_step_that_changed_nothing() {
    let repo = RunRepo::new();
    let text = "workflow_id: whole\nversion: 1\ndescription: d\nentry_step: write\nsteps:\n  - id: write\n    opcode: RUN_AGENT\n    agent: scripted\n    prompt: |\n      WRITE feature.txt: the feature\n      WRITE creds.txt: a secret\n    routes: {completed: review, \"*\": failed}\n  - id: review\n    opcode: RUN_AGENT\n    agent: scripted\n    prompt: |\n      SAY looks fine\n    routes: {completed: approve, \"*\": failed}\n  - id: approve\n    opcode: GATE\n    gate: requires_approval\n    routes: {gate_approved: STOP, gate_rejected: failed}\n  - id: failed\n    opcode: STOP\n    outcome: failure\n";
    let run_id = waiting_run(&repo, Some(text.to_owned()));
    let request = repo.json(&run_id, "artifacts/approve/1/gate_request.json");
    let context = &request["context"];
    assert_eq!(context["diffstat"]["files_changed"], 2, "{context}");
    assert_eq!(context["last_step"]["step_id"], "review", "{context}");
    assert_eq!(context["last_step"]["diffstat"]["files_changed"], 0);
    let show = repo.conductor(&["gate", "show", &run_id]);
    let shown = stdout_text(&show);
    assert!(
        shown.contains("+a secret") && shown.contains("+the feature"),
        "{shown}"
    );
    assert!(shown.contains("(the whole run)"), "{shown}");
    assert!(shown.contains("last step: `review` #1"), "{shown}");
    repo.conductor_exits(&["gate", "approve", &run_id], 0);
    let journal = stdout_text(&repo.conductor(&["journal"]));
    assert!(journal.contains("(2 files changed, +2 -0)"), "{journal}");
}

#[test]
fn a_decision_on_a_run_whose_driver_died_at_the_gate_says_resume() {
    let repo = RunRepo::new();
    // The sequence number of the review gate's request, from a run that got there.
    let first = waiting_run(&repo, None);
    let requested = repo
        .events(&first)
        .into_iter()
        .find(|event| event["event_type"] == "gate_requested" && event["step_id"] == "review")
        .unwrap()["seq"]
        .as_u64()
        .unwrap();
    repo.run_killed_at(&repo.workflow("gate.yaml"), requested);
    let run_id = std::fs::read_dir(repo.path().join(".tnh/run"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .find(|name| *name != first)
        .unwrap();
    let events_before = repo.events(&run_id).len();

    let refused = repo.conductor(&["gate", "approve", &run_id, "--as", "lead"]);

    assert_eq!(refused.status.code(), Some(2), "{}", stderr_text(&refused));
    let stderr = stderr_text(&refused);
    assert!(
        stderr.contains("the process driving it died at gate `review`")
            && stderr.contains(&format!(
                "`tnh-conductor resume {run_id}` requests the gate again"
            )),
        "{stderr}"
    );
    assert!(!stderr.contains("between steps"), "{stderr}");
    assert_eq!(
        repo.events(&run_id).len(),
        events_before,
        "nothing recorded"
    );
    // The hint works as printed: resume asks again, and the decision is taken.
    repo.conductor_exits(&["resume", &run_id], 3);
    repo.conductor_exits(&["gate", "approve", &run_id, "--as", "lead", "--resume"], 0);
}

#[test]
fn a_deleted_work_branch_is_refused_naming_how_to_restore_it() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo, None);
    let branch = format!("tnh/gated/{run_id}");
    let head = repo.json(&run_id, "state.json")["fingerprint"]["head"]
        .as_str()
        .unwrap()
        .to_owned();
    repo.repo
        .git(&["update-ref", "-d", &format!("refs/heads/{branch}")]);
    let events_before = repo.events(&run_id).len();

    for command in [
        vec!["gate", "approve", &run_id, "--as", "lead", "--resume"],
        vec!["resume", &run_id],
    ] {
        let refused = repo.conductor_exits(&command, 2);
        let stderr = stderr_text(&refused);
        assert!(
            stderr.contains(&format!(
                "the work branch `{branch}` of run `{run_id}` is gone (deleted)"
            )) && stderr.contains(&format!("branch {branch} {head}`"))
                && stderr.contains(&format!("refs/tnh/runs/{run_id}/")),
            "{stderr}"
        );
        assert!(!stderr.contains("HEAD^{commit}"), "{stderr}");
        assert_eq!(
            repo.events(&run_id).len(),
            events_before,
            "nothing recorded"
        );
    }

    // Restored as the hint says, the run goes on.
    repo.repo.git(&["branch", &branch, &head]);
    repo.conductor_exits(&["gate", "approve", &run_id, "--as", "lead", "--resume"], 0);
}

/// `gate list` and `status` of a waiting run took the run's
/// lock to look for a timed-out gate even when the gate had no deadline, so a decision made
/// while a dashboard polled them was refused at random as "driven by another process". They
/// no longer take the lock (the lock file, removed here, is not created again), and a gate
/// past its deadline is still resolved (`status_and_gate_list_notice_a_timed_out_gate`).
#[test]
fn looking_at_a_waiting_gate_does_not_take_the_runs_lock() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo, None);
    let lock = repo.run_dir(&run_id).join("lock");
    std::fs::remove_file(&lock).unwrap();
    let listed = repo.conductor(&["gate", "list"]);
    assert!(
        stdout_text(&listed).contains(&run_id),
        "{}",
        stdout_text(&listed)
    );
    let status = repo.conductor(&["status", &run_id]);
    assert!(
        stdout_text(&status).contains("state: waiting"),
        "{}",
        stdout_text(&status)
    );
    assert!(!lock.exists(), "a look took the lock");
    repo.conductor_exits(&["gate", "approve", &run_id, "--as", "lead"], 0);
}

/// A waiting run whose state.json is damaged was left out of `gate list`
/// ("no gate is waiting") while `status` and `runs list` showed it waiting. It is listed from
/// status.json, with what is damaged.
#[test]
fn gate_list_shows_a_waiting_gate_whose_state_file_is_damaged() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo, None);
    std::fs::write(repo.run_dir(&run_id).join("state.json"), "{ garbled").unwrap();
    let listed = repo.conductor_exits(&["gate", "list"], 0);
    let text = stdout_text(&listed);
    assert!(
        text.contains(&run_id) && text.contains("review"),
        "{text}\n{}",
        stderr_text(&listed)
    );
    assert!(
        text.contains("damaged:") && text.contains("state.json"),
        "{text}"
    );
}

/// The files of a run directory, byte for byte, by name (the lock and the worktree left out).
fn run_files(repo: &RunRepo, run_id: &str) -> std::collections::BTreeMap<String, Vec<u8>> {
    let root = repo.run_dir(run_id);
    let mut files = std::collections::BTreeMap::new();
    let mut folders = vec![root.clone()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else if entry.file_name() != "lock" {
                let name = path.strip_prefix(&root).unwrap().display().to_string();
                files.insert(name, std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

/// A `state.json` a newer release wrote
/// (`schema_version` 2, with a field this release does not know) was decided and continued
/// without a word, the unknown field dropped from the rewritten file, which still claimed
/// version 2. Deciding, resuming and rolling back refuse it (exit 2, nothing written), naming
/// the file and the version; `status` and `gate list` look without resolving its timeout. A
/// `metadata.json` whose recorded versions are newer is refused the same way.
#[test]
fn a_run_a_newer_release_wrote_is_refused_and_left_as_it_is() {
    let repo = RunRepo::new();
    let text = gate_timing_out_at_once();
    let run_id = waiting_run(&repo, Some(text));
    let state_path = repo.run_dir(&run_id).join("state.json");
    let mut state = repo.json(&run_id, "state.json");
    state["schema_version"] = 2.into();
    state["budget_ledger"] = serde_json::json!({"spent_usd": 12.5});
    std::fs::write(&state_path, serde_json::to_vec_pretty(&state).unwrap()).unwrap();
    let before = run_files(&repo, &run_id);
    for args in [
        &["status", &run_id][..],
        &["gate", "list"][..],
        &["runs", "show", &run_id][..],
    ] {
        let looked = repo.conductor(args);
        assert_eq!(
            looked.status.code(),
            Some(0),
            "{args:?}: {}",
            stderr_text(&looked)
        );
        assert!(
            format!("{}{}", stdout_text(&looked), stderr_text(&looked))
                .contains("was written by a newer tnh-conductor"),
            "{args:?}: {}",
            stdout_text(&looked)
        );
    }
    for args in [
        &["gate", "approve", &run_id, "--as", "lead", "--resume"][..],
        &["gate", "reject", &run_id, "--as", "lead"][..],
        &["resume", &run_id][..],
        &["rollback", &run_id, "--target", "pre_run"][..],
    ] {
        let refused = repo.conductor(args);
        assert_eq!(
            refused.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr_text(&refused)
        );
        let said = stderr_text(&refused);
        assert!(
            said.contains(&format!(
                "`{}` was written by a newer tnh-conductor: its `schema_version` is 2",
                state_path.display()
            )) && said.contains("use the newer tnh-conductor"),
            "{args:?}: {said}"
        );
    }
    assert!(
        run_files(&repo, &run_id) == before,
        "the run directory changed"
    );

    // The same run, its state as this release wrote it, but its metadata from a newer one.
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo, None);
    let metadata_path = repo.run_dir(&run_id).join("metadata.json");
    let mut metadata = repo.json(&run_id, "metadata.json");
    metadata["schema_versions"]["event"] = 3.into();
    std::fs::write(
        &metadata_path,
        serde_json::to_vec_pretty(&metadata).unwrap(),
    )
    .unwrap();
    let before = run_files(&repo, &run_id);
    let refused = repo.conductor_exits(&["gate", "approve", &run_id, "--as", "lead"], 2);
    assert!(
        stderr_text(&refused).contains("its `schema_versions.event` is 3"),
        "{}",
        stderr_text(&refused)
    );
    assert!(
        run_files(&repo, &run_id) == before,
        "the run directory changed"
    );
}

/// A run whose `state.json` was damaged looked healthy in `status`,
/// `runs list` and `runs show` (a normal waiting run); only `gate list` said so. Then deciding
/// and resuming it failed with exit 4, although nothing was done. The views say what is
/// damaged and what to do; deciding and resuming refuse with exit 2.
#[test]
fn a_run_whose_state_file_is_damaged_says_so_everywhere_and_is_refused_with_exit_2() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo, None);
    let state_path = repo.run_dir(&run_id).join("state.json");
    let state = std::fs::read(&state_path).unwrap();
    std::fs::write(&state_path, &state[..100]).unwrap();
    let damage = format!("`{}` is not a valid run state", state_path.display());
    for args in [
        &["status", &run_id][..],
        &["runs", "show", &run_id][..],
        &["runs", "list"][..],
    ] {
        let looked = repo.conductor(args);
        assert_eq!(
            looked.status.code(),
            Some(0),
            "{args:?}: {}",
            stderr_text(&looked)
        );
        let text = stdout_text(&looked);
        assert!(
            text.contains(&damage)
                || text.contains(&format!("{run_id}  waiting")) && text.contains("(damaged)"),
            "{args:?}: {text}"
        );
        assert!(
            stderr_text(&looked).contains(&damage) || args[0] == "status",
            "{args:?}: {}",
            stderr_text(&looked)
        );
    }
    let listed = repo.conductor(&["runs", "list", "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert!(
        listed["runs"][0]["damaged"]
            .as_str()
            .is_some_and(|damaged| damaged.contains(&damage)),
        "{listed}"
    );
    for args in [
        &["gate", "approve", &run_id, "--as", "lead"][..],
        &["resume", &run_id][..],
    ] {
        let refused = repo.conductor(args);
        assert_eq!(
            refused.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr_text(&refused)
        );
        assert!(
            stderr_text(&refused).contains(&damage)
                && stderr_text(&refused).contains("nothing was changed"),
            "{args:?}: {}",
            stderr_text(&refused)
        );
    }
    assert_eq!(std::fs::read(&state_path).unwrap(), &state[..100]);
}

/// A decision without `--resume` that routes to a step is neither an interruption nor a
/// blocked run: the run is `decided` ("approved, waiting to resume"), `final-state.txt` says
/// `decided gate_approved undo` (the step `resume` runs next), and the journal lists it in
/// progress, not under Blockers.
#[test]
fn a_decision_without_resume_is_not_said_to_be_an_interruption() {
    let repo = RunRepo::new();
    let text = std::fs::read_to_string(crate::support::fixture("runs/gate.yaml"))
        .unwrap()
        .replace("gate_approved: STOP", "gate_approved: undo")
        + "  - id: undo\n    opcode: ROLLBACK\n    target: pre_run\n    routes:\n      completed: STOP\n      error: failed\n";
    let run_id = waiting_run(&repo, Some(text));
    repo.conductor_exits(&["gate", "approve", &run_id, "--as", "lead"], 0);
    let status = repo.json(&run_id, "status.json");
    assert_eq!(status["lifecycle_state"], "decided");
    assert!(
        status["reason"]
            .as_str()
            .unwrap()
            .starts_with("gate `review` approved, waiting to resume"),
        "{status}"
    );
    assert_eq!(
        std::fs::read_to_string(repo.run_dir(&run_id).join("final-state.txt")).unwrap(),
        "decided gate_approved undo\n"
    );
    let shown = stdout_text(&repo.conductor_exits(&["status", &run_id], 0));
    assert!(shown.contains("state: decided"), "{shown}");
    let journal = stdout_text(&repo.conductor_exits(&["journal"], 0));
    let blockers = journal
        .split("## Blockers")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .unwrap();
    assert!(!blockers.contains(&run_id), "{journal}");
    let in_progress = journal.split("## In Progress").nth(1).unwrap();
    assert!(
        in_progress.split("\n## ").next().unwrap().contains(&run_id),
        "{journal}"
    );
    repo.conductor_exits(&["resume", &run_id], 0);
}

/// A lock file that cannot be opened (a read-only run directory, here a
/// folder where the file should be) got the hint for a lock held by another process ("wait
/// for that process to finish"), though there is none. A folder there is named as such, with
/// the hint to remove it, not one about the file system.
#[test]
fn a_lock_file_that_cannot_be_opened_is_not_said_to_be_held() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo, None);
    let lock = repo.run_dir(&run_id).join("lock");
    std::fs::remove_file(&lock).unwrap();
    std::fs::create_dir(&lock).unwrap();
    let refused = repo.conductor_exits(&["gate", "approve", &run_id, "--as", "lead"], 2);
    let stderr = stderr_text(&refused);
    assert!(
        stderr.contains("is a folder, not a regular file") && stderr.contains("rm -r "),
        "{stderr}"
    );
    assert!(!stderr.contains("wait for that process"), "{stderr}");
}

/// With the workflow file moved away after the run started, a gate
/// decision (and `resume`) said "workflow is invalid" with a `validate` hint. They say the
/// file the run was started from is gone, with its recorded digest, and change nothing: put
/// back, the decision goes through.
#[test]
fn a_decision_whose_workflow_file_is_gone_says_so_and_changes_nothing() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo, None);
    let metadata = repo.json(&run_id, "metadata.json");
    let path = std::path::PathBuf::from(metadata["workflow_path"].as_str().unwrap());
    let aside = path.with_extension("moved");
    std::fs::rename(&path, &aside).unwrap();
    let events_before = repo.events(&run_id).len();
    for args in [
        &[
            "gate",
            "approve",
            run_id.as_str(),
            "--as",
            "lead",
            "--resume",
        ][..],
        &["resume", run_id.as_str()][..],
    ] {
        let refused = repo.conductor(args);
        assert_eq!(
            refused.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr_text(&refused)
        );
        let stderr = stderr_text(&refused);
        assert!(
            stderr.contains(&format!(
                "run `{run_id}` was started from the workflow `{}`, which is gone",
                path.display()
            )) && stderr.contains(&format!(
                "its SHA-256 was {}",
                metadata["workflow_sha256"].as_str().unwrap()
            )),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("is invalid"), "{stderr}");
    }
    assert_eq!(
        repo.events(&run_id).len(),
        events_before,
        "nothing recorded"
    );
    std::fs::rename(&aside, &path).unwrap();
    repo.conductor_exits(&["gate", "approve", &run_id, "--as", "lead", "--resume"], 0);
}

/// The lock file was opened through
/// links, then truncated and given the pid, so an agent that replaced `lock` with a link to
/// `.git/config` had that file emptied by the next `resume` or decision. A link (or a FIFO)
/// there is refused, the file it leads to left as it was.
#[test]
fn a_lock_file_replaced_by_a_link_is_refused_and_its_target_left_alone() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo, None);
    let target = repo.path().join(".git/config");
    let config = std::fs::read(&target).unwrap();
    let lock = repo.run_dir(&run_id).join("lock");
    std::fs::remove_file(&lock).unwrap();
    std::os::unix::fs::symlink(&target, &lock).unwrap();
    for args in [
        &["gate", "approve", run_id.as_str(), "--as", "lead"][..],
        &["resume", run_id.as_str()][..],
    ] {
        let refused = repo.conductor(args);
        assert_eq!(
            refused.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr_text(&refused)
        );
        let stderr = stderr_text(&refused);
        assert!(
            stderr.contains("is a symbolic link, not a regular file")
                && stderr.contains("remove it"),
            "{args:?}: {stderr}"
        );
    }
    assert_eq!(
        std::fs::read(&target).unwrap(),
        config,
        "the link's target was written"
    );
    std::fs::remove_file(&lock).unwrap();
    repo.conductor_exits(&["gate", "approve", &run_id, "--as", "lead"], 0);
}

/// `runs list`, `runs show` and the journal showed a gate past its deadline
/// as plainly waiting. They say it is past its deadline, and what happens next; a gate still
/// in time is not said to be.
#[test]
fn the_views_say_a_waiting_gate_is_past_its_deadline() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo, Some(gate_timing_out_at_once()));
    let said = format!(
        "`tnh-conductor resume {run_id}` or any decision times it out (its `gate_timed_out` route)"
    );

    let listed = repo.conductor_exits(&["runs", "list"], 0);
    assert!(
        stdout_text(&listed).contains("review (past its deadline)"),
        "{}",
        stdout_text(&listed)
    );
    assert!(
        stderr_text(&listed).contains(&said),
        "{}",
        stderr_text(&listed)
    );
    let listed = repo.conductor_exits(&["runs", "list", "--json"], 0);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert!(
        listed["runs"][0]["gate_deadline_passed"].is_string(),
        "{listed}"
    );
    let show = stdout_text(&repo.conductor_exits(&["runs", "show", &run_id], 0));
    assert!(
        show.lines()
            .any(|line| line.starts_with("  review #1: waiting")
                && line.contains("PAST its deadline")
                && line.contains(&said)),
        "{show}"
    );
    let journal = stdout_text(&repo.conductor_exits(&["journal"], 0));
    let pending = journal
        .split("## Pending Review")
        .nth(1)
        .and_then(|rest| rest.lines().find(|line| line.starts_with("- [ ] waiting")))
        .unwrap_or_default();
    assert!(
        pending.contains(&run_id)
            && pending.contains("PAST its deadline")
            && pending.contains(&said),
        "{journal}"
    );
    let in_progress = journal
        .split("## In Progress")
        .nth(1)
        .and_then(|rest| rest.lines().nth(1))
        .unwrap_or_default();
    assert!(in_progress.contains(&said), "{journal}");
    let journal = repo.conductor_exits(&["journal", "--format", "json"], 0);
    let journal: serde_json::Value = serde_json::from_slice(&journal.stdout).unwrap();
    let waiting = journal["pending_review"]
        .as_array()
        .and_then(|reviews| reviews.iter().find(|review| review["kind"] == "waiting"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(waiting["deadline_passed"], true, "{journal}");
    // Nothing was decided by looking: the gate still waits.
    assert_eq!(
        repo.json(&run_id, "status.json")["lifecycle_state"],
        "waiting"
    );

    let repo = RunRepo::new();
    let run_id = waiting_run(&repo, None);
    let listed = repo.conductor_exits(&["runs", "list"], 0);
    assert!(
        !stdout_text(&listed).contains("past its deadline")
            && !stderr_text(&listed).contains("PAST"),
        "{}",
        stdout_text(&listed)
    );
    let show = stdout_text(&repo.conductor_exits(&["runs", "show", &run_id], 0));
    assert!(!show.contains("PAST"), "{show}");
    let journal = stdout_text(&repo.conductor_exits(&["journal"], 0));
    assert!(!journal.contains("PAST"), "{journal}");
}
