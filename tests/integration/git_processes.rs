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
    let repo = RunRepo::new();
    let agent = scripts.join("agent.sh");
    std::fs::write(
        &agent,
        format!(
            "cat > /dev/null\nvisit=$(basename \"$TNH_STEP_DIR\")\n\
             echo \"{MARK}$visit\" >> '{}'\n{change}\n\
             if [ \"$visit\" -ge {VISITS} ]; then exit 3; fi\n",
            log.display()
        ),
    )
    .unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "agents:\n  looper:\n    kind: command\n    argv: [sh, \"{}\"]\n",
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
    let workflow = repo.workflow_text("looping.yaml", LOOP);
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
