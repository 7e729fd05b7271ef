//! Running the `git` command line: argv only (never a shell), a fixed identity for the commits
//! this module writes, and errors that say which git command failed and where.
//!
//! The git CLI is used for everything that reads or writes many files (worktree checkout,
//! snapshots, status, diff, reset): it is faster than libgit2 for those and honours the
//! operator's ignore rules, filters and index format exactly. See `docs/workspace.md`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::error::WorkspaceError;

/// The identity of the snapshot commits, so they never depend on the operator's configuration.
const IDENTITY_NAME: &str = "tnh-conductor";
const IDENTITY_EMAIL: &str = "tnh-conductor@localhost";

/// A git invocation bound to a working directory.
#[derive(Debug, Clone)]
pub(crate) struct Git {
    dir: PathBuf,
    index_file: Option<PathBuf>,
}

impl Git {
    /// git running in `dir`.
    pub(crate) fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            index_file: None,
        }
    }

    /// The same git with `GIT_INDEX_FILE` pointing at a scratch index.
    pub(crate) fn with_index(&self, index_file: &Path) -> Self {
        Self {
            dir: self.dir.clone(),
            index_file: Some(index_file.to_owned()),
        }
    }

    fn command<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = Command::new("git");
        command
            .current_dir(&self.dir)
            .args(args)
            .env("GIT_AUTHOR_NAME", IDENTITY_NAME)
            .env("GIT_AUTHOR_EMAIL", IDENTITY_EMAIL)
            .env("GIT_COMMITTER_NAME", IDENTITY_NAME)
            .env("GIT_COMMITTER_EMAIL", IDENTITY_EMAIL)
            // Never ask the terminal for anything: the conductor runs unattended.
            .env("GIT_TERMINAL_PROMPT", "0")
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .stdin(Stdio::null());
        match &self.index_file {
            Some(index) => command.env("GIT_INDEX_FILE", index),
            None => command.env_remove("GIT_INDEX_FILE"),
        };
        command
    }

    /// Runs git and returns its stdout as bytes; a non-zero exit is an error.
    pub(crate) fn bytes<I, S>(&self, args: I) -> Result<Vec<u8>, WorkspaceError>
    where
        I: IntoIterator<Item = S> + Clone,
        S: AsRef<OsStr>,
    {
        let output = self.output(args.clone())?;
        if output.status.success() {
            Ok(output.stdout)
        } else {
            Err(self.failure(args, &output))
        }
    }

    /// Runs git and returns its stdout as trimmed text.
    pub(crate) fn text<I, S>(&self, args: I) -> Result<String, WorkspaceError>
    where
        I: IntoIterator<Item = S> + Clone,
        S: AsRef<OsStr>,
    {
        let stdout = self.bytes(args)?;
        Ok(String::from_utf8_lossy(&stdout).trim().to_owned())
    }

    /// Runs git for its effect.
    pub(crate) fn run<I, S>(&self, args: I) -> Result<(), WorkspaceError>
    where
        I: IntoIterator<Item = S> + Clone,
        S: AsRef<OsStr>,
    {
        self.bytes(args).map(drop)
    }

    /// Runs git for its effect, accepting a non-zero exit when every line on stderr is one
    /// that `tolerated` accepts.
    pub(crate) fn run_tolerating<I, S>(
        &self,
        args: I,
        tolerated: impl Fn(&str) -> bool,
    ) -> Result<(), WorkspaceError>
    where
        I: IntoIterator<Item = S> + Clone,
        S: AsRef<OsStr>,
    {
        let output = self.output(args.clone())?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        let all_tolerated = stderr
            .lines()
            .filter(|line| !line.trim().is_empty())
            .all(tolerated);
        if output.status.success() || all_tolerated {
            Ok(())
        } else {
            Err(self.failure(args, &output))
        }
    }

    /// Runs git and reports whether it exited 0 (for questions such as "does this ref exist").
    pub(crate) fn succeeds<I, S>(&self, args: I) -> Result<bool, WorkspaceError>
    where
        I: IntoIterator<Item = S> + Clone,
        S: AsRef<OsStr>,
    {
        Ok(self.output(args)?.status.success())
    }

    /// Runs git with stdout streamed into `file` (a patch may be far larger than memory).
    pub(crate) fn to_file<I, S>(&self, args: I, file: &Path) -> Result<(), WorkspaceError>
    where
        I: IntoIterator<Item = S> + Clone,
        S: AsRef<OsStr>,
    {
        let sink = std::fs::File::create(file).map_err(|source| WorkspaceError::Io {
            action: "create",
            path: file.to_owned(),
            source,
        })?;
        let output = self
            .command(args.clone())
            .stdout(Stdio::from(sink))
            .stderr(Stdio::piped())
            .output()
            .map_err(|source| spawn_error(&source, &self.dir))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(self.failure(args, &output))
        }
    }

    fn output<I, S>(&self, args: I) -> Result<Output, WorkspaceError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.command(args)
            .output()
            .map_err(|source| spawn_error(&source, &self.dir))
    }

    fn failure<I, S>(&self, args: I, output: &Output) -> WorkspaceError
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let command = args
            .into_iter()
            .map(|arg| arg.as_ref().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        WorkspaceError::Git {
            command,
            dir: self.dir.clone(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        }
    }
}

fn spawn_error(source: &std::io::Error, dir: &Path) -> WorkspaceError {
    if source.kind() == std::io::ErrorKind::NotFound && dir.is_dir() {
        WorkspaceError::GitNotInstalled
    } else {
        WorkspaceError::Io {
            action: "run git in",
            path: dir.to_owned(),
            source: std::io::Error::new(source.kind(), source.to_string()),
        }
    }
}
