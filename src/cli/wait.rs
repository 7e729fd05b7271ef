//! `run --wait` / `resume --wait` on a terminal: at a blocking gate, ask the operator inline
//! (approve / reject / show diff / leave waiting) instead of exiting 3, and honour the gate's
//! timeout while asking.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use super::{Cli, Output};
use crate::artifacts::RunDir;
use crate::kernel::driver::RunEnd;
use crate::kernel::gate::{Decision, decide, read_request};
use crate::kernel::recorder::Recorder;
use crate::kernel::run::{RunError, RunSummary, resume_run};
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

/// Keeps asking at each blocking gate the run reaches, until it ends or the operator leaves it
/// waiting. Ctrl-C, SIGTERM or SIGHUP at the prompt ends the command at once (exit 130), the run
/// left waiting.
pub fn wait_at_gates(
    cli: &Cli,
    repo: &std::path::Path,
    mut result: Result<RunSummary, RunError>,
    output: &mut Output,
) -> Result<RunSummary, RunError> {
    let cancellation = crate::kernel::interrupts::listen().map_err(RunError::Runtime)?;
    let input = operator_input(cancellation);
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
        let recorder = Recorder::open(RunDir::at(&run_dir))?;
        let visit = visit_of(&run_dir);
        let request = read_request(&recorder, &step_id, visit)?;
        let deadline = request["deadline"]
            .as_str()
            .and_then(|text| text.parse::<jiff::Timestamp>().ok());
        let reviewer = std::env::var("USER").unwrap_or_else(|_| "operator".into());
        output.note(&format!(
            "\ngate `{step_id}`: {}",
            request["reason"].as_str().unwrap_or_default()
        ));
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
        let decision = loop {
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
            match answer.trim() {
                "a" | "approve" => break Some(Decision::Approve),
                "r" | "reject" => break Some(Decision::Reject),
                "s" | "show" | "show diff" => {
                    let diff = request["context"]["diff"]
                        .as_str()
                        .map(|path| run_dir.join(path));
                    let text = diff
                        .and_then(|path| {
                            crate::artifacts::safe_files::read_text_following(
                                &path,
                                64 * 1024 * 1024,
                            )
                            .ok()
                        })
                        .unwrap_or_else(|| "(no diff recorded)\n".into());
                    output.diagnostic(&text);
                }
                "l" | "leave" | "leave waiting" => return result,
                _ => output.note("answer a, r, s or l"),
            }
        };
        if let Some(decision) = decision {
            let comment = match ask(&input, "comment (optional): ", deadline) {
                Reply::Line(text) if !text.trim().is_empty() => Some(text),
                Reply::Interrupted(signal) => return interrupted(&signal, output),
                _ => None,
            };
            match decide(
                repo,
                &run_id,
                decision,
                &reviewer,
                comment.as_deref(),
                false,
            ) {
                // The decision routed straight to a STOP: the run is over.
                Ok(crate::kernel::Phase::Finished { end, reason, .. }) => {
                    return Ok(RunSummary {
                        end: RunEnd::Finished { end, reason },
                        ..summary
                    });
                }
                Ok(_) => {}
                Err(error @ RunError::Gate(_)) => {
                    // The prompt's view may be stale: the gate may have been decided (and the
                    // run driven on) from another shell meanwhile. What the run is now decides.
                    match phase_of(&run_dir) {
                        Some(crate::kernel::Phase::Waiting {
                            step_id: now_waiting,
                            visit: now_visit,
                        }) if now_waiting == step_id && now_visit == visit => {
                            // Still this gate: the decision itself was refused (not an
                            // approver…); ask again.
                            output.note(&format!("error: {error}"));
                            continue;
                        }
                        Some(crate::kernel::Phase::Waiting {
                            step_id: now_waiting,
                            ..
                        }) => {
                            output.note(&format!(
                                "gate `{step_id}` was decided by another process meanwhile; the run now waits at gate `{now_waiting}`"
                            ));
                            result = Ok(RunSummary {
                                end: RunEnd::Waiting {
                                    step_id: now_waiting,
                                },
                                ..summary
                            });
                            continue;
                        }
                        Some(crate::kernel::Phase::Finished { end, reason, .. }) => {
                            output.note(&format!(
                                "gate `{step_id}` was decided by another process meanwhile; the run has ended ({})",
                                end.name()
                            ));
                            return Ok(RunSummary {
                                end: RunEnd::Finished { end, reason },
                                ..summary
                            });
                        }
                        // Decided but not continued (or its state unreadable): resuming
                        // continues the run, or says who drives it.
                        _ => output.note(&format!(
                            "gate `{step_id}` was decided by another process meanwhile"
                        )),
                    }
                }
                Err(error) => return Err(error),
            }
        } else {
            output.note("the gate's time ran out");
        }
        // Resuming resolves a gate past its deadline and continues after a decision.
        result = resume_run(
            repo,
            &run_id,
            super::config_for_run(cli, repo, &run_id).map_err(|error| {
                RunError::Artifacts(crate::artifacts::ArtifactsError::Io {
                    action: "load the configuration for",
                    path: repo.to_path_buf(),
                    source: std::io::Error::other(error.to_string()),
                })
            })?,
            false,
            crate::kernel::run::RepositoryChanges::Refuse,
            super::progress::observer(!cli.quiet),
        );
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
