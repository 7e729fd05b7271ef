//! The model planner backends end to end: `http` against a small chat-completions server on
//! 127.0.0.1 started by the test (a fixed decision, malformed JSON, a 500, a hang), `claude`
//! and `codex` through the fake CLIs replaying captured output; and, in real runs, the rendered
//! planner prompt, an illegal `next_step` (exit 4, the decision saved, no retry), and a
//! `--planner` that `resume` keeps.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::mpsc;

use tnh_conductor::planner::backend::{Attempt, Backend, Request, Verdict, decide};
use tnh_conductor::planner::{PlannerInput, Status};

use crate::kernel_support::{RunRepo, first_event};
use crate::support::{conductor, fixture, stderr_text, stdout_text};

/// What the test server does with one request.
#[derive(Clone, Copy, Debug)]
enum Reply {
    /// 200 with a chat completion whose content is this decision.
    Decision(&'static str),
    /// 200 with a body that is not JSON.
    Malformed,
    /// 500.
    ServerError,
    /// Reads the request and never answers (until the test ends).
    Hang,
}

/// A chat-completions server on 127.0.0.1: answers each connection with the next reply and
/// hands every request body to the test.
struct Server {
    url: String,
    bodies: mpsc::Receiver<serde_json::Value>,
    _release: mpsc::Sender<()>,
}

impl Server {
    fn start(replies: Vec<Reply>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!(
            "http://{}/v1/chat/completions",
            listener.local_addr().unwrap()
        );
        let (body_sender, bodies) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for (reply, stream) in replies.into_iter().zip(listener.incoming()) {
                let mut stream = stream.unwrap();
                let body = read_request(&mut stream);
                let _ = body_sender.send(body);
                let (status, text) = match reply {
                    Reply::Decision(decision) => (
                        "200 OK",
                        serde_json::json!({
                            "id": "chatcmpl-1",
                            "object": "chat.completion",
                            "choices": [{ "index": 0, "finish_reason": "stop",
                                "message": { "role": "assistant", "content": decision } }],
                        })
                        .to_string(),
                    ),
                    Reply::Malformed => ("200 OK", "{\"choices\": [".to_owned()),
                    Reply::ServerError => (
                        "500 Internal Server Error",
                        "{\"error\": \"model overloaded\"}".to_owned(),
                    ),
                    Reply::Hang => {
                        held.push(stream);
                        continue;
                    }
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                    text.len()
                );
            }
            // Keep hung connections open until the test is done with the server.
            let _ = released.recv();
            drop(held);
        });
        Server {
            url,
            bodies,
            _release: release,
        }
    }
}

fn read_request(stream: &mut std::net::TcpStream) -> serde_json::Value {
    let mut reader = BufReader::new(stream);
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
    serde_json::from_slice(&body).unwrap()
}

fn http_config(url: &str, extra: &str) -> tnh_conductor::config::Config {
    let text = format!(
        "planners:\n  local:\n    kind: http\n    url: \"{url}\"\n    model: judge-1\n{extra}"
    );
    tnh_conductor::config::Config::parse(text.as_bytes(), Path::new("config.yaml")).unwrap()
}

fn vector_envelope(name: &str) -> serde_json::Value {
    let path = std::fs::read_dir(fixture("planner_vectors"))
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .find(|path| path.to_string_lossy().ends_with(&format!("_{name}.json")))
        .unwrap();
    let vector: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    vector["envelope"].clone()
}

fn ask(backend: &Backend, envelope: &serde_json::Value) -> (Verdict, Vec<Attempt>) {
    let input = PlannerInput::read(envelope);
    let request = Request {
        envelope,
        input: &input,
        prompt: "Judge the implementation.",
        cwd: None,
        run_variables: None,
        cancellation: &tnh_conductor::runner::Cancellation::never(),
    };
    decide(backend, &request)
}

fn decided(verdict: Verdict) -> (tnh_conductor::planner::Decision, String) {
    match verdict {
        Verdict::Decided {
            decision,
            decided_by,
            ..
        } => (decision, decided_by),
        Verdict::Illegal { reason, .. } => panic!("unexpected illegal verdict: {reason}"),
        Verdict::Interrupted => panic!("unexpected interruption"),
    }
}

