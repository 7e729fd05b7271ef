//! RUN_VALIDATION with real scripts: configured and script validators, artifact capture,
//! harness reports, sanitised environment, the entrypoint allowlist and the goldens rule.

use crate::kernel_support::RunRepo;
use crate::support::stderr_text;

fn run_harness(mode: &str) -> (RunRepo, Option<i32>, serde_json::Value) {
    let repo = RunRepo::new();
    let workflow = repo.workflow("harness.yaml");
    let output = crate::support::conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["run", "--json", "-p"])
        .arg(format!("harness={mode}"))
        .arg(&workflow)
        .env("ANTHROPIC_API_KEY", "sk-must-not-leak")
        .output()
        .unwrap();
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
    assert!(result["run_id"].is_string(), "{}", stderr_text(&output));
    (repo, output.status.code(), result)
}

fn validator(repo: &RunRepo, run_id: &str) -> serde_json::Value {
    repo.json(run_id, "artifacts/execute_harness/1/validation_report.json")["validators"]["generated_harness"].clone()
}

#[test]
fn a_generated_harness_runs_and_its_report_and_nested_screenshots_are_captured() {
    let (repo, code, result) = run_harness("good");
    assert_eq!(code, Some(0), "{result}");
    let run_id = result["run_id"].as_str().unwrap();
    let record = validator(&repo, run_id);
    assert_eq!(record["outcome"], "completed");
    assert_eq!(record["exit_code"], 0);
    assert_eq!(record["harness_report"], "out/harness_report.json");
    let folder = repo
        .run_dir(run_id)
        .join("artifacts/execute_harness/1/validators/generated_harness");
    assert!(
        folder
            .join("artifacts/out/screenshots/home/wide/page.png")
            .is_file()
    );
    let stdout = std::fs::read_to_string(folder.join("stdout.txt")).unwrap();
    assert_eq!(
        stdout.trim(),
        "secret is []",
        "the validator saw the API key"
    );
    let manifest = repo.json(run_id, "artifacts/execute_harness/1/manifest.json");
    let roles: Vec<&str> = manifest["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["role"].as_str().unwrap())
        .collect();
    for role in [
        "validation_report",
        "validation_stdout",
        "validation_stderr",
        "harness_report",
        "validation_artifact",
        "policy_summary",
    ] {
        assert!(roles.contains(&role), "{role} missing: {roles:?}");
    }
    assert_eq!(
        repo.json(run_id, "artifacts/evaluate/1/planner_decision.json")["status"],
        "success"
    );
}

#[test]
fn a_failing_harness_is_an_error_with_its_exit_code() {
    let (repo, code, result) = run_harness("fail");
    assert_eq!(code, Some(1), "{result}");
    let record = validator(&repo, result["run_id"].as_str().unwrap());
    assert_eq!(
        (record["outcome"].as_str(), record["exit_code"].as_i64()),
        (Some("error"), Some(3))
    );
}

#[test]
fn malformed_and_missing_reports_are_errors() {
    for (mode, expected) in [
        ("malformed", "lacks cases, summary"),
        (
            "missing",
            "declared artifacts missing: out/harness_report.json",
        ),
    ] {
        let (repo, _, result) = run_harness(mode);
        let record = validator(&repo, result["run_id"].as_str().unwrap());
        assert_eq!(record["outcome"], "error", "{mode}");
        assert!(
            record["cause"].as_str().unwrap().contains(expected),
            "{mode}: {record}"
        );
    }
}

#[test]
fn proposed_goldens_need_an_approved_gate_before_success() {
    let (repo, code, result) = run_harness("goldens");
    // The rules planner sends proposed goldens to a human: the run waits at the gate.
    assert_eq!(code, Some(3), "{result}");
    let run_id = result["run_id"].as_str().unwrap().to_owned();
    repo.conductor_exits(&["gate", "approve", &run_id, "--resume"], 0);
}

#[test]
fn goldens_without_a_gate_cannot_reach_success() {
    let repo = RunRepo::new();
    // A queued (non-blocking) review satisfies the static rule but approves nothing.
    let text = std::fs::read_to_string(crate::support::fixture("runs/harness.yaml"))
        .unwrap()
        .replace("gate: requires_approval\n    routes:\n      gate_approved: STOP\n      gate_rejected: failed", "gate: queue_for_review\n    routes:\n      gate_queued: STOP");
    let workflow = repo.workflow_text("no_gate.yaml", &text);
    let (code, result, output) = repo.run(&workflow, &["-p", "harness=goldens"]);
    assert_eq!(code, Some(4), "{result}{}", stderr_text(&output));
    assert!(
        result["detail"]
            .as_str()
            .unwrap()
            .contains("need an approved blocking GATE"),
        "{result}"
    );
}

#[test]
fn hostile_globs_symlinks_and_entrypoints_are_refused() {
    let repo = RunRepo::new();
    std::os::unix::fs::symlink("/etc", repo.path().join("etc_link")).unwrap();
    repo.repo.commit_all("a symlink to /etc");
    let workflow = repo.workflow_text(
        "hostile.yaml",
        "workflow_id: hostile\nversion: 1\ndescription: d\nentry_step: check\nsteps:\n  - id: check\n    opcode: RUN_VALIDATION\n    run:\n      - id: escape\n        kind: script\n        entrypoint: /bin/true\n      - id: reader\n        kind: script\n        entrypoint: .tnh/run/${run_id}/missing.py\n        artifacts: [\"../../etc/passwd\", \"etc_link/passwd\"]\n    routes:\n      \"*\": gate\n  - id: gate\n    opcode: GATE\n    gate: queue_for_review\n    routes:\n      gate_queued: STOP\n",
    );
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(0), "{result}{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let report = repo.json(run_id, "artifacts/check/1/validation_report.json");
    assert_eq!(report["outcome"], "killed_policy");
    let escape = &report["validators"]["escape"];
    assert_eq!(escape["outcome"], "killed_policy");
    assert!(
        escape["cause"]
            .as_str()
            .unwrap()
            .contains("outside the run directory"),
        "{escape}"
    );
    assert!(
        report["validators"]["reader"]["cause"]
            .as_str()
            .unwrap()
            .contains("cannot be found")
    );
    let copied: Vec<_> = walk_files(&repo.run_dir(run_id).join("artifacts/check"));
    assert!(
        copied.iter().all(|path| !path.ends_with("passwd")),
        "{copied:?}"
    );
}

fn walk_files(root: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(directory) = pending.pop() {
        for entry in std::fs::read_dir(directory).unwrap().flatten() {
            if entry.path().is_dir() {
                pending.push(entry.path());
            } else {
                found.push(entry.path().display().to_string());
            }
        }
    }
    found
}

#[test]
fn configured_validators_pass_fail_and_time_out() {
    let repo = RunRepo::new();
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!("{config}validators:\n  ok: {{argv: [sh, -c, \"exit 0\"]}}\n  broken: {{argv: [sh, -c, \"echo failing >&2; exit 2\"]}}\n  slow: {{argv: [sh, -c, \"exec sleep 30\"]}}\n"),
    );
    let step = |run: &str, timeout: &str| {
        format!(
            "workflow_id: v\nversion: 1\ndescription: d\nentry_step: check\nsteps:\n  - id: check\n    opcode: RUN_VALIDATION\n    run: [{run}]\n    limits: {{timeout: {timeout}}}\n    routes:\n      \"*\": STOP\n"
        )
    };
    for (run, timeout, expected) in [
        ("ok", "30s", "completed"),
        ("ok, broken", "30s", "error"),
        ("slow", "300ms", "killed_timeout"),
    ] {
        let workflow = repo.workflow_text("v.yaml", &step(run, timeout));
        let (_, result, output) = repo.run(&workflow, &[]);
        let run_id = result["run_id"]
            .as_str()
            .unwrap_or_else(|| panic!("{}", stderr_text(&output)));
        let report = repo.json(run_id, "artifacts/check/1/validation_report.json");
        assert_eq!(report["outcome"], expected, "{run}: {report}");
    }
}

