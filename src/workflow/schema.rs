//! The workflow document's shape: the types below are its one description (keys, which are
//! required, value kinds, allowed values, what each is for).
//!
//! The JSON Schema (draft 2020-12) of `tnh-conductor schema workflow`, for editors
//! (yaml-language-server), is derived from them; so are the keys and value names the decoder
//! in `decode.rs` accepts (through [`crate::document::shape`]), which walks the positioned
//! YAML tree itself to report every problem where it is written. The enums of allowed values
//! are the model's own. No document is deserialized into these types: serde's derive is
//! what gives their keys in declaration order, as hints list them.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

pub use super::model::{
    ComponentKind, EvalProfile, GateKind, NetworkAccess as Network, Opcode, ParamType,
    RollbackTarget, StopOutcome, ValidatorKind,
};

/// The `$id` of the published schema.
pub const WORKFLOW_SCHEMA_ID: &str = "https://tnh-conductor.invalid/schemas/workflow.v1.json";

/// The workflow JSON Schema.
pub fn workflow_schema() -> serde_json::Value {
    let mut schema = schemars::schema_for!(WorkflowDocument).to_value();
    remove_null_alternatives(&mut schema);
    if let Some(object) = schema.as_object_mut() {
        object.insert("$id".into(), WORKFLOW_SCHEMA_ID.into());
    }
    schema
}

/// schemars lets every `Option` field be `null`; to the decoder an absent key and `null` differ,
/// so the published schema drops those `null` alternatives.
fn remove_null_alternatives(value: &mut serde_json::Value) {
    use serde_json::Value as Json;
    match value {
        Json::Object(object) => {
            if let Some(Json::Array(types)) = object.get_mut("type") {
                types.retain(|kind| kind != "null");
                if types.len() == 1 {
                    let single = types.remove(0);
                    object.insert("type".into(), single);
                }
            }
            if let Some(Json::Array(alternatives)) = object.get("anyOf") {
                let kept: Vec<Json> = alternatives
                    .iter()
                    .filter(|alternative| alternative.get("type").is_none_or(|kind| kind != "null"))
                    .cloned()
                    .collect();
                if kept.len() == 1 {
                    object.remove("anyOf");
                    if let Some(Json::Object(only)) = kept.into_iter().next() {
                        object.extend(only);
                    }
                } else {
                    object.insert("anyOf".into(), Json::Array(kept));
                }
            }
            object.values_mut().for_each(remove_null_alternatives);
        }
        Json::Array(items) => items.iter_mut().for_each(remove_null_alternatives),
        _ => {}
    }
}

/// A tnh-conductor workflow: steps of fixed opcodes, routed by outcome.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields, title = "tnh-conductor workflow")]
pub struct WorkflowDocument {
    /// Stable identifier of the workflow.
    #[schemars(regex(pattern = r"^[A-Za-z_][A-Za-z0-9_.-]*$"))]
    pub workflow_id: String,
    /// The workflow's own schema-and-behaviour version (raise it when behaviour changes).
    #[schemars(range(min = 1))]
    pub version: u32,
    /// What the workflow does.
    pub description: String,
    /// The id of the first step.
    pub entry_step: String,
    /// Shared configuration of all steps.
    pub defaults: Option<Defaults>,
    /// Named run parameters, given as `run WF -p name=value`.
    pub params: Option<BTreeMap<String, Param>>,
    /// A Rhai module whose functions expressions may call.
    pub script: Option<String>,
    /// The steps, each with a unique id.
    #[schemars(length(min = 1))]
    pub steps: Vec<Step>,
}

