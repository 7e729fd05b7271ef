//! The supervisor's state machine: every decision about one running process.
//!
//! The dispatcher loop in [`super::supervisor`] only waits; it hands each event (a chunk of
//! output, the leader's exit, a cancellation request, a timer tick) to [`State`], which
//! updates its phase — running, terminating (SIGTERM sent, grace running), killed (SIGKILL
//! sent, last output being drained) — and says when the next timer is due. Keeping the
//! decisions here, with `Instant`s passed in, keeps the loop small and the rules in one place.

use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};

use super::cancel::CancelLevel;
use super::capture::{ChunkSignals, StreamCapture, Tail};
use super::interactive::detect_prompt;
use super::process::{self, StepMark, StrayProcess};
use super::progress::Stream;
use super::supervisor::{Limits, ProcessSpec, Supervised, classify, status_parts};
use super::sweep::Swept;
use crate::outcome::Outcome;

/// After SIGKILL, how long output is still drained before pipes held by unkillable (escaped
/// and untraceable) processes are abandoned.
const DRAIN_AFTER_KILL: Duration = Duration::from_millis(500);
/// How much of a capture that filled the disk is given back so the step can be recorded.
const RECORD_ROOM: u64 = 8 * 1024 * 1024;
/// A deadline far enough away to mean "no timer".
const NEVER: Duration = Duration::from_secs(365 * 24 * 3600);

/// Why the supervisor ended a process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum StopReason {
    /// The wall-clock limit was reached.
    Timeout {
        /// The limit, in milliseconds.
        limit_ms: u64,
    },
    /// No progress for the idle limit.
    IdleTimeout {
        /// The limit, in milliseconds.
        limit_ms: u64,
        /// Only retry/reconnect noise was seen since the last progress.
        noise_only: bool,
    },
    /// An unterminated line looked like a question and stayed unanswered.
    InteractivePrompt {
        /// The question as printed.
        prompt: String,
    },
    /// The reported cost passed the run's remaining budget.
    BudgetExhausted {
        /// The cost the agent reported.
        reported_cost_usd: f64,
        /// What was left of the run budget.
        remaining_budget_usd: f64,
    },
    /// The run budget was spent before the step began, so the agent was not started.
    BudgetSpent {
        /// What was left of the run budget (zero or less).
        remaining_budget_usd: f64,
    },
    /// The operator cancelled the run.
    Cancelled,
    /// The process printed more on a stream than its limit allows (agents: the profile's
    /// `max_output_mib` per stream; planners: 4 MiB of stdout).
    OutputLimit {
        /// The limit, in bytes.
        limit_bytes: u64,
        /// The file that reached it (`stdout.txt`, `stderr.txt`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        file: Option<String>,
    },
    /// Output could not be written to disk.
    CaptureFailed {
        /// The I/O error.
        message: String,
    },
}

impl StopReason {
    /// The outcome a stop for this reason produces.
    pub fn outcome(&self) -> Outcome {
        match self {
            StopReason::Timeout { .. } => Outcome::KilledTimeout,
            StopReason::IdleTimeout { .. } => Outcome::KilledIdle,
            StopReason::InteractivePrompt { .. }
            | StopReason::BudgetExhausted { .. }
            | StopReason::BudgetSpent { .. }
            | StopReason::Cancelled
            | StopReason::OutputLimit { .. } => Outcome::KilledPolicy,
            StopReason::CaptureFailed { .. } => Outcome::Error,
        }
    }

    /// The cause string: a stable code, a colon, and details for the operator.
    pub fn cause(&self) -> String {
        match self {
            StopReason::Timeout { limit_ms } => {
                format!(
                    "timeout: wall-clock limit of {} reached",
                    human_duration(*limit_ms)
                )
            }
            StopReason::IdleTimeout {
                limit_ms,
                noise_only,
            } => format!(
                "idle_timeout: no progress for {}{}",
                human_duration(*limit_ms),
                if *noise_only {
                    " (only retry/reconnect messages)"
                } else {
                    ""
                }
            ),
            StopReason::InteractivePrompt { prompt } => format!("interactive_prompt: {prompt:?}"),
            StopReason::BudgetExhausted {
                reported_cost_usd,
                remaining_budget_usd,
            } => format!(
                "budget_exhausted: reported cost ${} exceeds the remaining run budget ${}",
                dollars(*reported_cost_usd),
                dollars(*remaining_budget_usd)
            ),
            StopReason::BudgetSpent {
                remaining_budget_usd,
            } => format!(
                "budget_exhausted: the run budget is spent (${} left); the agent was not started",
                dollars(*remaining_budget_usd)
            ),
            StopReason::Cancelled => "cancelled: the operator interrupted the run".to_owned(),
            StopReason::OutputLimit {
                limit_bytes,
                file: None,
            } => format!(
                "output_limit: more than {limit_bytes} bytes on stdout; the rest was not kept"
            ),
            StopReason::OutputLimit {
                limit_bytes,
                file: Some(file),
            } => format!(
                "output_limit: {file} reached the output limit of {} ({limit_bytes} bytes); the process was stopped and only the first {limit_bytes} bytes were kept",
                human_size(*limit_bytes)
            ),
            StopReason::CaptureFailed { message } => format!("capture_failed: {message}"),
        }
    }
}

