//! RUN_AGENT: snapshot the worktree, guard protected refs, render the prompt, run the agent
//! under supervision, then capture the diff, check the policy and record everything.

use crate::artifacts::EventPayload;
use crate::artifacts::VisitDir;
use crate::artifacts::event_payload::{EvidenceTampered, RunnerCompleted, RunnerStarted};
use crate::artifacts::evidence::AgentEvidence;
use crate::artifacts::{
    ArtifactEntry, ArtifactRole, ArtifactsError, StepTimings, write_json_new, write_json_private,
};
use crate::kernel::StepReport;
use crate::prompt::render;
use crate::runner::{AgentRun, Limits as RunnerLimits, StepRequest, resolve_profile};
use crate::workflow::model::{Inputs, Limits, PromptSpec, RunAgent};
use crate::workspace::{Capture, Checked, DiffStat, Fingerprint, GUARD_STATE_FILE, Snapshot};

use super::step_policy::{self, PolicyCheck};
use super::{OpcodeError, StepContext, StepResult};

pub(super) fn execute(
    context: &mut StepContext<'_>,
    agent: &RunAgent,
) -> Result<StepResult, OpcodeError> {
    let visit_dir = context.visit_dir()?;
    let mut workspace_time = Stopwatch::default();
    let snapshot = workspace_time.time(|| {
        context
            .workspace
            .snapshot_pre_step(&context.step.id.value, context.visit)
    })?;
    let (prompt, inputs) = render_prompt(context, agent)?;
    let (cwd, env) = place(context, agent)?;
    // `tnh context` shows the agent what its prompt was given.
    let prompt_inputs = crate::artifacts::PromptInputs {
        schema_version: crate::artifacts::SCHEMA_VERSION,
        step_id: context.step_id().to_owned(),
        prompt: prompt_reference(agent),
        inputs,
    };
    crate::artifacts::write_json_unsynced(&visit_dir.join(INPUTS_FILE), &prompt_inputs)?;
    let request = step_request(context, agent, (prompt, cwd, env), &visit_dir)?;
    // Recorded last before the agent starts: rendering the prompt may capture the worktree
    // (a `diff` input), which rewrites the conductor's scratch index the guard watches.
    let guard = workspace_time.time(|| {
        context
            .workspace
            .guard(&context.run.config.protected_branches)
    })?;
    // Kept while the agent runs: if this process dies (or the agent kills it), `resume`
    // checks the step against it.
    let guard_state = visit_dir.join(GUARD_STATE_FILE);
    write_json_private(&guard_state, &guard.state())?;
    let run = supervise(context, agent, request, &guard_state)?;
    record_tampering(context, &run, &visit_dir, &prompt_inputs)?;
    let Checked {
        report: guard_report,
        head,
    } = workspace_time.time(|| guard.check())?;
    remove_guard_state(&guard_state)?;
    let (Capture { status, tree }, run_diffstat) =
        workspace_time.time(|| capture_change(context, &snapshot, &visit_dir))?;
    // The next agent step's snapshot, when nothing runs in the worktree before it.
    context.workspace.remember_capture(&tree);
    write_json_new(&visit_dir.join(VisitDir::WORKSPACE_STATUS), &status)?;
    let PolicyCheck {
        summary,
        violations,
    } = step_policy::check(context, agent.policy.as_ref(), &status, guard_report, &[])?;
    write_json_new(&visit_dir.join(VisitDir::POLICY_SUMMARY), &summary)?;
    step_policy::record_violations(context, &violations)?;
    let artifacts = listed_artifacts(context, &run);
    let evidence = AgentEvidence {
        outcome: run.outcome.as_str().to_owned(),
        cause: run.cause.clone(),
        cost_usd: run.cost_usd,
        diffstat: Some(status.diffstat),
        run_diffstat: Some(run_diffstat),
        policy_violations: violations.len(),
    };
    let violation = step_policy::violation_text(&violations);
    let mut manifest = context.manifest(run.outcome.as_str(), &evidence, artifacts);
    let agent_time = run
        .supervised
        .ended_at
        .duration_since(run.supervised.started_at)
        .unwrap_or_default();
    manifest.timings_ms = Some(StepTimings {
        agent: milliseconds(agent_time),
        workspace: milliseconds(workspace_time.total),
    });
    Ok(StepResult {
        report: StepReport {
            outcome: run.outcome,
            policy_violation: violation,
            proposed_goldens: false,
            stop_reason: None,
        },
        manifest,
        cost_usd: run.cost_usd.unwrap_or(0.0),
        waiting: false,
        fingerprint: Some(Fingerprint { tree, head }),
    })
}

