//! ROLLBACK: reset the worktree to `pre_run` or the latest pre-step snapshot.

use crate::artifacts::VisitDir;
use crate::artifacts::evidence::{RollbackEvidence, summary_value};
use crate::artifacts::{ArtifactRole, write_json_new};
use crate::artifacts::{EventPayload, event_payload::RollbackCompleted};
use crate::kernel::StepReport;
use crate::outcome::Outcome;
use crate::workflow::model::{Rollback, RollbackTarget};
use crate::workspace::RollbackTarget as WorkspaceTarget;

use super::{OpcodeError, StepContext, StepResult};

pub(super) fn execute(
    context: &mut StepContext<'_>,
    rollback: &Rollback,
) -> Result<StepResult, OpcodeError> {
    let visit_dir = context.visit_dir()?;
    let target = match rollback.target.value {
        RollbackTarget::PreRun => WorkspaceTarget::PreRun,
        RollbackTarget::PreStep => WorkspaceTarget::PreStep,
    };
    let step = (context.step_id().to_owned(), context.visit);
    let (outcome, summary, artifacts) = match context.workspace.rollback(target) {
        Ok(record) => {
            write_json_new(&visit_dir.join(VisitDir::ROLLBACK), &record)?;
            let fields = RollbackCompleted {
                target: target.as_str().to_owned(),
                record: VisitDir::ROLLBACK.to_owned(),
                undone: record.before.to_string(),
                ..RollbackCompleted::default()
            };
            context.recorder.event(
                Some((&step.0, step.1)),
                EventPayload::RollbackCompleted(fields),
            )?;
            let summary = summary_value(&record);
            (
                Outcome::Completed,
                summary,
                vec![context.artifact(
                    ArtifactRole::RollbackRecord,
                    VisitDir::ROLLBACK,
                    "application/json",
                    true,
                )],
            )
        }
        // A rollback that cannot be done (no pre-step snapshot yet) is the step's `error`
        // outcome, routed like any other; a broken repository is a runtime error.
        Err(error @ crate::workspace::WorkspaceError::NoSnapshot { .. }) => (
            Outcome::Error,
            summary_value(&RollbackEvidence {
                error: Some(error.to_string()),
                ..RollbackEvidence::default()
            }),
            Vec::new(),
        ),
        Err(error) => return Err(error.into()),
    };
    let manifest = context.manifest(outcome.as_str(), &summary, artifacts);
    Ok(StepResult {
        report: StepReport::outcome(outcome),
        manifest,
        cost_usd: 0.0,
        waiting: false,
        fingerprint: None,
    })
}
