//! What a failing planner leaves for the operator: a planner process's stderr is kept in its
//! attempt record (the end of it, bounded, the cut said), and an `http` planner's answer that
//! is not UTF-8, too large or cut short is kept as read (lossily), the error saying which.

use std::io::Write;
use std::net::TcpListener;
use std::path::Path;

use tnh_conductor::planner::PlannerInput;
use tnh_conductor::planner::backend::{Attempt, Backend, Request, decide};

use crate::kernel_support::RunRepo;
use crate::support::{conductor, fixture};

const EVALUATED: &str = "workflow_id: evaluated
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

/// A judge that fails twice: the first time with a three-line diagnostic on stderr, the second
/// after 100,000 bytes of stderr noise ending with its reason.
const JUDGE: &str = r#"#!/bin/sh
cat > /dev/null
calls="$0.calls"
echo call >> "$calls"
if [ "$(wc -l < "$calls")" -eq 1 ]; then
    printf 'Traceback (most recent call last):\n  File "judge.py", line 3\nKeyError: OPENAI_API_KEY\n' >&2
    exit 3
fi
i=0
while [ $i -lt 1000 ]; do
    printf '%099d\n' $i >&2
    i=$((i + 1))
done
echo 'the real reason: quota exceeded' >&2
exit 4
"#;

/// A failing planner's stderr was thrown away with its
/// temporary capture folder, only its last line surviving in the attempt's error. Each
/// attempt's `planner_attempts.json` entry keeps the end of its stderr (the last 64 KiB), with
/// a first line saying how much was cut.
#[test]
fn a_failing_planner_process_leaves_its_stderr_in_the_attempt_record() {
    let repo = RunRepo::new();
    let judge = repo.repo.write(".tnh/judge.sh", JUDGE);
    let config = repo.path().join(".tnh/config.yaml");
    let text = format!(
        "{}planners:\n  judge:\n    kind: command\n    argv: [sh, \"{}\"]\n    attempts: 2\n",
        std::fs::read_to_string(&config).unwrap(),
        judge.display()
    );
    std::fs::write(&config, text).unwrap();
    let workflow = repo.workflow_text("evaluated.yaml", EVALUATED);

    let (run, _) = repo.run_exits(&workflow, &[], 1);
    let run_id = run.as_str();
    let record = repo.json(run_id, "artifacts/evaluate/1/planner_attempts.json");
    let attempts = record["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{record:#}");
    assert_eq!(
        attempts[0]["stderr"],
        "Traceback (most recent call last):\n  File \"judge.py\", line 3\nKeyError: OPENAI_API_KEY\n",
        "the whole diagnostic, not only its last line: {record:#}"
    );
    let second = attempts[1]["stderr"].as_str().unwrap();
    let written = 1000 * 100 + "the real reason: quota exceeded\n".len();
    let cut = written - 64 * 1024;
    assert!(
        second.starts_with(&format!(
            "[the first {cut} of {written} bytes of stderr are cut; the last 65536 follow]\n"
        )),
        "{}",
        &second[..200]
    );
    assert!(
        second.ends_with("0999\nthe real reason: quota exceeded\n"),
        "the end is kept"
    );
    assert!(second.len() < 64 * 1024 + 200, "bounded: {}", second.len());
    // The record is listed in the visit's manifest and matches its published schema.
    let manifest = repo.json(run_id, "artifacts/evaluate/1/manifest.json");
    assert!(
        manifest["artifacts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|artifact| artifact["path"]
                .as_str()
                .unwrap()
                .ends_with("evaluate/1/planner_attempts.json")),
        "{manifest:#}"
    );
    let schema = conductor()
        .args(["schema", "planner-attempts"])
        .output()
        .unwrap();
    let schema: serde_json::Value = serde_json::from_slice(&schema.stdout).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&record)
        .map(|error| error.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
}

