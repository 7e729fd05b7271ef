//! A planner process is guarded like an agent: a `command` (`claude`, `codex`) planner runs in
//! the run's worktree, so EVALUATE records the guard before it starts (saved as
//! `guard_state.json` while it runs), puts back what it moved and records what it changed as
//! violations; and a planner's change is the planner's even when the EVALUATE is interrupted
//! (Ctrl-C, SIGKILL, a crash after the violation was recorded): `resume` records it as the
//! visit's `planner_changed_worktree` violation, never as operator drift, and the run cannot
//! end in success.

use std::io::Read;
use std::process::Stdio;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::kernel_support::{RunRepo, first_event};
use crate::planner_limits::{JUDGED, calls, script_planner};
use crate::support::{conductor, stderr_text};

/// The `policy_violation` events of a visit, as their `violation` objects.
fn violations(repo: &RunRepo, run_id: &str, step: &str, visit: u64) -> Vec<serde_json::Value> {
    repo.events(run_id)
        .into_iter()
        .filter(|event| {
            event["event_type"] == "policy_violation"
                && event["step_id"] == step
                && event["visit"] == visit
        })
        .map(|event| event["violation"].clone())
        .collect()
}

fn has_class(violations: &[serde_json::Value], class: &str, path_part: &str) -> bool {
    violations.iter().any(|violation| {
        violation["class"] == class
            && violation["path"]
                .as_str()
                .unwrap_or_default()
                .contains(path_part)
    })
}

/// Kills a planner a failed test left behind, if its pid still names a live process.
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if crate::runner_support::is_alive(self.0) {
            let _ = kill(Pid::from_raw(self.0), Signal::SIGKILL);
        }
    }
}

