//! Running one process per step and never losing track of it.
//!
//! Modelled on cargo-nextest: the child leads its own process group; one `tokio::select!`
//! loop is the single source of truth for output, timers, the leader's exit and operator
//! cancellation, and all decisions live in a small state machine ([`super::state`]) that the
//! loop feeds. stdin gets the prompt and is closed; stdout and stderr go to files as they
//! arrive. Ending a step is SIGTERM to the group, a grace period during which output is still
//! drained, then SIGKILL. When the leader exits but its pipes stay open, the descendants
//! holding them are leaked: after a short leak timeout they are killed and reported. A final
//! sweep ([`super::sweep`]) stops, kills and reports anything of the step still alive, in
//! passes until one finds nothing, so no process of a step survives it — not even one that
//! keeps forking.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::Signal;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::RunnerError;
use super::cancel::Cancellation;
use super::capture::{StreamCapture, TailLine};
use super::process::{
    self, OUTER_SUPERVISION_TOKEN_VARIABLE, SUPERVISION_TOKEN_VARIABLE, StepMark, StrayProcess,
};
use super::progress::{CaptureFormat, Stream};
use super::state::{State, StopReason, Termination};
use crate::outcome::Outcome;

/// The size of each read from a pipe; large reads keep bulk output cheap.
const READ_SIZE: usize = 1024 * 1024;
/// The pipe capacity asked for (Linux's default unprivileged maximum): with the default
/// 64 KiB, each loop iteration moves at most 64 KiB and the per-iteration cost of the
/// dispatcher dominates bulk output.
const PIPE_CAPACITY: i32 = 1024 * 1024;

/// Time limits of one supervised process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Wall-clock limit: `killed_timeout` when reached.
    pub timeout: Duration,
    /// Longest time without progress: `killed_idle` when reached. `None` disables it.
    pub idle_timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL, during which output is still drained.
    pub grace: Duration,
    /// How long a question-shaped unterminated line must stay unchanged to be a prompt.
    pub prompt_settle: Duration,
    /// How long pipes may stay open after the leader exits before holders are killed.
    pub leak_timeout: Duration,
    /// The most stdout kept: past it nothing more is written and the process is stopped
    /// (`killed_policy`, cause `output_limit`). `None` keeps everything (validators); an
    /// agent step left at `None` gets its profile's `max_output_mib` (default 256 MiB).
    pub max_stdout_bytes: Option<u64>,
    /// The same limit for stderr.
    pub max_stderr_bytes: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(60 * 60),
            idle_timeout: Some(Duration::from_secs(10 * 60)),
            grace: Duration::from_secs(10),
            prompt_settle: Duration::from_secs(2),
            leak_timeout: Duration::from_millis(500),
            max_stdout_bytes: None,
            max_stderr_bytes: None,
        }
    }
}

/// What a supervised process is to the run: errors name it so (`failed to spawn validator
/// `tests``) and say what to fix for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessKind {
    /// An agent profile's CLI.
    Agent,
    /// A RUN_VALIDATION validator.
    Validator,
    /// An external planner backend.
    Planner,
}

impl ProcessKind {
    /// The word used in messages.
    pub fn name(self) -> &'static str {
        match self {
            ProcessKind::Agent => "agent",
            ProcessKind::Validator => "validator",
            ProcessKind::Planner => "planner",
        }
    }
}

/// Everything needed to run one process.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    /// What the process is, for error messages.
    pub kind: ProcessKind,
    /// The agent profile, validator id or planner name, for error messages.
    pub agent: String,
    /// The program (a path, or a name looked up on the given `PATH`).
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its working directory (the worktree).
    pub cwd: PathBuf,
    /// Its complete environment; nothing else is inherited (see [`super::env`]).
    pub env: Vec<(String, String)>,
    /// Written to stdin, which is then closed.
    pub stdin: Vec<u8>,
    /// Where stdout is streamed.
    pub stdout_path: PathBuf,
    /// Where stderr is streamed.
    pub stderr_path: PathBuf,
    /// How output lines are interpreted.
    pub format: CaptureFormat,
    /// Time limits.
    pub limits: Limits,
    /// The run's remaining budget; a reported cost above it ends the step.
    pub remaining_budget_usd: Option<f64>,
}

