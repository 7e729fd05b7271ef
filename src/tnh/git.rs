//! The few git queries the `tnh` commands need, through the git CLI (fast to start, and the
//! same view of the worktree the agent has).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::TnhError;

/// Where the command runs: the repository root, and the base to compare with.
pub struct Place {
    /// The worktree or repository root.
    pub root: PathBuf,
    /// The base commit.
    pub base: String,
    /// Where the base came from (`TNH_BASE_SHA`, `merge-base with main`, …).
    pub base_source: String,
}

/// The repository containing the current directory, without running git.
pub fn root() -> Result<PathBuf, TnhError> {
    let start = std::env::var_os("TNH_WORKTREE")
        .map(PathBuf::from)
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_default();
    start
        .ancestors()
        .find(|dir| dir.join(".git").exists())
        .map(Path::to_path_buf)
        .ok_or_else(|| {
            TnhError::new(
                "not inside a git repository",
                "run tnh from a repository or a tnh-conductor worktree",
            )
        })
}

/// Runs git in `root`; stdout as text, or the error git printed.
pub fn git(root: &Path, args: &[&str]) -> Result<String, TnhError> {
    let output = Command::new("git")
        .current_dir(root)
        .args(args)
        .output()
        .map_err(|error| {
            TnhError::new(
                format!("cannot run git: {error}"),
                "install git and put it on PATH",
            )
        })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(TnhError::new(
            format!("git {} failed: {}", args.join(" "), stderr.trim()),
            "check the repository state",
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The root and the base: `TNH_BASE_SHA` inside a run, else the merge-base with the default
/// branch (`origin/HEAD`, `main`, `master`), else `HEAD`.
pub fn place() -> Result<Place, TnhError> {
    let root = root()?;
    if let Ok(base) = std::env::var("TNH_BASE_SHA")
        && !base.is_empty()
    {
        return Ok(Place {
            root,
            base,
            base_source: "TNH_BASE_SHA (the run's base)".into(),
        });
    }
    for branch in ["origin/HEAD", "main", "master"] {
        if let Ok(base) = git(&root, &["merge-base", "HEAD", branch]) {
            return Ok(Place {
                root,
                base: base.trim().to_owned(),
                base_source: format!("merge-base with {branch}"),
            });
        }
    }
    Ok(Place {
        root,
        base: "HEAD".into(),
        base_source: "HEAD (no default branch found)".into(),
    })
}

/// Changed paths against the base (`A`/`M`/`D`/`R` status) plus untracked files (`?`).
pub fn changes(place: &Place) -> Result<Vec<(String, String)>, TnhError> {
    let mut changes: Vec<(String, String)> = git(
        &place.root,
        &["diff", "--name-status", "-M", &place.base, "--"],
    )?
    .lines()
    .filter_map(|line| {
        let mut parts = line.split('\t');
        let status = parts.next()?.chars().next()?.to_string();
        let path = parts.next_back()?.to_owned();
        Some((status, path))
    })
    .collect();
    for path in git(&place.root, &["ls-files", "--others", "--exclude-standard"])?.lines() {
        changes.push(("?".into(), path.to_owned()));
    }
    Ok(changes)
}
