//! An interrupted EVALUATE visit: what its planner process changed is the planner's,
//! recorded as the visit's violations, never drift.

use super::recorder::Recorder;
use super::run_error::RunError;
use super::state::{Phase, RunState};
use crate::artifacts::{EventLog, RunDir};
use crate::artifacts::{EventPayload, event_payload::PolicyViolation};
use crate::config::OperatorCheckout;
use crate::workflow::model::{Opcode, Workflow};
use crate::workspace::{GUARD_STATE_FILE, GuardReport, Workspace};

/// An EVALUATE visit the run stopped in (by its `step_started` event's opcode, else the
/// workflow's). EVALUATE changes nothing, and its planner process runs in the worktree, so
/// what changed since the visit started is its planner's (docs/planner.md): never drift.
pub(super) struct PlannerVisit<'a> {
    step_id: &'a str,
    visit: u32,
}

/// What `resume` found when it checked an interrupted EVALUATE visit by its saved guard.
pub(super) struct PlannerFound<'a> {
    /// The `guard_report` of the visit's `step_interrupted` event, when it had a saved guard.
    pub(super) guard_report: Option<&'a serde_json::Value>,
    pub(super) operator_checkout: OperatorCheckout,
    /// The visit had saved its guard state: its planner process was running (or its check
    /// not recorded yet) when the process died, so the worktree's change is its.
    pub(super) planner_ran: bool,
}

