//! The reliability suite: real `tnh-conductor` processes on real repositories under the
//! conditions that break orchestrators — many runs at once in one repository, agents that
//! misbehave in every way we know, and a run directory that fills up or turns read-only in the
//! middle of a run.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::kernel_support::{RunRepo, assert_contiguous, event_types};
use crate::support::{conductor, fixture, git_in, stderr_text, stdout_text};

/// Every live process that carries the run's `TNH_RUN_ID` (agents, validators, their children,
/// escapees that left the process group).
fn processes_of_run(run_id: &str) -> Vec<i32> {
    tnh_conductor::runner::processes_with_variable("TNH_RUN_ID", run_id)
}

/// Adds lines to the repository's `.tnh/config.yaml`.
fn append_config(repo: &RunRepo, text: &str) {
    let path = repo.path().join(".tnh/config.yaml");
    let config = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{config}{text}")).unwrap();
}

/// The one run directory of a repository (for runs whose result was not printed).
fn only_run_id(repo: &RunRepo) -> String {
    let mut ids: Vec<String> = std::fs::read_dir(repo.path().join(".tnh/run"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| tnh_conductor::artifacts::is_run_id(name))
        .collect();
    assert_eq!(ids.len(), 1, "expected exactly one run directory: {ids:?}");
    ids.remove(0)
}

/// Output that must not appear when a failure is reported cleanly.
fn assert_no_panic(what: &str, output: &Output) {
    let stderr = stderr_text(output);
    for marker in ["panicked", "RUST_BACKTRACE", "stack backtrace"] {
        assert!(!stderr.contains(marker), "{what} panicked:\n{stderr}");
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Concurrency: many runs at once in one repository.
// ---------------------------------------------------------------------------------------------

const PARALLEL_RUNS: usize = 8;

const PARALLEL_WORKFLOW: &str = r#"workflow_id: parallel
version: 1
description: an agent edit, a validation and a STOP, started many times at once
entry_step: write
params:
  token: {type: string, required: true}
steps:
  - id: write
    opcode: RUN_AGENT
    agent: scripted
    prompt: |
      WRITE result.txt: ${params.token} ${run_id}
      SAY wrote ${params.token}
    routes:
      completed: check
      "*": failed
  - id: check
    opcode: RUN_VALIDATION
    run: [own_result]
    routes:
      completed: done
      "*": failed
  - id: done
    opcode: STOP
  - id: failed
    opcode: STOP
    outcome: failure
"#;

#[test]
fn eight_runs_started_at_once_in_one_repository_stay_apart() {
    let repo = RunRepo::new();
    append_config(
        &repo,
        &format!(
            "validators:\n  own_result: {{argv: [sh, \"{}\"]}}\n",
            fixture("reliability/own-result.sh").display()
        ),
    );
    // Every run's checkout is looked at after them all.
    append_config(&repo, "retention:\n  finished_checkouts: 8\n");
    // The operator's own exclude rule must survive the runs adding theirs at the same time.
    let exclude = repo.path().join(".git/info/exclude");
    std::fs::write(&exclude, "operator-notes.txt\n").unwrap();
    repo.repo.write("operator-notes.txt", "mine\n");
    let workflow = repo.workflow_text("parallel.yaml", PARALLEL_WORKFLOW);
    let head = repo.repo.git(&["rev-parse", "HEAD"]);
    let operator_status = repo
        .repo
        .git(&["status", "--porcelain", "--untracked-files=all"])
        .lines()
        .filter(|line| !line.starts_with("?? .tnh/"))
        .collect::<Vec<_>>()
        .join("\n");

    // All processes are spawned before any is waited for.
    let tokens: Vec<String> = (0..PARALLEL_RUNS)
        .map(|index| format!("token-{index}"))
        .collect();
    let children: Vec<_> = tokens
        .iter()
        .map(|token| {
            conductor()
                .arg("--repo")
                .arg(repo.path())
                .args(["run", "--json", "-p", &format!("token={token}")])
                .arg(&workflow)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outputs: Vec<Output> = children
        .into_iter()
        .map(|child| child.wait_with_output().unwrap())
        .collect();

    let mut run_ids = std::collections::BTreeSet::new();
    let mut worktrees = std::collections::BTreeSet::new();
    let mut runs = Vec::new();
    for (token, output) in tokens.iter().zip(&outputs) {
        let stderr = stderr_text(output);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{token}: {}\n{stderr}",
            stdout_text(output)
        );
        assert!(
            !stderr.to_lowercase().contains("lock") && !stderr.contains("error"),
            "{token}: {stderr}"
        );
        let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(result["state"], "completed", "{token}: {result}");
        let run_id = result["run_id"].as_str().unwrap().to_owned();
        let worktree = PathBuf::from(result["worktree"].as_str().unwrap());
        assert_eq!(worktree, repo.path().join(".tnh/worktrees").join(&run_id));
        run_ids.insert(run_id.clone());
        worktrees.insert(worktree.clone());
        runs.push((token.clone(), run_id, worktree));
    }
    assert_eq!(
        run_ids.len(),
        PARALLEL_RUNS,
        "run ids collided: {run_ids:?}"
    );
    assert_eq!(worktrees.len(), PARALLEL_RUNS, "worktrees collided");

    for (token, run_id, worktree) in &runs {
        // The run directory speaks of its own run only, without gaps.
        let events = repo.events(run_id);
        assert_contiguous(&events);
        for event in &events {
            assert_eq!(event["run_id"], run_id.as_str(), "{token}: {event}");
        }
        let types = event_types(&events);
        assert_eq!(types.first().map(String::as_str), Some("run_started"));
        assert_eq!(types.last().map(String::as_str), Some("run_completed"));
        assert_eq!(
            events[0]["params"]["token"],
            token.as_str(),
            "the run recorded another run's parameters"
        );
        let metadata = repo.json(run_id, "metadata.json");
        assert_eq!(metadata["run_id"], run_id.as_str());
        assert_eq!(metadata["worktree_path"], worktree.display().to_string());
        assert_eq!(
            repo.json(run_id, "artifacts/check/1/validation_report.json")["outcome"],
            "completed",
            "{token}: the validator saw another run's result"
        );
        assert_eq!(
            std::fs::read_to_string(repo.run_dir(run_id).join("final-state.txt")).unwrap(),
            "completed success done\n"
        );

        // The worktree holds its own change and nothing of the others'.
        assert_eq!(
            std::fs::read_to_string(worktree.join("result.txt")).unwrap(),
            format!("{token} {run_id}")
        );
        // Committed on its own branch at its success STOP, on the common base.
        assert_eq!(
            git_in(
                worktree,
                &["status", "--porcelain", "--untracked-files=all"]
            ),
            "",
            "{token}: unexpected changes in its worktree"
        );
        assert_eq!(
            git_in(worktree, &["rev-parse", "--abbrev-ref", "HEAD"]),
            format!("tnh/parallel/{run_id}")
        );
        assert_eq!(git_in(worktree, &["rev-parse", "HEAD^@"]), head);
        assert_eq!(
            git_in(worktree, &["diff", "--name-only", &head, "HEAD"]),
            "result.txt",
            "{token}: its commit holds another run's change"
        );
        assert_eq!(
            git_in(worktree, &["rev-parse", "HEAD"]),
            metadata["result_commit"].as_str().unwrap()
        );
    }

    // The operator's checkout and branch are untouched, and so is their exclude rule.
    assert_eq!(
        repo.repo.git(&["rev-parse", "--abbrev-ref", "HEAD"]),
        "main"
    );
    assert_eq!(repo.repo.git(&["rev-parse", "HEAD"]), head);
    assert_eq!(
        repo.repo
            .git(&["status", "--porcelain", "--untracked-files=all"]),
        operator_status
    );
    assert!(!repo.path().join("result.txt").exists());
    let exclude = std::fs::read_to_string(&exclude).unwrap();
    assert!(
        exclude.lines().any(|line| line == "operator-notes.txt"),
        "the operator's exclude rule was lost:\n{exclude}"
    );
    assert_eq!(
        exclude.lines().filter(|line| *line == "/.tnh/").count(),
        1,
        "{exclude}"
    );
    let branches = repo.repo.git(&["branch", "--list", "tnh/parallel/*"]);
    assert_eq!(branches.lines().count(), PARALLEL_RUNS, "{branches}");
}

// ---------------------------------------------------------------------------------------------
// 2. The misbehaving-agent zoo through the whole kernel.
// ---------------------------------------------------------------------------------------------

/// One zoo agent run as a one-step workflow.
struct ZooCase<'a> {
    /// The agent's argv (`zoo/…` paths are resolved in `tests/fixtures/agents/`).
    argv: &'a [&'a str],
    /// `limits` of the step.
    limits: &'a str,
    /// The outcome the kernel must route.
    outcome: &'static str,
}

/// What a zoo run left behind.
struct ZooRun {
    repo: RunRepo,
    run_id: String,
    metadata: serde_json::Value,
}

impl ZooRun {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(
            &std::fs::read(
                self.repo
                    .run_dir(&self.run_id)
                    .join("artifacts/agent/1/stdout.txt"),
            )
            .unwrap(),
        )
        .into_owned()
    }
}

/// The STOP each outcome is routed to, and whether it is a success stop.
const ZOO_STOPS: [(&str, &str, bool); 5] = [
    ("completed", "done", true),
    ("error", "stop_error", false),
    ("killed_timeout", "stop_timeout", false),
    ("killed_idle", "stop_idle", false),
    ("killed_policy", "stop_policy", false),
];

fn zoo_workflow(limits: &str) -> String {
    let mut text = format!(
        "workflow_id: zoo\nversion: 1\ndescription: one misbehaving agent\nentry_step: agent\ndefaults:\n  limits: {limits}\nsteps:\n  - id: agent\n    opcode: RUN_AGENT\n    agent: zoo\n    prompt: |\n      Write hello to out.txt.\n    routes:\n"
    );
    for (outcome, stop, _) in ZOO_STOPS {
        text.push_str(&format!("      {outcome}: {stop}\n"));
    }
    for (_, stop, success) in ZOO_STOPS {
        let outcome = if success { "success" } else { "failure" };
        text.push_str(&format!(
            "  - id: {stop}\n    opcode: STOP\n    outcome: {outcome}\n"
        ));
    }
    text
}

/// Runs one zoo agent through `tnh-conductor run` and checks what every case must satisfy: the
/// routed outcome and STOP, the exit code, the run directory's evidence, and that no process
/// of the run survived.
fn run_zoo(case: &ZooCase<'_>) -> ZooRun {
    let repo = RunRepo::new();
    let argv: Vec<String> = case
        .argv
        .iter()
        .map(|arg| match arg.strip_prefix("zoo/") {
            Some(name) => format!("\"{}\"", fixture("agents/zoo").join(name).display()),
            None => format!("\"{arg}\""),
        })
        .collect();
    append_config(
        &repo,
        &format!(
            "  zoo:\n    kind: command\n    argv: [{}]\n",
            argv.join(", ")
        ),
    );
    let workflow = repo.workflow_text("zoo.yaml", &zoo_workflow(case.limits));
    let (code, result, output) = repo.run(&workflow, &[]);
    let what = format!("{:?}", case.argv);
    assert_no_panic(&what, &output);
    let run_id = result["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no result: {}", stderr_text(&output)))
        .to_owned();

    // Never leave a process behind: nothing that carries the run's id is alive.
    let survivors = processes_of_run(&run_id);
    assert!(
        survivors.is_empty(),
        "{what}: processes of the run survived: {survivors:?}"
    );

    let (_, stop, success) = ZOO_STOPS
        .iter()
        .find(|(outcome, _, _)| *outcome == case.outcome)
        .unwrap();
    assert_eq!(
        code,
        Some(if *success { 0 } else { 1 }),
        "{what}: {result}\n{}",
        stderr_text(&output)
    );
    let final_state =
        std::fs::read_to_string(repo.run_dir(&run_id).join("final-state.txt")).unwrap_or_default();
    let expected_state = if *success {
        format!("completed success {stop}\n")
    } else {
        format!("failed failure {stop}\n")
    };
    assert_eq!(final_state, expected_state, "{what}");

    // The events: contiguous, the agent's visit completed with the outcome, routed to its STOP.
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let completed: Vec<&serde_json::Value> = events
        .iter()
        .filter(|event| event["event_type"] == "step_completed" && event["step_id"] == "agent")
        .collect();
    assert_eq!(completed.len(), 1, "{what}");
    assert_eq!(completed[0]["outcome"], case.outcome, "{what}");
    let route = events
        .iter()
        .find(|event| event["event_type"] == "route_selected" && event["step_id"] == "agent")
        .unwrap_or_else(|| panic!("{what}: no route_selected event"));
    assert_eq!(
        (route["outcome"].as_str(), route["next_step"].as_str()),
        (Some(case.outcome), Some(*stop)),
        "{what}: {route}"
    );

    // The step's manifest, transcript and metadata.
    let manifest = repo.json(&run_id, "artifacts/agent/1/manifest.json");
    assert_eq!(manifest["termination"], case.outcome, "{what}: {manifest}");
    let roles: Vec<&str> = manifest["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["role"].as_str().unwrap())
        .collect();
    for role in ["runner_prompt", "runner_transcript", "runner_metadata"] {
        assert!(roles.contains(&role), "{what}: no {role} in {roles:?}");
    }
    for entry in manifest["artifacts"].as_array().unwrap() {
        let path = repo.run_dir(&run_id).join(entry["path"].as_str().unwrap());
        assert!(path.is_file(), "{what}: {} is missing", path.display());
    }
    let metadata = repo.json(&run_id, "artifacts/agent/1/runner_metadata.json");
    assert_eq!(metadata["outcome"], case.outcome, "{what}: {metadata}");
    // Every process the runner reported as leaked is dead now.
    for stray in metadata["leaked_processes"].as_array().unwrap() {
        let pid = stray["pid"].as_i64().unwrap() as i32;
        assert!(
            !crate::runner_support::is_alive(pid),
            "{what}: leaked process {stray} survived"
        );
    }
    ZooRun {
        repo,
        run_id,
        metadata,
    }
}

/// A pid an agent printed after `prefix` on its stdout.
fn printed_pid(run: &ZooRun, prefix: &str) -> i32 {
    let stdout = run.stdout();
    stdout
        .lines()
        .find_map(|line| line.strip_prefix(prefix))
        .and_then(|pid| pid.trim().parse().ok())
        .unwrap_or_else(|| panic!("no `{prefix}PID` line in {stdout:?}"))
}

/// Limits that never fire for an agent expected to complete, even on a loaded machine.
const UNHURRIED: &str = "{timeout: 20s, idle_timeout: 10s}";

#[test]
fn zoo_well_behaved_agent_completes_with_its_prompt_on_stdin() {
    let run = run_zoo(&ZooCase {
        argv: &["sh", "zoo/echo-prompt.sh"],
        limits: UNHURRIED,
        outcome: "completed",
    });
    assert!(run.stdout().starts_with("Write hello to out.txt.\n"));
    assert_eq!(run.metadata["cause"], "exit code 0");
}

#[test]
fn zoo_silent_hang_is_killed_idle_never_completed() {
    let run = run_zoo(&ZooCase {
        argv: &["sh", "zoo/silent-hang.sh"],
        limits: "{timeout: 20s, idle_timeout: 1s}",
        outcome: "killed_idle",
    });
    assert_eq!(run.metadata["cause"], "idle_timeout: no progress for 1s");
}

#[test]
fn zoo_closing_stdout_early_is_killed_idle() {
    let run = run_zoo(&ZooCase {
        argv: &["sh", "zoo/closes-stdout-early.sh"],
        limits: "{timeout: 20s, idle_timeout: 1s}",
        outcome: "killed_idle",
    });
    assert_eq!(run.stdout(), "closing my output\n");
}

#[test]
fn zoo_endless_output_without_newlines_is_killed_by_the_wall_clock() {
    let run = run_zoo(&ZooCase {
        argv: &["sh", "zoo/no-newlines-forever.sh"],
        limits: "{timeout: 2s, idle_timeout: 1500ms}",
        outcome: "killed_timeout",
    });
    assert_eq!(
        run.metadata["cause"],
        "timeout: wall-clock limit of 2s reached"
    );
    let size = std::fs::metadata(
        run.repo
            .run_dir(&run.run_id)
            .join("artifacts/agent/1/stdout.txt"),
    )
    .unwrap()
    .len();
    assert_eq!(size, run.metadata["stdout_bytes"].as_u64().unwrap());
}

#[test]
fn zoo_sigterm_ignored_is_killed_timeout_with_sigkill() {
    let run = run_zoo(&ZooCase {
        argv: &["sh", "zoo/ignores-sigterm.sh"],
        limits: "{timeout: 1s}",
        outcome: "killed_timeout",
    });
    assert_eq!(run.metadata["signal"], 9, "{}", run.metadata);
    assert!(run.metadata["termination"]["sigkill_after_ms"].is_u64());
    assert!(!run.stdout().contains("still here"));
}

#[test]
fn zoo_timeout_is_never_success_even_when_the_agent_exits_0_on_sigterm() {
    let run = run_zoo(&ZooCase {
        argv: &["sh", "zoo/exits-0-on-sigterm.sh"],
        limits: "{timeout: 1s}",
        outcome: "killed_timeout",
    });
    assert_eq!(run.metadata["exit_code"], 0, "the agent itself exited 0");
    assert_eq!(run.stdout(), "working\ncleaned up\n");
}

#[test]
fn zoo_interactive_prompt_is_killed_by_policy() {
    let run = run_zoo(&ZooCase {
        argv: &["sh", "zoo/asks-continue.sh"],
        limits: UNHURRIED,
        outcome: "killed_policy",
    });
    assert_eq!(
        run.metadata["cause"],
        r#"interactive_prompt: "Continue? [y/N]""#
    );
}

#[test]
fn zoo_crash_with_exit_137_is_an_error() {
    let run = run_zoo(&ZooCase {
        argv: &["sh", "zoo/exits-137.sh"],
        limits: UNHURRIED,
        outcome: "error",
    });
    assert_eq!(run.metadata["exit_code"], 137);
    assert!(
        run.metadata["cause"].as_str().unwrap().contains("SIGKILL"),
        "{}",
        run.metadata
    );
}

#[test]
fn zoo_huge_output_is_streamed_to_the_transcript_exactly() {
    let size: u64 = 8 * 1024 * 1024;
    let bytes = format!("TNH_ZOO_BYTES={size}");
    let run = run_zoo(&ZooCase {
        argv: &["env", &bytes, "sh", "zoo/big-output.sh"],
        limits: UNHURRIED,
        outcome: "completed",
    });
    let stdout = run
        .repo
        .run_dir(&run.run_id)
        .join("artifacts/agent/1/stdout.txt");
    assert_eq!(std::fs::metadata(stdout).unwrap().len(), size);
    assert_eq!(run.metadata["stdout_bytes"], size);
}

/// The process the agent announced with `prefix` and a pid is dead, and the runner reported
/// it as leaked (having left the agent's process group, when `left_group` says).
fn assert_killed_and_reported(run: &ZooRun, prefix: &str, left_group: Option<bool>) {
    let pid = printed_pid(run, prefix);
    assert!(
        !crate::runner_support::is_alive(pid),
        "{prefix}{pid} survived"
    );
    let leaked = run.metadata["leaked_processes"].as_array().unwrap();
    assert!(
        leaked.iter().any(|stray| stray["pid"] == pid
            && left_group.is_none_or(|left| stray["left_group"] == left)),
        "{leaked:?}"
    );
}

#[test]
fn zoo_grandchild_holding_stdout_is_killed_and_reported() {
    let run = run_zoo(&ZooCase {
        argv: &["sh", "zoo/grandchild-holds-stdout.sh"],
        limits: UNHURRIED,
        outcome: "completed",
    });
    assert_killed_and_reported(&run, "grandchild ", Some(false));
}

#[test]
fn zoo_setsid_escapee_holding_stdout_is_killed_and_reported() {
    let run = run_zoo(&ZooCase {
        argv: &["sh", "zoo/setsid-escape.sh"],
        limits: UNHURRIED,
        outcome: "completed",
    });
    assert_killed_and_reported(&run, "escaped ", Some(true));
}

#[test]
fn zoo_setsid_daemon_with_closed_pipes_is_killed_and_reported() {
    let run = run_zoo(&ZooCase {
        argv: &["sh", "zoo/setsid-escape-silent.sh"],
        limits: UNHURRIED,
        outcome: "completed",
    });
    assert_killed_and_reported(&run, "daemon ", None);
}

/// A conductor SIGKILLed while its agent's fork chain runs (each generation forks the next
/// and exits): `resume` used to kill the run's orphans in one look at `/proc`, which caught
/// the agent but not the chain, so visit 1's chain kept writing while visit 2 worked. Now
/// every process of the run is stopped and killed, in passes until none is left, and named
/// in `killed_orphans`.
fn resume_ends_a_forking_orphan(mode: &str) {
    let repo = RunRepo::new();
    let agent = fixture("agents/zoo").join("chain-then-kill-conductor.sh");
    append_config(
        &repo,
        &format!(
            "  zoo:\n    kind: command\n    argv: [bash, \"{}\", {mode}]\n",
            agent.display()
        ),
    );
    let workflow = repo.workflow_text("zoo.yaml", &zoo_workflow(UNHURRIED));
    let (code, _, output) = repo.run(&workflow, &[]);
    assert_eq!(code, None, "killed by its agent: {}", stderr_text(&output));
    let run_id = only_run_id(&repo);
    let orphans = crate::runner_support::KillMarked {
        name: "TNH_RUN_ID",
        value: run_id.clone(),
    };
    assert!(
        !orphans.alive().is_empty(),
        "visit 1's agent outlived its conductor"
    );

    let resumed = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["resume", &run_id])
        .output()
        .unwrap();

    assert_no_panic("resume", &resumed);
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr_text(&resumed));
    // One look at /proc can miss a live chain, so look thirty times, and check that the
    // chain wrote nothing meanwhile.
    let log = repo.run_dir(&run_id).join("artifacts/agent/1/chain.log");
    let generations = std::fs::read_to_string(&log).unwrap().lines().count();
    for _ in 0..30 {
        let survivors = orphans.alive();
        assert!(
            survivors.is_empty(),
            "{mode}: processes of the run survived: {survivors:?}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&log).unwrap().lines().count(),
        generations,
        "{mode}: visit 1's chain went on after resume"
    );
    let events = repo.events(&run_id);
    let interrupted = events
        .iter()
        .find(|event| event["event_type"] == "step_interrupted")
        .unwrap_or_else(|| panic!("{mode}: no step_interrupted"));
    let killed = interrupted["killed_orphans"].as_array().unwrap();
    assert!(
        killed.len() >= 2,
        "{mode}: the agent and its chain: {interrupted}"
    );
    assert!(
        interrupted.get("surviving_orphans").is_none(),
        "{interrupted}"
    );
}