/// What the runner is asked to run: the agent's profile, its rendered prompt, where it works
/// (`place`: its folder and the step's `env`), and the step's limits over the workflow's.
fn step_request(
    context: &StepContext<'_>,
    agent: &RunAgent,
    (prompt, cwd, env): (String, std::path::PathBuf, Vec<(String, String)>),
    visit_dir: &std::path::Path,
) -> Result<StepRequest, OpcodeError> {
    let defaults = &context.run.workflow.defaults.limits;
    Ok(StepRequest {
        agent_name: agent.agent.value.clone(),
        profile: resolve_profile(&agent.agent.value, &configured_profiles(context)?)?,
        prompt,
        worktree: cwd,
        step_dir: visit_dir.to_owned(),
        limits: runner_limits(&agent.limits, defaults),
        max_turns: limit(&agent.limits.max_turns, &defaults.max_turns),
        max_budget_usd: limit(&agent.limits.max_budget_usd, &defaults.max_budget_usd),
        remaining_run_budget_usd: defaults
            .max_budget_usd
            .as_ref()
            .map(|budget| budget.value - context.state.spent_usd),
        tnh_variables: context.tnh_variables(),
        host_env: context.run.host_env.clone(),
        program_root: context.run.config.root.clone(),
        env,
    })
}

/// Runs the agent under the runner's supervision, between `runner_started` and
/// `runner_completed`.
fn supervise(
    context: &mut StepContext<'_>,
    agent: &RunAgent,
    request: StepRequest,
    guard_state: &std::path::Path,
) -> Result<AgentRun, OpcodeError> {
    let step = (context.step_id().to_owned(), context.visit);
    let started = RunnerStarted {
        agent: Some(agent.agent.value.clone()),
        ..RunnerStarted::default()
    };
    context.recorder.event(
        Some((&step.0, step.1)),
        EventPayload::RunnerStarted(started),
    )?;
    let cancellation = context.run.cancellation.clone();
    let run = context
        .run
        .runtime
        .block_on(async move {
            tokio::spawn(async move { crate::runner::run_agent(&request, cancellation).await })
                .await
        })
        .map_err(|error| OpcodeError::Other(format!("the agent task failed: {error}")))?;
    let run = match run {
        Ok(run) => run,
        // The agent's program could not be started: no process ran, so there is nothing for
        // the guard to check, and the step stops resumable. Its saved state goes, or `resume`
        // would take what the operator does meanwhile (committing the missing program, editing
        // the checkout) for changes of an agent that was killed, and call them drift or
        // `path_escape` violations.
        Err(error @ crate::runner::RunnerError::Spawn { .. }) => {
            remove_guard_state(guard_state)?;
            return Err(error.into());
        }
        Err(error) => return Err(error.into()),
    };
    let fields = RunnerCompleted {
        outcome: Some(run.outcome),
        cause: Some(run.cause.clone()),
        exit_codes: None,
    };
    context.recorder.event(
        Some((&step.0, step.1)),
        EventPayload::RunnerCompleted(fields),
    )?;
    Ok(run)
}

