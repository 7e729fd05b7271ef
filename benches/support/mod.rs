//! What the benchmarks share: running git with a fixed identity, and sizes from the environment.
// Each benchmark uses only part of this.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

/// A size from the environment variable `name`, or `default`.
pub fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// Runs git in `dir` with a fixed identity; panics (with git's stderr) unless it succeeds.
pub fn git(dir: &Path, args: &[&str]) -> String {
    git_with(dir, args, None)
}

/// [`git`], with `GIT_INDEX_FILE` set to `index` when given.
pub fn git_with(dir: &Path, args: &[&str], index: Option<&Path>) -> String {
    let mut command = Command::new("git");
    command
        .current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.invalid")
        .env("GIT_COMMITTER_NAME", "Bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.invalid");
    if let Some(index) = index {
        command.env("GIT_INDEX_FILE", index);
    }
    let output = command.output().expect("spawn git");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}
