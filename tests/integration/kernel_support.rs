//! A repository set up for end-to-end runs: the scripted agent configured as `scripted`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::{TempRepo, conductor, fixture};

/// A temporary repository with `.tnh/config.yaml` naming the scripted agent.
pub struct RunRepo {
    pub repo: TempRepo,
}

impl RunRepo {
    pub fn new() -> Self {
        Self::with(TempRepo::new())
    }

    /// The same in `dir` (a temporary folder on another file system, say).
    pub fn in_dir(dir: tempfile::TempDir) -> Self {
        Self::with(TempRepo::in_dir(dir))
    }

    fn with(repo: TempRepo) -> Self {
        let agent = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/agents/scripted.py");
        repo.write(
            ".tnh/config.yaml",
            &format!(
                "agents:\n  scripted:\n    kind: command\n    argv: [python3, \"{}\"]\n",
                agent.display()
            ),
        );
        Self { repo }
    }

    pub fn path(&self) -> &Path {
        self.repo.path()
    }

    /// Copies a workflow fixture from `tests/fixtures/runs/` into the repository (uncommitted).
    pub fn workflow(&self, name: &str) -> PathBuf {
        let text = std::fs::read_to_string(fixture(&format!("runs/{name}"))).unwrap();
        self.repo.write(&format!("wf/{name}"), &text)
    }

    /// Writes a workflow from text.
    pub fn workflow_text(&self, name: &str, text: &str) -> PathBuf {
        self.repo.write(&format!("wf/{name}"), text)
    }

    /// `tnh-conductor --repo REPO ARGS…`.
    pub fn conductor(&self, args: &[&str]) -> Output {
        conductor()
            .arg("--repo")
            .arg(self.path())
            .args(["--color", "never"])
            .args(args)
            .output()
            .unwrap()
    }

    /// `conductor(ARGS)`, asserting it exits with `code` (its stderr shown when not).
    #[track_caller]
    pub fn conductor_exits(&self, args: &[&str], code: i32) -> Output {
        let output = self.conductor(args);
        assert_eq!(
            output.status.code(),
            Some(code),
            "{args:?}: {}",
            crate::support::stderr_text(&output)
        );
        output
    }

    /// `run --json WORKFLOW` with the conductor killed right after event `seq`
    /// (`TNH_TEST_KILL_AT_EVENT`), asserting it was killed (its stderr shown when not).
    #[track_caller]
    pub fn run_killed_at(&self, workflow: &Path, seq: u64) {
        let killed = conductor()
            .arg("--repo")
            .arg(self.path())
            .args(["run", "--json"])
            .arg(workflow)
            .env("TNH_TEST_KILL_AT_EVENT", seq.to_string())
            .output()
            .unwrap();
        assert_eq!(
            killed.status.code(),
            None,
            "{}",
            crate::support::stderr_text(&killed)
        );
    }

    /// Starts `workflow` with the configuration as it is (which the checks before a run
    /// accept), stops the conductor right after the run started, before its first step, then
    /// writes `config` and resumes (`resume` re-reads the configuration, which only `run`
    /// checks): how a step meets a missing program or an unconfigured validator at run time.
    /// The resumed run's exit code and JSON result (`--json`, unless `text`).
    pub fn start_then_resume_with_config(
        &self,
        workflow: &Path,
        config: &str,
    ) -> (Option<i32>, serde_json::Value, Output) {
        self.start_then_resume_with(workflow, config, &["--json"])
    }

