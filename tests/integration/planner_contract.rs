//! The decision contract where later steps depend on it: `fix_instructions` must have
//! the shape the shipped fix prompts render, in the published schema (the one model backends
//! are sent) and in the answers the kernel accepts; the `rules` planner's instructions render.

use std::path::Path;

use crate::kernel_support::RunRepo;
use crate::support::{conductor, fixture, stderr_text};

/// Answers the shipped fix prompts cannot render (`fix_instructions.objective`,
/// `edit.action`, `step.expected_signal` rendered strictly), with what the error must name.
const UNRENDERABLE: [(&str, &str); 6] = [
    (
        r#""Fix the failing test in src/adr.txt""#,
        "`fix_instructions`: invalid type: string",
    ),
    (
        r#"{"constraints": ["keep the API"]}"#,
        "missing field `objective`",
    ),
    (
        r#"{"summary": "the test fails"}"#,
        "unknown field `summary`",
    ),
    (
        r#"{"objective": "fix", "edits": "edit src/adr.txt"}"#,
        "invalid type: string \"edit src/adr.txt\", expected a sequence",
    ),
    (
        r#"{"objective": "fix", "edits": [{"target": "src/adr.txt"}]}"#,
        "missing field `action`",
    ),
    (
        r#"{"objective": "fix", "verification": [{"command": "tnh test"}]}"#,
        "missing field `expected_signal`",
    ),
];

/// A repository set up like the starter-workflow tests (the scripted agent as `claude-code`
/// and `codex`, the starter task prompts) but with the shipped `task.fix_from_logs.v2`, a
/// `tests` validator that fails, and a command planner `judge` that approves the plan and
/// answers `partial` with `fix` as `fix_instructions` for the results.
fn builder_repo(fix: &str) -> RunRepo {
    let repo = RunRepo::new();
    let agent = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/agents/scripted.py");
    let judge = repo.repo.write(
        ".tnh/judge.sh",
        &format!(
            "#!/bin/sh\nenvelope=$(cat)\necho call >> \"$0.calls\"\ncase \"$envelope\" in\n  *'\"step_id\":\"evaluate_results\"'*)\n    cat <<'JSON'\n{{\"status\": \"partial\", \"next_step\": \"fix\", \"blockers\": [], \"risk_flags\": [], \"fix_instructions\": {fix}}}\nJSON\n    ;;\n  *) echo '{{\"status\": \"success\", \"next_step\": null, \"blockers\": [], \"risk_flags\": []}}' ;;\nesac\n"
        ),
    );
    let profile = format!(
        "{{kind: command, argv: [python3, \"{}\"]}}",
        agent.display()
    );
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "agents:\n  claude-code: {profile}\n  codex: {profile}\nvalidators:\n  tests: {{argv: [sh, -c, \"exit 1\"]}}\n  lint: {{argv: [sh, -c, \"exit 0\"]}}\n  typecheck: {{argv: [sh, -c, \"exit 0\"]}}\nplanners:\n  judge: {{kind: command, argv: [sh, \"{}\"]}}\n",
            judge.display()
        ),
    );
    for name in ["plan_adr.v1.md", "implement_adr.v1.md"] {
        repo.repo.write(
            &format!(".tnh/prompts/task/{name}"),
            &std::fs::read_to_string(fixture(&format!("starter/prompts/task/{name}"))).unwrap(),
        );
    }
    repo
}

fn shipped_workflow(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("workflows")
        .join(name)
}

