//! STOP: the terminal step; its reason is evaluated and recorded.

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
    Ok(StepResult {
        report: StepReport::outcome(Outcome::Completed),
        manifest,
        cost_usd: 0.0,
        waiting: false,
        fingerprint: None,
    })
}
