//! The decision EVALUATE gets back: the planner asked (its prompt rendered for a model), what
//! it answered, and the kernel's own safety facts and routes applied to it.

use super::super::{OpcodeError, StepContext};
use super::watch::{Found, Watch};
use crate::artifacts::{VisitDir, write_json_new};
use crate::planner::backend::{Attempt, Backend, Request, Verdict};
use crate::planner::{Decision, PlannerInput, Status};
use crate::workflow::model::{Evaluate, PromptSpec};

/// What the planner's turn left.
pub(super) struct Decided {
    /// The decision as saved (when interrupted, the `blocked` of no decision: never saved).
    pub(super) decision: Decision,
    /// The status the backend answered before the guard and the kernel's safety facts
    /// (`None` when the kernel decided).
    pub(super) answered: Option<Status>,
    /// Set when the backend named an illegal `next_step`.
    pub(super) illegal: Option<crate::planner::backend::IllegalNextStep>,
    /// The operator's interrupt cut the planner's call short: there is no decision, only
    /// what the planner changed meanwhile.
    pub(super) interrupted: bool,
    /// What a planner process changed while it was asked.
    pub(super) found: Found,
    /// `planner_prompt.md` was written.
    pub(super) prompt_saved: bool,
    /// `planner_attempts.json` was written.
    pub(super) attempts_saved: bool,
}

/// The planner profile this step asks: `--planner`, the step's `planner:`,
/// `defaults.planner`, else the configured `default` profile, else `rules`.
fn planner_name(context: &StepContext<'_>, evaluate: &Evaluate) -> String {
    context
        .run
        .config
        .planner_override
        .clone()
        .or_else(|| evaluate.planner.as_ref().map(|name| name.value.clone()))
        .or_else(|| {
            context
                .run
                .workflow
                .defaults
                .planner
                .as_ref()
                .map(|name| name.value.clone())
        })
        .unwrap_or_else(|| {
            crate::planner::backend::default_planner_name(&context.run.config).to_owned()
        })
}

/// The step's prompt rendered with the envelope, for model backends: a `planner.*` reference
/// gets the envelope fields it declares (and the step's `inputs`); literal text is sent as is.
fn planner_prompt(
    context: &StepContext<'_>,
    evaluate: &Evaluate,
    input: &PlannerInput,
    envelope: &serde_json::Value,
) -> Result<String, OpcodeError> {
    match &evaluate.prompt.value {
        PromptSpec::Literal(text) => Ok(text.clone()),
        PromptSpec::Reference(reference) => {
            let prompt = context.run.catalog.resolve(reference.as_str())?;
            // A prompt names the fields it renders: looked up by name in the envelope, then
            // in the step's `inputs`, then in the evidence.
            let evidence = serde_json::to_value(&input.evidence).unwrap_or_default();
            let mut inputs = serde_json::Map::new();
            for declared in &prompt.inputs {
                let value = envelope
                    .get(&declared.name)
                    .or_else(|| input.inputs.as_ref()?.get(&declared.name))
                    .or_else(|| evidence.get(&declared.name))
                    .filter(|value| !value.is_null());
                if let Some(value) = value {
                    inputs.insert(declared.name.clone(), value.clone());
                }
            }
            Ok(crate::prompt::render(prompt, &inputs)?)
        }
    }
}

/// What asking the planner gave: its verdict and the record of its attempts, whether its
/// prompt was saved, and the watch kept around a planner process.
struct Asked {
    verdict: Verdict,
    attempts: Vec<Attempt>,
    prompt_saved: bool,
    watch: Option<Watch>,
}

