//! GATE: a blocking gate writes its request and the run waits for a human (exit 3); a
//! non-blocking gate records the request for the review journal and continues with
//! `gate_queued`.

use crate::artifacts::event_payload::{GateRequested, GateResolved};
use crate::artifacts::evidence::GateEvidence;
use crate::artifacts::{
    ArtifactRole, Blocker, EventPayload, GateContext, GateLastStep, GatePlanner, GateRequest,
    GateType, RequiredDecision, RunBeside, Status, VisitDir, read_json, write_json_new,
};
use crate::kernel::StepReport;
use crate::outcome::Outcome;
use crate::workflow::model::{Gate, GateKind};

use super::{OpcodeError, StepContext, StepResult};

pub(super) fn execute(
    context: &mut StepContext<'_>,
    gate: &Gate,
) -> Result<StepResult, OpcodeError> {
    let visit_dir = VisitDir::at(context.visit_dir()?);
    let request = gate_request(context, gate, &visit_dir)?;
    let (kind, blocking) = (request.gate, request.blocking);
    write_json_new(&visit_dir.gate_request(), &request)?;
    let step = (context.step_id().to_owned(), context.visit);
    let fields = EventPayload::GateRequested(GateRequested {
        gate: kind.as_str().to_owned(),
        reason: request.reason.clone(),
        request: VisitDir::GATE_REQUEST.to_owned(),
    });
    context.recorder.event(Some((&step.0, step.1)), fields)?;
    let artifacts = vec![
        context.artifact(
            ArtifactRole::GateRequest,
            VisitDir::GATE_REQUEST,
            "application/json",
            true,
        ),
        context.artifact(
            ArtifactRole::WorkspaceDiff,
            VisitDir::RUN_DIFF,
            "text/x-diff",
            true,
        ),
    ];
    let mut evidence = GateEvidence {
        gate: kind.as_str().to_owned(),
        run_diffstat: Some(request.context.diffstat),
        ..GateEvidence::default()
    };
    if blocking {
        evidence.waiting = true;
        let manifest = context.manifest("waiting", &evidence, artifacts);
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
    evidence.queued_for_review = true;
    let manifest = context.manifest(Outcome::GateQueued.as_str(), &evidence, artifacts);
    Ok(StepResult {
        report: StepReport::outcome(Outcome::GateQueued),
        manifest,
        cost_usd: 0.0,
        waiting: false,
        fingerprint: None,
    })
}

/// What the gate asks its reviewers: its kind, the reason (the workflow's, or a default
/// sentence), who may decide, until when, and the review context.
fn gate_request(
    context: &StepContext<'_>,
    gate: &Gate,
    visit_dir: &VisitDir,
) -> Result<GateRequest, OpcodeError> {
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
    let kind = gate_type(gate.gate.value);
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
    let blocking = gate.gate.value.is_blocking();
    Ok(GateRequest {
        schema_version: crate::artifacts::SCHEMA_VERSION,
        run_id: context.state.run_id.clone(),
        step_id: context.step_id().to_owned(),
        visit: context.visit,
        gate: kind,
        blocking,
        reason,
        required_decision: if blocking {
            RequiredDecision::ApproveOrReject
        } else {
            RequiredDecision::Review
        },
        approvers: gate
            .approvers
            .iter()
            .map(|name| name.value.clone())
            .collect(),
        requested_at: requested_at.to_string(),
        deadline: deadline.map(|deadline| deadline.to_string()),
        context: review_context(context, visit_dir)?,
    })
}

/// The gate type as the records name it.
pub fn gate_type(kind: GateKind) -> GateType {
    match kind {
        GateKind::RequiresApproval => GateType::RequiresApproval,
        GateKind::BlockingApproval => GateType::BlockingApproval,
        GateKind::QueueForReview => GateType::QueueForReview,
        GateKind::RequiresDailyReview => GateType::RequiresDailyReview,
    }
}

/// What a reviewer needs: the whole change being approved (the worktree against the run's
/// start, as a patch and a diffstat), the last planner decision, the last change a step made,
/// the last agent's transcript, and the other runs driven while this run's steps ran
/// ([`runs_beside`]).
fn review_context(
    context: &StepContext<'_>,
    visit_dir: &VisitDir,
) -> Result<GateContext, OpcodeError> {
    let run_dir = context.recorder.run_dir();
    let pre_run = context.workspace.pre_run()?;
    let whole = context
        .workspace
        .capture_since(&pre_run, &visit_dir.run_diff())?;
    let diff = run_dir
        .visit(context.step_id(), context.visit)
        .run_diff()
        .strip_prefix(run_dir.root())
        .map(|path| path.display().to_string())
        .unwrap_or_else(|_| VisitDir::RUN_DIFF.to_owned());
    let mut transcript = None;
    let mut last_step = None;
    let mut planner = None;
    // The latest evidence wins: manifests in the order their visits ended.
    let manifests = context.latest_manifests();
    for manifest in manifests {
        if let Some(entry) = manifest.artifact(ArtifactRole::PlannerDecision) {
            planner =
                read_json::<PlannerView>(&run_dir.root().join(&entry.path), "planner decision")
                    .ok()
                    .map(|decision| GatePlanner {
                        path: entry.path.clone(),
                        status: decision.status,
                        risk_flags: decision.risk_flags,
                        blockers: decision.blockers,
                    });
        }
        let changes_files = matches!(manifest.opcode.as_str(), "RUN_AGENT" | "RUN_VALIDATION");
        if changes_files && let Some(entry) = manifest.artifact(ArtifactRole::WorkspaceDiff) {
            let diffstat = manifest.step_diffstat();
            last_step = Some(GateLastStep {
                step_id: manifest.step_id.clone(),
                visit: manifest.visit,
                diff: entry.path.clone(),
                diffstat,
            });
        }
        if let Some(entry) = manifest
            .artifact(ArtifactRole::RunnerTranscriptMarkdown)
            .or_else(|| manifest.artifact(ArtifactRole::RunnerTranscript))
        {
            transcript = Some(entry.path.clone());
        }
    }
    Ok(GateContext {
        runs_beside: runs_beside(context),
        diffstat: whole.status.diffstat,
        diff,
        last_step,
        planner,
        transcript,
        worktree: context.workspace.path().display().to_string(),
    })
}

/// What a gate shows of a planner decision.
#[derive(serde::Deserialize)]
struct PlannerView {
    status: Status,
    #[serde(default)]
    risk_flags: Vec<String>,
    #[serde(default)]
    blockers: Vec<Blocker>,
}

/// What a gate reads of a visit's policy summary: the other runs its guard saw driven.
#[derive(Default, serde::Deserialize)]
struct PolicyView {
    #[serde(default)]
    guard_report: GuardView,
}

#[derive(Default, serde::Deserialize)]
struct GuardView {
    #[serde(default)]
    other_runs_driven: Vec<String>,
}

/// The other runs driven while this run's agent and validation steps ran, each with the visits
/// it was driven beside (`work#1`), from the guard reports in the visits' policy summaries:
/// their agents could have written into this run's worktree, and such a write is in this
/// run's diff as its own change (the guard watches the operator's checkout, not other runs'
/// worktrees). Empty when no other run was.
fn runs_beside(context: &StepContext<'_>) -> Vec<RunBeside> {
    let run_dir = context.recorder.run_dir();
    let mut runs: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for step in &context.run.workflow.steps {
        let step_id = step.id.value.as_str();
        for visit in 1.. {
            let visit_dir = run_dir.visit(step_id, visit);
            if !visit_dir.root().is_dir() {
                break;
            }
            let Ok(summary) =
                read_json::<PolicyView>(&visit_dir.policy_summary(), "policy summary")
            else {
                continue;
            };
            for run in summary.guard_report.other_runs_driven {
                runs.entry(run)
                    .or_default()
                    .push(format!("{step_id}#{visit}"));
            }
        }
    }
    runs.into_iter()
        .map(|(run_id, visits)| RunBeside { run_id, visits })
        .collect()
}
