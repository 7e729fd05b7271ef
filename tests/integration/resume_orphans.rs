//! `resume` ends what is left of a crashed driver's processes before it checks anything it may
//! refuse for: a refused `resume` leaves no agent running without a time limit, and
//! `--accept-drift` keeps no more than the operator was shown.

use std::collections::BTreeSet;

use crate::kernel_support::{RunRepo, assert_contiguous, first_event};
use crate::support::{fixture, stderr_text};

/// A repository whose one agent step creates tags, SIGKILLs its conductor and goes on creating
/// tags (`tags-then-kill-conductor.sh`); returns it, the run id and the agent's pid.
pub(crate) fn killed_while_tagging() -> (RunRepo, String, i32) {
    let repo = RunRepo::new();
    let agent = fixture("agents/zoo").join("tags-then-kill-conductor.sh");
    let config = repo.path().join(".tnh/config.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!(
            "{text}  tagger:\n    kind: command\n    argv: [bash, \"{}\"]\n",
            agent.display()
        ),
    )
    .unwrap();
    let workflow = repo.workflow_text(
        "tagger.yaml",
        "workflow_id: tagger\nversion: 1\ndescription: an agent that outlives its conductor\nentry_step: agent\ndefaults:\n  limits: {timeout: 20s, idle_timeout: 10s}\nsteps:\n  - id: agent\n    opcode: RUN_AGENT\n    agent: tagger\n    prompt: go\n    routes:\n      \"*\": done\n  - id: done\n    opcode: STOP\n    reason: done\n",
    );
    let (code, _, output) = repo.run(&workflow, &[]);
    assert_eq!(code, None, "killed by its agent: {}", stderr_text(&output));
    let run_id = repo.only_run_id();
    let pid: i32 =
        std::fs::read_to_string(repo.run_dir(&run_id).join("artifacts/agent/1/agent.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
    (repo, run_id, pid)
}

/// Kills a pid on drop: what a failed test would otherwise leave running.
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

fn tags(repo: &RunRepo) -> BTreeSet<String> {
    repo.repo
        .git(&["tag", "--list"])
        .lines()
        .map(|tag| format!("refs/tags/{tag}"))
        .collect()
}

/// The refusal (repository changes since the step started) used to come
/// before the orphan was killed, so the agent went on tagging without supervision, and
/// `--accept-drift` then kept as the operator's the tags it made after the operator was shown
/// the list.
#[test]
fn a_refused_resume_has_ended_the_orphan_and_accept_drift_keeps_only_what_was_listed() {
    let (repo, run_id, pid) = killed_while_tagging();
    let _cleanup = KillOnDrop(pid);

    let refused = repo.conductor_exits(&["resume", &run_id], 2);

    assert!(
        !crate::runner_support::is_alive(pid),
        "the orphaned agent {pid} outlived the refused resume"
    );
    let stderr = stderr_text(&refused);
    let listed: BTreeSet<String> = stderr
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- `"))
        .filter_map(|line| line.split_once('`').map(|(name, _)| name.to_owned()))
        .collect();
    let found = tags(&repo);
    assert!(found.contains("refs/tags/t0"), "{found:?}");
    assert_eq!(listed, found, "the refusal lists every tag:\n{stderr}");
    assert!(
        repo.run_dir(&run_id)
            .join("artifacts/agent/1/stopped_orphans.json")
            .is_file(),
        "the pids killed are kept for the record"
    );

    let accepted = repo.conductor_exits(&["resume", "--accept-drift", &run_id], 0);

    assert!(!stderr_text(&accepted).contains("panicked"));
    assert_eq!(tags(&repo), found, "no tag made since the refusal");
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let kept: BTreeSet<String> = first_event(&events, "repository_changes_kept")["ref_changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|change| change["refname"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(kept, listed, "kept exactly what the operator was shown");
    let interrupted = first_event(&events, "step_interrupted");
    assert!(
        interrupted["killed_orphans"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!(pid)),
        "the pid killed by the refused resume is on the record: {interrupted}"
    );
    assert!(
        !repo
            .run_dir(&run_id)
            .join("artifacts/agent/1/stopped_orphans.json")
            .exists(),
        "the record is spent"
    );
}

/// Any refusal comes after the orphans are ended: here the workflow file is gone.
#[test]
fn a_resume_refused_for_a_missing_workflow_has_ended_the_orphan() {
    let (repo, run_id, pid) = killed_while_tagging();
    let _cleanup = KillOnDrop(pid);
    std::fs::remove_file(repo.path().join("wf/tagger.yaml")).unwrap();

    let refused = repo.conductor_exits(&["resume", &run_id], 2);

    assert!(
        stderr_text(&refused).contains("which is gone"),
        "{}",
        stderr_text(&refused)
    );
    assert!(
        !crate::runner_support::is_alive(pid),
        "the orphaned agent {pid} outlived the refused resume"
    );
    let found = tags(&repo);
    assert_eq!(tags(&repo), found);
}
