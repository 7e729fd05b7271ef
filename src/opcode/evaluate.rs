//! EVALUATE with the offline `rules` planner: the OA06 envelope is assembled from the manifests
//! of the steps since the previous EVALUATE, and the status is derived deterministically from
//! structured evidence (policy events → `unsafe`; a failed or killed step → `partial` or
//! `blocked`; otherwise `success`). Other planner backends arrive with the planner issue.

use crate::artifacts::{
    ArtifactRole, EventLog, EventType, StepManifest, read_json, write_json_new,
};
use crate::kernel::StepReport;
use crate::kernel::recorder::payload;
use crate::outcome::Outcome;
use crate::workflow::model::{Evaluate, PromptSpec};

use super::{OpcodeError, StepContext, StepResult};

/// The last step summaries the envelope carries (OA06 §2, K = 3).
const PROVENANCE_WINDOW: usize = 3;

pub(super) fn execute(
    context: &mut StepContext<'_>,
    evaluate: &Evaluate,
) -> Result<StepResult, OpcodeError> {
    let visit_dir = context
        .visit_dir()
        .map_err(|error| OpcodeError::Other(format!("cannot create the step folder: {error}")))?;
    let manifests = manifests_since_last_evaluate(context)?;
    let mut envelope = envelope(context, evaluate, &manifests);
    add_inputs(context, evaluate, &mut envelope)?;
    summarize(context, &mut envelope)?;
    write_json_new(&visit_dir.join("planner_input.json"), &envelope)?;
    let decision = decide(context, evaluate, &manifests);
    write_json_new(&visit_dir.join("planner_decision.json"), &decision)?;
    let status: Outcome = decision["status"]
        .as_str()
        .and_then(|text| text.parse().ok())
        .unwrap_or(Outcome::Blocked);
    let step = (context.step_id().to_owned(), context.visit);
    let fields = payload([
        ("status", status.as_str().into()),
        ("planner", "rules".into()),
        ("risk_flags", decision["risk_flags"].clone()),
    ]);
    context
        .recorder
        .event(EventType::PlannerDecision, Some((&step.0, step.1)), fields)?;
    let artifacts = vec![
        context.artifact(
            ArtifactRole::PlannerInput,
            "planner_input.json",
            "application/json",
            true,
        ),
        context.artifact(
            ArtifactRole::PlannerDecision,
            "planner_decision.json",
            "application/json",
            true,
        ),
    ];
    let manifest = context.manifest(
        status.as_str(),
        serde_json::json!({ "status": status.as_str(), "decision": decision }),
        artifacts,
    );
    Ok(StepResult {
        report: StepReport::outcome(status),
        manifest,
        cost_usd: 0.0,
        waiting: false,
    })
}

/// The EVALUATE step's own `inputs`, computed (expressions keep their types), sent to the
/// planner as `inputs` beside the OA06 fields.
fn add_inputs(
    context: &StepContext<'_>,
    evaluate: &Evaluate,
    envelope: &mut serde_json::Value,
) -> Result<(), OpcodeError> {
    let script_context = context.script_context()?;
    let inputs = match &evaluate.inputs {
        crate::workflow::model::Inputs::None => return Ok(()),
        crate::workflow::model::Inputs::Names(names) => {
            serde_json::Value::Array(names.iter().map(|name| name.value.clone().into()).collect())
        }
        crate::workflow::model::Inputs::Values(values) => {
            let mut map = serde_json::Map::new();
            for (name, node) in values {
                map.insert(
                    name.value.clone(),
                    context.run.script.evaluate_json(node, &script_context)?,
                );
            }
            serde_json::Value::Object(map)
        }
        crate::workflow::model::Inputs::Expression(node) => {
            context.run.script.evaluate_json(node, &script_context)?
        }
    };
    envelope["inputs"] = inputs;
    Ok(())
}

/// The workflow's optional `summarize(evidence)` hook shapes what the planner reads: its
/// result is sent as `evidence.summary`. The raw evidence stays in the envelope, and the rules
/// and the guard judge the raw evidence, never the summary.
fn summarize(
    context: &mut StepContext<'_>,
    envelope: &mut serde_json::Value,
) -> Result<(), OpcodeError> {
    if !context.run.script.defines("summarize", 1) {
        return Ok(());
    }
    let pos = context
        .run
        .script
        .script_position()
        .unwrap_or(context.step.pos);
    let function = crate::workflow::model::At::new("summarize".to_owned(), pos);
    let script_context = context.script_context()?;
    let summary = context.run.script.call_function(
        &function,
        &[envelope["evidence"].clone()],
        &script_context,
    )?;
    envelope["evidence"]["summary"] = summary;
    let step = (context.step_id().to_owned(), context.visit);
    for message in context.run.script.take_output() {
        context.recorder.event(
            EventType::ScriptOutput,
            Some((&step.0, step.1)),
            message.event_payload(),
        )?;
    }
    Ok(())
}

