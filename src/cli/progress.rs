//! The live progress of `run` and `resume` on stderr: on a terminal one status line that is
//! rewritten as events arrive (current step, elapsed time, last activity) plus a permanent line
//! per finished step; otherwise plain lines. Silent with `--json` or `-q`.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::time::Instant;

use super::step_lines::describe_violation;
use crate::artifacts::{Event, EventType};
use crate::kernel::recorder::Observer;

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
        let field = |key: &str| event.text(key).unwrap_or_default().to_owned();
        match event.event_type {
            EventType::StepStarted => {
                self.step_started = Instant::now();
                self.current = format!("{step} #{visit} ({})", field("opcode"));
                None
            }
            EventType::RunnerCompleted => {
                self.failed_validators = failed_validators(event);
                None
            }
            EventType::StepCompleted => Some(format!(
                "  {step} #{visit}: {} ({:.1}s){}",
                field("outcome"),
                self.step_started.elapsed().as_secs_f64(),
                std::mem::take(&mut self.failed_validators)
            )),
            EventType::PolicyViolation => Some(format!(
                "  {step} #{visit}: policy violation — {}",
                describe_violation(event.payload.get("violation"))
            )),
            EventType::GateRequested
                if field("gate").starts_with("requires")
                    || field("gate").starts_with("blocking") =>
            {
                Some(format!(
                    "  {step} #{visit}: waiting for a decision — {}",
                    super::output::one_line(&field("reason"))
                ))
            }
            EventType::StepFailed => Some(
                match event.payload.get("hint").and_then(|hint| hint.as_str()) {
                    Some(hint) => format!(
                        "  {step} #{visit}: could not run — {}\n    hint: {hint}",
                        field("error")
                    ),
                    None => format!("  {step} #{visit}: could not run — {}", field("error")),
                },
            ),
            // Between steps (a signal noticed after a step was kept, or before the first).
            EventType::RunInterrupted if event.step_id.is_none() => {
                Some(format!("  interrupted before `{}`", field("next_step")))
            }
            EventType::RunInterrupted => Some(format!("  {step} #{visit}: interrupted")),
            // What `resume` (or a gate decision that continues the run) recovered, before it
            // goes on: said here, from the events it records.
            EventType::StepInterrupted => Some(interrupted_visit(event, step, visit)),
            EventType::GuardCheckSkipped => Some(format!(
                "  {step} #{visit}: NOT CHECKED (--skip-guard-check) — {}; refs, git configuration and the operator's checkout are left as they are",
                field("reason")
            )),
            EventType::RepositoryChangesKept => Some(format!(
                "  {step} #{visit}: refs and git configuration changed during the step kept as the operator's ({} ref change(s){})",
                event
                    .payload
                    .get("ref_changes")
                    .and_then(serde_json::Value::as_array)
                    .map_or(0, Vec::len),
                if event
                    .payload
                    .get("git_config_changed")
                    .is_some_and(|changed| {
                        changed.as_bool() == Some(true)
                            || changed.as_array().is_some_and(|files| !files.is_empty())
                    })
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
        } else if !self.live && event.event_type == EventType::StepStarted {
            let _ = writeln!(stderr, "▶ {}", self.current);
        }
        if self.live && !self.current.is_empty() {
            let activity = serde_json::to_value(event.event_type)
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
    let field = |key: &str| event.text(key).unwrap_or_default().to_owned();
    match event.event_type {
        EventType::WorktreeRecreated => Some(format!(
            "  the worktree was gone: checked out again at {} from branch {}",
            field("path"),
            field("branch")
        )),
        EventType::WorkflowChanged => Some(format!(
            "  the workflow file {} changed since the run started or last continued; it applies from here on",
            field("path")
        )),
        EventType::ConfigChanged => Some(format!(
            "  the configuration {} changed since the run started or last continued; it applies from here on",
            match field("path") {
                path if path.is_empty() => "(built-in defaults)".to_owned(),
                path => path,
            }
        )),
        EventType::PromptsChanged => Some(format!(
            "  prompt files in {} changed ({}); they apply from here on",
            field("path"),
            names(event.payload.get("changed"))
        )),
        EventType::ParamsChanged => Some(format!(
            "  the workflow's parameters changed: added {}; removed {}",
            event
                .payload
                .get("added")
                .and_then(serde_json::Value::as_object)
                .filter(|added| !added.is_empty())
                .map_or_else(
                    || "none".to_owned(),
                    |added| added.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            names(event.payload.get("removed"))
        )),
        EventType::DriftAccepted => Some(
            "  the worktree differed from the recorded state: accepted as it is (--accept-drift)"
                .to_owned(),
        ),
        _ => None,
    }
}

/// ` — tests exit 1, lint exit 2` for a validation's `runner_completed` event naming validators
/// that did not exit 0 (`no exit code` for one stopped or not run); empty otherwise.
fn failed_validators(event: &Event) -> String {
    let failed: Vec<String> = event
        .exit_codes()
        .into_iter()
        .filter(|(_, code)| *code != Some(0))
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
fn interrupted_visit(event: &Event, step: &str, visit: u32) -> String {
    let mut line = format!(
        "  {step} #{visit}: recorded as interrupted — {}",
        event.text("cause").unwrap_or("cause unknown")
    );
    let pids = |key: &str| {
        event
            .payload
            .get(key)
            .and_then(serde_json::Value::as_array)
            .filter(|pids| !pids.is_empty())
            .map(|pids| {
                pids.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            })
    };
    if let Some(killed) = pids("killed_orphans") {
        let _ = write!(line, "; stopped its orphaned processes (pid {killed})");
    }
    if let Some(survivors) = pids("surviving_orphans") {
        let _ = write!(line, "; STILL ALIVE after being killed: pid {survivors}");
    }
    if let Some(restored) = event.payload.get("restored") {
        let snapshot = restored["snapshot"]["reference"]
            .as_str()
            .or_else(|| restored["snapshot"]["commit"].as_str())
            .unwrap_or("?");
        let _ = write!(
            line,
            "; the worktree was put back to its pre-step snapshot ({snapshot})"
        );
    }
    let _ = write!(line, "; `{step}` goes on with visit #{}", visit + 1);
    line
}

/// A JSON list of names as `a, b`, or `none`.
fn names(list: Option<&serde_json::Value>) -> String {
    list.and_then(serde_json::Value::as_array)
        .filter(|names| !names.is_empty())
        .map_or_else(
            || "none".to_owned(),
            |names| {
                names
                    .iter()
                    .map(|name| {
                        name.as_str()
                            .map_or_else(|| name.to_string(), str::to_owned)
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        )
}
