//! The live progress of `run` and `resume` on stderr: on a terminal one status line that is
//! rewritten as events arrive (current step, elapsed time, last activity) plus a permanent line
//! per finished step; otherwise plain lines. Silent with `--json` or `-q`.

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
    };
    Some(Box::new(move |event: &Event| view.show(event)))
}

struct View {
    live: bool,
    step_started: Instant,
    current: String,
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
        let step = event.step_id.as_deref().unwrap_or("-");
        let visit = event.visit.unwrap_or(0);
        let field = |key: &str| event.text(key).unwrap_or_default().to_owned();
        let permanent = match event.event_type {
            EventType::StepStarted => {
                self.step_started = Instant::now();
                self.current = format!("{step} #{visit} ({})", field("opcode"));
                None
            }
            EventType::StepCompleted => Some(format!(
                "  {step} #{visit}: {} ({:.1}s)",
                field("outcome"),
                self.step_started.elapsed().as_secs_f64()
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
            _ => None,
        };
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
