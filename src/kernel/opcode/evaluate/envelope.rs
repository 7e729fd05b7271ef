//! The planner envelope EVALUATE gives its planner: the evidence of the steps since the
//! previous EVALUATE, a window of the last three steps, the history of earlier decisions, what
//! the last agent was asked, and the step's own `inputs` (and the workflow's `summarize` hook).

use super::super::{OpcodeError, StepContext};
use super::harness_report::{harness_report, shrink};
use crate::artifacts::{ArtifactRole, EventLog, EventType, StepManifest, read_json};
use crate::workflow::model::{Evaluate, PromptSpec};
use crate::workspace::DiffStat;

/// The last step summaries the envelope carries.
const PROVENANCE_WINDOW: usize = 3;

/// The most of one step's evidence summary the provenance window repeats, as JSON.
const WINDOW_SUMMARY_LIMIT: usize = 16 * 1024;

/// A step's evidence summary as the provenance window repeats it: whole up to
/// [`WINDOW_SUMMARY_LIMIT`] bytes of JSON, else a note pointing at the manifest.
fn window_summary(summary: &serde_json::Value, step_id: &str, visit: u32) -> serde_json::Value {
    let size = serde_json::to_vec(summary).map_or(0, |text| text.len());
    if size <= WINDOW_SUMMARY_LIMIT {
        return summary.clone();
    }
    serde_json::json!({
        "omitted": format!(
            "the evidence summary is {size} bytes (more than {WINDOW_SUMMARY_LIMIT}); see artifacts/{step_id}/{visit}/manifest.json"
        ),
    })
}

