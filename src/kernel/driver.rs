//! The driver loop: performs what the pure kernel decides, one step visit at a time, and
//! records everything. It is the only place that turns transitions into I/O.

use super::recorder::Recorder;
use super::state::{End, Phase, RunState};
use super::transition::{KernelError, StepReport, fail, start_step, wait_at_gate};
use crate::artifacts::EventPayload;
use crate::artifacts::VisitDir;
use crate::artifacts::event_payload::{AgentRunlog, RunEnded, RunInterrupted, StepStarted};
use crate::artifacts::{ArtifactsError, EventType, now};
use crate::opcode::{self, OpcodeError, RunContext, StepContext};
use crate::workspace::Workspace;

/// How a drive ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEnd {
    /// A STOP or a runtime error ended the run.
    Finished {
        /// How.
        end: End,
        /// Why.
        reason: String,
    },
    /// A blocking gate waits.
    Waiting {
        /// The gate step.
        step_id: String,
    },
    /// The operator pressed Ctrl-C: the step in flight was ended, the run can be resumed.
    Interrupted {
        /// The step that was running.
        step_id: String,
    },
    /// A step could not start for a reason the operator can fix (a missing program, an
    /// unconfigured validator): nothing of it ran, and `resume` runs it again once fixed.
    Stopped {
        /// The step that could not start.
        step_id: String,
        /// What is wrong, and what to do.
        reason: String,
    },
}

/// A failure of the driver itself (the run directory cannot be written).
#[derive(Debug, thiserror::Error)]
pub enum DriveError {
    /// The run directory could not be written.
    #[error(transparent)]
    Artifacts(#[from] ArtifactsError),
    /// The run directory could not be written while the run was driven: the run stopped as
    /// after a crash, at its last checkpoint, and `resume` continues it.
    #[error("run `{run_id}` stopped: {source}")]
    Stopped {
        /// The run.
        run_id: String,
        /// What could not be written.
        #[source]
        source: ArtifactsError,
    },
}

impl DriveError {
    /// What to do about it.
    pub fn hint(&self) -> Option<String> {
        match self {
            DriveError::Artifacts(error) => error.hint(),
            DriveError::Stopped { run_id, .. } => Some(format!(
                "free disk space or make the run directory writable, then `tnh-conductor resume {run_id}` continues the run"
            )),
        }
    }
}

/// The run directory's I/O failure behind an executor's error, when that is what it is. Such a
/// failure says nothing about the step: the run must not end on it (nor record an end it
/// could not checkpoint) but stop where its last checkpoint says, to be resumed.
fn run_dir_failure(
    error: OpcodeError,
    run_dir: &std::path::Path,
) -> Result<ArtifactsError, OpcodeError> {
    // The runner names its files by absolute path.
    let absolute = std::path::absolute(run_dir).unwrap_or_else(|_| run_dir.to_path_buf());
    let inside = |path: &std::path::Path| path.starts_with(run_dir) || path.starts_with(&absolute);
    match error {
        OpcodeError::Artifacts(ArtifactsError::Io {
            action,
            path,
            source,
        })
        | OpcodeError::Runner(crate::runner::RunnerError::Io {
            action,
            path,
            source,
        }) if inside(&path) => Ok(ArtifactsError::Io {
            action,
            path,
            source,
        }),
        other => Err(other),
    }
}

/// Drives a run from its current state until it ends, waits or is interrupted.
#[derive(Debug)]
pub struct Driver<'a> {
    /// The run's fixed context.
    pub run: &'a RunContext,
    /// The worktree.
    pub workspace: &'a Workspace,
    /// The run directory.
    pub recorder: &'a mut Recorder,
    /// The durable state.
    pub state: RunState,
}

