//! Helpers for the workspace module's unit tests: real git in temporary repositories.

use std::path::Path;
use std::process::Command;

use super::Workspace;
use crate::ids::{RunId, WorkflowId};

/// Runs git in `dir` (with an identity for commits) and returns its stdout; fails the test if
/// git does.
pub(super) fn git(dir: &Path, args: &[&str]) -> Vec<u8> {
    let output = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(output.status.success(), "git {args:?}: {output:?}");
    output.stdout
}

/// Writes `contents` to `path` under `dir`, creating its folders.
pub(super) fn put(dir: &Path, path: &str, contents: &[u8]) {
    let path = dir.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, contents).unwrap();
}

/// A repository at `root` whose one commit on `main` holds `files`, and the workspace of run
/// `run` on it.
pub(super) fn committed_workspace(root: &Path, files: &[(&str, &[u8])], run: &str) -> Workspace {
    git(root, &["init", "-q", "-b", "main"]);
    for (path, contents) in files {
        put(root, path, contents);
    }
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "base"]);
    Workspace::create(root, &RunId::new(run), &WorkflowId::new("wf"), None).unwrap()
}
