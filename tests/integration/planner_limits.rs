//! Planners that misbehave: Ctrl-C and SIGTERM while a planner thinks (command or http), a
//! planner that prints without end or answers in bytes that are not UTF-8, an HTTP 429 with
//! `Retry-After`, credentials in an http planner's URL, a failing codex planner, and decisions
//! too large to record.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tnh_conductor::planner::PlannerInput;
use tnh_conductor::planner::backend::{Attempt, Backend, Request, Verdict, decide};

use crate::kernel_support::{RunRepo, first_event};
use crate::support::{conductor, fixture, stderr_text};

/// One agent step, then an EVALUATE asking the `judge` planner.
pub const JUDGED: &str = "workflow_id: judged
version: 1
description: an agent step judged by the `judge` planner
entry_step: implement
steps:
  - id: implement
    opcode: RUN_AGENT
    agent: scripted
    prompt: |
      WRITE feature.txt: the feature
      SAY implemented the feature
    routes:
      \"*\": evaluate
  - id: evaluate
    opcode: EVALUATE
    prompt: planner.evaluate_results.v1
    planner: judge
    allowed_next_steps: [failed]
    routes:
      success: STOP
      partial: failed
      blocked: failed
      unsafe: failed
      needs_human: failed
  - id: failed
    opcode: STOP
    outcome: failure
";

/// A repository whose configuration ends with `planners:` text.
pub fn repo_with(planners: &str) -> RunRepo {
    let repo = RunRepo::new();
    let config = repo.path().join(".tnh/config.yaml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(planners);
    std::fs::write(config, text).unwrap();
    repo
}

/// A shell script planner in `.tnh/` that logs each call to `judge.calls`, then runs `body`.
pub fn script_planner(repo: &RunRepo, body: &str, extra: &str) {
    let dir = repo.path().join(".tnh");
    let script = dir.join("judge.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncat > /dev/null\necho call >> \"{}\"\n{body}\n",
            dir.join("judge.calls").display()
        ),
    )
    .unwrap();
    let config = dir.join("config.yaml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "planners:\n  judge:\n    kind: command\n    argv: [sh, \"{}\"]\n{extra}",
        script.display()
    ));
    std::fs::write(config, text).unwrap();
}

pub fn calls(repo: &RunRepo) -> usize {
    std::fs::read_to_string(repo.path().join(".tnh/judge.calls"))
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

/// Starts `run --json` on `workflow` in the background.
fn spawn_run(repo: &RunRepo, workflow: &Path) -> std::process::Child {
    conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["run", "--json"])
        .arg(workflow)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A signal while a command planner thinks ends the run 130 (resumable) at once, as for an
/// agent step: the planner is stopped, and no second attempt is started.
#[test]
fn ctrl_c_or_sigterm_during_a_command_planner_ends_the_run_130_without_a_new_attempt() {
    for signal in [Signal::SIGINT, Signal::SIGTERM] {
        let repo = RunRepo::new();
        let fifo = repo.path().join("planner.fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        script_planner(
            &repo,
            &format!("echo started > \"{}\"\nexec sleep 600", fifo.display()),
            "    timeout: 10m\n    attempts: 3\n",
        );
        let workflow = repo.workflow_text("judged.yaml", JUDGED);
        let child = spawn_run(&repo, &workflow);
        // Opening the FIFO blocks until the planner has started and written to it.
        let mut started = String::new();
        std::fs::File::open(&fifo)
            .unwrap()
            .read_to_string(&mut started)
            .unwrap();
        let sent = Instant::now();
        kill(Pid::from_raw(child.id() as i32), signal).unwrap();
        let output = child.wait_with_output().unwrap();

        assert_eq!(
            output.status.code(),
            Some(130),
            "{signal}: {}",
            stderr_text(&output)
        );
        assert!(
            sent.elapsed() < Duration::from_secs(60),
            "{signal}: the planner's 10m timeout was waited out"
        );
        assert_eq!(calls(&repo), 1, "{signal}: a new attempt after the signal");
        let run_id = repo.only_run_id();
        assert!(
            tnh_conductor::runner::processes_with_variable("TNH_RUN_ID", &run_id).is_empty(),
            "{signal}: the planner survived"
        );
        let events = repo.events(&run_id);
        let interrupted = first_event(&events, "run_interrupted");
        assert_eq!(interrupted["step_id"], "evaluate", "{signal}");
    }
}

/// An http server on 127.0.0.1 that reports each connection and gives it to `reply`.
struct Server {
    url: String,
    arrivals: mpsc::Receiver<Instant>,
    _release: mpsc::Sender<()>,
}

impl Server {
    fn start(replies: Vec<&'static str>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!(
            "http://{}/v1/chat/completions",
            listener.local_addr().unwrap()
        );
        let (arrival, arrivals) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for (reply, stream) in replies.into_iter().zip(listener.incoming()) {
                let mut stream = stream.unwrap();
                read_request(&mut stream);
                let _ = arrival.send(Instant::now());
                if reply.is_empty() {
                    held.push(stream);
                    continue;
                }
                let _ = stream.write_all(reply.as_bytes());
            }
            let _ = released.recv();
            drop(held);
        });
        Server {
            url,
            arrivals,
            _release: release,
        }
    }
}