/// Records what the agent put in the place of the visit's evidence (which the runner removed),
/// writing the prompt's inputs again if they went.
fn record_tampering(
    context: &mut StepContext<'_>,
    run: &AgentRun,
    visit_dir: &std::path::Path,
    prompt_inputs: &crate::artifacts::PromptInputs,
) -> Result<(), OpcodeError> {
    if run.evidence_tampering.is_empty() {
        return Ok(());
    }
    // The runner removed what the agent put in the place of the inputs (if it did).
    if std::fs::symlink_metadata(visit_dir.join(INPUTS_FILE)).is_err() {
        crate::artifacts::write_json_unsynced(&visit_dir.join(INPUTS_FILE), prompt_inputs)?;
    }
    let step = (context.step_id().to_owned(), context.visit);
    let tampered = EvidenceTampered {
        entries: run.evidence_tampering.clone(),
    };
    context.recorder.event(
        Some((&step.0, step.1)),
        EventPayload::EvidenceTampered(tampered),
    )?;
    Ok(())
}

/// The step's change since its snapshot (written to `workspace.diff`), and the run's change
/// so far as a diffstat.
fn capture_change(
    context: &StepContext<'_>,
    snapshot: &Snapshot,
    visit_dir: &std::path::Path,
) -> Result<(Capture, DiffStat), crate::workspace::WorkspaceError> {
    let capture = context
        .workspace
        .capture_since(snapshot, &visit_dir.join(VisitDir::WORKSPACE_DIFF))?;
    let pre_run = context.workspace.pre_run()?;
    let run_diffstat = context
        .workspace
        .diffstat_since_base(&capture, snapshot, &pre_run)?;
    Ok((capture, run_diffstat))
}

/// The artifacts the visit's manifest lists: the runner's, the prompt's inputs, the capture
/// of the worktree and the policy summary.
fn listed_artifacts(context: &StepContext<'_>, run: &AgentRun) -> Vec<ArtifactEntry> {
    let mut artifacts: Vec<ArtifactEntry> = run
        .artifacts
        .iter()
        .filter_map(|record| {
            let role: ArtifactRole =
                serde_json::from_value(serde_json::Value::String(record.role.clone())).ok()?;
            Some(context.artifact(role, &record.path, &record.media_type, record.required))
        })
        .collect();
    artifacts.push(context.artifact(
        ArtifactRole::PromptInputs,
        INPUTS_FILE,
        "application/json",
        false,
    ));
    artifacts.extend(step_policy::capture_artifacts(context));
    artifacts.push(step_policy::policy_artifact(context));
    artifacts
}

/// Where the agent works and what it is given besides the filtered environment: the step's
/// `cwd` (relative to the worktree root, refused when it is absolute, climbs out with `..`, is
/// not a folder of the worktree or leads out of it through a symbolic link — the rules of a
/// validator's `cwd`), else the worktree's root; and the step's `env` (a value of `()` leaves
/// the variable unset).
fn place(
    context: &StepContext<'_>,
    agent: &RunAgent,
) -> Result<(std::path::PathBuf, Vec<(String, String)>), OpcodeError> {
    let worktree = context.workspace.path().to_path_buf();
    if agent.cwd.is_none() && agent.env.is_empty() {
        return Ok((worktree, Vec::new()));
    }
    let script_context = context.script_context()?;
    let script = &context.run.script;
    let cwd = match &agent.cwd {
        Some(node) => match script.evaluate_field_text(node, &script_context, "`cwd`")? {
            Some(given) => {
                super::validators::working_directory(&worktree, &given).map_err(|reason| {
                    OpcodeError::AgentCwd {
                        step: context.step_id().to_owned(),
                        at: format!("{}:{}", context.recorder.metadata().workflow_path, node.pos),
                        cwd: given,
                        reason,
                    }
                })?
            }
            None => worktree,
        },
        None => worktree,
    };
    let mut env = Vec::new();
    for (name, node) in &agent.env {
        let what = format!("the `env` value of `{}`", name.value);
        if let Some(value) = script.evaluate_field_text(node, &script_context, &what)? {
            env.push((name.value.clone(), value));
        }
    }
    Ok((cwd, env))
}

/// Adds up the time spent in timed calls.
#[derive(Debug, Default)]
struct Stopwatch {
    total: std::time::Duration,
}