/// A duration such as `90s`, `20m`, `24h` or `1h30m`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(transparent)]
pub struct Duration(#[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h|d))+$"))] pub String);

/// A step id, or `STOP`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(transparent)]
pub struct Target(#[schemars(regex(pattern = r"^[A-Za-z_][A-Za-z0-9_.-]*$"))] pub String);

/// Any YAML value; strings may hold `${name}` substitutions and `${{ EXPR }}` expressions.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(transparent)]
pub struct Value(pub serde_json::Value);

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Defaults {
    /// Default policy of mutable steps.
    pub policy: Option<Policy>,
    /// Default limits.
    pub limits: Option<Limits>,
    /// Where run directories live: only `.tnh/run/`, the default, where every run command
    /// finds runs.
    #[schemars(regex(pattern = r"^(\./)?\.tnh/run/?$"))]
    pub artifacts_dir: Option<String>,
    /// Hint for harness synthesis prompts; the kernel does not interpret it.
    pub component_kind: Option<ComponentKind>,
    /// Validation depth hint; the kernel does not interpret it.
    pub eval_profile: Option<EvalProfile>,
    /// Planner profile of EVALUATE steps (`rules` is the offline default).
    pub planner: Option<String>,
}

/// Resource limits; a step's value overrides the default.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Limits {
    /// Wall-clock limit of a step.
    pub timeout: Option<Duration>,
    /// Limit on time without progress.
    pub idle_timeout: Option<Duration>,
    /// Agent turns.
    #[schemars(range(min = 1))]
    pub max_turns: Option<u32>,
    /// Spend limit in US dollars.
    #[schemars(range(min = 0))]
    pub max_budget_usd: Option<f64>,
    /// Visits of one step (default 10).
    #[schemars(range(min = 1))]
    pub max_visits: Option<u32>,
    /// Transitions of the whole run (default 200; in `defaults` only).
    #[schemars(range(min = 1))]
    pub max_transitions: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Param {
    /// The parameter's type.
    #[serde(rename = "type")]
    pub param_type: ParamType,
    /// Whether `-p name=…` must be given.
    pub required: Option<bool>,
    /// The value when not given.
    pub default: Option<Value>,
    /// What the parameter is for.
    pub description: Option<String>,
}

/// A `policy.*` prompt reference, or an inline policy.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Policy {
    Reference(
        #[schemars(regex(pattern = r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+\.v[0-9]+$"))] String,
    ),
    Inline(InlinePolicy),
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct InlinePolicy {
    /// Globs every change must match (`*` stays within a folder, `**` crosses folders).
    pub allowed_paths: Option<Vec<String>>,
    /// Globs no change may match.
    pub forbidden_paths: Option<Vec<String>>,
    /// Operation ids (enforced) or advisory text for the agent.
    pub forbidden_operations: Option<Vec<String>>,
    /// Name of a script function called for each changed file.
    pub check: Option<String>,
}

/// A list of context names, a mapping of values, or one `${{ EXPR }}` giving the mapping.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Inputs {
    Names(Vec<String>),
    Values(BTreeMap<String, Value>),
    Expression(String),
}

/// A list, or one `${{ EXPR }}` giving the list.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ValueList {
    Items(Vec<Value>),
    Expression(String),
}

/// A validator's environment: variable names to values, or one `${{ expression }}` giving
/// that map.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ValidatorEnv {
    Variables(BTreeMap<String, Value>),
    Expression(String),
}

/// One step; `opcode` selects its fields.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(tag = "opcode", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Step {
    /// Run a coding agent in the run's worktree.
    RunAgent(RunAgent),
    /// Run validators; `completed` only if all exit 0.
    RunValidation(RunValidation),
    /// Ask the planner for a bounded status.
    Evaluate(Evaluate),
    /// Ask a human.
    Gate(Gate),
    /// Reset the worktree to a snapshot.
    Rollback(Rollback),
    /// End the run.
    Stop(Stop),
}