#[test]
fn the_http_backend_reads_a_decision_and_survives_malformed_json_a_500_and_a_hang() {
    let server = Server::start(vec![
        Reply::Decision(
            r#"{"status": "partial", "next_step": "fix", "fix_instructions": {"objective": "make the parser test pass"}, "blockers": [], "risk_flags": []}"#,
        ),
        Reply::Malformed,
        Reply::ServerError,
        Reply::Hang,
    ]);
    let config = http_config(&server.url, "    timeout: 2s\n    attempts: 1\n");
    let backend = Backend::from_config("local", &config).unwrap();
    let envelope = vector_envelope("vector_partial_fixable");

    // 1. A fixed decision: read from choices[0].message.content, guarded, decided by `local`.
    let (decision, decided_by) = decided(ask(&backend, &envelope).0);
    assert_eq!(decision.status, Status::Partial);
    assert_eq!(decision.next_step.as_deref(), Some("fix"));
    assert_eq!(
        decision.fix_instructions.unwrap().objective,
        "make the parser test pass"
    );
    assert_eq!(decided_by, "local");
    let body = server.bodies.recv().unwrap();
    assert_eq!(body["model"], "judge-1");
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert_eq!(
        body["response_format"]["json_schema"]["schema"]["title"],
        "PlannerAnswer"
    );
    // OpenAI structured outputs: strict, and no `$schema` the model API would not know.
    assert_eq!(body["response_format"]["json_schema"]["strict"], true);
    assert!(body["response_format"]["json_schema"]["schema"]["$schema"].is_null());
    let prompt = body["messages"][1]["content"].as_str().unwrap();
    assert!(prompt.starts_with("Judge the implementation."), "{prompt}");
    assert!(
        prompt.contains("\"allowed_next_steps\""),
        "the envelope is sent: {prompt}"
    );

    // 2–4. Malformed JSON, a 500 and a hang each end as the kernel's `planner_error`.
    for expected in ["not JSON", "HTTP 500", "timeout"] {
        let (verdict, attempts) = ask(&backend, &envelope);
        let (decision, decided_by) = decided(verdict);
        assert_eq!(decision.status, Status::Blocked, "{expected}");
        assert_eq!(decided_by, "kernel", "{expected}");
        assert_eq!(decision.blockers[0].code, "planner_error");
        assert_eq!(attempts.len(), 1);
        let error = attempts[0].error.clone().unwrap();
        assert!(error.contains(expected), "{expected}: {error}");
        server.bodies.recv().unwrap();
    }
}

#[test]
fn a_failed_http_answer_is_retried_and_a_later_good_one_is_used() {
    let server = Server::start(vec![
        Reply::ServerError,
        Reply::Decision(
            r#"{"status": "success", "next_step": null, "blockers": [], "risk_flags": []}"#,
        ),
    ]);
    let backend = Backend::from_config("local", &http_config(&server.url, "")).unwrap();
    let (verdict, attempts) = ask(&backend, &vector_envelope("vector_success_clean"));
    let (decision, decided_by) = decided(verdict);
    assert_eq!(decision.status, Status::Success);
    assert_eq!(decided_by, "local");
    assert_eq!(
        attempts
            .iter()
            .map(|attempt| attempt.ok)
            .collect::<Vec<_>>(),
        [false, true]
    );
}

#[test]
fn the_guard_applies_to_http_answers() {
    let server = Server::start(vec![Reply::Decision(
        r#"{"status": "success", "next_step": null, "blockers": [], "risk_flags": []}"#,
    )]);
    let backend = Backend::from_config("local", &http_config(&server.url, "")).unwrap();
    let (decision, _) =
        decided(ask(&backend, &vector_envelope("vector_unsafe_policy_violation")).0);
    assert_eq!(decision.status, Status::Unsafe);
    assert!(decision.risk_flags.contains(&"policy_violation".to_owned()));
}