impl Driver<'_> {
    /// Runs steps until the run finishes, waits at a gate, or is interrupted. When the run
    /// directory cannot be written the run stops where its last checkpoint says.
    pub fn drive(&mut self) -> Result<RunEnd, DriveError> {
        let _span = tracing::info_span!("run", run = %self.state.run_id).entered();
        // Whatever happened to the worktree before this drive (a wait at a gate, a stop) is
        // read from the worktree itself, never from a capture remembered before it.
        self.workspace.forget_capture();
        self.drive_steps().map_err(|error| match error {
            DriveError::Artifacts(source) => DriveError::Stopped {
                run_id: self.state.run_id.clone(),
                source,
            },
            stopped @ DriveError::Stopped { .. } => stopped,
        })
    }

    fn drive_steps(&mut self) -> Result<RunEnd, DriveError> {
        loop {
            match self.state.phase.clone() {
                Phase::Finished { end, reason, .. } => return Ok(RunEnd::Finished { end, reason }),
                Phase::Waiting { step_id, .. } => return Ok(RunEnd::Waiting { step_id }),
                Phase::Running { step_id, visit } => {
                    // The driver never leaves a visit running between iterations; resume turns
                    // an interrupted one into a new visit before driving.
                    let message =
                        format!("visit {visit} of step `{step_id}` is still marked running");
                    return self.end_with_error(&KernelError::WrongPhase {
                        phase: message,
                        expected: "ready",
                    });
                }
                // A signal noticed since the last step (or before the first: while the
                // worktree was created, while `resume` recovered a visit) stops the run here,
                // between steps: nothing is running, and `resume` continues from this step.
                Phase::Ready { step_id, .. } if self.run.cancellation.is_cancelled() => {
                    return self.interrupted_between_steps(step_id);
                }
                Phase::Ready { .. } => {
                    if let Some(end) = self.visit()? {
                        return Ok(end);
                    }
                }
            }
        }
    }

    /// One visit: start, execute, record, route. Returns an end when the drive must stop.
    fn visit(&mut self) -> Result<Option<RunEnd>, DriveError> {
        let running = match start_step(&self.run.workflow, &self.state) {
            Ok(running) => running,
            Err(error) => return self.end_with_error(&error).map(Some),
        };
        let Phase::Running { step_id, visit } = running.phase.clone() else {
            unreachable!("start_step always returns a running phase")
        };
        let Some(step) = self.run.workflow.step(&step_id) else {
            let error = KernelError::UnknownStep {
                step_id: step_id.clone(),
                target: step_id.clone(),
            };
            return self.end_with_error(&error).map(Some);
        };
        self.state = running;
        let _span = tracing::info_span!(
            "step",
            step = %step_id,
            visit,
            opcode = step.body.opcode().name()
        )
        .entered();
        tracing::info!("started");
        let started = StepStarted {
            opcode: step.body.opcode().name().to_owned(),
        };
        self.recorder
            .event(Some((&step_id, visit)), EventPayload::StepStarted(started))?;
        self.recorder.flush(&self.state)?;
        let mut context = StepContext {
            run: self.run,
            workspace: self.workspace,
            recorder: self.recorder,
            state: &self.state,
            step,
            visit,
            started_at: now(),
        };
        // The next agent step may start from what the last step read at its end (the
        // worktree's tree, the operator's checkout) only when nothing that can change them runs
        // in between: an EVALUATE forgets it itself when it starts a planner process.
        if !matches!(
            step.body.opcode(),
            crate::workflow::model::Opcode::RunAgent | crate::workflow::model::Opcode::Evaluate
        ) {
            self.workspace.forget_capture();
        }
        let result = opcode::execute(&mut context);
        // A signal that arrived once the step's work was done (the agent had ended on its own,
        // its result was being captured) keeps the visit: it is recorded as completed, and the
        // run stops before the next step. Only a visit the signal cut short (an error, or a
        // process the cancellation stopped) is left running, for `resume` to run again. So is
        // a visit whose agent a stop signal from outside ended (see [`stopped_from_outside`]),
        // whether or not the conductor got one too: that is no ending of the agent's own.
        let cancelled = self.run.cancellation.is_cancelled();
        let outside = result
            .as_ref()
            .ok()
            .and_then(|result| self.stopped_from_outside(&step_id, visit, result, cancelled));
        if outside.is_some() || (cancelled && self.cut_short(&step_id, visit, result.as_ref().ok()))
        {
            return self
                .interrupted(step_id, visit, outside, cancelled)
                .map(Some);
        }
        let result = match result {
            Ok(result) => result,
            Err(error) => match run_dir_failure(error, self.recorder.run_dir().root()) {
                Ok(failure) => return Err(failure.into()),
                Err(error) => {
                    // The agent may have run before the step failed: its run log is said too.
                    ingest_runlog(self.recorder, &step_id, visit)?;
                    return self.step_failed(&step_id, visit, &error).map(Some);
                }
            },
        };
        let mut result = result;
        if let Some(end) = self.record_result(step, &step_id, visit, &mut result)? {
            return Ok(Some(end));
        }
        if result.waiting {
            self.state =
                wait_at_gate(&self.state).unwrap_or_else(|error| fail(&self.state, &error));
            self.recorder
                .commit(&mut self.state, Some(super::recorder::WAITING_REASON))?;
            return Ok(Some(RunEnd::Waiting { step_id }));
        }
        self.route(&step_id, visit, &result.report)?;
        Ok(None)
    }

    /// Ends the drive on a visit the operator's interrupt cut short, or whose agent a stop
    /// signal from outside ended (`outside`: who and by which signal).
    fn interrupted(
        &mut self,
        step_id: String,
        visit: u32,
        outside: Option<(String, &'static str)>,
        cancelled: bool,
    ) -> Result<RunEnd, DriveError> {
        let (cause, reason) = match outside {
            Some((who, signal)) if !cancelled => (
                format!("{who} was stopped by {signal} from outside the conductor"),
                format!("{who} was stopped by {signal} from outside the conductor"),
            ),
            _ => {
                let signal = self.signal();
                (
                    format!("operator interrupt ({signal})"),
                    format!("interrupted by the operator ({signal})"),
                )
            }
        };
        // What the agent said in its run log before it was stopped is said now.
        ingest_runlog(self.recorder, &step_id, visit)?;
        // The visit stays marked running: `resume` records it as interrupted, restores its
        // pre-step snapshot and runs the step again, exactly as after a crash.
        let interrupted = RunInterrupted {
            cause,
            next_step: None,
        };
        self.recorder.event(
            Some((&step_id, visit)),
            EventPayload::RunInterrupted(interrupted),
        )?;
        self.recorder.commit(&mut self.state, Some(&reason))?;
        self.recorder
            .write_blocked(&format!("{reason}; `tnh-conductor resume` continues it"))?;
        Ok(RunEnd::Interrupted { step_id })
    }

    /// Records a visit's result: its run log's entries, its manifest (with its tool logs), its
    /// cost and the worktree's fingerprint. Returns an end when the step fails on the way.
    fn record_result(
        &mut self,
        step: &crate::workflow::model::Step,
        step_id: &str,
        visit: u32,
        result: &mut opcode::StepResult,
    ) -> Result<Option<RunEnd>, DriveError> {
        self.ingest_runlog(step_id, visit, &mut result.manifest)?;
        let visit_dir = self.recorder.run_dir().visit_dir(step_id, visit);
        let logs = crate::artifacts::tool_logs(&visit_dir);
        result
            .manifest
            .artifacts
            .extend(
                logs.into_iter()
                    .map(|name| crate::artifacts::ArtifactEntry {
                        role: crate::artifacts::ArtifactRole::ToolLog,
                        path: crate::artifacts::RunDir::visit_file_relative(step_id, visit, &name),
                        media_type: "text/plain".into(),
                        required: false,
                        important: false,
                    }),
            );
        self.recorder.write_manifest(&result.manifest)?;
        self.state.spent_usd += result.cost_usd;
        // An EVALUATE gives a fingerprint when its planner changed the worktree (recorded as
        // its violation): the checkpoint holds that worktree, so it is not drift on resume.
        if step.body.opcode().may_change_worktree()
            || result.fingerprint.is_some()
            || self.state.fingerprint.is_none()
        {
            let fingerprint = match result.fingerprint.take() {
                Some(fingerprint) => Ok(fingerprint),
                None => self.workspace.fingerprint(),
            };
            match fingerprint {
                Ok(fingerprint) => self.state.fingerprint = Some(fingerprint),
                Err(error) => {
                    let error = OpcodeError::Workspace(error);
                    return self.step_failed(step_id, visit, &error).map(Some);
                }
            }
        }
        Ok(None)
    }

    /// Whether the operator's interrupt cut the visit short: the executor failed, or its
    /// result (or an event of the visit) says a process of it was stopped by the cancellation
    /// (`cancelled: …`, the runner's cause for it).
    fn cut_short(&self, step_id: &str, visit: u32, result: Option<&opcode::StepResult>) -> bool {
        let Some(result) = result else {
            return true;
        };
        let cause = crate::runner::StopReason::Cancelled.cause();
        let code = cause.split(':').next().unwrap_or("cancelled");
        let stopped = |value: &serde_json::Value| mentions(value, &format!("{code}:"));
        if stopped(&result.manifest.evidence_summary) {
            return true;
        }
        let Ok(events) = crate::artifacts::EventLog::read_all(&self.recorder.run_dir().events())
        else {
            return true;
        };
        let started = events.iter().rposition(|event| {
            event.event_type() == EventType::StepStarted
                && event.step_id.as_deref() == Some(step_id)
                && event.visit == Some(visit)
        });
        events[started.unwrap_or(0)..]
            .iter()
            .filter(|event| event.step_id.as_deref() == Some(step_id) && event.visit == Some(visit))
            .any(|event| stopped(&serde_json::to_value(&event.payload).unwrap_or_default()))
    }

    /// The stop signal (`SIGHUP`, `SIGINT`, `SIGTERM`) that ended the agent of a RUN_AGENT
    /// visit, or a validator of a RUN_VALIDATION visit, when the conductor did not send it,
    /// with who it ended (`the agent`, `validator `lint``): the leader died of it while the
    /// supervisor had stopped nothing (`runner_metadata.json`: a `signal` and no
    /// `termination.reason`; a validator's record in `validation_report.json`: an `error`
    /// whose cause is its exit status alone). While the conductor is itself being interrupted
    /// (`cancelled`), an exit code of 128 + one of them counts too: that is how programs that
    /// catch the signal report it. Such an ending is not the step's own: `systemctl stop`
    /// with `KillMode=control-group`, a `kill` to every process or a container runtime signal
    /// the whole tree, and the agent or validator may get the signal a moment before the
    /// conductor (or alone). A death by any other signal (a crash, SIGKILL from the OOM
    /// killer) stays an `error`.
    fn stopped_from_outside(
        &self,
        step_id: &str,
        visit: u32,
        result: &opcode::StepResult,
        cancelled: bool,
    ) -> Option<(String, &'static str)> {
        let stop_signal = |signal: Option<i32>, exit_code: Option<i32>| {
            let reported = exit_code
                .filter(|_| cancelled)
                .and_then(|code| code.checked_sub(128));
            let number = signal.or(reported)?;
            STOP_SIGNALS
                .iter()
                .find(|(signal, _)| *signal as i32 == number)
                .map(|(_, name)| *name)
        };
        let visit_dir = self.recorder.run_dir().visit_dir(step_id, visit);
        match result.manifest.opcode.as_str() {
            "RUN_AGENT" if result.report.outcome == crate::outcome::Outcome::Error => {
                let path = visit_dir.join(VisitDir::RUNNER_METADATA);
                let metadata: crate::runner::RunnerMetadata =
                    crate::artifacts::read_json(&path, "runner metadata").ok()?;
                if metadata.termination.reason.is_some() {
                    return None;
                }
                stop_signal(metadata.signal, metadata.exit_code)
                    .map(|signal| ("the agent".to_owned(), signal))
            }
            "RUN_VALIDATION" => {
                let report: crate::artifacts::ValidationReport = crate::artifacts::read_json(
                    &crate::artifacts::VisitDir::at(visit_dir).validation_report(),
                    "validation report",
                )
                .ok()?;
                let crate::artifacts::ValidationReport::Ran(report) = report else {
                    return None;
                };
                report.validators.iter().find_map(|(id, record)| {
                    if record.outcome() != crate::artifacts::ValidationOutcome::Error {
                        return None;
                    }
                    let (signal, exit_code) = (record.signal(), record.exit_code());
                    // Its cause is what its exit status says, nothing else: the supervisor
                    // stopped nothing, and no lost capture or missing artifact made it fail.
                    let (_, own) = crate::runner::supervisor::classify(None, exit_code, signal);
                    if record.cause() != own {
                        return None;
                    }
                    stop_signal(signal, exit_code)
                        .map(|signal| (format!("validator `{id}`"), signal))
                })
            }
            _ => None,
        }
    }

    /// The signal that cancelled the run, as events name it (`Ctrl-C`, `SIGTERM`, …).
    fn signal(&self) -> String {
        self.run
            .cancellation
            .cause()
            .unwrap_or_else(|| "Ctrl-C".to_owned())
    }

    /// Stops the run between steps for the operator's interrupt: `run_interrupted` (no step is
    /// running) and the run marked blocked; `resume` continues with `step_id`.
    fn interrupted_between_steps(&mut self, step_id: String) -> Result<RunEnd, DriveError> {
        let signal = self.signal();
        let interrupted = RunInterrupted {
            cause: format!("operator interrupt ({signal})"),
            next_step: Some(step_id.clone()),
        };
        self.recorder
            .event(None, EventPayload::RunInterrupted(interrupted))?;
        let reason = format!("interrupted by the operator ({signal}) before step `{step_id}`");
        self.recorder.commit(&mut self.state, Some(&reason))?;
        self.recorder.write_blocked(&format!(
            "{reason}; `tnh-conductor resume {}` continues it",
            self.state.run_id
        ))?;
        Ok(RunEnd::Interrupted { step_id })
    }

    /// [`ingest_runlog`] for a visit that ended: the run log is listed in its manifest.
    fn ingest_runlog(
        &mut self,
        step_id: &str,
        visit: u32,
        manifest: &mut crate::artifacts::StepManifest,
    ) -> Result<(), DriveError> {
        if let Some(entry) = ingest_runlog(self.recorder, step_id, visit)? {
            manifest.artifacts.push(entry);
        }
        Ok(())
    }

    /// Records the visit's end and takes the route the kernel chooses.
    fn route(&mut self, step_id: &str, visit: u32, report: &StepReport) -> Result<(), DriveError> {
        let completion = super::routing::Completion::Record;
        super::routing::record_route(
            &self.run.workflow,
            self.recorder,
            &mut self.state,
            (step_id, visit),
            report,
            completion,
        )?;
        Ok(())
    }

    /// An executor could not run the step. When it stopped for a reason the operator fixes (a
    /// missing program, an unconfigured validator, a git that hung: see
    /// [`OpcodeError::is_resumable`]), the visit stays marked running (as after Ctrl-C), the
    /// run is blocked, and `resume` runs the step again after re-reading the configuration.
    /// Otherwise the run ends with a recorded runtime error.
    fn step_failed(
        &mut self,
        step_id: &str,
        visit: u32,
        error: &OpcodeError,
    ) -> Result<RunEnd, DriveError> {
        let resumable = error.is_resumable();
        let failed = EventPayload::StepFailed(error.step_failed());
        self.recorder.event(Some((step_id, visit)), failed)?;
        if !resumable {
            return self.finish_error(format!("step `{step_id}` could not run: {error}"));
        }
        let reason = format!(
            "step `{step_id}` could not run: {error}; once that is fixed, `tnh-conductor resume {}` runs it again",
            self.state.run_id
        );
        self.recorder.commit(&mut self.state, Some(&reason))?;
        self.recorder.write_stopped(&reason, "stopped")?;
        Ok(RunEnd::Stopped {
            step_id: step_id.to_owned(),
            reason,
        })
    }

    fn end_with_error(&mut self, error: &KernelError) -> Result<RunEnd, DriveError> {
        self.finish_error(error.to_string())
    }

    fn finish_error(&mut self, reason: String) -> Result<RunEnd, DriveError> {
        Ok(finish_with_error(self.recorder, &mut self.state, reason)?)
    }
}

