//! GATE: a blocking gate writes its request and the run waits for a human (exit 3); a
//! non-blocking gate records the request for the review journal and continues with
//! `gate_queued`.

use crate::artifacts::EventPayload;
use crate::artifacts::event_payload::{GateRequested, GateResolved};
use crate::artifacts::{ArtifactRole, GATE_REQUEST_FILE, read_json, write_json_new};
use crate::kernel::StepReport;
use crate::outcome::Outcome;
use crate::workflow::model::{Gate, GateKind};

use super::{OpcodeError, StepContext, StepResult};

pub(super) fn execute(
    context: &mut StepContext<'_>,
    gate: &Gate,
) -> Result<StepResult, OpcodeError> {
    let visit_dir = context.visit_dir()?;
    // A reason that is `()` (an expression with no value) counts as no reason, as it renders
    // as nothing inside a longer text.
    let written = match &gate.reason {
        Some(node) => {
            let script_context = context.script_context()?;
            match context.run.script.evaluate_json(node, &script_context)? {
                serde_json::Value::Null => None,
                serde_json::Value::String(text) => Some(text),
                other => Some(other.to_string()),
            }
        }
        None => None,
    };
    let reason = written.unwrap_or_else(|| {
        format!(
            "review step `{}` of run {}",
            context.step_id(),
            context.state.run_id
        )
    });
    let kind = gate_name(gate.gate.value);
    let requested_at = jiff::Timestamp::now();
    // A timeout so long that the deadline lies past the last representable time (year 9999)
    // is clamped to it: the gate still has a deadline, never `null` (which would never time
    // out although the workflow asked for a `gate_timed_out` route).
    let deadline = gate.timeout.as_ref().map(|timeout| {
        jiff::SignedDuration::try_from(timeout.value)
            .ok()
            .and_then(|span| requested_at.checked_add(span).ok())
            .unwrap_or(jiff::Timestamp::MAX)
    });
    let request = serde_json::json!({
        "schema_version": crate::artifacts::SCHEMA_VERSION,
        "run_id": context.state.run_id,
        "step_id": context.step_id(),
        "visit": context.visit,
        "gate": kind,
        "blocking": gate.gate.value.is_blocking(),
        "reason": reason,
        "required_decision": if gate.gate.value.is_blocking() { "approve or reject" } else { "review" },
        "approvers": gate.approvers.iter().map(|name| name.value.as_str()).collect::<Vec<_>>(),
        "requested_at": requested_at.to_string(),
        "deadline": deadline.map(|deadline| deadline.to_string()),
        "context": review_context(context, &visit_dir)?,
    });
    write_json_new(&visit_dir.join(GATE_REQUEST_FILE), &request)?;
    let step = (context.step_id().to_owned(), context.visit);
    let fields = EventPayload::GateRequested(GateRequested {
        gate: kind.to_owned(),
        reason: reason.clone(),
        request: GATE_REQUEST_FILE.to_owned(),
    });
    context.recorder.event(Some((&step.0, step.1)), fields)?;
    let artifacts = vec![
        context.artifact(
            ArtifactRole::GateRequest,
            GATE_REQUEST_FILE,
            "application/json",
            true,
        ),
        context.artifact(ArtifactRole::WorkspaceDiff, RUN_DIFF, "text/x-diff", true),
    ];
    let run_diffstat = request["context"]["diffstat"].clone();
    if gate.gate.value.is_blocking() {
        let manifest = context.manifest(
            "waiting",
            serde_json::json!({ "gate": kind, "waiting": true, "run_diffstat": run_diffstat }),
            artifacts,
        );
        // The outcome is decided later by a human; the report is a placeholder the kernel
        // does not route on (the run waits instead).
        return Ok(StepResult {
            report: StepReport::outcome(Outcome::GateApproved),
            manifest,
            cost_usd: 0.0,
            waiting: true,
            fingerprint: None,
        });
    }
    let fields = EventPayload::GateResolved(GateResolved {
        decision: "queued".to_owned(),
        reviewer: None,
    });
    context.recorder.event(Some((&step.0, step.1)), fields)?;
    let manifest = context.manifest(
        Outcome::GateQueued.as_str(),
        serde_json::json!({ "gate": kind, "queued_for_review": true, "run_diffstat": run_diffstat }),
        artifacts,
    );
    Ok(StepResult {
        report: StepReport::outcome(Outcome::GateQueued),
        manifest,
        cost_usd: 0.0,
        waiting: false,
        fingerprint: None,
    })
}