/// The pid a planner wrote to `.tnh/planner.pid` before it killed its conductor.
fn planner_pid(repo: &RunRepo) -> i32 {
    std::fs::read_to_string(repo.path().join(".tnh/planner.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Shell lines that find the operator's repository from the worktree the planner runs in.
const FIND_REPOSITORY: &str =
    "common=$(git rev-parse --path-format=absolute --git-common-dir)\nrepo=$(dirname \"$common\")";

/// A `command` planner that edits the operator's checkout, plants a hook, moves `main` and
/// hides a file it writes in the worktree through `.git/info/exclude`, then answers `success`:
/// everything is found, the refs and git files are put back, and the run cannot end in success.
#[test]
fn a_planner_that_moves_main_plants_a_hook_and_hides_a_file_is_caught_and_put_back() {
    let repo = RunRepo::new();
    let main_before = repo.repo.git(&["rev-parse", "main"]);
    let exclude_before =
        std::fs::read_to_string(repo.path().join(".git/info/exclude")).unwrap_or_default();
    script_planner(
        &repo,
        &format!(
            "{FIND_REPOSITORY}
echo 'edited by the planner' >> \"$repo/README.md\"
printf '#!/bin/sh\\nexit 0\\n' > \"$common/hooks/post-checkout\"
chmod +x \"$common/hooks/post-checkout\"
planted=$(git -c user.name=p -c user.email=p@example.com commit-tree 'HEAD^{{tree}}' -p HEAD -m planted)
git update-ref refs/heads/main \"$planted\"
echo hidden.txt >> \"$common/info/exclude\"
echo 'the planner wrote this' > hidden.txt
echo '{{\"status\": \"success\"}}'"
        ),
        "    attempts: 1\n",
    );
    let workflow = repo.workflow_text("judged.yaml", JUDGED);

    let (run, _) = repo.run_exits(&workflow, &[], 1);
    let run_id = run.as_str();
    assert_eq!(repo.repo.git(&["rev-parse", "main"]), main_before);
    assert!(!repo.path().join(".git/hooks/post-checkout").exists());
    let exclude =
        std::fs::read_to_string(repo.path().join(".git/info/exclude")).unwrap_or_default();
    assert!(!exclude.contains("hidden.txt"), "{exclude}");
    assert!(exclude.starts_with(&exclude_before), "{exclude}");
    let found = violations(&repo, run_id, "evaluate", 1);
    assert!(
        has_class(&found, "protected_branch_violation", "refs/heads/main"),
        "{found:?}"
    );
    assert!(
        has_class(&found, "forbidden_operation", "hooks/post-checkout"),
        "{found:?}"
    );
    assert!(
        has_class(&found, "forbidden_operation", "info/exclude"),
        "{found:?}"
    );
    assert!(has_class(&found, "path_escape", "README.md"), "{found:?}");
    assert!(
        has_class(&found, "planner_changed_worktree", "hidden.txt"),
        "{found:?}"
    );
    let decision = repo.json(run_id, "artifacts/evaluate/1/planner_decision.json");
    assert_eq!(decision["status"], "unsafe", "{decision}");
    let summary = repo.json(run_id, "artifacts/evaluate/1/policy_summary.json");
    let change = &summary["guard_report"]["ref_changes"][0];
    assert_eq!(change["refname"], "refs/heads/main", "{summary}");
    assert_eq!(change["restored"], true, "{summary}");
    let manifest = repo.json(run_id, "artifacts/evaluate/1/manifest.json");
    assert!(
        manifest["artifacts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|entry| entry["role"] == "policy_summary"),
        "{manifest}"
    );
    assert!(
        !repo
            .run_dir(run_id)
            .join("artifacts/evaluate/1/guard_state.json")
            .exists()
    );
    let end = std::fs::read_to_string(repo.run_dir(run_id).join("final-state.txt")).unwrap();
    assert!(end.starts_with("failed failure"), "{end}");
}

/// The built-in `rules` planner starts no process: no guard is recorded around it.
#[test]
fn the_rules_planner_is_not_guarded() {
    let repo = RunRepo::new();
    let workflow = repo.workflow_text(
        "judged.yaml",
        &JUDGED.replace("planner: judge", "planner: rules"),
    );

    let (run, _) = repo.run_exits(&workflow, &[], 0);
    let run_id = run.as_str();
    let visit = repo.run_dir(run_id).join("artifacts/evaluate/1");
    assert!(visit.join("planner_decision.json").is_file());
    assert!(!visit.join("policy_summary.json").exists());
    assert!(!visit.join("guard_state.json").exists());
}

/// The first call writes `sneaky.txt` in the worktree (and runs `more`), records its pid and
/// kills the conductor with SIGKILL, then sleeps; later calls answer `success`.
fn killer_planner(repo: &RunRepo, more: &str) {
    let pid = repo.path().join(".tnh/planner.pid");
    script_planner(
        repo,
        &format!(
            "if [ \"$(wc -l < \"$(dirname \"$0\")/judge.calls\")\" -eq 1 ]; then
  echo 'planner was here' > sneaky.txt
  {more}
  echo $$ > \"{pid}.tmp\" && mv \"{pid}.tmp\" \"{pid}\"
  kill -9 $PPID
  exec sleep 600
fi
echo '{{\"status\": \"success\"}}'",
            pid = pid.display()
        ),
        "    attempts: 1\n",
    );
}

/// SIGKILL of the conductor while its planner writes into the worktree: `resume` stops the
/// orphan planner, takes the change for the planner's (a `planner_changed_worktree` violation
/// of the interrupted visit, no drift refusal), asks again, and the run cannot end in success.
#[test]
fn a_planner_change_found_after_a_crash_is_the_planners_not_drift() {
    let repo = RunRepo::new();
    killer_planner(&repo, "");
    let workflow = repo.workflow_text("judged.yaml", JUDGED);
    let killed = repo.conductor(&["-q", "run", workflow.to_str().unwrap()]);
    assert_eq!(killed.status.code(), None, "{}", stderr_text(&killed));
    let pid = planner_pid(&repo);
    let _cleanup = KillOnDrop(pid);
    let run_id = repo.only_run_id();

    let resumed = repo.conductor(&["resume", &run_id]);

    assert_eq!(resumed.status.code(), Some(1), "{}", stderr_text(&resumed));
    assert!(
        !crate::runner_support::is_alive(pid),
        "the planner survived"
    );
    let events = repo.events(&run_id);
    assert!(
        !events
            .iter()
            .any(|event| event["event_type"] == "drift_accepted"),
        "{events:?}"
    );
    let found = violations(&repo, &run_id, "evaluate", 1);
    assert!(
        has_class(&found, "planner_changed_worktree", "sneaky.txt"),
        "{found:?}"
    );
    let interrupted = first_event(&events, "step_interrupted");
    assert!(
        interrupted["killed_orphans"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!(pid)),
        "{interrupted}"
    );
    assert_eq!(calls(&repo), 2);
    let decision = repo.json(&run_id, "artifacts/evaluate/2/planner_decision.json");
    assert_eq!(decision["status"], "unsafe", "{decision}");
    let end = std::fs::read_to_string(repo.run_dir(&run_id).join("final-state.txt")).unwrap();
    assert!(end.starts_with("failed failure"), "{end}");
}

/// A planner that moved `main` before its conductor died: the saved guard state is checked on
/// resume as an agent's is — the orphan is stopped before the refusal that lists the moved
/// branch, `--put-back` restores it and records it as a violation of the interrupted
/// EVALUATE visit, which stays pending: no success.
#[test]
fn a_planner_that_moved_main_before_a_crash_is_checked_by_its_saved_guard_on_resume() {
    let repo = RunRepo::new();
    let main_before = repo.repo.git(&["rev-parse", "main"]);
    killer_planner(
        &repo,
        "planted=$(git -c user.name=p -c user.email=p@example.com commit-tree 'HEAD^{tree}' -p HEAD -m planted)\n  git update-ref refs/heads/main \"$planted\"",
    );
    let workflow = repo.workflow_text("judged.yaml", JUDGED);
    let killed = repo.conductor(&["-q", "run", workflow.to_str().unwrap()]);
    assert_eq!(killed.status.code(), None, "{}", stderr_text(&killed));
    let pid = planner_pid(&repo);
    let _cleanup = KillOnDrop(pid);
    let run_id = repo.only_run_id();
    assert!(
        repo.run_dir(&run_id)
            .join("artifacts/evaluate/1/guard_state.json")
            .is_file(),
        "no guard state saved while the planner ran"
    );
    assert_ne!(repo.repo.git(&["rev-parse", "main"]), main_before);

    let refused = repo.conductor(&["resume", &run_id]);

    assert_eq!(refused.status.code(), Some(2), "{}", stderr_text(&refused));
    assert!(
        stderr_text(&refused).contains("refs/heads/main"),
        "{}",
        stderr_text(&refused)
    );
    assert!(
        !crate::runner_support::is_alive(pid),
        "the planner survived"
    );

    let resumed = repo.conductor(&["resume", &run_id, "--put-back"]);

    assert_eq!(resumed.status.code(), Some(1), "{}", stderr_text(&resumed));
    assert_eq!(repo.repo.git(&["rev-parse", "main"]), main_before);
    let found = violations(&repo, &run_id, "evaluate", 1);
    assert!(
        has_class(&found, "protected_branch_violation", "refs/heads/main"),
        "{found:?}"
    );
    assert!(
        has_class(&found, "planner_changed_worktree", "sneaky.txt"),
        "{found:?}"
    );
    let decision = repo.json(&run_id, "artifacts/evaluate/2/planner_decision.json");
    assert_eq!(decision["status"], "unsafe", "{decision}");
    let end = std::fs::read_to_string(repo.run_dir(&run_id).join("final-state.txt")).unwrap();
    assert!(end.starts_with("failed failure"), "{end}");
}

/// Ctrl-C while the planner that wrote into the worktree still runs: its change is recorded
/// before the run stops (130), and `resume` goes on without calling it drift; the next
/// evaluation is `unsafe`.
#[test]
fn ctrl_c_during_a_planner_that_changed_the_worktree_records_the_change_first() {
    let repo = RunRepo::new();
    let fifo = repo.path().join(".tnh/planner.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    script_planner(
        &repo,
        &format!(
            "if [ \"$(wc -l < \"$(dirname \"$0\")/judge.calls\")\" -eq 1 ]; then
  echo 'planner was here' > sneaky.txt
  echo started > \"{fifo}\"
  exec sleep 600
fi
echo '{{\"status\": \"success\"}}'",
            fifo = fifo.display()
        ),
        "    timeout: 10m\n    attempts: 1\n",
    );
    let workflow = repo.workflow_text("judged.yaml", JUDGED);
    let child = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["run", "--json"])
        .arg(&workflow)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Opening the FIFO blocks until the planner has written the file and said so.
    let mut started = String::new();
    std::fs::File::open(&fifo)
        .unwrap()
        .read_to_string(&mut started)
        .unwrap();
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130), "{}", stderr_text(&output));
    let run_id = repo.only_run_id();
    let found = violations(&repo, &run_id, "evaluate", 1);
    assert!(
        has_class(&found, "planner_changed_worktree", "sneaky.txt"),
        "{found:?}"
    );

    let resumed = repo.conductor(&["resume", &run_id]);

    assert_eq!(resumed.status.code(), Some(1), "{}", stderr_text(&resumed));
    assert_eq!(
        violations(&repo, &run_id, "evaluate", 1).len(),
        found.len(),
        "recorded twice"
    );
    let decision = repo.json(&run_id, "artifacts/evaluate/2/planner_decision.json");
    assert_eq!(decision["status"], "unsafe", "{decision}");
    let end = std::fs::read_to_string(repo.run_dir(&run_id).join("final-state.txt")).unwrap();
    assert!(end.starts_with("failed failure"), "{end}");
}

/// The seq of the first `policy_violation` event of an uninterrupted run of `workflow`, in a
/// repository set up by `setup`.
fn violation_seq(setup: impl Fn(&RunRepo), workflow: &str) -> u64 {
    let repo = RunRepo::new();
    setup(&repo);
    let path = repo.workflow_text("judged.yaml", workflow);
    let (_, result, _) = repo.run(&path, &[]);
    let events = repo.events(result["run_id"].as_str().unwrap());
    first_event(&events, "policy_violation")["seq"]
        .as_u64()
        .unwrap()
}

fn writing_planner(repo: &RunRepo) {
    script_planner(
        repo,
        "echo 'planner was here' > sneaky.txt\necho '{\"status\": \"success\"}'",
        "    attempts: 1\n",
    );
}

/// The conductor dies right after EVALUATE recorded the planner's change as a violation:
/// `resume` does not call the change drift, and the recorded violation is carried into the
/// run's safety state — the next evaluation is `unsafe`, the run no success.
#[test]
fn a_violation_recorded_before_a_crash_is_kept_on_resume() {
    let seq = violation_seq(writing_planner, JUDGED);
    let repo = RunRepo::new();
    writing_planner(&repo);
    let workflow = repo.workflow_text("judged.yaml", JUDGED);
    repo.run_killed_at(&workflow, seq);
    let run_id = repo.only_run_id();
    assert!(
        !repo
            .run_dir(&run_id)
            .join("artifacts/evaluate/1/manifest.json")
            .exists()
    );

    let resumed = repo.conductor(&["resume", &run_id]);

    assert_eq!(resumed.status.code(), Some(1), "{}", stderr_text(&resumed));
    assert_eq!(violations(&repo, &run_id, "evaluate", 1).len(), 1);
    let decision = repo.json(&run_id, "artifacts/evaluate/2/planner_decision.json");
    assert_eq!(decision["status"], "unsafe", "{decision}");
    assert!(
        decision["risk_flags"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("policy_violation")),
        "{decision}"
    );
    let end = std::fs::read_to_string(repo.run_dir(&run_id).join("final-state.txt")).unwrap();
    assert!(end.starts_with("failed failure"), "{end}");
}

/// A planner's change is recorded as its violation and taken into the checkpoint, not left as
/// a difference from it: a conductor that dies after the `unsafe` evaluation routed on is
/// resumed without a drift refusal, and the run still ends in failure.
#[test]
fn a_crash_after_a_planner_changed_the_worktree_is_not_drift() {
    let seq = {
        let repo = RunRepo::new();
        writing_planner(&repo);
        let path = repo.workflow_text("judged.yaml", JUDGED);
        let (_, result, _) = repo.run(&path, &[]);
        let events = repo.events(result["run_id"].as_str().unwrap());
        events
            .iter()
            .find(|event| event["event_type"] == "step_started" && event["step_id"] == "failed")
            .expect("the failure stop started")["seq"]
            .as_u64()
            .unwrap()
    };
    let repo = RunRepo::new();
    writing_planner(&repo);
    let workflow = repo.workflow_text("judged.yaml", JUDGED);
    repo.run_killed_at(&workflow, seq);
    let run_id = repo.only_run_id();

    let resumed = repo.conductor(&["resume", &run_id]);

    assert_eq!(resumed.status.code(), Some(1), "{}", stderr_text(&resumed));
    assert_eq!(calls(&repo), 1);
    let end = std::fs::read_to_string(repo.run_dir(&run_id).join("final-state.txt")).unwrap();
    assert!(end.starts_with("failed failure"), "{end}");
}
