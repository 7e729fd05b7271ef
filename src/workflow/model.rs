//! The workflow document model. Every value that a diagnostic may
//! point at keeps its source position.

use std::time::Duration;

use super::yaml::{Node, Pos};
pub use crate::document::at::At;
use crate::document::shape::{self, Names, names_only};
use crate::ids::{PromptRef, StepId, WorkflowId};
use crate::outcome::Outcome;
pub use crate::script::expressions::{NodeList, is_whole_expression};

/// A whole workflow document.
#[derive(Debug, Clone, PartialEq)]
pub struct Workflow {
    /// `workflow_id`.
    pub workflow_id: At<WorkflowId>,
    /// `version`: the workflow's own schema-and-behaviour version.
    pub version: At<i64>,
    /// `description`.
    pub description: At<String>,
    /// `entry_step`.
    pub entry_step: At<StepId>,
    /// `defaults`.
    pub defaults: Defaults,
    /// `params`, in source order.
    pub params: Vec<Param>,
    /// `script`: a Rhai module whose functions steps may call.
    pub script: Option<At<String>>,
    /// `steps`, in source order.
    pub steps: Vec<Step>,
    /// Steps that could not be decoded whole (an unknown opcode, a field of the wrong type),
    /// kept by id and routes so the checks across steps (ids, entry step, targets,
    /// reachability) report only real problems. A workflow with any is invalid.
    pub step_outlines: Vec<StepOutline>,
}

impl crate::script::WorkflowScript for Workflow {
    fn script(&self) -> Option<&At<String>> {
        self.script.as_ref()
    }
}

/// What is known of a step that could not be decoded whole.
#[derive(Debug, Clone, PartialEq)]
pub struct StepOutline {
    /// `id`.
    pub id: At<StepId>,
    /// Where the step's mapping starts.
    pub pos: Pos,
    /// The opcode, when it was valid.
    pub opcode: Option<Opcode>,
    /// `routes`, as far as they could be read.
    pub routes: Routes,
    /// `allow_unreachable: true`.
    pub allow_unreachable: bool,
}

impl Workflow {
    /// The step with this id.
    pub fn step(&self, id: &str) -> Option<&Step> {
        self.steps.iter().find(|step| step.id.value.as_str() == id)
    }
}

/// The `defaults` block.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Defaults {
    /// Default policy of mutable steps.
    pub policy: Option<At<PolicySpec>>,
    /// Default limits.
    pub limits: Limits,
    /// Where run directories live (default `.tnh/run/`).
    pub artifacts_dir: Option<At<String>>,
    /// Harness-synthesis hint; the kernel does not interpret it.
    pub component_kind: Option<At<ComponentKind>>,
    /// Validation-depth hint; the kernel does not interpret it.
    pub eval_profile: Option<At<EvalProfile>>,
    /// The planner profile of EVALUATE steps.
    pub planner: Option<At<String>>,
}

/// Hint for harness synthesis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(transform = names_only)]
pub enum ComponentKind {
    /// Documentation.
    Docs,
    /// A command-line tool.
    Cli,
    /// A web front end.
    Web,
    /// A VS Code extension UI.
    VscodeUi,
    /// A library.
    Library,
}

impl ComponentKind {
    /// The names accepted in documents, in declaration order.
    pub const NAMES: Names<Self> = Names::new();
}

/// Validation depth hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(transform = names_only)]
pub enum EvalProfile {
    /// Quick checks.
    Smoke,
    /// Thorough overnight checks.
    Overnight,
    /// Everything before a release.
    ReleaseCandidate,
}

impl EvalProfile {
    /// The names accepted in documents, in declaration order.
    pub const NAMES: Names<Self> = Names::new();
}