#[test]
fn script_validators_get_no_network_unless_allowed() {
    if !std::process::Command::new("unshare")
        .args(["-rn", "true"])
        .status()
        .is_ok_and(|status| status.success())
    {
        eprintln!(
            "skipped: unshare cannot create a network namespace here (the report says so; tested in validation_report)"
        );
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let repo = RunRepo::new();
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!("{config}script_allowlist: [\"checks/\"]\n"),
    );
    repo.repo.write("checks/net.py", "import socket, sys\ntry:\n    socket.create_connection((\"127.0.0.1\", int(sys.argv[1])), timeout=5)\n    print(\"connected\")\nexcept OSError as error:\n    print(\"refused\")\n");
    repo.repo.commit_all("a network probe");
    for (network, expected) in [("deny", "refused"), ("allow", "connected")] {
        let text = format!(
            "workflow_id: net\nversion: 1\ndescription: d\nentry_step: probe\nsteps:\n  - id: probe\n    opcode: RUN_VALIDATION\n    run:\n      - id: net\n        kind: script\n        entrypoint: checks/net.py\n        args: [\"{port}\"]\n        network: {network}\n    routes:\n      \"*\": review\n  - id: review\n    opcode: GATE\n    gate: queue_for_review\n    routes:\n      gate_queued: STOP\n"
        );
        let (code, result, output) = repo.run(&repo.workflow_text("net.yaml", &text), &[]);
        assert_eq!(code, Some(0), "{result}{}", stderr_text(&output));
        let run_id = result["run_id"].as_str().unwrap();
        let stdout = std::fs::read_to_string(
            repo.run_dir(run_id)
                .join("artifacts/probe/1/validators/net/stdout.txt"),
        )
        .unwrap();
        assert_eq!(stdout.trim(), expected, "network: {network}");
        let isolation = repo.json(run_id, "artifacts/probe/1/policy_summary.json");
        assert!(isolation["network"]["net"].is_string(), "{isolation}");
    }
}

