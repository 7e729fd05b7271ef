//! Running the `git` command line: argv only (never a shell), a fixed identity for the commits
//! this module writes, and errors that say which git command failed and where.
//!
//! The git CLI is used for everything that reads or writes many files (worktree checkout,
//! snapshots, status, diff, reset): it is faster than libgit2 for those and honours the
//! operator's ignore rules, filters and index format exactly. See `docs/workspace.md`.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::error::WorkspaceError;

/// The identity of the snapshot commits, so they never depend on the operator's configuration.
const IDENTITY_NAME: &str = "tnh-conductor";
const IDENTITY_EMAIL: &str = "tnh-conductor@localhost";

/// Settings every workspace git runs with, in `GIT_CONFIG_PARAMETERS` (where `git -c` puts
/// them: above every configuration file, and handed on to the git it starts in a nested
/// repository; the environment rather than `-c` keeps the argv a git wrapper sees as it
/// was): the conductor's git never runs a program named in the configuration of a
/// repository an agent controls. An agent can create a repository inside its worktree (`git
/// init src/vendor`, a commit) with `core.fsmonitor = <script>` or a clean filter in its own
/// `.git/config`; git asks a nested repository whether it is dirty by running `git status`
/// inside it, which would run that script as the conductor's child, outside any step and its
/// supervision. The workspace never asks (see `Workspace::refresh_scratch_index` and the
/// rollback's status, `--ignore-submodules=dirty`); these settings close what is left:
/// - `core.fsmonitor=false`: no file-system monitor hook, here or in a nested repository;
/// - `submodule.recurse=false`: no checkout, reset or status descends into a nested
///   repository;
/// - `status.submoduleSummary=false`: `git status` starts no `git submodule summary`.
///
/// And `advice.addEmbeddedRepo=false`: the scratch index records every nested repository
/// afresh at each refresh, and the advice (for a person adding one by mistake) would fill
/// stderr, which is read.
const NEVER_RUN_NESTED: [&str; 4] = [
    "core.fsmonitor=false",
    "submodule.recurse=false",
    "status.submoduleSummary=false",
    "advice.addEmbeddedRepo=false",
];

/// `GIT_CONFIG_PARAMETERS`: the operator's own, if set, then [`NEVER_RUN_NESTED`] (later
/// entries win).
fn config_parameters() -> &'static str {
    static PARAMETERS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PARAMETERS.get_or_init(|| {
        let mut parameters = std::env::var("GIT_CONFIG_PARAMETERS").unwrap_or_default();
        for setting in NEVER_RUN_NESTED {
            if !parameters.is_empty() {
                parameters.push(' ');
            }
            // The quoting git itself writes (`'key=value'`; no quote in these settings).
            parameters.push_str(&format!("'{setting}'"));
        }
        parameters
    })
}

/// A git invocation bound to a working directory.
#[derive(Debug, Clone)]
pub(crate) struct Git {
    dir: PathBuf,
    index_file: Option<PathBuf>,
    /// The repository, named explicitly (`GIT_DIR`, with `dir` as `GIT_WORK_TREE`) instead of
    /// found through `dir/.git`, which an agent can rewrite.
    git_dir: Option<PathBuf>,
    /// The repository's common folder (`GIT_COMMON_DIR`) for a linked worktree, instead of
    /// found through the worktree's `commondir` file, which an agent can rewrite too.
    common_dir: Option<PathBuf>,
    /// The commit whose `.gitattributes` apply (`GIT_ATTR_SOURCE`), when git supports it:
    /// the run's base, so attributes an agent writes in the worktree (an `ident` that makes
    /// the patch show `$Id$` where the file holds a payload) cannot change what is recorded.
    attr_source: Option<String>,
}