/// Whether a write failed for lack of space (a full disk, an exhausted quota).
fn is_disk_full(kind: std::io::ErrorKind) -> bool {
    matches!(
        kind,
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

/// The cause of a capture that could not be written: the file, the error, and for a full
/// disk which disk and what to do.
fn capture_failure(capture: &StreamCapture, error: &std::io::Error) -> String {
    let file = capture.file_name();
    if !is_disk_full(error.kind()) {
        return format!("cannot write {file}: {error}");
    }
    let folder = capture
        .path
        .parent()
        .map_or_else(String::new, |folder| folder.display().to_string());
    format!(
        "cannot write {file}: {error}: the disk holding {folder} is full; the process was stopped (hint: free space on that disk)"
    )
}

/// Costs within this of each other are equal: a run budget less the sum of float costs is
/// off by far less than a nano-dollar, and must not end a step that spent exactly the rest.
pub(crate) const BUDGET_TOLERANCE_USD: f64 = 1e-9;

/// Whether a reported cost passes what is left of the budget.
pub(crate) fn exceeds_budget(cost_usd: f64, remaining_usd: f64) -> bool {
    cost_usd > remaining_usd + BUDGET_TOLERANCE_USD
}

/// Dollars with as many decimals as a difference the budget check sees needs (ten, since
/// it tolerates a nano-dollar), trailing zeros dropped but at least two kept:
/// `5.0` → `5.00`, `0.0001` → `0.0001`, `0.000148` → `0.000148`.
pub(crate) fn dollars(amount: f64) -> String {
    let text = format!("{amount:.10}");
    let trimmed = text.trim_end_matches('0');
    let decimals = trimmed
        .split_once('.')
        .map_or(0, |(_, decimals)| decimals.len());
    if decimals < 2 {
        format!("{amount:.2}")
    } else {
        trimmed.to_owned()
    }
}

/// `1048576` → `1 MiB`, `1000` → `1000 bytes`.
fn human_size(bytes: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{bytes} bytes")
    }
}

/// `1500` → `1.5s`, `300` → `300ms`, `60000` → `60s`.
pub(crate) fn human_duration(millis: u64) -> String {
    match millis {
        millis if millis < 1000 => format!("{millis}ms"),
        millis if millis % 1000 == 0 => format!("{}s", millis / 1000),
        millis => format!("{:.1}s", millis as f64 / 1000.0),
    }
}

/// What the supervisor did to end the process, for the evidence.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Termination {
    /// Why the supervisor stopped the process; absent when it ended by itself.
    pub reason: Option<StopReason>,
    /// Milliseconds after start when SIGTERM was sent to the group.
    pub sigterm_after_ms: Option<u64>,
    /// Milliseconds after start when SIGKILL was sent to the group.
    pub sigkill_after_ms: Option<u64>,
    /// Descendants held the output pipes open after the leader exited.
    pub pipes_held_after_exit: bool,
    /// Pipes were still open after SIGKILL and were abandoned.
    pub pipes_abandoned: bool,
    /// Processes of the step still alive when the final sweep gave up (it keeps stopping and
    /// killing them for 2 s); absent when none survived.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub survivors: Vec<StrayProcess>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    Terminating { kill_at: Instant },
    Killed { abandon_at: Instant },
}

#[derive(Debug)]
struct PromptWatch {
    stream: Stream,
    bytes_at_arming: u64,
    prompt: String,
    due: Instant,
}