/// A repository whose EVALUATE uses the `judge` planner profile of `planner_yaml`.
fn repo_with_planner(planner_yaml: &str) -> RunRepo {
    let repo = RunRepo::new();
    let config = repo.path().join(".tnh/config.yaml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(planner_yaml);
    std::fs::write(config, text).unwrap();
    repo
}

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
    allowed_next_steps: [implement, failed]
    routes:
      success: STOP
      partial: implement
      blocked: failed
      unsafe: failed
      needs_human: failed
  - id: failed
    opcode: STOP
    outcome: failure
";

fn fake_cli(name: &str) -> String {
    fixture(&format!("agents/bin/{name}")).display().to_string()
}

/// Runs `EVALUATED` with a fake CLI planner; returns the exit code, run id and what the fake
/// received (one JSON object per call).
fn run_with_cli_planner(
    kind: &str,
    scenario: &str,
    decision: &str,
) -> (Option<i32>, RunRepo, String, Vec<serde_json::Value>) {
    let repo = repo_with_planner(&format!("planners:\n  judge:\n    kind: {kind}\n"));
    let workflow = repo.workflow_text("evaluated.yaml", EVALUATED);
    let record = repo.path().join(".tnh/received.ndjson");
    let output = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["run", "--json"])
        .arg(&workflow)
        .env("TNH_CLAUDE_BIN", fake_cli("claude"))
        .env("TNH_CODEX_BIN", fake_cli("codex"))
        .env("TNH_FAKE_SCENARIO", scenario)
        .env("TNH_FAKE_DECISION", decision)
        .env("TNH_FAKE_RECORD", &record)
        .output()
        .unwrap();
    let result: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("{}", stderr_text(&output)));
    let run_id = result["run_id"].as_str().unwrap().to_owned();
    let received = std::fs::read_to_string(&record)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    (output.status.code(), repo, run_id, received)
}