/// Resource limits, in `defaults` or on a step; a step's value overrides the default.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Limits {
    /// Wall-clock limit of a step.
    pub timeout: Option<At<Duration>>,
    /// Limit on time without progress.
    pub idle_timeout: Option<At<Duration>>,
    /// Agent turns.
    pub max_turns: Option<At<u32>>,
    /// Spend in US dollars.
    pub max_budget_usd: Option<At<f64>>,
    /// Visits of one step (default 10).
    pub max_visits: Option<At<u32>>,
    /// Transitions of the run (default 200; `defaults` only).
    pub max_transitions: Option<At<u32>>,
}

impl Limits {
    /// The default `max_visits` per step.
    pub const DEFAULT_MAX_VISITS: u32 = 10;
    /// The default `max_transitions` per run.
    pub const DEFAULT_MAX_TRANSITIONS: u32 = 200;
}

/// One declared run parameter.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    /// Its name (`params.NAME`).
    pub name: At<String>,
    /// Its type.
    pub param_type: At<ParamType>,
    /// Whether `-p name=…` must be given.
    pub required: bool,
    /// The value when not given.
    pub default: Option<Node>,
    /// What it is for.
    pub description: Option<At<String>>,
}

/// The type of a run parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(transform = names_only)]
pub enum ParamType {
    /// Text.
    String,
    /// A whole number.
    Int,
    /// `true`/`false`.
    Bool,
    /// A YAML list.
    List,
    /// A YAML mapping.
    Map,
}

impl ParamType {
    /// The names accepted in documents.
    pub const NAMES: Names<Self> = Names::new();

    /// Parses a document name.
    pub fn parse(name: &str) -> Option<Self> {
        shape::parse(name)
    }

    /// The document name.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

/// One step.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// `id`.
    pub id: At<StepId>,
    /// Where the step's mapping starts.
    pub pos: Pos,
    /// `description`.
    pub description: Option<At<String>>,
    /// `allow_unreachable: true` silences the unreachable-step rule.
    pub allow_unreachable: bool,
    /// `routes`, in source order.
    pub routes: Routes,
    /// What the opcode does.
    pub body: StepBody,
}

/// The opcode of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Opcode {
    /// Run a coding agent.
    RunAgent,
    /// Run validators.
    RunValidation,
    /// Ask the planner.
    Evaluate,
    /// Ask a human.
    Gate,
    /// Reset the worktree to a snapshot.
    Rollback,
    /// End the run.
    Stop,
}

impl Opcode {
    /// The names used in documents.
    pub const NAMES: Names<Self> = Names::new();

    /// Parses a document name.
    pub fn parse(name: &str) -> Option<Self> {
        shape::parse(name)
    }

    /// The document name.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// Whether a step of this opcode may change the worktree (agents, validators, rollbacks).
    pub fn may_change_worktree(self) -> bool {
        matches!(
            self,
            Opcode::RunAgent | Opcode::RunValidation | Opcode::Rollback
        )
    }
}

/// Opcode-specific fields of a step.
#[derive(Debug, Clone, PartialEq)]
pub enum StepBody {
    /// RUN_AGENT.
    RunAgent(RunAgent),
    /// RUN_VALIDATION.
    RunValidation(RunValidation),
    /// EVALUATE.
    Evaluate(Evaluate),
    /// GATE.
    Gate(Gate),
    /// ROLLBACK.
    Rollback(Rollback),
    /// STOP.
    Stop(Stop),
}

impl StepBody {
    /// The step's opcode.
    pub fn opcode(&self) -> Opcode {
        match self {
            StepBody::RunAgent(_) => Opcode::RunAgent,
            StepBody::RunValidation(_) => Opcode::RunValidation,
            StepBody::Evaluate(_) => Opcode::Evaluate,
            StepBody::Gate(_) => Opcode::Gate,
            StepBody::Rollback(_) => Opcode::Rollback,
            StepBody::Stop(_) => Opcode::Stop,
        }
    }
}

/// A prompt: a library reference `family.name.vN` or literal task text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptSpec {
    /// Resolved in the prompt library.
    Reference(PromptRef),
    /// Sent as written (after `${…}` substitution).
    Literal(String),
}

