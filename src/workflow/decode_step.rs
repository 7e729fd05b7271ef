//! Decoding steps: the keys each opcode accepts, its required fields, routes and validators.

use super::decode::{Decoder, Fields};
use super::model::{
    At, Evaluate, Gate, Inputs, Limits, NodeList, Opcode, Rollback, RollbackTarget, RouteKey,
    Routes, RunAgent, RunValidation, Step, StepBody, StepOutline, Stop, ValidatorEntry,
    ValidatorKind, ValidatorSpec, is_whole_expression,
};
use super::schema as document;
use super::yaml::{Node, Value};
use crate::document::shape::{keys, names, parse};
use crate::ids::StepId;
use crate::outcome::Outcome;

/// Keys every step may hold.
pub fn common_step_keys() -> &'static [&'static str] {
    keys::<document::StepHeader>()
}

/// Keys an opcode adds to the common ones, in the order its document type declares them.
pub fn opcode_keys(opcode: Opcode) -> Vec<&'static str> {
    let declared = match opcode {
        Opcode::RunAgent => keys::<document::RunAgent>(),
        Opcode::RunValidation => keys::<document::RunValidation>(),
        Opcode::Evaluate => keys::<document::Evaluate>(),
        Opcode::Gate => keys::<document::Gate>(),
        Opcode::Rollback => keys::<document::Rollback>(),
        Opcode::Stop => keys::<document::Stop>(),
    };
    let common = common_step_keys();
    declared
        .iter()
        .copied()
        .filter(|key| !common.contains(key))
        .collect()
}

