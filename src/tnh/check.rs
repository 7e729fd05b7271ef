//! `tnh test|lint|typecheck`: run the validator of that name — the same registry and detection
//! as RUN_VALIDATION, under the same supervisor ([`crate::runner::supervise`]) — and print a
//! short summary; the full output is saved in the step folder inside a run.
//!
//! Supervised like a RUN_VALIDATION validator: the tool leads its own process group, its
//! output is streamed to files as it arrives (memory stays bounded whatever its size), the
//! command ends when the tool's own process ends (what it left holding the output is killed
//! after the leak timeout, what it left elsewhere by the final sweep), and a wall-clock limit
//! (`--timeout`, default 1 hour as for RUN_VALIDATION) ends it `killed_timeout`, never a pass.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::time::Duration;

use clap::Args;

use super::{TnhError, TnhResult, git, print};
use crate::exit::ExitStatus;
use crate::runner::{
    Cancellation, CaptureFormat, Limits, ProcessKind, ProcessSpec, StopReason, StrayProcess,
    Supervised,
};

/// The help after `tnh NAME --help`'s options: its examples, then what all three share.
macro_rules! check_help {
    ($examples:literal) => {
        concat!(
            "Examples:\n",
            $examples,
            "\n\nThe command comes from `validators:` in .tnh/config.yaml of the repository's main working tree \
(the file the run uses, never a run worktree's own .tnh/), else is detected (Cargo: cargo test / clippy / check; \
npm scripts; Python: pytest / ruff / mypy). Prints the exit code, duration, failing tests or first errors, and \
the tail.\n\nThe tool runs as RUN_VALIDATION runs it: the command returns when the tool's own process ends; \
processes it leaves behind are killed (and named). After --timeout (default 1h) the tool and everything it \
started are killed and the command says TIMED OUT. SIGTERM, SIGINT or SIGHUP sent to tnh stop the tool the \
same way (it says STOPPED).\n\n\
Exit codes: 0 the tool passed (it exited 0); 1 it ran and did not pass: any other exit code (2, 101, 127…), \
a signal, timed out or stopped — its own exit code is printed (`FAILED (exit N`) and is `exit_code` in --json; \
2 the tool was not run: no command configured or detected, it cannot be started, a bad option, an invalid \
.tnh/config.yaml, or outside a repository."
        )
    };
}
pub(crate) use check_help;

/// Between SIGTERM and SIGKILL when the tool is stopped: shorter than the conductor's own
/// grace (10 s), so that a step ended by the conductor while `tnh test` runs has the tool's
/// processes killed by `tnh` before `tnh` itself is killed.
const GRACE: Duration = Duration::from_secs(5);
/// How many error-looking lines are shown.
const FAILURE_LINES: usize = 15;
/// How many lines of the tail are shown.
const SHOWN_TAIL_LINES: usize = 20;
/// The most of one line held (and shown) when looking for errors.
const FAILURE_LINE_CAP: usize = 4096;

/// `tnh test|lint|typecheck [--json] [--timeout DURATION] [-- EXTRA…]`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Print the structured result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Kill the tool (and everything it started) after this long: `90s`, `20m`, `1h30m`
    /// (the default is RUN_VALIDATION's).
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_timeout)]
    pub timeout: Duration,
    /// Extra arguments passed to the tool.
    #[arg(last = true)]
    pub extra: Vec<String>,
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    match crate::workflow::duration::parse_duration(text) {
        Ok(duration) if duration.is_zero() => Err("the timeout must be longer than 0".into()),
        Ok(duration) => Ok(duration),
        Err(error) => Err(error.to_string()),
    }
}

