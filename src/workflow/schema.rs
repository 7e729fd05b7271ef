//! The JSON Schema (draft 2020-12) of workflow documents, for editors (yaml-language-server)
//! and for `tnh-conductor schema workflow`.
//!
//! The types below exist only to describe the document; the decoder in `decode.rs` is what
//! reads workflows. A test checks that both accept the same keys and that every valid fixture
//! passes the schema, so the two cannot drift apart silently.

#![allow(dead_code)]

use std::collections::BTreeMap;

use schemars::JsonSchema;

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
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields, title = "tnh-conductor workflow")]
struct WorkflowDocument {
    /// Stable identifier of the workflow.
    #[schemars(regex(pattern = r"^[A-Za-z_][A-Za-z0-9_.-]*$"))]
    workflow_id: String,
    /// The workflow's own schema-and-behaviour version (raise it when behaviour changes).
    #[schemars(range(min = 1))]
    version: u32,
    /// What the workflow does.
    description: String,
    /// The id of the first step.
    entry_step: String,
    /// Shared configuration of all steps.
    defaults: Option<Defaults>,
    /// Named run parameters, given as `run WF -p name=value`.
    params: Option<BTreeMap<String, Param>>,
    /// A Rhai module whose functions expressions may call.
    script: Option<String>,
    /// The steps, each with a unique id.
    #[schemars(length(min = 1))]
    steps: Vec<Step>,
}

