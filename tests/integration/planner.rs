//! Planner backends and the guard: decision vectors through `planner check`, command
//! planners that lie or break, and the saved planner records of real runs.

use std::path::Path;

use crate::kernel_support::{RunRepo, first_event};
use crate::support::{conductor, fixture, stderr_text, stdout_text};

/// A command planner: a shell script that records each call and answers `answer` (or exits 1
/// when `answer` is empty).
fn judge(dir: &Path, answer: &str) -> String {
    let calls = dir.join("judge.calls");
    let body = if answer.is_empty() {
        "echo 'model unavailable' >&2\nexit 1".to_owned()
    } else {
        format!("cat <<'JSON'\n{answer}\nJSON")
    };
    let script = dir.join("judge.sh");
    let text = format!(
        "#!/bin/sh\ncat > /dev/null\necho call >> \"{}\"\n{body}\n",
        calls.display()
    );
    std::fs::write(&script, text).unwrap();
    format!(
        "planners:\n  judge:\n    kind: command\n    argv: [sh, \"{}\"]\n",
        script.display()
    )
}

fn calls(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("judge.calls"))
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

fn check(config: Option<&Path>, vectors: &Path, planner: Option<&str>) -> std::process::Output {
    let mut command = conductor();
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    command.args(["planner", "check"]).arg(vectors);
    if let Some(planner) = planner {
        command.args(["--planner", planner]);
    }
    command.output().unwrap()
}

/// Copies the named vectors from the fixture set into a folder, optionally changing `expect`.
fn vectors(dir: &Path, names: &[&str], expect: Option<serde_json::Value>) -> std::path::PathBuf {
    let folder = dir.join("vectors");
    std::fs::create_dir_all(&folder).unwrap();
    for entry in std::fs::read_dir(fixture("planner_vectors"))
        .unwrap()
        .flatten()
    {
        let file = entry.file_name().to_string_lossy().into_owned();
        if names
            .iter()
            .any(|name| file.ends_with(&format!("_{name}.json")))
        {
            let mut vector: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(entry.path()).unwrap()).unwrap();
            if let Some(expect) = &expect {
                vector["expect"] = expect.clone();
            }
            std::fs::write(folder.join(&file), serde_json::to_string(&vector).unwrap()).unwrap();
        }
    }
    folder
}

#[test]
fn the_rules_planner_passes_every_decision_vector() {
    let folder = fixture("planner_vectors");
    let count = std::fs::read_dir(&folder).unwrap().count();
    assert!(count >= 20, "the contract's eight and at least twelve more");
    let output = check(None, &folder, None);
    let stdout = stdout_text(&output);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}{}",
        stderr_text(&output)
    );
    for oa06 in [
        "vector_success_clean",
        "vector_partial_fixable",
        "vector_blocked_missing_artifact",
        "vector_unsafe_policy_violation",
        "vector_needs_human_goldens",
        "vector_needs_human_repeat_partial",
        "vector_unsafe_report_mismatch",
        "vector_partial_transcript_mismatch",
    ] {
        assert!(
            stdout
                .lines()
                .any(|line| line.split_whitespace().take(2).eq(["pass", oa06])),
            "{oa06}: {stdout}"
        );
    }
    assert!(
        stdout.contains(&format!("{count} vectors: {count} pass, 0 drift")),
        "{stdout}"
    );
}

#[test]
fn a_vector_whose_expectation_is_wrong_fails_with_exit_1_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let folder = vectors(
        dir.path(),
        &["vector_unsafe_policy_violation"],
        Some(serde_json::json!({ "status": "success", "risk_flags": ["no_such_flag"] })),
    );
    let output = check(None, &folder, None);
    let stdout = stdout_text(&output);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    let row: Vec<&str> = stdout
        .lines()
        .find(|line| line.starts_with("drift"))
        .expect("a drift row")
        .split_whitespace()
        .collect();
    assert_eq!(
        row,
        [
            "drift",
            "vector_unsafe_policy_violation",
            "success",
            "unsafe",
            "no_such_flag"
        ],
        "{stdout}"
    );
    assert!(
        stdout.starts_with("result  vector"),
        "a table header: {stdout}"
    );
    assert!(stdout.contains("1 vectors: 0 pass, 1 drift"), "{stdout}");
}