/// What `tnh test|lint|typecheck --json` prints (`tnh-conductor schema tnh-check`).
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct CheckReport {
    /// The format's version.
    schema_version: u32,
    /// The validator's name (`tests`, `lint`, `typecheck`).
    validator: String,
    /// The command run.
    argv: Vec<String>,
    /// Whether the command was detected from the checkout rather than configured.
    detected: bool,
    /// `completed` (exit 0), `error` (another exit code, or a signal), `killed_timeout`, or
    /// `killed_policy` (stopped: tnh was signalled, or the tool waited for an answer).
    outcome: String,
    /// Why, e.g. `exit code 1`, `timeout: wall-clock limit of 1s reached`.
    cause: String,
    /// The tool's exit code; `null` when it did not exit by itself.
    exit_code: Option<i32>,
    /// The signal that ended the tool, when one did.
    signal: Option<i32>,
    /// True when the tool was killed for running longer than `timeout_ms`.
    timed_out: bool,
    /// The wall-clock limit, in milliseconds.
    timeout_ms: u64,
    /// From the start until the tool and what it left behind were ended.
    duration_ms: u64,
    /// Processes the tool left running after it ended; all were killed.
    leaked: Vec<StrayProcess>,
    /// The first lines that look like errors (at most 15).
    failures: Vec<String>,
    /// The last lines of output (at most 20), in the order they arrived.
    tail: Vec<String>,
    /// The full output (stdout, then stderr), inside a run.
    log: Option<String>,
}

/// Runs the validator `name`.
pub fn run(name: &str, args: &CheckArgs) -> TnhResult {
    let root = git::root()?;
    let loaded = super::config::load(&root)?;
    if let Some(note) = &loaded.note {
        super::note(note);
    }
    let command =
        crate::opcode::validators::registered(name, &loaded.config, &root).map_err(|reason| {
            TnhError::new(
                reason,
                format!(
                    "add `validators: {{{name}: {{argv: [...]}}}}` to {}",
                    loaded.path.display()
                ),
            )
        })?;
    let mut argv = command.argv.clone();
    argv.extend(args.extra.iter().cloned());
    let scratch = tempfile::Builder::new()
        .prefix("tnh-check-")
        .tempdir()
        .map_err(|error| {
            TnhError::new(
                format!("cannot create a temporary folder for the output: {error}"),
                "check TMPDIR",
            )
        })?;
    // Inside a run stdout goes straight to the step folder's log; stderr is appended to it
    // once the tool has ended.
    let log = std::env::var("TNH_STEP_DIR")
        .ok()
        .filter(|dir| !dir.is_empty())
        .filter(|dir| std::fs::create_dir_all(dir).is_ok())
        .and_then(|dir| reserve_log(Path::new(&dir), name));
    let stdout_path = log.clone().unwrap_or_else(|| scratch.path().join("stdout"));
    let stderr_path = scratch.path().join("stderr");
    let spec = ProcessSpec {
        kind: ProcessKind::Validator,
        agent: name.to_owned(),
        program: argv[0].clone(),
        args: argv[1..].to_vec(),
        cwd: root.clone(),
        // The tool gets tnh's own environment, as any command the agent runs would.
        env: std::env::vars_os()
            .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
            .collect(),
        stdin: Vec::new(),
        stdout_path: stdout_path.clone(),
        stderr_path: stderr_path.clone(),
        format: CaptureFormat::Text,
        limits: Limits {
            timeout: args.timeout,
            idle_timeout: None,
            grace: GRACE,
            ..Limits::default()
        },
        remaining_budget_usd: None,
    };
    let supervised = supervise(spec)?;
    let failures = first_failures(&[&stdout_path, &stderr_path]);
    let saved = log
        .filter(|log| append(log, &stderr_path))
        .map(|log| log.display().to_string());
    let timed_out = matches!(
        supervised.termination.reason,
        Some(StopReason::Timeout { .. })
    );
    let tail: Vec<String> = supervised
        .tail
        .iter()
        .skip(supervised.tail.len().saturating_sub(SHOWN_TAIL_LINES))
        .map(|line| line.text.clone())
        .collect();
    let duration = supervised
        .ended_at
        .duration_since(supervised.started_at)
        .unwrap_or_default();
    let report = CheckReport {
        schema_version: crate::artifacts::SCHEMA_VERSION,
        validator: name.to_owned(),
        argv,
        detected: command.detected,
        outcome: supervised.outcome.as_str().to_owned(),
        cause: stop_cause(&supervised),
        exit_code: supervised.exit_code,
        signal: supervised.signal,
        timed_out,
        timeout_ms: args.timeout.as_millis() as u64,
        duration_ms: duration.as_millis() as u64,
        leaked: supervised.leaked.clone(),
        failures,
        tail,
        log: saved,
    };
    if args.json {
        print(&format!(
            "{}\n",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        ));
    } else {
        print(&summary(&report, &supervised, duration));
    }
    Ok(exit_status(&supervised))
}

