//! EVALUATE: the OA06 envelope is assembled from the manifests of the steps since the previous
//! EVALUATE, saved as `planner_input`, and handed to the step's planner backend (`rules` by
//! default, or a `command` profile); the answer passes the guard (`crate::planner`), the kernel
//! adds its own safety facts (a recorded policy violation stays `unsafe`, pending goldens stay
//! `needs_human`), and the decision is saved as `planner_decision` and routes.

use crate::artifacts::{
    ArtifactRole, EventLog, EventType, StepManifest, read_json, write_json_new,
};
use crate::kernel::StepReport;
use crate::kernel::recorder::payload;
use crate::outcome::Outcome;
use crate::workflow::model::{Evaluate, PromptSpec};

use super::{OpcodeError, StepContext, StepResult};
use crate::planner::Status;
use crate::planner::backend::Backend;
use crate::workspace::DiffStat;

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
    let decision = decide(context, evaluate, &envelope);
    write_json_new(&visit_dir.join("planner_decision.json"), &decision)?;
    let status: Outcome = decision["status"]
        .as_str()
        .and_then(|text| text.parse().ok())
        .unwrap_or(Outcome::Blocked);
    let step = (context.step_id().to_owned(), context.visit);
    let fields = payload([
        ("status", status.as_str().into()),
        ("planner", decision["planner"].clone()),
        ("decided_by", decision["decided_by"].clone()),
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
        .map(|manifest| {
            let decision = &manifest.evidence_summary["decision"];
            let blocker_codes: Vec<&serde_json::Value> = decision["blockers"].as_array().map(|blockers| blockers.iter().map(|blocker| &blocker["code"]).collect()).unwrap_or_default();
            serde_json::json!({
                "step_id": manifest.step_id,
                "opcode": manifest.opcode,
                "outcome": manifest.termination,
                "diff_summary": diff_text(&manifest.evidence_summary["diffstat"]),
                "risk_flags": decision.get("risk_flags").cloned().unwrap_or_else(|| serde_json::json!([])),
                "blocker_codes": blocker_codes,
                "summary": manifest.evidence_summary,
            })
        })
        .collect();
    let last_agent = manifests
        .iter()
        .rev()
        .find(|manifest| manifest.opcode == "RUN_AGENT");
    let prompt = match &evaluate.prompt.value {
        PromptSpec::Reference(reference) => reference.to_string(),
        PromptSpec::Literal(text) => text.clone(),
    };
    let artifacts: Vec<&str> = manifests
        .iter()
        .flat_map(|manifest| manifest.artifacts.iter().map(|entry| entry.path.as_str()))
        .collect();
    serde_json::json!({
        "schema_version": crate::artifacts::SCHEMA_VERSION,
        "run_id": context.state.run_id,
        "workflow_id": context.state.workflow_id,
        "step_id": context.step_id(),
        "evaluate_prompt": prompt,
        "allowed_next_steps": evaluate.allowed_next_steps.iter().map(|id| id.value.as_str()).collect::<Vec<_>>(),
        "provenance_window": window,
        "evidence": {
            "transcript_summary": transcript_summary(context, last_agent),
            "workspace_diff_summary": last_agent.and_then(|manifest| diff_text(&manifest.evidence_summary["diffstat"])).unwrap_or_default(),
            "validation": validation(manifests),
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

/// A recorded diffstat as one line (`2 files changed, +10 -1` or `no changes`).
fn diff_text(diffstat: &serde_json::Value) -> Option<String> {
    serde_json::from_value::<DiffStat>(diffstat.clone())
        .ok()
        .map(|stat| stat.to_string())
}

/// The last agent's final response (its claims, for the contradiction checks), bounded.
fn transcript_summary(context: &StepContext<'_>, last_agent: Option<&StepManifest>) -> String {
    const LIMIT: usize = 8 * 1024;
    let Some(manifest) = last_agent else {
        return "no agent step since the last evaluation".to_owned();
    };
    let response = manifest
        .artifact(ArtifactRole::RunnerFinalResponse)
        .and_then(|entry| {
            std::fs::read_to_string(context.recorder.run_dir().root().join(&entry.path)).ok()
        });
    match response {
        Some(mut text) => {
            if text.len() > LIMIT {
                let mut end = LIMIT;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
                text.push_str("\n[truncated]");
            }
            text
        }
        None => String::new(),
    }
}

/// The validation summary: the worst termination since the last EVALUATE and the exit codes
/// and timeouts of its RUN_VALIDATION steps.
fn validation(manifests: &[StepManifest]) -> serde_json::Value {
    let mut failed = manifests
        .iter()
        .filter(|manifest| manifest.termination != "completed");
    let killed = failed
        .clone()
        .find(|manifest| manifest.termination.starts_with("killed_"));
    let outcome = killed
        .or(failed.next_back())
        .map_or("completed", |manifest| manifest.termination.as_str());
    let mut exit_codes = serde_json::Map::new();
    let mut timeouts = Vec::new();
    for manifest in manifests
        .iter()
        .filter(|manifest| manifest.opcode == "RUN_VALIDATION")
    {
        if let Some(codes) = manifest.evidence_summary["exit_codes"].as_object() {
            exit_codes.extend(
                codes
                    .iter()
                    .map(|(name, code)| (name.clone(), code.clone())),
            );
        }
        if let Some(names) = manifest.evidence_summary["timeouts"].as_array() {
            timeouts.extend(names.iter().cloned());
        }
    }
    serde_json::json!({ "mechanical_outcome": outcome, "exit_codes": exit_codes, "timeouts": timeouts })
}

/// Asks the step's planner (`--planner`, the step's `planner:`, `defaults.planner`, else
/// `rules`), then applies the kernel's own safety facts and fills `next_step` from the routes.
fn decide(
    context: &StepContext<'_>,
    evaluate: &Evaluate,
    envelope: &serde_json::Value,
) -> serde_json::Value {
    let config = &context.run.config;
    let name = config
        .planner_override
        .clone()
        .or_else(|| evaluate.planner.as_ref().map(|name| name.value.clone()))
        .or_else(|| {
            context
                .run
                .workflow
                .defaults
                .planner
                .as_ref()
                .map(|name| name.value.clone())
        })
        .unwrap_or_else(|| "rules".to_owned());
    let (mut decision, decided_by) = match Backend::from_config(&name, config) {
        Ok(backend) => crate::planner::backend::decide(&backend, envelope),
        Err(message) => crate::planner::backend::failed(message, envelope),
    };
    if let Some(reported_by) = &context.state.safety.goldens_pending {
        decision.raise(
            Status::NeedsHuman,
            "proposed_goldens_present",
            format!("step `{reported_by}` proposed golden updates; a human approves goldens"),
        );
    }
    let status = decision.status.outcome();
    let routed = context
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
    if decision.next_step.is_none() {
        decision.next_step = routed;
    }
    decision.schema_version = Some(crate::artifacts::SCHEMA_VERSION);
    decision.planner = Some(name);
    decision.decided_by = Some(decided_by);
    serde_json::to_value(&decision).unwrap_or_default()
}
