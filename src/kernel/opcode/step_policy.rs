//! The policy check a mutable step (RUN_AGENT, RUN_VALIDATION) makes once its processes
//! ended: its diff, what it committed on the work branch and what the guard found are checked
//! against the effective policy (the step's `policy`, else the workflow default, else an empty
//! one), and each violation is recorded as a `policy_violation` event of the visit.

use crate::artifacts::VisitDir;
use crate::artifacts::{ArtifactEntry, ArtifactRole};
use crate::artifacts::{EventPayload, event_payload::PolicyViolation};
use crate::policy::{Operation, Policy, PolicySpec as EnforcedPolicy, PolicySummary, Violation};
use crate::workflow::model::{At, PolicySpec};
use crate::workspace::{ChangedFile, GuardReport, WorkspaceStatus};

use super::{OpcodeError, StepContext};

/// What the check found: the `policy_summary` (with the guard report) and the violations.
pub(super) struct PolicyCheck {
    /// The `policy_summary` artifact's content.
    pub(super) summary: PolicySummary,
    /// Every violation, in the order found.
    pub(super) violations: Vec<Violation>,
}

/// Checks `status` and `guard_report` against the effective policy of a step whose own
/// `policy` is `step_policy`. The workflow's `check` function runs on each changed file, all
/// the calls within one budget (`script::Limits::max_check_time`); a script error, or a file
/// left unchecked when the budget is spent, is a violation, so a broken or slow check fails
/// closed. Script output is recorded as
/// events of the visit.
pub(super) fn check(
    context: &mut StepContext<'_>,
    step_policy: Option<&At<PolicySpec>>,
    status: &WorkspaceStatus,
    guard_report: GuardReport,
    exempt: &[Operation],
) -> Result<PolicyCheck, OpcodeError> {
    let requested = effective_policy(context, step_policy)?;
    let mut policy = Policy::compile(&requested)?
        .with_operator_checkout(context.run.config.operator_checkout)
        .with_worktree(context.workspace.path());
    for operation in exempt {
        policy = policy.without_operation(*operation);
    }
    // What the step committed on the work branch (and the worktree no longer shows).
    let committed = match &guard_report.work_branch_moved {
        Some(moved) => context
            .workspace
            .committed_changes(moved, &status.since_tree)?,
        None => Vec::new(),
    };
    let violations = match &requested.check {
        Some(function) => {
            // The check judges the step's capture: scripts see exactly its changes.
            let hook_context = context.script_context_with_changes(&status.files)?;
            let function = At::new(function.clone(), check_position(context, step_policy));
            // One budget for the calls of all the files; those left when it is spent fail
            // closed, as a check that fails does.
            let stage = context.run.script.policy_stage(&function, &hook_context);
            let hook = |file: &ChangedFile| match stage.check(&file.into()) {
                Ok(verdict) => verdict,
                Err(error) => Some(format!("the check function failed: {error}")),
            };
            let mut violations = policy.check(status, &guard_report, Some(&hook));
            violations.extend(policy.check_committed(&committed, status, Some(&hook)));
            violations
        }
        None => {
            let mut violations = policy.check(status, &guard_report, None);
            violations.extend(policy.check_committed(&committed, status, None));
            violations
        }
    };
    record_script_output(context)?;
    let summary = PolicySummary::new(
        &policy,
        status.files.len(),
        requested.check.is_some(),
        violations.clone(),
    )
    .with_guard_report(guard_report);
    Ok(PolicyCheck {
        summary,
        violations,
    })
}

/// One `policy_violation` event of the visit per violation.
pub(super) fn record_violations(
    context: &mut StepContext<'_>,
    violations: &[Violation],
) -> Result<(), OpcodeError> {
    let step = (context.step_id().to_owned(), context.visit);
    for violation in violations {
        let fields = EventPayload::PolicyViolation(PolicyViolation {
            violation: serde_json::to_value(violation).unwrap_or_default(),
        });
        context.recorder.event(Some((&step.0, step.1)), fields)?;
    }
    Ok(())
}