/// Asks the step's planner, then applies the kernel's own safety facts and fills `next_step`
/// from the routes.
pub(super) fn decide(
    context: &StepContext<'_>,
    evaluate: &Evaluate,
    input: &PlannerInput,
    envelope: &serde_json::Value,
    visit_dir: &std::path::Path,
) -> Result<Decided, OpcodeError> {
    let name = planner_name(context, evaluate);
    let asked = ask(context, evaluate, (input, envelope), visit_dir, &name)?;
    // Checked before anything else can fail: what the planner moved is put back.
    let found = match asked.watch {
        Some(watch) => watch.finish(context, &name)?,
        None => Found::default(),
    };
    let attempts_saved = !asked.attempts.is_empty();
    if attempts_saved {
        let record = crate::planner::backend::PlannerAttempts {
            schema_version: crate::artifacts::SCHEMA_VERSION,
            attempts: asked.attempts,
        };
        write_json_new(&visit_dir.join(VisitDir::PLANNER_ATTEMPTS), &record)?;
    }
    let prompt_saved = asked.prompt_saved;
    let (mut decision, decided_by, answered, illegal) = match asked.verdict {
        // What the planner changed before it was stopped is recorded by `execute`, then the
        // interruption ends the visit.
        Verdict::Interrupted => {
            return Ok(Decided {
                decision: Decision::status(Status::Blocked),
                answered: None,
                illegal: None,
                interrupted: true,
                found,
                prompt_saved,
                attempts_saved,
            });
        }
        Verdict::Decided {
            decision,
            decided_by,
            answered,
        } => (decision, decided_by, answered, None),
        Verdict::Illegal { decision, reason } => {
            let decided_by = name.clone();
            let answered = Some(decision.status);
            (decision, decided_by, answered, Some(reason))
        }
    };
    if let Some(text) = super::super::step_policy::violation_text(&found.violations) {
        decision.raise(Status::Unsafe, "policy_violation", text);
    }
    if illegal.is_none() {
        apply_kernel_facts(context, evaluate, &mut decision);
    }
    decision.schema_version = Some(crate::artifacts::SCHEMA_VERSION);
    decision.planner = Some(name);
    decision.decided_by = Some(decided_by);
    Ok(Decided {
        decision,
        answered,
        illegal,
        interrupted: false,
        found,
        prompt_saved,
        attempts_saved,
    })
}

/// Asks the planner `name`: its prompt rendered and saved for a model, a planner process
/// watched; a planner that is not defined is the kernel's `planner_error` decision.
fn ask(
    context: &StepContext<'_>,
    evaluate: &Evaluate,
    (input, envelope): (&PlannerInput, &serde_json::Value),
    visit_dir: &std::path::Path,
    name: &str,
) -> Result<Asked, OpcodeError> {
    let backend = match Backend::from_config(name, &context.run.config) {
        Ok(backend) => backend,
        Err(error) => {
            let (decision, decided_by) = crate::planner::backend::failed(&error.into(), input);
            let verdict = Verdict::Decided {
                decision,
                decided_by,
                answered: None,
            };
            return Ok(Asked {
                verdict,
                attempts: Vec::new(),
                prompt_saved: false,
                watch: None,
            });
        }
    };
    let prompt_saved = backend.reads_prompt();
    let prompt = if prompt_saved {
        let text = planner_prompt(context, evaluate, input, envelope)?;
        let path = visit_dir.join(VisitDir::PLANNER_PROMPT);
        crate::artifacts::safe_files::write_new(&path, text.as_bytes()).map_err(|error| {
            OpcodeError::Other(format!("cannot save the planner prompt: {error}"))
        })?;
        text
    } else {
        String::new()
    };
    let variables = context.tnh_variables();
    // EVALUATE changes nothing: a planner process runs in the worktree, so what it changed
    // there is found by comparing the worktree before and after, and the repository around
    // it is guarded as around an agent.
    let watch = match backend {
        Backend::External(_) => Some(Watch::start(context, &backend, visit_dir)?),
        Backend::Rules => None,
    };
    let request = Request {
        envelope,
        input,
        prompt: &prompt,
        cwd: Some(context.workspace.path()),
        run_variables: Some(&variables),
        cancellation: &context.run.cancellation,
    };
    let (verdict, attempts) = crate::planner::backend::decide(&backend, &request);
    Ok(Asked {
        verdict,
        attempts,
        prompt_saved,
        watch,
    })
}

/// The kernel's own safety facts (pending goldens wait for a human), then `next_step` set to
/// the route the final status takes.
fn apply_kernel_facts(context: &StepContext<'_>, evaluate: &Evaluate, decision: &mut Decision) {
    if let Some(reported_by) = &context.state.safety.goldens_pending {
        decision.raise(
            Status::NeedsHuman,
            "proposed_goldens_present",
            format!("step `{reported_by}` proposed golden updates; a human approves goldens"),
        );
    }
    let status = decision.status.outcome();
    let routed = context
        .step
        .routes
        .target(status)
        .map(|target| target.value.as_str().to_owned())
        .filter(|target| {
            target == "STOP"
                || evaluate
                    .allowed_next_steps
                    .iter()
                    .any(|allowed| allowed.value.as_str() == target)
        });
    // The saved decision names the step the run actually takes: the route of the final
    // status (a guard raise or the kernel's safety facts may have changed it); what the
    // planner proposed stays in `planner_attempts.json`.
    decision.next_step = routed;
}