/// The EVALUATE step's own `inputs`, computed (expressions keep their types), sent to the
/// planner as `inputs` beside the envelope's fields.
pub(super) fn add_inputs(
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
pub(super) fn summarize(
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
    super::super::step_policy::record_script_output(context)
}

/// Manifests of the visits completed so far in this run, in the order they ended.
pub(super) fn completed_manifests(
    context: &StepContext<'_>,
) -> Result<Vec<StepManifest>, OpcodeError> {
    let run_dir = context.recorder.run_dir().clone();
    let events = EventLog::read_all(&run_dir.events())?;
    Ok(events
        .iter()
        .filter(|event| event.event_type() == EventType::StepCompleted)
        .filter_map(|event| {
            let (step, visit) = (event.step_id.as_ref()?, event.visit?);
            read_json::<StepManifest>(&run_dir.visit_manifest(step, visit), "manifest").ok()
        })
        .collect())
}

/// The run's earlier evaluations (status, blockers, flags and the worktree they judged), for
/// the guard's loop and repetition checks beyond the K=3 window.
fn evaluation_history(completed: &[StepManifest]) -> Vec<serde_json::Value> {
    completed
        .iter()
        .filter(|manifest| manifest.opcode == "EVALUATE")
        .map(|manifest| {
            let decision = &manifest.evidence_summary["decision"];
            serde_json::json!({
                "step_id": manifest.step_id,
                "visit": manifest.visit,
                "status": manifest.termination,
                "blocker_codes": blocker_codes(decision),
                "risk_flags": decision.get("risk_flags").cloned().unwrap_or_else(|| serde_json::json!([])),
                "worktree_fingerprint": manifest.evidence_summary["worktree_fingerprint"],
            })
        })
        .collect()
}

fn blocker_codes(decision: &serde_json::Value) -> Vec<serde_json::Value> {
    decision["blockers"]
        .as_array()
        .map(|blockers| {
            blockers
                .iter()
                .map(|blocker| blocker["code"].clone())
                .collect()
        })
        .unwrap_or_default()
}

pub(super) fn envelope(
    context: &StepContext<'_>,
    evaluate: &Evaluate,
    completed: &[StepManifest],
) -> serde_json::Value {
    // The evidence: the steps since the previous EVALUATE; the window: the last K steps
    // whatever they were (earlier evaluations included).
    let since = completed
        .iter()
        .rposition(|manifest| manifest.opcode == "EVALUATE")
        .map_or(0, |index| index + 1);
    let manifests = &completed[since..];
    let window: Vec<serde_json::Value> = completed
        .iter()
        .rev()
        .take(PROVENANCE_WINDOW)
        .rev()
        .map(|manifest| {
            let decision = &manifest.evidence_summary["decision"];
            serde_json::json!({
                "step_id": manifest.step_id,
                "opcode": manifest.opcode,
                "outcome": manifest.termination,
                "diff_summary": diff_text(&manifest.evidence_summary["diffstat"]),
                "risk_flags": decision.get("risk_flags").cloned().unwrap_or_else(|| serde_json::json!([])),
                "blocker_codes": blocker_codes(decision),
                "summary": window_summary(&manifest.evidence_summary, &manifest.step_id, manifest.visit),
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
        "steps": manifests.iter().map(|manifest| serde_json::json!({
            "step_id": manifest.step_id,
            "visit": manifest.visit,
            "opcode": manifest.opcode,
            "outcome": manifest.termination,
        })).collect::<Vec<_>>(),
        "intent": intent(context, last_agent),
        "evaluation_history": evaluation_history(completed),
        "evidence": {
            "worktree_fingerprint": context.state.fingerprint.as_ref().map(|fingerprint| fingerprint.tree.clone()),
            "transcript_summary": transcript_summary(context, last_agent),
            "transcript": transcript_details(context, last_agent),
            "workspace_diff_summary": last_agent.and_then(|manifest| diff_text(&manifest.evidence_summary["diffstat"])).unwrap_or_default(),
            "workspace_diffstat": last_agent.and_then(|manifest| diffstat(&manifest.evidence_summary["diffstat"])),
            "validation": validation(context, manifests),
            "harness_report": harness_report(context, manifests),
            "artifacts": artifacts,
            "policy_events": context.state.safety.policy_violation.iter().collect::<Vec<_>>(),
        },
    })
}

/// What the last agent step was asked: its prompt reference (or `inline`), the inputs it
/// names, and the rendered prompt as sent.
fn intent(context: &StepContext<'_>, last_agent: Option<&StepManifest>) -> serde_json::Value {
    let Some(manifest) = last_agent else {
        return serde_json::Value::Null;
    };
    let step = context
        .run
        .workflow
        .steps
        .iter()
        .find(|step| step.id.value.as_str() == manifest.step_id);
    let Some(crate::workflow::model::StepBody::RunAgent(agent)) = step.map(|step| &step.body)
    else {
        return serde_json::json!({ "step_id": manifest.step_id });
    };
    let prompt = match &agent.prompt.value {
        PromptSpec::Reference(reference) => reference.to_string(),
        PromptSpec::Literal(_) => "inline".to_owned(),
    };
    let inputs: Vec<String> = match &agent.inputs {
        crate::workflow::model::Inputs::None | crate::workflow::model::Inputs::Expression(_) => {
            Vec::new()
        }
        crate::workflow::model::Inputs::Names(names) => {
            names.iter().map(|name| name.value.clone()).collect()
        }
        crate::workflow::model::Inputs::Values(values) => {
            values.iter().map(|(name, _)| name.value.clone()).collect()
        }
    };
    serde_json::json!({
        "step_id": manifest.step_id,
        "visit": manifest.visit,
        "agent": agent.agent.value,
        "prompt": prompt,
        "inputs": inputs,
        "rendered_prompt": manifest.artifact(ArtifactRole::RunnerPrompt).map(|entry| entry.path.clone()),
    })
}

/// The last agent's run in numbers: termination, turns, cost, permission denials, the tail.
fn transcript_details(
    context: &StepContext<'_>,
    last_agent: Option<&StepManifest>,
) -> serde_json::Value {
    let Some(entry) =
        last_agent.and_then(|manifest| manifest.artifact(ArtifactRole::RunnerMetadata))
    else {
        return serde_json::Value::Null;
    };
    let Ok(metadata) = read_json::<serde_json::Value>(
        &context.recorder.run_dir().root().join(&entry.path),
        "runner metadata",
    ) else {
        return serde_json::Value::Null;
    };
    serde_json::json!({
        "termination": metadata["outcome"],
        "cause": metadata["cause"],
        "exit_code": metadata["exit_code"],
        "turns": metadata["turns"],
        "cost_usd": metadata["cost_usd"],
        "permission_denials": metadata["permission_denials"],
        "tail": metadata["output_tail"],
    })
}

/// A recorded diffstat as one line (`2 files changed, +10 -1` or `no changes`).
fn diff_text(diffstat: &serde_json::Value) -> Option<String> {
    serde_json::from_value::<DiffStat>(diffstat.clone())
        .ok()
        .map(|stat| stat.to_string())
}

/// A recorded diffstat as the structured `workspace_diffstat` (`files_changed`,
/// `insertions`, `deletions`, `binary_files`): the guard reads whether the diff is empty from
/// it, never from the text.
fn diffstat(diffstat: &serde_json::Value) -> Option<DiffStat> {
    serde_json::from_value::<DiffStat>(diffstat.clone()).ok()
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
            let path = context.recorder.run_dir().root().join(&entry.path);
            // Read no further than the summary needs, and a few bytes more to know it was cut:
            // the agent may have grown the file.
            // More than `LIMIT` bytes read means more than `LIMIT` bytes of text: it is cut below.
            let (bytes, _) =
                crate::artifacts::safe_files::read_regular(&path, LIMIT as u64 + 4).ok()?;
            Some(String::from_utf8_lossy(&bytes).into_owned())
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

/// The most of a validation report (`validation_report.json`) read for the envelope.
const VALIDATION_REPORT_READ_LIMIT: u64 = 8 * 1024 * 1024;

/// The validation summary: the worst mechanical termination since the last EVALUATE (of the
/// steps that run processes or reset the worktree: a gate's decision is not one), the exit
/// codes and timeouts of its RUN_VALIDATION steps, and, from their validation reports, the
/// declared artifacts that were missing and why a validator did not complete (`causes`).
/// A validator that ran in several of those steps counts as its latest run.
fn validation(context: &StepContext<'_>, manifests: &[StepManifest]) -> serde_json::Value {
    let mut failed = manifests.iter().filter(|manifest| {
        matches!(
            manifest.opcode.as_str(),
            "RUN_AGENT" | "RUN_VALIDATION" | "ROLLBACK"
        ) && manifest.termination != "completed"
    });
    let killed = failed
        .clone()
        .find(|manifest| manifest.termination.starts_with("killed_"));
    let outcome = killed
        .or(failed.next_back())
        .map_or("completed", |manifest| manifest.termination.as_str());
    let mut exit_codes = serde_json::Map::new();
    let mut timeouts = Vec::new();
    // Per validator, its latest record's missing artifacts and cause.
    let mut missing = std::collections::BTreeMap::<String, Vec<serde_json::Value>>::new();
    let mut causes = serde_json::Map::new();
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
        let Some(report) = validation_report(context, manifest) else {
            continue;
        };
        let Some(validators) = report["validators"].as_object() else {
            continue;
        };
        for (id, record) in validators {
            let paths = record["missing_artifacts"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            missing.insert(id.clone(), paths);
            match record["cause"].as_str() {
                Some(cause) if record["outcome"] != "completed" && !cause.is_empty() => {
                    causes.insert(id.clone(), shrink(&cause.into(), 1000, 0, 0));
                }
                _ => {
                    causes.remove(id);
                }
            }
        }
    }
    let missing: Vec<serde_json::Value> = missing.into_values().flatten().collect();
    serde_json::json!({
        "mechanical_outcome": outcome,
        "exit_codes": exit_codes,
        "timeouts": timeouts,
        "missing_artifacts": missing,
        "causes": causes,
    })
}

/// A RUN_VALIDATION visit's `validation_report.json`, parsed (`None` when it cannot be read).
fn validation_report(
    context: &StepContext<'_>,
    manifest: &StepManifest,
) -> Option<serde_json::Value> {
    let entry = manifest.artifact(ArtifactRole::ValidationReport)?;
    let path = context.recorder.run_dir().root().join(&entry.path);
    let (bytes, more) =
        crate::artifacts::safe_files::read_regular(&path, VALIDATION_REPORT_READ_LIMIT).ok()?;
    if more {
        return None;
    }
    serde_json::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_repeats_a_summary_only_up_to_its_limit() {
        let small = serde_json::json!({"status": "partial"});
        assert_eq!(window_summary(&small, "judge", 1), small);
        let large = serde_json::json!({"decision": {"fix_instructions": "x".repeat(20_000)}});
        let note = window_summary(&large, "judge", 2);
        assert!(
            note["omitted"]
                .as_str()
                .unwrap()
                .contains("see artifacts/judge/2/manifest.json"),
            "{note}"
        );
    }
}