/// Reads one HTTP request (its headers and body) and returns its request line.
pub(crate) fn read_request(stream: &mut TcpStream) -> String {
    let mut reader = BufReader::new(stream);
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    first.trim_end().to_owned()
}

const TOO_MANY: &str = "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
const TOO_MANY_LONG: &str = "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 50\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
const SUCCESS: &str = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 64\r\nConnection: close\r\n\r\n{\"choices\":[{\"message\":{\"content\":\"{\\\"status\\\":\\\"success\\\"}\"}}]}";

/// SIGINT while an http planner's server never answers: exit 130 promptly, one request.
#[test]
fn ctrl_c_abandons_an_http_planner_that_never_answers() {
    let server = Server::start(vec!["", ""]);
    let repo = repo_with(&format!(
        "planners:\n  judge:\n    kind: http\n    url: \"{}\"\n    model: m\n    timeout: 10m\n    attempts: 2\n",
        server.url
    ));
    let workflow = repo.workflow_text("judged.yaml", JUDGED);
    let child = spawn_run(&repo, &workflow);
    server
        .arrivals
        .recv_timeout(Duration::from_secs(120))
        .unwrap();
    let sent = Instant::now();
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130), "{}", stderr_text(&output));
    assert!(sent.elapsed() < Duration::from_secs(60));
    assert!(
        server.arrivals.try_recv().is_err(),
        "a second request after Ctrl-C"
    );
}

fn http_backend(url: &str, extra: &str) -> Backend {
    let text =
        format!("planners:\n  local:\n    kind: http\n    url: \"{url}\"\n    model: m\n{extra}");
    let config =
        tnh_conductor::config::Config::parse(text.as_bytes(), Path::new("config.yaml")).unwrap();
    Backend::from_config("local", &config).unwrap()
}

fn envelope() -> serde_json::Value {
    let path = std::fs::read_dir(fixture("planner_vectors"))
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .find(|path| {
            path.extension()
                .is_some_and(|extension| extension == "json")
        })
        .unwrap();
    let vector: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    vector["envelope"].clone()
}

fn ask(
    backend: &Backend,
    cancellation: &tnh_conductor::runner::Cancellation,
) -> (Verdict, Vec<Attempt>) {
    let envelope = envelope();
    let input = PlannerInput::read(&envelope);
    let request = Request {
        envelope: &envelope,
        input: &input,
        prompt: "Judge.",
        cwd: None,
        run_variables: None,
        cancellation,
    };
    decide(backend, &request)
}

