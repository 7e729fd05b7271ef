//! Helpers shared by the integration tests: real temporary git repositories and the binaries.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A real git repository in a temporary directory, with one commit on `main`.
pub struct TempRepo {
    dir: tempfile::TempDir,
}

impl TempRepo {
    /// A repository with `README.md` committed on `main`.
    pub fn new() -> Self {
        Self::in_dir(tempfile::tempdir().expect("create temp dir"))
    }

    /// The same repository in `dir` (a temporary folder on another file system, say).
    pub fn in_dir(dir: tempfile::TempDir) -> Self {
        let repo = Self { dir };
        repo.git(&["init", "-q", "-b", "main"]);
        repo.write("README.md", "# test repository\n");
        repo.commit_all("initial commit");
        repo
    }

    /// The repository root.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a file (creating parent folders) relative to the root.
    pub fn write(&self, relative: &str, contents: &str) -> PathBuf {
        let path = self.dir.path().join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create parent dirs");
        }
        std::fs::write(&path, contents).expect("write file");
        path
    }

    /// Stages everything and commits.
    pub fn commit_all(&self, message: &str) {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "-m", message]);
    }

    /// Runs git in the repository and returns its trimmed stdout; panics on failure.
    pub fn git(&self, args: &[&str]) -> String {
        git_in(self.dir.path(), args)
    }
}

/// Runs git in `dir` with a fixed identity and returns its trimmed stdout; panics on failure.
pub fn git_in(dir: &Path, args: &[&str]) -> String {
    let output = git_command(dir).args(args).output().expect("spawn git");
    assert!(
        output.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// A git command in `dir` with a fixed identity and no user or system configuration.
pub fn git_command(dir: &Path) -> Command {
    let mut command = Command::new("git");
    command.current_dir(dir);
    with_test_git_identity(&mut command);
    command
}

/// Gives the git a command runs a fixed identity and no user or system configuration.
pub fn with_test_git_identity(command: &mut Command) -> &mut Command {
    command
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.invalid")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.invalid")
}

/// The `tnh-conductor` binary built for this test run.
pub fn conductor() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tnh-conductor"))
}

/// The `tnh` binary built for this test run.
pub fn tnh() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tnh"))
}

/// `tnh ARGS` run in `dir` as outside any run: none of the run's variables (which the test
/// process could inherit) is passed on.
pub fn run_tnh(dir: &Path, args: &[&str]) -> std::process::Output {
    tnh()
        .current_dir(dir)
        .args(args)
        .env_remove("TNH_BASE_SHA")
        .env_remove("TNH_STEP_DIR")
        .env_remove("TNH_RUN_DIR")
        .env_remove("TNH_RUN_ID")
        .env_remove("TNH_WORKTREE")
        .output()
        .unwrap()
}

/// The path of a file under `tests/fixtures/`.
pub fn fixture(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(relative)
}

/// stdout of a finished command as text.
pub fn stdout_text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// stderr of a finished command as text.
pub fn stderr_text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}
