//! The run viewer against a real `tnh-conductor serve` on 127.0.0.1 (port 0, the URL read
//! from its first line), over runs made by the scripted agent: every page answers, agent text
//! is escaped, changes need the token and the same origin, files never leave the run
//! directory, the event stream delivers what is appended, a gate decided over HTTP moves the
//! run as `gate approve` does, and `report` writes a file that fetches nothing.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::kernel_support::RunRepo;
use crate::support::{conductor, stderr_text};

/// The gate fixture, its agent writing a file named like markup and answering with a script.
pub(crate) fn hostile_gate_workflow() -> String {
    std::fs::read_to_string(crate::support::fixture("runs/gate.yaml"))
        .unwrap()
        .replace(
            "WRITE feature.txt: the feature",
            "WRITE <img src=x onerror=alert(1)>.txt: <script>alert(1)</script>\n      SAY <script>alert(2)</script>",
        )
}

/// A run waiting at its `review` gate, made by the scripted agent.
pub(crate) fn waiting_run(repo: &RunRepo) -> String {
    let workflow = repo.workflow_text("gate.yaml", &hostile_gate_workflow());
    let (run_id, _) = repo.run_exits(&workflow, &[], 3);
    run_id
}

/// A running `serve`, stopped when dropped.
pub(crate) struct Server {
    child: Child,
    pub(crate) base: String,
    pub(crate) token: String,
    agent: ureq::Agent,
}

impl Server {
    pub(crate) fn start(repo: &Path) -> Self {
        Self::start_for(&[repo])
    }

