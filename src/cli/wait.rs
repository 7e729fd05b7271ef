//! `run --wait` / `resume --wait` on a terminal: at a blocking gate, ask the operator inline
//! (approve / reject / show diff / leave waiting) instead of exiting 3, and honour the gate's
//! timeout while asking.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use super::{Cli, Output};
use crate::artifacts::RunDir;
use crate::ids::RunId;
use crate::kernel::driver::RunEnd;
use crate::kernel::gate::{Decision, DecisionRequest, GateError, decide, read_request};
use crate::kernel::recorder::Recorder;
use crate::kernel::run::{ResumeRequest, RunError, RunSummary, resume_run};
use crate::runner::Cancellation;

/// What reaches the prompt: a line typed by the operator, or a signal (Ctrl-C, SIGTERM,
/// SIGHUP) sent to the conductor.
enum Input {
    Line(String),
    /// The terminal closed its input.
    Ended,
    Interrupt(String),
}

/// Lines typed by the operator, read on one thread for the whole session, and the signals the
/// conductor receives, forwarded by another: the prompt waits for either.
fn operator_input(cancellation: Cancellation) -> Receiver<Input> {
    let (sender, receiver) = std::sync::mpsc::channel();
    let lines = sender.clone();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if lines.send(Input::Line(line)).is_err() {
                return;
            }
        }
        let _ = lines.send(Input::Ended);
    });
    std::thread::spawn(move || {
        let mut cancellation = cancellation;
        let cause = |cancellation: &Cancellation| {
            cancellation.cause().unwrap_or_else(|| "Ctrl-C".to_owned())
        };
        // A signal noticed before the prompt counts as much as one during it.
        if cancellation.is_cancelled()
            && sender.send(Input::Interrupt(cause(&cancellation))).is_err()
        {
            return;
        }
        let Ok(runtime) = crate::runner::runtime::shared() else {
            return;
        };
        runtime.block_on(async move {
            while cancellation.next_request().await.is_some() {
                if sender.send(Input::Interrupt(cause(&cancellation))).is_err() {
                    break;
                }
            }
        });
    });
    receiver
}

/// What asking the operator gave.
enum Reply {
    Line(String),
    /// The gate's deadline passed first.
    TimedOut,
    /// The terminal closed its input (Ctrl-D): nobody is there to answer.
    InputEnded,
    /// Ctrl-C, SIGTERM or SIGHUP (named): the conductor must end.
    Interrupted(String),
}

/// Asks until the operator answers, the deadline passes, input ends, or a signal arrives.
fn ask(input: &Receiver<Input>, question: &str, deadline: Option<jiff::Timestamp>) -> Reply {
    let mut stderr = std::io::stderr();
    let _ = write!(stderr, "{question}");
    let _ = stderr.flush();
    let received = match deadline {
        Some(deadline) => {
            let left = (deadline.as_millisecond() - jiff::Timestamp::now().as_millisecond()).max(0);
            input.recv_timeout(Duration::from_millis(left.unsigned_abs()))
        }
        None => input.recv().map_err(|_| RecvTimeoutError::Disconnected),
    };
    match received {
        Ok(Input::Line(line)) => Reply::Line(line),
        Ok(Input::Interrupt(signal)) => Reply::Interrupted(signal),
        Err(RecvTimeoutError::Timeout) => Reply::TimedOut,
        Ok(Input::Ended) | Err(RecvTimeoutError::Disconnected) => Reply::InputEnded,
    }
}

/// Whether the operator can be asked.
pub fn interactive() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// How `run --wait` and `resume --wait` ask.
#[derive(Debug, Clone, Copy)]
pub struct WaitOptions<'a> {
    /// `--as NAME`: who decides at the prompt (default: `$USER`, else `operator`).
    pub reviewer: Option<&'a str>,
    /// Whether the run's live progress shows when it goes on after a decision (not with
    /// `--json` or `-q`).
    pub progress: bool,
}

/// What the operator answered at a gate.
struct Answer {
    decision: Decision,
    /// When `a` or `r` was answered: the decision is as of then, whatever the name and
    /// comment asked after it take.
    answered_at: jiff::Timestamp,
    /// The approver decided as.
    reviewer: String,
}