impl Stopwatch {
    fn time<T>(&mut self, work: impl FnOnce() -> T) -> T {
        let started = std::time::Instant::now();
        let result = work();
        self.total += started.elapsed();
        result
    }
}

/// Milliseconds, to the microsecond.
fn milliseconds(duration: std::time::Duration) -> f64 {
    (duration.as_secs_f64() * 1_000_000.0).round() / 1000.0
}

fn limit<T: Copy>(
    step: &Option<crate::workflow::model::At<T>>,
    defaults: &Option<crate::workflow::model::At<T>>,
) -> Option<T> {
    step.as_ref().or(defaults.as_ref()).map(|at| at.value)
}

fn runner_limits(step: &Limits, defaults: &Limits) -> RunnerLimits {
    let mut limits = RunnerLimits::default();
    if let Some(timeout) = limit(&step.timeout, &defaults.timeout) {
        limits.timeout = timeout;
    }
    if let Some(idle) = limit(&step.idle_timeout, &defaults.idle_timeout) {
        limits.idle_timeout = Some(idle);
    }
    limits
}

/// The profiles of `.tnh/config.yaml`, as typed agent profiles.
fn configured_profiles(
    context: &StepContext<'_>,
) -> Result<std::collections::BTreeMap<String, crate::runner::AgentProfile>, OpcodeError> {
    context
        .run
        .config
        .agents
        .iter()
        .map(|(name, node)| {
            serde_json::from_value(node.to_json())
                .map(|profile| (name.clone(), profile))
                .map_err(|error| {
                    OpcodeError::Other(format!(
                        "agent profile `{name}` in the configuration is invalid: {error}"
                    ))
                })
        })
        .collect()
}

/// The file of a step visit holding the inputs its prompt was rendered with.
const INPUTS_FILE: &str = crate::artifacts::PROMPT_INPUTS_FILE;

/// The prompt reference (`family.name.vN`) of a library prompt, `None` for literal text.
fn prompt_reference(agent: &RunAgent) -> Option<String> {
    match &agent.prompt.value {
        PromptSpec::Reference(reference) => Some(reference.as_str().to_owned()),
        PromptSpec::Literal(_) => None,
    }
}

/// The prompt text: a library prompt rendered strictly with the step's inputs, or literal text
/// with `${name}` substituted; and the inputs it was given (none for literal text).
fn render_prompt(
    context: &StepContext<'_>,
    agent: &RunAgent,
) -> Result<(String, serde_json::Map<String, serde_json::Value>), OpcodeError> {
    let script_context = context.script_context()?;
    match &agent.prompt.value {
        PromptSpec::Literal(text) => Ok((
            context
                .run
                .script
                .substitute_names(text, agent.prompt.pos, &script_context)?,
            serde_json::Map::new(),
        )),
        PromptSpec::Reference(reference) => {
            let prompt = context.run.catalog.resolve(reference.as_str())?;
            let mut inputs = serde_json::Map::new();
            match &agent.inputs {
                Inputs::None => {}
                Inputs::Names(names) => {
                    for name in names {
                        if let Some(value) = lookup(context, &script_context, &name.value) {
                            inputs.insert(name.value.clone(), value);
                        }
                    }
                }
                Inputs::Values(values) => {
                    for (name, node) in values {
                        inputs.insert(
                            name.value.clone(),
                            context.run.script.evaluate_json(node, &script_context)?,
                        );
                    }
                }
                Inputs::Expression(node) => {
                    let map = context.run.script.evaluate_map(
                        node,
                        &script_context,
                        "the computed `inputs`",
                    )?;
                    // What `validate` refuses in written inputs (`undeclared-input`) is
                    // refused here for computed ones, never dropped in silence.
                    let undeclared: Vec<&String> = map
                        .keys()
                        .filter(|name| {
                            !prompt.inputs.iter().any(|declared| &&declared.name == name)
                                && !is_context_input(name)
                        })
                        .collect();
                    if !undeclared.is_empty() {
                        let declared: Vec<&str> = prompt
                            .inputs
                            .iter()
                            .map(|declared| declared.name.as_str())
                            .collect();
                        return Err(OpcodeError::Other(format!(
                            "{}:{}: the computed inputs name {} that prompt `{reference}` does not declare (it declares: {})",
                            context.run.script.file(),
                            node.pos,
                            undeclared
                                .iter()
                                .map(|name| format!("`{name}`"))
                                .collect::<Vec<_>>()
                                .join(", "),
                            declared.join(", ")
                        )));
                    }
                    inputs.extend(map);
                }
            }
            for declared in &prompt.inputs {
                if !inputs.contains_key(&declared.name)
                    && let Some(value) = lookup(context, &script_context, &declared.name)
                        .filter(|_| is_context_input(&declared.name))
                {
                    inputs.insert(declared.name.clone(), value);
                }
            }
            inputs.retain(|name, _| prompt.inputs.iter().any(|declared| &declared.name == name));
            let rendered = render(prompt, &inputs)?;
            Ok((rendered, inputs))
        }
    }
}