    /// `serve` of several repositories.
    fn start_for(repos: &[&Path]) -> Self {
        let mut command = conductor();
        for repo in repos {
            command.arg("--repo").arg(repo);
        }
        let mut child = command
            .args(["serve", "--addr", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        if line.is_empty() {
            let output = child.wait_with_output().unwrap();
            panic!("serve printed no URL: {}", stderr_text(&output));
        }
        let url = line.trim();
        let (base, token) = url.split_once("/?token=").expect("a URL with its token");
        assert!(base.starts_with("http://127.0.0.1:"), "{url}");
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(Duration::from_secs(30)))
            .build();
        Self {
            child,
            base: base.to_owned(),
            token: token.to_owned(),
            agent: ureq::Agent::new_with_config(config),
        }
    }

    fn cookie(&self) -> String {
        format!("tnh_viewer_token={}", self.token)
    }

    /// `GET path` with the token's cookie: status, CSP header and body.
    fn get(&self, path: &str) -> (u16, String, String) {
        let response = self
            .agent
            .get(format!("{}{path}", self.base))
            .header("Cookie", self.cookie())
            .call()
            .unwrap();
        let status = response.status().as_u16();
        let policy = response
            .headers()
            .get("content-security-policy")
            .map(|value| value.to_str().unwrap().to_owned())
            .unwrap_or_default();
        (
            status,
            policy,
            response.into_body().read_to_string().unwrap(),
        )
    }

    /// `POST path` of a form, with the token's cookie when `token`, and `origin` when given.
    fn post(
        &self,
        path: &str,
        form: &[(&str, &str)],
        token: bool,
        origin: Option<&str>,
    ) -> (u16, String) {
        let mut request = self.agent.post(format!("{}{path}", self.base));
        if token {
            request = request.header("Cookie", self.cookie());
        }
        if let Some(origin) = origin {
            request = request.header("Origin", origin);
        }
        let response = request.send_form(form.iter().copied()).unwrap();
        let status = response.status().as_u16();
        (status, response.into_body().read_to_string().unwrap())
    }

    /// A request written as is (clients tidy `..` away), its status line's code and the
    /// answer; reads until the server closes or the deadline.
    fn raw_get(&self, target: &str) -> (u16, String) {
        self.raw_get_as(target, &format!("Cookie: {}\r\n", self.cookie()))
    }

    /// [`Server::raw_get`] with `headers` (each ending in CRLF) instead of the cookie.
    fn raw_get_as(&self, target: &str, headers: &str) -> (u16, String) {
        let address = self.base.trim_start_matches("http://");
        let mut stream = TcpStream::connect(address).unwrap();
        write!(
            stream,
            "GET {target} HTTP/1.1\r\nHost: {address}\r\n{headers}Connection: close\r\n\r\n"
        )
        .unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        let code = answer
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or(0);
        (code, answer)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn status_of(repo: &RunRepo, run_id: &str) -> String {
    repo.json(run_id, "status.json")["lifecycle_state"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn every_page_answers_for_a_real_run_with_agent_text_escaped() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo);
    let server = Server::start(repo.path());
    let run = format!("/r/0/{run_id}");
    for path in [
        "/".to_owned(),
        "/?state=waiting&workflow=gated".to_owned(),
        "/gates".to_owned(),
        "/journal".to_owned(),
        "/assets/viewer.css".to_owned(),
        "/assets/live.js".to_owned(),
        run.clone(),
        format!("{run}/visit/implement/1"),
        format!("{run}/visit/review/1"),
    ] {
        let (status, policy, body) = server.get(&path);
        assert_eq!(status, 200, "{path}: {body}");
        assert!(policy.contains("script-src 'self'"), "{path}: {policy}");
        assert!(!policy.contains("unsafe-inline"), "{path}: {policy}");
        assert!(!body.contains("<script>alert"), "{path}: {body}");
        assert!(!body.contains("<img src=x"), "{path}: {body}");
    }
    // A file of the run as plain text, which the browser never renders.
    let (status, answer) = server.raw_get(&format!("{run}/file/artifacts/implement/1/prompt.md"));
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("content-type: text/plain"), "{answer}");
    assert!(
        answer.contains("x-content-type-options: nosniff"),
        "{answer}"
    );
    let (_, _, runs) = server.get("/?state=waiting");
    assert!(runs.contains(&run_id) && runs.contains("waiting"), "{runs}");
    let (_, _, none) = server.get("/?state=completed");
    assert!(!none.contains(&run_id), "{none}");
    let (_, _, page) = server.get(&run);
    assert!(page.contains("<svg") && page.contains("review"), "{page}");
    assert!(
        page.contains("implement #1") && page.contains("gate_queued"),
        "{page}"
    );
    let (_, _, visit) = server.get(&format!("{run}/visit/implement/1"));
    // The transcript, the final answer and the changed file's name, escaped.
    assert!(
        visit.contains("&lt;script&gt;alert(2)&lt;/script&gt;"),
        "{visit}"
    );
    assert!(
        visit.contains("<h4>&lt;img src=x onerror=alert(1)&gt;.txt</h4>"),
        "{visit}"
    );
    assert!(
        visit.contains("+&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{visit}"
    );
    let (_, _, gates) = server.get("/gates");
    assert!(
        gates.contains(&format!("Approve the feature of {run_id}")),
        "{gates}"
    );
    // A last event cut short (a write in progress) shows as being written, not as an error.
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .open(repo.run_dir(&run_id).join("events.ndjson"))
        .unwrap();
    log.write_all(b"{\"schema_version\":1,\"seq\":").unwrap();
    let (status, _, page) = server.get(&run);
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("is being written"), "{page}");
}

#[test]
fn changes_need_the_token_and_the_same_origin_and_refusals_change_nothing() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo);
    let server = Server::start(repo.path());
    let origin = server.base.clone();
    let gate = format!("/r/0/{run_id}/gate");
    let form = [("decision", "approve"), ("reviewer", "alice")];
    // The printed URL sets the cookie; without it, even reading is refused.
    let (status, _) = server.raw_get_as("/", "");
    assert_eq!(status, 403);
    let (status, _) = server.raw_get_as("/?token=0123", "");
    assert_eq!(status, 403);
    let (status, answer) = server.raw_get_as(&format!("/?token={}", server.token), "");
    assert_eq!(status, 303, "{answer}");
    assert!(answer.contains("HttpOnly; SameSite=Strict"), "{answer}");
    for (token, origin) in [
        (false, Some(origin.as_str())),
        (true, Some("http://evil.example")),
        (true, None),
    ] {
        let (status, body) = server.post(&gate, &form, token, origin);
        assert_eq!(status, 403, "token {token}, origin {origin:?}: {body}");
    }
    assert_eq!(status_of(&repo, &run_id), "waiting");
    assert!(
        !repo
            .run_dir(&run_id)
            .join("artifacts/review/1/gate_outcome.json")
            .exists()
    );
}