/// Ends the run with a runtime error: the state says why, a `run_failed` event and
/// `metadata.json` record it.
pub(super) fn finish_with_error(
    recorder: &mut Recorder,
    state: &mut RunState,
    reason: String,
) -> Result<RunEnd, ArtifactsError> {
    let step_id = match &state.phase {
        Phase::Ready { step_id, .. }
        | Phase::Running { step_id, .. }
        | Phase::Waiting { step_id, .. }
        | Phase::Finished { step_id, .. } => step_id.clone(),
    };
    state.phase = Phase::Finished {
        end: End::Error,
        step_id,
        reason: reason.clone(),
    };
    let ended = RunEnded {
        end: "error".to_owned(),
        reason: reason.clone(),
    };
    recorder.event(None, EventPayload::RunFailed(ended))?;
    recorder.commit(state, Some(&reason))?;
    recorder.finish(state)?;
    Ok(RunEnd::Finished {
        end: End::Error,
        reason,
    })
}

/// Turns the agent's `tnh runlog append` entries into `agent_runlog` events: the agent
/// writes only its step folder, the kernel alone numbers events. Returns the manifest entry
/// of the run log, when there is one.
///
/// Done once per visit: when the visit ends (completed or failed), when the operator's
/// interrupt cuts it short, or — for a visit left running by a crash — when `resume`
/// records it as interrupted ([`runlog_recorded`] says whether it was done already).
pub(super) fn ingest_runlog(
    recorder: &mut Recorder,
    step_id: &str,
    visit: u32,
) -> Result<Option<crate::artifacts::ArtifactEntry>, ArtifactsError> {
    let file = crate::artifacts::RUNLOG_FILE;
    let path = recorder.run_dir().visit_dir(step_id, visit).join(file);
    // The agent wrote this file: any bytes, any JSON, or no file at all but a FIFO (whose
    // open would wait forever for a writer), a link to `/dev/zero` or a huge file. Only a
    // regular file is read, and only its first `MAX_RUNLOG_BYTES`; each line that is a
    // JSON object becomes an event of its own fields, as text of bounded length, named
    // so they never collide with the event's own (`timestamp` is the kernel's; the
    // agent's is `logged_at`), up to `MAX_RUNLOG_ENTRIES` events. What is not read —
    // the whole file, its end, lines that are not objects — is said in one more event.
    let read = crate::artifacts::safe_files::open_regular(&path)
        .and_then(|opened| crate::artifacts::safe_files::read_bounded(opened, MAX_RUNLOG_BYTES));
    let (mut bytes, oversized) = match read {
        Ok(read) => read,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => {
            let message = format!("{file} was not read: {error}");
            record_runlog_problem(recorder, step_id, visit, message)?;
            return Ok(None);
        }
    };
    if oversized {
        // The cut may fall inside a line: that line is not read.
        let whole = bytes
            .iter()
            .rposition(|byte| *byte == b'\n')
            .map_or(0, |end| end + 1);
        bytes.truncate(whole);
    }
    let mut skipped = 0_usize;
    let mut recorded = 0_usize;
    let mut over_count = 0_usize;
    for line in bytes.split(|byte| *byte == b'\n') {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let Ok(serde_json::Value::Object(entry)) = serde_json::from_slice(line) else {
            skipped += 1;
            continue;
        };
        if recorded == MAX_RUNLOG_ENTRIES {
            over_count += 1;
            continue;
        }
        recorder.event(
            Some((step_id, visit)),
            EventPayload::AgentRunlog(runlog_fields(&entry)),
        )?;
        recorded += 1;
    }
    let mut problems = Vec::new();
    if skipped > 0 {
        problems.push(format!(
            "{skipped} line(s) of {file} were not JSON objects and were skipped"
        ));
    }
    if over_count > 0 {
        problems.push(format!(
            "{over_count} entries past the first {MAX_RUNLOG_ENTRIES} were not recorded"
        ));
    }
    if oversized {
        problems.push(format!(
            "{file} is larger than {} MiB: only its first {} MiB were read",
            MAX_RUNLOG_BYTES >> 20,
            MAX_RUNLOG_BYTES >> 20
        ));
    }
    if !problems.is_empty() {
        record_runlog_problem(recorder, step_id, visit, problems.join("; "))?;
    }
    Ok(Some(crate::artifacts::ArtifactEntry {
        role: crate::artifacts::ArtifactRole::AgentRunlog,
        path: crate::artifacts::RunDir::visit_file_relative(step_id, visit, file),
        media_type: "application/x-ndjson".into(),
        required: false,
        important: true,
    }))
}

