//! Planner processes (`command`, `claude`, `codex`): run once under the supervisor like an
//! agent, their output captured in a private folder and read back bounded, as regular files
//! only.

use std::path::{Path, PathBuf};

use super::decision::{NotUtf8, decode};
use super::{External, Request};
use crate::outcome::Outcome;

/// The most of a planner process's stderr kept in its attempt record: the end of it, where a
/// failing program says why.
pub const STDERR_LIMIT: u64 = 64 * 1024;

/// The most of a planner process's stdout (and of codex's `-o` file) kept, on disk and in
/// memory: a planner that prints more is stopped and the attempt fails.
pub const OUTPUT_LIMIT: u64 = 4 * 1024 * 1024;

/// Why a planner process gave no answer to read.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// Its capture folder, working directory or runtime could not be set up.
    #[error(transparent)]
    Setup(#[from] std::io::Error),
    /// The profile names no program (a definition read from the configuration always does).
    #[error("the planner's `argv` is empty")]
    NoProgram,
    /// The program could not be started.
    #[error("`{program}` could not run: {source}")]
    CouldNotRun {
        /// The program as written in the profile.
        program: String,
        /// What the runner said.
        source: crate::runner::RunnerError,
    },
    /// It did not exit cleanly (a timeout, a non-zero exit).
    #[error("`{program}` ended {outcome}: {cause}{}", parenthesized(tail.as_deref()))]
    Ended {
        /// The program run.
        program: String,
        /// How it ended.
        outcome: Outcome,
        /// Why, as the supervisor says it (`exit code 1`).
        cause: String,
        /// Its last non-blank stderr line, if any.
        tail: Option<String>,
    },
    /// Its captured stdout could not be read back.
    #[error("`{program}`'s captured stdout `{}` {problem}", path.display())]
    Capture {
        /// The program run.
        program: String,
        /// The capture file.
        path: PathBuf,
        /// What was wrong with it.
        problem: ReadError,
    },
    /// It did not exit cleanly, and its captured stdout could not be read back either.
    #[error("{ended}; {capture}")]
    EndedAndCapture {
        /// How it ended ([`ProcessError::Ended`]).
        ended: Box<ProcessError>,
        /// What was wrong with its capture ([`ProcessError::Capture`]).
        capture: Box<ProcessError>,
    },
}

/// ` (text)`, or nothing.
fn parenthesized(text: Option<&str>) -> String {
    text.map(|text| format!(" ({text})")).unwrap_or_default()
}

/// Why a bounded read gave nothing; each message follows the name of the file concerned.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file is absent.
    #[error("was removed")]
    Missing,
    /// The file holds more than [`OUTPUT_LIMIT`] bytes.
    #[error("holds more than {OUTPUT_LIMIT} bytes")]
    TooLarge,
    /// Something else than a regular file holds the name (a FIFO, a symbolic link, a
    /// folder, a device), or it could not be read.
    #[error("was not read: {0}")]
    Refused(std::io::Error),
}

/// What a planner process left.
pub(super) struct Finished {
    /// Its standard output, at most [`OUTPUT_LIMIT`] bytes decoded lossily (kept as the
    /// attempt's raw answer whatever happened).
    pub stdout: String,
    /// Set when stdout is not UTF-8.
    pub not_utf8: Option<NotUtf8>,
    /// Why it did not exit cleanly (timeout, non-zero exit), with its last stderr line.
    pub failure: Option<ProcessError>,
    /// The end of what it wrote on stderr (see [`stderr_tail`]).
    pub stderr: Option<String>,
}

/// Reads at most [`OUTPUT_LIMIT`] bytes of a file the planner process could replace (its
/// `-o` file, the folder of its captures), decoded lossily, with the reason when it is not
/// UTF-8. Only a regular file is read, opened with `O_NOFOLLOW|O_NONBLOCK`
/// ([`safe_files::open_regular`](crate::artifacts::safe_files::open_regular)): a FIFO without
/// a writer would block a plain `open` forever, out of reach of the planner's timeout and of
/// the operator's Ctrl-C, and a link could lead anywhere (`/dev/zero`, a secret).
pub(super) fn read_capped(path: &Path) -> Result<(String, Option<NotUtf8>), ReadError> {
    let refused = |error: std::io::Error| match error.kind() {
        std::io::ErrorKind::NotFound => ReadError::Missing,
        _ => ReadError::Refused(error),
    };
    let file = crate::artifacts::safe_files::open_regular(path).map_err(refused)?;
    let (bytes, more) =
        crate::artifacts::safe_files::read_bounded(file, OUTPUT_LIMIT).map_err(refused)?;
    if more {
        return Err(ReadError::TooLarge);
    }
    Ok(decode(bytes))
}