/// A 429's `Retry-After` is waited before the next attempt.
#[test]
fn an_http_429_retry_after_is_honoured_before_the_next_attempt() {
    let server = Server::start(vec![TOO_MANY, SUCCESS]);
    let backend = http_backend(&server.url, "    attempts: 2\n");
    let (verdict, attempts) = ask(&backend, &tnh_conductor::runner::Cancellation::never());
    let first = server.arrivals.recv().unwrap();
    let second = server.arrivals.recv().unwrap();
    assert!(
        second - first >= Duration::from_secs(1),
        "retried after {:?}",
        second - first
    );
    assert!(
        matches!(verdict, Verdict::Decided { ref decided_by, .. } if decided_by == "local"),
        "{verdict:?}"
    );
    assert!(
        attempts[0].error.as_deref().unwrap().contains("HTTP 429"),
        "{attempts:?}"
    );
}

/// The wait for a `Retry-After` ends with the run's cancellation, and no attempt follows.
#[test]
fn a_retry_after_wait_is_cut_short_by_cancellation() {
    let server = Server::start(vec![TOO_MANY_LONG, SUCCESS]);
    let backend = http_backend(&server.url, "    attempts: 2\n");
    let (handle, cancellation) = tnh_conductor::runner::CancelHandle::new();
    let started = Instant::now();
    let asking = std::thread::spawn(move || ask(&backend, &cancellation));
    server.arrivals.recv().unwrap();
    handle.cancel();
    let (verdict, attempts) = asking.join().unwrap();
    assert_eq!(verdict, Verdict::Interrupted);
    assert_eq!(attempts.len(), 1);
    assert!(started.elapsed() < Duration::from_secs(40));
    assert!(server.arrivals.try_recv().is_err(), "a second request");
}

/// The user and password of an http planner's URL, and the values of its query, never reach
/// an error message (which the run directory records).
#[test]
fn credentials_in_an_http_planner_url_are_not_recorded() {
    // A server that hangs up on the one request: the attempt fails. (The port stays ours
    // meanwhile; a port picked free and let go could be handed to a concurrent test's server
    // before the request, which would then get this request and one of its replies.)
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hang_up = std::thread::spawn(move || drop(listener.accept()));
    let url = format!(
        "http://alice:pw-SECRET1@127.0.0.1:{port}/v1/chat/completions?api_key=qk-SECRET2&x=1"
    );
    let backend = http_backend(&url, "    attempts: 1\n");
    let (verdict, attempts) = ask(&backend, &tnh_conductor::runner::Cancellation::never());
    hang_up.join().unwrap();
    let recorded = format!("{verdict:?} {attempts:?}");
    assert!(recorded.contains("127.0.0.1"), "{recorded}");
    for secret in ["pw-SECRET1", "qk-SECRET2", "alice"] {
        assert!(!recorded.contains(secret), "{secret} in {recorded}");
    }
}

/// A planner that prints without end is stopped at the output limit, and what is kept of its
/// answer is bounded: the attempt fails saying so.
#[test]
fn a_planner_that_prints_without_end_is_stopped_at_the_output_limit() {
    let repo = RunRepo::new();
    script_planner(
        &repo,
        "exec yes '{\"status\": \"success\"}'",
        "    timeout: 5m\n    attempts: 1\n",
    );
    let workflow = repo.workflow_text("judged.yaml", JUDGED);
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(1), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let attempts = repo.json(run_id, "artifacts/evaluate/1/planner_attempts.json");
    let error = attempts["attempts"][0]["error"].as_str().unwrap();
    assert!(error.contains("output_limit"), "{error}");
    assert!(attempts["attempts"][0]["raw"].as_str().unwrap().len() < 20 * 1024);
    let decision = repo.json(run_id, "artifacts/evaluate/1/planner_decision.json");
    assert_eq!(decision["decided_by"], "kernel");
}

/// An answer that is not UTF-8 is kept lossily, and the error says what is wrong with it.
#[test]
fn an_answer_that_is_not_utf8_is_kept_and_named() {
    let repo = RunRepo::new();
    script_planner(
        &repo,
        "printf '{\"status\": \"success\", \"blockers\": [{\"code\": \"x\", \"summary\": \"caf\\351\"}]}'",
        "    attempts: 1\n",
    );
    let workflow = repo.workflow_text("judged.yaml", JUDGED);
    let (_, result, output) = repo.run(&workflow, &[]);
    let run_id = result["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", stderr_text(&output)));
    let attempts = repo.json(run_id, "artifacts/evaluate/1/planner_attempts.json");
    let attempt = &attempts["attempts"][0];
    assert!(
        attempt["raw"].as_str().unwrap().contains("caf\u{FFFD}"),
        "{attempt}"
    );
    assert!(
        attempt["error"].as_str().unwrap().contains("not UTF-8"),
        "{attempt}"
    );
}