/// The state of one supervised process.
#[derive(Debug)]
pub(crate) struct State {
    mark: StepMark,
    limits: Limits,
    budget: Option<f64>,
    started: Instant,
    phase: Phase,
    stdout: StreamCapture,
    stderr: StreamCapture,
    tail: Tail,
    last_progress: Instant,
    noise_since_progress: bool,
    prompt_watch: Option<PromptWatch>,
    exit: Option<(Instant, Option<std::process::ExitStatus>)>,
    termination: Termination,
    leaked: Vec<StrayProcess>,
    reported_cost: Option<f64>,
}

impl State {
    pub(crate) fn new(
        mark: StepMark,
        spec: &ProcessSpec,
        stdout: StreamCapture,
        stderr: StreamCapture,
        now: Instant,
    ) -> State {
        State {
            mark,
            limits: spec.limits,
            budget: spec.remaining_budget_usd,
            started: now,
            phase: Phase::Running,
            stdout,
            stderr,
            tail: Tail::default(),
            last_progress: now,
            noise_since_progress: false,
            prompt_watch: None,
            exit: None,
            termination: Termination::default(),
            leaked: Vec::new(),
            reported_cost: None,
        }
    }

    pub(crate) fn mark(&self) -> &StepMark {
        &self.mark
    }

    pub(crate) fn has_exited(&self) -> bool {
        self.exit.is_some()
    }

    /// Done when the leader has exited and its pipes are closed or abandoned.
    pub(crate) fn finished(&self, stdout_open: bool, stderr_open: bool) -> bool {
        self.exit.is_some() && (!(stdout_open || stderr_open) || self.termination.pipes_abandoned)
    }

    /// When the loop must next call [`State::on_tick`].
    pub(crate) fn next_deadline(&self, pipes_open: bool) -> Instant {
        let mut deadlines = Vec::with_capacity(4);
        match self.phase {
            Phase::Running => {
                deadlines.push(self.started + self.limits.timeout);
                if let Some(idle) = self.limits.idle_timeout {
                    deadlines.push(self.last_progress + idle);
                }
                if let Some(watch) = &self.prompt_watch {
                    deadlines.push(watch.due);
                }
                if let (Some((exited, _)), true) = (self.exit, pipes_open) {
                    deadlines.push(exited + self.limits.leak_timeout);
                }
            }
            Phase::Terminating { kill_at } => deadlines.push(kill_at),
            Phase::Killed { abandon_at } => deadlines.push(abandon_at),
        }
        deadlines.into_iter().min().unwrap_or(self.started + NEVER)
    }

    /// Handles the result of one read from a pipe (0 bytes or an error is end of stream).
    pub(crate) fn on_read(
        &mut self,
        stream: Stream,
        read: &std::io::Result<usize>,
        buffer: &[u8],
        now: Instant,
    ) {
        let count = match read {
            Ok(count) => *count,
            Err(_) => 0,
        };
        let (capture, tail) = match stream {
            Stream::Stdout => (&mut self.stdout, &mut self.tail),
            Stream::Stderr => (&mut self.stderr, &mut self.tail),
        };
        let signals = if count == 0 {
            Ok(capture.finish(tail))
        } else {
            capture.ingest(&buffer[..count], tail)
        };
        let over_limit = capture.over_limit.then(|| StopReason::OutputLimit {
            limit_bytes: capture.limit.unwrap_or(capture.bytes),
            file: Some(capture.file_name()),
        });
        let signals = signals.map_err(|error| capture_failure(capture, &error));
        if let Some(reason) = over_limit {
            self.begin_stop(reason, now);
        }
        match signals {
            Ok(signals) => self.on_signals(signals, now),
            Err(message) => self.begin_stop(StopReason::CaptureFailed { message }, now),
        }
        self.watch_for_prompt(stream, now);
    }

    fn on_signals(&mut self, signals: ChunkSignals, now: Instant) {
        if signals.progress {
            self.last_progress = now;
            self.noise_since_progress = false;
        } else if signals.noise {
            self.noise_since_progress = true;
        }
        if let Some(cost) = signals.reported_cost_usd {
            let highest = self.reported_cost.map_or(cost, |seen| seen.max(cost));
            self.reported_cost = Some(highest);
            if let Some(remaining) = self
                .budget
                .filter(|remaining| exceeds_budget(highest, *remaining))
            {
                let reason = StopReason::BudgetExhausted {
                    reported_cost_usd: highest,
                    remaining_budget_usd: remaining,
                };
                self.begin_stop(reason, now);
            }
        }
    }