/// A planner whose `fix_instructions` the shipped fix prompt cannot render gives no decision:
/// the answer is a failed attempt naming the field, retried, then the kernel decides
/// `blocked` with `planner_error` — the shipped builder loop routes that to its failure stop
/// (exit 1, the reason recorded), instead of dying at the fix step with a runtime error
/// (exit 4, not resumable, blaming the step's inputs).
#[test]
fn fix_instructions_the_fix_prompts_cannot_render_are_a_planner_error_not_a_dead_fix_step() {
    for (fix, named) in UNRENDERABLE {
        let repo = builder_repo(fix);
        let (code, result, output) = repo.run(
            &shipped_workflow("implement_adr.yaml"),
            &["-p", "adr_id=ADR-1", "--planner", "judge"],
        );
        assert_eq!(
            code,
            Some(1),
            "{fix}: blocked routes to the failure stop: {result}\n{}",
            stderr_text(&output)
        );
        let run_id = result["run_id"].as_str().unwrap();
        assert_eq!(
            std::fs::read_to_string(repo.run_dir(run_id).join("final-state.txt")).unwrap(),
            "failed failure stop_failed\n",
            "{fix}"
        );
        assert!(
            !repo.run_dir(run_id).join("artifacts/fix").exists(),
            "{fix}: the fix step never ran"
        );
        let decision = repo.json(run_id, "artifacts/evaluate_results/1/planner_decision.json");
        assert_eq!(decision["status"], "blocked", "{fix}: {decision}");
        assert_eq!(decision["decided_by"], "kernel", "{fix}: {decision}");
        assert_eq!(
            decision["blockers"][0]["code"], "planner_error",
            "{fix}: {decision}"
        );
        let summary = decision["blockers"][0]["summary"].as_str().unwrap();
        assert!(
            summary.contains("planner `judge` failed 2 time(s)") && summary.contains(named),
            "{fix}: {summary}"
        );
        let attempts = repo.json(run_id, "artifacts/evaluate_results/1/planner_attempts.json");
        let attempts = attempts["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 2, "{fix}: asked, then retried");
        for attempt in attempts {
            assert_eq!(attempt["ok"], false, "{attempt}");
            let error = attempt["error"].as_str().unwrap();
            assert!(
                error.contains("not a valid decision: `fix_instructions`: ")
                    && error.contains(named),
                "{fix}: {error}"
            );
        }
    }
}

/// The same answers with `objective` (and only the contract's fields) reach the shipped fix prompt,
/// which renders them; `null` lists are read as empty.
#[test]
fn fix_instructions_in_the_oa06_shape_reach_the_shipped_fix_prompt() {
    let repo = builder_repo(
        r#"{"objective": "make the adr test pass", "constraints": null, "edits": [{"target": "src/adr.txt", "action": "append", "rationale": "the test greps for it"}], "verification": [{"command": "tnh test", "expected_signal": "exit 0"}]}"#,
    );
    let (_, result, output) = repo.run(
        &shipped_workflow("implement_adr.yaml"),
        &["-p", "adr_id=ADR-1", "--planner", "judge"],
    );
    let run_id = result["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", stderr_text(&output)));
    let decision = repo.json(run_id, "artifacts/evaluate_results/1/planner_decision.json");
    assert_eq!(decision["decided_by"], "judge", "{decision}");
    assert_eq!(
        decision["fix_instructions"]["constraints"],
        serde_json::json!([])
    );
    let prompt =
        std::fs::read_to_string(repo.run_dir(run_id).join("artifacts/fix/1/prompt.md")).unwrap();
    assert!(
        prompt.contains("Objective: make the adr test pass")
            && prompt.contains("- append `src/adr.txt`: the test greps for it"),
        "{prompt}"
    );
}

/// The published decision schema — the one the `claude`, `codex` and `http` planners are
/// sent — says the same: `fix_instructions` is null or an object with a string `objective`,
/// string constraints, complete edits and verifications.
#[test]
fn the_published_decision_schema_requires_the_fix_instructions_shape() {
    let output = conductor()
        .args(["schema", "planner-decision"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr_text(&output));
    let schema: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let decision = |fix: &str| -> serde_json::Value {
        serde_json::from_str(&format!(
            r#"{{"status": "partial", "next_step": null, "blockers": [], "risk_flags": [], "fix_instructions": {fix}}}"#
        ))
        .unwrap()
    };
    for (fix, _) in UNRENDERABLE {
        assert!(!validator.is_valid(&decision(fix)), "accepted: {fix}");
    }
    for fix in [
        r#"{"objective": 7}"#,
        r#"{"objective": "fix", "constraints": [1]}"#,
    ] {
        assert!(!validator.is_valid(&decision(fix)), "accepted: {fix}");
    }
    for fix in [
        "null",
        r#"{"objective": "fix"}"#,
        r#"{"objective": "fix", "constraints": ["keep the API"], "edits": [{"target": "a", "action": "b", "rationale": "c"}], "verification": [{"command": "tnh test", "expected_signal": "exit 0"}]}"#,
    ] {
        assert!(validator.is_valid(&decision(fix)), "refused: {fix}");
    }
}

/// The `rules` planner's instructions have that shape and render in both shipped fix prompts.
#[test]
fn the_rules_planners_fix_instructions_render_in_the_shipped_fix_prompts() {
    let vector: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("planner_vectors/02_vector_partial_fixable.json"))
            .unwrap(),
    )
    .unwrap();
    let decision = tnh_conductor::planner::rules::decide(
        &tnh_conductor::planner::PlannerInput::read(&vector["envelope"]),
    );
    let fix = serde_json::to_string(&decision.fix_instructions.expect("instructions")).unwrap();
    for reference in [
        "task.fix_from_logs.v2",
        "task.fix_from_logs.v1",
        "task.fix_from_harness_report.v2",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let output = conductor()
            .current_dir(dir.path())
            .args(["prompts", "render", reference, "-i"])
            .arg(format!("fix_instructions={fix}"))
            .output()
            .unwrap();
        assert_eq!(
            output.status.code(),
            Some(0),
            "{reference}: {}",
            stderr_text(&output)
        );
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(
            text.contains("make the failing checks pass"),
            "{reference}: {text}"
        );
    }
}
