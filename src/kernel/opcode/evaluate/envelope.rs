//! The planner envelope EVALUATE gives its planner: the evidence of the steps since the
//! previous EVALUATE, a window of the last three steps, the history of earlier decisions, what
//! the last agent was asked, and the step's own `inputs` (and the workflow's `summarize` hook).

use super::super::{OpcodeError, StepContext};
use std::collections::BTreeMap;

use serde::Deserialize as _;

use super::harness_report::{cut_text, harness_report};
use crate::artifacts::evidence::ValidationEvidence;
use crate::artifacts::{ArtifactRole, EventLog, EventType, StepManifest, read_json};
use crate::planner::input::{
    Evidence, HistoryEntry, Intent, Omitted, StepEntry, Transcript, Validation, WindowEntry,
};
use crate::planner::{EvaluationSummary, PlannerInput};
use crate::workflow::model::{Evaluate, PromptSpec};

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
    Omitted::note(format!(
        "the evidence summary is {size} bytes (more than {WINDOW_SUMMARY_LIMIT}); see artifacts/{step_id}/{visit}/manifest.json"
    ))
}

/// The EVALUATE step's own `inputs`, computed (expressions keep their types), sent to the
/// planner as `inputs` beside the envelope's fields.
pub(super) fn add_inputs(
    context: &StepContext<'_>,
    evaluate: &Evaluate,
    envelope: &mut PlannerInput,
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
    envelope.inputs = Some(inputs);
    Ok(())
}