/// Manifests of the visits completed after the previous EVALUATE, oldest first.
fn manifests_since_last_evaluate(
    context: &StepContext<'_>,
) -> Result<Vec<StepManifest>, OpcodeError> {
    let run_dir = context.recorder.run_dir().clone();
    let events = EventLog::read_all(&run_dir.events())?;
    let mut manifests = Vec::new();
    for event in events
        .iter()
        .filter(|event| event.event_type == EventType::StepCompleted)
    {
        let (Some(step), Some(visit)) = (&event.step_id, event.visit) else {
            continue;
        };
        let Ok(manifest) = read_json::<StepManifest>(
            &run_dir.visit_dir(step, visit).join("manifest.json"),
            "manifest",
        ) else {
            continue;
        };
        if manifest.opcode == "EVALUATE" {
            manifests.clear();
        } else {
            manifests.push(manifest);
        }
    }
    Ok(manifests)
}

fn envelope(
    context: &StepContext<'_>,
    evaluate: &Evaluate,
    manifests: &[StepManifest],
) -> serde_json::Value {
    let window: Vec<serde_json::Value> = manifests
        .iter()
        .rev()
        .take(PROVENANCE_WINDOW)
        .rev()
        .map(|manifest| serde_json::json!({ "step_id": manifest.step_id, "opcode": manifest.opcode, "outcome": manifest.termination, "summary": manifest.evidence_summary }))
        .collect();
    let last = manifests.last();
    let prompt = match &evaluate.prompt.value {
        PromptSpec::Reference(reference) => reference.to_string(),
        PromptSpec::Literal(text) => text.clone(),
    };
    let artifacts: Vec<&str> = manifests
        .iter()
        .flat_map(|manifest| manifest.artifacts.iter().map(|entry| entry.path.as_str()))
        .collect();
    serde_json::json!({
        "run_id": context.state.run_id,
        "workflow_id": context.state.workflow_id,
        "step_id": context.step_id(),
        "evaluate_prompt": prompt,
        "allowed_next_steps": evaluate.allowed_next_steps.iter().map(|id| id.value.as_str()).collect::<Vec<_>>(),
        "provenance_window": window,
        "evidence": {
            "transcript_summary": last.map(|manifest| manifest.evidence_summary.to_string()).unwrap_or_default(),
            "workspace_diff_summary": last.and_then(|manifest| manifest.evidence_summary.get("diffstat")).map(ToString::to_string).unwrap_or_default(),
            "validation": {
                "mechanical_outcome": last.map_or("completed", |manifest| manifest.termination.as_str()),
                "exit_codes": {},
                "timeouts": [],
            },
            "harness_report": harness_report(context, manifests),
            "artifacts": artifacts,
            "policy_events": context.state.safety.policy_violation.iter().collect::<Vec<_>>(),
        },
    })
}

/// The last harness report among the manifests, parsed.
fn harness_report(context: &StepContext<'_>, manifests: &[StepManifest]) -> serde_json::Value {
    manifests
        .iter()
        .rev()
        .find_map(|manifest| manifest.artifact(ArtifactRole::HarnessReport))
        .and_then(|entry| {
            read_json::<serde_json::Value>(
                &context.recorder.run_dir().root().join(&entry.path),
                "harness report",
            )
            .ok()
        })
        .unwrap_or(serde_json::Value::Null)
}

/// The `rules` derivation (OA06 precedence: unsafe > needs_human > blocked > partial > success).
fn decide(
    context: &StepContext<'_>,
    evaluate: &Evaluate,
    manifests: &[StepManifest],
) -> serde_json::Value {
    let failed: Vec<&StepManifest> = manifests
        .iter()
        .filter(|manifest| manifest.termination != "completed")
        .collect();
    let (status, risk_flags, blockers, fix) = if let Some(violation) =
        &context.state.safety.policy_violation
    {
        (
            Outcome::Unsafe,
            vec!["policy_violation"],
            vec![serde_json::json!({ "code": "policy_violation", "summary": violation })],
            None,
        )
    } else if let Some(reported_by) = &context.state.safety.goldens_pending {
        let blocker = serde_json::json!({ "code": "proposed_goldens", "summary": format!("step `{reported_by}` proposed golden updates; a human approves goldens") });
        (
            Outcome::NeedsHuman,
            vec!["proposed_goldens"],
            vec![blocker],
            None,
        )
    } else if let Some(killed) = failed
        .iter()
        .find(|manifest| manifest.termination.starts_with("killed_"))
    {
        let blocker = serde_json::json!({ "code": killed.termination, "summary": format!("step `{}` ended {}", killed.step_id, killed.termination) });
        (
            Outcome::Blocked,
            vec!["timeout_or_kill"],
            vec![blocker],
            None,
        )
    } else if let Some(failure) = failed.last() {
        let fix = serde_json::json!({
            "objective": format!("make step `{}` complete", failure.step_id),
            "constraints": ["keep the change within the policy"],
            "edits": [],
            "verification": [{ "command": format!("re-run step {}", failure.step_id), "expected_signal": "completed" }],
        });
        (Outcome::Partial, Vec::new(), Vec::new(), Some(fix))
    } else {
        (Outcome::Success, Vec::new(), Vec::new(), None)
    };
    let next_step = context
        .step
        .routes
        .target(status)
        .map(|target| target.value.as_str().to_owned())
        .filter(|target| {
            target == "STOP"
                || evaluate
                    .allowed_next_steps
                    .iter()
                    .any(|allowed| allowed.value.as_str() == target)
        });
    serde_json::json!({
        "schema_version": crate::artifacts::SCHEMA_VERSION,
        "status": status.as_str(),
        "next_step": next_step,
        "fix_instructions": fix,
        "blockers": blockers,
        "risk_flags": risk_flags,
        "decided_by": "rules",
    })
}