#[test]
fn refused_oversized_and_ill_typed_artifacts_are_recorded() {
    let repo = RunRepo::new();
    std::os::unix::fs::symlink("/etc/passwd", repo.path().join("passwd_link")).unwrap();
    repo.repo.commit_all("a symlink out");
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    let script = "import json; open('big.bin','wb').truncate(65 << 20); json.dump({'suite_id': 's', 'cases': 'not a list', 'summary': {}}, open('harness_report.json','w'))";
    repo.repo.write(
        ".tnh/config.yaml",
        &format!("{config}validators:\n  make: {{argv: [python3, -c, \"{script}\"]}}\n"),
    );
    let workflow = repo.workflow_text(
        "caps.yaml",
        "workflow_id: caps\nversion: 1\ndescription: d\nentry_step: check\nsteps:\n  - id: check\n    opcode: RUN_VALIDATION\n    run:\n      - id: make\n        kind: builtin\n        artifacts: [\"big.bin\", \"../outside.txt\", \"passwd_link\", \"harness_report.json\"]\n    routes:\n      \"*\": STOP\n",
    );
    let (_, result, output) = repo.run(&workflow, &[]);
    let run_id = result["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", stderr_text(&output)));
    let record =
        repo.json(run_id, "artifacts/check/1/validation_report.json")["validators"]["make"].clone();
    assert_eq!(record["outcome"], "error", "{record}");
    let paths = |key: &str| -> Vec<String> {
        record[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| item["path"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(paths("skipped_artifacts"), ["big.bin"]);
    assert_eq!(
        paths("refused_artifacts"),
        ["../outside.txt", "passwd_link"]
    );
    assert!(
        record["cause"]
            .as_str()
            .unwrap()
            .contains("does not match `tnh-conductor schema harness-report`"),
        "{record}"
    );
}

/// A validator that is neither configured nor detectable (no Cargo.toml, package.json or
/// Python project) is a misconfiguration, not a failing check: `run` refuses it before it
/// starts, and a step that meets one (the configuration changed since the run started) runs no
/// validator, the report says `not_configured`, and the run stops (exit 4) naming the validator
/// and how to configure it — the fix loop that follows the step is never entered.
#[test]
fn a_validator_neither_configured_nor_detectable_stops_the_run_instead_of_failing_a_check() {
    let repo = RunRepo::new();
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    let without_lint = format!("{config}validators:\n  ok: {{argv: [sh, -c, \"exit 0\"]}}\n");
    repo.repo.write(".tnh/config.yaml", &without_lint);
    let workflow = repo.workflow_text(
        "unconfigured.yaml",
        "workflow_id: unconfigured\nversion: 1\ndescription: d\nentry_step: check\nsteps:\n  - id: check\n    opcode: RUN_VALIDATION\n    run: [ok, lint]\n    routes:\n      completed: STOP\n      \"*\": fix\n  - id: fix\n    opcode: RUN_AGENT\n    agent: scripted\n    prompt: \"SAY fixed\"\n    routes:\n      \"*\": check\n",
    );

    let refused = repo.conductor_exits(&["run", workflow.to_str().unwrap()], 2);
    assert!(
        stderr_text(&refused).contains("validator `lint` is not configured and cannot be detected"),
        "{}",
        stderr_text(&refused)
    );
    assert!(
        !repo.path().join(".tnh/run").exists(),
        "nothing was started"
    );
    repo.repo.write(
        ".tnh/config.yaml",
        &format!("{without_lint}  lint: {{argv: [sh, -c, \"exit 0\"]}}\n"),
    );
    let (code, result, output) = repo.start_then_resume_with_config(&workflow, &without_lint);

    assert_eq!(code, Some(4), "{result}{}", stderr_text(&output));
    let detail = result["detail"].as_str().unwrap();
    assert!(
        detail.contains("validator `lint` is not configured and cannot be detected")
            && detail.contains("set validators.lint in .tnh/config.yaml"),
        "{detail}"
    );
    let run_id = result["run_id"].as_str().unwrap();
    let report = repo.json(run_id, "artifacts/check/1/validation_report.json");
    assert_eq!(report["status"], "not_configured", "{report}");
    assert_eq!(report["validators"]["lint"]["status"], "not_configured");
    assert_eq!(report["validators"]["ok"]["status"], "not_run");
    assert!(
        !repo.run_dir(run_id).join("artifacts/fix").exists(),
        "no fix agent is spent on a misconfiguration"
    );
    let events = repo.events(run_id);
    let failed = crate::kernel_support::first_event(&events, "step_failed");
    assert!(
        failed["hint"]
            .as_str()
            .unwrap()
            .contains("a misconfiguration, not a failing check"),
        "{failed}"
    );
    assert!(
        !events
            .iter()
            .any(|event| event["event_type"] == "runner_started"),
        "no validator ran"
    );
    let shown = repo.conductor(&["runs", "show", run_id]);
    let shown = crate::support::stdout_text(&shown);
    assert!(
        shown.contains("set validators.lint in .tnh/config.yaml"),
        "{shown}"
    );
    assert!(!shown.contains("no exit code"), "{shown}");

    // The run is kept resumable: once the validator is configured, resume runs the step again.
    assert_eq!(
        repo.json(run_id, "status.json")["lifecycle_state"],
        "blocked"
    );
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "{config}validators:\n  ok: {{argv: [sh, -c, \"exit 0\"]}}\n  lint: {{argv: [sh, -c, \"exit 0\"]}}\n"
        ),
    );
    repo.conductor_exits(&["resume", run_id], 0);
    let events = repo.events(run_id);
    let interrupted = crate::kernel_support::first_event(&events, "step_interrupted");
    assert!(
        interrupted["cause"]
            .as_str()
            .unwrap()
            .starts_with("the step could not run: validator `lint` is not configured"),
        "{interrupted}"
    );
    assert_eq!(
        repo.json(run_id, "artifacts/check/2/validation_report.json")["validators"]["lint"]["exit_code"],
        0
    );
}

