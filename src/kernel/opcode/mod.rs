//! Opcode executors behind one interface: each runs one visit of a step and reports what
//! happened; none decides where the run goes next (the kernel routes).

mod context;
mod evaluate;
pub mod gate;
mod rollback;
mod run_agent;
mod run_validation;
mod step_policy;
mod stop;
mod stop_cause;
pub(crate) use stop_cause::failure_causes;
pub mod validators;

pub use context::{RunContext, StepContext, StepResult};
pub(crate) use evaluate::{planner_guard_violations, planner_worktree_change};
pub(crate) use run_agent::remove_guard_state;

use crate::artifacts::event_payload::StepFailed;
use crate::workflow::model::StepBody;

/// A step could not be executed at all (as opposed to producing an outcome): the run ends
/// with a recorded runtime error.
#[derive(Debug, thiserror::Error)]
pub enum OpcodeError {
    /// The workspace failed (git, files).
    #[error(transparent)]
    Workspace(#[from] crate::workspace::WorkspaceError),
    /// The policy could not be compiled.
    #[error(transparent)]
    Policy(#[from] crate::policy::PolicyError),
    /// The agent could not be started or recorded.
    #[error(transparent)]
    Runner(#[from] crate::runner::RunnerError),
    /// Writing the run directory failed.
    #[error(transparent)]
    Artifacts(#[from] crate::artifacts::ArtifactsError),
    /// A prompt could not be resolved or rendered.
    #[error(transparent)]
    Prompt(#[from] crate::prompt::PromptError),
    /// An expression or script failed.
    #[error(transparent)]
    Script(#[from] crate::script::ScriptError),
    /// This opcode lands in a later release.
    #[error("{0} steps are not implemented yet")]
    NotImplemented(&'static str),
    /// The planner named a `next_step` outside `allowed_next_steps`.
    #[error("planner `{planner}` answered an illegal decision: {reason} (saved at {path})")]
    IllegalDecision {
        /// The planner profile.
        planner: String,
        /// What is wrong.
        reason: crate::planner::backend::IllegalNextStep,
        /// The saved decision, relative to the run directory.
        path: String,
    },
    /// Validators the step names are neither configured nor detectable in the worktree: a
    /// misconfiguration, told apart from a failing check (no validator of the step ran).
    #[error("{} not configured and cannot be detected in the worktree (no Cargo.toml, package.json script or Python project provides {}): set {} in .tnh/config.yaml", validator_names(names), if names.len() == 1 { "it" } else { "them" }, names.iter().map(|name| format!("validators.{name}")).collect::<Vec<_>>().join(", "))]
    ValidatorsNotConfigured {
        /// The validators, as the step names them.
        names: Vec<String>,
    },
    /// A `python -m` validator's interpreter does not have its module: a missing tool, told
    /// apart from failing tests (nothing of the check ran).
    #[error(
        "validator `{validator}` could not run: `{command}` says Python has no module `{module}`"
    )]
    ValidatorCouldNotRun {
        /// The validator id.
        validator: String,
        /// Its command.
        command: String,
        /// The module.
        module: String,
    },
    /// A validator's `cwd` is absolute or leaves the worktree.
    #[error("validator `{validator}` of step `{step}`: `cwd` `{cwd}` ({at}) {reason}")]
    ValidatorCwd {
        /// The step.
        step: String,
        /// The validator id.
        validator: String,
        /// The `cwd` as evaluated.
        cwd: String,
        /// Where it is written: `FILE:LINE:COLUMN`.
        at: String,
        /// Why it is refused.
        reason: String,
    },
    /// A RUN_AGENT step's `cwd` is absolute, leaves the worktree or is not a folder of it.
    #[error("step `{step}`: `cwd` `{cwd}` ({at}) {reason}")]
    AgentCwd {
        /// The step.
        step: String,
        /// The `cwd` as evaluated.
        cwd: String,
        /// Where it is written: `FILE:LINE:COLUMN`.
        at: String,
        /// Why it is refused.
        reason: String,
    },
    /// Something else, described.
    #[error("{0}")]
    Other(String),
}

/// "validator `a` is" or "validators `a`, `b` are".
fn validator_names(names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|name| format!("`{name}`")).collect();
    match quoted.as_slice() {
        [one] => format!("validator {one} is"),
        many => format!("validators {} are", many.join(", ")),
    }
}

impl OpcodeError {
    /// What to do about it.
    pub fn hint(&self) -> Option<String> {
        match self {
            OpcodeError::Workspace(error) => error.hint(),
            OpcodeError::Policy(error) => error.hint(),
            OpcodeError::Runner(error) => error.hint(),
            OpcodeError::Artifacts(error) => error.hint(),
            // The prompt library's hint speaks of `prompts render -i`; in a run, inputs come
            // from the step.
            // A failed render (`PromptError::Render`) keeps its own hint: the fix is in the
            // template it names.
            OpcodeError::Prompt(crate::prompt::PromptError::Inputs { .. }) => Some(
                "give the step's `inputs` every input the prompt requires, with its declared type (a run parameter of that name, a written value or a `${{ }}` expression); `tnh-conductor prompts show REF` lists them"
                    .into(),
            ),
            OpcodeError::Prompt(error) => error.hint(),
            OpcodeError::Script(error) => error.hint(),
            OpcodeError::NotImplemented(_) => Some(
                "this opcode arrives with its own issue; use RUN_AGENT, ROLLBACK and STOP for now"
                    .into(),
            ),
            OpcodeError::IllegalDecision { .. } => Some(
                "the planner may only name a step of `allowed_next_steps`; fix the planner or its prompt, then start a new run (check it with `tnh-conductor planner check`)"
                    .into(),
            ),
            OpcodeError::ValidatorsNotConfigured { names } => Some(format!(
                "a misconfiguration, not a failing check: give each its command under `validators:` in .tnh/config.yaml (e.g. `{}: {{argv: [make, {}]}}`) or drop it from the step's `run:`, then `tnh-conductor resume RUN_ID` runs the step again",
                names[0], names[0]
            )),
            OpcodeError::ValidatorCouldNotRun { validator, module, .. } => Some(format!(
                "a missing tool, not a failing check: install `{module}` for that interpreter (or activate the project's virtual environment), or set `validators.{validator}` in .tnh/config.yaml, then `tnh-conductor resume RUN_ID` runs the step again"
            )),
            OpcodeError::ValidatorCwd { .. } => Some(
                "validators run inside the run's worktree: make `cwd` a folder relative to its root, without `..` above it or a link out of it (e.g. `crates/core`)"
                    .into(),
            ),
            OpcodeError::AgentCwd { .. } => Some(
                "agents run inside the run's worktree: make `cwd` a folder of it, relative to its root, without `..` above it or a link out of it (e.g. `crates/core`)"
                    .into(),
            ),
            OpcodeError::Other(_) => None,
        }
    }
}

impl OpcodeError {
    /// Where the error is, for the `step_failed` event beside its `error` and `hint`: for a
    /// script error the workflow `file`, `line` and `column`, the kind of `code` and the
    /// `code_position` inside it (docs/scripting.md); empty for other errors.
    pub fn step_failed(&self) -> StepFailed {
        let located = match self {
            OpcodeError::Script(error) => error.step_failed(),
            _ => StepFailed::default(),
        };
        StepFailed {
            error: self.to_string(),
            resumable: self.is_resumable().then_some(true),
            hint: self.hint(),
            ..located
        }
    }

    /// True for a step stopped by something the operator fixes, after which `resume` runs
    /// the step again from its snapshot:
    /// - a step that could not start for a reason in the configuration or on the machine (a
    ///   missing program, an unknown or invalid agent profile, a validator neither configured
    ///   nor detectable): nothing of the step ran;
    /// - a git of the conductor's killed at its limit (`TNH_GIT_TIMEOUT`), waiting on
    ///   something that never came: the step stops where it was, as if the conductor had been
    ///   killed there;
    /// - a workflow expression or hook that failed (an error it threw, an absent map key, a
    ///   sandbox limit): the workflow is fixed and `resume` evaluates it again with the edited
    ///   file (recorded as `workflow_changed`).
    ///
    /// The run stops resumable instead of ending.
    pub fn is_resumable(&self) -> bool {
        use crate::runner::RunnerError;
        use crate::workspace::WorkspaceError;
        matches!(
            self,
            OpcodeError::ValidatorsNotConfigured { .. }
                | OpcodeError::ValidatorCouldNotRun { .. }
                | OpcodeError::Runner(
                    RunnerError::Spawn { .. }
                        | RunnerError::UnknownAgent { .. }
                        | RunnerError::Profile { .. }
                )
                | OpcodeError::Workspace(WorkspaceError::GitTimedOut { .. })
        ) || matches!(self, OpcodeError::Script(error) if error.location().is_some())
    }
}

/// Runs one visit of the context's step.
///
/// What scripts print (`print`, `debug`) is recorded as `script_output` events: output still
/// pending when the visit starts (the script's top level, run when the run loaded it) as the
/// run's, without a step; output of the visit's expressions and hooks (a gate's or STOP's
/// `reason`, computed inputs, validator fields) under the visit, whether the step succeeded
/// or failed.
pub fn execute(context: &mut StepContext<'_>) -> Result<StepResult, OpcodeError> {
    step_policy::record_run_output(context)?;
    let result = match &context.step.body {
        StepBody::RunAgent(agent) => run_agent::execute(context, agent),
        StepBody::Rollback(rollback) => rollback::execute(context, rollback),
        StepBody::Stop(stop) => stop::execute(context, stop),
        StepBody::RunValidation(validation) => run_validation::execute(context, validation),
        StepBody::Evaluate(evaluate) => evaluate::execute(context, evaluate),
        StepBody::Gate(gate) => gate::execute(context, gate),
    };
    let recorded = step_policy::record_script_output(context);
    match result {
        // A failure that could not be recorded does not hide the step's own error.
        Err(error) => Err(error),
        Ok(result) => recorded.map(|()| result),
    }
}
