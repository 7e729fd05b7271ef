//! Helpers for the runner tests: a step in a temporary directory, fast limits, and the check
//! that nothing of a step's process group survived it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use tnh_conductor::runner::{
    AgentKind, AgentProfile, AgentRun, Cancellation, HostEnv, Limits, StepRequest, process,
    resolve_profile, run_agent,
};

use crate::support::fixture;

/// A step request in its own temporary directory (worktree and step dir inside it).
pub struct Step {
    pub dir: tempfile::TempDir,
    pub request: StepRequest,
}

impl Step {
    /// A `command` agent running `argv`.
    pub fn command(argv: &[&str]) -> Step {
        Step::with_profile("zoo", AgentProfile::command(argv.iter().copied()))
    }

    /// A `claude` or `codex` agent played by the fake CLI replaying `scenario`.
    pub fn fake(kind: AgentKind, scenario: &str) -> Step {
        let name = match kind {
            AgentKind::Claude => "claude-code",
            _ => "codex",
        };
        let builtin = resolve_profile(name, &BTreeMap::new()).expect("built-in profile");
        let mut step = Step::with_profile(name, builtin);
        let bin = fixture("agents/bin");
        step.request.host_env = HostEnv::from_pairs([
            (
                "PATH",
                format!(
                    "{}:{}",
                    bin.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            ),
            ("HOME", step.dir.path().display().to_string()),
        ]);
        step.set("TNH_FAKE_SCENARIO", scenario);
        step
    }

    fn with_profile(name: &str, profile: AgentProfile) -> Step {
        let dir = tempfile::tempdir().expect("temp dir");
        let worktree = dir.path().join("worktree");
        std::fs::create_dir_all(&worktree).expect("worktree");
        let request = StepRequest {
            agent_name: name.to_owned(),
            profile,
            prompt: "Write hello to out.txt.\n".to_owned(),
            worktree,
            step_dir: dir.path().join("artifacts/implement/1"),
            limits: limits(Duration::from_secs(20), Some(Duration::from_secs(10))),
            max_turns: None,
            max_budget_usd: None,
            remaining_run_budget_usd: None,
            tnh_variables: BTreeMap::new(),
            host_env: HostEnv::from_pairs([("PATH", std::env::var("PATH").unwrap_or_default())]),
            program_root: None,
            env: Vec::new(),
        };
        Step { dir, request }
    }

    /// Sets a `TNH_*` variable for the agent.
    pub fn set(&mut self, name: &str, value: &str) -> &mut Step {
        self.request
            .tnh_variables
            .insert(name.to_owned(), value.to_owned());
        self
    }

    /// A file of the step directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.request.step_dir.join(name)
    }

    /// A file of the step directory as text (lossy).
    pub fn read(&self, name: &str) -> String {
        String::from_utf8_lossy(&std::fs::read(self.file(name)).expect("read step file"))
            .into_owned()
    }

    /// Runs the step without cancellation and checks that nothing of it survived.
    pub async fn run(&self) -> AgentRun {
        self.run_with(Cancellation::never()).await
    }

    /// Runs the step with `cancel` and checks that nothing of it survived.
    pub async fn run_with(&self, cancel: Cancellation) -> AgentRun {
        let run = run_agent(&self.request, cancel)
            .await
            .expect("the step runs");
        assert_nothing_survives(&run);
        run
    }
}

/// Limits with short grace, settle and leak periods, for tests.
pub fn limits(timeout: Duration, idle: Option<Duration>) -> Limits {
    Limits {
        timeout,
        idle_timeout: idle,
        grace: Duration::from_millis(300),
        prompt_settle: Duration::from_millis(200),
        leak_timeout: Duration::from_millis(200),
        max_stdout_bytes: None,
        max_stderr_bytes: None,
    }
}

/// The path of a misbehaving agent of the zoo.
pub fn zoo(name: &str) -> String {
    fixture("agents/zoo").join(name).display().to_string()
}

/// No live process is left in the step's group, and every reported leak is dead.
pub fn assert_nothing_survives(run: &AgentRun) {
    let pid = run.supervised.pid;
    assert!(pid > 0);
    let members = process::live_group_members(pid);
    assert!(
        members.is_empty(),
        "processes of group {pid} survived: {members:?}"
    );
    for stray in &run.supervised.leaked {
        // Its /proc/PID/stat says what it is and who its parent is now.
        assert!(
            !still_running(stray),
            "leaked process {stray:?} survived: {:?}",
            std::fs::read_to_string(format!("/proc/{}/stat", stray.pid)),
        );
    }
}

/// Whether the process `stray` reported is still alive: its pid is live and runs the same
/// command line. (This machine may have only 32,768 pids, and the suite spawns thousands of
/// processes in parallel: a dead process's pid can be reused before it is looked at.)
pub fn still_running(stray: &tnh_conductor::runner::StrayProcess) -> bool {
    let command = std::fs::read(format!("/proc/{}/cmdline", stray.pid)).unwrap_or_default();
    let command = String::from_utf8_lossy(&command)
        .trim_end_matches('\0')
        .replace('\0', " ");
    is_alive(stray.pid) && command == stray.command
}

/// Whether `pid` is a live (non-zombie) process.
pub fn is_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().next());
            !matches!(state, Some("Z" | "X"))
        }
        Err(_) => false,
    }
}

/// Kills, when dropped, every process whose environment holds `NAME=value` — in passes of
/// SIGSTOP then SIGKILL until one finds none — so a test that fails leaves nothing behind,
/// not even a process that keeps forking.
pub struct KillMarked {
    pub name: &'static str,
    pub value: String,
}

impl KillMarked {
    /// A fresh value for `name`, unique to this test.
    pub fn new(name: &'static str) -> KillMarked {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let sequence = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        KillMarked {
            name,
            value: format!("{}-{nanos}-{sequence}", std::process::id()),
        }
    }

    /// The live processes holding the mark now.
    pub fn alive(&self) -> Vec<i32> {
        process::processes_with_variable(self.name, &self.value)
    }
}

impl Drop for KillMarked {
    fn drop(&mut self) {
        use nix::sys::signal::{Signal, kill};
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut quiet = 0;
        while quiet < 3 && std::time::Instant::now() < deadline {
            let found = self.alive();
            for signal in [Signal::SIGSTOP, Signal::SIGKILL] {
                for &pid in &found {
                    let _ = kill(nix::unistd::Pid::from_raw(pid), signal);
                }
            }
            quiet = if found.is_empty() { quiet + 1 } else { 0 };
        }
    }
}