#[test]
fn the_guard_keeps_unsafe_and_needs_human_whatever_a_command_planner_answers() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        judge(
            dir.path(),
            r#"{"status": "success", "next_step": null, "blockers": [], "risk_flags": []}"#,
        ),
    )
    .unwrap();
    let folder = vectors(
        dir.path(),
        &[
            "vector_unsafe_policy_violation",
            "vector_needs_human_goldens",
            "vector_unsafe_report_mismatch",
            "vector_blocked_missing_artifact",
            "vector_unsafe_policy_beats_goldens",
        ],
        None,
    );
    let output = check(Some(&config), &folder, Some("judge"));
    let stdout = stdout_text(&output);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}{}",
        stderr_text(&output)
    );
    assert!(
        stdout.contains("5 vectors: 5 pass") && stdout.contains("(planner `judge`)"),
        "{stdout}"
    );
    assert_eq!(
        calls(dir.path()),
        5,
        "the command planner was asked once per vector"
    );
}

#[test]
fn a_broken_command_planner_is_retried_then_blocked_with_planner_error() {
    for answer in ["", "this is not json", r#"{"status": "great"}"#] {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.yaml");
        std::fs::write(&config, judge(dir.path(), answer)).unwrap();
        let folder = vectors(
            dir.path(),
            &["vector_success_clean"],
            Some(serde_json::json!({ "status": "blocked", "risk_flags": ["planner_error"] })),
        );
        let output = check(Some(&config), &folder, Some("judge"));
        assert_eq!(
            output.status.code(),
            Some(0),
            "{answer}: {}",
            stdout_text(&output)
        );
        assert_eq!(calls(dir.path()), 2, "{answer}: asked once, retried once");
    }
}

#[test]
fn an_unknown_planner_or_an_empty_folder_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let output = check(None, &fixture("planner_vectors"), Some("oracle"));
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr_text(&output).contains("planner `oracle` is not defined"),
        "{}",
        stderr_text(&output)
    );
    let output = check(None, dir.path(), None);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr_text(&output).contains("holds no decision vectors"),
        "{}",
        stderr_text(&output)
    );
    std::fs::write(dir.path().join("bad.json"), "{ not json").unwrap();
    let output = check(None, dir.path(), None);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr_text(&output).contains("bad.json"),
        "{}",
        stderr_text(&output)
    );
}

