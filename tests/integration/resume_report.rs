//! What `resume` says it recovered, before its progress lines: the interrupted visit (its
//! cause), the orphans it stopped, the snapshot it put back, and the files changed meanwhile.

use crate::kernel_support::RunRepo;
use crate::support::{conductor, fixture, stderr_text, stdout_text};

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

const WORKFLOW: &str = "workflow_id: killed\nversion: 1\ndescription: an agent that kills its conductor\nentry_step: agent\ndefaults:\n  limits: {timeout: 20s, idle_timeout: 10s}\nsteps:\n  - id: agent\n    opcode: RUN_AGENT\n    agent: killer\n    prompt: |\n      Write hello to out.txt.\n    routes:\n      completed: done\n      \"*\": failed\n  - id: done\n    opcode: STOP\n    outcome: success\n  - id: failed\n    opcode: STOP\n    outcome: failure\n";

/// After a conductor was SIGKILLed, with the workflow and configuration
/// edited meanwhile, `resume` went straight to `▶ agent #2` and only `runs events` told what it
/// had recovered. Its human output now says it first; `--json` prints only the result.
#[test]
fn resume_says_what_it_recovered_before_going_on() {
    let repo = RunRepo::new();
    let agent = fixture("agents/zoo").join("env-cleared-then-kill-conductor.sh");
    let config = repo.path().join(".tnh/config.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!(
            "{text}  killer:\n    kind: command\n    argv: [bash, \"{}\", leader-stays]\n",
            agent.display()
        ),
    )
    .unwrap();
    let workflow = repo.workflow_text("killed.yaml", WORKFLOW);
    let (code, _, output) = repo.run(&workflow, &[]);
    assert_eq!(code, None, "killed by its agent: {}", stderr_text(&output));
    let run_id = std::fs::read_dir(repo.path().join(".tnh/run"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .find(|name| tnh_conductor::artifacts::is_run_id(name))
        .unwrap();
    let visit = repo.run_dir(&run_id).join("artifacts/agent/1");
    let pid: i32 = std::fs::read_to_string(visit.join("loop.log.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _cleanup = KillOnDrop(pid);
    let edited = std::fs::read_to_string(&workflow).unwrap();
    std::fs::write(&workflow, format!("{edited}# edited\n")).unwrap();
    let edited = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{edited}# edited\n")).unwrap();

    let resumed = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["resume", &run_id])
        .output()
        .unwrap();

    let stderr = stderr_text(&resumed);
    assert_eq!(resumed.status.code(), Some(0), "{stderr}");
    let before = stderr
        .split("▶ agent #2")
        .next()
        .filter(|before| before.len() < stderr.len())
        .unwrap_or_else(|| panic!("no progress line for visit 2: {stderr}"));
    let interrupted = before
        .lines()
        .find(|line| line.starts_with("  agent #1: recorded as interrupted — "))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        interrupted.contains("the driving process ended during the step")
            && interrupted.contains("stopped its orphaned processes (pid ")
            && interrupted.contains(&pid.to_string())
            && interrupted.contains("put back to its pre-step snapshot")
            && interrupted.contains("`agent` goes on with visit #2"),
        "{interrupted}"
    );
    assert!(
        before.contains(&format!(
            "the workflow file {} changed since the run started",
            workflow.display()
        )) && before.contains("the configuration ")
            && before.contains("changed since the run started or last continued"),
        "{stderr}"
    );
    // What the events recorded is what was said.
    let events = repo.events(&run_id);
    for kind in ["step_interrupted", "workflow_changed", "config_changed"] {
        assert!(
            events.iter().any(|event| event["event_type"] == kind),
            "{kind}"
        );
    }
    assert!(
        !stdout_text(&resumed).contains("recorded as interrupted"),
        "the report is on stderr, with the progress"
    );
}
