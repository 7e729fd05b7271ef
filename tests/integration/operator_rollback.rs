//! `tnh-conductor rollback RUN_ID` on real runs: it holds the run lock, is recorded in the run's
//! events, lets `resume` continue from the rolled-back worktree (instead of refusing it as
//! drift), clears a policy violation as a ROLLBACK step does, and refuses a run stopped in the
//! middle of a step.

use std::path::PathBuf;

use tnh_conductor::kernel::lock::RunLock;

use crate::kernel_support::{RunRepo, assert_contiguous, event_types, first_event};
use crate::support::{conductor, stderr_text, stdout_text};

/// A run of `workflow` (a fixture of `tests/fixtures/runs/`) that waits at its blocking gate.
fn waiting_run(repo: &RunRepo, workflow: &str) -> (String, PathBuf) {
    let (code, result, output) = repo.run(&repo.workflow(workflow), &[]);
    assert_eq!(code, Some(3), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap().to_owned();
    let worktree = PathBuf::from(result["worktree"].as_str().unwrap());
    (run_id, worktree)
}

fn operator_rollbacks(events: &[serde_json::Value]) -> Vec<&serde_json::Value> {
    events
        .iter()
        .filter(|event| event["event_type"] == "rollback_completed" && event["by"] == "operator")
        .collect()
}

#[test]
fn a_rollback_at_a_gate_is_recorded_and_resume_continues_from_it_instead_of_refusing_drift() {
    let repo = RunRepo::new();
    let (run_id, worktree) = waiting_run(&repo, "gate.yaml");
    assert!(worktree.join("feature.txt").is_file());
    std::fs::write(worktree.join("by-hand.txt"), "edited by hand\n").unwrap();
    let refused = repo.conductor_exits(&["resume", &run_id], 2);
    assert!(
        stderr_text(&refused).contains("tnh-conductor rollback RUN_ID --target pre_step"),
        "the drift hint names the way out: {}",
        stderr_text(&refused)
    );

    let rolled = repo.conductor(&["rollback", &run_id, "--target", "pre_step"]);

    assert_eq!(rolled.status.code(), Some(0), "{}", stderr_text(&rolled));
    let stdout = stdout_text(&rolled);
    assert!(stdout.contains("record: rollbacks/1.json"), "{stdout}");
    assert!(stdout.contains("2 files changed"), "{stdout}");
    assert!(
        stderr_text(&rolled).contains(
            "gate `review` still waits, but the change it showed is gone: deciding it now needs `--accept-drift`"
        ),
        "{}",
        stderr_text(&rolled)
    );
    assert!(!worktree.join("feature.txt").exists());
    assert!(!worktree.join("by-hand.txt").exists());
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let [event] = operator_rollbacks(&events)[..] else {
        panic!("one operator rollback: {:?}", event_types(&events));
    };
    assert_eq!(
        (&event["target"], &event["record"], &event["step_id"]),
        (
            &serde_json::json!("pre_step"),
            &serde_json::json!("rollbacks/1.json"),
            &serde_json::Value::Null
        )
    );
    let record = repo.json(&run_id, "rollbacks/1.json");
    assert_eq!(record["before"]["files_changed"], 2);
    let state = repo.json(&run_id, "state.json");
    assert_eq!(state["events_seq"], event["seq"], "checkpointed after it");
    let show = stdout_text(&repo.conductor(&["runs", "show", &run_id]));
    assert!(
        show.contains("rollback by the operator to pre_step: 2 files changed, +2 -0 undone"),
        "{show}"
    );

    // No drift: the run goes on from the rolled-back worktree.
    repo.conductor_exits(&["resume", &run_id], 3);
    assert_eq!(
        repo.json(&run_id, "status.json")["reason"],
        "waiting for a human decision",
        "a resume that finds the gate undecided still says why the run waits"
    );
    // The gate showed feature.txt, which the rollback undid: approving needs --accept-drift.
    repo.conductor_exits(
        &[
            "gate",
            "approve",
            &run_id,
            "--as",
            "lead",
            "--resume",
            "--accept-drift",
        ],
        0,
    );
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    assert!(event_types(&events).contains(&"drift_accepted".to_owned()));
    assert!(!worktree.join("feature.txt").exists());
}

#[test]
fn a_rollback_while_a_gate_waits_needs_accept_drift_to_be_decided() {
    let repo = RunRepo::new();
    let (run_id, worktree) = waiting_run(&repo, "gate.yaml");
    let shown = repo.json(&run_id, "state.json")["fingerprint"].clone();
    let before = repo.conductor_exits(&["gate", "show", &run_id], 0);
    assert!(!stdout_text(&before).contains("ROLLED BACK"));
    repo.conductor_exits(&["rollback", &run_id, "--target", "pre_run"], 0);
    assert!(!worktree.join("feature.txt").exists());
    let events = repo.events(&run_id);
    assert_eq!(operator_rollbacks(&events)[0]["checkpoint_before"], shown);
    // `gate show` says the change it shows is gone, and what a decision needs.
    let after = repo.conductor_exits(&["gate", "show", &run_id], 0);
    let after = stdout_text(&after);
    assert!(
        after.contains(&format!(
            "ROLLED BACK: the operator rolled the worktree back to pre_run at {} (rollbacks/1.json), after this gate was requested",
            operator_rollbacks(&events)[0]["timestamp"].as_str().unwrap()
        )) && after.contains("needs `--accept-drift`"),
        "{after}"
    );
    let events_before = events.len();

    // Either decision is refused: the reviewer was shown a change that no longer exists.
    for decision in ["approve", "reject"] {
        let refused =
            repo.conductor_exits(&["gate", decision, &run_id, "--as", "lead", "--resume"], 2);
        let stderr = stderr_text(&refused);
        assert!(
            stderr.contains(&format!(
                "the worktree of run `{run_id}` was rolled back by the operator (to pre_run, rollbacks/1.json) after gate `review` showed it"
            )) && stderr.contains("`--accept-drift` decides on what the worktree holds now"),
            "{stderr}"
        );
        assert_eq!(
            repo.events(&run_id).len(),
            events_before,
            "nothing recorded"
        );
        assert_eq!(
            repo.json(&run_id, "status.json")["lifecycle_state"],
            "waiting"
        );
    }

    repo.conductor_exits(
        &[
            "gate",
            "approve",
            &run_id,
            "--as",
            "lead",
            "--resume",
            "--accept-drift",
        ],
        0,
    );
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let accepted = first_event(&events, "drift_accepted");
    assert_eq!(accepted["recorded"], shown, "from what the gate showed");
    assert_ne!(accepted["found"], shown);
    assert_eq!(
        std::fs::read_to_string(repo.run_dir(&run_id).join("final-state.txt")).unwrap(),
        "completed success review\n"
    );
}

#[test]
fn a_rollback_is_refused_while_another_process_holds_the_run() {
    let repo = RunRepo::new();
    let (run_id, worktree) = waiting_run(&repo, "gate.yaml");
    let events_before = repo.events(&run_id).len();
    // The lock a driving `run`, `resume` or gate decision holds.
    let held = RunLock::acquire(&repo.run_dir(&run_id).join("lock")).unwrap();

    let refused = repo.conductor(&["rollback", &run_id]);

    assert_eq!(refused.status.code(), Some(2), "{}", stderr_text(&refused));
    let stderr = stderr_text(&refused);
    assert!(
        stderr.contains(&format!(
            "run is being driven by process {}",
            std::process::id()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("hint: wait for that process"), "{stderr}");
    assert!(
        worktree.join("feature.txt").is_file(),
        "nothing rolled back"
    );
    assert!(!repo.run_dir(&run_id).join("rollbacks").exists());
    assert_eq!(repo.events(&run_id).len(), events_before);

    drop(held);
    repo.conductor_exits(&["rollback", &run_id], 0);
    assert!(!worktree.join("feature.txt").exists());
}

#[test]
fn a_rollback_clears_the_runs_policy_violation_as_a_rollback_step_does() {
    let repo = RunRepo::new();
    let workflow = repo.workflow_text(
        "violating_gate.yaml",
        r#"workflow_id: violating_gate
version: 1
description: an agent breaks the policy, then a gate waits
entry_step: implement
defaults:
  policy:
    forbidden_paths: [".github/**"]
steps:
  - id: implement
    opcode: RUN_AGENT
    agent: scripted
    prompt: |
      WRITE .github/workflows/ci.yml: on: push
    routes:
      "*": review
  - id: review
    opcode: GATE
    gate: requires_approval
    routes:
      gate_approved: STOP
      "*": failed
  - id: failed
    opcode: STOP
    outcome: failure
"#,
    );
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(3), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap().to_owned();
    let violation = repo.json(&run_id, "state.json")["safety"]["policy_violation"].clone();
    assert!(
        violation
            .as_str()
            .is_some_and(|text| text.contains(".github/workflows/ci.yml")),
        "{violation}"
    );

    let rolled = repo.conductor(&["rollback", &run_id, "--target", "pre_step"]);

    assert_eq!(rolled.status.code(), Some(0), "{}", stderr_text(&rolled));
    assert!(
        stderr_text(&rolled).contains("no longer makes EVALUATE unsafe"),
        "{}",
        stderr_text(&rolled)
    );
    assert_eq!(
        repo.json(&run_id, "state.json")["safety"]["policy_violation"],
        serde_json::Value::Null
    );
    let events = repo.events(&run_id);
    let event = operator_rollbacks(&events)[0];
    assert_eq!(event["policy_violation_cleared"], violation);
    // The journal says where the run stands and that its changes were undone.
    let journal = stdout_text(&repo.conductor(&["journal"]));
    assert!(
        journal.contains(&format!(
            "`{run_id}`: waiting — waiting for a human decision (rolled back by the operator to pre_step)"
        )),
        "{journal}"
    );
}

#[test]
fn a_run_stopped_in_the_middle_of_a_step_is_refused_and_left_for_resume() {
    let repo = RunRepo::new();
    let workflow = repo.workflow("crash.yaml");
    // Where the second step starts, in a run nobody kills.
    let (code, result, _) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(0), "{result}");
    let reference = repo.events(result["run_id"].as_str().unwrap());
    let second_start = reference
        .iter()
        .filter(|event| event["event_type"] == "step_started")
        .nth(1)
        .unwrap()["seq"]
        .as_u64()
        .unwrap();
    repo.run_killed_at(&workflow, second_start);
    let run_id = std::fs::read_dir(repo.path().join(".tnh/run"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .find(|id| *id != result["run_id"].as_str().unwrap())
        .unwrap();
    let worktree = repo.path().join(".tnh/worktrees").join(&run_id);
    let events_before = repo.events(&run_id).len();

    let refused = repo.conductor(&["rollback", &run_id, "--target", "pre_run"]);

    assert_eq!(refused.status.code(), Some(2), "{}", stderr_text(&refused));
    let stderr = stderr_text(&refused);
    assert!(
        stderr.contains("stopped in the middle of step `extend` (visit 1)"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("`tnh-conductor resume {run_id}`")),
        "{stderr}"
    );
    assert!(worktree.join("hello.txt").is_file(), "nothing rolled back");
    assert_eq!(repo.events(&run_id).len(), events_before);

    repo.conductor_exits(&["resume", &run_id], 0);
    first_event(&repo.events(&run_id), "run_resumed");
}

#[test]
fn a_rollback_of_an_ended_run_is_recorded_after_its_end_and_leaves_its_state() {
    let repo = RunRepo::new();
    let (code, result, _) = repo.run(&repo.workflow("crash.yaml"), &[]);
    assert_eq!(code, Some(0), "{result}");
    let run_id = result["run_id"].as_str().unwrap().to_owned();
    let state_before = repo.json(&run_id, "state.json");

    let rolled = repo.conductor(&["rollback", &run_id]);

    assert_eq!(rolled.status.code(), Some(0), "{}", stderr_text(&rolled));
    assert!(
        !stderr_text(&rolled).contains("continues"),
        "{}",
        stderr_text(&rolled)
    );
    assert_eq!(repo.json(&run_id, "state.json"), state_before);
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let types = event_types(&events);
    assert_eq!(
        types[types.len() - 3..],
        ["run_completed", "rollback_started", "rollback_completed"]
    );
    let worktree = PathBuf::from(result["worktree"].as_str().unwrap());
    assert!(!worktree.join("hello.txt").exists());
}

/// An operator `rollback` killed after it had reset the worktree left no
/// record of what it undid (no event, no `rollbacks/N.json`), and the retry recorded "no
/// changes" — the record a gate then cites as the rollback. Now `rollback_started` (target,
/// snapshot, HEAD and file tree before) is recorded before the reset, and the retry's record
/// and event name the interrupted attempt with the HEAD it undid.
#[test]
fn a_rollback_killed_after_resetting_the_worktree_is_recorded_and_the_retry_names_it() {
    let repo = RunRepo::new();
    let (run_id, worktree) = waiting_run(&repo, "gate.yaml");
    // The agent's work, committed on the work branch.
    crate::support::git_in(&worktree, &["add", "-A"]);
    crate::support::git_in(&worktree, &["commit", "-qm", "agent"]);
    let agent_head = crate::support::git_in(&worktree, &["rev-parse", "HEAD"]);
    // A git that SIGKILLs the conductor as soon as its `reset --hard` has run.
    let path = crate::kernel_support::git_on_path_when(
        &repo,
        "case \" $* \" in *\" reset \"*\" --hard \"*) true;; *) false;; esac",
        "\"$REAL_GIT\" \"$@\"; kill -9 $PPID; exit 1",
    );

    let killed = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["rollback", &run_id])
        .env("PATH", path)
        .output()
        .unwrap();

    assert_eq!(killed.status.code(), None, "{}", stderr_text(&killed));
    assert_ne!(
        crate::support::git_in(&worktree, &["rev-parse", "HEAD"]),
        agent_head,
        "the reset ran before the kill"
    );
    assert!(!repo.run_dir(&run_id).join("rollbacks").exists());
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let started = events.last().unwrap();
    assert_eq!(started["event_type"], "rollback_started", "{started}");
    assert_eq!(started["by"], "operator");
    assert_eq!(started["target"], "pre_run");
    assert_eq!(started["head_before"], agent_head.as_str());
    assert!(started["tree_before"].is_string(), "{started}");
    assert!(
        started["snapshot"]
            .as_str()
            .unwrap()
            .ends_with(&format!("{run_id}/pre_run")),
        "{started}"
    );

    let show = stdout_text(&repo.conductor(&["runs", "show", &run_id]));
    assert!(
        show.contains(&format!(
            "rollback by the operator to pre_run: started, never completed (HEAD was {} then)",
            &agent_head[..12]
        )),
        "{show}"
    );

    let retried = repo.conductor(&["rollback", &run_id]);

    assert_eq!(retried.status.code(), Some(0), "{}", stderr_text(&retried));
    assert!(
        stderr_text(&retried).contains("an earlier rollback of this run (to pre_run")
            && stderr_text(&retried).contains(&agent_head[..12]),
        "{}",
        stderr_text(&retried)
    );
    let record = repo.json(&run_id, "rollbacks/1.json");
    let attempt = &record["interrupted_attempt"];
    assert_eq!(attempt["started_seq"], started["seq"], "{record}");
    assert_eq!(attempt["head_before"], agent_head.as_str());
    assert_eq!(attempt["tree_before"], started["tree_before"]);
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let [completed] = operator_rollbacks(&events)[..] else {
        panic!("{:?}", event_types(&events));
    };
    assert_eq!(completed["interrupted_attempt"], *attempt);
    // The records match their published schemas.
    let validator = |name: &str| {
        let output = conductor().args(["schema", name]).output().unwrap();
        jsonschema::validator_for(&serde_json::from_slice(&output.stdout).unwrap()).unwrap()
    };
    assert!(validator("rollback-record").is_valid(&record), "{record}");
    let event_schema = validator("event");
    for event in &events {
        assert!(event_schema.is_valid(event), "{event}");
    }

    // A rollback after a completed one names no interrupted attempt.
    repo.conductor_exits(&["rollback", &run_id], 0);
    assert!(repo.json(&run_id, "rollbacks/2.json")["interrupted_attempt"].is_null());
}
