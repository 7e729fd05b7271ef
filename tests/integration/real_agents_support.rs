//! For the tests that run the real agent CLIs: the scripted model server
//! (`tests/fixtures/model_server.py`), where the pinned CLIs are installed, and a repository
//! configured to drive them at that server.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};

use crate::kernel_support::RunRepo;
use crate::support::{conductor, fixture};

/// The scripted model server, stopped when dropped (its stdin closes, then it is killed).
pub struct ModelServer {
    child: Child,
    stdin: Option<ChildStdin>,
    pub port: u16,
    pub log: PathBuf,
    _folder: tempfile::TempDir,
}

impl ModelServer {
    /// Starts the server with a script (see the server's docstring) and reads its port.
    pub fn start(script: serde_json::Value) -> Self {
        let folder = tempfile::tempdir().unwrap();
        let script_path = folder.path().join("script.json");
        std::fs::write(&script_path, script.to_string()).unwrap();
        let log = folder.path().join("requests.ndjson");
        let mut child = Command::new("python3")
            .arg(fixture("model_server.py"))
            .arg(&script_path)
            .arg("--log")
            .arg(&log)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        // The first line is the port: reading it waits exactly until the server listens.
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("port line: {line:?}"));
        Self {
            child,
            stdin,
            port,
            log,
            _folder: folder,
        }
    }

    /// The requests the server received (method, path, headers, body), in order.
    pub fn requests(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// The model requests (POSTs) received.
    pub fn posts(&self) -> usize {
        self.requests()
            .iter()
            .filter(|request| request["method"] == "POST")
            .count()
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The CLIs the tests drive, with the names of their npm packages in `tests/real-agents/versions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cli {
    Claude,
    Codex,
    Gemini,
}

impl Cli {
    pub fn program(self) -> &'static str {
        match self {
            Cli::Claude => "claude",
            Cli::Codex => "codex",
            Cli::Gemini => "gemini",
        }
    }
}

/// Where `.ci/run` installs the pinned CLIs: `TNH_REAL_AGENTS_DIR`, else `target/real-agents`.
fn install_dir() -> PathBuf {
    std::env::var_os("TNH_REAL_AGENTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/real-agents"))
}

/// Whether a missing CLI fails the test instead of skipping it (CI, or asked for).
fn required() -> bool {
    std::env::var("TNH_REQUIRE_REAL_AGENTS").as_deref() == Ok("1")
        || std::env::var("CI").is_ok_and(|value| !value.is_empty() && value != "false")
}

/// The installed CLI, or `None` (with the reason printed) when it is absent and not required.
pub fn real_cli(cli: Cli) -> Option<PathBuf> {
    let path = install_dir().join("node_modules/.bin").join(cli.program());
    if path.exists() {
        return Some(path);
    }
    let reason = format!(
        "`{}` is not installed at {} (`.ci/run` installs the versions in tests/real-agents/versions)",
        cli.program(),
        path.display()
    );
    assert!(!required(), "{reason}");
    eprintln!("skipped: {reason}");
    None
}

/// One real CLI at a time: each is a heavy process (Node, a 400 MB binary), and several at once
/// on two cores slowed their start-up past the short idle limits these tests use, and the
/// timing of the other tests running beside them.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A repository whose `.tnh/config.yaml` has an agent profile `agent` and a planner profile
/// `judge` of one CLI pointed at a model server, with an empty HOME of its own.
pub struct AgentRepo {
    pub repo: RunRepo,
    pub home: tempfile::TempDir,
    pub server: ModelServer,
    pub cli: Cli,
    pub binary: PathBuf,
    _turn: MutexGuard<'static, ()>,
}

impl AgentRepo {
    /// `extra_agent_keys` go into the agent profile as YAML lines (`model: x`).
    pub fn new(
        cli: Cli,
        binary: PathBuf,
        script: serde_json::Value,
        extra_agent_keys: &str,
    ) -> Self {
        // A test that failed holding the lock poisons it; the next one may still run.
        let turn = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let server = ModelServer::start(script);
        let repo = RunRepo::new();
        let home = tempfile::tempdir().unwrap();
        let (kind_keys, planner_keys) = profile_keys(cli, server.port);
        let mut config = format!(
            "agents:\n  agent:\n    kind: {kind}\n    binary: \"{binary}\"\n{kind_keys}{extra_agent_keys}",
            kind = cli.program(),
            binary = binary.display(),
        );
        // The Gemini CLI has no structured-output mode, so it is no planner kind.
        if cli != Cli::Gemini {
            config.push_str(&format!(
                "planners:\n  judge:\n    kind: {kind}\n    binary: \"{binary}\"\n    timeout: 60s\n{planner_keys}",
                kind = cli.program(),
                binary = binary.display(),
            ));
        }
        repo.repo.write(".tnh/config.yaml", &config);
        if cli == Cli::Gemini {
            // The Gemini CLI reads its auth method from its settings.
            let settings = home.path().join(".gemini");
            std::fs::create_dir_all(&settings).unwrap();
            // Its turn limit is a setting too (no flag): 3, for the endless tool loop.
            std::fs::write(
                settings.join("settings.json"),
                r#"{"security":{"auth":{"selectedType":"gemini-api-key"}},"model":{"maxSessionTurns":3}}"#,
            )
            .unwrap();
        }
        repo.repo.commit_all("configure the agent");
        Self {
            repo,
            home,
            server,
            cli,
            binary,
            _turn: turn,
        }
    }

    /// `run --json WORKFLOW` with the CLIs' environment: the server's address, fake keys,
    /// side traffic off, the empty HOME.
    pub fn run(&self, workflow: &Path) -> (Option<i32>, serde_json::Value, Output) {
        self.run_with(workflow, &[])
    }

    /// `run` with more variables (a `TNH_*_BIN`), set after the usual ones.
    pub fn run_with(
        &self,
        workflow: &Path,
        variables: &[(&str, &Path)],
    ) -> (Option<i32>, serde_json::Value, Output) {
        let mut command = conductor();
        command
            .arg("--repo")
            .arg(self.repo.path())
            .args(["run", "--json"])
            .arg(workflow)
            .env("HOME", self.home.path());
        for (name, value) in cli_environment(self.server.port) {
            command.env(name, value);
        }
        for name in ["TNH_CLAUDE_BIN", "TNH_CODEX_BIN", "TNH_GEMINI_BIN"] {
            command.env_remove(name);
        }
        for (name, value) in variables {
            command.env(name, value);
        }
        let output = command.output().unwrap();
        let json = serde_json::from_slice(&output.stdout).unwrap_or(serde_json::Value::Null);
        (output.status.code(), json, output)
    }

    /// The `step_completed` outcomes of a run, as `step:outcome`.
    pub fn outcomes(&self, run_id: &str) -> Vec<String> {
        self.repo
            .events(run_id)
            .iter()
            .filter(|event| event["event_type"] == "step_completed")
            .map(|event| {
                format!(
                    "{}:{}",
                    event["step_id"].as_str().unwrap_or_default(),
                    event["outcome"].as_str().unwrap_or_default()
                )
            })
            .collect()
    }

    /// Asserts that no process started with this repository's HOME is still alive.
    pub fn assert_no_process_left(&self) {
        let marker = format!("HOME={}", self.home.path().display());
        let mut alive = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|text| text.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
                continue;
            };
            if environ
                .split(|byte| *byte == 0)
                .any(|variable| variable == marker.as_bytes())
            {
                let command = std::fs::read_to_string(entry.path().join("cmdline"))
                    .unwrap_or_default()
                    .replace('\0', " ");
                alive.push(format!("{pid}: {command}"));
            }
        }
        assert!(alive.is_empty(), "processes left behind: {alive:#?}");
    }
}

/// The variables each CLI needs to talk to the scripted server only.
fn cli_environment(port: u16) -> Vec<(&'static str, String)> {
    let base = format!("http://127.0.0.1:{port}");
    vec![
        ("ANTHROPIC_BASE_URL", base.clone()),
        ("ANTHROPIC_API_KEY", "sk-ant-test".into()),
        ("DISABLE_TELEMETRY", "1".into()),
        ("DISABLE_AUTOUPDATER", "1".into()),
        ("DISABLE_ERROR_REPORTING", "1".into()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
        ("CLAUDE_CODE_MAX_RETRIES", "0".into()),
        ("CODEX_API_KEY", "sk-test".into()),
        ("GEMINI_API_KEY", "gemini-test".into()),
        ("GOOGLE_GEMINI_BASE_URL", base),
    ]
}

/// Profile keys for the agent and the planner of a CLI.
fn profile_keys(cli: Cli, port: u16) -> (String, String) {
    match cli {
        Cli::Claude => {
            let pass = "    pass_env: [ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY, DISABLE_TELEMETRY, DISABLE_AUTOUPDATER, DISABLE_ERROR_REPORTING, CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC, CLAUDE_CODE_MAX_RETRIES]\n";
            (
                format!("    permission_mode: acceptEdits\n{pass}"),
                pass.to_owned(),
            )
        }
        Cli::Codex => {
            let keys = format!(
                "    pass_env: [CODEX_API_KEY]\n    config: {{ openai_base_url: \"http://127.0.0.1:{port}/v1\" }}\n"
            );
            (keys.clone(), keys)
        }
        Cli::Gemini => {
            // No GEMINI_CLI_TRUST_WORKSPACE: the adapter answers the trust question itself.
            let keys = "    pass_env: [GEMINI_API_KEY, GOOGLE_GEMINI_BASE_URL]\n";
            (keys.to_owned(), keys.to_owned())
        }
    }
}

/// A workflow of one RUN_AGENT step `work` (then STOP), with limits.
pub fn agent_workflow(limits: &str) -> String {
    format!(
        "workflow_id: real\nversion: 1\ndescription: one real agent step\nentry_step: work\nsteps:\n  - id: work\n    opcode: RUN_AGENT\n    agent: agent\n    prompt: Write hello.txt.\n    limits: {{{limits}}}\n    routes: {{completed: STOP, \"*\": failed}}\n  - id: failed\n    opcode: STOP\n    outcome: failure\n    reason: the agent did not complete\n"
    )
}

/// A workflow of one EVALUATE step judged by the `judge` planner.
pub fn evaluate_workflow() -> String {
    "workflow_id: judged\nversion: 1\ndescription: one real planner decision\nentry_step: judge\nsteps:\n  - id: judge\n    opcode: EVALUATE\n    planner: judge\n    prompt: Judge the run.\n    allowed_next_steps: [fix, failed]\n    routes: {success: STOP, partial: fix, blocked: failed, unsafe: failed, needs_human: failed}\n  - id: fix\n    opcode: STOP\n    outcome: failure\n    reason: the planner asked for a fix\n  - id: failed\n    opcode: STOP\n    outcome: failure\n    reason: blocked\n".to_owned()
}