/// The `agent_runlog` event of kind `unreadable` that says what of the run log was not
/// turned into events, and why.
fn record_runlog_problem(
    recorder: &mut Recorder,
    step_id: &str,
    visit: u32,
    message: String,
) -> Result<(), ArtifactsError> {
    let fields = AgentRunlog {
        kind: Some("unreadable".to_owned()),
        message: Some(message),
        ..AgentRunlog::default()
    };
    recorder.event(Some((step_id, visit)), EventPayload::AgentRunlog(fields))?;
    Ok(())
}

/// Whether the run log of a visit was turned into events already: an `agent_runlog` event of
/// the visit is recorded.
pub(super) fn runlog_recorded(
    events: &[crate::artifacts::Event],
    (step_id, visit): (&str, u32),
) -> bool {
    events.iter().any(|event| {
        event.event_type() == EventType::AgentRunlog
            && event.step_id.as_deref() == Some(step_id)
            && event.visit == Some(visit)
    })
}

/// The signals that stop a process when someone outside it wants it stopped, with their
/// names: a death by one of them the conductor did not send leaves a visit interrupted.
const STOP_SIGNALS: [(nix::sys::signal::Signal, &str); 3] = [
    (nix::sys::signal::Signal::SIGHUP, "SIGHUP"),
    (nix::sys::signal::Signal::SIGINT, "SIGINT"),
    (nix::sys::signal::Signal::SIGTERM, "SIGTERM"),
];