fn with_judge(repo: &RunRepo, answer: &str) {
    let config = repo.path().join(".tnh/config.yaml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&judge(repo.path().join(".tnh").as_path(), answer));
    std::fs::write(config, text).unwrap();
}

#[test]
fn a_lying_planner_cannot_turn_a_policy_violation_into_success_in_a_real_run() {
    let repo = RunRepo::new();
    with_judge(
        &repo,
        r#"{"status": "success", "next_step": null, "blockers": [], "risk_flags": []}"#,
    );
    let (code, result, output) = repo.run(&repo.workflow("unsafe.yaml"), &["--planner", "judge"]);
    assert_eq!(code, Some(1), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let decision = repo.json(run_id, "artifacts/evaluate/1/planner_decision.json");
    assert_eq!(decision["status"], "unsafe", "{decision}");
    assert_eq!(decision["planner"], "judge");
    assert_eq!(decision["decided_by"], "judge");
    assert!(
        decision["risk_flags"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("policy_violation"))
    );
    assert_eq!(calls(&repo.path().join(".tnh")), 1);
}

#[test]
fn a_failing_planner_in_a_real_run_blocks_and_the_kernel_records_that_it_decided() {
    let repo = RunRepo::new();
    with_judge(&repo, "");
    let (code, result, output) = repo.run(&repo.workflow("fix_loop.yaml"), &["--planner", "judge"]);
    assert_eq!(
        code,
        Some(1),
        "blocked routes to the failure STOP: {result}\n{}",
        stderr_text(&output)
    );
    let run_id = result["run_id"].as_str().unwrap();
    let decision = repo.json(run_id, "artifacts/evaluate/1/planner_decision.json");
    assert_eq!(decision["status"], "blocked", "{decision}");
    assert_eq!(decision["decided_by"], "kernel");
    assert_eq!(decision["blockers"][0]["code"], "planner_error");
    assert!(
        decision["blockers"][0]["summary"]
            .as_str()
            .unwrap()
            .contains("planner `judge` failed"),
        "{decision}"
    );
    assert_eq!(calls(&repo.path().join(".tnh")), 2, "one try and one retry");
    let event = first_event(&repo.events(run_id), "planner_decision").clone();
    assert_eq!(event["decided_by"], "kernel", "{event}");
}

#[test]
fn saved_planner_records_match_their_published_schemas() {
    let repo = RunRepo::new();
    let (code, result, _) = repo.run(&repo.workflow("fix_loop.yaml"), &[]);
    assert_eq!(code, Some(0), "{result}");
    let run_id = result["run_id"].as_str().unwrap();
    for (schema, file) in [
        ("planner-input", "planner_input.json"),
        ("planner-decision", "planner_decision.json"),
    ] {
        let output = conductor().args(["schema", schema]).output().unwrap();
        assert_eq!(output.status.code(), Some(0), "schema {schema}");
        let validator =
            jsonschema::validator_for(&serde_json::from_slice(&output.stdout).unwrap()).unwrap();
        for visit in [1, 2] {
            let record = repo.json(run_id, &format!("artifacts/evaluate/{visit}/{file}"));
            assert!(validator.is_valid(&record), "{file} #{visit}: {record}");
            assert_eq!(record["schema_version"], 1);
        }
        let mut broken = repo.json(run_id, &format!("artifacts/evaluate/1/{file}"));
        broken["schema_version"] = serde_json::json!(99);
        broken["status"] = serde_json::json!("fine");
        assert!(
            !validator.is_valid(&broken),
            "{schema} rejects a broken record"
        );
    }
    let first = repo.json(run_id, "artifacts/evaluate/1/planner_decision.json");
    assert_eq!(first["status"], "partial");
    assert_eq!(first["decided_by"], "rules");
}

/// An envelope with only the contract's fields — no `schema_version`, none of this project's
/// additions — is valid input: the published schema accepts it and the backends decide on it.
#[test]
fn an_envelope_with_only_the_oa06_fields_is_valid_input() {
    const CONTRACT: [&str; 7] = [
        "run_id",
        "workflow_id",
        "step_id",
        "evaluate_prompt",
        "allowed_next_steps",
        "provenance_window",
        "evidence",
    ];
    const EVIDENCE: [&str; 6] = [
        "transcript_summary",
        "workspace_diff_summary",
        "validation",
        "harness_report",
        "artifacts",
        "policy_events",
    ];
    let output = conductor()
        .args(["schema", "planner-input"])
        .output()
        .unwrap();
    let validator =
        jsonschema::validator_for(&serde_json::from_slice(&output.stdout).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let folder = vectors(
        dir.path(),
        &[
            "vector_success_clean",
            "vector_partial_fixable",
            "vector_unsafe_policy_violation",
            "vector_needs_human_goldens",
        ],
        None,
    );
    for entry in std::fs::read_dir(&folder).unwrap().flatten() {
        let mut vector: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(entry.path()).unwrap()).unwrap();
        let envelope = vector["envelope"].as_object_mut().unwrap();
        envelope.retain(|key, _| CONTRACT.contains(&key.as_str()));
        envelope["evidence"]
            .as_object_mut()
            .unwrap()
            .retain(|key, _| EVIDENCE.contains(&key.as_str()));
        assert!(
            validator.is_valid(&vector["envelope"]),
            "{}",
            vector["envelope"]
        );
        std::fs::write(entry.path(), vector.to_string()).unwrap();
    }
    let output = check(None, &folder, None);
    assert_eq!(output.status.code(), Some(0), "{}", stdout_text(&output));
}

#[test]
fn a_lying_planner_cannot_turn_a_timeout_into_success_in_a_real_run() {
    let repo = RunRepo::new();
    with_judge(
        &repo,
        r#"{"status": "success", "next_step": null, "blockers": [], "risk_flags": []}"#,
    );
    let config = repo.path().join(".tnh/config.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text.replacen(
        "agents:\n",
        "agents:\n  hangs:\n    kind: command\n    argv: [sleep, \"600\"]\n",
        1,
    );
    std::fs::write(&config, text).unwrap();
    let workflow = repo.workflow_text(
        "timeout.yaml",
        r#"workflow_id: timeout
version: 1
description: an agent killed by its timeout, then a planner that says success
entry_step: work
steps:
  - id: work
    opcode: RUN_AGENT
    agent: hangs
    prompt: do the work
    limits: { timeout: 1s }
    routes: { "*": judge }
  - id: judge
    opcode: EVALUATE
    prompt: planner.evaluate_step.v1
    allowed_next_steps: [failed]
    routes: { success: STOP, partial: failed, blocked: failed, unsafe: failed, needs_human: failed }
  - id: failed
    opcode: STOP
    outcome: failure
"#,
    );

    let (code, result, output) = repo.run(&workflow, &["--planner", "judge"]);

    assert_eq!(code, Some(1), "{result}\n{}", stderr_text(&output));
    let detail = result["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("reached STOP step `failed`: planner `judge` answered blocked"),
        "a STOP without a reason says what led to it: {detail}"
    );
    let run_id = result["run_id"].as_str().unwrap();
    assert_eq!(
        repo.json(run_id, "artifacts/work/1/manifest.json")["termination"],
        "killed_timeout"
    );
    let decision = repo.json(run_id, "artifacts/judge/1/planner_decision.json");
    assert_eq!(decision["status"], "blocked", "{decision}");
    assert_eq!(decision["decided_by"], "judge");
    assert!(
        decision["risk_flags"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("killed_timeout")),
        "{decision}"
    );
}

/// A malformed vector is an error naming its file (exit 2), never a `pass`: no envelope, an
/// envelope that is not an object, `risk_flags` that is not a list, a misspelt `expect` key,
/// a status that does not exist.
#[test]
fn a_malformed_decision_vector_is_an_error_naming_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let good = vectors(dir.path(), &["success_clean"], None);
    let vector: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::fs::read_dir(&good)
                .unwrap()
                .flatten()
                .next()
                .unwrap()
                .path(),
        )
        .unwrap(),
    )
    .unwrap();
    let mut cases: Vec<(&str, serde_json::Value, &str)> = Vec::new();
    let mut no_envelope = vector.clone();
    no_envelope.as_object_mut().unwrap().remove("envelope");
    cases.push(("no_envelope", no_envelope, "`envelope` is missing"));
    let mut string_envelope = vector.clone();
    string_envelope["envelope"] = "just text".into();
    cases.push((
        "string_envelope",
        string_envelope,
        "`envelope` must be an object",
    ));
    let mut flags = vector.clone();
    flags["expect"]["risk_flags"] = "policy_violation".into();
    cases.push((
        "flags",
        flags,
        "`expect.risk_flags` must be a list of strings",
    ));
    let mut misspelt = vector.clone();
    misspelt["expect"]["risk_fags"] = serde_json::json!([]);
    cases.push(("misspelt", misspelt, "unknown key `expect.risk_fags`"));
    let mut status = vector.clone();
    status["expect"]["status"] = "sucess".into();
    cases.push(("status", status, "`expect.status` `sucess` is not a status"));
    for (name, vector, expected) in cases {
        let folder = dir.path().join(name);
        std::fs::create_dir_all(&folder).unwrap();
        let file = folder.join(format!("{name}.json"));
        std::fs::write(&file, vector.to_string()).unwrap();
        let output = check(None, &folder, None);
        let stderr = stderr_text(&output);
        assert_eq!(output.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(&format!("{name}.json")), "{name}: {stderr}");
        assert!(stderr.contains(expected), "{name}: {stderr}");
    }
}

