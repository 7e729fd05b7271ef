//! EVALUATE: the OA06 envelope is assembled from the run's manifests (the evidence of the steps
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

/// The last step summaries the envelope carries (OA06 §2, K = 3).
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
    // The planner's change stays a violation until a ROLLBACK removes it (DESIGN §4 rule 1).
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
            "validation": validation(manifests),
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
/// steps that run processes or reset the worktree: a gate's decision is not one) and the exit
/// codes and timeouts of its RUN_VALIDATION steps.
fn validation(manifests: &[StepManifest]) -> serde_json::Value {
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

/// What the planner's turn left.
struct Decided {
    /// The decision as saved.
    decision: serde_json::Value,
    /// The status the backend answered before the guard and the kernel's safety facts
    /// (`None` when the kernel decided).
    answered: Option<Status>,
    /// Set when the backend named an illegal `next_step`.
    illegal: Option<String>,
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
        Err(message) => {
            let (decision, decided_by) = crate::planner::backend::failed(message, envelope);
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
}
