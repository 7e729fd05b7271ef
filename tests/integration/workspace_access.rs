//! An agent that takes away its own access to what it wrote — an unreadable folder or file, a
//! read-only folder — neither hides its change from the capture and the policy check nor
//! stops a rollback. Root ignores permission bits, so when the tests run as root (as CI does)
//! every command of a scenario runs as the unprivileged user 65534 through `setpriv`.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tnh_conductor::ids::{RunId, WorkflowId};
use tnh_conductor::workspace::Workspace;

use crate::support::{git_in, stderr_text, with_test_git_identity};
use crate::workspace::put;
use crate::workspace_cli::write_metadata;

/// The unprivileged user the scenarios run as when the tests run as root.
const USER: u32 = 65_534;

/// A folder of scenario files owned by an unprivileged user, and a way to run commands as it.
struct Unprivileged {
    dir: tempfile::TempDir,
    /// `setpriv …` when the tests run as root; empty otherwise.
    prefix: Vec<String>,
    /// The `tnh-conductor` binary, where the user can run it.
    conductor: PathBuf,
}

impl Unprivileged {
    /// `None` (with a message) when the tests run as root on a machine without `setpriv`.
    fn new() -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let as_root = std::fs::metadata(dir.path()).unwrap().uid() == 0;
        let prefix = if as_root {
            if Command::new("setpriv").arg("--version").output().is_err() {
                eprintln!("skipped: running as root without `setpriv` to drop privileges");
                return None;
            }
            vec![
                "setpriv".to_owned(),
                format!("--reuid={USER}"),
                format!("--regid={USER}"),
                "--clear-groups".to_owned(),
                "--".to_owned(),
            ]
        } else {
            Vec::new()
        };
        // The build folder may not be reachable by the user (a private temporary clone).
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let conductor = bin.join("tnh-conductor");
        std::fs::copy(env!("CARGO_BIN_EXE_tnh-conductor"), &conductor).unwrap();
        std::fs::create_dir(dir.path().join("home")).unwrap();
        let user = Self {
            dir,
            prefix,
            conductor,
        };
        user.hand_over(&user.path().join("home"));
        Some(user)
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Makes `path` and everything under it the user's.
    fn hand_over(&self, path: &Path) {
        if self.prefix.is_empty() {
            return;
        }
        let owner = format!("{USER}:{USER}");
        let status = Command::new("chown")
            .args(["-R", owner.as_str()])
            .arg(path)
            .status()
            .unwrap();
        assert!(status.success(), "chown {}", path.display());
    }

    /// `program` run as the user, with no git configuration but a fixed identity.
    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = match self.prefix.split_first() {
            Some((setpriv, rest)) => {
                let mut command = Command::new(setpriv);
                command.args(rest).arg(program);
                command
            }
            None => Command::new(program),
        };
        command.env("HOME", self.path().join("home"));
        with_test_git_identity(&mut command);
        command
    }

    /// `program ARGS…` run as the user in `dir`: its stdout; panics when it fails.
    fn run_ok(&self, dir: &Path, program: &str, args: &[&str]) -> String {
        let output = self
            .command(program)
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{program} {args:?}: {}",
            stderr_text(&output)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// A shell script run as the user in `dir`; panics when it fails.
    fn sh(&self, dir: &Path, script: &str) {
        self.run_ok(dir, "sh", &["-c", script]);
    }

    /// git run as the user in `dir`: its stdout; panics when it fails.
    fn git(&self, dir: &Path, args: &[&str]) -> String {
        self.run_ok(dir, "git", args)
    }

    /// `tnh-conductor --repo REPO --color never ARGS…` run as the user.
    fn conductor(&self, repo: &Path, args: &[&str]) -> Output {
        self.command(&self.conductor)
            .arg("--repo")
            .arg(repo)
            .args(["--color", "never"])
            .args(args)
            .output()
            .unwrap()
    }

    /// A repository with `README.md` and `docs/a.md` committed on `main`, made as root before
    /// it is handed over.
    fn repository(&self) -> PathBuf {
        let repo = self.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git_in(&repo, &["init", "-q", "-b", "main"]);
        put(&repo, "README.md", "# test repository\n");
        put(&repo, "docs/a.md", "# a\n");
        git_in(&repo, &["add", "-A"]);
        git_in(&repo, &["commit", "-q", "-m", "base"]);
        repo
    }
}

