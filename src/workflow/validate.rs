//! Static validation: every rule that can be checked before anything runs. All problems are
//! reported, not just the first.

use std::collections::{HashMap, HashSet, VecDeque};

use super::diagnostic::Diagnostics;
use super::model::{
    At, NodeList, Opcode, RouteKey, Routes, Step, StepBody, ValidatorEntry, ValidatorKind,
    ValidatorSpec, Workflow, producible_outcomes, routable_outcomes,
};
use crate::ids::StepId;
use crate::outcome::Outcome;

/// Names defined outside the workflow (built-ins, `.tnh/config.yaml`, the prompt library).
#[derive(Debug, Clone)]
pub struct KnownNames {
    /// The prompt library (built-in plus the repository's `.tnh/prompts/`).
    pub prompts: crate::prompt::Catalog,
    /// Agent profiles.
    pub agents: Vec<String>,
    /// Registered validators.
    pub validators: Vec<String>,
    /// Planner profiles.
    pub planners: Vec<String>,
}

impl Default for KnownNames {
    fn default() -> Self {
        let owned = |names: &[&str]| names.iter().map(|name| (*name).to_owned()).collect();
        Self {
            // The built-in library is tested to parse; were it broken, prompt references would
            // be reported as unknown rather than crash validation.
            prompts: crate::prompt::builtin_catalog()
                .cloned()
                .unwrap_or_default(),
            agents: owned(&["claude-code", "claude", "codex"]),
            validators: owned(&["tests", "lint", "typecheck"]),
            planners: owned(&["default", "rules"]),
        }
    }
}

/// Checks a decoded workflow against every static rule.
pub fn validate_workflow(workflow: &Workflow, known: &KnownNames, diagnostics: &mut Diagnostics) {
    let views = step_views(workflow);
    let index = step_index(&views, diagnostics);
    check_entry_step(workflow, &index, diagnostics);
    for view in &views {
        check_targets(view.routes, &index, diagnostics);
    }
    for step in &workflow.steps {
        check_reserved_stop(step, diagnostics);
        check_routes(step, diagnostics);
        if let StepBody::Evaluate(_) = &step.body {
            check_evaluate(step, &index, diagnostics);
        }
        check_names(step, known, diagnostics);
    }
    if workflow
        .defaults
        .planner
        .as_ref()
        .is_some_and(|planner| !known.planners.contains(&planner.value))
        && let Some(planner) = &workflow.defaults.planner
    {
        unknown_name(
            diagnostics,
            planner.pos,
            "unknown-planner",
            "planner",
            &planner.value,
            &known.planners,
            "planners:",
        );
    }
    super::prompts_check::check_prompts(workflow, &known.prompts, diagnostics);
    check_reachability(workflow, &views, &index, diagnostics);
    super::stop_paths::check_paths_to_stop(workflow, &index, diagnostics);
    super::stop_paths::check_failures_reaching_success_stops(workflow, diagnostics);
    check_golden_gate(workflow, &index, diagnostics);
}

/// What the checks across steps need of a step, whether it was decoded whole or only
/// outlined (a bad field must not make its id, and the steps it routes to, vanish).
#[derive(Debug, Clone, Copy)]
pub(super) struct StepView<'w> {
    /// `id`.
    pub id: &'w At<StepId>,
    /// `routes`.
    pub routes: &'w Routes,
    /// The opcode, when known.
    pub opcode: Option<Opcode>,
    /// `allow_unreachable: true`.
    pub allow_unreachable: bool,
}

/// Step id → step.
pub(super) type StepIndex<'w> = HashMap<&'w str, StepView<'w>>;

/// Every step, whole or outlined, in source order.
fn step_views(workflow: &Workflow) -> Vec<StepView<'_>> {
    let whole = workflow.steps.iter().map(|step| StepView {
        id: &step.id,
        routes: &step.routes,
        opcode: Some(step.body.opcode()),
        allow_unreachable: step.allow_unreachable,
    });
    let outlined = workflow.step_outlines.iter().map(|outline| StepView {
        id: &outline.id,
        routes: &outline.routes,
        opcode: outline.opcode,
        allow_unreachable: outline.allow_unreachable,
    });
    let mut views: Vec<StepView<'_>> = whole.chain(outlined).collect();
    views.sort_by_key(|view| (view.id.pos.line, view.id.pos.column));
    views
}