    /// [`RunRepo::start_then_resume_with_config`], `resume` given `args`.
    pub fn start_then_resume_with(
        &self,
        workflow: &Path,
        config: &str,
        args: &[&str],
    ) -> (Option<i32>, serde_json::Value, Output) {
        let runs = || -> std::collections::BTreeSet<String> {
            std::fs::read_dir(self.path().join(".tnh/run"))
                .map(|entries| {
                    entries
                        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default()
        };
        let before = runs();
        self.run_killed_at(workflow, 1);
        let run_id = runs()
            .difference(&before)
            .next()
            .cloned()
            .expect("the run was started");
        self.repo.write(".tnh/config.yaml", config);
        let output = conductor()
            .arg("--repo")
            .arg(self.path())
            .args(["--color", "never", "resume", &run_id])
            .args(args)
            .output()
            .unwrap();
        let json = serde_json::from_slice(&output.stdout).unwrap_or(serde_json::Value::Null);
        (output.status.code(), json, output)
    }

    /// `run --json WORKFLOW ARGS…` and its JSON result (exit code included).
    pub fn run(&self, workflow: &Path, args: &[&str]) -> (Option<i32>, serde_json::Value, Output) {
        let output = conductor()
            .arg("--repo")
            .arg(self.path())
            .args(["run", "--json"])
            .arg(workflow)
            .args(args)
            .output()
            .unwrap();
        let json = serde_json::from_slice(&output.stdout).unwrap_or(serde_json::Value::Null);
        (output.status.code(), json, output)
    }

    /// `run --json WORKFLOW ARGS…`, asserting it exits `code`: the run's id and JSON result.
    pub fn run_exits(
        &self,
        workflow: &Path,
        args: &[&str],
        code: i32,
    ) -> (String, serde_json::Value) {
        let (exited, result, output) = self.run(workflow, args);
        assert_eq!(
            exited,
            Some(code),
            "{} {args:?}: {result}\n{}",
            workflow.display(),
            crate::support::stderr_text(&output)
        );
        let run_id = result["run_id"].as_str().unwrap_or_default().to_owned();
        (run_id, result)
    }

    /// The id of the repository's one run (for tests that start it without `--json`).
    pub fn only_run_id(&self) -> String {
        std::fs::read_dir(self.path().join(".tnh/run"))
            .unwrap()
            .next()
            .expect("a run directory")
            .unwrap()
            .file_name()
            .into_string()
            .unwrap()
    }

    /// The run directory of a run id.
    pub fn run_dir(&self, run_id: &str) -> PathBuf {
        self.path().join(".tnh/run").join(run_id)
    }

    /// The events of a run.
    pub fn events(&self, run_id: &str) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.run_dir(run_id).join("events.ndjson"))
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// A JSON file of a run directory.
    pub fn json(&self, run_id: &str, relative: &str) -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(self.run_dir(run_id).join(relative)).unwrap())
            .unwrap()
    }
}

/// The event types, in order.
pub fn event_types(events: &[serde_json::Value]) -> Vec<String> {
    events
        .iter()
        .map(|event| event["event_type"].as_str().unwrap().to_owned())
        .collect()
}

/// Asserts `seq` is 1, 2, 3… without gaps.
pub fn assert_contiguous(events: &[serde_json::Value]) {
    for (index, event) in events.iter().enumerate() {
        assert_eq!(event["seq"], (index + 1) as u64, "event {index}: {event}");
    }
}

/// The first event of a type, which the test expects to be there.
pub fn first_event<'a>(events: &'a [serde_json::Value], event_type: &str) -> &'a serde_json::Value {
    events
        .iter()
        .find(|event| event["event_type"] == event_type)
        .unwrap_or_else(|| panic!("no {event_type} event in {:?}", event_types(events)))
}

/// The git on `PATH`.
pub fn real_git() -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|dir| dir.join("git"))
        .find(|path| path.is_file())
        .expect("git on PATH")
}

/// A `PATH` whose `git` runs `during` (a shell snippet; `$REAL_GIT` is the real git) when
/// `condition` (a shell condition over its arguments) holds, then the real git; the folder
/// holding it is inside the repository's `.git`, where the operator's checkout does not see it.
pub fn git_on_path_when(repo: &RunRepo, condition: &str, during: &str) -> std::ffi::OsString {
    let bin = repo.path().join(".git/fake-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let real = real_git();
    let script = format!(
        "#!/bin/sh\nREAL_GIT=\"{}\"\nif {condition}; then\n  {during}\nfi\nexec \"$REAL_GIT\" \"$@\"\n",
        real.display()
    );
    let git = bin.join("git");
    std::fs::write(&git, script).unwrap();
    std::fs::set_permissions(&git, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::env::join_paths(
        std::iter::once(bin).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap()
}
