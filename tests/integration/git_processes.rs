//! How many git processes a steady-state agent step starts: a counting `git` first on `PATH`
//! logs every git the conductor runs, and the agent marks the log each time it runs, so the
//! lines between two marks are one whole step (the end of one visit and the start of the
//! next). The evidence must stay what it was: the visit's diff and status show the change.

use std::path::{Path, PathBuf};

use crate::kernel_support::{RunRepo, git_on_path_when};
use crate::support::{conductor, git_in, stderr_text};

/// The most git processes an agent step may start once the run is going.
const MOST_PER_STEP: usize = 6;

/// The visits the loop runs; the last one's agent exits 3, which ends the run.
const VISITS: u32 = 5;

/// The mark the agent writes into the log.
const MARK: &str = "AGENT visit ";

/// A repository whose `looper` agent (a shell script) marks `log` with its visit, runs
/// `change` (a shell snippet, in the worktree) and exits 3 on its last visit.
fn looping_repo(log: &Path, scripts: &Path, change: &str) -> RunRepo {
    let body = format!("{change}\nif [ \"$visit\" -ge {VISITS} ]; then exit 3; fi\n");
    repo_with_agent(log, scripts, &body, "")
}

/// A repository whose `looper` agent marks `log` with its visit (`$visit`) then runs `body`;
/// `more` is appended to its configuration.
fn repo_with_agent(log: &Path, scripts: &Path, body: &str, more: &str) -> RunRepo {
    let repo = RunRepo::new();
    let agent = scripts.join("agent.sh");
    std::fs::write(
        &agent,
        format!(
            "cat > /dev/null\nvisit=$(basename \"$TNH_STEP_DIR\")\n\
             echo \"{MARK}$visit\" >> '{}'\n{body}",
            log.display()
        ),
    )
    .unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "agents:\n  looper:\n    kind: command\n    argv: [sh, \"{}\"]\n{more}",
            agent.display()
        ),
    );
    repo
}

const LOOP: &str = "\
workflow_id: looping
version: 1
description: an agent step that loops until its agent fails
entry_step: work
defaults:
  limits: {max_visits: 10}
steps:
  - id: work
    opcode: RUN_AGENT
    agent: looper
    prompt: keep working
    routes:
      completed: work
      \"*\": done
  - id: done
    opcode: STOP
    outcome: success
";

/// Runs the loop with `git` counted; the run's id and the log's lines.
fn run_counted(repo: &RunRepo, log: &Path) -> (String, Vec<String>) {
    run_workflow_counted(repo, log, LOOP)
}

/// Runs `workflow` (its text) with `git` counted; the run's id and the log's lines.
fn run_workflow_counted(repo: &RunRepo, log: &Path, workflow: &str) -> (String, Vec<String>) {
    let workflow = repo.workflow_text("looping.yaml", workflow);
    let path = git_on_path_when(
        repo,
        "true",
        &format!("printf '%s\\n' \"$*\" >> '{}'", log.display()),
    );
    let output = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["run", "--json"])
        .arg(&workflow)
        .env("PATH", path)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr_text(&output));
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let run_id = result["run_id"].as_str().unwrap().to_owned();
    let lines = std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    (run_id, lines)
}

/// The git commands logged between the agent's marks of visits `visit` and `visit + 1`.
fn between_marks(lines: &[String], visit: u32) -> Vec<String> {
    let at = |visit: u32| {
        lines
            .iter()
            .position(|line| *line == format!("{MARK}{visit}"))
            .unwrap_or_else(|| panic!("no mark of visit {visit} in {lines:#?}"))
    };
    lines[at(visit) + 1..at(visit + 1)].to_vec()
}

fn temp_files() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("git.log");
    (dir, log)
}

#[test]
fn a_steady_state_agent_step_that_changes_a_file_starts_at_most_six_git_processes() {
    let (dir, log) = temp_files();
    let repo = looping_repo(&log, dir.path(), "echo \"visit $visit\" > notes.txt");

    let (run_id, lines) = run_counted(&repo, &log);

    for visit in 2..VISITS - 1 {
        let step = between_marks(&lines, visit);
        assert!(
            step.len() <= MOST_PER_STEP,
            "visit {visit} to {}: {} git processes: {step:#?}",
            visit + 1,
            step.len()
        );
    }
    // The evidence of a visit whose snapshot took the previous capture's tree.
    let status = repo.json(&run_id, "artifacts/work/4/workspace_status.json");
    assert_eq!(status["files"][0]["path"], "notes.txt", "{status}");
    assert_eq!(status["files"][0]["kind"], "modify", "{status}");
    assert_eq!(status["diffstat"]["files_changed"], 1, "{status}");
    let diff = std::fs::read_to_string(
        repo.run_dir(&run_id)
            .join("artifacts/work/4/workspace.diff"),
    )
    .unwrap();
    assert!(
        diff.contains("-visit 3\n+visit 4\n"),
        "the visit's diff: {diff}"
    );
    // Its pre-step snapshot is the worktree as the previous visit left it.
    let before = git_in(
        repo.path(),
        &[
            "show",
            &format!("refs/tnh/runs/{run_id}/pre_step/work/4:notes.txt"),
        ],
    );
    assert_eq!(before, "visit 3");
}

