//! Every JSON artifact of a real run directory names a `schema_version` and matches the schema
//! `tnh-conductor schema NAME` prints for it; so does `validate --format json`. A new artifact
//! without a published schema, or a writer that drifts from its schema, fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::kernel_support::{RunRepo, first_event};
use crate::support::{TempRepo, conductor, fixture, stderr_text, stdout_text, tnh};

/// An agent step (with a run-log entry), a validation step (a harness that reports, a refused
/// entrypoint), a command planner, a queued and a blocking gate, then a ROLLBACK.
const EVIDENCE: &str = r#"workflow_id: evidence
version: 1
description: every kind of step, for the artifact schema check
entry_step: implement
steps:
  - id: implement
    opcode: RUN_AGENT
    agent: worker
    prompt: implement the feature
    routes:
      "*": check
  - id: check
    opcode: RUN_VALIDATION
    run:
      - id: harness
        kind: script
        entrypoint: scripts/harness.sh
        artifacts: ["out/harness_report.json"]
      - id: outside
        kind: script
        entrypoint: /bin/true
    routes:
      "*": evaluate
  - id: evaluate
    opcode: EVALUATE
    prompt: planner.evaluate_results.v1
    planner: judge
    allowed_next_steps: [queue, failed]
    routes:
      needs_human: queue
      success: failed
      partial: failed
      blocked: failed
      unsafe: failed
  - id: queue
    opcode: GATE
    gate: queue_for_review
    routes:
      gate_queued: review
  - id: review
    opcode: GATE
    gate: requires_approval
    approvers: [lead]
    timeout: 24h
    routes:
      gate_approved: undo
      gate_rejected: failed
      gate_timed_out: failed
  - id: undo
    opcode: ROLLBACK
    target: pre_step
    routes:
      completed: STOP
      error: failed
  - id: failed
    opcode: STOP
    outcome: failure
"#;

/// A validation step whose `lint` is neither configured nor detectable (so `harness` is not run).
const UNCONFIGURED: &str = r"workflow_id: unconfigured
version: 1
description: a validator that is not configured
entry_step: check
steps:
  - id: check
    opcode: RUN_VALIDATION
    run: [harness_check, lint]
    routes:
      '*': STOP
";

const HARNESS: &str = r#"#!/bin/sh
mkdir -p out
printf '%s' '{"suite_id": "smoke", "cases": [], "summary": {"passed": 0, "failed": 0}}' > out/harness_report.json
"#;

const JUDGE: &str = r#"#!/bin/sh
cat > /dev/null
echo '{"status": "needs_human", "next_step": "queue", "blockers": [{"code": "review", "summary": "a human looks"}], "risk_flags": ["manual_review"]}'
"#;

fn evidence_repo() -> RunRepo {
    let repo = RunRepo::new();
    repo.repo.write("scripts/harness.sh", HARNESS);
    repo.repo.commit_all("harness");
    let agent = repo.repo.write(
        ".tnh/agent.sh",
        &format!(
            "#!/bin/sh\ncat > /dev/null\necho feature > feature.txt\n\"{}\" runlog append --kind decision --message 'kept it small' --ref feature.txt\necho done\n",
            env!("CARGO_BIN_EXE_tnh")
        ),
    );
    let judge = repo.repo.write(".tnh/judge.sh", JUDGE);
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "agents:\n  worker: {{kind: command, argv: [sh, \"{}\"]}}\nplanners:\n  judge: {{kind: command, argv: [sh, \"{}\"]}}\nscript_allowlist: [\"scripts/\"]\nvalidators:\n  harness_check: {{argv: [sh, scripts/harness.sh]}}\n",
            agent.display(),
            judge.display()
        ),
    );
    repo
}

