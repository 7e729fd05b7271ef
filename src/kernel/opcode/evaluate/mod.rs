//! EVALUATE: the planner envelope is assembled from the run's manifests (the evidence of the steps
//! since the previous EVALUATE, a window of the last three steps, the history of earlier
//! decisions), saved as `planner_input`, and handed to the step's planner backend (`rules` by
//! default; `command`, `claude`, `codex` or `http` profiles, model backends with the step's
//! prompt rendered); the answer passes the guard (`crate::planner`), the kernel adds its own
//! safety facts (a recorded policy violation stays `unsafe`, pending goldens stay
//! `needs_human`), and the decision is saved as `planner_decision` and routes. A decision that
//! names a step outside `allowed_next_steps` is saved and ends the run (exit 4).
//!
//! The envelope (what is given to the planner) is assembled in `envelope` (the harness report
//! bounded in `harness_report`); the decision (what comes back and how the kernel applies it)
//! in `decision`; what a planner process changed meanwhile is found in `watch`.

mod decision;
mod envelope;
mod harness_report;
mod watch;

pub(crate) use watch::{planner_guard_violations, planner_worktree_change};

use super::{OpcodeError, StepContext, StepResult};
use crate::artifacts::{ArtifactEntry, ArtifactRole, VisitDir, write_json_new};
use crate::artifacts::{EventPayload, event_payload::PlannerDecision};
use crate::kernel::StepReport;
use crate::outcome::Outcome;
use crate::planner::EvaluationSummary;
use crate::workflow::model::Evaluate;
use decision::Decided;

pub(super) fn execute(
    context: &mut StepContext<'_>,
    evaluate: &Evaluate,
) -> Result<StepResult, OpcodeError> {
    let visit_dir = context.visit_dir()?;
    let completed = envelope::completed_manifests(context)?;
    let mut input = envelope::envelope(context, evaluate, &completed);
    envelope::add_inputs(context, evaluate, &mut input)?;
    envelope::summarize(context, &mut input)?;
    // As JSON once: saved, and sent to a planner process or model as is.
    let envelope = serde_json::to_value(&input).unwrap_or_default();
    write_json_new(&visit_dir.join(VisitDir::PLANNER_INPUT), &envelope)?;
    let decided = decision::decide(context, evaluate, &input, &envelope, &visit_dir)?;
    let mut artifacts = artifacts(context, &decided);
    if let Some(summary) = &decided.found.policy_summary {
        write_json_new(&visit_dir.join(VisitDir::POLICY_SUMMARY), summary)?;
        artifacts.push(super::step_policy::policy_artifact(context));
    }
    // What the planner changed is recorded first, even when the operator's interrupt cut its
    // call short: `resume` then finds it among the visit's events. The saved guard state goes
    // only then: a process that dies before has `resume` check the visit by it.
    super::step_policy::record_violations(context, &decided.found.violations)?;
    if let Some(saved) = &decided.found.guard_state {
        super::remove_guard_state(saved)?;
    }
    if decided.interrupted {
        // The driver sees the cancellation and records the interruption; `resume` asks again.
        return Err(OpcodeError::Other(
            "the planner was interrupted by the operator".into(),
        ));
    }
    write_json_new(
        &visit_dir.join(VisitDir::PLANNER_DECISION),
        &decided.decision,
    )?;
    if let Some(reason) = decided.illegal {
        // The offending decision is evidence: saved above, recorded, and the run ends (exit 4).
        let path = crate::artifacts::RunDir::visit_file_relative(
            context.step_id(),
            context.visit,
            VisitDir::PLANNER_DECISION,
        );
        return Err(OpcodeError::IllegalDecision {
            planner: decided.decision.planner.clone().unwrap_or_default(),
            reason,
            path,
        });
    }
    routed(context, decided, artifacts)
}

/// The visit's artifacts: the envelope and the decision, the prompt and the attempts when
/// they were written.
fn artifacts(context: &StepContext<'_>, decided: &Decided) -> Vec<ArtifactEntry> {
    let mut artifacts = vec![
        context.artifact(
            ArtifactRole::PlannerInput,
            VisitDir::PLANNER_INPUT,
            "application/json",
            true,
        ),
        context.artifact(
            ArtifactRole::PlannerDecision,
            VisitDir::PLANNER_DECISION,
            "application/json",
            true,
        ),
    ];
    if decided.prompt_saved {
        artifacts.push(context.artifact(
            ArtifactRole::PlannerPrompt,
            VisitDir::PLANNER_PROMPT,
            "text/markdown",
            false,
        ));
    }
    if decided.attempts_saved {
        artifacts.push(context.artifact(
            ArtifactRole::PlannerAttempts,
            VisitDir::PLANNER_ATTEMPTS,
            "application/json",
            false,
        ));
    }
    artifacts
}

/// The saved decision's event and manifest, and the outcome the step routes on.
fn routed(
    context: &mut StepContext<'_>,
    decided: Decided,
    artifacts: Vec<ArtifactEntry>,
) -> Result<StepResult, OpcodeError> {
    let decision = decided.decision;
    let status: Outcome = decision.status.outcome();
    let step = (context.step_id().to_owned(), context.visit);
    let fields = PlannerDecision {
        status: Some(status),
        planner: decision.planner.clone(),
        decided_by: decision.decided_by.clone(),
        risk_flags: Some(decision.risk_flags.clone()),
    };
    context.recorder.event(
        Some((&step.0, step.1)),
        EventPayload::PlannerDecision(fields),
    )?;
    let fingerprint = context
        .state
        .fingerprint
        .as_ref()
        .map(|fingerprint| fingerprint.tree.clone());
    let summary = EvaluationSummary {
        status: decision.status,
        planner_status: decided.answered,
        decision,
        worktree_fingerprint: fingerprint,
    };
    let manifest = context.manifest(status.as_str(), &summary, artifacts);
    // The planner's change stays a violation until a ROLLBACK removes it.
    let mut report = StepReport::outcome(status);
    report.policy_violation = super::step_policy::violation_text(&decided.found.violations);
    Ok(StepResult {
        report,
        manifest,
        cost_usd: 0.0,
        waiting: false,
        // A worktree the planner changed is checkpointed as it is: the change is recorded as
        // the planner's violation, not left for `resume` to find as drift.
        fingerprint: decided.found.changed_worktree,
    })
}