impl PromptSpec {
    /// Classifies prompt text: a single token shaped `family.name.vN` is a reference.
    pub fn classify(text: &str) -> Self {
        if is_prompt_reference(text) {
            PromptSpec::Reference(PromptRef::new(text))
        } else {
            PromptSpec::Literal(text.to_owned())
        }
    }
}

/// True for `family.name.vN`: lowercase dotted identifiers ending in a version.
pub fn is_prompt_reference(text: &str) -> bool {
    let parts: Vec<&str> = text.split('.').collect();
    let identifier = |part: &&str| {
        part.chars()
            .next()
            .is_some_and(|first| first.is_ascii_lowercase())
            && part
                .chars()
                .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_')
    };
    let Some((version, names)) = parts.split_last() else {
        return false;
    };
    names.len() >= 2
        && names.iter().all(identifier)
        && version.strip_prefix('v').is_some_and(|digits| {
            !digits.is_empty() && digits.chars().all(|ch| ch.is_ascii_digit())
        })
}

/// The inputs of a step: names taken from the run context, or a mapping of values.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Inputs {
    /// No inputs.
    #[default]
    None,
    /// `inputs: [diff, component_kind]`: context values by name.
    Names(Vec<At<String>>),
    /// `inputs: {adr_id: "${{ params.adr }}"}`: computed values.
    Values(Vec<(At<String>, Node)>),
    /// `inputs: "${{ package_inputs() }}"`: one expression whose value is the mapping.
    Expression(Node),
}

/// A policy: a `policy.*` prompt reference or an inline definition.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicySpec {
    /// `policy: policy.workspace_safety.v1`.
    Reference(PromptRef),
    /// An inline map.
    Inline(InlinePolicy),
}

/// The fields of an inline policy.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct InlinePolicy {
    /// Globs changes must match.
    pub allowed_paths: Vec<At<String>>,
    /// Globs changes must not match.
    pub forbidden_paths: Vec<At<String>>,
    /// Operation ids (enforced) or advisory text.
    pub forbidden_operations: Vec<At<String>>,
    /// Name of a script function called for each changed file.
    pub check: Option<At<String>>,
}

/// RUN_AGENT fields.
#[derive(Debug, Clone, PartialEq)]
pub struct RunAgent {
    /// Agent profile name.
    pub agent: At<String>,
    /// The task.
    pub prompt: At<PromptSpec>,
    /// Inputs for the prompt.
    pub inputs: Inputs,
    /// Policy checked on the step's diff.
    pub policy: Option<At<PolicySpec>>,
    /// Limits overriding the defaults.
    pub limits: Limits,
    /// Working directory relative to the worktree.
    pub cwd: Option<Node>,
    /// Extra environment for the agent.
    pub env: Vec<(At<String>, Node)>,
}

/// RUN_VALIDATION fields.
#[derive(Debug, Clone, PartialEq)]
pub struct RunValidation {
    /// The validators, in order.
    pub run: Vec<ValidatorEntry>,
    /// Limits overriding the defaults.
    pub limits: Limits,
    /// Policy checked on the step's diff.
    pub policy: Option<At<PolicySpec>>,
}

/// One entry of `run`.
#[derive(Debug, Clone, PartialEq)]
pub enum ValidatorEntry {
    /// `"tests"`: a registered validator.
    Named(At<String>),
    /// An inline validator.
    Spec(Box<ValidatorSpec>),
}

impl ValidatorEntry {
    /// The validator's id.
    pub fn id(&self) -> &At<String> {
        match self {
            ValidatorEntry::Named(name) => name,
            ValidatorEntry::Spec(spec) => &spec.id,
        }
    }
}

/// Builtin or script validator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(transform = names_only)]
pub enum ValidatorKind {
    /// A registered validator, by id.
    Builtin,
    /// An entrypoint script (e.g. a generated harness).
    Script,
}

/// Network access of a validator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(transform = names_only, rename = "Network")]
pub enum NetworkAccess {
    /// No network where the platform can enforce it (the default).
    #[default]
    Deny,
    /// Network allowed.
    Allow,
}