/// The published schema of each name, compiled.
fn validators(names: &BTreeSet<&str>) -> BTreeMap<String, jsonschema::Validator> {
    names
        .iter()
        .map(|name| {
            let output = conductor().args(["schema", name]).output().unwrap();
            assert_eq!(
                output.status.code(),
                Some(0),
                "schema {name}: {}",
                stderr_text(&output)
            );
            let schema: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
            let validator = jsonschema::validator_for(&schema)
                .unwrap_or_else(|error| panic!("schema {name} does not compile: {error}"));
            ((*name).to_owned(), validator)
        })
        .collect()
}

/// The schema a run-directory file follows, by where it is and what it is called; `None` for
/// files that are not JSON records.
fn schema_name(relative: &Path) -> Option<&'static str> {
    let name = relative.file_name()?.to_str()?;
    let parts: Vec<&str> = relative.iter().filter_map(|part| part.to_str()).collect();
    if parts.first() == Some(&"rollbacks") {
        return Some("rollback-record");
    }
    Some(match name {
        "metadata.json" => "run-metadata",
        "status.json" => "run-status",
        "state.json" => "state",
        "events.ndjson" => "event",
        "manifest.json" => "manifest",
        "runner_metadata.json" => "runner-metadata",
        "runlog.ndjson" => "runlog-entry",
        "workspace_status.json" => "workspace-status",
        "policy_summary.json" => "policy-summary",
        "guard_state.json" => "guard-state",
        "validation_report.json" => "validation-report",
        "harness_report.json" => "harness-report",
        "planner_input.json" => "planner-input",
        "planner_decision.json" => "planner-decision",
        "planner_attempts.json" => "planner-attempts",
        "gate_request.json" => "gate-request",
        "gate_outcome.json" => "gate-outcome",
        "rollback.json" => "rollback-record",
        "inputs.json" => "prompt-inputs",
        "process_group.json" => "process-group",
        "stopped_orphans.json" => "stopped-orphans",
        _ if name.ends_with(".json") || name.ends_with(".ndjson") => "UNKNOWN",
        _ => return None,
    })
}

