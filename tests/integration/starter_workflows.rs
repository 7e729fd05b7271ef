//! The starter workflows in `workflows/` run end to end offline: the `claude-code` and `codex`
//! profiles are pointed at the scripted agent, the task prompts are overridden in the
//! repository's `.tnh/prompts/` with scripted directives, validators are configured, and the
//! `rules` planner decides.

use std::path::{Path, PathBuf};

use crate::kernel_support::RunRepo;
use crate::support::{fixture, stderr_text};

/// The starter-workflow setup: the scripted agent as `claude-code` and `codex`, the starter
/// task prompts, passing validators, and `extra_config` appended to the configuration (say a
/// `planners:` section).
pub fn starter_repo_with(extra_config: &str) -> RunRepo {
    let repo = RunRepo::new();
    let agent = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/agents/scripted.py");
    let profile = format!(
        "{{kind: command, argv: [python3, \"{}\"]}}",
        agent.display()
    );
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "agents:\n  claude-code: {profile}\n  codex: {profile}\nvalidators:\n  tests: {{argv: [sh, -c, \"exit 0\"]}}\n  lint: {{argv: [sh, -c, \"exit 0\"]}}\n  typecheck: {{argv: [sh, -c, \"exit 0\"]}}\n{extra_config}"
        ),
    );
    for entry in std::fs::read_dir(fixture("starter/prompts/task")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        repo.repo.write(
            &format!(".tnh/prompts/task/{name}"),
            &std::fs::read_to_string(&path).unwrap(),
        );
    }
    repo
}

fn starter_repo() -> RunRepo {
    starter_repo_with("")
}

fn shipped(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("workflows")
        .join(name)
}

fn final_state(repo: &RunRepo, run_id: &str) -> String {
    std::fs::read_to_string(repo.run_dir(run_id).join("final-state.txt")).unwrap()
}