#[test]
fn resume_ends_a_forking_orphan_of_a_killed_conductor() {
    resume_ends_a_forking_orphan("in-group");
}

#[test]
fn resume_ends_a_forking_orphan_that_left_with_setsid() {
    resume_ends_a_forking_orphan("setsid");
}

/// Kills a pid on drop: what a failed test would otherwise leave running.
struct KillOnDrop(Option<i32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// A conductor SIGKILLed while its agent's group holds a process that cleared its environment
/// (`env -i`: no `TNH_RUN_ID`, no supervision token) but stayed in the group: `resume` used to
/// find the run's processes by their environment alone, and the loop kept writing into the
/// run's worktree. The supervisor records the step's group in the visit's folder, and `resume`
/// ends it as a whole, whether its leader is still alive or not.
fn resume_ends_an_env_cleared_member_of_the_agents_group(mode: &str) {
    let repo = RunRepo::new();
    let agent = fixture("agents/zoo").join("env-cleared-then-kill-conductor.sh");
    append_config(
        &repo,
        &format!(
            "  zoo:\n    kind: command\n    argv: [bash, \"{}\", {mode}]\n",
            agent.display()
        ),
    );
    let workflow = repo.workflow_text("zoo.yaml", &zoo_workflow(UNHURRIED));
    resume_ends_the_env_cleared_loop(&repo, &workflow, "agent", &[0], mode);
}

/// Runs `workflow`, whose step `step` leaves an env-cleared loop in its process group and
/// SIGKILLs the conductor (`env-cleared-then-kill-conductor.sh`); checks that the group was
/// recorded, and that `resume` (exiting with one of `codes`) ends the loop, lists it in
/// `step_interrupted`, and spends the record.
fn resume_ends_the_env_cleared_loop(
    repo: &RunRepo,
    workflow: &std::path::Path,
    step: &str,
    codes: &[i32],
    label: &str,
) {
    let (code, _, output) = repo.run(workflow, &[]);
    assert_eq!(
        code,
        None,
        "{label}: killed by its step: {}",
        stderr_text(&output)
    );
    let run_id = only_run_id(repo);
    let visit = repo.run_dir(&run_id).join(format!("artifacts/{step}/1"));
    let pid: i32 = std::fs::read_to_string(visit.join("loop.log.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _cleanup = KillOnDrop(Some(pid));
    assert!(
        crate::runner_support::is_alive(pid),
        "{label}: the loop outlived its conductor"
    );
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(visit.join("process_group.json")).unwrap()).unwrap();
    assert!(record["pgid"].as_i64().unwrap() > 1, "{record}");

    let resumed = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["resume", &run_id])
        .output()
        .unwrap();

    assert_no_panic("resume", &resumed);
    assert!(
        resumed
            .status
            .code()
            .is_some_and(|code| codes.contains(&code)),
        "{label}: {}",
        stderr_text(&resumed)
    );
    assert!(
        !crate::runner_support::is_alive(pid),
        "{label}: the env-cleared loop {pid} survived resume"
    );
    assert!(
        !visit.join("process_group.json").exists(),
        "the record is spent"
    );
    let events = repo.events(&run_id);
    let interrupted = events
        .iter()
        .find(|event| event["event_type"] == "step_interrupted")
        .unwrap_or_else(|| panic!("{label}: no step_interrupted"));
    assert!(
        interrupted["killed_orphans"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!(pid)),
        "{label}: {interrupted}"
    );
    assert!(
        interrupted.get("surviving_orphans").is_none(),
        "{interrupted}"
    );
    assert_contiguous(&events);
}

/// The same for a planner: its group is recorded in the EVALUATE visit's folder while it
/// answers, so an `env -i` process it left in its group is ended by `resume` too (before, only
/// a planner's processes that kept `TNH_RUN_ID` were found).
#[test]
fn resume_ends_an_env_cleared_member_of_a_planners_group() {
    let repo = RunRepo::new();
    let planner = fixture("agents/zoo").join("env-cleared-then-kill-conductor.sh");
    append_config(
        &repo,
        &format!(
            "planners:\n  zoo:\n    kind: command\n    argv: [bash, \"{}\", leader-stays]\n    attempts: 1\n",
            planner.display()
        ),
    );
    let workflow = repo.workflow_text(
        "judged.yaml",
        "workflow_id: judged\nversion: 1\ndescription: a step judged by a planner that leaves a loop\nentry_step: work\nsteps:\n  - id: work\n    opcode: RUN_AGENT\n    agent: scripted\n    prompt: |\n      SAY done\n    routes: {\"*\": judge}\n  - id: judge\n    opcode: EVALUATE\n    prompt: planner.evaluate_results.v1\n    planner: zoo\n    allowed_next_steps: [STOP, failed]\n    routes:\n      success: STOP\n      partial: failed\n      blocked: failed\n      unsafe: failed\n      needs_human: failed\n  - id: failed\n    opcode: STOP\n    outcome: failure\n",
    );
    // The planner answers nothing usable on its second visit: the run stops either way.
    resume_ends_the_env_cleared_loop(&repo, &workflow, "judge", &[0, 1], "planner");
}

#[test]
fn resume_ends_an_env_cleared_member_of_a_group_whose_leader_lives() {
    resume_ends_an_env_cleared_member_of_the_agents_group("leader-stays");
}

#[test]
fn resume_ends_an_env_cleared_member_of_a_group_whose_leader_exited() {
    resume_ends_an_env_cleared_member_of_the_agents_group("leader-exits");
}

#[test]
fn zoo_invalid_utf8_output_is_kept_raw_and_completes() {
    let run = run_zoo(&ZooCase {
        argv: &["sh", "zoo/invalid-utf8.sh"],
        limits: UNHURRIED,
        outcome: "completed",
    });
    let raw = std::fs::read(
        run.repo
            .run_dir(&run.run_id)
            .join("artifacts/agent/1/stdout.txt"),
    )
    .unwrap();
    assert!(raw.windows(2).any(|pair| pair == b"\xff\xfe"));
}

// ---------------------------------------------------------------------------------------------
// 3. A run directory that fills up or turns read-only in the middle of a run.
// ---------------------------------------------------------------------------------------------

/// Two agent steps and a STOP; the first agent breaks the run directory when it runs inside
/// the test's private mount namespace (see `tests/fixtures/reliability/sabotage.sh`).
const SABOTAGE_WORKFLOW: &str = r#"workflow_id: sabotage
version: 1
description: the run directory breaks during the first step
entry_step: work
params:
  mode: {type: string, required: true}
  test_namespace: {type: string, required: true}
steps:
  - id: work
    opcode: RUN_AGENT
    agent: sabotage
    prompt: |
      Do the work.
      SABOTAGE ${params.mode} ${params.test_namespace} after
    routes:
      completed: after
      "*": failed
  - id: after
    opcode: RUN_AGENT
    agent: scripted
    prompt: |
      WRITE after.txt: after the failure
    routes:
      completed: done
      "*": failed
  - id: done
    opcode: STOP
  - id: failed
    opcode: STOP
    outcome: failure
"#;

/// The test process's mount namespace (`mnt:[…]`).
fn own_mount_namespace() -> String {
    std::fs::read_link("/proc/self/ns/mnt")
        .unwrap()
        .display()
        .to_string()
}

/// Fails the test (never skips it) unless `unshare -rm` can mount a tmpfs and make a bind mount
/// read-only here: without them these tests would prove nothing.
fn require_mount_namespaces() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"set -e
mkdir -p "$1/tmpfs" "$1/ro"
mount -t tmpfs -o size=64k probe "$1/tmpfs"
mount --bind "$1/ro" "$1/ro"
mount -o remount,ro,bind "$1/ro"
if touch "$1/ro/probe" 2>/dev/null; then echo "the bind mount stayed writable" >&2; exit 1; fi
"#;
    let output = Command::new("unshare")
        .args(["-rm", "sh", "-c", script, "sh"])
        .arg(dir.path())
        .output();
    match output {
        Ok(output) if output.status.success() => {}
        Ok(output) => panic!(
            "the disk-full and read-only tests need `unshare -rm` (user and mount namespaces) with \
             tmpfs and read-only bind mounts, which failed here ({}): {}",
            output.status,
            stderr_text(&output)
        ),
        Err(error) => panic!(
            "the disk-full and read-only tests need `unshare -rm` (user and mount namespaces): \
             cannot run `unshare`: {error}"
        ),
    }
}

