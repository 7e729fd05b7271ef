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
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread().build() else {
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
        let (run_id, run_dir) = (summary.run_id.to_string(), summary.run_dir.clone());
        // No name to record the decision under (`--as ""`, `$USER` empty): refused before
        // anything is asked; the run stays waiting.
        if identity.trim().is_empty() {
            return Err(RunError::Gate(GateError::NoReviewer { run_id }));
        }
        let recorder = Recorder::open(RunDir::at(&run_dir))?;
        let visit = visit_of(&run_dir);
        let request = read_request(&recorder, &step_id, visit)?;
        let deadline = request["deadline"]
            .as_str()
            .and_then(|text| text.parse::<jiff::Timestamp>().ok());
        let approvers: Vec<String> = request["approvers"]
            .as_array()
            .map(|names| {
                names
                    .iter()
                    .filter_map(|name| name.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let approver = approvers.is_empty() || approvers.contains(&identity);
        output.note(&format!(
            "\ngate `{step_id}`: {}",
            super::one_line(request["reason"].as_str().unwrap_or_default())
        ));
        if !approver {
            // Said before anything is asked: the gate would refuse the decision.
            output.note(&format!(
                "`{identity}` is not an approver of this gate (approvers: {}): answering a or r asks which of them you decide as; or leave it waiting (l) and decide with `tnh-conductor gate approve {run_id} --as {} --resume`",
                approvers.join(", "),
                approvers[0]
            ));
        }
        let interrupted = |signal: &str, output: &mut Output| {
            output.note(&format!(
                "\ninterrupted ({signal}): the run is left waiting at gate `{step_id}`; decide it with `tnh-conductor gate approve|reject {run_id} --resume`"
            ));
            Ok(RunSummary {
                end: RunEnd::Interrupted {
                    step_id: step_id.clone(),
                },
                ..summary.clone()
            })
        };
        let answer = loop {
            let answer = match ask(
                &input,
                "approve / reject / show diff / leave waiting [a/r/s/l]: ",
                deadline,
            ) {
                Reply::Line(answer) => answer,
                Reply::TimedOut => break None,
                // Nobody can answer any more: the run stays waiting, as with `l`.
                Reply::InputEnded => {
                    output.note("\ninput ended: the run is left waiting at the gate");
                    return result;
                }
                Reply::Interrupted(signal) => return interrupted(&signal, output),
            };
            let answered_at = jiff::Timestamp::now();
            let decision = match answer.trim() {
                "a" | "approve" => Decision::Approve,
                "r" | "reject" => Decision::Reject,
                "s" | "show" | "show diff" => {
                    let diff = request["context"]["diff"]
                        .as_str()
                        .map(|path| run_dir.join(path));
                    // Bounded as `gate show` bounds it: a megabyte line or a huge patch
                    // would bury the question.
                    let text = diff
                        .and_then(|path| super::gate::patch_view(&path))
                        .unwrap_or_else(|| "(no diff recorded)\n".into());
                    output.diagnostic(&text);
                    continue;
                }
                "l" | "leave" | "leave waiting" => return result,
                _ => {
                    output.note("answer a, r, s or l");
                    continue;
                }
            };
            if approver {
                break Some(Answer {
                    decision,
                    answered_at,
                    reviewer: identity.clone(),
                });
            }
            // The decision stands as of the answer; the name asked now is not timed.
            match ask_approver(&input, &approvers, output) {
                Named::Approver(reviewer) => {
                    break Some(Answer {
                        decision,
                        answered_at,
                        reviewer,
                    });
                }
                Named::InputEnded => {
                    output.note("\ninput ended: the run is left waiting at the gate");
                    return result;
                }
                Named::Interrupted(signal) => return interrupted(&signal, output),
                // No name: nothing decided, asked again.
                Named::Back => {}
            }
        };
        if let Some(answer) = answer {
            // The comment is asked after the decision was made: not timed either.
            let comment = match ask(&input, "comment (optional): ", None) {
                Reply::Line(text) if !text.trim().is_empty() => Some(text),
                Reply::Line(_) | Reply::TimedOut => None,
                Reply::Interrupted(signal) => return interrupted(&signal, output),
                // A terminal closed before the decision was confirmed (its input ends before
                // or after its SIGHUP) decides nothing, as a signal there does.
                Reply::InputEnded => {
                    output.note(
                        "\ninput ended: nothing was decided; the run is left waiting at the gate",
                    );
                    return result;
                }
            };
            let request = DecisionRequest {
                repo,
                run_id: &run_id,
                decision: answer.decision,
                reviewer: &answer.reviewer,
                comment: comment.as_deref(),
                accept_drift: false,
                answered_at: Some(answer.answered_at),
            };
            match decide(&request) {
                // The decision routed straight to a STOP: the run is over.
                Ok(crate::kernel::Phase::Finished { end, reason, .. }) => {
                    return Ok(RunSummary {
                        end: RunEnd::Finished { end, reason },
                        ..summary
                    });
                }
                Ok(_) => {}
                Err(RunError::Gate(error)) => {
                    // The prompt's view may be stale: the gate may have been decided (and the
                    // run driven on) from another shell meanwhile, or resolved as timed out by
                    // a command that noticed its deadline. What the run is now decides.
                    let now = phase_of(&run_dir);
                    if let Some(crate::kernel::Phase::Waiting {
                        step_id: now_waiting,
                        visit: now_visit,
                    }) = &now
                        && *now_waiting == step_id
                        && *now_visit == visit
                    {
                        // Still this gate: the decision itself was refused; ask again.
                        output.note(&format!("error: {error}"));
                        continue;
                    }
                    let how = match &error {
                        GateError::TimedOut { .. } => error.to_string(),
                        _ => resolution(&run_dir, &step_id, visit),
                    };
                    match now {
                        Some(crate::kernel::Phase::Waiting {
                            step_id: now_waiting,
                            ..
                        }) => {
                            output
                                .note(&format!("{how}; the run now waits at gate `{now_waiting}`"));
                            result = Ok(RunSummary {
                                end: RunEnd::Waiting {
                                    step_id: now_waiting,
                                },
                                ..summary
                            });
                            continue;
                        }
                        Some(crate::kernel::Phase::Finished { end, reason, .. }) => {
                            output.note(&format!("{how}; the run has ended ({})", end.name()));
                            return Ok(RunSummary {
                                end: RunEnd::Finished { end, reason },
                                ..summary
                            });
                        }
                        // Decided but not continued (or its state unreadable): resuming
                        // continues the run, or says who drives it.
                        _ => output.note(&how),
                    }
                }
                Err(error) => return Err(error),
            }
        } else {
            output.note("the gate's time ran out");
        }
        // Resuming resolves a gate past its deadline and continues after a decision.
        let config = super::config_for_run(cli, repo, &run_id).map_err(|error| {
            RunError::Artifacts(crate::artifacts::ArtifactsError::Io {
                action: "load the configuration for",
                path: repo.to_path_buf(),
                source: std::io::Error::other(error.to_string()),
            })
        })?;
        result = resume_run(ResumeRequest {
            observer: super::progress::observer(options.progress),
            ..ResumeRequest::new(repo, RunId::new(run_id.as_str()), config)
        });
    }
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
    let resolved = events.iter().rev().find(|event| {
        event.event_type == crate::artifacts::EventType::GateResolved
            && event.step_id.as_deref() == Some(step_id)
            && event.visit == Some(visit)
    });
    match resolved {
        Some(event) if event.text("decision") == Some("gate_timed_out") => format!(
            "gate `{step_id}` timed out before your decision was recorded: its deadline had passed and another command (`gate list`, `status`) resolved it as gate_timed_out"
        ),
        Some(event) => format!(
            "gate `{step_id}` was decided by another process meanwhile ({} by {})",
            super::one_line(event.text("decision").unwrap_or("?")),
            super::one_line(event.text("reviewer").unwrap_or("?"))
        ),
        None => format!("gate `{step_id}` was decided by another process meanwhile"),
    }
}

/// The run's phase as its state says now.
fn phase_of(run_dir: &std::path::Path) -> Option<crate::kernel::Phase> {
    crate::artifacts::read_json::<crate::kernel::RunState>(&run_dir.join("state.json"), "run state")
        .ok()
        .map(|state| state.phase)
}

/// The visit of the run's waiting gate, from its state.
fn visit_of(run_dir: &std::path::Path) -> u32 {
    crate::artifacts::read_json::<crate::kernel::RunState>(&run_dir.join("state.json"), "run state")
        .ok()
        .and_then(|state| match state.phase {
            crate::kernel::Phase::Waiting { visit, .. } => Some(visit),
            _ => None,
        })
        .unwrap_or(1)
}
