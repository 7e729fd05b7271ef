//! ROLLBACK: reset the worktree to `pre_run` or the latest pre-step snapshot.

use crate::artifacts::{ArtifactRole, EventType, write_json_new};
use crate::kernel::StepReport;
use crate::kernel::recorder::payload;
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
            write_json_new(&visit_dir.join("rollback.json"), &record)?;
            let fields = payload([
                ("target", target.as_str().into()),
                ("record", "rollback.json".into()),
                ("undone", record.before.to_string().into()),
            ]);
            context.recorder.event(
                EventType::RollbackCompleted,
                Some((&step.0, step.1)),
                fields,
            )?;
            let summary = serde_json::to_value(&record).unwrap_or_default();
            (
                Outcome::Completed,
                summary,
                vec![context.artifact(
                    ArtifactRole::RollbackRecord,
                    "rollback.json",
                    "application/json",
                    true,
                )],
            )
        }
        // A rollback that cannot be done (no pre-step snapshot yet) is the step's `error`
        // outcome, routed like any other; a broken repository is a runtime error.
        Err(error @ crate::workspace::WorkspaceError::NoSnapshot { .. }) => (
            Outcome::Error,
            serde_json::json!({ "error": error.to_string() }),
            Vec::new(),
        ),
        Err(error) => return Err(error.into()),
    };
    let manifest = context.manifest(outcome.as_str(), summary, artifacts);
    Ok(StepResult {
        report: StepReport::outcome(outcome),
        manifest,
        cost_usd: 0.0,
        waiting: false,
        fingerprint: None,
    })
}