fn is_context_input(name: &str) -> bool {
    crate::workflow::prompts_check::AGENT_CONTEXT_INPUTS.contains(&name)
}

/// A named input: a run parameter of that name, or a context value.
fn lookup(
    context: &StepContext<'_>,
    script_context: &crate::script::Context,
    name: &str,
) -> Option<serde_json::Value> {
    if let Some(value) = context.run.params.get(name) {
        return Some(value.clone());
    }
    if let Some(text) = script_context.substitution(name) {
        return Some(serde_json::Value::String(text));
    }
    match name {
        "workflow_id" => Some(context.state.workflow_id.clone().into()),
        "component_kind" | "eval_profile" => script_context.json()["defaults"]
            .get(name)
            .filter(|value| !value.is_null())
            .cloned(),
        // Each name here is listed in `AGENT_EVIDENCE_INPUTS`, which `validate` accepts.
        "diff" => diff_since_base(context),
        "fix_instructions" => latest_json(context, ArtifactRole::PlannerDecision)
            .map(|decision| decision["fix_instructions"].clone())
            .filter(|instructions| !instructions.is_null()),
        "blockers" | "risk_flags" => latest_json(context, ArtifactRole::PlannerDecision)
            .map(|decision| decision[name].clone())
            .filter(|value| !value.is_null()),
        "planner_decision" => latest_json(context, ArtifactRole::PlannerDecision),
        "harness_report" => latest_json(context, ArtifactRole::HarnessReport),
        "validation_report" => latest_json(context, ArtifactRole::ValidationReport),
        _ => None,
    }
}

/// The run's changes so far, as a diffstat and the changed paths.
fn diff_since_base(context: &StepContext<'_>) -> Option<serde_json::Value> {
    let status = context
        .workspace
        .status_since(&context.workspace.pre_run().ok()?)
        .ok()?;
    let mut text = format!("{}\n", status.diffstat);
    for file in &status.files {
        text.push_str(&format!(
            "{:?} {} (+{} -{})\n",
            file.kind, file.path, file.lines_added, file.lines_removed
        ));
    }
    Some(text.into())
}

/// The most recent artifact of a role among the steps' latest manifests, parsed as JSON.
fn latest_json(context: &StepContext<'_>, role: ArtifactRole) -> Option<serde_json::Value> {
    let run_dir = context.recorder.run_dir();
    let manifests = context.latest_manifests();
    let entry = manifests
        .iter()
        .rev()
        .find_map(|manifest| manifest.artifact(role))?;
    crate::artifacts::read_json(&run_dir.root().join(&entry.path), "artifact").ok()
}

/// Removes a visit's saved guard state once the step is checked (it holds copies of the
/// operator's git configuration, which the run directory has no need to keep).
pub(crate) fn remove_guard_state(path: &std::path::Path) -> Result<(), ArtifactsError> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            Err(ArtifactsError::io("remove", path)(error))
        }
        _ => Ok(()),
    }
}