impl Git {
    /// git running in `dir`, finding its repository from there.
    pub(crate) fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            index_file: None,
            git_dir: None,
            common_dir: None,
            attr_source: None,
        }
    }

    /// git running in the worktree `dir` administered in `git_dir`, of the repository whose
    /// common folder is `common_dir`, whatever `dir/.git` and `git_dir/commondir` say.
    pub(crate) fn in_worktree(
        dir: impl Into<PathBuf>,
        git_dir: impl Into<PathBuf>,
        common_dir: impl Into<PathBuf>,
        attr_source: &str,
    ) -> Self {
        Self {
            dir: dir.into(),
            index_file: None,
            git_dir: Some(git_dir.into()),
            common_dir: Some(common_dir.into()),
            attr_source: supports_attr_source().then(|| attr_source.to_owned()),
        }
    }

    /// The same git with `GIT_INDEX_FILE` pointing at a scratch index.
    pub(crate) fn with_index(&self, index_file: &Path) -> Self {
        Self {
            dir: self.dir.clone(),
            index_file: Some(index_file.to_owned()),
            git_dir: self.git_dir.clone(),
            common_dir: self.common_dir.clone(),
            attr_source: self.attr_source.clone(),
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
            .env("GIT_CONFIG_PARAMETERS", config_parameters())
            .env("GIT_AUTHOR_NAME", IDENTITY_NAME)
            .env("GIT_AUTHOR_EMAIL", IDENTITY_EMAIL)
            .env("GIT_COMMITTER_NAME", IDENTITY_NAME)
            .env("GIT_COMMITTER_EMAIL", IDENTITY_EMAIL)
            // Never ask the terminal for anything: the conductor runs unattended.
            .env("GIT_TERMINAL_PROMPT", "0")
            // Messages in English whatever the operator's locale: a few are read (a refused
            // access, a nested repository without a commit).
            .env_remove("LC_ALL")
            .env_remove("LANGUAGE")
            .env("LC_MESSAGES", "C")
            // Objects as they are: a replace ref (`git replace`) would make a snapshot, a
            // rollback or a capture read another commit or tree than the one named.
            .env("GIT_NO_REPLACE_OBJECTS", "1")
            .stdin(Stdio::null());
        match &self.git_dir {
            Some(git_dir) => command
                .env("GIT_DIR", git_dir)
                .env("GIT_WORK_TREE", &self.dir),
            None => command.env_remove("GIT_DIR").env_remove("GIT_WORK_TREE"),
        };
        match &self.common_dir {
            Some(common_dir) => command.env("GIT_COMMON_DIR", common_dir),
            None => command.env_remove("GIT_COMMON_DIR"),
        };
        match &self.attr_source {
            Some(commit) => command.env("GIT_ATTR_SOURCE", commit),
            None => command.env_remove("GIT_ATTR_SOURCE"),
        };
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
        self.bytes_and_warnings(args).map(|(stdout, _)| stdout)
    }

    /// Runs git and returns its stdout and what it said on stderr (warnings, since it
    /// succeeded); a non-zero exit is an error.
    pub(crate) fn bytes_and_warnings<I, S>(
        &self,
        args: I,
    ) -> Result<(Vec<u8>, String), WorkspaceError>
    where
        I: IntoIterator<Item = S> + Clone,
        S: AsRef<OsStr>,
    {
        let output = self.output(args.clone())?;
        if output.status.success() {
            let warnings = String::from_utf8_lossy(&output.stderr).into_owned();
            Ok((output.stdout, warnings))
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
    /// that `tolerated` accepts; returns what git said on stderr (warnings, tolerated errors).
    pub(crate) fn run_tolerating<I, S>(
        &self,
        args: I,
        tolerated: impl Fn(&str) -> bool,
    ) -> Result<String, WorkspaceError>
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
            Ok(stderr.into_owned())
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

    /// Runs git for its effect with `input` on its stdin (for path lists too long for
    /// arguments); a non-zero exit is an error.
    pub(crate) fn run_with_input<I, S>(&self, args: I, input: &[u8]) -> Result<(), WorkspaceError>
    where
        I: IntoIterator<Item = S> + Clone,
        S: AsRef<OsStr>,
    {
        let mut child = self
            .command(args.clone())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| spawn_error(&source, &self.dir))?;
        let written = child.stdin.take().map(|mut stdin| {
            use std::io::Write;
            // Written whole before waiting: git reads it all before it answers.
            stdin.write_all(input)
        });
        let output = child
            .wait_with_output()
            .map_err(|source| WorkspaceError::io("wait for git in", &self.dir, source))?;
        if !output.status.success() {
            return Err(self.failure(args, &output));
        }
        match written {
            Some(Err(source)) => Err(WorkspaceError::io("write to git in", &self.dir, source)),
            _ => Ok(()),
        }
    }

    /// Runs git with its stdout handed to `consume` as it is produced (for output that may be
    /// far larger than memory and is read once). An error of `consume` wins over git's exit
    /// status: a consumer that stops early makes git exit on a broken pipe.
    pub(crate) fn stream<I, S, T>(
        &self,
        args: I,
        consume: impl FnOnce(&mut dyn BufRead) -> Result<T, WorkspaceError>,
    ) -> Result<T, WorkspaceError>
    where
        I: IntoIterator<Item = S> + Clone,
        S: AsRef<OsStr>,
    {
        let mut child = self
            .command(args.clone())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| spawn_error(&source, &self.dir))?;
        // Drained beside stdout, so a git that writes much to stderr never blocks on it.
        let stderr = child.stderr.take();
        let stderr_reader = std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(mut stderr) = stderr {
                // A read error leaves what was read: stderr only explains a failure.
                let _ = stderr.read_to_end(&mut text);
            }
            text
        });
        let consumed = match child.stdout.take() {
            Some(stdout) => consume(&mut BufReader::with_capacity(1 << 16, stdout)),
            None => Err(WorkspaceError::Parse {
                command: "git output",
                detail: "git's stdout was not captured".to_owned(),
            }),
        };
        let status = child
            .wait()
            .map_err(|source| WorkspaceError::io("wait for git in", &self.dir, source))?;
        let stderr = stderr_reader.join().unwrap_or_default();
        let value = consumed?;
        if status.success() {
            Ok(value)
        } else {
            let output = Output {
                status,
                stdout: Vec::new(),
                stderr,
            };
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

/// Whether the installed git reads attributes from a tree (`GIT_ATTR_SOURCE`, git 2.40 and
/// later); asked once.
fn supports_attr_source() -> bool {
    static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        let Ok(output) = Command::new("git").arg("version").output() else {
            return false;
        };
        let text = String::from_utf8_lossy(&output.stdout);
        let mut numbers = text
            .split_whitespace()
            .nth(2)
            .unwrap_or_default()
            .split('.')
            .map(|part| part.parse::<u32>().unwrap_or(0));
        let (major, minor) = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
        (major, minor) >= (2, 40)
    })
}
