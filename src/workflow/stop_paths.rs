//! A workflow must be able to end: from every step the entry step reaches, some chain of routes
//! leads to STOP. Without one, a run can only loop until a step exceeds `max_visits` (a runtime
//! error after creating a worktree) — statically knowable, so a `validate` error.
//!
//! Every route counts as an edge, `*` and EVALUATE/GATE statuses included: a loop with any exit
//! is fine. Steps whose routes are not fully known (an unreadable entry, an invalid opcode, no
//! `routes`, a target that is not a step) are already reported and are not judged again.

use std::collections::HashSet;

use super::diagnostic::Diagnostics;
use super::model::{Opcode, RouteKey, StepBody, Stop, StopOutcome, Workflow, producible_outcomes};
use super::validate::{StepIndex, StepView, reachable_from, successors};

/// Reports each step the entry reaches from which STOP cannot be reached.
pub(super) fn check_paths_to_stop(
    workflow: &Workflow,
    index: &StepIndex<'_>,
    diagnostics: &mut Diagnostics,
) {
    let entry = workflow.entry_step.value.as_str();
    if !index.contains_key(entry) {
        return;
    }
    let mut can_stop: HashSet<&str> = index
        .iter()
        .filter(|(_, step)| ends_or_unknown(step, index))
        .map(|(id, _)| *id)
        .collect();
    // Walk backwards until nothing changes: a step can stop when one of its targets can.
    loop {
        let newly: Vec<&str> = index
            .iter()
            .filter(|(id, step)| {
                !can_stop.contains(*id) && successors(step).any(|next| can_stop.contains(next))
            })
            .map(|(id, _)| *id)
            .collect();
        if newly.is_empty() {
            break;
        }
        can_stop.extend(newly);
    }
    let reached = reachable_from(entry, index);
    let mut trapped: Vec<&StepView<'_>> = reached
        .iter()
        .filter(|id| !can_stop.contains(*id))
        .filter_map(|id| index.get(id))
        .collect();
    trapped.sort_by_key(|step| (step.id.pos.line, step.id.pos.column));
    for step in trapped {
        let mut targets: Vec<String> = Vec::new();
        for target in successors(step) {
            let named = format!("`{target}`");
            if !targets.contains(&named) {
                targets.push(named);
            }
        }
        diagnostics
            .error(
                step.id.pos,
                "no-path-to-stop",
                format!(
                    "no chain of routes from step `{}` reaches STOP (it leads only to {})",
                    step.id.value,
                    targets.join(", ")
                ),
            )
            .hint("route an outcome (for example `error`) to STOP, or to a step that reaches STOP; otherwise the run can only end by exceeding max_visits");
    }
}

/// Whether a step ends the run itself, or cannot be judged (its problem is reported already).
fn ends_or_unknown(step: &StepView<'_>, index: &StepIndex<'_>) -> bool {
    let routes = step.routes;
    match step.opcode {
        None | Some(Opcode::Stop) => true,
        Some(_) => {
            routes.incomplete
                || routes.pos.is_none()
                || routes
                    .entries
                    .iter()
                    .map(|(_, target)| target)
                    .chain(&routes.unkeyed_targets)
                    .any(|target| {
                        let id = target.value.as_str();
                        id == "STOP" || !index.contains_key(id)
                    })
        }
    }
}

/// Warns where a failure — an error, a timeout, a policy kill, a planner's `blocked`, a
/// rejected or timed-out gate — routes to a STOP step written without `outcome:`, which ends
/// the run in success (exit 0): a timeout routed through `"*": done` would read as a success in
/// the morning. The bare `STOP` target needs no warning (it fails after a failure), nor a STOP
/// that says `outcome: success` (the author chose it).
pub(super) fn check_failures_reaching_success_stops(
    workflow: &Workflow,
    diagnostics: &mut Diagnostics,
) {
    for step in &workflow.steps {
        // Route key (its position and text) and target → the failures sent that way.
        let mut sent: Vec<(&super::model::At<RouteKey>, &str, Vec<&str>)> = Vec::new();
        for outcome in producible_outcomes(&step.body) {
            if outcome.is_success_for_bare_stop() {
                continue;
            }
            let Some((key, target)) = step
                .routes
                .entries
                .iter()
                .find(|(key, _)| key.value == RouteKey::Outcome(outcome))
                .or_else(|| {
                    step.routes
                        .entries
                        .iter()
                        .find(|(key, _)| key.value == RouteKey::Wildcard)
                })
            else {
                continue;
            };
            let Some(StepBody::Stop(Stop {
                outcome: StopOutcome::Success,
                outcome_written: false,
                ..
            })) = workflow.step(target.value.as_str()).map(|stop| &stop.body)
            else {
                continue;
            };
            match sent
                .iter_mut()
                .find(|(known, _, _)| std::ptr::eq(*known, key))
            {
                Some((_, _, outcomes)) => outcomes.push(outcome.as_str()),
                None => sent.push((key, target.value.as_str(), vec![outcome.as_str()])),
            }
        }
        for (key, target, outcomes) in sent {
            let through = match key.value {
                RouteKey::Wildcard => " (through `*`)",
                RouteKey::Outcome(_) => "",
            };
            diagnostics
                .warning(
                    key.pos,
                    "failure-to-success-stop",
                    format!(
                        "step `{}` routes {}{through} to `{target}`, a STOP without `outcome:`, which ends the run in success (exit 0)",
                        step.id.value,
                        outcomes
                            .iter()
                            .map(|outcome| format!("`{outcome}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
                .hint(format!(
                    "give `{target}` `outcome: failure`, route these outcomes to the bare `STOP` (a failure stop after them), or write `outcome: success` on `{target}` if a success is meant"
                ));
        }
    }
}
