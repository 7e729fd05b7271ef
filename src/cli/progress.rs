//! The live progress of `run` and `resume` on stderr: on a terminal one status line that is
//! rewritten as events arrive (current step, elapsed time, last activity) plus a permanent line
//! per finished step; otherwise plain lines. Silent with `--json` or `-q`.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::time::Instant;

use super::step_lines::describe_violation;
use crate::artifacts::event_payload::{RunnerCompleted, StepInterrupted};
use crate::artifacts::{Event, EventPayload, EventType};
use crate::kernel::recorder::Observer;
use crate::outcome::Outcome;

/// The observer that prints progress, or none when progress is not wanted.
pub fn observer(enabled: bool) -> Option<Observer> {
    if !enabled {
        return None;
    }
    let live = std::io::stderr().is_terminal();
    let mut view = View {
        live,
        step_started: Instant::now(),
        current: String::new(),
        failed_validators: String::new(),
    };
    Some(Box::new(move |event: &Event| view.show(event)))
}

struct View {
    live: bool,
    step_started: Instant,
    current: String,
    /// The validators of the step in flight that failed (`tests exit 1`), said on its line.
    failed_validators: String,
}

/// The live status line is the view's own: it is erased when the view ends (the run's driving
/// returned), so what is printed next — the run's summary, a gate's question — starts on a
/// clean line instead of being appended to `▶ step · 3s · run_completed`.
impl Drop for View {
    fn drop(&mut self) {
        if self.live && !self.current.is_empty() {
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "\r\x1b[K");
            let _ = stderr.flush();
        }
    }
}

impl View {
    fn show(&mut self, event: &Event) {
        let permanent = self.step_line(event).or_else(|| resume_line(event));
        self.print(event, permanent);
    }

    /// The permanent line for an event about a step (or the run between steps), if it has one;
    /// also follows the step in flight for the status line.
    fn step_line(&mut self, event: &Event) -> Option<String> {
        let step = event.step_id.as_deref().unwrap_or("-");
        let visit = event.visit.unwrap_or(0);
        match &event.payload {
            EventPayload::StepStarted(started) => {
                self.step_started = Instant::now();
                self.current = format!("{step} #{visit} ({})", started.opcode);
                None
            }
            EventPayload::RunnerCompleted(completed) => {
                self.failed_validators = failed_validators(completed);
                None
            }
            EventPayload::StepCompleted(completed) => Some(format!(
                "  {step} #{visit}: {} ({:.1}s){}",
                completed.outcome.map_or("", Outcome::as_str),
                self.step_started.elapsed().as_secs_f64(),
                std::mem::take(&mut self.failed_validators)
            )),
            EventPayload::PolicyViolation(policy) => Some(format!(
                "  {step} #{visit}: policy violation — {}",
                describe_violation(Some(&policy.violation))
            )),
            EventPayload::GateRequested(requested)
                if requested.gate.starts_with("requires")
                    || requested.gate.starts_with("blocking") =>
            {
                Some(format!(
                    "  {step} #{visit}: waiting for a decision — {}",
                    super::output::one_line(&requested.reason)
                ))
            }
            EventPayload::StepFailed(failed) => Some(match &failed.hint {
                Some(hint) => format!(
                    "  {step} #{visit}: could not run — {}\n    hint: {hint}",
                    failed.error
                ),
                None => format!("  {step} #{visit}: could not run — {}", failed.error),
            }),
            // Between steps (a signal noticed after a step was kept, or before the first).
            EventPayload::RunInterrupted(interrupted) if event.step_id.is_none() => Some(format!(
                "  interrupted before `{}`",
                interrupted.next_step.as_deref().unwrap_or_default()
            )),
            EventPayload::RunInterrupted(_) => Some(format!("  {step} #{visit}: interrupted")),
            // What `resume` (or a gate decision that continues the run) recovered, before it
            // goes on: said here, from the events it records.
            EventPayload::StepInterrupted(interrupted) => {
                Some(interrupted_visit(interrupted, step, visit))
            }
            EventPayload::GuardCheckSkipped(skipped) => Some(format!(
                "  {step} #{visit}: NOT CHECKED (--skip-guard-check) — {}; refs, git configuration and the operator's checkout are left as they are",
                skipped.reason
            )),
            EventPayload::RepositoryChangesKept(kept) => Some(format!(
                "  {step} #{visit}: refs and git configuration changed during the step kept as the operator's ({} ref change(s){})",
                kept.ref_changes.as_array().map_or(0, Vec::len),
                if kept.git_config_changed.as_bool() == Some(true)
                    || kept
                        .git_config_changed
                        .as_array()
                        .is_some_and(|files| !files.is_empty())
                {
                    ", git configuration"
                } else {
                    ""
                }
            )),
            _ => None,
        }
    }