impl Decoder<'_> {
    /// The `steps` list: the steps decoded whole, and the outlines of those that were not.
    pub fn steps(&mut self, node: &Node) -> (Vec<Step>, Vec<StepOutline>) {
        let Some(items) = node.as_seq() else {
            self.wrong_type(node, "steps", "a list of steps");
            return (Vec::new(), Vec::new());
        };
        if items.is_empty() {
            self.diagnostics
                .error(node.pos, "missing-field", "steps is empty")
                .hint("a workflow needs at least one step");
        }
        let mut steps = Vec::new();
        let mut outlines = Vec::new();
        for item in items {
            match self.step(item) {
                Ok(step) => steps.push(step),
                Err(Some(outline)) => outlines.push(outline),
                Err(None) => {}
            }
        }
        (steps, outlines)
    }

    /// A step, or what is known of it when a field is invalid (already reported).
    fn step(&mut self, node: &Node) -> Result<Step, Option<StepOutline>> {
        if node.as_map().is_none() {
            self.wrong_type(node, "a step", "a mapping with id, opcode and routes");
            return Err(None);
        }
        let id = node
            .get("id")
            .and_then(|value| self.id(value, "step id"))
            .map(|id| At::new(StepId::new(id.value), id.pos));
        let owner = id
            .as_ref()
            .map_or_else(|| "a step".to_owned(), |id| format!("step `{}`", id.value));
        if id.is_none() && node.get("id").is_none() {
            self.diagnostics
                .error(
                    node.pos,
                    "missing-field",
                    "a step is missing the required key `id`",
                )
                .hint("add `id:` with a unique step id");
        }
        let Some(opcode) = self.opcode(node, &owner) else {
            // Without an opcode the step's keys cannot be checked, but its routes still say
            // where it leads.
            let routes = node
                .get("routes")
                .map(|value| self.routes(value, &owner))
                .unwrap_or_default();
            let allow_unreachable = node
                .get("allow_unreachable")
                .is_some_and(|value| matches!(value.value, Value::Bool(true)));
            return Err(id.map(|id| StepOutline {
                id,
                pos: node.pos,
                opcode: None,
                routes,
                allow_unreachable,
            }));
        };
        let mut allowed = common_step_keys().to_vec();
        allowed.extend(opcode_keys(opcode));
        let fields = self.mapping(node, &owner, &allowed).ok_or(None)?;
        let routes = match fields.get("routes") {
            Some(value) => self.routes(value, &owner),
            None if opcode == Opcode::Stop => Routes::default(),
            None => {
                self.diagnostics
                    .error(
                        node.pos,
                        "missing-field",
                        format!("{owner} is missing the required key `routes`"),
                    )
                    .hint(format!(
                        "map each outcome of {} to a step id or STOP",
                        opcode.name()
                    ));
                Routes::default()
            }
        };
        if opcode == Opcode::Stop
            && let Some(value) = fields.get("routes")
        {
            self.diagnostics
                .error(
                    value.pos,
                    "routes-on-stop",
                    format!("{owner} is a STOP step and cannot have routes"),
                )
                .hint("STOP is terminal: remove `routes`");
        }
        let allow_unreachable = fields
            .get("allow_unreachable")
            .and_then(|value| self.boolean(value, "allow_unreachable"))
            .unwrap_or(false);
        let description = fields
            .get("description")
            .and_then(|value| self.text(value, "description"));
        let body = self.body(opcode, node, &owner);
        let Some(id) = id else {
            return Err(None);
        };
        match body {
            Some(body) => Ok(Step {
                id,
                pos: node.pos,
                description,
                allow_unreachable,
                routes,
                body,
            }),
            None => Err(Some(StepOutline {
                id,
                pos: node.pos,
                opcode: Some(opcode),
                routes,
                allow_unreachable,
            })),
        }
    }

    fn opcode(&mut self, node: &Node, owner: &str) -> Option<Opcode> {
        let Some(value) = node.get("opcode") else {
            self.diagnostics
                .error(
                    node.pos,
                    "missing-field",
                    format!("{owner} is missing the required key `opcode`"),
                )
                .hint(format!("one of: {}", Opcode::NAMES.join(", ")));
            return None;
        };
        self.choice::<Opcode>(value, "opcode")
            .map(|opcode| opcode.value)
    }

    fn body(&mut self, opcode: Opcode, node: &Node, owner: &str) -> Option<StepBody> {
        let field = |key: &str| node.get(key);
        let limits = |decoder: &mut Self| {
            field("limits")
                .map(|value| decoder.limits(value, false))
                .unwrap_or_default()
        };
        let body = match opcode {
            Opcode::RunAgent => {
                let agent = self
                    .required_field(node, "agent", owner)
                    .and_then(|value| self.string(value, "agent"));
                let prompt = self
                    .required_field(node, "prompt", owner)
                    .and_then(|value| self.prompt(value));
                let inputs = field("inputs")
                    .map(|value| self.inputs(value))
                    .unwrap_or_default();
                let policy = field("policy").and_then(|value| self.policy(value));
                let limits = limits(self);
                let env = field("env")
                    .map(|value| self.env(value))
                    .unwrap_or_default();
                StepBody::RunAgent(RunAgent {
                    agent: agent?,
                    prompt: prompt?,
                    inputs,
                    policy,
                    limits,
                    cwd: field("cwd").cloned(),
                    env,
                })
            }
            Opcode::RunValidation => {
                let run = self
                    .required_field(node, "run", owner)
                    .map(|value| self.validators(value, owner));
                let policy = field("policy").and_then(|value| self.policy(value));
                StepBody::RunValidation(RunValidation {
                    run: run?,
                    limits: limits(self),
                    policy,
                })
            }
            Opcode::Evaluate => self.evaluate(node, owner)?,
            Opcode::Gate => {
                let gate = self
                    .required_field(node, "gate", owner)
                    .and_then(|value| self.choice(value, "gate"));
                let approvers = field("approvers")
                    .map(|value| self.string_list(value, "approvers"))
                    .unwrap_or_default();
                let timeout = field("timeout").and_then(|value| self.duration(value, "timeout"));
                StepBody::Gate(Gate {
                    gate: gate?,
                    reason: self.reason(field("reason")),
                    approvers,
                    timeout,
                })
            }
            Opcode::Rollback => {
                let target = self
                    .required_field(node, "target", owner)
                    .and_then(|value| self.rollback_target(value));
                StepBody::Rollback(Rollback { target: target? })
            }
            Opcode::Stop => {
                let outcome = field("outcome").and_then(|value| self.choice(value, "outcome"));
                StepBody::Stop(Stop {
                    outcome_written: field("outcome").is_some(),
                    outcome: outcome.map(|at| at.value).unwrap_or_default(),
                    reason: self.reason(field("reason")),
                })
            }
        };
        Some(body)
    }

    /// A GATE or STOP `reason`: text (with `${…}` and `${{ … }}`), as the schema says; a
    /// mapping or a list would have been rendered as JSON.
    fn reason(&mut self, node: Option<&Node>) -> Option<Node> {
        let node = node?;
        if node.as_str().is_none() {
            self.diagnostics
                .error(
                    node.pos,
                    "wrong-type",
                    format!("reason must be a string, found {}", node.value.kind_name()),
                )
                .hint("write the reason as text; to show a computed value, use `reason: \"${{ to_json(value) }}\"`");
            return None;
        }
        Some(node.clone())
    }

    fn evaluate(&mut self, node: &Node, owner: &str) -> Option<StepBody> {
        let prompt = self
            .required_field(node, "prompt", owner)
            .and_then(|value| self.prompt(value));
        let allowed = self
            .required_field(node, "allowed_next_steps", owner)
            .map(|value| {
                let Some(items) = value.as_seq() else {
                    self.wrong_type(value, "allowed_next_steps", "a list of step ids");
                    return Vec::new();
                };
                items
                    .iter()
                    .filter_map(|item| self.routing_string(item, "an entry of allowed_next_steps"))
                    .map(|id| At::new(StepId::new(id.value), id.pos))
                    .collect()
            });
        let planner = node
            .get("planner")
            .and_then(|value| self.string(value, "planner"));
        let inputs = node
            .get("inputs")
            .map(|value| self.inputs(value))
            .unwrap_or(Inputs::None);
        Some(StepBody::Evaluate(Evaluate {
            prompt: prompt?,
            allowed_next_steps: allowed?,
            planner,
            inputs,
        }))
    }

    fn required_field<'n>(&mut self, node: &'n Node, key: &str, owner: &str) -> Option<&'n Node> {
        let found = node.get(key);
        if found.is_none() {
            let opcode = node
                .get("opcode")
                .and_then(Node::as_str)
                .unwrap_or("this opcode");
            self.diagnostics
                .error(
                    node.pos,
                    "missing-field",
                    format!("{owner} is missing the required key `{key}`"),
                )
                .hint(format!("{opcode} steps need `{key}`"));
        }
        found
    }

    fn rollback_target(&mut self, node: &Node) -> Option<At<RollbackTarget>> {
        let text = self.routing_string(node, "target")?;
        if let Some(target) = parse::<RollbackTarget>(&text.value) {
            return Some(At::new(target, node.pos));
        }
        let targets = names::<RollbackTarget>();
        let either = targets
            .iter()
            .map(|name| format!("`{name}`"))
            .collect::<Vec<_>>()
            .join(" or ");
        match text.value.as_str() {
            other if other.starts_with("checkpoint:") => {
                self.diagnostics
                    .error(
                        node.pos,
                        "reserved-checkpoint",
                        format!("rollback target `{other}` is reserved and not implemented"),
                    )
                    .hint(format!("use {either}"));
                None
            }
            other => {
                self.diagnostics
                    .error(
                        node.pos,
                        "invalid-value",
                        format!("rollback target `{other}` is not {either}"),
                    )
                    .suggest(other, targets.iter().copied(), format!("use {either}"));
                None
            }
        }
    }

    fn routes(&mut self, node: &Node, owner: &str) -> Routes {
        let Some(entries) = node.as_map() else {
            self.wrong_type(node, "routes", "a mapping of outcomes to step ids");
            return Routes::default();
        };
        let mut routes = Routes {
            pos: Some(node.pos),
            ..Routes::default()
        };
        for (key, target) in entries {
            let name = self.routing_string(key, "a route key");
            let target = self.routing_string(target, "a route target");
            let (Some(name), Some(target)) = (name, target) else {
                routes.incomplete = true;
                continue;
            };
            let route_key = if name.value == "*" {
                RouteKey::Wildcard
            } else if let Ok(outcome) = name.value.parse::<Outcome>() {
                RouteKey::Outcome(outcome)
            } else {
                let names = Outcome::ALL.map(Outcome::as_str);
                self.diagnostics
                    .error(
                        key.pos,
                        "unknown-outcome",
                        format!(
                            "`{}` in the routes of {owner} is not an outcome",
                            name.value
                        ),
                    )
                    .suggest(
                        &name.value,
                        names,
                        format!("outcomes: {}", names.join(", ")),
                    );
                routes.incomplete = true;
                routes
                    .unkeyed_targets
                    .push(At::new(StepId::new(target.value), target.pos));
                continue;
            };
            routes.entries.push((
                At::new(route_key, key.pos),
                At::new(StepId::new(target.value), target.pos),
            ));
        }
        routes
    }

    fn validators(&mut self, node: &Node, owner: &str) -> Vec<ValidatorEntry> {
        let Some(items) = node.as_seq() else {
            self.wrong_type(node, "run", "a list of validators");
            return Vec::new();
        };
        if items.is_empty() {
            self.diagnostics
                .error(
                    node.pos,
                    "missing-field",
                    format!("`run` of {owner} lists no validators"),
                )
                .hint("name validators such as `tests`, or give an inline {id, kind, entrypoint}");
        }
        items
            .iter()
            .filter_map(|item| self.validator(item))
            .collect()
    }

    fn validator(&mut self, node: &Node) -> Option<ValidatorEntry> {
        if node.as_str().is_some() {
            return self
                .identifier(node, "a validator name")
                .map(ValidatorEntry::Named);
        }
        let fields = self.mapping(node, "a validator", keys::<document::ValidatorSpec>())?;
        let id = self
            .required(&fields, "id", "a validator")
            .and_then(|value| self.identifier(value, "validator id"));
        let kind = self
            .required(&fields, "kind", "a validator")
            .and_then(|value| self.choice(value, "kind"));
        let entrypoint = fields.get("entrypoint").cloned();
        self.check_validator_entrypoint(&fields, kind.as_ref(), entrypoint.is_some());
        let args = self.node_list(&fields, "args");
        let artifacts = self.node_list(&fields, "artifacts");
        let timeout = fields
            .get("timeout")
            .and_then(|value| self.duration(value, "timeout"));
        let (env, env_expression) = match fields.get("env") {
            Some(value) if value.as_str().is_some_and(is_whole_expression) => {
                (Vec::new(), Some((*value).clone()))
            }
            Some(value) => (self.env(value), None),
            None => (Vec::new(), None),
        };
        let network = fields
            .get("network")
            .and_then(|value| self.choice(value, "network"))
            .map(|at| at.value);
        let max_output_mib = fields
            .get("max_output_mib")
            .and_then(|value| self.positive_int(value, "max_output_mib"));
        Some(ValidatorEntry::Spec(Box::new(ValidatorSpec {
            id: id?,
            kind: kind?,
            entrypoint,
            args,
            cwd: fields.get("cwd").cloned(),
            artifacts,
            timeout,
            env,
            env_expression,
            report: fields.get("report").cloned(),
            network,
            max_output_mib,
            pos: node.pos,
        })))
    }

    /// What a validator's `kind` asks of its `entrypoint`: a builtin takes none, a script
    /// needs one.
    fn check_validator_entrypoint(
        &mut self,
        fields: &Fields<'_>,
        kind: Option<&At<ValidatorKind>>,
        has_entrypoint: bool,
    ) {
        if let (
            Some(At {
                value: ValidatorKind::Builtin,
                ..
            }),
            Some(written),
        ) = (kind, fields.key("entrypoint"))
        {
            // A builtin runs the command registered for its id: an entrypoint would never run,
            // and the step would pass on a check it did not make.
            let name = fields
                .get("id")
                .and_then(Node::as_str)
                .unwrap_or("tests")
                .to_owned();
            self.diagnostics
                .error(
                    written.pos,
                    "unknown-key",
                    format!(
                        "`entrypoint` does not apply to a `kind: builtin` validator: a builtin runs the command configured (or detected) for its id, so `{name}`'s entrypoint would never run"
                    ),
                )
                .hint(format!(
                    "to run a script of your own, write `kind: script` (its entrypoint must lie under the run directory or a folder of `script_allowlist`); to change what the builtin runs, set `validators.{name}.argv` in .tnh/config.yaml"
                ));
        }
        if matches!(
            kind,
            Some(At {
                value: ValidatorKind::Script,
                ..
            })
        ) && !has_entrypoint
        {
            self.diagnostics
                .error(
                    fields.pos,
                    "missing-field",
                    "a script validator is missing the required key `entrypoint`",
                )
                .hint("e.g. `entrypoint: .tnh/run/${run_id}/harness/harness.py`");
        }
    }

    /// A validator's list key (`args`, `artifacts`): a list, or one `${ expression }`
    /// giving a list.
    fn node_list(&mut self, fields: &Fields<'_>, key: &str) -> NodeList {
        match fields.get(key) {
            Some(value) => match &value.value {
                Value::Seq(items) => NodeList::Items(items.clone()),
                Value::Str(text) if is_whole_expression(text) => {
                    NodeList::Expression(value.clone())
                }
                _ => {
                    self.wrong_type(
                        value,
                        key,
                        "a list (or one `${{ expression }}` giving a list)",
                    );
                    NodeList::Absent
                }
            },
            None => NodeList::Absent,
        }
    }
}

/// The limits of a step, when its opcode has any.
pub fn step_limits(body: &StepBody) -> Option<&Limits> {
    match body {
        StepBody::RunAgent(agent) => Some(&agent.limits),
        StepBody::RunValidation(validation) => Some(&validation.limits),
        _ => None,
    }
}