/// The end of a planner process's captured stderr, for its attempt record: at most
/// [`STDERR_LIMIT`] bytes, decoded lossily, after a line saying how many bytes were cut when it
/// wrote more; `None` when it wrote nothing. Like the stdout beside it, the capture is read only
/// as a regular file (the planner knows the folder and could put a FIFO or a link there): what
/// was found instead is said.
fn stderr_tail(path: &Path) -> Option<String> {
    use std::io::{Seek, SeekFrom};
    let file = match crate::artifacts::safe_files::open_regular(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return None,
        Err(error) => return Some(format!("[the captured stderr was not read: {error}]")),
    };
    let length = file.metadata().map_or(0, |metadata| metadata.len());
    if length == 0 {
        return None;
    }
    let cut = length.saturating_sub(STDERR_LIMIT);
    let mut file = file;
    let read = file
        .seek(SeekFrom::Start(cut))
        .and_then(|_| crate::artifacts::safe_files::read_bounded(file, STDERR_LIMIT));
    let mut bytes = match read {
        Ok((bytes, _)) => bytes,
        Err(error) => return Some(format!("[the captured stderr was not read: {error}]")),
    };
    if cut == 0 {
        return Some(String::from_utf8_lossy(&bytes).into_owned());
    }
    // The cut may fall inside a character: its remaining bytes go with the cut part.
    let partial = bytes
        .iter()
        .take(3)
        .take_while(|byte| **byte & 0xC0 == 0x80)
        .count();
    bytes.drain(..partial);
    let cut = cut + partial as u64;
    Some(format!(
        "[the first {cut} of {length} bytes of stderr are cut; the last {} follow]\n{}",
        bytes.len(),
        String::from_utf8_lossy(&bytes)
    ))
}

/// The binary for a CLI planner: the `TNH_*_BIN` override, the profile's, the default.
pub(super) fn cli_binary(variable: &str, binary: &Option<String>, default: &str) -> String {
    std::env::var(variable)
        .ok()
        .filter(|value| !value.is_empty())
        .or_else(|| binary.clone())
        .unwrap_or_else(|| default.to_owned())
}

/// The `TNH_*` variables of a planner process: the host's (test scenarios, binary overrides),
/// then the run's, which win.
fn tnh_variables(request: &Request<'_>) -> std::collections::BTreeMap<String, String> {
    let mut variables: std::collections::BTreeMap<String, String> = std::env::vars()
        .filter(|(name, _)| name.starts_with("TNH_"))
        .collect();
    if let Some(run) = request.run_variables {
        variables.extend(
            run.iter()
                .map(|(name, value)| (name.clone(), value.clone())),
        );
    }
    variables
}

/// A planner program to run once: what the profile wrote, and its input.
pub(super) struct Invocation<'a> {
    /// The program as written (resolved against the repository root when relative).
    pub program: &'a str,
    /// Its arguments.
    pub args: &'a [String],
    /// What it reads on stdin.
    pub input: Vec<u8>,
}