#[test]
fn a_steady_state_agent_step_that_changes_nothing_starts_fewer_git_processes() {
    let (dir, log) = temp_files();
    let repo = looping_repo(&log, dir.path(), "true");

    let (run_id, lines) = run_counted(&repo, &log);

    for visit in 2..VISITS - 1 {
        let step = between_marks(&lines, visit);
        assert!(
            step.len() < MOST_PER_STEP,
            "visit {visit} to {}: {} git processes: {step:#?}",
            visit + 1,
            step.len()
        );
    }
    let status = repo.json(&run_id, "artifacts/work/4/workspace_status.json");
    assert_eq!(status["files"], serde_json::json!([]), "{status}");
    let diff = repo
        .run_dir(&run_id)
        .join("artifacts/work/4/workspace.diff");
    assert_eq!(std::fs::read_to_string(diff).unwrap(), "");
}

/// The paths the tree of `reference` holds.
fn files_at(repo: &RunRepo, reference: &str) -> Vec<String> {
    git_in(repo.path(), &["ls-tree", "-r", "--name-only", reference])
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The first visit writes `undone.txt`, a rollback takes it away, and the second visit
/// changes nothing: its snapshot must be the worktree after the rollback, not the first
/// visit's capture, or the second visit would be charged with deleting the file.
#[test]
fn after_a_rollback_the_next_agent_step_snapshots_the_worktree_again() {
    let (dir, log) = temp_files();
    let body = "if [ \"$visit\" = 1 ]; then echo undone > undone.txt; exit 0; fi\nexit 3\n";
    let repo = repo_with_agent(&log, dir.path(), body, "");
    let workflow = "\
workflow_id: looping
version: 1
description: an agent step, a rollback of it, the agent step again
entry_step: work
steps:
  - id: work
    opcode: RUN_AGENT
    agent: looper
    prompt: keep working
    routes:
      completed: undo
      \"*\": done
  - id: undo
    opcode: ROLLBACK
    target: pre_step
    routes:
      \"*\": work
  - id: done
    opcode: STOP
    outcome: success
";

    let (run_id, _) = run_workflow_counted(&repo, &log, workflow);

    let status = repo.json(&run_id, "artifacts/work/2/workspace_status.json");
    assert_eq!(status["files"], serde_json::json!([]), "{status}");
    let snapshot = format!("refs/tnh/runs/{run_id}/pre_step/work/2");
    assert_eq!(files_at(&repo, &snapshot), ["README.md"]);
}

/// A validator writes `built.txt` between two visits of the agent step: the second visit's
/// snapshot holds it (taken from the validation's capture) and its diff does not.
#[test]
fn a_validations_change_is_in_the_next_agent_steps_snapshot_not_its_diff() {
    let (dir, log) = temp_files();
    let body = "if [ \"$visit\" = 1 ]; then echo one > one.txt; exit 0; fi\nexit 3\n";
    let validators = "validators:\n  build: { argv: [sh, -c, \"echo built > built.txt\"] }\n";
    let repo = repo_with_agent(&log, dir.path(), body, validators);
    let workflow = "\
workflow_id: looping
version: 1
description: an agent step, a validation that builds, the agent step again
entry_step: work
steps:
  - id: work
    opcode: RUN_AGENT
    agent: looper
    prompt: keep working
    routes:
      completed: check
      \"*\": done
  - id: check
    opcode: RUN_VALIDATION
    run: [build]
    routes:
      \"*\": work
  - id: done
    opcode: STOP
    outcome: success
";

    let (run_id, _) = run_workflow_counted(&repo, &log, workflow);

    let built = repo.json(&run_id, "artifacts/check/1/workspace_status.json");
    assert_eq!(built["files"][0]["path"], "built.txt", "{built}");
    let status = repo.json(&run_id, "artifacts/work/2/workspace_status.json");
    assert_eq!(status["files"], serde_json::json!([]), "{status}");
    let snapshot = format!("refs/tnh/runs/{run_id}/pre_step/work/2");
    assert_eq!(
        files_at(&repo, &snapshot),
        ["README.md", "built.txt", "one.txt"]
    );
}

/// The second visit writes into the operator's checkout, whose state before it is the one the
/// first visit's check read: the write is found (and is a violation), and the third visit,
/// which starts from the second's reading, is not charged with it.
#[test]
fn a_write_to_the_operators_checkout_is_found_in_the_step_that_made_it_only() {
    let (dir, log) = temp_files();
    let body = "if [ \"$visit\" = 2 ]; then echo stray > ../../../stray.txt; fi\n\
                if [ \"$visit\" -ge 3 ]; then exit 3; fi\n";
    let repo = repo_with_agent(&log, dir.path(), body, "operator_checkout: report\n");

    let (run_id, _) = run_counted(&repo, &log);

    let changed = |visit: u32| {
        let summary = repo.json(
            &run_id,
            &format!("artifacts/work/{visit}/policy_summary.json"),
        );
        summary["guard_report"]["operator_checkout_changed"].clone()
    };
    assert_eq!(changed(1), serde_json::json!(null));
    assert_eq!(changed(2), serde_json::json!(["stray.txt"]));
    assert_eq!(changed(3), serde_json::json!(null));
}
