//! EVALUATE: the planner envelope is assembled from the run's manifests (the evidence of the steps
//! since the previous EVALUATE, a window of the last three steps, the history of earlier
//! decisions), saved as `planner_input`, and handed to the step's planner backend (`rules` by
//! default; `command`, `claude`, `codex` or `http` profiles, model backends with the step's
//! prompt rendered); the answer passes the guard (`crate::planner`), the kernel adds its own
//! safety facts (a recorded policy violation stays `unsafe`, pending goldens stay
//! `needs_human`), and the decision is saved as `planner_decision` and routes. A decision that
//! names a step outside `allowed_next_steps` is saved and ends the run (exit 4).

use crate::artifacts::{
    ArtifactRole, EventLog, EventType, StepManifest, read_json, write_json_new,
};
use crate::kernel::StepReport;
use crate::kernel::recorder::payload;
use crate::outcome::Outcome;
use crate::workflow::model::{Evaluate, PromptSpec};

use super::{OpcodeError, StepContext, StepResult};
use crate::artifacts::write_json_private;
use crate::config::OperatorCheckout;
use crate::planner::Status;
use crate::planner::backend::{Backend, External, ExternalKind, Request, Verdict};
use crate::policy::{Policy, PolicySpec, PolicySummary, Violation, ViolationClass};
use crate::workspace::{
    DiffStat, Fingerprint, GUARD_STATE_FILE, GuardReport, RefGuard, Workspace, WorkspaceError,
};

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

pub(super) fn execute(
    context: &mut StepContext<'_>,
    evaluate: &Evaluate,
) -> Result<StepResult, OpcodeError> {
    let visit_dir = context.visit_dir()?;
    let completed = completed_manifests(context)?;
    let mut envelope = envelope(context, evaluate, &completed);
    add_inputs(context, evaluate, &mut envelope)?;
    summarize(context, &mut envelope)?;
    write_json_new(&visit_dir.join("planner_input.json"), &envelope)?;
    let mut artifacts = vec![
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
    let decided = decide(context, evaluate, &envelope, &visit_dir)?;
    if decided.prompt_saved {
        artifacts.push(context.artifact(
            ArtifactRole::PlannerPrompt,
            "planner_prompt.md",
            "text/markdown",
            false,
        ));
    }
    if decided.attempts_saved {
        artifacts.push(context.artifact(
            ArtifactRole::PlannerAttempts,
            "planner_attempts.json",
            "application/json",
            false,
        ));
    }
    if let Some(summary) = &decided.policy_summary {
        write_json_new(&visit_dir.join("policy_summary.json"), summary)?;
        artifacts.push(super::step_policy::policy_artifact(context));
    }
    // What the planner changed is recorded first, even when the operator's interrupt cut its
    // call short: `resume` then finds it among the visit's events. The saved guard state goes
    // only then: a process that dies before has `resume` check the visit by it.
    super::step_policy::record_violations(context, &decided.violations)?;
    if let Some(saved) = &decided.guard_state {
        super::remove_guard_state(saved)?;
    }
    if decided.interrupted {
        // The driver sees the cancellation and records the interruption; `resume` asks again.
        return Err(OpcodeError::Other(
            "the planner was interrupted by the operator".into(),
        ));
    }
    let decision = decided.decision;
    if let Some(reason) = decided.illegal {
        // The offending decision is evidence: saved, recorded, and the run ends (exit 4).
        write_json_new(&visit_dir.join("planner_decision.json"), &decision)?;
        let path = format!(
            "artifacts/{}/{}/planner_decision.json",
            context.step_id(),
            context.visit
        );
        return Err(OpcodeError::IllegalDecision {
            planner: decision["planner"].as_str().unwrap_or_default().to_owned(),
            reason,
            path,
        });
    }
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
    let fingerprint = context
        .state
        .fingerprint
        .as_ref()
        .map(|fingerprint| fingerprint.tree.clone());
    let manifest = context.manifest(
        status.as_str(),
        serde_json::json!({
            "status": status.as_str(),
            "planner_status": decided.answered.map(Status::name),
            "decision": decision,
            "worktree_fingerprint": fingerprint,
        }),
        artifacts,
    );
    // The planner's change stays a violation until a ROLLBACK removes it.
    let mut report = StepReport::outcome(status);
    report.policy_violation = super::step_policy::violation_text(&decided.violations);
    Ok(StepResult {
        report,
        manifest,
        cost_usd: 0.0,
        waiting: false,
        // A worktree the planner changed is checkpointed as it is: the change is recorded as
        // the planner's violation, not left for `resume` to find as drift.
        fingerprint: decided.changed_worktree,
    })
}

/// The EVALUATE step's own `inputs`, computed (expressions keep their types), sent to the
/// planner as `inputs` beside the envelope's fields.
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
    super::step_policy::record_script_output(context)
}