#[test]
fn a_gate_decided_over_http_moves_the_run_as_gate_approve_does() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo);
    let server = Server::start(repo.path());
    let origin = Some(server.base.as_str());
    let gate = format!("/r/0/{run_id}/gate");
    // Not an approver: refused with the command's message, nothing changed.
    let (status, body) = server.post(
        &gate,
        &[("decision", "approve"), ("reviewer", "mallory")],
        true,
        origin,
    );
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("class=\"refused\"") && body.contains("mallory"),
        "{body}"
    );
    assert_eq!(status_of(&repo, &run_id), "waiting");

    let (status, body) = server.post(
        &gate,
        &[
            ("decision", "approve"),
            ("reviewer", "alice"),
            ("comment", "looks <b>right</b>"),
        ],
        true,
        origin,
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("approved by alice"), "{body}");
    assert_eq!(status_of(&repo, &run_id), "completed");
    let outcome = repo.json(&run_id, "artifacts/review/1/gate_outcome.json");
    assert_eq!(outcome["reviewer"], "alice");
    assert_eq!(outcome["comment"], "looks <b>right</b>");
    let events = crate::kernel_support::event_types(&repo.events(&run_id));
    assert!(events.contains(&"gate_resolved".to_owned()), "{events:?}");
    // Exactly one decision wins: a second one is refused.
    let (_, again) = server.post(
        &gate,
        &[("decision", "reject"), ("reviewer", "lead")],
        true,
        origin,
    );
    assert!(again.contains("class=\"refused\""), "{again}");
    assert_eq!(status_of(&repo, &run_id), "completed");
}

#[test]
fn a_run_that_succeeded_is_landed_from_its_page() {
    let repo = RunRepo::new();
    repo.repo.commit_all("the workflow and configuration");
    let run_id = waiting_run(&repo);
    repo.repo.commit_all("nothing else is left uncommitted");
    let server = Server::start(repo.path());
    let origin = Some(server.base.as_str());
    let (_, body) = server.post(
        &format!("/r/0/{run_id}/gate"),
        &[("decision", "approve"), ("reviewer", "lead")],
        true,
        origin,
    );
    assert!(body.contains("approved by lead"), "{body}");
    let (_, _, page) = server.get(&format!("/r/0/{run_id}"));
    assert!(
        page.contains(&format!("action=\"/r/0/{run_id}/land\"")),
        "{page}"
    );
    let (status, body) = server.post(&format!("/r/0/{run_id}/land"), &[], true, origin);
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(&format!("run {run_id} landed into")),
        "{body}"
    );
    assert!(
        repo.path()
            .join("<img src=x onerror=alert(1)>.txt")
            .is_file()
    );
    // A second landing is refused with the command's message, and changes nothing.
    let (_, again) = server.post(&format!("/r/0/{run_id}/land"), &[], true, origin);
    assert!(again.contains("class=\"refused\""), "{again}");
}

#[test]
fn files_are_served_only_from_inside_the_run_directory_and_never_through_a_link() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo);
    let visit = repo.run_dir(&run_id).join("artifacts/implement/1");
    let secret = repo.repo.write("secret.txt", "the operator's secret\n");
    std::os::unix::fs::symlink(&secret, visit.join("planted.txt")).unwrap();
    std::os::unix::fs::symlink(repo.path(), visit.join("planted_folder")).unwrap();
    let server = Server::start(repo.path());
    let file = format!("/r/0/{run_id}/file");
    for target in [
        format!("{file}/../../../../secret.txt"),
        format!("{file}/artifacts/../../../../secret.txt"),
        format!("{file}/%2e%2e%2f%2e%2e%2f%2e%2e%2f%2e%2e%2fsecret.txt"),
        format!("{file}/artifacts%2f..%2f..%2f..%2f..%2fsecret.txt"),
        format!("{file}/artifacts/implement/1/planted.txt"),
        format!("{file}/artifacts/implement/1/planted_folder/secret.txt"),
    ] {
        let (status, answer) = server.raw_get(&target);
        assert_eq!(status, 403, "{target}: {answer}");
        assert!(!answer.contains("the operator's secret"), "{target}");
    }
    let (status, answer) = server.raw_get(&format!("{file}/artifacts/implement/1/prompt.md"));
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("text/plain"), "{answer}");
}