/// The workflow's optional `summarize(evidence)` hook shapes what the planner reads: its
/// result is sent as `evidence.summary`. The raw evidence stays in the envelope, and the rules
/// and the guard judge the raw evidence, never the summary.
pub(super) fn summarize(
    context: &mut StepContext<'_>,
    envelope: &mut PlannerInput,
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
    // The script gets the evidence as a script value (a map), as any other JSON.
    let evidence = serde_json::to_value(&envelope.evidence).unwrap_or_default();
    let summary = context
        .run
        .script
        .call_function(&function, &[evidence], &script_context)?;
    envelope.evidence.summary = Some(summary);
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
fn evaluation_history(completed: &[StepManifest]) -> Vec<HistoryEntry> {
    completed
        .iter()
        .filter(|manifest| manifest.opcode == "EVALUATE")
        .map(|manifest| {
            let summary = evaluation_summary(manifest);
            HistoryEntry {
                step_id: Some(manifest.step_id.clone()),
                visit: Some(manifest.visit),
                status: Some(manifest.termination.clone()),
                blocker_codes: summary
                    .as_ref()
                    .map(EvaluationSummary::blocker_codes)
                    .unwrap_or_default(),
                risk_flags: summary
                    .as_ref()
                    .map(|summary| summary.decision.risk_flags.clone())
                    .unwrap_or_default(),
                worktree_fingerprint: summary.and_then(|summary| summary.worktree_fingerprint),
            }
        })
        .collect()
}

/// An EVALUATE manifest's evidence summary, `None` for another step's (or one that cannot be
/// read: its decision then carries no flags or blockers forward).
fn evaluation_summary(manifest: &StepManifest) -> Option<EvaluationSummary> {
    if manifest.opcode != "EVALUATE" {
        return None;
    }
    EvaluationSummary::deserialize(&manifest.evidence_summary).ok()
}

/// One step of the provenance window.
fn window_entry(manifest: &StepManifest) -> WindowEntry {
    let summary = evaluation_summary(manifest);
    WindowEntry {
        step_id: manifest.step_id.clone(),
        opcode: manifest.opcode.clone(),
        outcome: manifest.termination.clone(),
        diff_summary: manifest.step_diffstat().map(|stat| stat.to_string()),
        risk_flags: summary
            .as_ref()
            .map(|summary| summary.decision.risk_flags.clone())
            .unwrap_or_default(),
        blocker_codes: summary
            .as_ref()
            .map(EvaluationSummary::blocker_codes)
            .unwrap_or_default(),
        summary: Some(window_summary(
            &manifest.evidence_summary,
            &manifest.step_id,
            manifest.visit,
        )),
    }
}

pub(super) fn envelope(
    context: &StepContext<'_>,
    evaluate: &Evaluate,
    completed: &[StepManifest],
) -> PlannerInput {
    // The evidence: the steps since the previous EVALUATE; the window: the last K steps
    // whatever they were (earlier evaluations included).
    let since = completed
        .iter()
        .rposition(|manifest| manifest.opcode == "EVALUATE")
        .map_or(0, |index| index + 1);
    let manifests = &completed[since..];
    let window_start = completed.len().saturating_sub(PROVENANCE_WINDOW);
    let last_agent = manifests
        .iter()
        .rev()
        .find(|manifest| manifest.opcode == "RUN_AGENT");
    let prompt = match &evaluate.prompt.value {
        PromptSpec::Reference(reference) => reference.to_string(),
        PromptSpec::Literal(text) => text.clone(),
    };
    PlannerInput {
        schema_version: Some(crate::artifacts::SCHEMA_VERSION),
        run_id: context.state.run_id.clone(),
        workflow_id: context.state.workflow_id.clone(),
        step_id: context.step_id().to_owned(),
        evaluate_prompt: prompt,
        allowed_next_steps: evaluate
            .allowed_next_steps
            .iter()
            .map(|id| id.value.as_str().to_owned())
            .collect(),
        provenance_window: completed[window_start..].iter().map(window_entry).collect(),
        steps: Some(
            manifests
                .iter()
                .map(|manifest| StepEntry {
                    step_id: manifest.step_id.clone(),
                    visit: Some(manifest.visit),
                    opcode: manifest.opcode.clone(),
                    outcome: manifest.termination.clone(),
                })
                .collect(),
        ),
        intent: intent(context, last_agent),
        evaluation_history: Some(evaluation_history(completed)),
        inputs: None,
        evidence: evidence(context, manifests, last_agent),
    }
}

/// The evidence of the steps since the previous EVALUATE.
fn evidence(
    context: &StepContext<'_>,
    manifests: &[StepManifest],
    last_agent: Option<&StepManifest>,
) -> Evidence {
    let diffstat = last_agent.and_then(StepManifest::step_diffstat);
    Evidence {
        worktree_fingerprint: context
            .state
            .fingerprint
            .as_ref()
            .map(|fingerprint| fingerprint.tree.clone()),
        transcript_summary: transcript_summary(context, last_agent),
        transcript: transcript_details(context, last_agent),
        workspace_diff_summary: diffstat
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        workspace_diffstat: diffstat,
        validation: validation(context, manifests),
        harness_report: harness_report(context, manifests),
        artifacts: manifests
            .iter()
            .flat_map(|manifest| manifest.artifacts.iter().map(|entry| entry.path.clone()))
            .collect(),
        policy_events: context
            .state
            .safety
            .policy_violation
            .iter()
            .cloned()
            .collect(),
        summary: None,
    }
}

/// What the last agent step was asked: its prompt reference (or `inline`), the inputs it
/// names, and the rendered prompt as sent.
fn intent(context: &StepContext<'_>, last_agent: Option<&StepManifest>) -> Option<Intent> {
    let manifest = last_agent?;
    let step = context
        .run
        .workflow
        .steps
        .iter()
        .find(|step| step.id.value.as_str() == manifest.step_id);
    let Some(crate::workflow::model::StepBody::RunAgent(agent)) = step.map(|step| &step.body)
    else {
        return Some(Intent {
            step_id: manifest.step_id.clone(),
            ..Intent::default()
        });
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
    Some(Intent {
        step_id: manifest.step_id.clone(),
        visit: Some(manifest.visit),
        agent: Some(agent.agent.value.clone()),
        prompt: Some(prompt),
        inputs: Some(inputs),
        rendered_prompt: Some(
            manifest
                .artifact(ArtifactRole::RunnerPrompt)
                .map(|entry| entry.path.clone()),
        ),
    })
}

/// The last agent's run in numbers: termination, turns, cost, permission denials, the tail.
fn transcript_details(
    context: &StepContext<'_>,
    last_agent: Option<&StepManifest>,
) -> Option<Transcript> {
    let entry = last_agent.and_then(|manifest| manifest.artifact(ArtifactRole::RunnerMetadata))?;
    let metadata = read_json::<AgentRunFacts>(
        &context.recorder.run_dir().root().join(&entry.path),
        "runner metadata",
    )
    .ok()?;
    Some(Transcript {
        termination: metadata.outcome,
        cause: metadata.cause,
        exit_code: metadata.exit_code,
        turns: metadata.turns,
        cost_usd: metadata.cost_usd,
        permission_denials: metadata.permission_denials,
        tail: metadata.output_tail,
    })
}

/// What the envelope repeats of `runner_metadata.json`, each field read on its own so that a
/// record of an older release (a field missing) still gives the others.
#[derive(serde::Deserialize)]
struct AgentRunFacts {
    #[serde(default)]
    outcome: Option<String>,
    #[serde(default)]
    cause: Option<String>,
    #[serde(default)]
    exit_code: Option<i32>,
    #[serde(default)]
    turns: Option<u64>,
    #[serde(default)]
    cost_usd: Option<f64>,
    #[serde(default)]
    permission_denials: Option<Vec<crate::runner::artifacts::PermissionDenial>>,
    #[serde(default)]
    output_tail: Option<Vec<crate::runner::TailLine>>,
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

/// The validation summary: the worst mechanical termination since the last EVALUATE (of the
/// steps that run processes or reset the worktree: a gate's decision is not one), the exit
/// codes and timeouts of its RUN_VALIDATION steps, and, from their validation reports, the
/// declared artifacts that were missing and why a validator did not complete (`causes`).
/// A validator that ran in several of those steps counts as its latest run.
fn validation(context: &StepContext<'_>, manifests: &[StepManifest]) -> Validation {
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
    let mut summary = Validation {
        mechanical_outcome: outcome.to_owned(),
        ..Validation::default()
    };
    // Per validator, its latest record's missing artifacts.
    let mut missing = BTreeMap::<String, Vec<String>>::new();
    for manifest in manifests
        .iter()
        .filter(|manifest| manifest.opcode == "RUN_VALIDATION")
    {
        let evidence = manifest.evidence::<ValidationEvidence>();
        summary.exit_codes.extend(evidence.exit_codes);
        summary.timeouts.extend(evidence.timeouts);
        let Some(report) = validation_report(context, manifest) else {
            continue;
        };
        for (id, record) in report.validators {
            missing.insert(id.clone(), record.missing_artifacts);
            match record.cause {
                Some(cause)
                    if record.outcome.as_deref() != Some("completed") && !cause.is_empty() =>
                {
                    summary.causes.insert(id, cut_text(&cause, 1000));
                }
                _ => {
                    summary.causes.remove(&id);
                }
            }
        }
    }
    summary.missing_artifacts = missing.into_values().flatten().collect();
    summary
}

/// What the envelope reads of a `validation_report.json`: per validator, its outcome, cause
/// and missing artifacts. (A view of that record's fields until it has a type of its own.)
#[derive(serde::Deserialize)]
struct ReportValidators {
    #[serde(default)]
    validators: BTreeMap<String, ValidatorRecord>,
}

/// One validator of a validation report, as the envelope reads it.
#[derive(serde::Deserialize)]
struct ValidatorRecord {
    #[serde(default)]
    outcome: Option<String>,
    #[serde(default)]
    cause: Option<String>,
    #[serde(default)]
    missing_artifacts: Vec<String>,
}

/// The most of a validation report (`validation_report.json`) read for the envelope.
const VALIDATION_REPORT_READ_LIMIT: u64 = 8 * 1024 * 1024;

/// A RUN_VALIDATION visit's `validation_report.json`, parsed (`None` when it cannot be read).
fn validation_report(
    context: &StepContext<'_>,
    manifest: &StepManifest,
) -> Option<ReportValidators> {
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
