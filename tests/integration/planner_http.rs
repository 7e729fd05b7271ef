//! The `http` planner and redirects: the planner's POST is never followed to another URL (a
//! 302 would become a GET without the envelope, and another URL's answer would be taken as
//! the judgement); a redirect is a failed attempt naming where it pointed.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::mpsc;

use tnh_conductor::planner::PlannerInput;
use tnh_conductor::planner::backend::{Backend, Request, Verdict, decide};

use crate::support::fixture;

/// A server on 127.0.0.1 that answers every POST with `status` and `Location: …/elsewhere`,
/// and a GET of `/elsewhere` with a chat completion whose decision is `success`. Each request
/// line is handed to the test; a connection sending `QUIT` ends it.
struct Redirector {
    base: String,
    requests: mpsc::Receiver<String>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Redirector {
    fn start(status: &'static str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let elsewhere = format!("{base}/elsewhere?token=s3cr3t-value");
        let (sender, requests) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                let mut stream = stream.unwrap();
                let line = crate::planner_limits::read_request(&mut stream);
                if line.starts_with("QUIT") {
                    break;
                }
                let _ = sender.send(line.clone());
                let reply = if line.starts_with("POST") {
                    format!(
                        "HTTP/1.1 {status}\r\nLocation: {elsewhere}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    )
                } else {
                    let body = serde_json::json!({
                        "choices": [{ "message": { "role": "assistant",
                            "content": "{\"status\": \"success\", \"blockers\": [], \"risk_flags\": []}" } }],
                    })
                    .to_string();
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    )
                };
                let _ = stream.write_all(reply.as_bytes());
            }
        });
        Redirector {
            base,
            requests,
            thread: Some(thread),
        }
    }
}

impl Drop for Redirector {
    fn drop(&mut self) {
        if let Ok(mut stream) = TcpStream::connect(self.base.trim_start_matches("http://")) {
            let _ = stream.write_all(b"QUIT\r\n\r\n");
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn envelope() -> serde_json::Value {
    let vector: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("planner_vectors/02_vector_partial_fixable.json"))
            .unwrap(),
    )
    .unwrap();
    vector["envelope"].clone()
}

/// A 302, 303, 307 or 308 from the endpoint is a failed attempt naming the status and the
/// `Location` (its query values masked); the other URL is never asked, and after the retry
/// the kernel decides `blocked` with `planner_error`.
#[test]
fn an_http_planner_does_not_follow_a_redirect_it_is_a_failed_attempt_naming_the_location() {
    for status in [
        "302 Found",
        "303 See Other",
        "307 Temporary Redirect",
        "308 Permanent Redirect",
    ] {
        let server = Redirector::start(status);
        let config = tnh_conductor::config::Config::parse(
            format!(
                "planners:\n  local:\n    kind: http\n    url: \"{}/v1/chat/completions\"\n    model: judge-1\n    timeout: 10s\n",
                server.base
            )
            .as_bytes(),
            Path::new("config.yaml"),
        )
        .unwrap();
        let backend = Backend::from_config("local", &config).unwrap();
        let envelope = envelope();
        let input = PlannerInput::read(&envelope);
        let request = Request {
            envelope: &envelope,
            input: &input,
            prompt: "Judge the implementation.",
            cwd: None,
            run_variables: None,
            cancellation: &tnh_conductor::runner::Cancellation::never(),
        };

        let (verdict, attempts) = decide(&backend, &request);

        let Verdict::Decided {
            decision,
            decided_by,
            ..
        } = verdict
        else {
            panic!("{status}: not decided: {verdict:?}");
        };
        assert_eq!(decided_by, "kernel", "{status}: {decision:?}");
        assert_eq!(decision.blockers[0].code, "planner_error", "{status}");
        assert_eq!(attempts.len(), 2, "{status}: asked, then retried");
        let code = status.split(' ').next().unwrap();
        for attempt in &attempts {
            let error = attempt.error.as_deref().unwrap();
            assert!(
                error.contains(&format!("HTTP {code}"))
                    && error.contains(&format!(
                        "a redirect to `{}/elsewhere?token=***`",
                        server.base
                    ))
                    && error.contains("which a planner does not follow"),
                "{status}: {error}"
            );
            assert!(!error.contains("s3cr3t"), "{status}: {error}");
        }
        let seen: Vec<String> = server.requests.try_iter().collect();
        assert_eq!(
            seen, ["POST /v1/chat/completions HTTP/1.1"; 2],
            "{status}: only the endpoint was asked"
        );
    }
}