/// A repository with the sabotage agent configured and the workflow written.
fn sabotage_repo() -> (RunRepo, PathBuf) {
    let repo = RunRepo::new();
    append_config(
        &repo,
        &format!(
            "  sabotage:\n    kind: command\n    argv: [sh, \"{}\"]\n",
            fixture("reliability/sabotage.sh").display()
        ),
    );
    let workflow = repo.workflow_text("sabotage.yaml", SABOTAGE_WORKFLOW);
    (repo, workflow)
}

/// `run` arguments of the sabotage workflow.
fn sabotage_args(workflow: &Path, mode: &str) -> Vec<String> {
    vec![
        "run".into(),
        "--json".into(),
        "-p".into(),
        format!("mode={mode}"),
        "-p".into(),
        format!("test_namespace='{}'", own_mount_namespace()),
        workflow.display().to_string(),
    ]
}

/// The complete events of a run directory as recorded at this moment (a torn last line, which
/// was never acknowledged, is left out), checked to be contiguous.
fn recorded_events(run_dir: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(run_dir.join("events.ndjson")).unwrap();
    let complete = match text.rfind('\n') {
        Some(end) => &text[..=end],
        None => "",
    };
    let events: Vec<serde_json::Value> = complete
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|error| panic!("bad event {line}: {error}"))
        })
        .collect();
    assert_contiguous(&events);
    events
}