/// Keeps asking at each blocking gate the run reaches, until it ends or the operator leaves it
/// waiting. Ctrl-C, SIGTERM or SIGHUP at the prompt ends the command at once (exit 130), the run
/// left waiting.
pub fn wait_at_gates(
    cli: &Cli,
    repo: &std::path::Path,
    mut result: Result<RunSummary, RunError>,
    options: WaitOptions<'_>,
    output: &mut Output,
) -> Result<RunSummary, RunError> {
    let cancellation = crate::kernel::interrupts::listen().map_err(RunError::Runtime)?;
    let input = operator_input(cancellation);
    let identity = options
        .reviewer
        .map(str::to_owned)
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "operator".into());
    loop {
        let (summary, step_id) = match &result {
            Ok(
                summary @ RunSummary {
                    end: RunEnd::Waiting { step_id },
                    ..
                },
            ) => (summary.clone(), step_id.clone()),
            _ => return result,
        };
        // No name to record the decision under (`--as ""`, `$USER` empty): refused before
        // anything is asked; the run stays waiting.
        if identity.trim().is_empty() {
            return Err(RunError::Gate(GateError::NoReviewer {
                run_id: summary.run_id.to_string(),
            }));
        }
        let gate = Gate::read(summary, step_id, &identity)?;
        gate.announce(&identity, output);
        match gate.prompt(&input, &identity, output) {
            Prompted::Answer(answer) => match gate.record(repo, &input, answer, output) {
                Flow::Done(done) => return done,
                Flow::Next(next) => {
                    result = next;
                    continue;
                }
                Flow::Resume => {}
            },
            Prompted::TimedOut => output.note("the gate's time ran out"),
            Prompted::Done(done) => return done,
        }
        result = resume_after(cli, repo, &gate.run_id, options.progress);
    }
}

/// The blocking gate a run waits at, as its request describes it.
struct Gate {
    /// The run's summary as it waits here.
    summary: RunSummary,
    step_id: String,
    run_id: String,
    run_dir: std::path::PathBuf,
    visit: u32,
    request: crate::artifacts::GateRequest,
    deadline: Option<jiff::Timestamp>,
    approvers: Vec<String>,
    /// Whether the operator's own name may decide it.
    approver: bool,
}

/// What asking at the gate gave.
enum Prompted {
    /// A decision, to record.
    Answer(Answer),
    /// The gate's deadline passed while asking.
    TimedOut,
    /// The command ends with this (left waiting, input ended, interrupted).
    Done(Result<RunSummary, RunError>),
}

/// Where recording a decision leads.
enum Flow {
    /// The command ends with this.
    Done(Result<RunSummary, RunError>),
    /// Ask again with this result, nothing resumed.
    Next(Result<RunSummary, RunError>),
    /// The decision is recorded: resuming continues the run.
    Resume,
}

impl Gate {
    /// Reads the request of the gate `summary`'s run waits at.
    fn read(summary: RunSummary, step_id: String, identity: &str) -> Result<Gate, RunError> {
        let (run_id, run_dir) = (summary.run_id.to_string(), summary.run_dir.clone());
        let recorder = Recorder::open(RunDir::at(&run_dir))?;
        let visit = visit_of(&run_dir);
        let request = read_request(&recorder, &step_id, visit)?;
        let deadline = request.deadline_time();
        let approvers = request.approvers.clone();
        let approver = approvers.is_empty() || approvers.iter().any(|name| name == identity);
        Ok(Gate {
            summary,
            step_id,
            run_id,
            run_dir,
            visit,
            request,
            deadline,
            approvers,
            approver,
        })
    }

    /// Says which gate is asked, and whether the operator may decide it as themselves.
    fn announce(&self, identity: &str, output: &mut Output) {
        output.note(&format!(
            "\ngate `{}`: {}",
            self.step_id,
            super::one_line(&self.request.reason)
        ));
        if !self.approver {
            // Said before anything is asked: the gate would refuse the decision.
            output.note(&format!(
                "`{identity}` is not an approver of this gate (approvers: {}): answering a or r asks which of them you decide as; or leave it waiting (l) and decide with `tnh-conductor gate approve {} --as {} --resume`",
                self.approvers.join(", "),
                self.run_id,
                self.approvers[0]
            ));
        }
    }

    /// The run as it is left when a signal ends the command at the prompt.
    fn interrupted(&self, signal: &str, output: &mut Output) -> Result<RunSummary, RunError> {
        output.note(&format!(
            "\ninterrupted ({signal}): the run is left waiting at gate `{}`; decide it with `tnh-conductor gate approve|reject {} --resume`",
            self.step_id, self.run_id
        ));
        Ok(RunSummary {
            end: RunEnd::Interrupted {
                step_id: self.step_id.clone(),
            },
            ..self.summary.clone()
        })
    }

    /// The run left waiting at this gate, as it was.
    fn left_waiting(&self) -> Result<RunSummary, RunError> {
        Ok(self.summary.clone())
    }

