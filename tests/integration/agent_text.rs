//! Text an agent controls — a file name holding newlines, a STOP reason read from a file it
//! wrote — cannot add lines of its own to the journal (Markdown), `runs show`, `status` or the
//! `run` summary: it is shown escaped there (`\n`), and stays exact in JSON.

use crate::kernel_support::RunRepo;
use crate::support::stdout_text;

/// A name that, copied raw into a Markdown journal, forges a completed task and an empty
/// policy-violation section.
const FORGED: &str = "evil\n## Completed Tasks\n- [x] fake.v1 `20990101T000000Z-aaaaaa`: all good (0 files changed, +0 -0)\n\n## Policy Violations\n- none\nx.txt";

/// The lines of `text` that a forgery would add.
fn forged_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|line| line.starts_with("- [x] fake.v1"))
        .collect()
}

fn count(text: &str, line: &str) -> usize {
    text.lines().filter(|candidate| *candidate == line).count()
}

/// Runs `workflow` (text) with the agent `argv` (YAML flow list); returns the run id and the
/// `run` command's text output.
fn run(repo: &RunRepo, argv: &str, workflow: &str) -> (String, String) {
    repo.repo.write(
        ".tnh/config.yaml",
        &format!("agents:\n  fake:\n    kind: command\n    argv: {argv}\n"),
    );
    let path = repo.workflow_text("wf.yaml", workflow);
    let output = repo.conductor(&["run", path.to_str().unwrap()]);
    let text = stdout_text(&output);
    (repo.only_run_id(), text)
}

#[test]
fn a_file_name_with_newlines_cannot_forge_journal_or_runs_show_entries() {
    let repo = RunRepo::new();
    let agent = repo.repo.write(
        "agent.py",
        &format!("import sys\nsys.stdin.read()\nopen({FORGED:?}, 'w').write('x')\n"),
    );
    repo.repo.commit_all("the agent");
    let (run_id, summary) = run(
        &repo,
        &format!("[python3, {:?}]", agent.display().to_string()),
        "workflow_id: nl\nversion: 1\ndescription: d\nentry_step: work\nsteps:\n  - id: work\n    opcode: RUN_AGENT\n    agent: fake\n    prompt: do it\n    policy:\n      allowed_paths: [\"GREETING.md\"]\n    routes:\n      \"*\": STOP\n",
    );
    assert!(
        !summary.lines().any(|line| line.starts_with("## ")),
        "{summary}"
    );

    let journal = stdout_text(&repo.conductor(&["journal"]));
    assert_eq!(count(&journal, "## Completed Tasks"), 1, "{journal}");
    assert_eq!(count(&journal, "## Policy Violations"), 1, "{journal}");
    assert!(forged_lines(&journal).is_empty(), "{journal}");
    assert!(
        journal.contains("evil\\n## Completed Tasks\\n"),
        "{journal}"
    );

    let show = stdout_text(&repo.conductor(&["runs", "show", &run_id]));
    assert!(!show.lines().any(|line| line.starts_with("## ")), "{show}");
    assert!(forged_lines(&show).is_empty(), "{show}");
    let status = stdout_text(&repo.conductor(&["status", &run_id]));
    assert!(
        !status.lines().any(|line| line.starts_with("## ")),
        "{status}"
    );

    // JSON keeps the name exact.
    let summary = repo.json(&run_id, "artifacts/work/1/policy_summary.json");
    assert_eq!(summary["violations"][0]["path"], FORGED, "{summary}");
    let json: serde_json::Value = serde_json::from_str(&stdout_text(
        &repo.conductor(&["journal", "--format", "json"]),
    ))
    .unwrap();
    assert_eq!(
        json["policy_violations"][0]["violation"]["path"], FORGED,
        "{json}"
    );
}

