//! What an EVALUATE sees and what the guard concludes from it, through real runs: a killed
//! step is not laundered into a success by a gate or a rollback between two evaluations; a
//! change of ten files is a change; a missing declared artifact blocks and is named; a huge
//! harness report reaches the planner bounded, its failing cases first.

use crate::kernel_support::RunRepo;
use crate::support::stderr_text;

/// A `command` planner `judge` that answers `success` whatever it is sent, and writes how many
/// bytes it was sent to `.tnh/judge.bytes`; an agent `hangs` that never ends by itself.
fn with_lying_judge_and_a_hanging_agent(repo: &RunRepo) {
    let tnh = repo.path().join(".tnh");
    let script = tnh.join("judge.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nwc -c > \"{}\"\ncat <<'JSON'\n{{\"status\": \"success\", \"next_step\": null, \"blockers\": [], \"risk_flags\": []}}\nJSON\n",
            tnh.join("judge.bytes").display()
        ),
    )
    .unwrap();
    let config = tnh.join("config.yaml");
    let text = std::fs::read_to_string(&config).unwrap().replacen(
        "agents:\n",
        "agents:\n  hangs:\n    kind: command\n    argv: [sleep, \"600\"]\n",
        1,
    );
    std::fs::write(
        &config,
        format!(
            "{text}validators:\n  tests:\n    argv: [\"true\"]\nscript_allowlist: [\"checks/\"]\nplanners:\n  judge:\n    kind: command\n    argv: [sh, \"{}\"]\n",
            script.display()
        ),
    )
    .unwrap();
}