/// `runs show` says why a validator has no exit code (a timeout, a refused entrypoint) instead
/// of "no exit code".
#[test]
fn runs_show_says_why_a_validator_has_no_exit_code() {
    let repo = RunRepo::new();
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!("{config}validators:\n  slow: {{argv: [sh, -c, \"exec sleep 30\"]}}\n"),
    );
    let workflow = repo.workflow_text(
        "why.yaml",
        "workflow_id: why\nversion: 1\ndescription: d\nentry_step: check\nsteps:\n  - id: check\n    opcode: RUN_VALIDATION\n    run:\n      - slow\n      - id: escape\n        kind: script\n        entrypoint: /bin/true\n    limits: {timeout: 300ms}\n    routes:\n      \"*\": gate\n  - id: gate\n    opcode: GATE\n    gate: queue_for_review\n    routes:\n      gate_queued: STOP\n",
    );
    let (_, result, output) = repo.run(&workflow, &[]);
    let run_id = result["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", stderr_text(&output)));

    let shown = repo.conductor(&["runs", "show", run_id]);

    let shown = crate::support::stdout_text(&shown);
    assert!(shown.contains("slow: timeout: "), "{shown}");
    assert!(
        shown.contains("escape: refused: entrypoint `/bin/true` is outside the run directory"),
        "{shown}"
    );
    assert!(!shown.contains("no exit code"), "{shown}");
}