/// Manifests of the visits completed so far in this run, in the order they ended.
fn completed_manifests(context: &StepContext<'_>) -> Result<Vec<StepManifest>, OpcodeError> {
    let run_dir = context.recorder.run_dir().clone();
    let events = EventLog::read_all(&run_dir.events())?;
    Ok(events
        .iter()
        .filter(|event| event.event_type == EventType::StepCompleted)
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

fn envelope(
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

/// The most of a harness report the envelope carries, as JSON; a larger one is cut (see
/// [`bounded_report`]) with a note naming the report's path.
const HARNESS_REPORT_LIMIT: usize = 32 * 1024;

/// The largest harness report read at all: what RUN_VALIDATION keeps of a validator's file.
const HARNESS_REPORT_READ_LIMIT: u64 = 64 * 1024 * 1024;

/// The last harness report among the manifests, parsed and bounded to
/// [`HARNESS_REPORT_LIMIT`] bytes of JSON.
fn harness_report(context: &StepContext<'_>, manifests: &[StepManifest]) -> serde_json::Value {
    let Some(entry) = manifests
        .iter()
        .rev()
        .find_map(|manifest| manifest.artifact(ArtifactRole::HarnessReport))
    else {
        return serde_json::Value::Null;
    };
    let path = context.recorder.run_dir().root().join(&entry.path);
    let read = crate::artifacts::safe_files::read_regular(&path, HARNESS_REPORT_READ_LIMIT);
    match read {
        Ok((bytes, false)) => match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(report) => bounded_report(report, bytes.len(), &entry.path),
            Err(error) => serde_json::json!({
                "omitted": format!("the harness report {} cannot be read as JSON: {error}", entry.path),
            }),
        },
        Ok((_, true)) => serde_json::json!({
            "omitted": format!(
                "the harness report {} is larger than {HARNESS_REPORT_READ_LIMIT} bytes: not read",
                entry.path
            ),
        }),
        // Gone or replaced since its step listed it: nothing to send, as before it existed.
        Err(_) => serde_json::Value::Null,
    }
}

/// The size of `value` as JSON.
fn json_size(value: &serde_json::Value) -> usize {
    serde_json::to_vec(value).map_or(0, |text| text.len())
}

/// `value` made small: strings cut to `text` characters (saying how long they were), lists
/// and maps to their first `items` entries (saying how many there were), nothing deeper than
/// `depth` levels.
fn shrink(value: &serde_json::Value, text: usize, items: usize, depth: usize) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(string) if string.chars().count() > text => {
            let kept: String = string.chars().take(text).collect();
            Value::String(format!("{kept}… [cut: {} bytes in all]", string.len()))
        }
        Value::Array(_) | Value::Object(_) if depth == 0 => {
            Value::String(format!("[cut: {} bytes of JSON]", json_size(value)))
        }
        Value::Array(list) => {
            let mut kept: Vec<Value> = list
                .iter()
                .take(items)
                .map(|item| shrink(item, text, items, depth - 1))
                .collect();
            if list.len() > items {
                kept.push(Value::String(format!(
                    "[cut: {} more entries]",
                    list.len() - items
                )));
            }
            Value::Array(kept)
        }
        Value::Object(map) => {
            let mut kept: serde_json::Map<String, Value> = map
                .iter()
                .take(items)
                .map(|(key, item)| {
                    let key: String = key.chars().take(text).collect();
                    (key, shrink(item, text, items, depth - 1))
                })
                .collect();
            if map.len() > items {
                kept.insert(
                    "[cut]".to_owned(),
                    Value::String(format!("{} more keys", map.len() - items)),
                );
            }
            Value::Object(kept)
        }
        other => other.clone(),
    }
}