    /// Erases the status line, prints the permanent line if any (or, without a terminal, the
    /// step that starts), then writes the status line again.
    fn print(&self, event: &Event, permanent: Option<String>) {
        let mut stderr = std::io::stderr().lock();
        if self.live {
            let _ = write!(stderr, "\r\x1b[K");
        }
        if let Some(line) = permanent {
            let _ = writeln!(stderr, "{}", super::output::terminal_safe(&line));
        } else if !self.live && event.event_type() == EventType::StepStarted {
            let _ = writeln!(stderr, "▶ {}", self.current);
        }
        if self.live && !self.current.is_empty() {
            let activity = serde_json::to_value(event.event_type())
                .ok()
                .and_then(|value| value.as_str().map(str::to_owned))
                .unwrap_or_default();
            let _ = write!(
                stderr,
                "▶ {} · {:.0}s · {activity}",
                self.current,
                self.step_started.elapsed().as_secs_f64()
            );
        }
        let _ = stderr.flush();
    }
}

/// The line for what `resume` (or a gate decision that continues the run) found changed
/// before it goes on, if the event is one of those.
fn resume_line(event: &Event) -> Option<String> {
    match &event.payload {
        EventPayload::WorktreeRecreated(recreated) => Some(format!(
            "  the worktree was gone: checked out again at {} from branch {}",
            recreated.path, recreated.branch
        )),
        EventPayload::WorkflowChanged(changed) => Some(format!(
            "  the workflow file {} changed since the run started or last continued; it applies from here on",
            changed.path
        )),
        EventPayload::ConfigChanged(changed) => Some(format!(
            "  the configuration {} changed since the run started or last continued; it applies from here on",
            match changed.path.as_str() {
                "" => "(built-in defaults)",
                path => path,
            }
        )),
        EventPayload::PromptsChanged(changed) => Some(format!(
            "  prompt files in {} changed ({}); they apply from here on",
            changed.path,
            names(&changed.changed)
        )),
        EventPayload::ParamsChanged(changed) => Some(format!(
            "  the workflow's parameters changed: added {}; removed {}",
            names(&changed.added.keys().cloned().collect::<Vec<_>>()),
            names(&changed.removed)
        )),
        EventPayload::DriftAccepted(_) => Some(
            "  the worktree differed from the recorded state: accepted as it is (--accept-drift)"
                .to_owned(),
        ),
        _ => None,
    }
}

/// ` — tests exit 1, lint exit 2` for a validation's `runner_completed` event naming validators
/// that did not exit 0 (`no exit code` for one stopped or not run); empty otherwise.
fn failed_validators(completed: &RunnerCompleted) -> String {
    let failed: Vec<String> = completed
        .exit_codes
        .iter()
        .flatten()
        .filter(|(_, code)| **code != Some(0))
        .map(|(id, code)| match code {
            Some(code) => format!("{id} exit {code}"),
            None => format!("{id} no exit code"),
        })
        .collect();
    if failed.is_empty() {
        String::new()
    } else {
        format!(" — {}", failed.join(", "))
    }
}

/// `resume`'s line for the visit it found cut short: why, the orphans it stopped (and any that
/// survived), and the pre-step snapshot it put the worktree back to.
fn interrupted_visit(interrupted: &StepInterrupted, step: &str, visit: u32) -> String {
    let cause = Some(interrupted.cause.as_str()).filter(|cause| !cause.is_empty());
    let mut line = format!(
        "  {step} #{visit}: recorded as interrupted — {}",
        cause.unwrap_or("cause unknown")
    );
    let pids = |pids: &[i32]| {
        (!pids.is_empty()).then(|| {
            pids.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        })
    };
    if let Some(killed) = pids(&interrupted.killed_orphans) {
        let _ = write!(line, "; stopped its orphaned processes (pid {killed})");
    }
    if let Some(survivors) = interrupted.surviving_orphans.as_deref().and_then(pids) {
        let _ = write!(line, "; STILL ALIVE after being killed: pid {survivors}");
    }
    if let Some(restored) = &interrupted.restored {
        let snapshot = <RestoredSnapshot as serde::Deserialize>::deserialize(restored)
            .ok()
            .and_then(|restored| restored.snapshot.reference.or(restored.snapshot.commit))
            .unwrap_or_else(|| "?".to_owned());
        let _ = write!(
            line,
            "; the worktree was put back to its pre-step snapshot ({snapshot})"
        );
    }
    let _ = write!(line, "; `{step}` goes on with visit #{}", visit + 1);
    line
}

/// A list of names as `a, b`, or `none`.
fn names(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// What the progress view reads of a rollback record: its snapshot's reference or commit.
#[derive(Default, serde::Deserialize)]
#[serde(default)]
struct RestoredSnapshot {
    snapshot: SnapshotNames,
}

#[derive(Default, serde::Deserialize)]
#[serde(default)]
struct SnapshotNames {
    #[serde(deserialize_with = "crate::artifacts::evidence::lenient")]
    reference: Option<String>,
    #[serde(deserialize_with = "crate::artifacts::evidence::lenient")]
    commit: Option<String>,
}