/// How a supervised process ended, with the evidence the supervisor gathered.
#[derive(Debug, Clone)]
pub struct Supervised {
    /// `completed`, `error`, `killed_timeout`, `killed_idle` or `killed_policy`.
    pub outcome: Outcome,
    /// Why, e.g. `exit code 1`, `interactive_prompt: "Continue? [y/N]"`.
    pub cause: String,
    /// The leader's pid, which is also the process group id.
    pub pid: i32,
    /// The leader's exit code, when it exited by itself.
    pub exit_code: Option<i32>,
    /// The signal that ended the leader, when one did.
    pub signal: Option<i32>,
    /// What the supervisor did to end the process.
    pub termination: Termination,
    /// When the process was started.
    pub started_at: SystemTime,
    /// When supervision ended (after the final sweep).
    pub ended_at: SystemTime,
    /// Bytes written to stdout.
    pub stdout_bytes: u64,
    /// Bytes written to stderr.
    pub stderr_bytes: u64,
    /// Lines written to stdout.
    pub stdout_lines: u64,
    /// Lines written to stderr.
    pub stderr_lines: u64,
    /// Descendants found alive after the leader exited; all were sent SIGKILL (any that
    /// outlived the final sweep are in [`Termination::survivors`]).
    pub leaked: Vec<StrayProcess>,
    /// The last lines of output.
    pub tail: Vec<TailLine>,
    /// The highest cumulative cost reported in the stream.
    pub reported_cost_usd: Option<f64>,
}

/// Runs `spec` to its end and reports how it ended.
///
/// Errors only when the process cannot be started or its output cannot be written; every
/// behaviour of the process itself is an outcome.
pub async fn supervise(spec: ProcessSpec, cancel: Cancellation) -> Result<Supervised, RunnerError> {
    supervise_recorded(spec, cancel, None).await
}

/// [`supervise`], keeping the step's process group recorded in `group_record` (a
/// [`super::sweep::RecordedGroup`] as JSON, normally the step folder's
/// [`super::sweep::PROCESS_GROUP_FILE`]) from the moment the leader exists until its
/// processes are gone: if this process dies meanwhile, the file tells `resume` which group to
/// end ([`super::sweep::kill_recorded_group`]). Writing it is best effort: without it,
/// `resume` finds the step's processes by their environment alone.
pub async fn supervise_recorded(
    spec: ProcessSpec,
    mut cancel: Cancellation,
    group_record: Option<&Path>,
) -> Result<Supervised, RunnerError> {
    // A missing working directory would otherwise surface as a misleading "program not
    // found" (both are ENOENT from exec).
    if !spec.cwd.is_dir() {
        let missing = std::io::Error::new(std::io::ErrorKind::NotFound, "not a directory");
        return Err(RunnerError::io(
            "enter working directory",
            &spec.cwd,
            missing,
        ));
    }
    let stdout = StreamCapture::create(Stream::Stdout, spec.format, &spec.stdout_path)?
        .limited(spec.limits.max_stdout_bytes);
    let stderr = StreamCapture::create(Stream::Stderr, spec.format, &spec.stderr_path)?
        .limited(spec.limits.max_stderr_bytes);
    let mut mark = StepMark::before_start();
    let started_at = SystemTime::now();
    let mut child = spawn(&spec, &mark.token)?;
    // A spawned child always has a pid until it is reaped, which has not happened yet.
    let pid = child.id().map_or(0, |id| id as i32);
    // Events, not an entered span: the span's guard cannot be held across an await.
    tracing::debug!(program = %spec.program, pid, cwd = %spec.cwd.display(), "process started");
    mark.pgid = pid;
    let recorded = group_record.and_then(|path| {
        let group = super::sweep::RecordedGroup::of_leader(pid)?;
        let text = serde_json::to_vec(&group).ok()?;
        crate::artifacts::safe_files::write_new(path, &text).ok()?;
        Some(path.to_owned())
    });
    let mut guard = GroupGuard {
        mark: mark.clone(),
        armed: true,
        record: recorded,
    };
    feed_stdin(child.stdin.take(), spec.stdin.clone());
    let mut out_pipe = child.stdout.take();
    let mut err_pipe = child.stderr.take();
    enlarge_pipe(out_pipe.as_ref());
    enlarge_pipe(err_pipe.as_ref());
    let mut state = State::new(mark, &spec, stdout, stderr, Instant::now());
    if let Some(level) = cancel.already_requested() {
        state.on_cancel(level, Instant::now());
    }
    let mut out_buffer = vec![0u8; READ_SIZE];
    let mut err_buffer = vec![0u8; READ_SIZE];
    while !state.finished(out_pipe.is_some(), err_pipe.is_some()) {
        let deadline = state.next_deadline(out_pipe.is_some() || err_pipe.is_some());
        tokio::select! {
            request = cancel.next_request(), if cancel.is_live() => {
                if let Some(level) = request {
                    state.on_cancel(level, Instant::now());
                }
            }
            read = read_some(&mut out_pipe, &mut out_buffer) => {
                state.on_read(Stream::Stdout, &read, &out_buffer, Instant::now());
                if !matches!(read, Ok(count) if count > 0) { out_pipe = None; }
            }
            read = read_some(&mut err_pipe, &mut err_buffer) => {
                state.on_read(Stream::Stderr, &read, &err_buffer, Instant::now());
                if !matches!(read, Ok(count) if count > 0) { err_pipe = None; }
            }
            status = child.wait(), if !state.has_exited() => {
                state.on_exit(status.ok(), Instant::now());
            }
            () = tokio::time::sleep_until(deadline.into()) => {
                state.on_tick(Instant::now(), out_pipe.is_some() || err_pipe.is_some());
            }
        }
    }
    let swept = super::sweep::sweep_step(state.mark()).await;
    tracing::debug!(
        program = %spec.program,
        pid,
        elapsed_ms = started_at.elapsed().unwrap_or_default().as_millis(),
        "process ended"
    );
    guard.armed = false;
    guard.forget_record();
    Ok(state.into_result(swept, started_at, SystemTime::now()))
}