/// A harness report as the envelope carries it: whole when its JSON fits in
/// [`HARNESS_REPORT_LIMIT`] bytes; else its identity and `summary` counts, its
/// `proposed_goldens` (the first 50), then its cases — failing ones (any status but `passed`)
/// first — each shrunk, as many as fit, and a `truncated` note naming `path`, the report's
/// size and what was kept. At least one case is kept when the report has any, so the guard
/// reads the same verdict from the cut report (every case passed, or not) as from the whole.
fn bounded_report(report: serde_json::Value, bytes: usize, path: &str) -> serde_json::Value {
    use serde_json::Value;
    if json_size(&report) <= HARNESS_REPORT_LIMIT {
        return report;
    }
    let Value::Object(mut fields) = report else {
        return serde_json::json!({
            "omitted": format!("the harness report is {bytes} bytes and not an object; see {path}"),
        });
    };
    let mut kept = serde_json::Map::new();
    for key in ["suite_id", "version", "generated_at"] {
        if let Some(value) = fields.remove(key) {
            kept.insert(key.to_owned(), shrink(&value, 200, 8, 1));
        }
    }
    if let Some(summary) = fields.remove("summary") {
        kept.insert("summary".to_owned(), shrink(&summary, 200, 32, 2));
    }
    let goldens = fields.remove("proposed_goldens");
    let goldens_total = goldens.as_ref().and_then(Value::as_array).map(Vec::len);
    match goldens {
        // The first 50, each shortened; the note says how many there were.
        Some(Value::Array(goldens)) => {
            let first = goldens
                .iter()
                .take(50)
                .map(|golden| shrink(golden, 300, 8, 1))
                .collect();
            kept.insert("proposed_goldens".to_owned(), Value::Array(first));
        }
        Some(other) => {
            kept.insert("proposed_goldens".to_owned(), shrink(&other, 300, 8, 1));
        }
        None => {}
    }
    let cases = fields.remove("cases");
    let ux_flags = fields.remove("ux_flags");
    let others: Vec<String> = fields.keys().cloned().collect();
    let mut note = serde_json::json!({
        "note": "",
        "report": path,
        "bytes": bytes,
    });
    let mut summary_of_cases = String::from("no cases");
    match cases {
        Some(Value::Array(cases)) => {
            let failing = |case: &Value| case["status"] != "passed";
            let ordered: Vec<&Value> = cases
                .iter()
                .filter(|case| failing(case))
                .chain(cases.iter().filter(|case| !failing(case)))
                .collect();
            let failing_total = cases.iter().filter(|case| failing(case)).count();
            // What the rest of the report takes, with room for the note.
            let mut used = json_size(&Value::Object(kept.clone())) + 1024;
            let mut chosen = Vec::new();
            for case in ordered {
                let case = shrink(case, 500, 16, 3);
                let size = json_size(&case) + 1;
                if !chosen.is_empty() && used + size > HARNESS_REPORT_LIMIT {
                    break;
                }
                used += size;
                chosen.push(case);
            }
            summary_of_cases = format!(
                "{} of {} cases ({failing_total} not passed, listed first; long fields shortened)",
                chosen.len(),
                cases.len()
            );
            note["cases_total"] = cases.len().into();
            note["cases_kept"] = chosen.len().into();
            note["cases_not_passed"] = failing_total.into();
            kept.insert("cases".to_owned(), Value::Array(chosen));
        }
        Some(other) => {
            kept.insert("cases".to_owned(), shrink(&other, 200, 8, 2));
        }
        None => {}
    }
    let mut dropped = others;
    if let Some(flags) = ux_flags {
        let flags = shrink(&flags, 300, 16, 2);
        if json_size(&Value::Object(kept.clone())) + json_size(&flags) + 1024
            <= HARNESS_REPORT_LIMIT
        {
            kept.insert("ux_flags".to_owned(), flags);
        } else {
            dropped.insert(0, "ux_flags".to_owned());
        }
    }
    let mut text = format!(
        "the harness report is {bytes} bytes (more than {HARNESS_REPORT_LIMIT}): kept its summary, {summary_of_cases}"
    );
    if let Some(total) = goldens_total.filter(|total| *total > 50) {
        text.push_str(&format!(", the first 50 of {total} proposed goldens"));
    }
    if !dropped.is_empty() {
        text.push_str(&format!("; left out: {}", dropped.join(", ")));
    }
    text.push_str(&format!("; the whole report is {path}"));
    note["note"] = text.into();
    kept.insert("truncated".to_owned(), note);
    Value::Object(kept)
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

/// What the planner's turn left.
struct Decided {
    /// The decision as saved.
    decision: serde_json::Value,
    /// The status the backend answered before the guard and the kernel's safety facts
    /// (`None` when the kernel decided).
    answered: Option<Status>,
    /// Set when the backend named an illegal `next_step`.
    illegal: Option<crate::planner::backend::IllegalNextStep>,
    /// The operator's interrupt cut the planner's call short: there is no decision, only
    /// what the planner changed meanwhile.
    interrupted: bool,
    /// What a planner process changed while it was asked (the guard's findings, then the
    /// worktree's change), as violations.
    violations: Vec<Violation>,
    /// The guard's report and those violations, when a planner process ran.
    policy_summary: Option<PolicySummary>,
    /// The worktree's fingerprint after a planner that changed it.
    changed_worktree: Option<Fingerprint>,
    /// The guard state saved while the planner ran, removed once its findings are recorded.
    guard_state: Option<std::path::PathBuf>,
    /// `planner_prompt.md` was written.
    prompt_saved: bool,
    /// `planner_attempts.json` was written.
    attempts_saved: bool,
}

/// The planner profile this step asks: `--planner`, the step's `planner:`,
/// `defaults.planner`, else the configured `default` profile, else `rules`.
fn planner_name(context: &StepContext<'_>, evaluate: &Evaluate) -> String {
    context
        .run
        .config
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
        .unwrap_or_else(|| {
            crate::planner::backend::default_planner_name(&context.run.config).to_owned()
        })
}

/// The step's prompt rendered with the envelope, for model backends: a `planner.*` reference
/// gets the envelope fields it declares (and the step's `inputs`); literal text is sent as is.
fn planner_prompt(
    context: &StepContext<'_>,
    evaluate: &Evaluate,
    envelope: &serde_json::Value,
) -> Result<String, OpcodeError> {
    match &evaluate.prompt.value {
        PromptSpec::Literal(text) => Ok(text.clone()),
        PromptSpec::Reference(reference) => {
            let prompt = context.run.catalog.resolve(reference.as_str())?;
            let mut inputs = serde_json::Map::new();
            for declared in &prompt.inputs {
                let value = envelope
                    .get(&declared.name)
                    .or_else(|| envelope["inputs"].get(&declared.name))
                    .or_else(|| envelope["evidence"].get(&declared.name))
                    .filter(|value| !value.is_null());
                if let Some(value) = value {
                    inputs.insert(declared.name.clone(), value.clone());
                }
            }
            Ok(crate::prompt::render(prompt, &inputs)?)
        }
    }
}

/// Asks the step's planner, then applies the kernel's own safety facts and fills `next_step`
/// from the routes.
fn decide(
    context: &StepContext<'_>,
    evaluate: &Evaluate,
    envelope: &serde_json::Value,
    visit_dir: &std::path::Path,
) -> Result<Decided, OpcodeError> {
    let config = &context.run.config;
    let name = planner_name(context, evaluate);
    let mut prompt_saved = false;
    let mut attempts_saved = false;
    let mut watch = None;
    let (verdict, attempts) = match Backend::from_config(&name, config) {
        Ok(backend) => {
            let prompt = if backend.reads_prompt() {
                let text = planner_prompt(context, evaluate, envelope)?;
                let path = visit_dir.join("planner_prompt.md");
                crate::artifacts::safe_files::write_new(&path, text.as_bytes()).map_err(
                    |error| OpcodeError::Other(format!("cannot save the planner prompt: {error}")),
                )?;
                prompt_saved = true;
                text
            } else {
                String::new()
            };
            let variables = context.tnh_variables();
            // EVALUATE changes nothing: a planner process runs in the worktree, so what it
            // changed there is found by comparing the worktree before and after, and the
            // repository around it is guarded as around an agent.
            if matches!(backend, Backend::External(_)) {
                watch = Some(Watch::start(context, &backend, visit_dir)?);
            }
            let request = Request {
                envelope,
                prompt: &prompt,
                cwd: Some(context.workspace.path()),
                run_variables: Some(&variables),
                cancellation: &context.run.cancellation,
            };
            crate::planner::backend::decide(&backend, &request)
        }
        Err(error) => {
            let (decision, decided_by) = crate::planner::backend::failed(&error.into(), envelope);
            (
                Verdict::Decided {
                    decision,
                    decided_by,
                    answered: None,
                },
                Vec::new(),
            )
        }
    };
    // Checked before anything else can fail: what the planner moved is put back.
    let found = match watch {
        Some(watch) => watch.finish(context, &name)?,
        None => Found::default(),
    };
    if !attempts.is_empty() {
        let record = crate::planner::backend::PlannerAttempts {
            schema_version: crate::artifacts::SCHEMA_VERSION,
            attempts,
        };
        write_json_new(&visit_dir.join("planner_attempts.json"), &record)?;
        attempts_saved = true;
    }
    let (mut decision, decided_by, answered, illegal) = match verdict {
        // What the planner changed before it was stopped is recorded by `execute`, then the
        // interruption ends the visit.
        Verdict::Interrupted => {
            return Ok(Decided {
                decision: serde_json::Value::Null,
                answered: None,
                illegal: None,
                interrupted: true,
                violations: found.violations,
                policy_summary: found.policy_summary,
                changed_worktree: found.changed_worktree,
                guard_state: found.guard_state,
                prompt_saved,
                attempts_saved,
            });
        }
        Verdict::Decided {
            decision,
            decided_by,
            answered,
        } => (decision, decided_by, answered, None),
        Verdict::Illegal { decision, reason } => {
            let decided_by = name.clone();
            let answered = Some(decision.status);
            (decision, decided_by, answered, Some(reason))
        }
    };
    if let Some(text) = super::step_policy::violation_text(&found.violations) {
        decision.raise(Status::Unsafe, "policy_violation", text);
    }
    if illegal.is_none() {
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
        // The saved decision names the step the run actually takes: the route of the final
        // status (a guard raise or the kernel's safety facts may have changed it); what the
        // planner proposed stays in `planner_attempts.json`.
        decision.next_step = routed;
    }
    decision.schema_version = Some(crate::artifacts::SCHEMA_VERSION);
    decision.planner = Some(name);
    decision.decided_by = Some(decided_by);
    Ok(Decided {
        decision: serde_json::to_value(&decision).unwrap_or_default(),
        answered,
        illegal,
        interrupted: false,
        violations: found.violations,
        policy_summary: found.policy_summary,
        changed_worktree: found.changed_worktree,
        guard_state: found.guard_state,
        prompt_saved,
        attempts_saved,
    })
}

/// What is watched around an external planner: the worktree's fingerprint, and for a planner
/// process (`command`, `claude`, `codex`: not `http`, which starts none) the guard, saved as
/// `guard_state.json` in the visit's folder while the planner runs so that `resume` checks the
/// visit if this process dies.
struct Watch {
    before: Fingerprint,
    guard: Option<(RefGuard, std::path::PathBuf)>,
}

/// What the planner changed.
#[derive(Default)]
struct Found {
    violations: Vec<Violation>,
    policy_summary: Option<PolicySummary>,
    changed_worktree: Option<Fingerprint>,
    guard_state: Option<std::path::PathBuf>,
}

impl Watch {
    fn start(
        context: &StepContext<'_>,
        backend: &Backend,
        visit_dir: &std::path::Path,
    ) -> Result<Watch, OpcodeError> {
        // The fingerprint first: computing it rewrites the scratch index the guard watches.
        let before = context.workspace.fingerprint()?;
        let process = !matches!(
            backend,
            Backend::External(External {
                kind: ExternalKind::Http { .. },
                ..
            })
        );
        let guard = if process {
            let guard = context
                .workspace
                .guard(&context.run.config.protected_branches)?;
            let saved = visit_dir.join(GUARD_STATE_FILE);
            write_json_private(&saved, &guard.state())?;
            Some((guard, saved))
        } else {
            None
        };
        Ok(Watch { before, guard })
    }

    /// The guard's check (refs and git files put back), then the worktree's change since the
    /// start — after the check, so a file hidden through `.git/info/exclude` shows.
    fn finish(self, context: &StepContext<'_>, name: &str) -> Result<Found, OpcodeError> {
        let who = format!("planner `{name}`");
        let operator_checkout = context.run.config.operator_checkout;
        let mut found = Found::default();
        let mut report = None;
        if let Some((guard, saved)) = self.guard {
            let checked = guard.check()?.report;
            found.violations = planner_guard_violations(&checked, operator_checkout, &who);
            report = Some(checked);
            found.guard_state = Some(saved);
        }
        let after = context.workspace.fingerprint()?;
        if after != self.before {
            found.violations.extend(planner_worktree_change(
                context.workspace,
                &who,
                &self.before,
                &after,
            )?);
            found.changed_worktree = Some(after);
        }
        found.policy_summary = report.and_then(|report| {
            planner_policy(operator_checkout).map(|policy| {
                PolicySummary::new(&policy, 0, false, found.violations.clone())
                    .with_guard_report(report)
            })
        });
        Ok(found)
    }
}

/// The policy a planner process is judged by: EVALUATE changes nothing, so besides the rules
/// every step has (protected refs and tags, the operator's checkout as `operator_checkout`
/// says), a commit, a push and a changed git configuration file are forbidden. (It has no
/// globs of its own: it always compiles.)
fn planner_policy(operator_checkout: OperatorCheckout) -> Option<Policy> {
    let spec = PolicySpec {
        forbidden_operations: ["commit", "push", "modify_git_config"]
            .map(str::to_owned)
            .to_vec(),
        ..PolicySpec::default()
    };
    Policy::compile(&spec)
        .ok()
        .map(|policy| policy.with_operator_checkout(operator_checkout))
}

/// What the guard found around a planner process (`who`, e.g. ``planner `judge` ``), as
/// violations: those of [`planner_policy`], and a worktree whose HEAD left the work branch,
/// that was deleted or whose access was taken away (`planner_changed_worktree`).
pub(crate) fn planner_guard_violations(
    report: &GuardReport,
    operator_checkout: OperatorCheckout,
    who: &str,
) -> Vec<Violation> {
    let mut violations = planner_policy(operator_checkout)
        .map(|policy| policy.check_guard_report(report))
        .unwrap_or_default();
    let mut what = Vec::new();
    if report.worktree_head_restored {
        what.push("its HEAD left the work branch (re-attached)");
    }
    if report.worktree_recreated {
        what.push("it was deleted (checked out again)");
    }
    if report.worktree_access_restored {
        what.push("its access was taken away (given back)");
    }
    if !what.is_empty() {
        violations.push(Violation {
            class: ViolationClass::PlannerChangedWorktree,
            path: None,
            rule: "evaluate_changes_nothing".to_owned(),
            detail: format!(
                "{who} changed the worktree during EVALUATE: {}",
                what.join(", ")
            ),
        });
    }
    violations
}

/// The change `who` (e.g. ``planner `judge` ``) made to the worktree between the fingerprints
/// `before` and `after`, as a violation naming the changed paths (or the moved HEAD); `None`
/// when the worktree is as it was.
pub(crate) fn planner_worktree_change(
    workspace: &Workspace,
    who: &str,
    before: &Fingerprint,
    after: &Fingerprint,
) -> Result<Option<Violation>, WorkspaceError> {
    if after == before {
        return Ok(None);
    }
    let paths: Vec<String> = workspace
        .changes_between(&before.tree, &after.tree)?
        .into_iter()
        .map(|file| file.path)
        .collect();
    let mut what: Vec<String> = paths
        .iter()
        .take(5)
        .map(|path| format!("`{path}`"))
        .collect();
    if paths.len() > 5 {
        what.push(format!("and {} more", paths.len() - 5));
    }
    if after.head != before.head {
        what.push("HEAD moved".to_owned());
    }
    Ok(Some(Violation {
        class: ViolationClass::PlannerChangedWorktree,
        path: paths.first().cloned(),
        rule: "evaluate_changes_nothing".to_owned(),
        detail: format!(
            "{who} changed the worktree during EVALUATE: {}",
            what.join(", ")
        ),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_guard_finds_around_a_planner_is_a_violation_whatever_the_policy() {
        let report = GuardReport {
            commits: 1,
            git_config_changed: vec!["/repo/.git/hooks/pre-commit".to_owned()],
            remote_refs_changed: vec!["refs/remotes/origin/main".to_owned()],
            worktree_head_restored: true,
            operator_checkout_changed: vec!["README.md".to_owned()],
            ..GuardReport::default()
        };
        let rules = |found: &[Violation]| -> Vec<String> {
            found
                .iter()
                .map(|violation| violation.rule.clone())
                .collect()
        };
        let found = planner_guard_violations(&report, OperatorCheckout::Forbid, "planner `p`");
        assert_eq!(
            rules(&found),
            [
                "commit",
                "push",
                "operator_checkout",
                "modify_git_config",
                "evaluate_changes_nothing"
            ],
            "{found:?}"
        );
        assert!(
            found[4]
                .detail
                .starts_with("planner `p` changed the worktree")
        );
        let reported = planner_guard_violations(&report, OperatorCheckout::Report, "planner `p`");
        assert!(!rules(&reported).contains(&"operator_checkout".to_owned()));
        assert!(
            planner_guard_violations(&GuardReport::default(), OperatorCheckout::Forbid, "p")
                .is_empty()
        );
    }

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

    /// A report over the limit is cut to its summary and as many cases as
    /// fit, failing ones first, with a note naming the whole report; the guard reads the same
    /// verdict from the cut report as from the whole one.
    #[test]
    fn a_harness_report_is_bounded_keeping_its_verdict() {
        use crate::planner::guard::Facts;
        let small = serde_json::json!({"suite_id": "s", "summary": {"passed": 1}, "cases": [{"id": "a", "status": "passed"}]});
        assert_eq!(bounded_report(small.clone(), 10, "r.json"), small);
        let report = |statuses: &[&str], detail: usize| {
            let cases: Vec<serde_json::Value> = statuses
                .iter()
                .enumerate()
                .map(|(n, status)| serde_json::json!({"id": format!("c{n}"), "status": status, "detail": "d".repeat(detail)}))
                .collect();
            serde_json::json!({
                "suite_id": "s",
                "summary": {"passed": 1, "failed": 1},
                "cases": cases,
                "proposed_goldens": (0..80).map(|n| format!("g{n}.png")).collect::<Vec<_>>(),
                "ux_flags": [{"id": "contrast", "detail": "x".repeat(100_000)}],
                "extra": "kept out",
            })
        };
        let verdict = |report: &serde_json::Value| {
            let facts =
                Facts::from_envelope(&serde_json::json!({"evidence": {"harness_report": report}}));
            (facts.report_passed, facts.proposed_goldens)
        };
        for (statuses, detail) in [
            (vec!["passed"; 2000], 100),
            (vec!["passed"], 1_000_000),
            (
                [vec!["passed"; 1500], vec!["failed"], vec!["passed"; 1500]].concat(),
                100,
            ),
            (vec!["failed"], 1_000_000),
            (vec![], 0),
        ] {
            let whole = report(&statuses, detail);
            let cut = bounded_report(whole.clone(), 123_456, "artifacts/check/1/r.json");
            let size = json_size(&cut);
            assert!(
                size <= HARNESS_REPORT_LIMIT,
                "{} cases: {size} bytes",
                statuses.len()
            );
            assert_eq!(verdict(&cut), verdict(&whole), "{} cases", statuses.len());
            assert_eq!(cut["summary"], whole["summary"]);
            assert_eq!(cut["suite_id"], "s");
            let note = cut["truncated"]["note"].as_str().unwrap();
            assert!(
                note.ends_with("the whole report is artifacts/check/1/r.json"),
                "{note}"
            );
            assert!(note.contains("123456 bytes"), "{note}");
            assert!(
                note.contains("the first 50 of 80 proposed goldens"),
                "{note}"
            );
            assert!(note.contains("extra"), "{note}");
            assert!(cut.get("extra").is_none());
            let cases = cut["cases"].as_array().unwrap();
            assert_eq!(cases.is_empty(), statuses.is_empty());
            if statuses.contains(&"failed") {
                assert_eq!(cases[0]["status"], "failed", "the failing case first");
            }
        }
    }
}
