//! Running the `git` command line: argv only (never a shell), a fixed identity for the commits
//! this module writes, and errors that say which git command failed and where.
//!
//! The git CLI is used for everything that reads or writes many files (worktree checkout,
//! snapshots, status, diff, reset): it is faster than libgit2 for those and honours the
//! operator's ignore rules, filters and index format exactly. See `docs/workspace.md`.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, waitid};
use nix::unistd::Pid;

use super::attributes::AttrSource;
use super::error::WorkspaceError;
use crate::workflow::duration::{DurationError, parse_duration};

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

/// Settings of the git that works in a run's worktree, beside [`NEVER_RUN_NESTED`]:
/// `index.skipHash=true` writes the worktree's and the scratch index without the checksum at
/// their end (git 2.40 and later read and write such an index; older ones ignore the
/// setting). A rollback writes an index four times, a snapshot once or twice, and on 20,000
/// files each checksum took about 8 ms; these indexes are the conductor's own, rewritten
/// from the worktree at every capture, so the checksum guards nothing a capture needs.
const IN_WORKTREE: [&str; 1] = ["index.skipHash=true"];

/// `GIT_CONFIG_PARAMETERS`: the operator's own, if set, then [`NEVER_RUN_NESTED`] (later
/// entries win), then [`IN_WORKTREE`] for a git working in a run's worktree.
fn config_parameters(in_worktree: bool) -> &'static str {
    static PARAMETERS: [std::sync::OnceLock<String>; 2] =
        [std::sync::OnceLock::new(), std::sync::OnceLock::new()];
    PARAMETERS[usize::from(in_worktree)].get_or_init(|| {
        let mut parameters = std::env::var("GIT_CONFIG_PARAMETERS").unwrap_or_default();
        let worktree_settings: &[&str] = if in_worktree { &IN_WORKTREE } else { &[] };
        for setting in NEVER_RUN_NESTED.iter().chain(worktree_settings) {
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
    /// Where `.gitattributes` are read from (`GIT_ATTR_SOURCE`), when git supports it: the
    /// run's base, so attributes an agent writes in the worktree (an `ident` that makes the
    /// patch show `$Id$` where the file holds a payload) cannot change what is recorded.
    attr_source: Option<AttrSource>,
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
        let common_dir = common_dir.into();
        Self {
            dir: dir.into(),
            index_file: None,
            git_dir: Some(git_dir.into()),
            attr_source: supports_attr_source().then(|| AttrSource::new(attr_source, &common_dir)),
            common_dir: Some(common_dir),
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

    /// The index file this git reads: its scratch index, or the worktree's own; `None` when
    /// git finds the repository itself.
    pub(crate) fn index_path(&self) -> Option<PathBuf> {
        match (&self.index_file, &self.git_dir) {
            (Some(index), _) => Some(index.clone()),
            (None, Some(git_dir)) => Some(git_dir.join("index")),
            (None, None) => None,
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
            .env(
                "GIT_CONFIG_PARAMETERS",
                config_parameters(self.git_dir.is_some()),
            )
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
            .env("GIT_NO_REPLACE_OBJECTS", "1");
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
            Some(source) => command.env("GIT_ATTR_SOURCE", source.tree_ish()),
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
            Err(self.failure(args, &output.stderr))
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
        self.run_tolerating_with_input(args, None, tolerated)
    }

    /// [`run_tolerating`](Self::run_tolerating) with `input`, if any, on git's stdin.
    pub(crate) fn run_tolerating_with_input<I, S>(
        &self,
        args: I,
        input: Option<&[u8]>,
        tolerated: impl Fn(&str) -> bool,
    ) -> Result<String, WorkspaceError>
    where
        I: IntoIterator<Item = S> + Clone,
        S: AsRef<OsStr>,
    {
        let mut written = Ok(());
        let (_, ended) = self.run_bounded(
            args.clone(),
            input.map(|bytes| (bytes, &mut written)),
            |stdout| {
                std::io::copy(stdout, &mut std::io::sink())
                    .map_err(|source| WorkspaceError::io("read git's output in", &self.dir, source))
            },
        )?;
        let stderr = String::from_utf8_lossy(&ended.stderr);
        let all_tolerated = stderr
            .lines()
            .filter(|line| !line.trim().is_empty())
            .all(tolerated);
        if !(ended.status.success() || all_tolerated) {
            return Err(self.failure(args, &ended.stderr));
        }
        written.map_err(|source| WorkspaceError::io("write to git in", &self.dir, source))?;
        Ok(stderr.into_owned())
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
        let mut written = Ok(());
        let (_, ended) = self.run_bounded(args.clone(), Some((input, &mut written)), |stdout| {
            std::io::copy(stdout, &mut std::io::sink())
                .map_err(|source| WorkspaceError::io("read git's output in", &self.dir, source))
        })?;
        if !ended.status.success() {
            return Err(self.failure(args, &ended.stderr));
        }
        written.map_err(|source| WorkspaceError::io("write to git in", &self.dir, source))
    }

    /// Runs git with `input` on its stdin and returns its stdout as trimmed text (for
    /// arguments too many for a command line: `rev-list --stdin`).
    pub(crate) fn text_with_input<I, S>(
        &self,
        args: I,
        input: &[u8],
    ) -> Result<String, WorkspaceError>
    where
        I: IntoIterator<Item = S> + Clone,
        S: AsRef<OsStr>,
    {
        let mut written = Ok(());
        let (stdout, ended) =
            self.run_bounded(args.clone(), Some((input, &mut written)), |stdout| {
                let mut text = String::new();
                stdout.read_to_string(&mut text).map_err(|source| {
                    WorkspaceError::io("read git's output in", &self.dir, source)
                })?;
                Ok(text)
            })?;
        if !ended.status.success() {
            return Err(self.failure(args, &ended.stderr));
        }
        written.map_err(|source| WorkspaceError::io("write to git in", &self.dir, source))?;
        Ok(stdout.trim().to_owned())
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
        let (value, ended) = self.run_bounded(args.clone(), None, consume)?;
        if ended.status.success() {
            Ok(value)
        } else {
            Err(self.failure(args, &ended.stderr))
        }
    }

    /// Runs git and returns how it ended, whatever its exit status (for commands whose
    /// status is an answer: `merge-base --is-ancestor`, `merge-tree`).
    pub(crate) fn output<I, S>(&self, args: I) -> Result<Output, WorkspaceError>
    where
        I: IntoIterator<Item = S> + Clone,
        S: AsRef<OsStr>,
    {
        let (stdout, ended) = self.run_bounded(args, None, |stdout| {
            let mut bytes = Vec::new();
            stdout
                .read_to_end(&mut bytes)
                .map_err(|source| WorkspaceError::io("read git's output in", &self.dir, source))?;
            Ok(bytes)
        })?;
        Ok(Output {
            status: ended.status,
            stdout,
            stderr: ended.stderr,
        })
    }

    /// Runs git under the time limit ([`git_timeout`]): `input`, if any, is written whole to
    /// its stdin first (git reads it all before it answers), then its stdout is handed to
    /// `consume` as it is produced while stderr is drained beside it, then git is waited for.
    /// A git still running at the limit is killed with every process it started (it runs in
    /// a process group of its own), and that is the error whatever `consume` made of the
    /// output cut short; otherwise an error of `consume` wins over git's exit status.
    fn run_bounded<I, S, T>(
        &self,
        args: I,
        input: Option<(&[u8], &mut std::io::Result<()>)>,
        consume: impl FnOnce(&mut dyn BufRead) -> Result<T, WorkspaceError>,
    ) -> Result<(T, Ended), WorkspaceError>
    where
        I: IntoIterator<Item = S> + Clone,
        S: AsRef<OsStr>,
    {
        let limit = git_timeout()?;
        let started = std::time::SystemTime::now();
        let _span = tracing::debug_span!("git", command = %describe(args.clone())).entered();
        let mut command = self.command(args.clone());
        command
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let child = command
            .spawn()
            .map_err(|source| spawn_error(&source, &self.dir))?;
        let mut running = Running::watch(child, limit)
            .map_err(|source| WorkspaceError::io("watch git in", &self.dir, source))?;
        let stderr = running.child.stderr.take();
        let stderr_reader = std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(mut stderr) = stderr {
                // A read error leaves what was read: stderr only explains a failure.
                let _ = stderr.read_to_end(&mut text);
            }
            text
        });
        if let (Some((bytes, written)), Some(mut stdin)) = (input, running.child.stdin.take()) {
            use std::io::Write;
            // Closed when written, so git sees the end of its input.
            *written = stdin.write_all(bytes);
        }
        let consumed = match running.child.stdout.take() {
            Some(stdout) => consume(&mut BufReader::with_capacity(1 << 16, stdout)),
            None => Err(WorkspaceError::Parse {
                command: "git output",
                detail: "git's stdout was not captured".to_owned(),
            }),
        };
        let (status, timed_out) = running
            .finish()
            .map_err(|source| WorkspaceError::io("wait for git in", &self.dir, source))?;
        let stderr = stderr_reader.join().unwrap_or_default();
        tracing::debug!(
            %status,
            elapsed_ms = started.elapsed().unwrap_or_default().as_millis(),
            "ended"
        );
        if timed_out {
            self.remove_lock_left_by_killed_git(started);
            return Err(WorkspaceError::GitTimedOut {
                command: describe(args),
                dir: self.dir.clone(),
                limit: format_limit(limit),
            });
        }
        Ok((consumed?, Ended { status, stderr }))
    }

    /// After git was killed at the limit: the lock it held on the index it was writing, if it
    /// took one, is removed, so the run's next git (after a `resume`) is not refused with
    /// "Unable to create '….lock': File exists". Only the conductor's own indexes (a scratch
    /// index, a run worktree's index) are looked at, and only a lock made after the killed git
    /// started: nothing else writes them while a run's conductor holds its lock.
    fn remove_lock_left_by_killed_git(&self, started: std::time::SystemTime) {
        let Some(index) = self.index_path() else {
            return;
        };
        let mut lock = index.into_os_string();
        lock.push(".lock");
        let lock = PathBuf::from(lock);
        // File times come from a coarser clock than `SystemTime::now`, a tick behind it.
        let since = started - Duration::from_secs(1);
        let made_by_killed_git = std::fs::symlink_metadata(&lock)
            .and_then(|metadata| metadata.modified())
            .is_ok_and(|modified| modified >= since);
        if made_by_killed_git {
            // Nothing more can be done if it cannot be removed: the next git names it.
            let _ = std::fs::remove_file(&lock);
        }
    }

    fn failure<I, S>(&self, args: I, stderr: &[u8]) -> WorkspaceError
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        WorkspaceError::Git {
            command: describe(args),
            dir: self.dir.clone(),
            stderr: String::from_utf8_lossy(stderr).trim().to_owned(),
        }
    }
}

/// The arguments after `git`, as an error shows them.
fn describe<I, S>(args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    args.into_iter()
        .map(|arg| arg.as_ref().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// What an ended git left besides its stdout.
struct Ended {
    status: ExitStatus,
    stderr: Vec<u8>,
}

/// How long one git command may run before it is killed: `TNH_GIT_TIMEOUT` (a duration such
/// as `90s` or `30m`), else [`DEFAULT_GIT_TIMEOUT`]. Every workspace operation is a few git
/// commands that take seconds even on large repositories (creating a worktree of 20,000 files
/// takes about 15 s); a git that runs for minutes is waiting on something that may never come
/// (a FIFO or a hung network file system named in its configuration: `core.excludesFile`,
/// an `include.path`, `~/.gitconfig` itself, which an agent running as the operator can
/// write), and without a limit the run would hang after its step with nobody told.
fn git_timeout() -> Result<Duration, WorkspaceError> {
    static LIMIT: std::sync::OnceLock<Result<Duration, DurationError>> = std::sync::OnceLock::new();
    LIMIT
        .get_or_init(|| parse_git_timeout(std::env::var_os("TNH_GIT_TIMEOUT").as_deref()))
        .clone()
        .map_err(WorkspaceError::InvalidGitTimeout)
}

/// The limit when `TNH_GIT_TIMEOUT` is unset or empty.
pub const DEFAULT_GIT_TIMEOUT: Duration = Duration::from_secs(600);

fn parse_git_timeout(value: Option<&OsStr>) -> Result<Duration, DurationError> {
    let Some(value) = value.filter(|value| !value.is_empty()) else {
        return Ok(DEFAULT_GIT_TIMEOUT);
    };
    let text = value.to_string_lossy();
    let limit = parse_duration(&text)?;
    if limit.is_zero() {
        return Err(DurationError {
            text: text.into_owned(),
            reason: "git would be killed as it starts: give a limit longer than zero",
        });
    }
    Ok(limit)
}

/// A limit as the operator would write it (`10m`, `90s`, `1500ms`).
fn format_limit(limit: Duration) -> String {
    let millis = limit.as_millis();
    if millis.is_multiple_of(60_000) {
        format!("{}m", millis / 60_000)
    } else if millis.is_multiple_of(1_000) {
        format!("{}s", millis / 1_000)
    } else {
        format!("{millis}ms")
    }
}

/// A git process under its time limit: a watchdog thread kills git's process group when the
/// limit passes. git is reaped only after the watchdog has stopped, so the group it kills is
/// always git's own: a process id is not given to another process before it is reaped.
struct Running {
    child: Child,
    stop: Option<mpsc::Sender<()>>,
    watchdog: Option<std::thread::JoinHandle<bool>>,
}

impl Running {
    fn watch(mut child: Child, limit: Duration) -> std::io::Result<Self> {
        let group = Pid::from_raw(child.id() as i32);
        let (stop, stopped) = mpsc::channel::<()>();
        let watchdog = std::thread::Builder::new()
            .name("git-watchdog".to_owned())
            .spawn(move || match stopped.recv_timeout(limit) {
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    // Errors mean the group is gone already.
                    let _ = killpg(group, Signal::SIGKILL);
                    true
                }
                _ => false,
            });
        match watchdog {
            Ok(watchdog) => Ok(Self {
                child,
                stop: Some(stop),
                watchdog: Some(watchdog),
            }),
            Err(error) => {
                // No git runs unwatched.
                let _ = killpg(group, Signal::SIGKILL);
                let _ = child.wait();
                Err(error)
            }
        }
    }

    /// Waits for git to end, stops the watchdog, then reaps git: its exit status, and whether
    /// it was killed for running past the limit.
    fn finish(mut self) -> std::io::Result<(ExitStatus, bool)> {
        let pid = Pid::from_raw(self.child.id() as i32);
        loop {
            match waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
                Ok(_) => break,
                Err(Errno::EINTR) => continue,
                Err(errno) => return Err(std::io::Error::from(errno)),
            }
        }
        let killed = self.stop_watchdog();
        let status = self.child.wait()?;
        // A git that ended on its own as the limit passed is not a timeout.
        Ok((
            status,
            killed && status.signal() == Some(Signal::SIGKILL as i32),
        ))
    }

    fn stop_watchdog(&mut self) -> bool {
        drop(self.stop.take());
        self.watchdog
            .take()
            .is_some_and(|watchdog| watchdog.join().unwrap_or(false))
    }
}

impl Drop for Running {
    /// A git left running by an early return (a panic in a consumer) is killed and reaped.
    fn drop(&mut self) {
        if self.watchdog.is_some() {
            self.stop_watchdog();
            let _ = killpg(Pid::from_raw(self.child.id() as i32), Signal::SIGKILL);
            let _ = self.child.wait();
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

/// The installed git's major and minor version (`(0, 0)` when it cannot be told); asked once.
fn git_version() -> (u32, u32) {
    static VERSION: std::sync::OnceLock<(u32, u32)> = std::sync::OnceLock::new();
    *VERSION.get_or_init(|| {
        let Ok(output) = Command::new("git").arg("version").output() else {
            return (0, 0);
        };
        let text = String::from_utf8_lossy(&output.stdout);
        let mut numbers = text
            .split_whitespace()
            .nth(2)
            .unwrap_or_default()
            .split('.')
            .map(|part| part.parse::<u32>().unwrap_or(0));
        (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0))
    })
}

/// Whether the installed git reads attributes from a tree (`GIT_ATTR_SOURCE`, git 2.40 and
/// later).
fn supports_attr_source() -> bool {
    git_version() >= (2, 40)
}

/// Whether the installed git's `for-each-ref` takes `--exclude` (git 2.42 and later).
pub(crate) fn supports_ref_exclude() -> bool {
    git_version() >= (2, 42)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_git_limit_is_a_duration_longer_than_zero_defaulting_to_ten_minutes() {
        assert_eq!(parse_git_timeout(None), Ok(DEFAULT_GIT_TIMEOUT));
        assert_eq!(
            parse_git_timeout(Some(OsStr::new(""))),
            Ok(DEFAULT_GIT_TIMEOUT)
        );
        assert_eq!(
            parse_git_timeout(Some(OsStr::new("90s"))),
            Ok(Duration::from_secs(90))
        );
        assert_eq!(
            parse_git_timeout(Some(OsStr::new("1h30m"))),
            Ok(Duration::from_secs(5400))
        );
        for refused in ["0s", "10", "ten minutes", "-5m"] {
            let error = parse_git_timeout(Some(OsStr::new(refused))).unwrap_err();
            assert_eq!(error.text, refused);
        }
        assert_eq!(format_limit(DEFAULT_GIT_TIMEOUT), "10m");
        assert_eq!(format_limit(Duration::from_secs(90)), "90s");
        assert_eq!(format_limit(Duration::from_millis(1500)), "1500ms");
    }

    /// The watchdog kills the whole process group at the limit (a process the command left in
    /// the background included) and says so; a command that ends first is not a timeout.
    #[test]
    fn a_watched_process_is_killed_with_its_group_at_the_limit() {
        let mut command = Command::new("sh");
        command
            .args(["-c", "sleep 3600 & echo $!; wait"])
            .stdout(Stdio::piped())
            .process_group(0);
        let mut running =
            Running::watch(command.spawn().unwrap(), Duration::from_millis(200)).unwrap();
        let mut stdout = BufReader::new(running.child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let sleeper: i32 = line.trim().parse().unwrap();
        let (status, timed_out) = running.finish().unwrap();
        assert!(timed_out, "{status:?}");
        assert_eq!(status.signal(), Some(Signal::SIGKILL as i32));
        // The background `sleep` holds the shell's stdout: the end of that output is the event
        // of its death. Waited for on a channel, so a `sleep` left alive fails the test (after
        // a bound only a broken kill reaches) instead of hanging it for an hour.
        let (ended, end) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut stdout, &mut std::io::sink());
            let _ = ended.send(());
        });
        let gone = end.recv_timeout(Duration::from_secs(60)).is_ok();
        if !gone {
            let _ = nix::sys::signal::kill(Pid::from_raw(sleeper), Signal::SIGKILL);
        }
        assert!(
            gone,
            "the background process {sleeper} outlived its group's kill"
        );

        let mut quick = Command::new("true");
        quick.process_group(0);
        let running = Running::watch(quick.spawn().unwrap(), Duration::from_secs(60)).unwrap();
        let (status, timed_out) = running.finish().unwrap();
        assert!(status.success() && !timed_out);
    }
}

#[cfg(test)]
mod index_checksum_tests {
    use super::*;
    use crate::ids::StepId;
    use crate::workspace::RollbackTarget;
    use crate::workspace::test_support::{committed_workspace, git as git_in};

    fn ends_in_zeros(index: &Path) -> bool {
        let bytes = std::fs::read(index).unwrap();
        bytes[bytes.len() - 20..].iter().all(|byte| *byte == 0)
    }

    /// The indexes of the run's worktree (the scratch index and the worktree's own) are
    /// written without their checksum; the operator's index keeps its own; git reads them
    /// all as before.
    #[test]
    fn the_worktrees_indexes_are_written_without_a_checksum_and_the_operators_keeps_its_own() {
        if !supports_attr_source() {
            return; // git older than 2.40 ignores `index.skipHash`.
        }
        let scratch = tempfile::tempdir().unwrap();
        let files: [(&str, &[u8]); 2] = [("a.txt", b"a\n"), ("b/c.txt", b"c\n")];
        let workspace = committed_workspace(scratch.path(), &files, "checksum");
        let operator_index = scratch.path().join(".git/index");
        let operator_bytes = std::fs::read(&operator_index).unwrap();
        std::fs::write(workspace.path().join("a.txt"), "changed\n").unwrap();
        std::fs::write(workspace.path().join("new.txt"), "new\n").unwrap();

        let snapshot = workspace
            .snapshot_pre_step(&StepId::new("step"), 1)
            .unwrap();
        workspace.rollback(RollbackTarget::PreRun).unwrap();

        assert!(ends_in_zeros(&workspace.scratch_index()));
        assert!(ends_in_zeros(&workspace.worktree_git_dir.join("index")));
        assert!(!ends_in_zeros(&operator_index));
        assert_eq!(std::fs::read(&operator_index).unwrap(), operator_bytes);
        let status = git_in(workspace.path(), &["status", "--porcelain"]);
        assert_eq!(String::from_utf8_lossy(&status), "");
        let listed = git_in(
            workspace.path(),
            &["ls-tree", "-r", "--name-only", &snapshot.tree],
        );
        assert_eq!(
            String::from_utf8_lossy(&listed),
            "a.txt\nb/c.txt\nnew.txt\n"
        );
        git_in(scratch.path(), &["fsck", "--no-progress"]);
    }
}