/// How the run inside the namespace ended.
struct Failed {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl From<Output> for Failed {
    fn from(output: Output) -> Self {
        Failed {
            code: output.status.code(),
            stdout: stdout_text(&output),
            stderr: stderr_text(&output),
        }
    }
}

/// Checks how the run failed, resumes it outside the namespace, and checks that it finishes
/// with every event recorded before the failure kept as it was.
fn resume_after_lifting(repo: &RunRepo, failed: &Failed, io_error: &str, stopped_in: &str) {
    let stderr = &failed.stderr;
    for marker in ["panicked", "RUST_BACKTRACE", "stack backtrace"] {
        assert!(
            !stderr.contains(marker),
            "the failed run panicked:\n{stderr}"
        );
    }
    assert_eq!(
        failed.code,
        Some(4),
        "a run directory that cannot be written is a runtime error:\n{}\n{stderr}",
        failed.stdout
    );
    let run_id = only_run_id(repo);
    let run_dir = repo.run_dir(&run_id);
    // The error names the file, what failed, and how to continue.
    assert!(
        stderr.contains(&format!("{}/", run_dir.display())),
        "the error names a file of the run directory: {stderr}"
    );
    assert!(
        stderr.contains(io_error),
        "the error says what failed: {stderr}"
    );
    assert!(
        stderr.contains(&format!("tnh-conductor resume {run_id}")),
        "the error says how to continue: {stderr}"
    );

    // What was recorded is intact, the run stopped in its first step without claiming an end
    // it could not checkpoint, and the operator is told it can be resumed.
    let before = recorded_events(&run_dir);
    let types = event_types(&before);
    assert!(
        types.iter().any(|kind| kind == "runner_started"),
        "the run failed before its agent ran: {types:?}"
    );
    assert!(
        !types
            .iter()
            .any(|kind| kind == "run_failed" || kind == "run_completed"),
        "the stopped run recorded an end: {types:?}"
    );
    let status = repo.conductor(&["status", "--json", &run_id]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["lifecycle_state"], "blocked", "{status}");

    let resumed = repo.conductor(&["resume", "--json", &run_id]);
    assert_no_panic("resume", &resumed);
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "{}\n{}",
        stdout_text(&resumed),
        stderr_text(&resumed)
    );
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    assert_eq!(
        &events[..before.len()],
        &before[..],
        "events recorded before the failure were lost or rewritten"
    );
    let types = event_types(&events[before.len()..]);
    assert_eq!(types.first().map(String::as_str), Some("run_resumed"));
    assert_eq!(types.last().map(String::as_str), Some("run_completed"));
    // The visit cut short was recorded as interrupted and ran again from its snapshot.
    let interrupted = &events[before.len() + 1];
    assert_eq!(
        interrupted["event_type"], "step_interrupted",
        "{interrupted}"
    );
    assert_eq!(
        (
            interrupted["step_id"].as_str(),
            interrupted["visit"].as_u64()
        ),
        (Some(stopped_in), Some(1))
    );
    assert_eq!(
        std::fs::read_to_string(run_dir.join("final-state.txt")).unwrap(),
        "completed success done\n"
    );
    assert_eq!(
        repo.json(&run_id, &format!("artifacts/{stopped_in}/manifest.json"))["visit"],
        2
    );
    let worktree = repo.path().join(".tnh/worktrees").join(&run_id);
    let work_visit = if stopped_in == "work" { 2 } else { 1 };
    assert_eq!(
        std::fs::read_to_string(worktree.join("work.txt")).unwrap(),
        format!("work of visit {work_visit}\n")
    );
    assert_eq!(
        std::fs::read_to_string(worktree.join("after.txt")).unwrap(),
        "after the failure"
    );
}