/// The step report's `policy_violation`: the first violation's detail (and how many more),
/// `None` when the step is clean.
pub(super) fn violation_text(violations: &[Violation]) -> Option<String> {
    violations.first().map(|first| {
        let more = if violations.len() > 1 {
            format!(" (and {} more)", violations.len() - 1)
        } else {
            String::new()
        };
        format!("{}{more}", first.detail)
    })
}

/// Where the policy's `check` was written, for errors.
fn check_position(
    context: &StepContext<'_>,
    step_policy: Option<&At<PolicySpec>>,
) -> crate::document::yaml::Pos {
    let spec = step_policy.or(context.run.workflow.defaults.policy.as_ref());
    match spec.map(|spec| &spec.value) {
        Some(PolicySpec::Inline(inline)) => inline
            .check
            .as_ref()
            .map_or(context.step.pos, |check| check.pos),
        Some(PolicySpec::Reference(_)) | None => spec.map_or(context.step.pos, |spec| spec.pos),
    }
}

/// The manifest entries of a step's capture: `workspace.diff` and `workspace_status.json`.
pub(super) fn capture_artifacts(context: &StepContext<'_>) -> [ArtifactEntry; 2] {
    [
        context.artifact(
            ArtifactRole::WorkspaceDiff,
            VisitDir::WORKSPACE_DIFF,
            "text/x-diff",
            true,
        ),
        context.artifact(
            ArtifactRole::WorkspaceStatus,
            VisitDir::WORKSPACE_STATUS,
            "application/json",
            true,
        ),
    ]
}

/// The manifest entry of a step's `policy_summary.json`.
pub(super) fn policy_artifact(context: &StepContext<'_>) -> ArtifactEntry {
    context.artifact(
        ArtifactRole::PolicySummary,
        VisitDir::POLICY_SUMMARY,
        "application/json",
        true,
    )
}

/// `print`/`debug` output of scripts, recorded as events (never printed).
pub(super) fn record_script_output(context: &mut StepContext<'_>) -> Result<(), OpcodeError> {
    let step = (context.step_id().to_owned(), context.visit);
    for message in context.run.script.take_output() {
        context
            .recorder
            .event(Some((&step.0, step.1)), message.event_payload())?;
    }
    Ok(())
}

/// Script output pending before a visit starts — printed by the script's top level when the
/// run loaded it — recorded as the run's (events without a step).
pub(super) fn record_run_output(context: &mut StepContext<'_>) -> Result<(), OpcodeError> {
    for message in context.run.script.take_output() {
        context.recorder.event(None, message.event_payload())?;
    }
    Ok(())
}

/// The step's policy, else the workflow default, else an empty one (protected refs and path
/// escapes are checked whatever the policy).
fn effective_policy(
    context: &StepContext<'_>,
    step_policy: Option<&At<PolicySpec>>,
) -> Result<EnforcedPolicy, OpcodeError> {
    let Some(spec) = step_policy.or(context.run.workflow.defaults.policy.as_ref()) else {
        return Ok(EnforcedPolicy::default());
    };
    Ok(match &spec.value {
        PolicySpec::Inline(inline) => EnforcedPolicy {
            allowed_paths: inline
                .allowed_paths
                .iter()
                .map(|path| path.value.clone())
                .collect(),
            forbidden_paths: inline
                .forbidden_paths
                .iter()
                .map(|path| path.value.clone())
                .collect(),
            forbidden_operations: inline
                .forbidden_operations
                .iter()
                .map(|operation| operation.value.clone())
                .collect(),
            check: inline.check.as_ref().map(|check| check.value.clone()),
        },
        PolicySpec::Reference(reference) => {
            let prompt = context.run.catalog.resolve(reference.as_str())?;
            let fields = prompt.policy.clone().unwrap_or_default();
            EnforcedPolicy {
                allowed_paths: fields.allowed_paths,
                forbidden_paths: fields.forbidden_paths,
                forbidden_operations: fields.forbidden_operations,
                check: fields.check,
            }
        }
    })
}