/// `text` cut to at most `limit` characters (an ellipsis marks the cut).
/// The most of a step's run log that is read: 4 MiB (its first lines; the rest is said to be
/// unread). `tnh runlog append` writes lines of a few KiB at most.
const MAX_RUNLOG_BYTES: u64 = 4 << 20;

/// The most `agent_runlog` events one step visit's run log becomes.
const MAX_RUNLOG_ENTRIES: usize = 1000;

/// The event fields of one run-log entry: `kind`, `message`, `ref` and the agent's
/// `timestamp` (as `logged_at`), each as text of bounded length; a field that is absent or
/// `null` is left out (a JSON `null` is no reference to a file named `null`).
fn runlog_fields(entry: &serde_json::Map<String, serde_json::Value>) -> AgentRunlog {
    let field = |key: &str, limit: usize| {
        let text = match entry.get(key)? {
            serde_json::Value::Null => return None,
            serde_json::Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        Some(bounded_text(&text, limit))
    };
    AgentRunlog {
        kind: field("kind", 64),
        message: field("message", 4096),
        r#ref: field("ref", 1024),
        logged_at: field("timestamp", 64),
    }
}

fn bounded_text(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// Whether a JSON value holds a string containing `needle`, at any depth.
fn mentions(value: &serde_json::Value, needle: &str) -> bool {
    match value {
        serde_json::Value::String(text) => text.contains(needle),
        serde_json::Value::Array(items) => items.iter().any(|item| mentions(item, needle)),
        serde_json::Value::Object(fields) => fields.values().any(|item| mentions(item, needle)),
        _ => false,
    }
}