/// The gate type's document name.
pub fn gate_name(kind: GateKind) -> &'static str {
    match kind {
        GateKind::RequiresApproval => "requires_approval",
        GateKind::BlockingApproval => "blocking_approval",
        GateKind::QueueForReview => "queue_for_review",
        GateKind::RequiresDailyReview => "requires_daily_review",
    }
}

/// The whole change of the run a gate shows, in the gate's visit folder.
const RUN_DIFF: &str = "run.diff";

/// What a reviewer needs: the whole change being approved (the worktree against the run's
/// start, as a patch and a diffstat), the last planner decision, the last change a step made,
/// the last agent's transcript, and the other runs driven while this run's steps ran
/// ([`runs_beside`]).
fn review_context(
    context: &StepContext<'_>,
    visit_dir: &std::path::Path,
) -> Result<serde_json::Value, OpcodeError> {
    let run_dir = context.recorder.run_dir();
    let pre_run = context.workspace.pre_run()?;
    let whole = context
        .workspace
        .capture_since(&pre_run, &visit_dir.join(RUN_DIFF))?;
    let diff = run_dir
        .visit_dir(context.step_id(), context.visit)
        .join(RUN_DIFF)
        .strip_prefix(run_dir.root())
        .map(|path| path.display().to_string())
        .unwrap_or_else(|_| RUN_DIFF.to_owned());
    let mut transcript = serde_json::Value::Null;
    let mut last_step = serde_json::Value::Null;
    let mut planner = serde_json::Value::Null;
    // The latest evidence wins: manifests in the order their visits ended.
    let manifests = context.latest_manifests();
    for manifest in manifests {
        if let Some(entry) = manifest.artifact(ArtifactRole::PlannerDecision) {
            planner = read_json::<serde_json::Value>(&run_dir.root().join(&entry.path), "planner decision")
                .map(|decision| serde_json::json!({ "path": entry.path, "status": decision["status"], "risk_flags": decision["risk_flags"], "blockers": decision["blockers"] }))
                .unwrap_or(serde_json::Value::Null);
        }
        let changes_files = matches!(manifest.opcode.as_str(), "RUN_AGENT" | "RUN_VALIDATION");
        if changes_files && let Some(entry) = manifest.artifact(ArtifactRole::WorkspaceDiff) {
            last_step = serde_json::json!({
                "step_id": manifest.step_id,
                "visit": manifest.visit,
                "diff": entry.path,
                "diffstat": manifest.evidence_summary.get("diffstat").cloned().unwrap_or_default(),
            });
        }
        if let Some(entry) = manifest
            .artifact(ArtifactRole::RunnerTranscriptMarkdown)
            .or_else(|| manifest.artifact(ArtifactRole::RunnerTranscript))
        {
            transcript = entry.path.clone().into();
        }
    }
    Ok(serde_json::json!({
        "runs_beside": runs_beside(context),
        "diffstat": whole.status.diffstat,
        "diff": diff,
        "last_step": last_step,
        "planner": planner,
        "transcript": transcript,
        "worktree": context.workspace.path().display().to_string(),
    }))
}

/// The other runs driven while this run's agent and validation steps ran, each with the visits
/// it was driven beside (`work#1`), from the guard reports in the visits' policy summaries:
/// their agents could have written into this run's worktree, and such a write is in this
/// run's diff as its own change (the guard watches the operator's checkout, not other runs'
/// worktrees). Empty when no other run was.
fn runs_beside(context: &StepContext<'_>) -> serde_json::Value {
    let run_dir = context.recorder.run_dir();
    let mut runs: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for step in &context.run.workflow.steps {
        let step_id = step.id.value.as_str();
        for visit in 1.. {
            let visit_dir = run_dir.visit_dir(step_id, visit);
            if !visit_dir.is_dir() {
                break;
            }
            let Ok(summary) = read_json::<serde_json::Value>(
                &visit_dir.join("policy_summary.json"),
                "policy summary",
            ) else {
                continue;
            };
            let driven = summary["guard_report"]["other_runs_driven"].as_array();
            for run in driven.into_iter().flatten().filter_map(|run| run.as_str()) {
                runs.entry(run.to_owned())
                    .or_default()
                    .push(format!("{step_id}#{visit}"));
            }
        }
    }
    runs.into_iter()
        .map(|(run_id, visits)| serde_json::json!({ "run_id": run_id, "visits": visits }))
        .collect()
}