/// How `tnh test|lint|typecheck` exits: 0 when the tool exited 0 by itself, 1 for every other
/// end of a tool that ran (its own code is in the summary and the JSON). Not the tool's code:
/// a tool's 2 (pytest interrupted, eslint's configuration error) would read as tnh's own 2
/// (the tool was not run), and codes above 4 could not be told from a failure anyway.
fn exit_status(supervised: &Supervised) -> ExitStatus {
    match (&supervised.termination.reason, supervised.exit_code) {
        (None, Some(0)) => ExitStatus::Success,
        _ => ExitStatus::Failure,
    }
}

/// Supervises the tool to its end; SIGTERM, SIGINT and SIGHUP sent to tnh meanwhile stop it.
fn supervise(spec: ProcessSpec) -> Result<Supervised, TnhError> {
    let program = spec.program.clone();
    let runtime = crate::runner::runtime::shared()
        .map_err(|error| TnhError::new(format!("cannot start: {error}"), "try again"))?;
    let cancellation =
        crate::kernel::interrupts::listen().unwrap_or_else(|_| Cancellation::never());
    runtime
        .block_on(crate::runner::supervise(spec, cancellation))
        .map_err(|error| {
            let reason = match &error {
                crate::runner::RunnerError::Spawn { source, .. } => {
                    format!("cannot run `{program}`: {source}")
                }
                other => other.to_string(),
            };
            TnhError::new(
                reason,
                error
                    .hint()
                    .unwrap_or_else(|| "install the tool or configure the validator".into()),
            )
        })
}

/// The cause as tnh tells it: a stop names what stopped the tool.
fn stop_cause(supervised: &Supervised) -> String {
    match &supervised.termination.reason {
        Some(StopReason::Cancelled) => format!(
            "cancelled: tnh received {}; the tool and everything it started were ended",
            crate::kernel::interrupts::listen()
                .ok()
                .and_then(|cancellation| cancellation.cause())
                .unwrap_or_else(|| "a signal".into())
        ),
        _ => supervised.cause.clone(),
    }
}

/// The text summary.
fn summary(report: &CheckReport, supervised: &Supervised, duration: Duration) -> String {
    let name = &report.validator;
    let (verdict, detail) = match (&supervised.termination.reason, report.exit_code) {
        (None, Some(0)) => ("passed", "exit 0".to_owned()),
        (None, Some(code)) => ("FAILED", format!("exit {code}")),
        (None, None) => ("FAILED", report.cause.clone()),
        (Some(StopReason::Timeout { .. }), _) => ("TIMED OUT", report.cause.clone()),
        (Some(_), _) => ("STOPPED", report.cause.clone()),
    };
    let mut text = format!(
        "{name}: {verdict} ({detail}, {:.1}s) — {}\n",
        duration.as_secs_f64(),
        report.argv.join(" ")
    );
    if !report.leaked.is_empty() {
        let _ = writeln!(
            text,
            "killed {} process(es) the tool left running:",
            report.leaked.len()
        );
        for stray in &report.leaked {
            let _ = writeln!(text, "  {} {}", stray.pid, stray.command);
        }
    }
    for survivor in &supervised.termination.survivors {
        let _ = writeln!(
            text,
            "still running (could not be killed): {} {}",
            survivor.pid, survivor.command
        );
    }
    let passed = verdict == "passed";
    if !passed && !report.failures.is_empty() {
        text.push_str("first errors:\n");
        for line in &report.failures {
            let _ = writeln!(text, "  {line}");
        }
    }
    if !passed {
        text.push_str("tail:\n");
        for line in &report.tail {
            let _ = writeln!(text, "  {line}");
        }
    }
    if let Some(path) = &report.log {
        let _ = writeln!(text, "full output: {path}");
    }
    text
}