/// Everything differing from HEAD, ignored files included, as the user sees it.
fn status_everything(user: &Unprivileged, dir: &Path) -> String {
    user.git(
        dir,
        &[
            "status",
            "--porcelain",
            "--ignored",
            "--untracked-files=all",
        ],
    )
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// An agent that writes a forbidden file in a folder it then makes unreadable (git only
/// warns, and would leave the folder out of the capture), changes a folder it makes
/// read-only, and finally takes away its access to the worktree itself.
const HIDING_AGENT: &str = "\
mkdir -p .github/workflows && echo 'on: push' > .github/workflows/ci.yml && chmod 000 .github/workflows
echo more >> docs/a.md && echo new > docs/new.md && chmod 555 docs
chmod 000 .
";

const HIDING_WORKFLOW: &str = "\
workflow_id: hiding
version: 1
description: an agent hides a forbidden change behind chmod; the run still sees and undoes it
entry_step: implement
defaults:
  policy:
    forbidden_paths: ['.github/**']
steps:
  - id: implement
    opcode: RUN_AGENT
    agent: hider
    prompt: change CI, quietly
    routes:
      '*': evaluate
  - id: evaluate
    opcode: EVALUATE
    prompt: planner.evaluate_step.v1
    allowed_next_steps: [undo]
    routes:
      success: STOP
      partial: STOP
      blocked: STOP
      unsafe: undo
      needs_human: STOP
  - id: undo
    opcode: ROLLBACK
    target: pre_run
    routes:
      completed: rolled_back
      error: rolled_back
  - id: rolled_back
    opcode: STOP
    outcome: failure
    reason: the change broke the policy and was rolled back
";

#[test]
fn a_change_hidden_behind_chmod_is_captured_flagged_and_rolled_back() {
    let Some(user) = Unprivileged::new() else {
        return;
    };
    let repo = user.repository();
    let script = HIDING_AGENT.replace('\n', "; ");
    put(
        &repo,
        ".tnh/config.yaml",
        format!("agents:\n  hider:\n    kind: command\n    argv: [sh, -c, {script:?}]\n"),
    );
    let workflow = put(&repo, "wf/hiding.yaml", HIDING_WORKFLOW);
    user.hand_over(&repo);

    let output = user.conductor(&repo, &["run", "--json", workflow.to_str().unwrap()]);

    let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
    assert_eq!(
        output.status.code(),
        Some(1),
        "{result}\n{}",
        stderr_text(&output)
    );
    let run_dir = repo
        .join(".tnh/run")
        .join(result["run_id"].as_str().unwrap());
    let status = json(&run_dir.join("artifacts/implement/1/workspace_status.json"));
    let paths: Vec<&str> = status["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|file| file["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [".github/workflows/ci.yml", "docs/a.md", "docs/new.md"],
        "{status}"
    );
    assert_eq!(
        status["access_restored"],
        serde_json::json!([".github/workflows", "docs"]),
        "{status}"
    );
    let summary = json(&run_dir.join("artifacts/implement/1/policy_summary.json"));
    assert_eq!(summary["verdict"], "violation", "{summary}");
    assert_eq!(
        summary["guard_report"]["worktree_access_restored"], true,
        "{summary}"
    );
    assert!(
        summary.to_string().contains(".github/workflows/ci.yml"),
        "{summary}"
    );
    assert_eq!(
        std::fs::read_to_string(run_dir.join("final-state.txt")).unwrap(),
        "failed failure rolled_back\n"
    );
    let worktree = PathBuf::from(result["worktree"].as_str().unwrap());
    assert_eq!(status_everything(&user, &worktree), "");
    assert!(!worktree.join(".github").exists());
    assert_eq!(
        std::fs::read_to_string(worktree.join("docs/a.md")).unwrap(),
        "# a\n"
    );
}

#[test]
fn rollback_gives_access_back_where_git_needs_it_and_lists_where() {
    let Some(user) = Unprivileged::new() else {
        return;
    };
    let repo = user.repository();
    let workspace =
        Workspace::create(&repo, &RunId::new("locked"), &WorkflowId::new("wf"), None).unwrap();
    write_metadata(&repo, &workspace, None);
    user.hand_over(&repo);
    let worktree = workspace.path().to_owned();

    // Each scenario fails a different git command without the owner's access: the reset
    // (a tracked file to rewrite in a read-only folder), the clean (an untracked file in a
    // read-only folder) and the scan before (an unreadable file cannot be hashed, an
    // unreadable folder hides a new file).
    let scenarios: [(&str, &[&str]); 5] = [
        ("echo more >> docs/a.md && chmod 555 docs", &["docs"]),
        (
            "mkdir -p junk/inner && echo x > junk/inner/f && chmod 555 junk/inner junk",
            &["junk", "junk/inner"],
        ),
        (
            "echo edit >> README.md && echo new > notes.txt && chmod 000 README.md notes.txt",
            &["README.md", "notes.txt"],
        ),
        (
            "mkdir secret && echo x > secret/f && echo edit >> README.md && chmod 000 secret",
            &["secret"],
        ),
        // Without access to the worktree itself git cannot even start there.
        ("echo edit >> README.md && chmod 000 .", &["."]),
    ];
    for (script, restored) in scenarios {
        user.sh(&worktree, script);

        let output = user.conductor(&repo, &["rollback", "locked", "--json"]);

        assert!(
            output.status.success(),
            "{script}: {}",
            stderr_text(&output)
        );
        let record: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(
            record["access_restored"],
            serde_json::json!(restored),
            "{script}: {record}"
        );
        assert!(
            record["before"]["files_changed"].as_u64().unwrap() >= 1,
            "{script}: {record}"
        );
        assert_eq!(record["after"]["files_changed"], 0, "{script}: {record}");
        assert_eq!(status_everything(&user, &worktree), "", "{script}");
        assert_eq!(
            std::fs::read_to_string(worktree.join("docs/a.md")).unwrap(),
            "# a\n"
        );
    }
    assert!(!worktree.join("junk").exists());
    assert!(!worktree.join("notes.txt").exists());
    assert!(!worktree.join("secret").exists());

    // Cleaning up a finished run whose agent left folders it cannot empty.
    user.sh(
        &worktree,
        "mkdir -p locked/inner && echo x > locked/inner/f && chmod 000 locked/inner && chmod 555 locked",
    );
    write_metadata(&repo, &workspace, Some("2020-01-01T00:00:00Z"));
    let output = user.conductor(&repo, &["runs", "clean"]);
    assert!(output.status.success(), "{}", stderr_text(&output));
    assert!(
        !worktree.exists(),
        "{}",
        crate::support::stdout_text(&output)
    );
    let worktrees = user.git(&repo, &["worktree", "list", "--porcelain"]);
    assert!(!worktrees.contains("locked"), "{worktrees}");
}