/// Step id → step, reporting duplicates (the first definition wins).
fn step_index<'w>(views: &[StepView<'w>], diagnostics: &mut Diagnostics) -> StepIndex<'w> {
    let mut index: StepIndex<'w> = HashMap::with_capacity(views.len());
    for step in views {
        let id = step.id.value.as_str();
        if let Some(first) = index.get(id) {
            diagnostics
                .error(
                    step.id.pos,
                    "duplicate-step-id",
                    format!("step id `{id}` is used twice"),
                )
                .hint(format!(
                    "the first step `{id}` is at line {}; step ids must be unique",
                    first.id.pos.line
                ));
        } else {
            index.insert(id, *step);
        }
    }
    index
}

fn check_entry_step(workflow: &Workflow, index: &StepIndex<'_>, diagnostics: &mut Diagnostics) {
    let entry = &workflow.entry_step;
    if entry.value.as_str().is_empty() || index.contains_key(entry.value.as_str()) {
        return;
    }
    diagnostics
        .error(
            entry.pos,
            "unknown-entry-step",
            format!(
                "entry_step `{}` is not a step of this workflow",
                entry.value
            ),
        )
        .suggest(
            entry.value.as_str(),
            index.keys().copied(),
            "name the first step to run",
        );
}

fn check_reserved_stop(step: &Step, diagnostics: &mut Diagnostics) {
    if step.id.value.is_stop() && step.body.opcode() != Opcode::Stop {
        diagnostics
            .error(
                step.id.pos,
                "reserved-stop-id",
                "a step named `STOP` must have opcode STOP",
            )
            .hint("`STOP` is the terminal target; rename this step");
    }
}

fn target_exists(target: &str, index: &StepIndex<'_>) -> bool {
    target == "STOP" || index.contains_key(target)
}

/// Every route target names a step or STOP.
fn check_targets(routes: &Routes, index: &StepIndex<'_>, diagnostics: &mut Diagnostics) {
    let targets = routes
        .entries
        .iter()
        .map(|(_, target)| target)
        .chain(&routes.unkeyed_targets);
    for target in targets {
        if !target_exists(target.value.as_str(), index) {
            diagnostics
                .error(
                    target.pos,
                    "unknown-target",
                    format!("route target `{}` is not a step", target.value),
                )
                .suggest(
                    target.value.as_str(),
                    index.keys().copied().chain(["STOP"]),
                    "route to an existing step id or STOP",
                );
        }
    }
}

fn check_routes(step: &Step, diagnostics: &mut Diagnostics) {
    let opcode = step.body.opcode();
    if opcode == Opcode::Stop {
        // Routes on STOP are reported once, as routes-on-stop, by the decoder.
        return;
    }
    let routable = routable_outcomes(&step.body);
    for (key, _) in &step.routes.entries {
        match key.value {
            RouteKey::Outcome(outcome) if !routable.contains(&outcome) => {
                let names: Vec<&str> = routable.iter().map(|outcome| outcome.as_str()).collect();
                diagnostics
                    .error(key.pos, "foreign-route-key", format!("{} steps never produce `{outcome}`", opcode.name()))
                    .suggest(outcome.as_str(), names.iter().copied(), format!("{} outcomes: {}", opcode.name(), names.join(", ")));
            }
            RouteKey::Wildcard if opcode == Opcode::Evaluate => diagnostics
                .error(key.pos, "wildcard-on-evaluate", "EVALUATE steps cannot use the `*` route")
                .hint("route each planner status (success, partial, blocked, unsafe, needs_human) explicitly"),
            _ => {}
        }
    }
    // An entry that could not be read may have been the missing route: judging would guess.
    if step.routes.incomplete {
        return;
    }
    if step.routes.pos.is_none() {
        return;
    }
    let missing: Vec<&str> = producible_outcomes(&step.body)
        .into_iter()
        .filter(|outcome| {
            step.routes.target(*outcome).is_none()
                || (opcode == Opcode::Evaluate && !step.routes.lists(*outcome))
        })
        .map(Outcome::as_str)
        .collect();
    if !missing.is_empty() {
        let pos = step.routes.pos.unwrap_or(step.pos);
        diagnostics
            .error(
                pos,
                "missing-route",
                format!(
                    "step `{}` has no route for {}",
                    step.id.value,
                    missing.join(", ")
                ),
            )
            .hint(if opcode == Opcode::Evaluate {
                "EVALUATE must route every planner status".to_owned()
            } else {
                "add a route for each, or `\"*\": <step>` for every outcome not listed".to_string()
            });
    }
}