impl<'a> PlannerVisit<'a> {
    pub(super) fn of(
        workflow: &Workflow,
        events: &[crate::artifacts::Event],
        (step_id, visit): (&'a str, u32),
    ) -> Option<Self> {
        let started = events.iter().rev().find_map(|event| match &event.payload {
            EventPayload::StepStarted(started) if event.is_of((step_id, visit)) => {
                Some(started.opcode.as_str())
            }
            _ => None,
        });
        let evaluation = match started {
            Some(opcode) => opcode == Opcode::Evaluate.name(),
            None => workflow
                .step(step_id)
                .is_some_and(|step| step.body.opcode() == Opcode::Evaluate),
        };
        evaluation.then_some(PlannerVisit { step_id, visit })
    }

    /// Records what the planner changed as violations of the visit, as an uninterrupted
    /// EVALUATE does: with `found` (the visit is being recorded as interrupted now), what the
    /// saved guard found that only a planner is charged with (a changed git configuration
    /// file, a commit, a push, a worktree HEAD moved off the work branch), and — when the
    /// planner was running as the process died — the worktree's change since the checkpoint
    /// the visit started from, unless the visit recorded its planner's change itself (Ctrl-C,
    /// or a crash after the check). Every violation of the visit is then carried into the
    /// run's safety state (pending until a ROLLBACK), and a worktree the
    /// planner changed becomes the checkpoint's.
    pub(super) fn recover(
        &self,
        workflow: &Workflow,
        workspace: &Workspace,
        recorder: &mut Recorder,
        state: &mut RunState,
        found: Option<PlannerFound<'_>>,
    ) -> Result<(), RunError> {
        use crate::policy::{Violation, ViolationClass};
        let (step_id, visit) = (self.step_id, self.visit);
        let events = EventLog::read_all(&recorder.run_dir().events())?;
        let recorded: Vec<Violation> = events
            .iter()
            .filter(|event| event.is_of((step_id, visit)))
            .filter_map(|event| match &event.payload {
                EventPayload::PolicyViolation(policy) => {
                    serde_json::from_value(policy.violation.clone()).ok()
                }
                _ => None,
            })
            .collect();
        let mut new = Vec::new();
        if let Some(found) = found {
            let who = planner_label(workflow, recorder, step_id);
            let report = found
                .guard_report
                .and_then(|report| serde_json::from_value::<GuardReport>(report.clone()).ok());
            if let Some(report) = report {
                // The scratch index is the conductor's: its own fingerprint after the
                // planner's check rewrites it, which a guard state not yet removed reports.
                new.extend(
                    crate::opcode::planner_guard_violations(&report, found.operator_checkout, &who)
                        .into_iter()
                        .filter(|violation| {
                            !recorded.contains(violation)
                                && violation.path.as_deref()
                                    != Some(crate::workspace::SCRATCH_INDEX)
                        }),
                );
            }
            let checked = recorded
                .iter()
                .any(|violation| violation.class == ViolationClass::PlannerChangedWorktree);
            if let Some(before) = state.fingerprint.clone()
                && found.planner_ran
                && !checked
            {
                let now = workspace.fingerprint()?;
                new.extend(crate::opcode::planner_worktree_change(
                    workspace, &who, &before, &now,
                )?);
            }
        }
        for violation in &new {
            let fields = EventPayload::PolicyViolation(PolicyViolation {
                violation: serde_json::to_value(violation).unwrap_or_default(),
            });
            recorder.event(Some((step_id, visit)), fields)?;
        }
        let all: Vec<&Violation> = recorded.iter().chain(&new).collect();
        if let Some(first) = all.first() {
            let more = match all.len() {
                1 => String::new(),
                count => format!(" (and {} more)", count - 1),
            };
            let pending = state.safety.policy_violation.is_some();
            state.safety.policy_violation = Some(format!("{step_id}: {}{more}", first.detail));
            // The planner changed the worktree after the last agent step's snapshot: a
            // `pre_step` rollback undoes it, unless an older violation is pending.
            if !pending {
                state.safety.pre_step_undoes_violation = true;
            }
        }
        if all
            .iter()
            .any(|violation| violation.class == ViolationClass::PlannerChangedWorktree)
        {
            state.fingerprint = Some(workspace.fingerprint()?);
        }
        Ok(())
    }
}

/// How a recovered EVALUATE's planner is named in a violation: the run's `--planner`, the
/// step's `planner:`, `defaults.planner`, else "the planner" (the configured default).
fn planner_label(workflow: &Workflow, recorder: &Recorder, step_id: &str) -> String {
    let step = workflow.step(step_id).and_then(|step| match &step.body {
        crate::workflow::model::StepBody::Evaluate(evaluate) => evaluate.planner.as_ref(),
        _ => None,
    });
    recorder
        .metadata()
        .planner_override
        .clone()
        .or_else(|| step.map(|name| name.value.clone()))
        .or_else(|| {
            workflow
                .defaults
                .planner
                .as_ref()
                .map(|name| name.value.clone())
        })
        .map_or_else(
            || "the planner".to_owned(),
            |name| format!("planner `{name}`"),
        )
}

/// Whether the run stopped in an EVALUATE visit whose change of the worktree is its
/// planner's: the visit recorded its planner's change itself (the operator's interrupt, or a
/// crash after the check), or it still has its saved guard state — its planner process was
/// running when the process driving it died. A change found after an EVALUATE whose planner
/// never ran (the `rules` or an `http` planner, a crash before the planner started) is
/// someone else's: drift.
pub(super) fn planner_owns_change(
    run_dir: &RunDir,
    workflow: &Workflow,
    state: &RunState,
    events: &[crate::artifacts::Event],
) -> bool {
    let Phase::Running { step_id, visit } = &state.phase else {
        return false;
    };
    PlannerVisit::of(workflow, events, (step_id, *visit)).is_some()
        && (planner_change_recorded(events, step_id, *visit)
            || guard_saved(run_dir, step_id, *visit))
}

/// Whether the visit's folder holds a saved guard state (whatever its shape).
pub(super) fn guard_saved(run_dir: &RunDir, step_id: &str, visit: u32) -> bool {
    std::fs::symlink_metadata(run_dir.visit_dir(step_id, visit).join(GUARD_STATE_FILE)).is_ok()
}

/// Whether the visit recorded a `planner_changed_worktree` violation.
pub(super) fn planner_change_recorded(
    events: &[crate::artifacts::Event],
    step_id: &str,
    visit: u32,
) -> bool {
    events.iter().any(|event| match &event.payload {
        EventPayload::PolicyViolation(policy) => {
            event.is_of((step_id, visit))
                && policy
                    .violation
                    .get("class")
                    .and_then(serde_json::Value::as_str)
                    == Some("planner_changed_worktree")
        }
        _ => false,
    })
}