/// A run's event stream read over a raw connection, with a deadline.
struct EventStream {
    stream: TcpStream,
    deadline: Instant,
    received: String,
}

impl EventStream {
    /// Connects to the run's stream from byte `from` of its log and reads the answer's head.
    fn open(server: &Server, run_id: &str, from: u64) -> Self {
        let address = server.base.trim_start_matches("http://").to_owned();
        let mut stream = TcpStream::connect(&address).unwrap();
        write!(
            stream,
            "GET /r/0/{run_id}/events?from={from} HTTP/1.1\r\nHost: {address}\r\nCookie: {}\r\nAccept: text/event-stream\r\n\r\n",
            server.cookie()
        )
        .unwrap();
        let mut opened = Self {
            stream,
            deadline: Instant::now() + Duration::from_secs(60),
            received: String::new(),
        };
        opened.read_until("\r\n\r\n");
        assert!(
            opened.received.starts_with("HTTP/1.1 200"),
            "{}",
            opened.received
        );
        assert!(
            opened.received.contains("text/event-stream"),
            "{}",
            opened.received
        );
        opened
    }

    /// Reads until `wanted` arrives, failing at the deadline.
    fn read_until(&mut self, wanted: &str) {
        let mut buffer = [0_u8; 4096];
        while !self.received.contains(wanted) {
            let left = self.deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "no `{wanted}` before the deadline: {}",
                self.received
            );
            self.stream.set_read_timeout(Some(left)).unwrap();
            match self.stream.read(&mut buffer) {
                Ok(0) => panic!("the stream closed: {}", self.received),
                Ok(count) => self
                    .received
                    .push_str(&String::from_utf8_lossy(&buffer[..count])),
                Err(error)
                    if matches!(
                        error.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(error) => panic!("{error}"),
            }
        }
    }
}

#[test]
fn the_event_stream_delivers_an_event_appended_after_connecting() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo);
    let events_file = repo.run_dir(&run_id).join("events.ndjson");
    let length = std::fs::metadata(&events_file).unwrap().len();
    let last_seq = repo.events(&run_id).len();
    let server = Server::start(repo.path());
    let mut stream = EventStream::open(&server, &run_id, length);
    // Half a line first (a write in progress), then the rest of it.
    let line = format!(
        "{{\"schema_version\":1,\"seq\":{},\"timestamp\":\"2026-12-06T00:00:00Z\",\"run_id\":\"{run_id}\",\"step_id\":\"appended_step\",\"visit\":7,\"event_type\":\"step_started\",\"opcode\":\"RUN_AGENT\"}}\n",
        last_seq + 1
    );
    let (first, rest) = line.split_at(40);
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .open(&events_file)
        .unwrap();
    log.write_all(first.as_bytes()).unwrap();
    log.flush().unwrap();
    log.write_all(rest.as_bytes()).unwrap();
    log.flush().unwrap();
    stream.read_until("appended_step");
    assert!(
        stream.received.contains("\"visit\":7"),
        "{}",
        stream.received
    );
    assert!(
        stream.received.contains("event: run"),
        "{}",
        stream.received
    );
}