/// A second EVALUATE with no step since the first has no new evidence: it keeps at least the
/// first one's status (`no_new_evidence`), so a killed step is never laundered into a success
/// STOP — with a lying command planner and with `rules` alike.
#[test]
fn an_evaluation_without_new_evidence_cannot_launder_a_killed_step_into_success() {
    for planner in ["judge", "rules"] {
        let repo = RunRepo::new();
        with_judge(
            &repo,
            r#"{"status": "success", "next_step": null, "blockers": [], "risk_flags": []}"#,
        );
        let config = repo.path().join(".tnh/config.yaml");
        let text = std::fs::read_to_string(&config).unwrap();
        let text = text.replacen(
            "agents:\n",
            "agents:\n  hangs:\n    kind: command\n    argv: [sleep, \"600\"]\n",
            1,
        );
        std::fs::write(&config, text).unwrap();
        let workflow = repo.workflow_text(
            "launder.yaml",
            r#"workflow_id: launder
version: 1
description: a killed step, judged blocked, then asked again with nothing new
entry_step: work
steps:
  - id: work
    opcode: RUN_AGENT
    agent: hangs
    prompt: do the work
    limits: { timeout: 1s }
    routes: { "*": judge }
  - id: judge
    opcode: EVALUATE
    prompt: planner.evaluate_step.v1
    allowed_next_steps: [second_opinion, failed]
    routes: { success: STOP, partial: failed, blocked: second_opinion, unsafe: failed, needs_human: failed }
  - id: second_opinion
    opcode: EVALUATE
    prompt: planner.evaluate_step.v1
    allowed_next_steps: [failed]
    routes: { success: STOP, partial: failed, blocked: failed, unsafe: failed, needs_human: failed }
  - id: failed
    opcode: STOP
    outcome: failure
"#,
        );

        let (code, result, output) = repo.run(&workflow, &["--planner", planner]);

        assert_eq!(
            code,
            Some(1),
            "{planner}: {result}\n{}",
            stderr_text(&output)
        );
        let run_id = result["run_id"].as_str().unwrap();
        let decision = repo.json(run_id, "artifacts/second_opinion/1/planner_decision.json");
        assert_eq!(decision["status"], "blocked", "{planner}: {decision}");
        assert!(
            decision["risk_flags"]
                .as_array()
                .unwrap()
                .contains(&serde_json::json!("no_new_evidence")),
            "{planner}: {decision}"
        );
        assert_eq!(decision["next_step"], "failed", "{planner}: {decision}");
    }
}