/// A `report` in the step's own folder (`${step_dir}/…`) is read there and listed relative
/// to the visit, without entering the worktree; an absolute `report` elsewhere (here the run
/// directory's root) is refused with a cause naming it.
#[test]
fn a_report_in_the_step_folder_is_read_there_and_one_elsewhere_is_refused() {
    let repo = RunRepo::new();
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    let script = "import json, os, sys; json.dump({'suite_id': 's', 'cases': [], 'summary': {'passed': 0, 'failed': 0}}, open(sys.argv[1], 'w'))";
    repo.repo.write(
        ".tnh/config.yaml",
        &format!("{config}validators:\n  make: {{argv: [python3, -c, \"{script}\"]}}\n"),
    );
    let workflow = |name: &str, path: &str| {
        repo.workflow_text(
            name,
            &format!("workflow_id: w\nversion: 1\ndescription: d\nentry_step: check\nsteps:\n  - id: check\n    opcode: RUN_VALIDATION\n    run:\n      - id: make\n        kind: builtin\n        args: [\"{path}\"]\n        report: \"{path}\"\n    routes:\n      \"*\": STOP\n"),
        )
    };
    let inside = workflow("inside.yaml", "${step_dir}/report.json");
    let (code, result, output) = repo.run(&inside, &[]);
    assert_eq!(code, Some(0), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let record =
        repo.json(run_id, "artifacts/check/1/validation_report.json")["validators"]["make"].clone();
    assert_eq!(record["outcome"], "completed", "{record}");
    assert_eq!(record["harness_report"], "report.json", "{record}");
    let manifest = repo.json(run_id, "artifacts/check/1/manifest.json");
    assert!(
        manifest["artifacts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|entry| {
                entry["role"] == "harness_report"
                    && entry["path"] == "artifacts/check/1/report.json"
            }),
        "{manifest}"
    );

    let elsewhere = workflow("elsewhere.yaml", "${run_dir}/report.json");
    let (code, result, output) = repo.run(&elsewhere, &[]);
    assert_eq!(code, Some(1), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let record =
        repo.json(run_id, "artifacts/check/1/validation_report.json")["validators"]["make"].clone();
    assert_eq!(record["outcome"], "error", "{record}");
    assert!(
        record["cause"]
            .as_str()
            .unwrap()
            .contains("is outside the step's folder"),
        "{record}"
    );
}

/// Detecting a validator reads the worktree's `package.json`, which the agent writes: a FIFO
/// there blocked that read for good and the run hung in RUN_VALIDATION. Now it is read only as
/// a regular file, without blocking: the FIFO is no `package.json`, and the unconfigured
/// validator ends the run with its usual error.
#[test]
fn a_fifo_an_agent_leaves_as_package_json_does_not_hang_validator_detection() {
    let repo = RunRepo::new();
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "{config}  fifo:\n    kind: command\n    argv: [sh, -c, \"cat > /dev/null; mkfifo package.json\"]\n"
        ),
    );
    let workflow = repo.workflow_text(
        "fifo.yaml",
        "workflow_id: fifo\nversion: 1\ndescription: d\nentry_step: work\nsteps:\n  - id: work\n    opcode: RUN_AGENT\n    agent: fifo\n    prompt: Go.\n    routes:\n      \"*\": check\n  - id: check\n    opcode: RUN_VALIDATION\n    run: [lint]\n    routes:\n      \"*\": STOP\n",
    );
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_ne!(code, Some(0), "{result}");
    assert!(
        format!("{result}{}", stderr_text(&output)).contains("lint"),
        "{result}{}",
        stderr_text(&output)
    );
}