/// The keys every step may hold, whatever its opcode, read before the opcode is known (and
/// listed first in hints). Each opcode's type repeats the ones it takes; a STOP takes no
/// `routes` (the decoder accepts the key there only to report it).
#[derive(Debug, Deserialize)]
pub struct StepHeader {
    pub id: Target,
    pub opcode: Opcode,
    pub description: Option<String>,
    pub routes: Option<BTreeMap<String, Target>>,
    pub allow_unreachable: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RunAgent {
    pub id: Target,
    pub description: Option<String>,
    pub allow_unreachable: Option<bool>,
    /// Agent profile: `claude-code`, `claude`, `codex` or one from .tnh/config.yaml.
    pub agent: String,
    /// A prompt reference `family.name.vN`, or the task text itself.
    pub prompt: String,
    pub inputs: Option<Inputs>,
    pub policy: Option<Policy>,
    pub limits: Option<Limits>,
    pub cwd: Option<String>,
    pub env: Option<BTreeMap<String, Value>>,
    pub routes: ProcessRoutes,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RunValidation {
    pub id: Target,
    pub description: Option<String>,
    pub allow_unreachable: Option<bool>,
    /// Validators: registered names, or inline specs.
    #[schemars(length(min = 1))]
    pub run: Vec<ValidatorEntry>,
    pub limits: Option<Limits>,
    pub policy: Option<Policy>,
    pub routes: ProcessRoutes,
}

/// A registered validator's name, or an inline validator.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ValidatorEntry {
    Named(String),
    Spec(Box<ValidatorSpec>),
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ValidatorSpec {
    pub id: String,
    pub kind: ValidatorKind,
    /// The script to run: required for script validators, refused on a builtin (which runs
    /// the command configured or detected for its id).
    pub entrypoint: Option<String>,
    pub args: Option<ValueList>,
    pub cwd: Option<String>,
    /// Globs of outputs to capture into the run directory.
    pub artifacts: Option<ValueList>,
    pub timeout: Option<Duration>,
    pub env: Option<ValidatorEnv>,
    /// Path of the harness report the validator writes.
    pub report: Option<String>,
    /// Network access: a script validator's default is deny, a builtin's allow
    /// (`network: deny` runs it in its own empty network namespace too).
    pub network: Option<Network>,
    /// The most output kept per stream and visit, in MiB (default 256); past it the
    /// validator is stopped and the step ends `killed_policy`.
    #[schemars(range(min = 1))]
    pub max_output_mib: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Evaluate {
    pub id: Target,
    pub description: Option<String>,
    pub allow_unreachable: Option<bool>,
    /// The planner prompt.
    pub prompt: String,
    /// Steps the planner may name as next_step.
    pub allowed_next_steps: Vec<Target>,
    /// Planner profile overriding the default.
    pub planner: Option<String>,
    pub inputs: Option<Inputs>,
    pub routes: PlannerRoutes,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Gate {
    pub id: Target,
    pub description: Option<String>,
    pub allow_unreachable: Option<bool>,
    pub gate: GateKind,
    /// Why a human is asked (expressions allowed).
    pub reason: Option<String>,
    /// Who may decide.
    pub approvers: Option<Vec<String>>,
    /// How long a blocking gate waits before `gate_timed_out`.
    pub timeout: Option<Duration>,
    pub routes: GateRoutes,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Rollback {
    pub id: Target,
    pub description: Option<String>,
    pub allow_unreachable: Option<bool>,
    /// `pre_run` or `pre_step` (`checkpoint:<id>` is reserved).
    pub target: RollbackTarget,
    pub routes: RollbackRoutes,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Stop {
    pub id: Target,
    pub description: Option<String>,
    pub allow_unreachable: Option<bool>,
    /// success (exit 0, the default) or failure (exit 1).
    pub outcome: Option<StopOutcome>,
    /// Why the run stops (expressions allowed).
    pub reason: Option<String>,
}

/// Outcome → step id or STOP; `*` routes every outcome not listed.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ProcessRoutes {
    pub completed: Option<Target>,
    pub error: Option<Target>,
    pub killed_timeout: Option<Target>,
    pub killed_idle: Option<Target>,
    pub killed_policy: Option<Target>,
    #[serde(rename = "*")]
    pub wildcard: Option<Target>,
}

/// Planner status → step id or STOP; every status must be routed.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct PlannerRoutes {
    pub success: Target,
    pub partial: Target,
    pub blocked: Target,
    #[serde(rename = "unsafe")]
    pub unsafe_status: Target,
    pub needs_human: Target,
}

/// Gate outcome → step id or STOP.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct GateRoutes {
    pub gate_approved: Option<Target>,
    pub gate_rejected: Option<Target>,
    pub gate_timed_out: Option<Target>,
    pub gate_queued: Option<Target>,
    #[serde(rename = "*")]
    pub wildcard: Option<Target>,
}

/// Rollback outcome → step id or STOP.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RollbackRoutes {
    pub completed: Option<Target>,
    pub error: Option<Target>,
    #[serde(rename = "*")]
    pub wildcard: Option<Target>,
}