/// When the guard raises the planner's status, the saved decision names the step the run
/// actually takes (not the planner's `next_step`), and `runs show` says the guard raised it;
/// when the planner failed, `runs show` says the kernel decided.
#[test]
fn a_raised_or_kernel_decision_is_recorded_and_shown_as_such() {
    let repo = RunRepo::new();
    with_judge(
        &repo,
        r#"{"status": "success", "next_step": "ship", "blockers": [], "risk_flags": []}"#,
    );
    let workflow = std::fs::read_to_string(fixture("runs/unsafe.yaml"))
        .unwrap()
        .replace(
            "allowed_next_steps: [undo]",
            "allowed_next_steps: [undo, ship]",
        )
        .replace("      success: STOP\n", "      success: ship\n")
        .replace(
            "  - id: rolled_back\n",
            "  - id: ship\n    opcode: STOP\n    outcome: success\n  - id: rolled_back\n",
        );
    let workflow = repo.workflow_text("unsafe_ship.yaml", &workflow);
    let (code, result, output) = repo.run(&workflow, &["--planner", "judge"]);
    assert_eq!(code, Some(1), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let decision = repo.json(run_id, "artifacts/evaluate/1/planner_decision.json");
    assert_eq!(decision["status"], "unsafe", "{decision}");
    assert_eq!(decision["next_step"], "undo", "the route taken: {decision}");
    let shown = stdout_text(&repo.conductor(&["runs", "show", run_id]));
    assert!(
        shown.contains(
            "unsafe, raised by the guard from the `judge` planner's `success`, next `undo`"
        ),
        "{shown}"
    );

    let failing = RunRepo::new();
    with_judge(&failing, "");
    let (_, result, _) = failing.run(&failing.workflow("fix_loop.yaml"), &["--planner", "judge"]);
    let run_id = result["run_id"].as_str().unwrap();
    let shown = stdout_text(&failing.conductor(&["runs", "show", run_id]));
    assert!(
        shown.contains("blocked by the kernel (the `judge` planner gave no usable answer)"),
        "{shown}"
    );
    assert!(!shown.contains("by the `judge` planner"), "{shown}");
}

/// A planner configured as `default` (as `init` and the README write it) judges
/// every EVALUATE that names none: no `--planner`, no step `planner:`, no `defaults.planner`.
#[test]
fn a_planner_configured_as_default_judges_an_evaluate_that_names_none() {
    let repo = RunRepo::new();
    let config = repo.path().join(".tnh/config.yaml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    let blocked = r#"{"status": "blocked", "next_step": null, "blockers": [{"code": "judge_says_no", "summary": "no"}], "risk_flags": []}"#;
    text.push_str(
        &judge(repo.path().join(".tnh").as_path(), blocked).replace("  judge:", "  default:"),
    );
    std::fs::write(&config, text).unwrap();

    let (code, result, output) = repo.run(&repo.workflow("fix_loop.yaml"), &[]);

    assert_eq!(
        code,
        Some(1),
        "the default planner's `blocked` routes to the failure STOP (rules would have said partial): {result}\n{}",
        stderr_text(&output)
    );
    let run_id = result["run_id"].as_str().unwrap();
    let decision = repo.json(run_id, "artifacts/evaluate/1/planner_decision.json");
    assert_eq!(decision["planner"], "default", "{decision}");
    assert_eq!(decision["decided_by"], "default", "{decision}");
    assert_eq!(
        decision["blockers"][0]["code"], "judge_says_no",
        "{decision}"
    );
    assert_eq!(calls(&repo.path().join(".tnh")), 1);
}

/// A planner definition that cannot work — an unknown kind, a misspelt key — stops `run`,
/// `validate` and `planner check` when the configuration is read, with its position, even when
/// no step names it (`default` is asked by every EVALUATE that names none).
#[test]
fn a_broken_planner_definition_is_reported_where_the_configuration_is_read() {
    for (definition, expected) in [
        (
            "  default: {kind: nonsense}\n",
            ":6:19: planner `default` has kind `nonsense`; the kinds are rules, command, claude, codex, http",
        ),
        (
            "  spare: {kind: command, agrv: [./judge.sh]}\n",
            ":6:26: planner `spare` has an unknown key `agrv`; did you mean `argv`?",
        ),
        (
            "  spare: {kind: http, model: m}\n",
            ":6:10: planner `spare` has no `url`",
        ),
        (
            "  spare: command\n",
            ":6:10: planner `spare` must be a mapping",
        ),
    ] {
        let repo = RunRepo::new();
        let config = repo.path().join(".tnh/config.yaml");
        let text = std::fs::read_to_string(&config).unwrap();
        std::fs::write(&config, format!("{text}planners:\n{definition}")).unwrap();
        let workflow = repo.workflow("fix_loop.yaml");

        let (code, _, output) = repo.run(&workflow, &[]);
        let stderr = stderr_text(&output);
        assert_eq!(code, Some(2), "{definition}: {stderr}");
        assert!(
            stderr.contains(&format!(".tnh/config.yaml{expected}")),
            "{definition}: {stderr}"
        );
        assert!(!repo.path().join(".tnh/run").exists(), "{definition}");
        assert!(!repo.path().join(".tnh/worktrees").exists(), "{definition}");

        let validated = repo.conductor(&["validate", workflow.to_str().unwrap()]);
        assert_eq!(validated.status.code(), Some(2), "{definition}");
        assert!(
            stderr_text(&validated).contains(expected),
            "{definition}: {}",
            stderr_text(&validated)
        );
    }
}

/// A definition that cannot work is refused where the configuration is read, at the key at
/// fault: no `kind` (never a silent `rules`), keys a `rules` planner would ignore, a zero
/// timeout, a `url` that is not http(s), and keys of the wrong type (not "missing").
#[test]
fn planner_definitions_that_cannot_work_are_refused_at_the_key_at_fault() {
    for (definition, at, expected) in [
        (
            "  judge: {argv: [./judge.sh], timeout: 30s}\n",
            "{",
            "planner `judge` has no `kind`; add one of `kind: rules`",
        ),
        (
            "  judge: {kind: rules, argv: [./judge.sh]}\n",
            "[",
            "planner `judge` is `kind: rules`, which takes no other key, but has `argv`",
        ),
        (
            "  judge: {kind: command, argv: [./judge.sh], timeout: 0s}\n",
            "0s",
            "planner `judge`: timeout `0s` would kill every attempt at once",
        ),
        (
            "  judge: {kind: http, url: \"file:///etc/passwd\", model: m}\n",
            "\"file",
            "planner `judge`: `url` `file:///etc/passwd` is not an http:// or https:// URL",
        ),
        (
            "  judge: {kind: command, argv: \"echo hi\"}\n",
            "\"echo",
            "planner `judge`: `argv` must be a list of strings, got \"echo hi\"",
        ),
        (
            "  judge: {kind: http, url: 8080, model: m}\n",
            "8080",
            "planner `judge`: `url` must be a string, got 8080",
        ),
    ] {
        let repo = RunRepo::new();
        let config = repo.path().join(".tnh/config.yaml");
        let text = std::fs::read_to_string(&config).unwrap();
        std::fs::write(&config, format!("{text}planners:\n{definition}")).unwrap();
        let workflow = repo.workflow("fix_loop.yaml");
        let column = if at == "{" {
            definition.find('{').unwrap() + 1
        } else {
            definition.find(at).unwrap() + 1
        };
        // A kind-less definition is reported at the definition itself.
        let position = if at == "{" {
            ":6:10:".to_owned()
        } else {
            format!(":6:{column}:")
        };

        let validated = repo.conductor(&["validate", workflow.to_str().unwrap()]);
        let stderr = stderr_text(&validated);
        assert_eq!(validated.status.code(), Some(2), "{definition}: {stderr}");
        assert!(
            stderr.contains(&format!(".tnh/config.yaml{position} {expected}")),
            "{definition}: {stderr}"
        );
    }
}

/// A planner process that, on its first call, records its pid, SIGKILLs the conductor (its
/// parent) and waits; on later calls it answers `success` as a `kind` planner answers.
fn killer_planner(dir: &Path, kind: &str) -> (String, std::path::PathBuf) {
    let pid_file = dir.join(format!("{kind}.pid"));
    let answer = r#"{"status": "success", "next_step": null, "blockers": [], "risk_flags": []}"#;
    let reply = match kind {
        "command" => format!("echo '{answer}'"),
        "claude" => format!(
            "echo '{{\"type\": \"result\", \"subtype\": \"success\", \"is_error\": false, \"result\": \"\", \"structured_output\": {answer}}}'"
        ),
        // codex writes its final message to the file after `-o`.
        _ => format!(
            "while [ $# -gt 0 ]; do if [ \"$1\" = -o ]; then out=$2; fi; shift; done\necho '{answer}' > \"$out\""
        ),
    };
    let script = dir.join(format!("{kind}-planner.sh"));
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n{version}cat > /dev/null\nif [ ! -e \"{pid}\" ]; then\n  echo $$ > \"{pid}.tmp\" && mv \"{pid}.tmp\" \"{pid}\"\n  kill -9 $PPID\n  exec sleep 600\nfi\n{reply}\n",
            pid = pid_file.display(),
            // The checks before a run ask a Claude or Codex CLI its version.
            version = match kind {
                "claude" => "[ \"$1\" = --version ] && echo '2.1.332 (Claude Code)' && exit 0\n",
                "codex" => "[ \"$1\" = --version ] && echo 'codex-cli 0.171.0' && exit 0\n",
                _ => "",
            }
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let definition = match kind {
        "command" => format!("{{kind: command, argv: [\"{}\"]}}", script.display()),
        other => format!("{{kind: {other}, binary: \"{}\"}}", script.display()),
    };
    (format!("  waits_{kind}: {definition}\n"), pid_file)
}

/// Kills a process a failed test left behind: the one it was made for, if its pid still
/// names it (same start time), never a process that got the pid after it was reaped.
struct KillOnDrop {
    pid: i32,
    started: Option<String>,
}

impl KillOnDrop {
    fn new(pid: i32) -> KillOnDrop {
        KillOnDrop {
            pid,
            started: start_time(pid),
        }
    }
}

/// The start time of `pid` (`/proc/PID/stat`, field 22), when it exists.
fn start_time(pid: i32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    rest.split_whitespace().nth(19).map(str::to_owned)
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.started.is_some() && start_time(self.pid) == self.started {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// A conductor killed (SIGKILL) during EVALUATE leaves its planner process running; `resume`
/// finds it by the run's `TNH_RUN_ID`, as it finds agents, kills it and records it in
/// `step_interrupted`, so two planners never judge one step — for `command` planners and the
/// `claude` and `codex` CLIs alike.
#[test]
fn resume_kills_the_planner_a_killed_conductor_left_running() {
    for kind in ["command", "claude", "codex"] {
        let repo = RunRepo::new();
        let (definition, pid_file) = killer_planner(&repo.path().join(".tnh"), kind);
        let config = repo.path().join(".tnh/config.yaml");
        let text = std::fs::read_to_string(&config).unwrap();
        std::fs::write(&config, format!("{text}planners:\n{definition}")).unwrap();
        let workflow = repo.workflow_text(
            "judged.yaml",
            &format!(
                "workflow_id: judged\nversion: 1\ndescription: d\nentry_step: judge\nsteps:\n  - id: judge\n    opcode: EVALUATE\n    planner: waits_{kind}\n    prompt: planner.evaluate_step.v1\n    allowed_next_steps: [failed]\n    routes: {{success: STOP, partial: failed, blocked: failed, unsafe: failed, needs_human: failed}}\n  - id: failed\n    opcode: STOP\n    outcome: failure\n"
            ),
        );
        let command = |args: &[&str]| {
            conductor()
                .arg("--repo")
                .arg(repo.path())
                .args(args)
                .env_remove("TNH_CLAUDE_BIN")
                .env_remove("TNH_CODEX_BIN")
                .output()
                .unwrap()
        };

        let killed = command(&["-q", "run", workflow.to_str().unwrap()]);
        assert_eq!(killed.status.code(), None, "{kind}: killed by its planner");
        let pid: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let _cleanup = KillOnDrop::new(pid);
        assert!(
            crate::runner_support::is_alive(pid),
            "{kind}: the planner outlived its conductor"
        );
        let run_id = repo.only_run_id();

        let resumed = command(&["resume", &run_id]);

        assert_eq!(
            resumed.status.code(),
            Some(0),
            "{kind}: {}",
            stderr_text(&resumed)
        );
        assert!(
            !crate::runner_support::is_alive(pid),
            "{kind}: the old planner {pid} still runs beside the new one"
        );
        let events = repo.events(&run_id);
        let interrupted = first_event(&events, "step_interrupted");
        assert!(
            interrupted["killed_orphans"]
                .as_array()
                .unwrap()
                .contains(&serde_json::json!(pid)),
            "{kind}: {interrupted}"
        );
        let decision = repo.json(&run_id, "artifacts/judge/2/planner_decision.json");
        assert_eq!(decision["decided_by"], format!("waits_{kind}"), "{kind}");
    }
}

/// `run --planner` naming no defined planner is a bad invocation: exit 2 before anything
/// starts (no agent, no run directory, no worktree), naming the planner, the defined ones and
/// the nearest — not an agent step run in full and then `planner_error`.
#[test]
fn an_unknown_planner_given_to_run_is_refused_before_anything_starts() {
    let repo = RunRepo::new();
    with_judge(
        &repo,
        r#"{"status": "success", "blockers": [], "risk_flags": []}"#,
    );

    let (code, _, output) = repo.run(&repo.workflow("fix_loop.yaml"), &["--planner", "judeg"]);

    let stderr = stderr_text(&output);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "planner `judeg` is not defined (given with --planner); the defined planners are default, rules, judge"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("did you mean `judge`?"), "{stderr}");
    assert!(!repo.path().join(".tnh/run").exists(), "{stderr}");
    assert!(!repo.path().join(".tnh/worktrees").exists(), "{stderr}");
    assert_eq!(calls(&repo.path().join(".tnh")), 0);
}

/// `resume` keeps the run's `--planner`; if the configuration no longer defines it, the resume
/// is refused with nothing changed, rather than every EVALUATE ending `planner_error`.
#[test]
fn resume_refuses_a_run_whose_planner_is_no_longer_defined() {
    let repo = RunRepo::new();
    let config = repo.path().join(".tnh/config.yaml");
    let original = std::fs::read_to_string(&config).unwrap();
    with_judge(
        &repo,
        r#"{"status": "success", "blockers": [], "risk_flags": []}"#,
    );
    let (code, result, output) = repo.run(&repo.workflow("gate.yaml"), &["--planner", "judge"]);
    assert_eq!(code, Some(3), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let events_before = repo.events(run_id).len();
    std::fs::write(&config, original).unwrap();

    let resumed = repo.conductor(&["resume", run_id]);

    let stderr = stderr_text(&resumed);
    assert_eq!(resumed.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "planner `judge` is not defined (the run was started with `--planner` naming it)"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was changed"), "{stderr}");
    assert_eq!(repo.events(run_id).len(), events_before);
}