/// Asks for a larger pipe; a refusal (a lowered `pipe-max-size`) only costs speed.
fn enlarge_pipe<P: std::os::fd::AsFd>(pipe: Option<&P>) {
    if let Some(pipe) = pipe {
        let _ = nix::fcntl::fcntl(pipe, nix::fcntl::FcntlArg::F_SETPIPE_SZ(PIPE_CAPACITY));
    }
}

/// Reads from a pipe, or waits forever once it is closed (so `select!` ignores it).
async fn read_some<R: AsyncRead + Unpin>(
    pipe: &mut Option<R>,
    buffer: &mut [u8],
) -> std::io::Result<usize> {
    match pipe {
        Some(reader) => reader.read(buffer).await,
        None => std::future::pending().await,
    }
}

fn spawn(spec: &ProcessSpec, token: &str) -> Result<tokio::process::Child, RunnerError> {
    let mut command = tokio::process::Command::new(program_path(spec));
    command
        .args(&spec.args)
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(spec.env.iter().map(|(name, value)| (name, value)))
        .env(SUPERVISION_TOKEN_VARIABLE, token)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // The child leads a new group, so one signal reaches all its descendants.
        .process_group(0);
    // Started inside a supervised step (the step's token is in the environment given): the
    // child keeps that token as the outer one, so the step's own sweep still finds it.
    if let Some((_, outer)) = spec.env.iter().find(|(name, value)| {
        name.as_str() == SUPERVISION_TOKEN_VARIABLE && value.as_str() != token
    }) {
        command.env(OUTER_SUPERVISION_TOKEN_VARIABLE, outer);
    }
    command
        .spawn()
        .map_err(|error| RunnerError::spawn(spec.kind, &spec.agent, &spec.program, error))
}

/// The program to start, looked up on the child's own `PATH` (the directories `execvp` would
/// try, in order) when it is a bare name.
///
/// Given a path, the standard library starts the child with `posix_spawn`, a vfork that shares
/// our memory until the `exec`; given a bare name with a replaced environment it must `fork`,
/// after which every page this process writes takes a copy-on-write fault. A name found
/// nowhere is returned as it is, so the spawn fails with the usual "not found".
fn program_path(spec: &ProcessSpec) -> PathBuf {
    find_program(&spec.program, &spec.env, &spec.cwd)
        .unwrap_or_else(|| PathBuf::from(&spec.program))
}

/// Where `execvp` would find `program` for a child with environment `env` in `cwd`: a path is
/// taken as it is, a bare name is looked up on the child's own `PATH`. `None` when a bare name
/// is found nowhere.
pub(crate) fn find_program(program: &str, env: &[(String, String)], cwd: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    let search = env
        .iter()
        .find(|(name, _)| name == "PATH")
        .map_or("/bin:/usr/bin", |(_, value)| value.as_str());
    search
        .split(':')
        // Relative entries (an empty one is `.`) are taken from the child's working
        // directory, where `execvp` would look them up.
        .map(|directory| cwd.join(directory).join(program))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
}

/// Writes the prompt and closes stdin, without ever blocking the dispatcher loop: a child
/// that never reads would otherwise stall us on a full pipe.
fn feed_stdin(stdin: Option<tokio::process::ChildStdin>, prompt: Vec<u8>) {
    let Some(mut stdin) = stdin else { return };
    tokio::spawn(async move {
        // A child that exits without reading gives EPIPE; that is its business.
        let _ = stdin.write_all(&prompt).await;
        let _ = stdin.shutdown().await;
        drop(stdin);
    });
}