/// Runs the sabotage workflow with the conductor inside a private user and mount namespace,
/// where whatever the agent mounts disappears with the namespace when the conductor exits.
fn run_in_namespace(repo: &RunRepo, workflow: &Path, mode: &str) -> Failed {
    Command::new("unshare")
        .arg("-rm")
        .arg(env!("CARGO_BIN_EXE_tnh-conductor"))
        .arg("--repo")
        .arg(repo.path())
        .args(sabotage_args(workflow, mode))
        .output()
        .unwrap()
        .into()
}

#[test]
fn a_full_disk_mid_run_fails_cleanly_and_the_run_resumes_once_space_is_freed() {
    require_mount_namespaces();
    let (repo, workflow) = sabotage_repo();
    let runs = repo.path().join(".tnh/run");
    std::fs::create_dir_all(&runs).unwrap();
    let saved = tempfile::tempdir().unwrap();
    // Inside the namespace the run directories live on a 1 MiB tmpfs that the agent fills, so
    // every write fails, appends to the event log included. Afterwards the ballast is removed
    // and what the run recorded is copied out, to be resumed on the real file system.
    let script = r#"runs=$1; saved=$2; shift 2
mount -t tmpfs -o size=1m tnh-reliability "$runs" || exit 97
"$@" > "$saved/stdout" 2> "$saved/stderr"
echo $? > "$saved/code"
rm -f "$runs/ballast"
cp -a "$runs/." "$saved/run/"
"#;
    std::fs::create_dir(saved.path().join("run")).unwrap();
    let status = Command::new("unshare")
        .args(["-rm", "sh", "-c", script, "sh"])
        .arg(&runs)
        .arg(saved.path())
        .arg(env!("CARGO_BIN_EXE_tnh-conductor"))
        .arg("--repo")
        .arg(repo.path())
        .args(sabotage_args(&workflow, "fill"))
        .status()
        .unwrap();
    assert!(status.success(), "the namespace script failed: {status}");
    let read = |name: &str| std::fs::read_to_string(saved.path().join(name)).unwrap();
    let failed = Failed {
        code: read("code").trim().parse().ok(),
        stdout: read("stdout"),
        stderr: read("stderr"),
    };
    let copied = Command::new("cp")
        .arg("-a")
        .arg(saved.path().join("run/."))
        .arg(&runs)
        .status()
        .unwrap();
    assert!(copied.success());
    resume_after_lifting(&repo, &failed, "No space left on device", "work");
}