#[test]
fn implement_adr_runs_the_builder_loop_to_its_final_gate_and_completes_on_approval() {
    let repo = starter_repo();
    let (code, result, output) = repo.run(&shipped("implement_adr.yaml"), &["-p", "adr_id=ADR-7"]);
    assert_eq!(code, Some(3), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    assert_eq!(final_state(&repo, run_id), "waiting gate final_review\n");
    let worktree = PathBuf::from(result["worktree"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(worktree.join("src/adr.txt")).unwrap(),
        "implements ADR-7"
    );
    // The plan the `plan` step answered reaches the implementer.
    let inputs = repo.json(run_id, "artifacts/implement/1/inputs.json");
    assert_eq!(inputs["inputs"]["adr_id"], "ADR-7", "{inputs}");
    assert!(
        inputs["inputs"]["plan"]
            .as_str()
            .is_some_and(|plan| plan.contains("plan for ADR-7: one step, one test")),
        "{inputs}"
    );
    repo.conductor_exits(&["gate", "approve", run_id, "--as", "lead", "--resume"], 0);
    assert_eq!(final_state(&repo, run_id), "completed success done\n");
}

#[test]
fn implement_adr_rejected_at_the_final_review_rolls_back_and_says_so() {
    let repo = starter_repo();
    let (code, result, output) = repo.run(&shipped("implement_adr.yaml"), &["-p", "adr_id=ADR-7"]);
    assert_eq!(code, Some(3), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let worktree = PathBuf::from(result["worktree"].as_str().unwrap());

    let rejected = repo.conductor(&["gate", "reject", run_id, "--as", "lead", "--resume"]);

    assert_eq!(
        rejected.status.code(),
        Some(1),
        "{}",
        stderr_text(&rejected)
    );
    assert_eq!(final_state(&repo, run_id), "failed failure rejected\n");
    let metadata = repo.json(run_id, "metadata.json");
    assert!(
        metadata["termination"]["reason"]
            .as_str()
            .unwrap()
            .contains("Rejected at the final review; the change was rolled back."),
        "{metadata}"
    );
    assert!(!worktree.join("src/adr.txt").exists());
}

#[test]
fn generative_eval_synthesizes_runs_and_evaluates_a_harness() {
    let repo = starter_repo();
    let (code, result, output) = repo.run(&shipped("generative_eval.yaml"), &[]);
    assert_eq!(code, Some(0), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let report = repo.json(run_id, "artifacts/execute_harness/1/validation_report.json");
    assert_eq!(
        report["validators"]["generated_harness"]["harness_report"],
        "harness_report.json"
    );
    assert_eq!(
        repo.json(run_id, "artifacts/evaluate/1/planner_input.json")["evidence"]["harness_report"]
            ["suite_id"],
        "cli_smoke"
    );
}

/// The harness report is written into the step's folder of the run directory: the run's
/// change (what a reviewer approves) does not include it.
#[test]
fn generative_eval_keeps_the_harness_report_out_of_the_worktree() {
    let repo = starter_repo();
    let (code, result, output) = repo.run(&shipped("generative_eval.yaml"), &[]);
    assert_eq!(code, Some(0), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let worktree = PathBuf::from(result["worktree"].as_str().unwrap());
    assert!(!worktree.join("harness_report.json").exists());
    let status = crate::support::git_in(&worktree, &["status", "--porcelain"]);
    assert_eq!(status, "", "the worktree changed: {status}");
    let manifest = repo.json(run_id, "artifacts/execute_harness/1/manifest.json");
    let listed: Vec<&str> = manifest["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|entry| entry["role"] == "harness_report")
        .map(|entry| entry["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        listed,
        ["artifacts/execute_harness/1/harness_report.json"],
        "{manifest}"
    );
    assert!(
        repo.run_dir(run_id)
            .join("artifacts/execute_harness/1/harness_report.json")
            .is_file()
    );
}

/// A harness that crashes (no report) is evaluated, and the fix loop works from the
/// validation report: `fix` runs without a harness report, repairs the harness, and the run
/// ends at the success STOP — not with a runtime error for a missing `harness_report`.
#[test]
fn generative_eval_fixes_a_crashing_harness_from_the_validation_report() {
    let repo = starter_repo();
    repo.repo.write(
        ".tnh/prompts/task/synthesize_harness.v1.md",
        "---\nprompt_id: task.synthesize_harness\nversion: 1\nrole: task\nsummary: a harness that crashes\ninputs:\n  - {name: diff, type: string, required: true}\n  - {name: component_kind, type: string, required: true}\n  - {name: run_dir, type: string, required: false}\n---\nWRITE {{ run_dir }}/harness/harness.py: import sys\\nsys.exit(\"boom\")\n",
    );
    let (code, result, output) = repo.run(&shipped("generative_eval.yaml"), &[]);
    assert_eq!(code, Some(0), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    assert_eq!(
        repo.json(run_id, "artifacts/execute_harness/1/manifest.json")["termination"],
        "error"
    );
    let inputs = repo.json(run_id, "artifacts/fix/1/inputs.json");
    assert!(inputs["inputs"].get("harness_report").is_none(), "{inputs}");
    assert_eq!(
        inputs["inputs"]["validation_report"]["validators"]["generated_harness"]["exit_code"], 1,
        "{inputs}"
    );
    assert_eq!(
        repo.json(run_id, "artifacts/execute_harness/2/manifest.json")["termination"],
        "completed"
    );
    assert_eq!(
        repo.json(run_id, "artifacts/evaluate/2/planner_input.json")["evidence"]["harness_report"]
            ["suite_id"],
        "repaired"
    );
    assert_eq!(final_state(&repo, run_id), "completed success evaluate\n");
}

#[test]
fn fix_bug_validates_and_queues_the_fix_for_review() {
    let repo = starter_repo();
    let (code, result, output) = repo.run(
        &shipped("fix_bug.yaml"),
        &["-p", "bug=crash on empty config"],
    );
    assert_eq!(code, Some(0), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    assert_eq!(
        repo.json(run_id, "artifacts/review/1/gate_request.json")["reason"],
        "Bug fix ready for review: crash on empty config"
    );
    assert_eq!(final_state(&repo, run_id), "completed success review\n");
}

#[test]
fn review_code_is_read_only() {
    let repo = starter_repo();
    let (code, result, output) = repo.run(&shipped("review_code.yaml"), &[]);
    assert_eq!(code, Some(0), "{result}\n{}", stderr_text(&output));
    // A reviewer that writes is a violation: the change is rolled back and the run fails.
    let writer = starter_repo();
    writer.repo.write(".tnh/prompts/task/review_diff.v2.md", "---\nprompt_id: task.review_diff\nversion: 2\nrole: task\nsummary: a reviewer that edits\ninputs:\n  - {name: against, type: string, required: false}\n  - {name: adr_id, type: string, required: false}\n---\nWRITE src/oops.txt: edited\n");
    let (code, result, output) = writer.run(&shipped("review_code.yaml"), &[]);
    assert_eq!(code, Some(1), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    assert_eq!(final_state(&writer, run_id), "failed failure wrote_files\n");
    assert!(
        !PathBuf::from(result["worktree"].as_str().unwrap())
            .join("src/oops.txt")
            .exists()
    );
}

/// A repository whose `feature` branch is one commit ahead of `main`, reviewed by a command
/// agent that runs the `tnh diff … --stat` command its prompt names (its output is its answer),
/// or by `agent` when given.
fn review_repo(agent: Option<&str>) -> RunRepo {
    let repo = starter_repo();
    repo.repo.git(&["checkout", "-q", "-b", "feature"]);
    repo.repo.write("src/feature.rs", "pub fn feature() {}\n");
    repo.repo.git(&["add", "src/feature.rs"]);
    repo.repo.git(&["commit", "-q", "-m", "the feature"]);
    repo.repo.git(&["checkout", "-q", "main"]);
    let script = repo.repo.write(
        ".tnh/agents/review.sh",
        &format!(
            "#!/bin/sh\nline=$(grep -o 'tnh diff [^`]*--stat' | head -n 1)\n[ -n \"$line\" ] || {{ echo 'the prompt names no tnh diff command'; exit 0; }}\nexec {} ${{line#tnh }}\n",
            env!("CARGO_BIN_EXE_tnh")
        ),
    );
    let profile = match agent {
        Some(agent) => agent.to_owned(),
        None => format!("{{kind: command, argv: [sh, \"{}\"]}}", script.display()),
    };
    repo.repo.write(
        ".tnh/config.yaml",
        &format!("agents:\n  claude-code: {profile}\n"),
    );
    // The real review prompt, not the starter override: what it tells the agent to run matters.
    std::fs::remove_file(repo.path().join(".tnh/prompts/task/review_diff.v2.md")).unwrap();
    repo
}

/// Run as its header says (`--base feature-branch`), the review reads the branch's change
/// since it left `main`, not the empty change between the run's base and itself.
#[test]
fn review_code_with_a_base_branch_reviews_that_branchs_change() {
    let repo = review_repo(None);
    let (code, result, output) = repo.run(&shipped("review_code.yaml"), &["--base", "feature"]);
    assert_eq!(code, Some(0), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let answer = std::fs::read_to_string(
        repo.run_dir(run_id)
            .join("artifacts/review/1/final_response.md"),
    )
    .unwrap();
    assert!(
        answer.contains("src/feature.rs") && answer.contains("1 file changed"),
        "{answer}"
    );
    assert_eq!(final_state(&repo, run_id), "completed success queue\n");
}

/// A reviewer that fails ends the run at a failure stop: no findings are queued as ready.
#[test]
fn review_code_with_a_failing_reviewer_fails_and_queues_nothing() {
    let repo = review_repo(Some(
        "{kind: command, argv: [sh, -c, \"cat >/dev/null; echo 'not logged in' >&2; exit 1\"]}",
    ));
    let (code, result, output) = repo.run(&shipped("review_code.yaml"), &["--base", "feature"]);
    assert_eq!(code, Some(1), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    assert_eq!(final_state(&repo, run_id), "failed failure review_failed\n");
    assert!(!repo.run_dir(run_id).join("artifacts/queue").exists());
}

#[test]
fn update_docs_waits_for_approval() {
    let repo = starter_repo();
    let (code, result, output) = repo.run(
        &shipped("update_docs.yaml"),
        &["-p", "topic=the --base option"],
    );
    assert_eq!(code, Some(3), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    repo.conductor_exits(&["gate", "approve", run_id, "--resume"], 0);
}

/// The builder loop offline: the implementation fails validation, the planner says
/// `partial` with fix instructions, the fix agent gets them in its prompt, validation passes,
/// the planner says `success`, and the final gate completes the run.
#[test]
fn implement_adr_fixes_a_failing_validation_through_the_planner_loop() {
    let repo = starter_repo();
    repo.repo.write(
        ".tnh/config.yaml",
        &std::fs::read_to_string(repo.path().join(".tnh/config.yaml"))
            .unwrap()
            .replace(
                "tests: {argv: [sh, -c, \"exit 0\"]}",
                "tests: {argv: [sh, -c, \"grep -q fixed src/adr.txt\"]}",
            ),
    );
    repo.repo.write(
        ".tnh/prompts/task/fix_from_logs.v2.md",
        "---\nprompt_id: task.fix_from_logs\nversion: 2\nrole: task\nsummary: test override\ninputs:\n  - {name: fix_instructions, type: map, required: false}\n  - {name: validation_report, type: map, required: false}\n---\nAPPEND src/adr.txt: fixed\nSAY fixed: {{ fix_instructions.objective }}\n",
    );
    let (code, result, output) = repo.run(&shipped("implement_adr.yaml"), &["-p", "adr_id=ADR-9"]);
    assert_eq!(code, Some(3), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let completed: Vec<String> = repo
        .events(run_id)
        .iter()
        .filter(|event| event["event_type"] == "step_completed")
        .map(|event| {
            format!(
                "{}:{}",
                event["step_id"].as_str().unwrap(),
                event["outcome"].as_str().unwrap_or("?")
            )
        })
        .collect();
    let steps: Vec<&str> = completed
        .iter()
        .map(|entry| entry.split(':').next().unwrap())
        .collect();
    assert_eq!(
        steps,
        [
            "plan",
            "evaluate_plan",
            "implement",
            "validate",
            "evaluate_results",
            "fix",
            "validate",
            "evaluate_results",
            "queue_review",
        ],
        "{completed:?}"
    );
    let first = repo.json(run_id, "artifacts/evaluate_results/1/planner_decision.json");
    assert_eq!(first["status"], "partial", "{first}");
    assert_eq!(first["next_step"], "fix");
    let objective = first["fix_instructions"]["objective"].as_str().unwrap();
    let fix_prompt =
        std::fs::read_to_string(repo.run_dir(run_id).join("artifacts/fix/1/prompt.md")).unwrap();
    assert!(
        fix_prompt.contains(&format!("SAY fixed: {objective}")),
        "the fix agent is given the planner's instructions: {fix_prompt}"
    );
    let second = repo.json(run_id, "artifacts/evaluate_results/2/planner_decision.json");
    assert_eq!(second["status"], "success", "{second}");
    let input = repo.json(run_id, "artifacts/evaluate_results/2/planner_input.json");
    assert_eq!(
        input["evaluation_history"].as_array().unwrap().len(),
        2,
        "{input}"
    );
    assert_eq!(
        input["provenance_window"][0]["step_id"], "evaluate_results",
        "the window reaches past the previous evaluation"
    );
    assert_eq!(final_state(&repo, run_id), "waiting gate final_review\n");
    repo.conductor_exits(&["gate", "approve", run_id, "--as", "lead", "--resume"], 0);
    assert_eq!(final_state(&repo, run_id), "completed success done\n");
    let worktree = PathBuf::from(result["worktree"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(worktree.join("src/adr.txt")).unwrap(),
        "implements ADR-9fixed\n"
    );
}