#[test]
fn the_claude_planner_sends_the_rendered_prompt_and_the_schema_and_reads_structured_output() {
    let (code, repo, run_id, received) = run_with_cli_planner(
        "claude",
        "claude-planner-decision",
        r#"{"status": "success", "next_step": null, "blockers": [], "risk_flags": ["looks_good"]}"#,
    );
    assert_eq!(code, Some(0));
    assert_eq!(received.len(), 1, "asked once");
    let argv: Vec<&str> = received[0]["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|arg| arg.as_str().unwrap())
        .collect();
    assert!(
        argv.starts_with(&["-p", "--output-format", "json"]),
        "{argv:?}"
    );
    let schema_at = argv.iter().position(|arg| *arg == "--json-schema").unwrap();
    let schema: serde_json::Value = serde_json::from_str(argv[schema_at + 1]).unwrap();
    assert_eq!(schema["title"], "PlannerAnswer");
    // The real CLI refuses a schema declaring the draft 2020-12 meta-schema.
    assert!(schema["$schema"].is_null(), "{schema}");
    let prompt = received[0]["prompt"].as_str().unwrap();
    assert!(
        prompt.contains(&format!("Evaluate the implementation of run `{run_id}`")),
        "the planner.evaluate_results prompt, rendered with the envelope: {prompt}"
    );
    let saved = std::fs::read_to_string(
        repo.run_dir(&run_id)
            .join("artifacts/evaluate/1/planner_prompt.md"),
    )
    .unwrap();
    assert!(
        prompt.starts_with(saved.trim_end()),
        "the sent prompt is saved"
    );
    let decision = repo.json(&run_id, "artifacts/evaluate/1/planner_decision.json");
    assert_eq!(decision["decided_by"], "judge");
    assert_eq!(decision["risk_flags"], serde_json::json!(["looks_good"]));
}

#[test]
fn a_claude_result_without_structured_output_is_a_planner_error_after_a_retry() {
    // The real capture: `--json-schema` given, but the model answered plain text.
    let (code, repo, run_id, received) =
        run_with_cli_planner("claude", "claude-stream-json-schema-structured-output", "");
    assert_eq!(code, Some(1), "blocked routes to the failure STOP");
    assert_eq!(received.len(), 2, "one try, one retry");
    let decision = repo.json(&run_id, "artifacts/evaluate/1/planner_decision.json");
    assert_eq!(decision["decided_by"], "kernel");
    assert_eq!(decision["blockers"][0]["code"], "planner_error");
    let attempts = repo.json(&run_id, "artifacts/evaluate/1/planner_attempts.json");
    assert!(
        attempts["attempts"][0]["error"]
            .as_str()
            .unwrap()
            .contains("no structured_output"),
        "{attempts}"
    );
    assert!(
        attempts["attempts"][0]["raw"]
            .as_str()
            .unwrap()
            .contains("Hello from mock."),
        "the raw answer is kept: {attempts}"
    );
}

#[test]
fn a_claude_that_is_not_logged_in_is_a_planner_error_naming_it() {
    let (code, repo, run_id, _) = run_with_cli_planner("claude", "claude-stream-not-logged-in", "");
    assert_eq!(code, Some(1));
    let decision = repo.json(&run_id, "artifacts/evaluate/1/planner_decision.json");
    assert_eq!(decision["blockers"][0]["code"], "planner_error");
    let attempts = repo.json(&run_id, "artifacts/evaluate/1/planner_attempts.json");
    let error = attempts["attempts"][0]["error"].as_str().unwrap();
    assert!(
        error.contains("claude reported an error") && error.contains("Not logged in"),
        "the reason is kept: {error}"
    );
}

#[test]
fn the_codex_planner_uses_an_output_schema_file_and_reads_the_o_file() {
    let (code, repo, run_id, received) = run_with_cli_planner(
        "codex",
        "codex-planner-decision",
        r#"{"status": "needs_human", "next_step": "failed", "blockers": [{"code": "unclear_scope", "summary": "the ADR is ambiguous"}], "risk_flags": []}"#,
    );
    assert_eq!(code, Some(1), "needs_human routes to the failure STOP");
    let argv: Vec<&str> = received[0]["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|arg| arg.as_str().unwrap())
        .collect();
    assert_eq!(argv[0], "exec");
    assert!(argv.contains(&"read-only"), "{argv:?}");
    assert_eq!(argv.last(), Some(&"-"), "the prompt comes on stdin");
    let schema_at = argv
        .iter()
        .position(|arg| *arg == "--output-schema")
        .unwrap();
    assert!(argv[schema_at + 1].ends_with("decision.schema.json"));
    assert!(argv.contains(&"-o"));
    let decision = repo.json(&run_id, "artifacts/evaluate/1/planner_decision.json");
    assert_eq!(decision["status"], "needs_human");
    assert_eq!(decision["decided_by"], "judge");
    assert_eq!(decision["blockers"][0]["code"], "unclear_scope");
}

/// A repository whose `judge` planner is a command answering `answer`, counting its calls in
/// `.tnh/judge.calls`.
fn repo_with_command_judge(answer: &str) -> RunRepo {
    let repo = RunRepo::new();
    let script = repo.path().join(".tnh/judge.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncat > /dev/null\necho call >> \"{}\"\ncat <<'JSON'\n{answer}\nJSON\n",
            repo.path().join(".tnh/judge.calls").display()
        ),
    )
    .unwrap();
    let config = repo.path().join(".tnh/config.yaml");
    let text = format!(
        "{}planners:\n  judge:\n    kind: command\n    argv: [sh, \"{}\"]\n",
        std::fs::read_to_string(&config).unwrap(),
        script.display()
    );
    std::fs::write(&config, text).unwrap();
    repo
}

fn judge_calls(repo: &RunRepo) -> usize {
    std::fs::read_to_string(repo.path().join(".tnh/judge.calls"))
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

#[test]
fn an_illegal_next_step_ends_the_run_with_exit_4_and_the_offending_decision_saved() {
    let repo = repo_with_command_judge(
        r#"{"status": "success", "next_step": "deploy_to_prod", "blockers": [], "risk_flags": []}"#,
    );
    let workflow = repo.workflow_text("evaluated.yaml", EVALUATED);
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(4), "{result}\n{}", stderr_text(&output));
    assert_eq!(judge_calls(&repo), 1, "an illegal decision is not retried");
    let run_id = result["run_id"].as_str().unwrap();
    let decision = repo.json(run_id, "artifacts/evaluate/1/planner_decision.json");
    assert_eq!(decision["next_step"], "deploy_to_prod", "saved as answered");
    assert_eq!(decision["planner"], "judge");
    let failed = first_event(&repo.events(run_id), "step_failed").clone();
    let error = failed["error"].as_str().unwrap();
    assert!(
        error.contains("deploy_to_prod")
            && error.contains("allowed_next_steps [implement, failed]")
            && error.contains("artifacts/evaluate/1/planner_decision.json"),
        "{error}"
    );
    assert!(failed["hint"].as_str().unwrap().contains("planner check"));
}

#[test]
fn resume_keeps_the_planner_chosen_with_run_planner() {
    let repo = repo_with_command_judge(
        r#"{"status": "success", "next_step": null, "blockers": [], "risk_flags": []}"#,
    );
    let workflow = repo.workflow_text(
        "gated.yaml",
        "workflow_id: gated_evaluation
version: 1
description: an agent step, a gate, then an evaluation
entry_step: implement
steps:
  - id: implement
    opcode: RUN_AGENT
    agent: scripted
    prompt: |
      WRITE feature.txt: the feature
    routes:
      \"*\": review
  - id: review
    opcode: GATE
    gate: requires_approval
    routes:
      gate_approved: evaluate
      gate_rejected: failed
  - id: evaluate
    opcode: EVALUATE
    prompt: planner.evaluate_step.v1
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
",
    );
    let (code, result, output) = repo.run(&workflow, &["--planner", "judge"]);
    assert_eq!(code, Some(3), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    repo.conductor_exits(&["gate", "approve", run_id, "--resume"], 0);
    let decision = repo.json(run_id, "artifacts/evaluate/1/planner_decision.json");
    assert_eq!(decision["planner"], "judge", "{decision}");
    assert_eq!(decision["decided_by"], "judge");
    assert_eq!(judge_calls(&repo), 1);
}

/// What the planner decided reaches later steps: a fix agent's prompt names the blockers and
/// risk flags, and the next gate's request carries them for the reviewer.
#[test]
fn blockers_and_risk_flags_reach_the_next_agent_and_the_gate() {
    let repo = repo_with_command_judge(
        r#"{"status": "partial", "next_step": null, "fix_instructions": {"objective": "stabilise the clock"}, "blockers": [{"code": "flaky_clock", "summary": "the test depends on wall time"}], "risk_flags": ["test_weakened"]}"#,
    );
    repo.repo.write(
        ".tnh/prompts/task/address_decision.v1.md",
        "---\nprompt_id: task.address_decision\nversion: 1\nrole: task\nsummary: test — act on the planner's decision\ninputs:\n  - {name: fix_instructions, type: map, required: true}\n  - {name: blockers, type: list, required: true}\n  - {name: risk_flags, type: list, required: true}\n---\nSAY objective={{ fix_instructions.objective }} blockers={{ blockers | map(attribute='code') | join(',') }} flags={{ risk_flags | join(',') }}\n",
    );
    let workflow = repo.workflow_text(
        "decision_inputs.yaml",
        "workflow_id: decision_inputs
version: 1
description: the planner's decision as inputs of the next agent and context of the gate
entry_step: implement
steps:
  - id: implement
    opcode: RUN_AGENT
    agent: scripted
    prompt: |
      WRITE feature.txt: the feature
    routes:
      \"*\": evaluate
  - id: evaluate
    opcode: EVALUATE
    prompt: planner.evaluate_step.v1
    planner: judge
    allowed_next_steps: [fix, failed]
    routes:
      success: STOP
      partial: fix
      blocked: failed
      unsafe: failed
      needs_human: failed
  - id: fix
    opcode: RUN_AGENT
    agent: scripted
    prompt: task.address_decision.v1
    inputs: [fix_instructions, blockers, risk_flags]
    routes:
      \"*\": review
  - id: review
    opcode: GATE
    gate: requires_approval
    routes:
      gate_approved: STOP
      gate_rejected: failed
  - id: failed
    opcode: STOP
    outcome: failure
",
    );
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(3), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let prompt =
        std::fs::read_to_string(repo.run_dir(run_id).join("artifacts/fix/1/prompt.md")).unwrap();
    assert!(
        prompt.contains("objective=stabilise the clock blockers=flaky_clock flags=test_weakened"),
        "{prompt}"
    );
    let request = repo.json(run_id, "artifacts/review/1/gate_request.json");
    let planner = &request["context"]["planner"];
    assert_eq!(planner["status"], "partial", "{request}");
    assert_eq!(planner["blockers"][0]["code"], "flaky_clock");
    assert_eq!(planner["risk_flags"], serde_json::json!(["test_weakened"]));
}

/// A `codex` planner that left a FIFO at its `-o` path hung the
/// conductor forever (a plain blocking `open` of the FIFO, out of reach of the planner's
/// timeout and of SIGTERM). Now the `-o` file is read only as a regular file: a FIFO, or a
/// link to `/dev/zero`, is a failed attempt, and the decision is `blocked` `planner_error`.
#[test]
fn a_codex_planner_that_plants_a_fifo_or_a_link_at_its_o_path_is_a_planner_error_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    for (scenario, expected) in [
        ("codex-planner-fifo", "a FIFO"),
        ("codex-planner-link", "symbolic link"),
    ] {
        // The fake reads its scenario from the environment: a wrapper sets it, so this
        // process's environment stays untouched.
        let wrapper = dir.path().join(scenario);
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\nTNH_FAKE_SCENARIO={scenario} exec '{}' \"$@\"\n",
                fake_cli("codex")
            ),
        )
        .unwrap();
        std::fs::set_permissions(
            &wrapper,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let text = format!(
            "planners:\n  judge:\n    kind: codex\n    binary: \"{}\"\n    timeout: 30s\n    attempts: 1\n",
            wrapper.display()
        );
        let config =
            tnh_conductor::config::Config::parse(text.as_bytes(), Path::new("config.yaml"))
                .unwrap();
        let backend = Backend::from_config("judge", &config).unwrap();
        let envelope = vector_envelope("vector_success_clean");
        // Asked on a thread of its own, so that a hang fails this test instead of blocking it.
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = sender.send(ask(&backend, &envelope));
        });
        let (verdict, attempts) = receiver
            .recv_timeout(std::time::Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("{scenario}: the planner never returned"));
        let (decision, decided_by) = decided(verdict);
        assert_eq!(decision.status, Status::Blocked, "{scenario}");
        assert_eq!(decided_by, "kernel", "{scenario}");
        assert_eq!(decision.blockers[0].code, "planner_error", "{scenario}");
        assert_eq!(attempts.len(), 1, "{scenario}");
        let error = attempts[0].error.clone().unwrap();
        assert!(
            error.contains("-o file") && error.contains(expected),
            "{scenario}: {error}"
        );
    }
}

/// `runs show` said only "1 blocker(s)" for a
/// planner that gave no usable answer; why (connection refused, HTTP 500, not JSON) was only in
/// planner_decision.json. Each blocker is listed with its code and summary.
#[test]
fn runs_show_says_why_the_planner_gave_no_usable_answer() {
    let repo = repo_with_command_judge("this is not a decision");
    let workflow = repo.workflow_text("evaluated.yaml", EVALUATED);
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(1), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let decision = repo.json(run_id, "artifacts/evaluate/1/planner_decision.json");
    let why = decision["blockers"][0]["summary"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(why.contains("planner `judge` failed"), "{decision}");
    let shown = repo.conductor_exits(&["runs", "show", run_id], 0);
    let text = stdout_text(&shown);
    let line = text
        .lines()
        .find(|line| line.trim_start().starts_with("blocker `planner_error`: "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        why.starts_with(
            line.trim_start()
                .trim_start_matches("blocker `planner_error`: ")
                .trim_end_matches('…')
        ),
        "{line}\n{why}"
    );
}