#[test]
fn a_full_step_folder_fails_cleanly_and_the_run_resumes_instead_of_ending() {
    require_mount_namespaces();
    let (repo, workflow) = sabotage_repo();
    // Only the folder of the second step is full: the kernel can still checkpoint the run, and
    // must not end it as an error because a step's files could not be written.
    let failed = run_in_namespace(&repo, &workflow, "fill-next");
    resume_after_lifting(&repo, &failed, "No space left on device", "after");
}

#[test]
fn a_run_directory_turned_read_only_mid_run_fails_cleanly_and_the_run_resumes() {
    require_mount_namespaces();
    let (repo, workflow) = sabotage_repo();
    let failed = run_in_namespace(&repo, &workflow, "readonly");
    resume_after_lifting(&repo, &failed, "Read-only file system", "work");
}

#[test]
fn a_step_folder_that_cannot_be_created_stops_the_run_and_it_resumes() {
    require_mount_namespaces();
    let (repo, workflow) = sabotage_repo();
    let failed = run_in_namespace(&repo, &workflow, "readonly-next");
    assert!(
        failed.stderr.contains("failed to create the step folder"),
        "{}",
        failed.stderr
    );
    resume_after_lifting(&repo, &failed, "Read-only file system", "after");
}

/// A script that nests a value 5,000 levels deep is slow — the engine clones and drops the
/// value recursively at each step, past the 2 s deadline — but no longer aborts the kernel
/// with a stack overflow (it did in debug builds): the command runs on a 256 MiB stack. About
/// 80 s in a debug build, so it is left out of the default run:
/// `cargo test --test integration -- --ignored a_deeply_nested`.
#[test]
#[ignore = "about 80 s in a debug build"]
fn a_deeply_nested_script_value_does_not_abort_the_kernel() {
    let repo = RunRepo::new();
    let workflow = repo.workflow_text(
        "nest.yaml",
        "workflow_id: nest
version: 1
description: a script that nests a value deeply
entry_step: done
script: |
  fn nest(n) { let a = []; a.pad(n, 0); a.reduce(|acc, x| #{inner: acc}, #{}).len() }
steps:
  - id: done
    opcode: STOP
    reason: \"nested: ${{ nest(5000) }}\"
",
    );
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(0), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    assert!(
        std::fs::read_to_string(repo.run_dir(run_id).join("final-state.txt"))
            .unwrap()
            .starts_with("completed success")
    );
}

// ---------------------------------------------------------------------------------------------
// 4. A git of the conductor's own that never finishes.
// ---------------------------------------------------------------------------------------------

/// A git of the conductor's that waits forever after a step — here on a FIFO named as its
/// `core.excludesFile`, as a git on a hung network file system would wait — with a process it
/// started beside it. Both are killed at `TNH_GIT_TIMEOUT`, and the run ends as a runtime
/// error (exit 4) that names the git command, the limit and what to look at, with the agent's
/// step and the events recorded up to there kept.
#[test]
fn a_conductor_git_that_never_finishes_is_killed_at_the_limit_with_what_it_started() {
    let repo = RunRepo::new();
    let marks = tempfile::tempdir().unwrap();
    let fifo = marks.path().join("excludes");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let sleeper = marks.path().join("sleeper");
    // Only the `git add` that reads the worktree after the agent wrote `planted.txt` hangs.
    let path = crate::kernel_support::git_on_path_when(
        &repo,
        "[ \"$1\" = add ] && [ -e planted.txt ]",
        &format!(
            "sleep 3600 & echo $! > '{}'; exec \"$REAL_GIT\" -c core.excludesFile='{}' \"$@\"",
            sleeper.display(),
            fifo.display()
        ),
    );
    let workflow = repo.workflow_text(
        "hang.yaml",
        "workflow_id: hang
version: 1
description: an agent step after which the conductor's git hangs
entry_step: plant
steps:
  - id: plant
    opcode: RUN_AGENT
    agent: scripted
    prompt: |
      WRITE planted.txt: the marker
      SAY planted
    routes:
      completed: STOP
      \"*\": failed
  - id: failed
    opcode: STOP
    outcome: failure
",
    );
    let mut child = conductor()
        .arg("--repo")
        .arg(repo.path())
        .arg("run")
        .arg(&workflow)
        .env("PATH", path)
        // The limit holds for every git command of the run, not only the one that hangs: 5 s
        // is far more than an ordinary one takes on a loaded machine, and only the hung one
        // waits it out.
        .env("TNH_GIT_TIMEOUT", "5s")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Without the limit the conductor never ends. So that this test fails rather than hangs
    // then, a watcher kills it at 120 s (far beyond the 5 s limit), which only happens when
    // the fix is missing.
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let watcher = std::thread::spawn(move || {
        if finished
            .recv_timeout(std::time::Duration::from_secs(120))
            .is_err()
        {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
    });
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let stderr_reader = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap());
    let result = std::io::read_to_string(stdout).unwrap();
    let status = child.wait().unwrap();
    drop(done);
    watcher.join().unwrap();
    let stderr = stderr_reader.join().unwrap();
    assert_eq!(status.code(), Some(4), "{result}\n{stderr}");
    assert!(
        stderr.contains("git add --all --ignore-errors did not finish within 5s")
            && stderr.contains("TNH_GIT_TIMEOUT")
            && stderr.contains("core.excludesFile"),
        "the error names the command, the limit and the setting:\n{result}\n{stderr}"
    );
    assert_no_panic(
        "the run",
        &Output {
            status,
            stdout: Vec::new(),
            stderr: stderr.clone().into_bytes(),
        },
    );
    let run_id = only_run_id(&repo);
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let types = event_types(&events);
    assert!(
        types.iter().any(|kind| kind == "runner_completed"),
        "the agent's step stays recorded: {types:?}"
    );
    let failed = crate::kernel_support::first_event(&events, "step_failed");
    assert!(
        failed["error"]
            .as_str()
            .is_some_and(|error| error.contains("did not finish within 5s"))
            && failed["resumable"] == true,
        "the step's failure gives the reason and can be resumed: {failed}"
    );
    let final_state =
        std::fs::read_to_string(repo.run_dir(&run_id).join("final-state.txt")).unwrap();
    assert!(
        final_state.starts_with("blocked stopped plant"),
        "{final_state}"
    );
    // Once git answers again, the run resumes: the step runs again from its snapshot and the
    // run ends as it would have.
    let resumed = repo.conductor(&["resume", &run_id]);
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "{}\n{}",
        stdout_text(&resumed),
        stderr_text(&resumed)
    );
    let worktree = repo.json(&run_id, "metadata.json")["worktree_path"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        std::fs::read_to_string(Path::new(&worktree).join("planted.txt")).unwrap(),
        "the marker"
    );
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    assert_eq!(
        event_types(&events)
            .iter()
            .filter(|kind| *kind == "runner_completed")
            .count(),
        2,
        "the step ran again on resume"
    );
    // What the hung git started went with it (looked at only now, long after its kill, so
    // its exit is complete).
    let sleeper: i32 = std::fs::read_to_string(&sleeper)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let state = std::fs::read_to_string(format!("/proc/{sleeper}/stat")).unwrap_or_default();
    // (Its pid may have been reused since: only a live `sleep 3600` is the sleeper.)
    let command = std::fs::read(format!("/proc/{sleeper}/cmdline")).unwrap_or_default();
    let alive = command == b"sleep\x003600\0"
        && state
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'));
    assert!(
        !alive,
        "the process the hung git started still runs: {state}"
    );
}