fn check_evaluate(step: &Step, index: &StepIndex<'_>, diagnostics: &mut Diagnostics) {
    let StepBody::Evaluate(evaluate) = &step.body else {
        return;
    };
    let allowed: HashSet<&str> = evaluate
        .allowed_next_steps
        .iter()
        .map(|id| id.value.as_str())
        .collect();
    for id in &evaluate.allowed_next_steps {
        if !target_exists(id.value.as_str(), index) {
            diagnostics
                .error(
                    id.pos,
                    "unknown-target",
                    format!("allowed next step `{}` is not a step", id.value),
                )
                .suggest(
                    id.value.as_str(),
                    index.keys().copied().chain(["STOP"]),
                    "list existing step ids or STOP",
                );
        }
    }
    for (key, target) in &step.routes.entries {
        let RouteKey::Outcome(status) = key.value else {
            continue;
        };
        let target_id = target.value.as_str();
        if target_id != "STOP" && !allowed.contains(target_id) {
            diagnostics
                .error(target.pos, "route-not-allowed", format!("status `{status}` routes to `{target_id}`, which is not in allowed_next_steps"))
                .hint(format!("add `{target_id}` to allowed_next_steps or route to one of them"));
        }
        let target_step = index.get(target_id);
        let target_opcode = target_step.and_then(|view| view.opcode);
        // A target whose opcode is itself invalid (reported there) is not judged again.
        let unknown_opcode = target_step.is_some() && target_opcode.is_none();
        let legal = |opcode: Opcode| {
            target_id == "STOP"
                || unknown_opcode
                || target_opcode == Some(opcode)
                || target_opcode == Some(Opcode::Stop)
        };
        if status == Outcome::Unsafe && !legal(Opcode::Rollback) {
            diagnostics
                .error(
                    target.pos,
                    "unsafe-route",
                    format!("`unsafe` must route to a ROLLBACK or STOP step, not `{target_id}`"),
                )
                .hint("an unsafe change is rolled back or the run stops");
        }
        if status == Outcome::NeedsHuman && !legal(Opcode::Gate) {
            diagnostics
                .error(
                    target.pos,
                    "needs-human-route",
                    format!("`needs_human` must route to a GATE or STOP step, not `{target_id}`"),
                )
                .hint("a human decision goes through a GATE");
        }
    }
}

fn unknown_name(
    diagnostics: &mut Diagnostics,
    pos: super::yaml::Pos,
    code: &'static str,
    what: &str,
    name: &str,
    known: &[String],
    config_section: &str,
) {
    diagnostics
        .error(pos, code, format!("{what} `{name}` is not defined"))
        .suggest(
            name,
            known.iter().map(String::as_str),
            format!(
                "known: {}; define others under `{config_section}` in .tnh/config.yaml",
                known.join(", ")
            ),
        );
}

fn check_names(step: &Step, known: &KnownNames, diagnostics: &mut Diagnostics) {
    match &step.body {
        StepBody::RunAgent(agent) => {
            check_agent_place(step, agent, diagnostics);
            if known.agents.contains(&agent.agent.value) {
                return;
            }
            unknown_name(
                diagnostics,
                agent.agent.pos,
                "unknown-agent",
                "agent profile",
                &agent.agent.value,
                &known.agents,
                "agents:",
            );
        }
        StepBody::Evaluate(evaluate) => {
            if let Some(planner) = evaluate
                .planner
                .as_ref()
                .filter(|planner| !known.planners.contains(&planner.value))
            {
                unknown_name(
                    diagnostics,
                    planner.pos,
                    "unknown-planner",
                    "planner",
                    &planner.value,
                    &known.planners,
                    "planners:",
                );
            }
        }
        StepBody::RunValidation(validation) => {
            let mut seen: HashMap<&str, u32> = HashMap::new();
            for entry in &validation.run {
                let id = entry.id();
                if let Some(line) = seen.insert(id.value.as_str(), id.pos.line) {
                    diagnostics
                        .error(
                            id.pos,
                            "duplicate-validator-id",
                            format!(
                                "validator `{}` appears twice in step `{}`",
                                id.value, step.id.value
                            ),
                        )
                        .hint(format!(
                            "the first is at line {line}; give each validator a unique id"
                        ));
                }
                let registered = match entry {
                    ValidatorEntry::Named(_) => true,
                    ValidatorEntry::Spec(spec) => spec.kind.value == ValidatorKind::Builtin,
                };
                if let ValidatorEntry::Spec(spec) = entry {
                    check_validator_cwd(step, &id.value, spec.cwd.as_ref(), diagnostics);
                }
                if registered && !known.validators.contains(&id.value) {
                    unknown_name(
                        diagnostics,
                        id.pos,
                        "unknown-validator",
                        "validator",
                        &id.value,
                        &known.validators,
                        "validators:",
                    );
                }
            }
        }
        _ => {}
    }
}