/// Kills the group if supervision is abandoned (the future dropped mid-run), and removes the
/// group's record once the group is gone.
struct GroupGuard {
    mark: StepMark,
    armed: bool,
    /// Where the group is recorded for `resume`, while it is.
    record: Option<PathBuf>,
}

impl GroupGuard {
    fn forget_record(&mut self) {
        if let Some(path) = self.record.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed && self.mark.pgid > 0 {
            process::signal_step(&self.mark, Signal::SIGKILL);
        }
        self.forget_record();
    }
}

/// The exit code and signal of a leader's status.
pub(crate) fn status_parts(status: Option<std::process::ExitStatus>) -> (Option<i32>, Option<i32>) {
    match status {
        Some(status) => (status.code(), status.signal()),
        None => (None, None),
    }
}

/// How a stop reason and the leader's status map to an outcome and a cause.
pub(crate) fn classify(
    reason: Option<&StopReason>,
    exit_code: Option<i32>,
    signal: Option<i32>,
) -> (Outcome, String) {
    if let Some(reason) = reason {
        return (reason.outcome(), reason.cause());
    }
    match (exit_code, signal) {
        (Some(0), _) => (Outcome::Completed, "exit code 0".to_owned()),
        (Some(code), _) if code > 128 && code < 160 => (
            Outcome::Error,
            format!(
                "exit code {code} (128+{}: the process reports death by {})",
                code - 128,
                signal_name(code - 128)
            ),
        ),
        (Some(code), _) => (Outcome::Error, format!("exit code {code}")),
        (None, Some(signal)) => (
            Outcome::Error,
            format!("killed by signal {signal} ({})", signal_name(signal)),
        ),
        (None, None) => (
            Outcome::Error,
            "the exit status could not be read".to_owned(),
        ),
    }
}

fn signal_name(number: i32) -> String {
    Signal::try_from(number).map_or_else(
        |_| format!("signal {number}"),
        |signal| signal.as_str().to_owned(),
    )
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn spec_in(cwd: &std::path::Path, program: &str, path: &str) -> ProcessSpec {
        ProcessSpec {
            kind: ProcessKind::Agent,
            agent: "agent".into(),
            program: program.into(),
            args: Vec::new(),
            cwd: cwd.to_path_buf(),
            env: vec![("PATH".into(), path.into())],
            stdin: Vec::new(),
            stdout_path: cwd.join("stdout.txt"),
            stderr_path: cwd.join("stderr.txt"),
            format: CaptureFormat::Text,
            limits: Limits::default(),
            remaining_budget_usd: None,
        }
    }

    fn file(path: &std::path::Path, mode: u32) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_bare_name_is_looked_up_on_the_childs_path_from_its_working_directory() {
        let dir = tempfile::tempdir().unwrap();
        let absolute = dir.path().join("abs");
        // Not executable, then a directory of the same name: both skipped, as by `execvp`.
        file(&dir.path().join("plain/agent"), 0o644);
        std::fs::create_dir_all(dir.path().join("dirs/agent")).unwrap();
        file(&dir.path().join("rel/agent"), 0o755);
        file(&absolute.join("agent"), 0o755);
        let path = format!("plain:dirs:rel:{}", absolute.display());
        let spec = spec_in(dir.path(), "agent", &path);
        assert_eq!(program_path(&spec), dir.path().join("rel").join("agent"));
        // An empty entry is the working directory.
        file(&dir.path().join("agent"), 0o755);
        let spec = spec_in(dir.path(), "agent", ":rel");
        assert_eq!(program_path(&spec), dir.path().join("").join("agent"));
    }

    #[test]
    fn a_path_or_a_name_found_nowhere_is_kept_as_given() {
        let dir = tempfile::tempdir().unwrap();
        let spec = spec_in(dir.path(), "./agent", "/nonexistent");
        assert_eq!(program_path(&spec), PathBuf::from("./agent"));
        let spec = spec_in(dir.path(), "no-such-agent", "/nonexistent");
        assert_eq!(program_path(&spec), PathBuf::from("no-such-agent"));
    }

    #[test]
    fn the_default_limits_are_the_documented_ones() {
        let limits = Limits::default();
        assert_eq!(limits.timeout, Duration::from_secs(60 * 60));
        assert_eq!(limits.idle_timeout, Some(Duration::from_secs(10 * 60)));
        let documented = include_str!("../../docs/workflows.md");
        assert!(
            documented.contains("after **1 hour** of wall-clock time")
                && documented.contains("after **10 minutes** without progress"),
            "docs/workflows.md states the default limits"
        );
    }
}