impl ValidatorSpec {
    /// The network access the validator runs with: as written, else the kind's default.
    pub fn network_access(&self) -> NetworkAccess {
        self.network.unwrap_or(match self.kind.value {
            ValidatorKind::Script => NetworkAccess::Deny,
            ValidatorKind::Builtin => NetworkAccess::Allow,
        })
    }
}

/// An inline validator.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidatorSpec {
    /// Unique id within the step.
    pub id: At<String>,
    /// builtin or script.
    pub kind: At<ValidatorKind>,
    /// Command or script path (script validators).
    pub entrypoint: Option<Node>,
    /// Arguments (expressions allowed).
    pub args: NodeList,
    /// Working directory.
    pub cwd: Option<Node>,
    /// Globs of outputs to capture.
    pub artifacts: NodeList,
    /// Wall-clock limit of this validator.
    pub timeout: Option<At<Duration>>,
    /// Extra environment.
    pub env: Vec<(At<String>, Node)>,
    /// `env` written as one `${{ … }}` giving the whole map, checked when the validator runs.
    pub env_expression: Option<Node>,
    /// Path of the harness report it writes.
    pub report: Option<Node>,
    /// Network access as written; when absent, a script validator has none
    /// ([`NetworkAccess::Deny`]) and a builtin the host's ([`NetworkAccess::Allow`]).
    pub network: Option<NetworkAccess>,
    /// The most output kept per stream and visit, in MiB (default 256).
    pub max_output_mib: Option<At<u32>>,
    /// Where the entry starts.
    pub pos: Pos,
}

/// EVALUATE fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluate {
    /// The planner prompt.
    pub prompt: At<PromptSpec>,
    /// Steps the planner may name as `next_step`.
    pub allowed_next_steps: Vec<At<StepId>>,
    /// Planner profile overriding the default.
    pub planner: Option<At<String>>,
    /// Inputs for the planner prompt.
    pub inputs: Inputs,
}

/// GATE kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(transform = names_only)]
pub enum GateKind {
    /// Block until approved or rejected.
    RequiresApproval,
    /// Same as `requires_approval`.
    BlockingApproval,
    /// Continue at once; the work lands in the review journal.
    QueueForReview,
    /// Continue at once; reviewed in the daily journal.
    RequiresDailyReview,
}

impl GateKind {
    /// The names accepted in documents.
    pub const NAMES: Names<Self> = Names::new();

    /// Whether the run waits for a human decision.
    pub fn is_blocking(self) -> bool {
        matches!(
            self,
            GateKind::RequiresApproval | GateKind::BlockingApproval
        )
    }
}

/// GATE fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    /// The gate type.
    pub gate: At<GateKind>,
    /// Why a human is asked (expressions allowed).
    pub reason: Option<Node>,
    /// Who may decide.
    pub approvers: Vec<At<String>>,
    /// How long a blocking gate waits.
    pub timeout: Option<At<Duration>>,
}

/// Where ROLLBACK resets the worktree.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(transform = names_only)]
pub enum RollbackTarget {
    /// The base the run started from.
    PreRun,
    /// The snapshot before the most recent RUN_AGENT.
    PreStep,
}

/// ROLLBACK fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Rollback {
    /// The snapshot to reset to.
    pub target: At<RollbackTarget>,
}

/// How a STOP step ends the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(transform = names_only)]
pub enum StopOutcome {
    /// Exit 0.
    #[default]
    Success,
    /// Exit 1.
    Failure,
}

/// STOP fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Stop {
    /// success or failure.
    pub outcome: StopOutcome,
    /// Whether `outcome` was written (a STOP without it is a success stop by default).
    pub outcome_written: bool,
    /// Why the run stops (expressions allowed).
    pub reason: Option<Node>,
}

/// A route key: an outcome, or `*` for every mechanical outcome not listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RouteKey {
    /// One outcome.
    Outcome(Outcome),
    /// `*`.
    Wildcard,
}