/// An inline `kind: builtin` validator runs the command registered for its id: it honours
/// `network: deny` like a script (its own empty network namespace, and the report says so,
/// never "allowed"), keeps the host's network when the entry does not say, and an
/// `entrypoint` on it, which it would never run, is refused by `validate` at the key.
#[test]
fn a_builtin_validator_honours_network_deny_and_refuses_an_entrypoint() {
    let isolation = std::process::Command::new("unshare")
        .args(["-rn", "true"])
        .status()
        .is_ok_and(|status| status.success());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let repo = RunRepo::new();
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!("{config}validators:\n  probe: {{argv: [python3, checks/net.py, \"{port}\"]}}\n"),
    );
    repo.repo.write("checks/net.py", "import socket, sys\ntry:\n    socket.create_connection((\"127.0.0.1\", int(sys.argv[1])), timeout=5)\n    print(\"connected\")\nexcept OSError as error:\n    print(\"refused\")\n");
    repo.repo
        .write("checks/fail.sh", "echo my check ran; exit 1\n");
    repo.repo.commit_all("a network probe");
    let workflow = |entry: &str| {
        format!(
            "workflow_id: net\nversion: 1\ndescription: d\nentry_step: probe\nsteps:\n  - id: probe\n    opcode: RUN_VALIDATION\n    run:\n      - {{{entry}}}\n    routes:\n      \"*\": STOP\n"
        )
    };
    let path = repo.workflow_text(
        "entry.yaml",
        &workflow("id: probe, kind: builtin, entrypoint: checks/fail.sh"),
    );
    let validate = crate::support::conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["--color", "never", "validate"])
        .arg(&path)
        .output()
        .unwrap();
    let report = crate::support::stdout_text(&validate);
    assert_eq!(validate.status.code(), Some(1), "{report}");
    assert!(
        report.contains(
            "entry.yaml:9:36: error: `entrypoint` does not apply to a `kind: builtin` validator"
        ) && report.contains("[unknown-key]")
            && report.contains("hint: to run a script of your own, write `kind: script`"),
        "{report}"
    );

    for (network, expected, recorded) in [
        (
            ", network: deny",
            "refused",
            "denied (own network namespace)",
        ),
        ("", "connected", "allowed"),
    ] {
        let text = workflow(&format!("id: probe, kind: builtin{network}"));
        let (code, result, output) = repo.run(&repo.workflow_text("net.yaml", &text), &[]);
        assert_eq!(code, Some(0), "{result}{}", stderr_text(&output));
        let run_id = result["run_id"].as_str().unwrap();
        let record =
            repo.json(run_id, "artifacts/probe/1/validation_report.json")["validators"]["probe"]
                .clone();
        if !isolation && !network.is_empty() {
            assert_eq!(
                record["network"], "not isolated: unshare is not available here",
                "{record}"
            );
            continue;
        }
        assert_eq!(record["network"], recorded, "{record}");
        let stdout = std::fs::read_to_string(
            repo.run_dir(run_id)
                .join("artifacts/probe/1/validators/probe/stdout.txt"),
        )
        .unwrap();
        assert_eq!(stdout.trim(), expected, "network{network}");
    }
}