/// A codex planner that fails says why, from the `turn.failed` event on its stdout.
#[test]
fn a_failing_codex_planner_names_the_cause_codex_reported() {
    let repo = repo_with("planners:\n  judge:\n    kind: codex\n    attempts: 1\n");
    let workflow = repo.workflow_text("judged.yaml", JUDGED);
    let output = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["run", "--json"])
        .arg(&workflow)
        .env(
            "TNH_CODEX_BIN",
            fixture("agents/bin/codex").display().to_string(),
        )
        .env("TNH_FAKE_SCENARIO", "codex-exec-json-unauthorized")
        .output()
        .unwrap();
    let result: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("{}", stderr_text(&output)));
    let run_id = result["run_id"].as_str().unwrap();
    let decision = repo.json(run_id, "artifacts/evaluate/1/planner_decision.json");
    let summary = decision["blockers"][0]["summary"].as_str().unwrap();
    assert!(
        summary.contains("turn.failed: unexpected status 401 Unauthorized"),
        "{summary}"
    );
}

/// A decision with too many risk flags, or a huge `fix_instructions`, is refused as a failed
/// attempt: events, manifests and the next envelope stay small.
#[test]
fn an_oversized_decision_is_a_failed_attempt() {
    let repo = RunRepo::new();
    let flags: Vec<String> = (0..5000).map(|index| format!("\"flag{index}\"")).collect();
    let answer = format!(
        "{{\"status\": \"partial\", \"risk_flags\": [{}]}}",
        flags.join(",")
    );
    std::fs::write(repo.path().join(".tnh/answer.json"), &answer).unwrap();
    script_planner(
        &repo,
        &format!("cat \"{}\"", repo.path().join(".tnh/answer.json").display()),
        "    attempts: 1\n",
    );
    let workflow = repo.workflow_text("judged.yaml", JUDGED);
    let (_, result, output) = repo.run(&workflow, &[]);
    let run_id = result["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", stderr_text(&output)));
    let attempts = repo.json(run_id, "artifacts/evaluate/1/planner_attempts.json");
    let error = attempts["attempts"][0]["error"].as_str().unwrap();
    assert!(error.contains("5000 risk_flags (at most 32)"), "{error}");
    let events = std::fs::read_to_string(repo.run_dir(run_id).join("events.ndjson")).unwrap();
    assert!(
        events.lines().all(|line| line.len() < 8 * 1024),
        "a large event line"
    );
}

/// A command planner runs in the run's worktree: what it changes there during EVALUATE is a
/// recorded policy violation (`planner_changed_worktree`) that makes the decision `unsafe`
/// and stays pending until a ROLLBACK, so the run cannot end in success.
#[test]
fn a_planner_that_changes_the_worktree_makes_the_evaluation_unsafe() {
    let repo = RunRepo::new();
    script_planner(
        &repo,
        "mkdir -p secrets && echo planted > secrets/planted.txt\necho '{\"status\": \"success\"}'",
        "    attempts: 1\n",
    );
    let workflow = repo.workflow_text("judged.yaml", JUDGED);
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(1), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let decision = repo.json(run_id, "artifacts/evaluate/1/planner_decision.json");
    assert_eq!(decision["status"], "unsafe", "{decision}");
    assert!(
        decision["blockers"][0]["summary"]
            .as_str()
            .unwrap()
            .contains(
                "planner `judge` changed the worktree during EVALUATE: `secrets/planted.txt`"
            ),
        "{decision}"
    );
    let events = repo.events(run_id);
    let violation = first_event(&events, "policy_violation");
    assert_eq!(violation["step_id"], "evaluate", "{violation}");
    assert_eq!(
        violation["violation"]["class"], "planner_changed_worktree",
        "{violation}"
    );
}