/// The first lines of `files` (read in order) that look like errors, each cut to
/// [`FAILURE_LINE_CAP`] bytes. Files are read a buffer at a time: memory stays bounded
/// whatever their size and however long their lines.
fn first_failures(files: &[&Path]) -> Vec<String> {
    let mut found = Vec::new();
    let consider = |line: &[u8], found: &mut Vec<String>| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let text = String::from_utf8_lossy(line);
        let lower = text.to_lowercase();
        if (lower.contains("error") || lower.contains("failed") || lower.contains("panicked"))
            && !says_none_failed(&lower)
        {
            found.push(text.into_owned());
        }
    };
    for path in files {
        let Ok(file) = crate::artifacts::safe_files::open_regular(path) else {
            continue;
        };
        let mut reader = BufReader::with_capacity(64 * 1024, file);
        let mut line = Vec::new();
        loop {
            if found.len() >= FAILURE_LINES {
                return found;
            }
            let buffer = match reader.fill_buf() {
                Ok(buffer) if !buffer.is_empty() => buffer,
                _ => break,
            };
            let newline = memchr::memchr(b'\n', buffer);
            let piece = &buffer[..newline.unwrap_or(buffer.len())];
            let room = FAILURE_LINE_CAP.saturating_sub(line.len());
            line.extend_from_slice(&piece[..piece.len().min(room)]);
            let used = newline.map_or(buffer.len(), |at| at + 1);
            reader.consume(used);
            if newline.is_some() {
                consider(&line, &mut found);
                line.clear();
            }
        }
        if !line.is_empty() && found.len() < FAILURE_LINES {
            consider(&line, &mut found);
        }
    }
    found
}

/// Whether a lowercase summary line says `0 failed` (the number zero, not the end of `10`):
/// a passing summary (`test result: ok. 5 passed; 0 failed`), not a failure.
fn says_none_failed(lower: &str) -> bool {
    lower.match_indices("0 failed").any(|(at, _)| {
        !lower[..at]
            .chars()
            .next_back()
            .is_some_and(|before| before.is_ascii_digit())
    })
}

/// Reserves a new log for `tnh NAME` in the step folder `dir`: `tnh-NAME.log` for the
/// step's first call, then `tnh-NAME.2.log`, `tnh-NAME.3.log`, …, so that a later call never
/// erases the output of one the agent was pointed to. `None` when none can be created.
fn reserve_log(dir: &Path, name: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::OpenOptionsExt;
    for call in 1..=MAX_LOGS {
        let path = dir.join(crate::artifacts::tool_log_name(name, call));
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&path);
        match created {
            Ok(_) => return Some(path),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(_) => return None,
        }
    }
    None
}

/// The most logs of one tool kept in a step folder.
const MAX_LOGS: u32 = 10_000;

/// Appends the file `from` to the log `to`, streaming; false when the log is no longer a
/// regular file (the tool replaced it) or cannot be written.
fn append(to: &Path, from: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK;
    let Ok(mut log) = std::fs::OpenOptions::new()
        .append(true)
        .custom_flags(flags.bits())
        .open(to)
    else {
        return false;
    };
    if !log.metadata().is_ok_and(|meta| meta.is_file()) {
        return false;
    }
    match crate::artifacts::safe_files::open_regular(from) {
        Ok(mut source) => std::io::copy(&mut source, &mut log).is_ok(),
        Err(_) => true,
    }
}
