//! STOP: the terminal step; its reason is evaluated and recorded.

use crate::artifacts::{EventLog, EventType};
use crate::kernel::StepReport;
use crate::outcome::Outcome;
use crate::workflow::model::{Stop, StopOutcome};

use super::{OpcodeError, StepContext, StepResult};

pub(super) fn execute(
    context: &mut StepContext<'_>,
    stop: &Stop,
) -> Result<StepResult, OpcodeError> {
    let reason = match &stop.reason {
        Some(node) => {
            let script_context = context.script_context()?;
            Some(context.run.script.evaluate_json(node, &script_context)?)
        }
        None => None,
    };
    let outcome = match stop.outcome {
        StopOutcome::Success => "success",
        StopOutcome::Failure => "failure",
    };
    let manifest = context.manifest(
        outcome,
        serde_json::json!({ "stop": outcome, "reason": reason }),
        Vec::new(),
    );
    let events = EventLog::read_all(&context.recorder.run_dir().events()).unwrap_or_default();
    let stated = match &reason {
        Some(serde_json::Value::String(text)) => Some(text.clone()),
        Some(serde_json::Value::Null) | None => what_led_here(context, &events),
        Some(other) => Some(other.to_string()),
    };
    // A failure says why: what failed since the last agent step began.
    let causes = match stop.outcome {
        StopOutcome::Failure => {
            super::stop_cause::failure_causes(context.recorder.run_dir(), &events)
        }
        StopOutcome::Success => None,
    };
    let why = match (stated, causes) {
        // The planner's own verdict says more than "after `judge` ended blocked".
        (Some(stated), Some(causes))
            if reason.is_none()
                && causes.contains(&format!("planner {}", stated_step(&stated))) =>
        {
            Some(causes)
        }
        (Some(stated), Some(causes)) => Some(format!("{stated} — {causes}")),
        (stated, causes) => stated.or(causes),
    };
    Ok(StepResult {
        report: StepReport {
            stop_reason: why,
            ..StepReport::outcome(Outcome::Completed)
        },
        manifest,
        cost_usd: 0.0,
        waiting: false,
        fingerprint: None,
    })
}

/// The quoted step of `after `STEP` ended OUTCOME`.
fn stated_step(stated: &str) -> &str {
    stated
        .strip_prefix("after ")
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or(stated)
}

/// For a STOP without a reason: the step and outcome that routed here, when that outcome was
/// not a success (`after `work` ended killed_timeout`), so a failed run's summary, status and
/// journal say why without opening the run.
fn what_led_here(context: &StepContext<'_>, events: &[crate::artifacts::Event]) -> Option<String> {
    let route = events.iter().rev().find(|event| {
        event.event_type == EventType::RouteSelected
            && event.text("next_step") == Some(context.step_id())
    })?;
    let outcome = route.text("outcome")?;
    let ordinary = ["completed", "success", "gate_approved", "gate_queued"];
    if ordinary.contains(&outcome) {
        return None;
    }
    Some(format!(
        "after `{}` ended {outcome}",
        route.step_id.as_deref().unwrap_or("?")
    ))
}