/// A server on 127.0.0.1 that answers each connection with the next raw response (status line,
/// headers and body as given), then closes it.
fn serve(responses: Vec<Vec<u8>>) -> (String, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://{}/v1/chat/completions",
        listener.local_addr().unwrap()
    );
    let thread = std::thread::spawn(move || {
        for (response, stream) in responses.into_iter().zip(listener.incoming()) {
            let mut stream = stream.unwrap();
            crate::planner_limits::read_request(&mut stream);
            // The client may stop reading (a body past its limit): that is its business.
            let _ = stream.write_all(&response);
            let _ = stream.flush();
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    });
    (url, thread)
}

fn response(content_length: usize, body: &[u8]) -> Vec<u8> {
    let mut response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {content_length}\r\nConnection: close\r\n\r\n"
    )
    .into_bytes();
    response.extend_from_slice(body);
    response
}

fn ask_http(url: &str, attempts: usize) -> Vec<Attempt> {
    let text = format!(
        "planners:\n  local:\n    kind: http\n    url: \"{url}\"\n    model: judge-1\n    timeout: 20s\n    attempts: {attempts}\n"
    );
    let config =
        tnh_conductor::config::Config::parse(text.as_bytes(), Path::new("config.yaml")).unwrap();
    let backend = Backend::from_config("local", &config).unwrap();
    let vector: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("planner_vectors/02_vector_partial_fixable.json"))
            .unwrap(),
    )
    .unwrap();
    let input = PlannerInput::read(&vector["envelope"]);
    let request = Request {
        envelope: &vector["envelope"],
        input: &input,
        prompt: "Judge the implementation.",
        cwd: None,
        run_variables: None,
        cancellation: &tnh_conductor::runner::Cancellation::never(),
    };
    decide(&backend, &request).1
}

/// An `http` planner's answer that was not UTF-8, larger than
/// 8 MiB or cut short (a reset, a timeout) was recorded as `raw: ""` with ureq's message.
/// What was read is kept, decoded lossily, and the error says what happened.
#[test]
fn an_http_answer_that_is_not_utf8_too_large_or_cut_is_kept_as_read() {
    let not_utf8 = b"{\"choices\":[{\"message\":{\"content\":\"{\\\"status\\\": \\\"success\\\", \\\"risk_flags\\\": [\\\"\xff\xfe\\\"]}\"}}]}";
    let huge = vec![b'a'; 9 * 1024 * 1024];
    let (url, server) = serve(vec![
        response(not_utf8.len(), not_utf8),
        response(huge.len(), &huge),
        response(1000, CUT),
    ]);

    let attempts = ask_http(&url, 3);
    server.join().unwrap();

    assert_eq!(attempts.len(), 3, "{attempts:#?}");
    assert!(attempts.iter().all(|attempt| !attempt.ok));
    let [not_utf8, huge, cut] = &attempts[..] else {
        unreachable!()
    };
    let error = not_utf8.error.as_deref().unwrap();
    assert!(
        error.contains("not UTF-8") && error.contains("U+FFFD"),
        "{error}"
    );
    assert!(
        not_utf8
            .raw
            .contains("\\\"risk_flags\\\": [\\\"\u{FFFD}\u{FFFD}\\\"]"),
        "kept with U+FFFD: {}",
        not_utf8.raw
    );
    let error = huge.error.as_deref().unwrap();
    assert!(
        error.contains("larger than 8388608 bytes") && error.contains("refused"),
        "{error}"
    );
    assert!(huge.raw.starts_with("aaaa"), "{}", &huge.raw[..20]);
    assert!(
        huge.raw.ends_with("[truncated]"),
        "the record stays bounded"
    );
    let error = cut.error.as_deref().unwrap();
    assert!(
        error.contains(&format!("failed after {} bytes", CUT.len())) && error.contains("cut"),
        "{error}"
    );
    assert_eq!(cut.raw.as_bytes(), CUT);
    assert!(attempts.iter().all(|attempt| attempt.stderr.is_none()));
}

/// The start of an answer whose server closes the connection before the `Content-Length` it
/// announced.
const CUT: &[u8] = b"{\"choices\":[{\"message\":{\"content\":\"{\\\"status\\\"";