/// A duration such as `90s`, `20m`, `24h` or `1h30m`.
#[derive(JsonSchema)]
#[schemars(transparent)]
struct Duration(#[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h|d))+$"))] String);

/// A step id, or `STOP`.
#[derive(JsonSchema)]
#[schemars(transparent)]
struct Target(#[schemars(regex(pattern = r"^[A-Za-z_][A-Za-z0-9_.-]*$"))] String);

/// Any YAML value; strings may hold `${name}` substitutions and `${{ EXPR }}` expressions.
#[derive(JsonSchema)]
#[schemars(transparent)]
struct Value(serde_json::Value);

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct Defaults {
    /// Default policy of mutable steps.
    policy: Option<Policy>,
    /// Default limits.
    limits: Option<Limits>,
    /// Where run directories live: only `.tnh/run/`, the default, where every run command
    /// finds runs.
    #[schemars(regex(pattern = r"^(\./)?\.tnh/run/?$"))]
    artifacts_dir: Option<String>,
    /// Hint for harness synthesis prompts; the kernel does not interpret it.
    component_kind: Option<ComponentKind>,
    /// Validation depth hint; the kernel does not interpret it.
    eval_profile: Option<EvalProfile>,
    /// Planner profile of EVALUATE steps (`rules` is the offline default).
    planner: Option<String>,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum ComponentKind {
    Docs,
    Cli,
    Web,
    VscodeUi,
    Library,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum EvalProfile {
    Smoke,
    Overnight,
    ReleaseCandidate,
}

/// Resource limits; a step's value overrides the default.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct Limits {
    /// Wall-clock limit of a step.
    timeout: Option<Duration>,
    /// Limit on time without progress.
    idle_timeout: Option<Duration>,
    /// Agent turns.
    #[schemars(range(min = 1))]
    max_turns: Option<u32>,
    /// Spend limit in US dollars.
    #[schemars(range(min = 0))]
    max_budget_usd: Option<f64>,
    /// Visits of one step (default 10).
    #[schemars(range(min = 1))]
    max_visits: Option<u32>,
    /// Transitions of the whole run (default 200; in `defaults` only).
    #[schemars(range(min = 1))]
    max_transitions: Option<u32>,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct Param {
    /// The parameter's type.
    #[serde(rename = "type")]
    param_type: ParamType,
    /// Whether `-p name=…` must be given.
    required: Option<bool>,
    /// The value when not given.
    default: Option<Value>,
    /// What the parameter is for.
    description: Option<String>,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum ParamType {
    String,
    Int,
    Bool,
    List,
    Map,
}

/// A `policy.*` prompt reference, or an inline policy.
#[derive(JsonSchema)]
#[serde(untagged)]
enum Policy {
    Reference(
        #[schemars(regex(pattern = r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+\.v[0-9]+$"))] String,
    ),
    Inline(InlinePolicy),
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct InlinePolicy {
    /// Globs every change must match (`*` stays within a folder, `**` crosses folders).
    allowed_paths: Option<Vec<String>>,
    /// Globs no change may match.
    forbidden_paths: Option<Vec<String>>,
    /// Operation ids (enforced) or advisory text for the agent.
    forbidden_operations: Option<Vec<String>>,
    /// Name of a script function called for each changed file.
    check: Option<String>,
}

/// A list of context names, a mapping of values, or one `${{ EXPR }}` giving the mapping.
#[derive(JsonSchema)]
#[serde(untagged)]
enum Inputs {
    Names(Vec<String>),
    Values(BTreeMap<String, Value>),
    Expression(String),
}

/// A list, or one `${{ EXPR }}` giving the list.
#[derive(JsonSchema)]
#[serde(untagged)]
enum ValueList {
    Items(Vec<Value>),
    Expression(String),
}

/// A validator's environment: variable names to values, or one `${{ expression }}` giving
/// that map.
#[derive(JsonSchema)]
#[serde(untagged)]
enum ValidatorEnv {
    Variables(BTreeMap<String, Value>),
    Expression(String),
}

/// One step; `opcode` selects its fields.
#[derive(JsonSchema)]
#[serde(tag = "opcode")]
enum Step {
    /// Run a coding agent in the run's worktree.
    #[serde(rename = "RUN_AGENT")]
    RunAgent(RunAgent),
    /// Run validators; `completed` only if all exit 0.
    #[serde(rename = "RUN_VALIDATION")]
    RunValidation(RunValidation),
    /// Ask the planner for a bounded status.
    #[serde(rename = "EVALUATE")]
    Evaluate(Evaluate),
    /// Ask a human.
    #[serde(rename = "GATE")]
    Gate(Gate),
    /// Reset the worktree to a snapshot.
    #[serde(rename = "ROLLBACK")]
    Rollback(Rollback),
    /// End the run.
    #[serde(rename = "STOP")]
    Stop(Stop),
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct RunAgent {
    id: Target,
    description: Option<String>,
    allow_unreachable: Option<bool>,
    /// Agent profile: `claude-code`, `claude`, `codex` or one from .tnh/config.yaml.
    agent: String,
    /// A prompt reference `family.name.vN`, or the task text itself.
    prompt: String,
    inputs: Option<Inputs>,
    policy: Option<Policy>,
    limits: Option<Limits>,
    cwd: Option<String>,
    env: Option<BTreeMap<String, Value>>,
    routes: ProcessRoutes,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct RunValidation {
    id: Target,
    description: Option<String>,
    allow_unreachable: Option<bool>,
    /// Validators: registered names, or inline specs.
    #[schemars(length(min = 1))]
    run: Vec<ValidatorEntry>,
    limits: Option<Limits>,
    policy: Option<Policy>,
    routes: ProcessRoutes,
}

/// A registered validator's name, or an inline validator.
#[derive(JsonSchema)]
#[serde(untagged)]
enum ValidatorEntry {
    Named(String),
    Spec(Box<ValidatorSpec>),
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct ValidatorSpec {
    id: String,
    kind: ValidatorKind,
    /// The script to run: required for script validators, refused on a builtin (which runs
    /// the command configured or detected for its id).
    entrypoint: Option<String>,
    args: Option<ValueList>,
    cwd: Option<String>,
    /// Globs of outputs to capture into the run directory.
    artifacts: Option<ValueList>,
    timeout: Option<Duration>,
    env: Option<ValidatorEnv>,
    /// Path of the harness report the validator writes.
    report: Option<String>,
    /// Network access: a script validator's default is deny, a builtin's allow
    /// (`network: deny` runs it in its own empty network namespace too).
    network: Option<Network>,
    /// The most output kept per stream and visit, in MiB (default 256); past it the
    /// validator is stopped and the step ends `killed_policy`.
    #[schemars(range(min = 1))]
    max_output_mib: Option<u32>,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum ValidatorKind {
    Builtin,
    Script,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Network {
    Deny,
    Allow,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct Evaluate {
    id: Target,
    description: Option<String>,
    allow_unreachable: Option<bool>,
    /// The planner prompt.
    prompt: String,
    /// Steps the planner may name as next_step.
    allowed_next_steps: Vec<Target>,
    /// Planner profile overriding the default.
    planner: Option<String>,
    inputs: Option<Inputs>,
    routes: PlannerRoutes,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct Gate {
    id: Target,
    description: Option<String>,
    allow_unreachable: Option<bool>,
    gate: GateKind,
    /// Why a human is asked (expressions allowed).
    reason: Option<String>,
    /// Who may decide.
    approvers: Option<Vec<String>>,
    /// How long a blocking gate waits before `gate_timed_out`.
    timeout: Option<Duration>,
    routes: GateRoutes,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum GateKind {
    RequiresApproval,
    BlockingApproval,
    QueueForReview,
    RequiresDailyReview,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct Rollback {
    id: Target,
    description: Option<String>,
    allow_unreachable: Option<bool>,
    /// `pre_run` or `pre_step` (`checkpoint:<id>` is reserved).
    target: RollbackTarget,
    routes: RollbackRoutes,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum RollbackTarget {
    PreRun,
    PreStep,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct Stop {
    id: Target,
    description: Option<String>,
    allow_unreachable: Option<bool>,
    /// success (exit 0, the default) or failure (exit 1).
    outcome: Option<StopOutcome>,
    /// Why the run stops (expressions allowed).
    reason: Option<String>,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum StopOutcome {
    Success,
    Failure,
}

/// Outcome → step id or STOP; `*` routes every outcome not listed.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct ProcessRoutes {
    completed: Option<Target>,
    error: Option<Target>,
    killed_timeout: Option<Target>,
    killed_idle: Option<Target>,
    killed_policy: Option<Target>,
    #[serde(rename = "*")]
    wildcard: Option<Target>,
}

/// Planner status → step id or STOP; every status must be routed.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct PlannerRoutes {
    success: Target,
    partial: Target,
    blocked: Target,
    #[serde(rename = "unsafe")]
    unsafe_status: Target,
    needs_human: Target,
}

/// Gate outcome → step id or STOP.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct GateRoutes {
    gate_approved: Option<Target>,
    gate_rejected: Option<Target>,
    gate_timed_out: Option<Target>,
    gate_queued: Option<Target>,
    #[serde(rename = "*")]
    wildcard: Option<Target>,
}

/// Rollback outcome → step id or STOP.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct RollbackRoutes {
    completed: Option<Target>,
    error: Option<Target>,
    #[serde(rename = "*")]
    wildcard: Option<Target>,
}