/// Runs a planner process once under the supervisor (own process group, timeout, stdin
/// closed after the input); anything but a clean exit is a `failure` naming the cause, beside
/// the output (an error only when the process could not run at all). Its captures go to
/// `folder`, else to a folder of its own.
pub(super) fn run_process(
    external: &External,
    request: &Request<'_>,
    invocation: Invocation<'_>,
    folder: Option<&tempfile::TempDir>,
) -> Result<Finished, ProcessError> {
    let own;
    let folder = match folder {
        Some(folder) => folder,
        None => {
            own = tempfile::tempdir()?;
            &own
        }
    };
    // A relative program path is the repository's, not the worktree's (where the planner runs).
    let written = invocation.program;
    let root = external.root.as_deref();
    let program = crate::runner::adapters::resolve_program(written, root);
    let spec = process_spec(external, request, &program, invocation, folder.path())?;
    let runtime = crate::runner::runtime::shared()?;
    // Inside a run, the planner's group is recorded in the EVALUATE visit's folder while it
    // runs, like an agent's: `resume` ends it if this process dies meanwhile, members that
    // cleared their environment included.
    let record = request
        .run_variables
        .and_then(|run| run.get("TNH_STEP_DIR"))
        .filter(|dir| !dir.is_empty())
        .map(|dir| Path::new(dir).join(crate::runner::PROCESS_GROUP_FILE));
    let supervised = runtime
        .block_on(crate::runner::supervise_recorded(
            spec,
            request.cancellation.clone(),
            record.as_deref(),
        ))
        .map_err(|error| ProcessError::CouldNotRun {
            program: written.to_owned(),
            source: crate::runner::adapters::resolved_from(error, written, root),
        })?;
    let (stdout, not_utf8, replaced) = read_stdout(&program, folder.path());
    // Kept before the capture folder goes: why a planner failed is often only there.
    let stderr = stderr_tail(&folder.path().join("stderr"));
    let failure = match (ended(&program, &supervised), replaced) {
        (Some(ended), Some(capture)) => Some(ProcessError::EndedAndCapture {
            ended: Box::new(ended),
            capture: Box::new(capture),
        }),
        (ended, replaced) => ended.or(replaced),
    };
    Ok(Finished {
        stdout,
        not_utf8,
        failure,
        stderr,
    })
}

/// What the supervisor is given to run a planner program, its captures in `folder`.
fn process_spec(
    external: &External,
    request: &Request<'_>,
    program: &str,
    invocation: Invocation<'_>,
    folder: &Path,
) -> Result<crate::runner::ProcessSpec, ProcessError> {
    let cwd: PathBuf = match request.cwd {
        Some(cwd) => cwd.to_path_buf(),
        None => std::env::current_dir()?,
    };
    let limits = crate::runner::Limits {
        timeout: external.timeout,
        idle_timeout: None,
        max_stdout_bytes: Some(OUTPUT_LIMIT),
        ..Default::default()
    };
    let host = crate::runner::HostEnv::from_process();
    Ok(crate::runner::ProcessSpec {
        kind: crate::runner::ProcessKind::Planner,
        agent: "planner".into(),
        program: program.to_owned(),
        args: invocation.args.to_vec(),
        cwd,
        env: crate::runner::env::agent_environment(
            &host,
            &external.pass_env,
            &tnh_variables(request),
        ),
        stdin: invocation.input,
        stdout_path: folder.join("stdout"),
        stderr_path: folder.join("stderr"),
        format: crate::runner::CaptureFormat::Text,
        limits,
        remaining_budget_usd: None,
    })
}

/// The captured stdout, with why it is not UTF-8, or why it could not be read at all.
///
/// The supervisor kept at most [`OUTPUT_LIMIT`] bytes (and stopped the planner past them). The
/// planner knows the folder (its `-o` path is in it) and can put a FIFO or a link in place
/// of the capture: then its output is unknown, and the attempt failed.
fn read_stdout(program: &str, folder: &Path) -> (String, Option<NotUtf8>, Option<ProcessError>) {
    let path = folder.join("stdout");
    match read_capped(&path) {
        Ok((stdout, not_utf8)) => (stdout, not_utf8, None),
        Err(problem) => (
            String::new(),
            None,
            Some(ProcessError::Capture {
                program: program.to_owned(),
                path,
                problem,
            }),
        ),
    }
}

/// How a process that did not complete ended, with its last non-blank stderr line.
fn ended(program: &str, supervised: &crate::runner::Supervised) -> Option<ProcessError> {
    if supervised.outcome == Outcome::Completed {
        return None;
    }
    let tail = supervised
        .tail
        .iter()
        .rev()
        .find(|line| line.stream == crate::runner::Stream::Stderr && !line.text.trim().is_empty())
        .map(|line| line.text.clone());
    Some(ProcessError::Ended {
        program: program.to_owned(),
        outcome: supervised.outcome,
        cause: supervised.cause.clone(),
        tail,
    })
}
