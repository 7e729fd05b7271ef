//! STOP: the terminal step; its reason is evaluated and recorded.

use crate::artifacts::{EventLog, EventPayload};
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
    let evidence = crate::artifacts::evidence::StopEvidence {
        stop: outcome.to_owned(),
        reason: reason.clone(),
    };
    let manifest = context.manifest(outcome, &evidence, Vec::new());
    let events = EventLog::read_all(&context.recorder.run_dir().events()).unwrap_or_default();
    // A failure says why: what failed since the last agent step began.
    let causes = match stop.outcome {
        StopOutcome::Failure => {
            super::stop_cause::failure_causes(context.recorder.run_dir(), &events)
        }
        StopOutcome::Success => None,
    };
    let stated = match &reason {
        Some(serde_json::Value::String(text)) => Some(text.clone()),
        Some(serde_json::Value::Null) | None => match what_led_here(context, &events) {
            // The planner's own verdict says more than "after `judge` ended blocked".
            Some((step, _))
                if causes
                    .as_ref()
                    .is_some_and(|causes| causes.contains(&format!("planner `{step}`"))) =>
            {
                None
            }
            led => led.map(|(_, text)| text),
        },
        Some(other) => Some(other.to_string()),
    };
    let why = match (stated, causes) {
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

/// For a STOP without a reason: the step and outcome that routed here, when that outcome was
/// not a success (`after `work` ended killed_timeout`), so a failed run's summary, status and
/// journal say why without opening the run. Gives that step too.
fn what_led_here(
    context: &StepContext<'_>,
    events: &[crate::artifacts::Event],
) -> Option<(String, String)> {
    let (route, outcome) = events.iter().rev().find_map(|event| match &event.payload {
        EventPayload::RouteSelected(route) if route.next_step == context.step_id() => {
            Some((event, route.outcome))
        }
        _ => None,
    })?;
    let outcome = outcome?.as_str();
    let ordinary = ["completed", "success", "gate_approved", "gate_queued"];
    if ordinary.contains(&outcome) {
        return None;
    }
    let step = route.step_id.clone().unwrap_or_else(|| "?".to_owned());
    let text = format!("after `{step}` ended {outcome}");
    Some((step, text))
}