    fn watch_for_prompt(&mut self, stream: Stream, now: Instant) {
        let capture = match stream {
            Stream::Stdout => &self.stdout,
            Stream::Stderr => &self.stderr,
        };
        match capture.question_candidate().and_then(detect_prompt) {
            Some(prompt) => {
                self.prompt_watch = Some(PromptWatch {
                    stream,
                    bytes_at_arming: capture.bytes,
                    prompt,
                    due: now + self.limits.prompt_settle,
                });
            }
            None if self
                .prompt_watch
                .as_ref()
                .is_some_and(|watch| watch.stream == stream) =>
            {
                self.prompt_watch = None;
            }
            None => {}
        }
    }

    pub(crate) fn on_exit(&mut self, status: Option<std::process::ExitStatus>, now: Instant) {
        self.exit = Some((now, status));
    }

    pub(crate) fn on_cancel(&mut self, level: CancelLevel, now: Instant) {
        self.begin_stop(StopReason::Cancelled, now);
        if level == CancelLevel::Immediate {
            self.send_kill(now);
        }
    }

    /// A timer fired: find which and act.
    pub(crate) fn on_tick(&mut self, now: Instant, pipes_open: bool) {
        match self.phase {
            Phase::Running => self.check_running_timers(now, pipes_open),
            Phase::Terminating { kill_at } if now >= kill_at => self.send_kill(now),
            Phase::Killed { abandon_at } if now >= abandon_at => {
                self.termination.pipes_abandoned = true
            }
            _ => {}
        }
    }

    fn check_running_timers(&mut self, now: Instant, pipes_open: bool) {
        if now >= self.started + self.limits.timeout {
            let limit_ms = self.limits.timeout.as_millis() as u64;
            return self.begin_stop(StopReason::Timeout { limit_ms }, now);
        }
        if let Some(idle) = self
            .limits
            .idle_timeout
            .filter(|idle| now >= self.last_progress + *idle)
        {
            let reason = StopReason::IdleTimeout {
                limit_ms: idle.as_millis() as u64,
                noise_only: self.noise_since_progress,
            };
            return self.begin_stop(reason, now);
        }
        if let Some(watch) = self.prompt_watch.take_if(|watch| now >= watch.due) {
            let capture = match watch.stream {
                Stream::Stdout => &self.stdout,
                Stream::Stderr => &self.stderr,
            };
            if capture.bytes == watch.bytes_at_arming {
                return self.begin_stop(
                    StopReason::InteractivePrompt {
                        prompt: watch.prompt,
                    },
                    now,
                );
            }
        }
        let leak_due = self
            .exit
            .map(|(exited, _)| exited + self.limits.leak_timeout);
        if pipes_open && leak_due.is_some_and(|due| now >= due) {
            self.termination.pipes_held_after_exit = true;
            self.record_leaked(process::find_step_processes(&self.mark));
            self.send_term(now);
        }
    }

    /// Starts ending the process for `reason`; the first reason wins.
    fn begin_stop(&mut self, reason: StopReason, now: Instant) {
        if self.termination.reason.is_none() {
            self.termination.reason = Some(reason);
        }
        if self.phase == Phase::Running {
            self.send_term(now);
        }
    }

    fn send_term(&mut self, now: Instant) {
        process::signal_step(&self.mark, Signal::SIGTERM);
        // A stopped process (SIGTTIN, SIGSTOP) only acts on SIGTERM once continued.
        process::signal_step(&self.mark, Signal::SIGCONT);
        self.termination.sigterm_after_ms = Some(self.millis_since_start(now));
        self.phase = Phase::Terminating {
            kill_at: now + self.limits.grace,
        };
    }

    fn send_kill(&mut self, now: Instant) {
        process::signal_step(&self.mark, Signal::SIGKILL);
        self.termination.sigkill_after_ms = Some(self.millis_since_start(now));
        self.phase = Phase::Killed {
            abandon_at: now + DRAIN_AFTER_KILL,
        };
    }

    fn record_leaked(&mut self, found: Vec<StrayProcess>) {
        for stray in found {
            if !self.leaked.iter().any(|known| known.pid == stray.pid) {
                self.leaked.push(stray);
            }
        }
    }

