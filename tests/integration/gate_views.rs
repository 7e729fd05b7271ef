//! What a reviewer is shown of a gate's change on the terminal: `gate show` and the `run
//! --wait` prompt's "show diff" print the patch bounded — no line past 4 KiB, at most 2,000
//! lines — saying what was cut and naming `run.diff`, which holds the whole change.

use crate::kernel_support::RunRepo;
use crate::support::stdout_text;

/// The agent writes a 3 MiB one-line `bundle.min.js` and a 5,000-line `numbers.txt`.
const AGENT: &str = "#!/bin/sh
cat > /dev/null
head -c 3145728 /dev/zero | tr '\\0' x > bundle.min.js
echo >> bundle.min.js
seq 1 5000 > numbers.txt
echo done
";

const WORKFLOW: &str = "workflow_id: big
version: 1
description: a big change waiting at a gate
entry_step: implement
steps:
  - id: implement
    opcode: RUN_AGENT
    agent: bundler
    prompt: build the bundle
    routes:
      completed: review
      \"*\": failed
  - id: review
    opcode: GATE
    gate: requires_approval
    reason: review the bundle
    routes:
      gate_approved: STOP
      gate_rejected: failed
      gate_timed_out: failed
  - id: failed
    opcode: STOP
    outcome: failure
";

fn big_change_repo() -> (RunRepo, std::path::PathBuf) {
    let repo = RunRepo::new();
    let agent = repo.repo.write(".tnh/bundler.sh", AGENT);
    let config = repo.path().join(".tnh/config.yaml");
    let text = format!(
        "{}  bundler:\n    kind: command\n    argv: [sh, \"{}\"]\n",
        std::fs::read_to_string(&config).unwrap(),
        agent.display()
    );
    std::fs::write(&config, text).unwrap();
    let workflow = repo.workflow_text("big.yaml", WORKFLOW);
    (repo, workflow)
}

/// Checks a view of the big change: the long line cut, the patch stopped after 2,000 lines,
/// the note naming the run's `run.diff`, which holds everything.
fn assert_bounded(view: &str, run_diff: &std::path::Path) {
    let longest = view.lines().map(str::len).max().unwrap_or(0);
    assert!(
        longest < 4 * 1024 + 400,
        "a line of {longest} bytes is shown"
    );
    assert!(
        view.contains(&format!("+{}… (3141633 more bytes)", "x".repeat(4095))),
        "the bundle's line is cut, saying how much is left"
    );
    assert!(
        view.contains("+1900\n"),
        "the patch is shown up to its bound"
    );
    assert!(!view.contains("+4990\n"), "not past it");
    let whole = std::fs::read_to_string(run_diff).unwrap();
    assert!(whole.contains("+4990\n"), "run.diff holds the whole change");
    let note = view
        .lines()
        .find(|line| line.contains("more bytes of the diff are not shown"))
        .unwrap_or_else(|| panic!("no note says the diff was cut"));
    assert!(
        note.ends_with(&run_diff.display().to_string()),
        "the note names run.diff: {note}"
    );
    assert!(view.len() < 1024 * 1024, "{} bytes shown", view.len());
}

/// `gate show` printed a 3 MiB line and a 3.5 MB patch on
/// the terminal, with no word that anything was long or where the whole of it is.
#[test]
fn gate_show_bounds_long_lines_and_long_patches_and_names_run_diff() {
    let (repo, workflow) = big_change_repo();
    let (run, _) = repo.run_exits(&workflow, &[], 3);
    let run_id = run.as_str();

    let shown = repo.conductor_exits(&["gate", "show", run_id], 0);

    let run_diff = repo.run_dir(run_id).join("artifacts/review/1/run.diff");
    assert_bounded(&stdout_text(&shown), &run_diff);
}

/// The `--wait` prompt's "show diff" (`s`) uses the same bound.
#[test]
fn the_wait_prompts_show_diff_uses_the_same_bound() {
    let (repo, workflow) = big_change_repo();
    let output = std::process::Command::new("python3")
        .arg(crate::support::fixture("pty/answer.py"))
        .args(["[a/r/s/l]: =s", "[a/r/s/l]: =l"])
        .args(["--", env!("CARGO_BIN_EXE_tnh-conductor"), "--repo"])
        .arg(repo.path())
        .args(["run", "--wait"])
        .arg(&workflow)
        .env("USER", "alice")
        .output()
        .unwrap();
    // The terminal turns each newline into CR LF.
    let transcript = stdout_text(&output).replace("\r\n", "\n");
    assert!(
        transcript.trim_end().ends_with("exit=3"),
        "{}",
        &transcript[transcript.len().saturating_sub(2000)..]
    );
    let run_id = repo.only_run_id();
    let run_diff = repo.run_dir(&run_id).join("artifacts/review/1/run.diff");
    assert_bounded(&transcript, &run_diff);
}