/// The `routes` of a step, in source order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Routes {
    /// Key → target.
    pub entries: Vec<(At<RouteKey>, At<StepId>)>,
    /// Where `routes` was written, when it was.
    pub pos: Option<Pos>,
    /// Targets of entries whose key is not an outcome (reported already): they still count
    /// as routes to their target, so the target is not called unreachable.
    pub unkeyed_targets: Vec<At<StepId>>,
    /// Whether an entry could not be read (reported already): which outcomes are routed is
    /// then unknown, so missing routes and paths to STOP are not judged.
    pub incomplete: bool,
}

impl Routes {
    /// The target an outcome routes to: its own key, else `*`.
    pub fn target(&self, outcome: Outcome) -> Option<&At<StepId>> {
        let exact = self
            .entries
            .iter()
            .find(|(key, _)| key.value == RouteKey::Outcome(outcome));
        exact
            .or_else(|| {
                self.entries
                    .iter()
                    .find(|(key, _)| key.value == RouteKey::Wildcard)
            })
            .map(|(_, target)| target)
    }

    /// Whether `routes` lists this outcome explicitly.
    pub fn lists(&self, outcome: Outcome) -> bool {
        self.entries
            .iter()
            .any(|(key, _)| key.value == RouteKey::Outcome(outcome))
    }
}

/// The outcomes an opcode can produce, for a given step (a gate's timeout matters).
pub fn producible_outcomes(body: &StepBody) -> Vec<Outcome> {
    match body {
        StepBody::RunAgent(_) | StepBody::RunValidation(_) => Outcome::PROCESS.to_vec(),
        StepBody::Evaluate(_) => Outcome::PLANNER.to_vec(),
        StepBody::Gate(gate) if gate.gate.value.is_blocking() => {
            let mut outcomes = vec![Outcome::GateApproved, Outcome::GateRejected];
            if gate.timeout.is_some() {
                outcomes.push(Outcome::GateTimedOut);
            }
            outcomes
        }
        StepBody::Gate(_) => vec![Outcome::GateQueued],
        StepBody::Rollback(_) => vec![Outcome::Completed, Outcome::Error],
        StepBody::Stop(_) => Vec::new(),
    }
}

/// The outcomes a route key may name on this step: what it can produce, plus
/// `gate_timed_out` on a blocking gate without a timeout (harmless).
pub fn routable_outcomes(body: &StepBody) -> Vec<Outcome> {
    let mut outcomes = producible_outcomes(body);
    if let StepBody::Gate(gate) = body
        && gate.gate.value.is_blocking()
        && !outcomes.contains(&Outcome::GateTimedOut)
    {
        outcomes.push(Outcome::GateTimedOut);
    }
    outcomes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_references_are_told_from_literal_text() {
        assert!(is_prompt_reference("task.implement_adr.v2"));
        assert!(is_prompt_reference("planner.evaluate_results.v1"));
        assert!(!is_prompt_reference("task.implement_adr"));
        assert!(!is_prompt_reference("Fix the failing tests.v1"));
        assert!(!is_prompt_reference("task.v1"));
        assert!(!is_prompt_reference("Task.x.v1"));
        assert_eq!(
            PromptSpec::classify("Add a greeting to README.md"),
            PromptSpec::Literal("Add a greeting to README.md".into())
        );
    }

    #[test]
    fn wildcard_routes_fill_unlisted_outcomes_only() {
        let pos = Pos::new(1, 1);
        let routes = Routes {
            entries: vec![
                (
                    At::new(RouteKey::Outcome(Outcome::Completed), pos),
                    At::new(StepId::new("next"), pos),
                ),
                (
                    At::new(RouteKey::Wildcard, pos),
                    At::new(StepId::new("STOP"), pos),
                ),
            ],
            pos: Some(pos),
            ..Routes::default()
        };
        assert_eq!(
            routes.target(Outcome::Completed).unwrap().value.as_str(),
            "next"
        );
        assert_eq!(
            routes.target(Outcome::KilledIdle).unwrap().value.as_str(),
            "STOP"
        );
    }
}