/// Why a validator `cwd` leaves the worktree, judged on the text alone: an absolute path, or
/// more `..` than folders before them. `None` when it stays inside (symbolic links are
/// resolved when the step runs).
pub fn cwd_leaves_worktree(cwd: &str) -> Option<&'static str> {
    let path = std::path::Path::new(cwd);
    if path.has_root() {
        return Some("is an absolute path");
    }
    let mut depth: usize = 0;
    for component in path.components() {
        match component {
            std::path::Component::ParentDir => match depth.checked_sub(1) {
                Some(up) => depth = up,
                None => return Some("climbs out of the worktree with `..`"),
            },
            std::path::Component::Normal(_) => depth += 1,
            _ => {}
        }
    }
    None
}

/// A literal `cwd` (no expression) that leaves the worktree is refused before the run; a
/// computed one is checked when the step runs.
fn check_validator_cwd(
    step: &Step,
    validator: &str,
    cwd: Option<&super::yaml::Node>,
    diagnostics: &mut Diagnostics,
) {
    let Some(node) = cwd else { return };
    let Some(text) = node.as_str().filter(|text| !text.contains("${")) else {
        return;
    };
    if let Some(reason) = cwd_leaves_worktree(text) {
        diagnostics
            .error(
                node.pos,
                "cwd-outside-worktree",
                format!(
                    "`cwd` `{text}` of validator `{validator}` in step `{}` {reason}",
                    step.id.value
                ),
            )
            .hint("validators run inside the run's worktree: give a folder relative to its root, without `..` above it (e.g. `cwd: crates/core`)");
    }
}

/// A RUN_AGENT step's literal `cwd` must stay inside the worktree, as a validator's does (a
/// computed one is checked when the step runs), and its `env` may not name the kernel's
/// `TNH_*` variables.
fn check_agent_place(step: &Step, agent: &super::model::RunAgent, diagnostics: &mut Diagnostics) {
    if let Some(node) = &agent.cwd
        && let Some(text) = node.as_str().filter(|text| !text.contains("${"))
        && let Some(reason) = cwd_leaves_worktree(text)
    {
        diagnostics
            .error(
                node.pos,
                "cwd-outside-worktree",
                format!("`cwd` `{text}` of step `{}` {reason}", step.id.value),
            )
            .hint("agents run inside the run's worktree: give a folder relative to its root, without `..` above it (e.g. `cwd: crates/core`)");
    }
    for (name, _) in &agent.env {
        if name.value.starts_with("TNH_") {
            diagnostics
                .error(
                    name.pos,
                    "invalid-value",
                    format!(
                        "`{}` in the `env` of step `{}` is a name the conductor sets for every agent",
                        name.value, step.id.value
                    ),
                )
                .hint("`TNH_*` variables (`TNH_RUN_ID`, `TNH_STEP_DIR`, …) are the conductor's; give the variable another name");
        }
    }
}

/// The ids of the steps a step can route to (STOP excluded).
pub(super) fn successors<'w>(step: &StepView<'w>) -> impl Iterator<Item = &'w str> + use<'w> {
    step.routes
        .entries
        .iter()
        .map(|(_, target)| target)
        .chain(&step.routes.unkeyed_targets)
        .map(|target| target.value.as_str())
        .filter(|target| *target != "STOP")
}