#[test]
fn an_approval_that_asks_to_continue_resumes_the_run_in_the_background() {
    let repo = RunRepo::new();
    let text = hostile_gate_workflow()
        .replace("gate_approved: STOP", "gate_approved: after")
        .replace(
            "  - id: timed_out\n",
            "  - id: after\n    opcode: RUN_AGENT\n    agent: scripted\n    prompt: |\n      SAY carried on\n    routes:\n      completed: STOP\n      \"*\": failed\n  - id: timed_out\n",
        );
    let workflow = repo.workflow_text("gate.yaml", &text);
    let (run_id, _) = repo.run_exits(&workflow, &[], 3);
    let length = std::fs::metadata(repo.run_dir(&run_id).join("events.ndjson"))
        .unwrap()
        .len();
    let server = Server::start(repo.path());
    let mut stream = EventStream::open(&server, &run_id, length);
    let (status, body) = server.post(
        &format!("/r/0/{run_id}/gate"),
        &[
            ("decision", "approve"),
            ("reviewer", "alice"),
            ("resume", "on"),
        ],
        true,
        Some(server.base.as_str()),
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("continues in the background"), "{body}");
    // The resumed run's visit of `after`, then its end, arrive on the stream.
    stream.read_until("\"step_id\":\"after\"");
    stream.read_until("\"ended\":true");
    assert_eq!(status_of(&repo, &run_id), "completed");
}

#[test]
fn a_report_is_one_file_that_fetches_nothing() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo);
    let report = repo.path().join("report.html");
    repo.conductor_exits(&["report", &run_id, "-o", report.to_str().unwrap()], 0);
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "{html}"
    );
    assert!(!html.contains("<script"), "{html}");
    assert!(!html.contains("<link"), "{html}");
    assert!(html.contains("<style>") && html.contains("<svg"), "{html}");
    // Every visit is in it, its agent text escaped.
    assert!(html.contains("id=\"visit-implement-1\""), "{html}");
    assert!(
        html.contains("&lt;script&gt;alert(2)&lt;/script&gt;"),
        "{html}"
    );
    assert!(!html.contains("<img src=x"), "{html}");
}

#[test]
fn serve_shows_the_runs_of_every_repository_given() {
    let (first, second) = (RunRepo::new(), RunRepo::new());
    let (first_run, second_run) = (waiting_run(&first), waiting_run(&second));
    let server = Server::start_for(&[first.path(), second.path()]);
    let (status, _, page) = server.get("/");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains(&format!("/r/0/{first_run}")), "{page}");
    assert!(page.contains(&format!("/r/1/{second_run}")), "{page}");
    // Any other command takes one repository.
    let output = conductor()
        .arg("--repo")
        .arg(first.path())
        .arg("--repo")
        .arg(second.path())
        .args(["runs", "list"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr_text(&output));
}

#[test]
fn serve_refuses_an_address_other_machines_reach_unless_allowed() {
    let repo = RunRepo::new();
    let output = repo.conductor_exits(&["serve", "--addr", "0.0.0.0:0"], 2);
    assert!(
        stderr_text(&output).contains("--allow-remote"),
        "{}",
        stderr_text(&output)
    );
}

#[test]
fn the_state_filter_takes_finished_runs_from_the_index_of_finished_runs() {
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo);
    repo.conductor_exits(&["gate", "approve", &run_id, "--as", "alice"], 0);
    let server = Server::start(repo.path());
    let (_, _, page) = server.get("/?state=completed");
    assert!(page.contains(&format!("/r/0/{run_id}")), "{page}");
    // The run read once is in the index, with how it ended and its workflow.
    let index: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo.path().join(".tnh/finished-runs.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(index["runs"][&run_id]["state"], "completed", "{index}");
    assert_eq!(index["runs"][&run_id]["workflow"], "gated", "{index}");
    // From then on the filter believes the index, not the run's files.
    let path = repo.path().join(".tnh/finished-runs.json");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("\"completed\"", "\"abandoned\"")).unwrap();
    let (_, _, page) = server.get("/?state=abandoned");
    assert!(page.contains(&format!("/r/0/{run_id}")), "{page}");
    let (_, _, page) = server.get("/?state=completed&workflow=gated");
    assert!(!page.contains(&format!("/r/0/{run_id}")), "{page}");
}