    /// A capture that failed because the disk is full leaves no room for the step's record
    /// (metadata, transcript, events): the end of that capture is given back, up to
    /// [`RECORD_ROOM`], and the cause says how much.
    fn make_room_to_record(&mut self) {
        let Some(StopReason::CaptureFailed { message }) = self.termination.reason.as_mut() else {
            return;
        };
        for capture in [&mut self.stdout, &mut self.stderr] {
            if capture.write_error.is_some_and(is_disk_full) {
                let dropped = capture.release_room(RECORD_ROOM);
                if dropped > 0 {
                    message.push_str(&format!(
                        "; the last {dropped} bytes of {} were dropped to make room to record the step (its last lines are in output_tail)",
                        capture.file_name()
                    ));
                }
            }
        }
    }

    fn millis_since_start(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.started).as_millis() as u64
    }

    /// The final result, once the loop is done and the sweep has run.
    pub(crate) fn into_result(
        mut self,
        swept: Swept,
        started_at: SystemTime,
        ended_at: SystemTime,
    ) -> Supervised {
        self.record_leaked(swept.found);
        self.termination.survivors = swept.survivors;
        let _ = self.stdout.flush();
        let _ = self.stderr.flush();
        self.make_room_to_record();
        let (exit_code, signal) = status_parts(self.exit.and_then(|(_, status)| status));
        let (outcome, cause) = classify(self.termination.reason.as_ref(), exit_code, signal);
        Supervised {
            outcome,
            cause,
            pid: self.mark.pgid,
            exit_code,
            signal,
            termination: self.termination,
            started_at,
            ended_at,
            stdout_bytes: self.stdout.bytes,
            stderr_bytes: self.stderr.bytes,
            stdout_lines: self.stdout.lines,
            stderr_lines: self.stderr.lines,
            leaked: self.leaked,
            tail: self.tail.into_lines(),
            reported_cost_usd: self.reported_cost,
        }
    }
}

#[cfg(test)]
mod tests {
    //! The timer rules with a controlled clock: every `Instant` is `start` plus a chosen
    //! offset, so a loaded machine cannot move a deadline. The signals go to a real `sleep`
    //! leading a group of its own, as a step's leader does.