    /// Asks approve / reject / show diff / leave waiting until a decision is made, the gate's
    /// time runs out or the command ends.
    fn prompt(&self, input: &Receiver<Input>, identity: &str, output: &mut Output) -> Prompted {
        loop {
            let answer = match ask(
                input,
                "approve / reject / show diff / leave waiting [a/r/s/l]: ",
                self.deadline,
            ) {
                Reply::Line(answer) => answer,
                Reply::TimedOut => return Prompted::TimedOut,
                // Nobody can answer any more: the run stays waiting, as with `l`.
                Reply::InputEnded => {
                    output.note("\ninput ended: the run is left waiting at the gate");
                    return Prompted::Done(self.left_waiting());
                }
                Reply::Interrupted(signal) => {
                    return Prompted::Done(self.interrupted(&signal, output));
                }
            };
            let answered_at = jiff::Timestamp::now();
            let decision = match answer.trim() {
                "a" | "approve" => Decision::Approve,
                "r" | "reject" => Decision::Reject,
                "s" | "show" | "show diff" => {
                    self.show_diff(output);
                    continue;
                }
                "l" | "leave" | "leave waiting" => return Prompted::Done(self.left_waiting()),
                _ => {
                    output.note("answer a, r, s or l");
                    continue;
                }
            };
            if self.approver {
                return Prompted::Answer(Answer {
                    decision,
                    answered_at,
                    reviewer: identity.to_owned(),
                });
            }
            // The decision stands as of the answer; the name asked now is not timed.
            match ask_approver(input, &self.approvers, output) {
                Named::Approver(reviewer) => {
                    return Prompted::Answer(Answer {
                        decision,
                        answered_at,
                        reviewer,
                    });
                }
                Named::InputEnded => {
                    output.note("\ninput ended: the run is left waiting at the gate");
                    return Prompted::Done(self.left_waiting());
                }
                Named::Interrupted(signal) => {
                    return Prompted::Done(self.interrupted(&signal, output));
                }
                // No name: nothing decided, asked again.
                Named::Back => {}
            }
        }
    }

    /// Shows the gate's recorded diff.
    fn show_diff(&self, output: &mut Output) {
        let diff = Some(&self.request.context.diff)
            .filter(|path| !path.is_empty())
            .map(|path| self.run_dir.join(path));
        // Bounded as `gate show` bounds it: a megabyte line or a huge patch would bury the
        // question.
        let text = diff
            .and_then(|path| super::gate::patch_view(&path))
            .unwrap_or_else(|| "(no diff recorded)\n".into());
        output.diagnostic(&text);
    }

    /// Asks the optional comment and records the decision.
    fn record(
        &self,
        repo: &std::path::Path,
        input: &Receiver<Input>,
        answer: Answer,
        output: &mut Output,
    ) -> Flow {
        // The comment is asked after the decision was made: not timed either.
        let comment = match ask(input, "comment (optional): ", None) {
            Reply::Line(text) if !text.trim().is_empty() => Some(text),
            Reply::Line(_) | Reply::TimedOut => None,
            Reply::Interrupted(signal) => return Flow::Done(self.interrupted(&signal, output)),
            // A terminal closed before the decision was confirmed (its input ends before
            // or after its SIGHUP) decides nothing, as a signal there does.
            Reply::InputEnded => {
                output.note(
                    "\ninput ended: nothing was decided; the run is left waiting at the gate",
                );
                return Flow::Done(self.left_waiting());
            }
        };
        let request = DecisionRequest {
            repo,
            run_id: &self.run_id,
            decision: answer.decision,
            reviewer: &answer.reviewer,
            comment: comment.as_deref(),
            accept_drift: false,
            answered_at: Some(answer.answered_at),
        };
        match decide(&request) {
            // The decision routed straight to a STOP: the run is over.
            Ok(crate::kernel::Phase::Finished { end, reason, .. }) => Flow::Done(Ok(RunSummary {
                end: RunEnd::Finished { end, reason },
                ..self.summary.clone()
            })),
            Ok(_) => Flow::Resume,
            Err(RunError::Gate(error)) => self.refused(error, output),
            Err(error) => Flow::Done(Err(error)),
        }
    }