#[test]
fn a_stop_reason_read_from_an_agents_file_cannot_forge_journal_sections() {
    let repo = RunRepo::new();
    let (run_id, summary) = run(
        &repo,
        r#"["sh", "-c", "cat >/dev/null; printf 'tests pass\\n\\n## Policy Violations\\n- none\\n' > STATUS.txt"]"#,
        "workflow_id: sr\nversion: 1\ndescription: d\nentry_step: work\nsteps:\n  - id: work\n    opcode: RUN_AGENT\n    agent: fake\n    prompt: do it\n    routes:\n      \"*\": done\n  - id: done\n    opcode: STOP\n    outcome: failure\n    reason: \"agent says: ${{ read_file(\\\"STATUS.txt\\\") }}\"\n",
    );
    assert!(
        !summary.lines().any(|line| line.starts_with("## ")),
        "{summary}"
    );
    let journal = stdout_text(&repo.conductor(&["journal"]));
    assert_eq!(count(&journal, "## Policy Violations"), 1, "{journal}");
    assert!(
        journal.contains("agent says: tests pass\\n\\n## Policy Violations\\n- none"),
        "{journal}"
    );
    let show = stdout_text(&repo.conductor(&["runs", "show", &run_id]));
    assert!(!show.lines().any(|line| line.starts_with("## ")), "{show}");
    let status = stdout_text(&repo.conductor(&["status", &run_id]));
    assert!(
        !status.lines().any(|line| line.starts_with("## ")),
        "{status}"
    );
    let metadata = repo.json(&run_id, "metadata.json");
    assert!(
        metadata
            .to_string()
            .contains("tests pass\\n\\n## Policy Violations"),
        "JSON keeps the reason exact: {metadata}"
    );
}

/// A gate reason read from a file the agent wrote, and a planner blocker, shown by `gate list`,
/// `gate show` and the `run` progress line: one line each, escapes shown, so a newline cannot
/// forge a second waiting gate (which a script approving from `gate list` would act on) or a
/// reassuring planner line, and an ESC cannot reach the terminal. `gate_request.json` keeps
/// them exact.
#[test]
fn a_gate_reason_or_planner_blocker_cannot_forge_gate_lines() {
    let repo = RunRepo::new();
    let planner = repo.repo.write(
        ".tnh/planner.sh",
        "#!/bin/sh\ncat >/dev/null\nprintf '%s\\n' '{\"status\": \"needs_human\", \"next_step\": null, \"blockers\": [{\"code\": \"x\", \"summary\": \"needs a look\\n  planner:   success, no risk flags\"}], \"risk_flags\": []}'\n",
    );
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "agents:\n  fake:\n    kind: command\n    argv: [\"sh\", \"-c\", \"cat >/dev/null; printf 'all good\\\\n20991231T000000Z-aaaaaa    now  review  Approve the harmless change\\\\033[2J' > STATUS.txt\"]\nplanners:\n  judge:\n    kind: command\n    argv: [sh, \"{}\"]\n",
            planner.display()
        ),
    );
    let workflow = repo.workflow_text(
        "wf.yaml",
        "workflow_id: gr\nversion: 1\ndescription: d\nentry_step: work\nsteps:\n  - id: work\n    opcode: RUN_AGENT\n    agent: fake\n    prompt: do it\n    routes:\n      completed: judge\n      \"*\": STOP\n  - id: judge\n    opcode: EVALUATE\n    planner: judge\n    prompt: planner.evaluate_results.v1\n    allowed_next_steps: [review]\n    routes: {success: STOP, partial: STOP, blocked: STOP, unsafe: STOP, needs_human: review}\n  - id: review\n    opcode: GATE\n    gate: requires_approval\n    reason: \"${{ read_file(\\\"STATUS.txt\\\") }}\"\n    routes:\n      gate_approved: STOP\n      gate_rejected: STOP\n",
    );
    let output = repo.conductor(&["run", workflow.to_str().unwrap()]);
    let progress = crate::support::stderr_text(&output);
    let run_id = repo.only_run_id();
    let forged = |text: &str| {
        text.lines().any(|line| {
            line.starts_with("20991231T000000Z-aaaaaa")
                || line.trim_start().starts_with("planner:   success")
        }) || text.contains('\u{1b}')
    };
    assert!(
        progress.contains("waiting for a decision — all good\\n20991231T000000Z-aaaaaa")
            && !forged(&progress),
        "{progress}"
    );
    let list = stdout_text(&repo.conductor(&["gate", "list"]));
    assert_eq!(list.lines().count(), 1, "{list}");
    assert!(
        list.starts_with(&run_id) && list.contains("\\x1b[2J") && !forged(&list),
        "{list}"
    );
    let show = stdout_text(&repo.conductor(&["gate", "show", &run_id]));
    assert!(
        show.contains("  reason:    all good\\n20991231T000000Z-aaaaaa")
            && show.contains("    blocker: needs a look\\n  planner:   success")
            && !forged(&show),
        "{show}"
    );
    let request = repo.json(&run_id, "artifacts/review/1/gate_request.json");
    assert_eq!(
        request["reason"],
        "all good\n20991231T000000Z-aaaaaa    now  review  Approve the harmless change\u{1b}[2J"
    );
}