fn files_under(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(directory) = pending.pop() {
        for entry in std::fs::read_dir(&directory).unwrap().flatten() {
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                pending.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// Checks every JSON record under `run_dir`; returns how many of each schema were checked.
fn check_run_dir(run_dir: &Path) -> BTreeMap<&'static str, usize> {
    let files = files_under(run_dir);
    let mut records = Vec::new();
    for path in &files {
        let relative = path.strip_prefix(run_dir).unwrap();
        // What a validator collected is the validator's own file, not a conductor format;
        // only its harness report has a published schema (and no `schema_version` of ours).
        let collected = relative.iter().any(|part| part == "validators")
            && relative.iter().any(|part| part == "artifacts");
        let Some(name) = schema_name(relative) else {
            continue;
        };
        if collected && name != "harness-report" {
            continue;
        }
        assert_ne!(
            name,
            "UNKNOWN",
            "{} has no published schema",
            relative.display()
        );
        let text = std::fs::read_to_string(path).unwrap();
        let documents: Vec<serde_json::Value> = if name == "event" || name == "runlog-entry" {
            text.lines()
                .map(|line| serde_json::from_str(line).unwrap())
                .collect()
        } else {
            vec![serde_json::from_str(&text).unwrap()]
        };
        for document in documents {
            if name != "harness-report" {
                assert_eq!(
                    document["schema_version"],
                    1,
                    "{} has no schema_version: {document}",
                    relative.display()
                );
            }
            records.push((relative.display().to_string(), name, document));
        }
    }
    let names = records.iter().map(|(_, name, _)| *name).collect();
    let validators = validators(&names);
    let mut counts = BTreeMap::new();
    for (file, name, document) in &records {
        let errors: Vec<String> = validators[*name]
            .iter_errors(document)
            .map(|error| format!("{error} at {}", error.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{file} does not match `schema {name}`: {errors:#?}\n{document:#}"
        );
        *counts.entry(*name).or_insert(0) += 1;
    }
    counts
}

#[test]
fn every_artifact_of_a_run_matches_its_published_schema() {
    let repo = evidence_repo();
    let workflow = repo.workflow_text("evidence.yaml", EVIDENCE);
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(3), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap().to_owned();
    repo.conductor_exits(&["gate", "approve", &run_id, "--as", "lead", "--resume"], 0);
    repo.conductor_exits(&["rollback", &run_id, "--target", "pre_run"], 0);

    // `run` refuses an unconfigured validator before it starts; a step meets one when the
    // configuration changes after the run started.
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!("{config}  lint: {{argv: [sh, -c, \"exit 0\"]}}\n"),
    );
    let (code, result, output) = repo.start_then_resume_with_config(
        &repo.workflow_text("unconfigured.yaml", UNCONFIGURED),
        &config,
    );
    assert_eq!(code, Some(4), "{result}\n{}", stderr_text(&output));
    let blocked_run = result["run_id"].as_str().unwrap().to_owned();

    let mut seen = check_run_dir(&repo.run_dir(&run_id));
    for (name, count) in check_run_dir(&repo.run_dir(&blocked_run)) {
        *seen.entry(name).or_insert(0) += count;
    }
    // The run exercised every format this test is meant to keep honest.
    for name in [
        "run-metadata",
        "run-status",
        "state",
        "event",
        "manifest",
        "runner-metadata",
        "runlog-entry",
        "workspace-status",
        "policy-summary",
        "validation-report",
        "harness-report",
        "planner-input",
        "planner-decision",
        "planner-attempts",
        "gate-request",
        "gate-outcome",
        "rollback-record",
    ] {
        assert!(
            seen.contains_key(name),
            "no {name} record was checked: {seen:?}"
        );
    }
    let request = repo.json(&run_id, "artifacts/review/1/gate_request.json");
    assert_eq!(
        request["context"]["last_step"]["step_id"], "check",
        "{request:#}"
    );
    assert_eq!(
        request["context"]["planner"]["status"], "needs_human",
        "{request:#}"
    );
    let report = repo.json(&blocked_run, "artifacts/check/1/validation_report.json");
    assert_eq!(report["status"], "not_configured", "{report:#}");
}

#[test]
fn validate_json_output_matches_its_published_schema() {
    let repo = evidence_repo();
    let valid = repo.workflow_text("evidence.yaml", EVIDENCE);
    let broken = repo.workflow_text(
        "broken.yaml",
        &EVIDENCE.replace("opcode: ROLLBACK", "opcode: ROLLBACK\n    colour: red"),
    );
    let output = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["validate", "--format", "json"])
        .arg(&valid)
        .arg(&broken)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", stderr_text(&output));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("{}", stdout_text(&output)));
    assert_eq!(report["schema_version"], 1);
    assert!(
        report["files"][1]["diagnostics"][0]["hint"].is_string(),
        "a diagnostic with a hint is checked: {report:#}"
    );
    let validators = validators(&BTreeSet::from(["validate-output"]));
    let errors: Vec<String> = validators["validate-output"]
        .iter_errors(&report)
        .map(|error| format!("{error} at {}", error.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}\n{report:#}");
}

/// The JSON the CLI prints for scripts — `run --json`, `resume --json`, `runs list --json`,
/// `journal --format json` — is versioned and matches its published schema.
#[test]
fn cli_json_outputs_match_their_published_schemas() {
    let repo = evidence_repo();
    let workflow = repo.workflow_text("evidence.yaml", EVIDENCE);
    let (code, started, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(3), "{started}\n{}", stderr_text(&output));
    let run_id = started["run_id"].as_str().unwrap().to_owned();
    let printed = |args: &[&str]| -> serde_json::Value {
        let output = repo.conductor(args);
        serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|_| panic!("{args:?}: {}", stderr_text(&output)))
    };
    let resumed = printed(&["resume", "--json", &run_id]);
    assert_eq!(resumed["state"], "waiting", "{resumed}");
    let documents = [
        ("run-result", started),
        ("run-result", resumed),
        ("runs-list", printed(&["runs", "list", "--json"])),
        ("journal", printed(&["journal", "--format", "json"])),
    ];
    let validators = validators(&documents.iter().map(|(name, _)| *name).collect());
    for (name, document) in &documents {
        assert_eq!(document["schema_version"], 1, "{name}: {document:#}");
        let errors: Vec<String> = validators[*name]
            .iter_errors(document)
            .map(|error| format!("{error} at {}", error.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{name}: {errors:#?}\n{document:#}");
    }
    assert_eq!(documents[2].1["runs"][0]["run_id"], run_id.as_str());
    assert!(
        documents[3].1["pending_review"]
            .to_string()
            .contains(&run_id),
        "{:#}",
        documents[3].1
    );
}

/// The JSON `tnh context --json` and `tnh test|lint|typecheck --json`
/// print for agents and scripts had no `schema_version` and no published schema. Both are
/// versioned now and match `tnh-conductor schema tnh-context` / `tnh-check` — a pass, a
/// failure, and a timeout that killed what the tool left behind, inside a run's step folder
/// and outside.
#[test]
fn tnh_json_outputs_match_their_published_schemas() {
    let repo = TempRepo::new();
    repo.write("docs/adr/adr-1-first.md", "# First\n**Status**: accepted\n");
    repo.write(
        ".tnh/config.yaml",
        "validators:\n  tests: {argv: [sh, -c, \"echo ok\"]}\n  lint: {argv: [sh, -c, \"echo 'error: x' >&2; exit 3\"]}\n  typecheck: {argv: [sh, -c, \"sleep 1005 & echo started; exec sleep 1006\"]}\n",
    );
    repo.write("src/new.rs", "fn main() {}\n");
    let step_dir = tempfile::tempdir().unwrap();
    std::fs::write(
        step_dir.path().join("inputs.json"),
        r#"{"schema_version": 1, "step_id": "s", "prompt": null, "inputs": {"goal": "x"}}"#,
    )
    .unwrap();
    let printed = |args: &[&str], in_run: bool| -> serde_json::Value {
        let mut command = tnh();
        command
            .current_dir(repo.path())
            .args(args)
            .env_remove("TNH_BASE_SHA")
            .env_remove("TNH_RUN_ID")
            .env_remove("TNH_STEP_ID")
            .env_remove("TNH_STEP_DIR");
        if in_run {
            command
                .env("TNH_RUN_ID", "20260101T000000Z-abcdef")
                .env("TNH_STEP_ID", "implement")
                .env("TNH_STEP_DIR", step_dir.path());
        }
        let output = command.output().unwrap();
        serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|_| panic!("{args:?}: {}", stderr_text(&output)))
    };
    let documents = [
        ("tnh-context", printed(&["context", "--json"], false)),
        ("tnh-context", printed(&["context", "--json"], true)),
        ("tnh-check", printed(&["test", "--json"], false)),
        ("tnh-check", printed(&["lint", "--json"], true)),
        (
            "tnh-check",
            printed(&["typecheck", "--json", "--timeout", "300ms"], false),
        ),
    ];
    let validators = validators(&documents.iter().map(|(name, _)| *name).collect());
    for (name, document) in &documents {
        assert_eq!(document["schema_version"], 1, "{name}: {document:#}");
        let errors: Vec<String> = validators[*name]
            .iter_errors(document)
            .map(|error| format!("{error} at {}", error.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{name}: {errors:#?}\n{document:#}");
    }
    // The documents are the ones meant: every optional part filled in at least once.
    assert_eq!(documents[1].1["inputs"]["goal"], "x");
    assert_eq!(documents[1].1["adrs"][0], "1 First (accepted)");
    assert_eq!(documents[3].1["exit_code"], 3);
    assert!(documents[3].1["log"].is_string(), "{:#}", documents[3].1);
    assert_eq!(documents[4].1["timed_out"], true);
    assert_eq!(documents[4].1["outcome"], "killed_timeout");
}

/// One agent step whose agent leaves an env-cleared loop in its process group and SIGKILLs the
/// conductor (`env-cleared-then-kill-conductor.sh`); its second visit just succeeds.
const CRASHING: &str = r#"workflow_id: crashing
version: 1
description: an agent that kills its conductor
entry_step: agent
defaults:
  limits: {timeout: 20s, idle_timeout: 10s}
steps:
  - id: agent
    opcode: RUN_AGENT
    agent: crasher
    prompt: go
    routes:
      "*": STOP
"#;

/// Kills a pid when a failed test unwinds: what it would otherwise leave running (a test that
/// passes saw `resume` end it, and its pid may be another process's by then).
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// `process_group.json` and `stopped_orphans.json`, the files a
/// crashed run leaves for `resume`, had no `schema_version` and no published schema. The run
/// directory of a killed run, and of a `resume` refused after it, matches the published
/// schemas; and the records an older release wrote (without `schema_version`; the pids as a
/// bare list) are still read by `resume`.
#[test]
fn the_records_a_killed_run_leaves_match_their_schemas_and_older_ones_are_still_read() {
    let repo = RunRepo::new();
    let agent = fixture("agents/zoo").join("env-cleared-then-kill-conductor.sh");
    let config = repo.path().join(".tnh/config.yaml");
    let text = format!(
        "{}  crasher:\n    kind: command\n    argv: [bash, \"{}\", leader-stays]\n",
        std::fs::read_to_string(&config).unwrap(),
        agent.display()
    );
    std::fs::write(&config, text).unwrap();
    let workflow = repo.workflow_text("crashing.yaml", CRASHING);
    let (code, _, output) = repo.run(&workflow, &[]);
    assert_eq!(code, None, "killed by its agent: {}", stderr_text(&output));
    let run_id = repo.only_run_id();
    let run_dir = repo.run_dir(&run_id);
    let visit = run_dir.join("artifacts/agent/1");
    let pid: i32 = std::fs::read_to_string(visit.join("loop.log.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _cleanup = KillOnDrop(pid);
    let group = visit.join("process_group.json");
    let mut record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&group).unwrap()).unwrap();
    // The agent itself, the group's leader, waits too.
    let _leader = KillOnDrop(record["pgid"].as_i64().unwrap() as i32);

    let seen = check_run_dir(&run_dir);
    assert!(seen.contains_key("process-group"), "{seen:?}");

    // An older release's group record: no `schema_version`. The loop cleared its environment,
    // so only this record finds it.
    record.as_object_mut().unwrap().remove("schema_version");
    std::fs::write(&group, record.to_string()).unwrap();
    // A refusal (the workflow file is gone) ends the orphans first and keeps their pids.
    let moved = repo.path().join("crashing.yaml.away");
    std::fs::rename(&workflow, &moved).unwrap();
    let refused = repo.conductor_exits(&["resume", &run_id], 2);
    assert!(
        !crate::runner_support::is_alive(pid),
        "the loop found through the older record survived: {}",
        stderr_text(&refused)
    );
    let seen = check_run_dir(&run_dir);
    assert!(seen.contains_key("stopped-orphans"), "{seen:?}");
    let stopped = visit.join("stopped_orphans.json");
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&stopped).unwrap()).unwrap();
    assert!(
        record["pids"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!(pid)),
        "{record}"
    );

    // An older release's list of pids: a bare array. The next `resume` still lists them.
    std::fs::write(&stopped, record["pids"].to_string()).unwrap();
    std::fs::rename(&moved, &workflow).unwrap();
    let resumed = repo.conductor_exits(&["resume", &run_id], 0);
    let events = repo.events(&run_id);
    let interrupted = first_event(&events, "step_interrupted");
    assert!(
        interrupted["killed_orphans"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!(pid)),
        "{interrupted}\n{}",
        stderr_text(&resumed)
    );
    assert!(!stopped.exists(), "the record is spent");
    check_run_dir(&run_dir);
}