    /// Where a decision the gate refused leads.
    fn refused(&self, error: GateError, output: &mut Output) -> Flow {
        // The prompt's view may be stale: the gate may have been decided (and the run driven
        // on) from another shell meanwhile, or resolved as timed out by a command that
        // noticed its deadline. What the run is now decides.
        let now = phase_of(&self.run_dir);
        if let Some(crate::kernel::Phase::Waiting {
            step_id: now_waiting,
            visit: now_visit,
        }) = &now
            && *now_waiting == self.step_id
            && *now_visit == self.visit
        {
            // Still this gate: the decision itself was refused; ask again.
            output.note(&format!("error: {error}"));
            return Flow::Next(self.left_waiting());
        }
        let how = match &error {
            GateError::TimedOut { .. } => error.to_string(),
            _ => resolution(&self.run_dir, &self.step_id, self.visit),
        };
        match now {
            Some(crate::kernel::Phase::Waiting {
                step_id: now_waiting,
                ..
            }) => {
                output.note(&format!("{how}; the run now waits at gate `{now_waiting}`"));
                Flow::Next(Ok(RunSummary {
                    end: RunEnd::Waiting {
                        step_id: now_waiting,
                    },
                    ..self.summary.clone()
                }))
            }
            Some(crate::kernel::Phase::Finished { end, reason, .. }) => {
                output.note(&format!("{how}; the run has ended ({})", end.name()));
                Flow::Done(Ok(RunSummary {
                    end: RunEnd::Finished { end, reason },
                    ..self.summary.clone()
                }))
            }
            // Decided but not continued (or its state unreadable): resuming continues the
            // run, or says who drives it.
            _ => {
                output.note(&how);
                Flow::Resume
            }
        }
    }
}

/// Resumes the run after its gate was decided or its time ran out: resuming resolves a gate
/// past its deadline and continues after a decision.
fn resume_after(
    cli: &Cli,
    repo: &std::path::Path,
    run_id: &str,
    progress: bool,
) -> Result<RunSummary, RunError> {
    let config = super::config_for_run(cli, repo, run_id).map_err(|error| {
        RunError::Artifacts(crate::artifacts::ArtifactsError::Io {
            action: "load the configuration for",
            path: repo.to_path_buf(),
            source: std::io::Error::other(error.to_string()),
        })
    })?;
    resume_run(ResumeRequest {
        observer: super::progress::observer(progress),
        ..ResumeRequest::new(repo, RunId::new(run_id), config)
    })
}

/// What asking for an approver's name gave.
enum Named {
    /// One of the gate's approvers.
    Approver(String),
    /// An empty answer: nothing decided, the gate is asked again.
    Back,
    /// The terminal closed its input.
    InputEnded,
    /// Ctrl-C, SIGTERM or SIGHUP (named).
    Interrupted(String),
}

/// Asks which of the gate's `approvers` the operator decides as, until one is named or the
/// answer is empty (back to the gate's question).
fn ask_approver(input: &Receiver<Input>, approvers: &[String], output: &mut Output) -> Named {
    let question = format!("decide as ({}; empty to go back): ", approvers.join(", "));
    loop {
        let name = match ask(input, &question, None) {
            Reply::Line(name) => name.trim().to_owned(),
            Reply::Interrupted(signal) => return Named::Interrupted(signal),
            Reply::InputEnded | Reply::TimedOut => return Named::InputEnded,
        };
        if name.is_empty() {
            return Named::Back;
        }
        if approvers.contains(&name) {
            return Named::Approver(name);
        }
        output.note(&format!(
            "`{name}` is not an approver of this gate (approvers: {})",
            approvers.join(", ")
        ));
    }
}

/// How the gate of `visit` was resolved by another process, from the run's events.
fn resolution(run_dir: &std::path::Path, step_id: &str, visit: u32) -> String {
    let events =
        crate::artifacts::EventLog::read_all(&RunDir::at(run_dir).events()).unwrap_or_default();
    let resolved = events.iter().rev().find_map(|event| match &event.payload {
        crate::artifacts::EventPayload::GateResolved(resolved) if event.is_of((step_id, visit)) => {
            Some(resolved)
        }
        _ => None,
    });
    match resolved {
        Some(resolved) if resolved.decision == "gate_timed_out" => format!(
            "gate `{step_id}` timed out before your decision was recorded: its deadline had passed and another command (`gate list`, `status`) resolved it as gate_timed_out"
        ),
        Some(resolved) => format!(
            "gate `{step_id}` was decided by another process meanwhile ({} by {})",
            super::one_line(&resolved.decision),
            super::one_line(
                resolved
                    .reviewer
                    .clone()
                    .flatten()
                    .as_deref()
                    .unwrap_or("?")
            )
        ),
        None => format!("gate `{step_id}` was decided by another process meanwhile"),
    }
}

/// The run's phase as its state says now.
fn phase_of(run_dir: &std::path::Path) -> Option<crate::kernel::Phase> {
    crate::artifacts::read_json::<crate::kernel::RunState>(
        &run_dir.join(RunDir::STATE),
        "run state",
    )
    .ok()
    .map(|state| state.phase)
}

/// The visit of the run's waiting gate, from its state.
fn visit_of(run_dir: &std::path::Path) -> u32 {
    crate::artifacts::read_json::<crate::kernel::RunState>(
        &run_dir.join(RunDir::STATE),
        "run state",
    )
    .ok()
    .and_then(|state| match state.phase {
        crate::kernel::Phase::Waiting { visit, .. } => Some(visit),
        _ => None,
    })
    .unwrap_or(1)
}