fn flags(decision: &serde_json::Value) -> Vec<&str> {
    decision["risk_flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|flag| flag.as_str().unwrap())
        .collect()
}

/// A killed step judged `blocked`, then `between` (a GATE or a ROLLBACK), then a second
/// evaluation whose success would end the run in success.
fn between_two_evaluations(between: &str) -> String {
    format!(
        r#"workflow_id: launder_between
version: 1
description: a killed step, judged blocked, then a step that shows nothing about the work, then judged again
entry_step: work
steps:
  - id: work
    opcode: RUN_AGENT
    agent: hangs
    prompt: do the work
    limits: {{ timeout: 1s }}
    routes: {{ "*": judge }}
  - id: judge
    opcode: EVALUATE
    prompt: planner.evaluate_step.v1
    allowed_next_steps: [between, failed]
    routes: {{ success: STOP, partial: failed, blocked: between, unsafe: failed, needs_human: failed }}
  - id: between
{between}
  - id: judge_again
    opcode: EVALUATE
    prompt: planner.evaluate_step.v1
    allowed_next_steps: [failed]
    routes: {{ success: STOP, partial: failed, blocked: failed, unsafe: failed, needs_human: failed }}
  - id: failed
    opcode: STOP
    outcome: failure
"#
    )
}

const QUEUED_GATE: &str =
    "    opcode: GATE\n    gate: queue_for_review\n    routes: { gate_queued: judge_again }";
const PRE_STEP_ROLLBACK: &str =
    "    opcode: ROLLBACK\n    target: pre_step\n    routes: { \"*\": judge_again }";

/// With a non-blocking gate (nobody decides anything) or a rollback
/// between two evaluations, the second one's `steps` held that step only, so the guard's
/// `no_new_evidence` did not fire and a timed-out agent ended the run in success (exit 0),
/// with the `rules` planner too. Evidence is new only when an agent or validation step ran.
#[test]
fn a_gate_or_a_rollback_between_two_evaluations_cannot_launder_a_timeout_into_success() {
    for (name, between) in [("gate", QUEUED_GATE), ("rollback", PRE_STEP_ROLLBACK)] {
        for planner in ["judge", "rules"] {
            let repo = RunRepo::new();
            with_lying_judge_and_a_hanging_agent(&repo);
            let workflow = repo.workflow_text("launder.yaml", &between_two_evaluations(between));

            let (code, result, output) = repo.run(&workflow, &["--planner", planner]);

            let case = format!("{name}, {planner}");
            assert_eq!(code, Some(1), "{case}: {result}\n{}", stderr_text(&output));
            let run_id = result["run_id"].as_str().unwrap();
            assert_eq!(
                repo.json(run_id, "artifacts/work/1/manifest.json")["termination"],
                "killed_timeout"
            );
            assert_eq!(
                repo.json(run_id, "artifacts/judge/1/planner_decision.json")["status"],
                "blocked",
                "{case}"
            );
            let decision = repo.json(run_id, "artifacts/judge_again/1/planner_decision.json");
            assert_eq!(decision["status"], "blocked", "{case}: {decision}");
            assert!(
                flags(&decision).contains(&"no_new_evidence"),
                "{case}: {decision}"
            );
            assert_eq!(decision["next_step"], "failed", "{case}: {decision}");
            let why = decision["blockers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|blocker| blocker["code"] == "no_new_evidence")
                .unwrap()["summary"]
                .as_str()
                .unwrap()
                .to_owned();
            assert!(
                why.contains("`judge` #1 decided `blocked`"),
                "{case}: {why}"
            );
            if name == "rollback" {
                assert!(
                    why.contains("`between` rolled the work back"),
                    "{case}: {why}"
                );
            }
        }
    }
}

/// After a rollback of a change that broke the policy (`unsafe`, the violation removed by the
/// rollback), an evaluation with nothing run since is no success either: `blocked`.
#[test]
fn a_rolled_back_violation_judged_again_without_a_new_run_is_not_a_success() {
    for planner in ["judge", "rules"] {
        let repo = RunRepo::new();
        with_lying_judge_and_a_hanging_agent(&repo);
        let workflow = repo.workflow_text(
            "violation.yaml",
            r#"workflow_id: violation_rolled_back
version: 1
description: a change outside the allowed paths, rolled back, judged again
entry_step: work
defaults:
  policy:
    forbidden_paths: [".github/**"]
steps:
  - id: work
    opcode: RUN_AGENT
    agent: scripted
    prompt: |
      WRITE .github/workflows/ci.yml: on: push
      SAY done
    routes: { "*": judge }
  - id: judge
    opcode: EVALUATE
    prompt: planner.evaluate_step.v1
    allowed_next_steps: [undo, failed]
    routes: { success: STOP, partial: failed, blocked: failed, unsafe: undo, needs_human: failed }
  - id: undo
    opcode: ROLLBACK
    target: pre_step
    routes: { "*": judge_again }
  - id: judge_again
    opcode: EVALUATE
    prompt: planner.evaluate_step.v1
    allowed_next_steps: [failed]
    routes: { success: STOP, partial: failed, blocked: failed, unsafe: failed, needs_human: failed }
  - id: failed
    opcode: STOP
    outcome: failure
"#,
        );

        let (run, _) = repo.run_exits(&workflow, &["--planner", planner], 1);
        let run_id = run.as_str();
        assert_eq!(
            repo.json(run_id, "artifacts/judge/1/planner_decision.json")["status"],
            "unsafe"
        );
        let envelope = repo.json(run_id, "artifacts/judge_again/1/planner_input.json");
        assert_eq!(
            envelope["evidence"]["policy_events"],
            serde_json::json!([]),
            "the rollback removed the violation"
        );
        let decision = repo.json(run_id, "artifacts/judge_again/1/planner_decision.json");
        assert_eq!(decision["status"], "blocked", "{planner}: {decision}");
        assert!(
            flags(&decision).contains(&"no_new_evidence"),
            "{planner}: {decision}"
        );
    }
}

/// "10 files changed" contains "0 files changed", so the guard read a
/// change of ten files as an empty diff and raised a correct run to `partial`
/// (`transcript_workspace_mismatch`). The guard reads the structured diffstat.
#[test]
fn a_change_of_ten_files_is_a_change_not_an_empty_diff() {
    for planner in ["judge", "rules"] {
        let repo = RunRepo::new();
        with_lying_judge_and_a_hanging_agent(&repo);
        let writes: String = (0..10)
            .map(|index| format!("      WRITE file{index}.txt: line {index}\n"))
            .collect();
        let workflow = repo.workflow_text(
            "ten.yaml",
            &format!(
                r#"workflow_id: ten_files
version: 1
description: an agent changes ten files and says it is done
entry_step: work
steps:
  - id: work
    opcode: RUN_AGENT
    agent: scripted
    prompt: |
{writes}      SAY done
    routes: {{ "*": judge }}
  - id: judge
    opcode: EVALUATE
    prompt: planner.evaluate_step.v1
    allowed_next_steps: [failed]
    routes: {{ success: STOP, partial: failed, blocked: failed, unsafe: failed, needs_human: failed }}
  - id: failed
    opcode: STOP
    outcome: failure
"#
            ),
        );

        let (run, _) = repo.run_exits(&workflow, &["--planner", planner], 0);
        let run_id = run.as_str();
        let envelope = repo.json(run_id, "artifacts/judge/1/planner_input.json");
        let evidence = &envelope["evidence"];
        assert_eq!(
            evidence["workspace_diff_summary"],
            "10 files changed, +10 -0"
        );
        assert_eq!(evidence["workspace_diffstat"]["files_changed"], 10);
        let decision = repo.json(run_id, "artifacts/judge/1/planner_decision.json");
        assert_eq!(decision["status"], "success", "{planner}: {decision}");
        assert!(flags(&decision).is_empty(), "{planner}: {decision}");
    }
}

/// A validator that exits 0 without writing its declared artifact ends
/// its step `error`, but the envelope did not say which artifact was missing, so the guard's
/// `missing_artifact` rule never fired (`partial`, a fix loop, with every exit code 0 and no
/// reason). The envelope names the artifact and why the validator failed; the decision is
/// `blocked` with `missing_artifact`.
#[test]
fn a_missing_declared_artifact_blocks_and_the_planner_is_told_which() {
    for planner in ["judge", "rules"] {
        let repo = RunRepo::new();
        with_lying_judge_and_a_hanging_agent(&repo);
        let workflow = repo.workflow_text(
            "missing.yaml",
            r#"workflow_id: missing_artifact
version: 1
description: a validator passes without the report it declares
entry_step: work
steps:
  - id: work
    opcode: RUN_AGENT
    agent: scripted
    prompt: |
      WRITE feature.txt: the feature
      SAY done
    routes: { "*": check }
  - id: check
    opcode: RUN_VALIDATION
    run:
      - id: tests
        kind: builtin
        artifacts: ["report/out.xml"]
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

        let (run, _) = repo.run_exits(&workflow, &["--planner", planner], 1);
        let run_id = run.as_str();
        let validation =
            &repo.json(run_id, "artifacts/judge/1/planner_input.json")["evidence"]["validation"];
        assert_eq!(validation["mechanical_outcome"], "error", "{validation}");
        assert_eq!(validation["exit_codes"]["tests"], 0, "{validation}");
        assert_eq!(
            validation["missing_artifacts"],
            serde_json::json!(["report/out.xml"]),
            "{validation}"
        );
        assert!(
            validation["causes"]["tests"]
                .as_str()
                .unwrap()
                .contains("declared artifacts missing: report/out.xml"),
            "{validation}"
        );
        let decision = repo.json(run_id, "artifacts/judge/1/planner_decision.json");
        assert_eq!(decision["status"], "blocked", "{planner}: {decision}");
        assert!(
            flags(&decision).contains(&"missing_artifact"),
            "{planner}: {decision}"
        );
        let blocker = decision["blockers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|blocker| blocker["code"] == "missing_artifact")
            .unwrap();
        assert!(
            blocker["summary"]
                .as_str()
                .unwrap()
                .contains("report/out.xml"),
            "{blocker}"
        );
    }
}

/// A harness report went into the envelope whole (a 30 MB report made a
/// 31 MB planner input). It is bounded: the summary, the failing cases first (long fields
/// shortened), as many passing ones as fit, and a note naming the whole report's path. The
/// guard reads the same verdict from it (a case failed: not a success).
#[test]
fn a_huge_harness_report_reaches_the_planner_bounded_with_its_failing_case_first() {
    for planner in ["judge", "rules"] {
        let repo = RunRepo::new();
        with_lying_judge_and_a_hanging_agent(&repo);
        repo.repo.write(
            "checks/harness.py",
            "import json, os\n\
             cases = [{\"id\": f\"case{n}\", \"status\": \"passed\", \"detail\": \"p\" * 1000} for n in range(3000)]\n\
             cases.insert(1500, {\"id\": \"slow_path\", \"status\": \"failed\", \"repro\": \"tool --slow\", \"detail\": \"f\" * 100000})\n\
             os.makedirs(\"out\", exist_ok=True)\n\
             json.dump({\"suite_id\": \"big\", \"version\": \"1\", \"summary\": {\"passed\": 3000, \"failed\": 1}, \"cases\": cases}, open(\"out/harness_report.json\", \"w\"))\n",
        );
        repo.repo.commit_all("a harness with a large report");
        let workflow = repo.workflow_text(
            "harness.yaml",
            r#"workflow_id: big_report
version: 1
description: a harness writes a report of a few megabytes
entry_step: check
steps:
  - id: check
    opcode: RUN_VALIDATION
    run:
      - id: harness
        kind: script
        entrypoint: checks/harness.py
        artifacts: ["out/harness_report.json"]
    routes: { "*": judge }
  - id: judge
    opcode: EVALUATE
    prompt: planner.evaluate_harness_report.v1
    allowed_next_steps: [review, failed]
    routes: { success: review, partial: failed, blocked: failed, unsafe: failed, needs_human: review }
  - id: review
    opcode: GATE
    gate: requires_approval
    routes: { gate_approved: STOP, gate_rejected: failed, gate_timed_out: failed }
  - id: failed
    opcode: STOP
    outcome: failure
"#,
        );

        let (run, _) = repo.run_exits(&workflow, &["--planner", planner], 1);
        let run_id = run.as_str();
        let input = repo
            .run_dir(run_id)
            .join("artifacts/judge/1/planner_input.json");
        let size = std::fs::metadata(&input).unwrap().len();
        assert!(
            size < 64 * 1024,
            "{planner}: planner_input.json is {size} bytes"
        );
        if planner == "judge" {
            let sent: u64 = std::fs::read_to_string(repo.path().join(".tnh/judge.bytes"))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            assert!(sent < 64 * 1024, "the planner was sent {sent} bytes");
        }
        let envelope = repo.json(run_id, "artifacts/judge/1/planner_input.json");
        let report = &envelope["evidence"]["harness_report"];
        assert_eq!(report["suite_id"], "big");
        assert_eq!(
            report["summary"],
            serde_json::json!({"passed": 3000, "failed": 1})
        );
        let cases = report["cases"].as_array().unwrap();
        assert_eq!(cases[0]["id"], "slow_path", "the failing case first");
        assert_eq!(cases[0]["status"], "failed");
        assert_eq!(cases[0]["repro"], "tool --slow");
        assert!(
            cases[0]["detail"]
                .as_str()
                .unwrap()
                .ends_with("[cut: 100000 bytes in all]"),
            "{}",
            &cases[0]["detail"].as_str().unwrap()[..100]
        );
        assert!(cases.len() > 1 && cases.len() < 3001, "{}", cases.len());
        let truncated = &report["truncated"];
        assert_eq!(truncated["cases_total"], 3001);
        assert_eq!(truncated["cases_not_passed"], 1);
        assert_eq!(truncated["cases_kept"], cases.len());
        let path = truncated["report"].as_str().unwrap();
        assert!(
            truncated["note"]
                .as_str()
                .unwrap()
                .ends_with(&format!("the whole report is {path}")),
            "{truncated}"
        );
        let whole = std::fs::metadata(repo.run_dir(run_id).join(path))
            .unwrap()
            .len();
        assert_eq!(
            truncated["bytes"], whole,
            "the whole report stays in the run"
        );
        assert!(whole > 3_000_000, "{whole}");
        let decision = repo.json(run_id, "artifacts/judge/1/planner_decision.json");
        assert_eq!(decision["status"], "partial", "{planner}: {decision}");
    }
}