    use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};

    use super::*;
    use crate::runner::progress::CaptureFormat;
    use crate::runner::supervisor::{ProcessKind, ProcessSpec};

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    /// A state for a `sleep` leader (returned, to be reaped) with these limits and capture
    /// format, started at `start`.
    fn new_state(
        limits: Limits,
        format: CaptureFormat,
        start: Instant,
    ) -> (State, std::process::Child, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let leader = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let mut mark = StepMark::before_start();
        mark.pgid = leader.id() as i32;
        let spec = ProcessSpec {
            kind: ProcessKind::Agent,
            agent: "agent".into(),
            program: "sleep".into(),
            args: Vec::new(),
            cwd: dir.path().to_path_buf(),
            env: Vec::new(),
            stdin: Vec::new(),
            stdout_path: dir.path().join("stdout.txt"),
            stderr_path: dir.path().join("stderr.txt"),
            format,
            limits,
            remaining_budget_usd: None,
        };
        let stdout = StreamCapture::create(Stream::Stdout, spec.format, &spec.stdout_path).unwrap();
        let stderr = StreamCapture::create(Stream::Stderr, spec.format, &spec.stderr_path).unwrap();
        (State::new(mark, &spec, stdout, stderr, start), leader, dir)
    }

    fn limits(timeout: u64, idle: Option<u64>, grace: u64) -> Limits {
        Limits {
            timeout: ms(timeout),
            idle_timeout: idle.map(ms),
            grace: ms(grace),
            prompt_settle: ms(200),
            leak_timeout: ms(200),
            ..Limits::default()
        }
    }

    fn output(state: &mut State, text: &str, now: Instant) {
        state.on_read(Stream::Stdout, &Ok(text.len()), text.as_bytes(), now);
    }

    fn finish(state: State) -> Supervised {
        let now = SystemTime::now();
        state.into_result(Swept::default(), now, now)
    }

    #[test]
    fn the_wall_clock_sends_sigterm_at_the_limit_and_sigkill_after_the_grace_period() {
        let start = Instant::now();
        let (mut state, mut leader, _dir) =
            new_state(limits(400, None, 300), CaptureFormat::Text, start);
        assert_eq!(state.next_deadline(true), start + ms(400));
        // Output does not move the wall clock.
        output(&mut state, "working\n", start + ms(100));
        state.on_tick(start + ms(399), true);
        assert_eq!(state.phase, Phase::Running);
        assert_eq!(state.termination.sigterm_after_ms, None);

        state.on_tick(start + ms(400), true);
        assert_eq!(state.termination.sigterm_after_ms, Some(400));
        assert_eq!(
            state.phase,
            Phase::Terminating {
                kill_at: start + ms(700)
            }
        );
        assert_eq!(state.next_deadline(true), start + ms(700));
        // A later tick within the grace period sends nothing more.
        state.on_tick(start + ms(699), true);
        assert_eq!(state.termination.sigkill_after_ms, None);

        state.on_tick(start + ms(700), true);
        assert_eq!(state.termination.sigkill_after_ms, Some(700));
        assert_eq!(
            state.next_deadline(true),
            start + ms(700) + DRAIN_AFTER_KILL
        );
        state.on_tick(start + ms(700) + DRAIN_AFTER_KILL - ms(1), true);
        assert!(!state.termination.pipes_abandoned);
        state.on_tick(start + ms(700) + DRAIN_AFTER_KILL, true);
        assert!(state.termination.pipes_abandoned);

        // The leader ignored SIGTERM and died of SIGKILL: a timeout, with both signals.
        let status = std::process::ExitStatus::from_raw(9);
        state.on_exit(Some(status), start + ms(710));
        let result = finish(state);
        assert_eq!(result.outcome, Outcome::KilledTimeout);
        assert_eq!(result.cause, "timeout: wall-clock limit of 400ms reached");
        assert_eq!(result.signal, Some(9));
        assert!(
            leader.wait().unwrap().signal().is_some(),
            "the group was signalled"
        );
    }

    #[test]
    fn an_agent_that_exits_0_during_the_grace_period_is_still_a_timeout_without_sigkill() {
        let start = Instant::now();
        let (mut state, mut leader, _dir) =
            new_state(limits(400, None, 30_000), CaptureFormat::Text, start);
        output(&mut state, "working\n", start + ms(5));
        state.on_tick(start + ms(400), true);
        assert_eq!(state.termination.sigterm_after_ms, Some(400));
        // It prints during the grace period and exits 0; its pipes close.
        output(&mut state, "cleaned up\n", start + ms(420));
        state.on_exit(Some(std::process::ExitStatus::from_raw(0)), start + ms(421));
        assert!(state.finished(false, false));
        let result = finish(state);
        assert_eq!(result.outcome, Outcome::KilledTimeout);
        assert_eq!(result.exit_code, Some(0));
        assert_eq!(result.termination.sigkill_after_ms, None);
        assert_eq!(
            result.stdout_lines, 2,
            "what came during the grace period counts"
        );
        let _ = leader.wait();
    }

    #[test]
    fn the_idle_limit_counts_from_the_last_progress_and_retry_noise_does_not_reset_it() {
        let start = Instant::now();
        let retry = r#"{"type":"system","subtype":"api_retry","attempt":1}"#.to_owned() + "\n";
        let init = r#"{"type":"system","subtype":"init","session_id":"s"}"#.to_owned() + "\n";

        // Silent from the start: the idle limit counts from the spawn.
        let (mut state, mut leader, _dir) = new_state(
            limits(30_000, Some(800), 300),
            CaptureFormat::ClaudeStreamJson,
            start,
        );
        state.on_tick(start + ms(799), true);
        assert_eq!(state.phase, Phase::Running);
        state.on_tick(start + ms(800), true);
        assert_eq!(state.termination.sigterm_after_ms, Some(800));
        let result = finish(state);
        assert_eq!(result.cause, "idle_timeout: no progress for 800ms");
        let _ = leader.wait();

        // Progress at 100 ms, then only retry noise: killed 800 ms after the progress, and
        // the cause says it was only noise.
        let (mut state, mut leader, _dir) = new_state(
            limits(30_000, Some(800), 300),
            CaptureFormat::ClaudeStreamJson,
            start,
        );
        output(&mut state, &init, start + ms(100));
        for at in (120..900).step_by(20) {
            output(&mut state, &retry, start + ms(at));
            state.on_tick(start + ms(at), true);
        }
        assert_eq!(state.next_deadline(true), start + ms(900));
        state.on_tick(start + ms(899), true);
        assert_eq!(state.phase, Phase::Running);
        state.on_tick(start + ms(900), true);
        assert_eq!(state.termination.sigterm_after_ms, Some(900));
        let result = finish(state);
        assert_eq!(result.outcome, Outcome::KilledIdle);
        assert_eq!(
            result.cause,
            "idle_timeout: no progress for 800ms (only retry/reconnect messages)"
        );
        let _ = leader.wait();
    }
}