/// Every step reachable from `start`, `start` included.
pub(super) fn reachable_from<'w>(start: &'w str, index: &StepIndex<'w>) -> HashSet<&'w str> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut queue: VecDeque<&str> = VecDeque::from([start]);
    while let Some(id) = queue.pop_front() {
        let Some(step) = index.get(id) else { continue };
        if seen.insert(id) {
            queue.extend(successors(step).filter(|next| !seen.contains(next)));
        }
    }
    seen
}

fn check_reachability(
    workflow: &Workflow,
    views: &[StepView<'_>],
    index: &StepIndex<'_>,
    diagnostics: &mut Diagnostics,
) {
    let entry = workflow.entry_step.value.as_str();
    if !index.contains_key(entry) {
        return;
    }
    let reached = reachable_from(entry, index);
    for step in views {
        let id = step.id.value.as_str();
        // A step named STOP is the bare STOP target: routes reach it without naming it.
        if reached.contains(id) || step.allow_unreachable || step.id.value.is_stop() {
            continue;
        }
        diagnostics
            .error(
                step.id.pos,
                "unreachable-step",
                format!("step `{id}` cannot be reached from entry_step `{entry}`"),
            )
            .hint("route to it from another step, remove it, or mark it `allow_unreachable: true`");
    }
}

/// A workflow whose script validators can write a harness report (which may propose goldens)
/// must be able to reach a GATE after them, where a human approves the goldens.
fn check_golden_gate(workflow: &Workflow, index: &StepIndex<'_>, diagnostics: &mut Diagnostics) {
    for step in &workflow.steps {
        let StepBody::RunValidation(validation) = &step.body else {
            continue;
        };
        let Some(script) = validation.run.iter().find_map(|entry| match entry {
            ValidatorEntry::Spec(spec)
                if spec.kind.value == ValidatorKind::Script && can_report(spec) =>
            {
                Some(spec)
            }
            _ => None,
        }) else {
            continue;
        };
        let reached = reachable_from(step.id.value.as_str(), index);
        let gate_reachable = reached
            .iter()
            .filter_map(|id| index.get(id))
            .any(|candidate| candidate.opcode == Some(Opcode::Gate));
        if !gate_reachable {
            diagnostics
                .error(script.kind.pos, "golden-gate-missing", format!("script validator `{}` may propose goldens, but no GATE is reachable after step `{}`", script.id.value, step.id.value))
                .hint("route the evaluation path through a blocking GATE (e.g. gate: requires_approval) before success, where goldens it proposes are approved");
        }
    }
}

/// Whether a script validator can produce a harness report: it names one with `report`, or an
/// `artifacts` glob can collect a file named `harness_report.json` (the kernel reads the
/// first collected one). A computed list or pattern may, as may one this check cannot split.
fn can_report(spec: &ValidatorSpec) -> bool {
    if spec.report.is_some() || matches!(spec.artifacts, NodeList::Expression(_)) {
        return true;
    }
    spec.artifacts
        .nodes()
        .iter()
        .any(|node| match node.as_str() {
            Some(pattern) => glob_can_name_report(pattern),
            None => false,
        })
}

/// Whether files collected by `pattern` may be named `harness_report.json`: its last path
/// component matches that name (collected files are matched with `/` taken literally).
fn glob_can_name_report(pattern: &str) -> bool {
    if pattern.contains("${") || pattern.contains('{') {
        return true;
    }
    let last = pattern
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or("");
    if last.is_empty() || last == "**" {
        return true;
    }
    match globset::Glob::new(last) {
        Ok(glob) => glob
            .compile_matcher()
            .is_match(crate::artifacts::VisitDir::HARNESS_REPORT),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::glob_can_name_report;

    #[test]
    fn a_glob_can_name_the_report_only_when_its_last_component_matches() {
        for pattern in [
            "harness_report.json",
            "out/harness_report.json",
            "*.json",
            "out/**",
            "**",
            "${step_dir}/x",
            "{a,b}.json",
            "harness_*",
        ] {
            assert!(glob_can_name_report(pattern), "{pattern}");
        }
        for pattern in [
            "coverage.xml",
            "out/*.txt",
            "screenshots/*.png",
            "report.json",
        ] {
            assert!(!glob_can_name_report(pattern), "{pattern}");
        }
    }
}
