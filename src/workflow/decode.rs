//! Decoding a YAML node tree into the workflow model, collecting every problem on the way.
//!
//! Each mapping is checked against the keys it may hold, read from the document's types in
//! `schema.rs` (which the published JSON Schema is derived from too), so an unknown key is
//! reported with the nearest valid key, and decoding goes on to find the next problem.

use std::time::Duration;

use serde::de::DeserializeOwned;

use super::diagnostic::Diagnostics;
use super::duration::parse_duration;
use super::model::{
    At, Defaults, InlinePolicy, Inputs, Limits, PolicySpec, PromptSpec, Workflow,
    is_prompt_reference,
};
use super::schema as document;
use super::yaml::{Node, Pos, Value};
use crate::document::shape::{keys, names, parse};
use crate::ids::{PromptRef, StepId, WorkflowId};

/// The folder, relative to the repository, where run directories live: the only value
/// `defaults.artifacts_dir` accepts (the kernel's `DEFAULT_ARTIFACTS_ROOT`).
pub const ARTIFACTS_DIR: &str = ".tnh/run/";

/// The hint of `expression-not-allowed` outside prompt text: where expressions do work.
pub const EXPRESSIONS_ALLOWED_HINT: &str = "write the literal value; `${…}` and `${{ … }}` work only in `inputs` values, `cwd`, `env` values, validator `entrypoint`/`args`/`artifacts`/`report`, gate and STOP `reason` (and `${name}` in literal prompt text)";

/// Decodes a parsed document into a workflow, recording every problem in `diagnostics`.
/// Returns `None` only when the document is not even a mapping.
pub fn decode_workflow(root: &Node, diagnostics: &mut Diagnostics) -> Option<Workflow> {
    let mut decoder = Decoder { diagnostics };
    let fields = decoder.mapping(
        root,
        "the workflow document",
        keys::<document::WorkflowDocument>(),
    )?;
    let workflow_id = decoder
        .required(&fields, "workflow_id", "the workflow")
        .and_then(|node| decoder.id(node, "workflow_id"))
        .map(|id| At::new(WorkflowId::new(id.value), id.pos));
    let version = decoder
        .required(&fields, "version", "the workflow")
        .and_then(|node| decoder.version(node));
    let description = decoder
        .required(&fields, "description", "the workflow")
        .and_then(|node| decoder.text(node, "description"));
    let entry_step = decoder
        .required(&fields, "entry_step", "the workflow")
        .and_then(|node| decoder.routing_string(node, "entry_step"))
        .map(|id| At::new(StepId::new(id.value), id.pos));
    let defaults = fields
        .get("defaults")
        .map(|node| decoder.defaults(node))
        .unwrap_or_default();
    let params = fields
        .get("params")
        .map(|node| decoder.params(node))
        .unwrap_or_default();
    let script = fields
        .get("script")
        .and_then(|node| decoder.text(node, "script"));
    let (steps, step_outlines) = decoder
        .required(&fields, "steps", "the workflow")
        .map(|node| decoder.steps(node))
        .unwrap_or_default();
    Some(Workflow {
        workflow_id: workflow_id.unwrap_or_else(|| At::new(WorkflowId::new(""), root.pos)),
        version: version.unwrap_or_else(|| At::new(0, root.pos)),
        description: description.unwrap_or_else(|| At::new(String::new(), root.pos)),
        entry_step: entry_step.unwrap_or_else(|| At::new(StepId::new(""), root.pos)),
        defaults,
        params,
        script,
        steps,
        step_outlines,
    })
}

/// The keys of one mapping, after unknown keys were reported.
pub(super) struct Fields<'n> {
    entries: &'n [(Node, Node)],
    /// Unknown keys read as the valid key they misspell (`rotues` as `routes`), so that one
    /// typo is one error: already reported as unknown, it does not also leave a required key
    /// missing or the steps it routes to unreachable.
    stand_ins: Vec<(&'static str, usize)>,
    /// Where the mapping starts.
    pub pos: Pos,
}

impl<'n> Fields<'n> {
    /// The value of a key.
    pub fn get(&self, key: &str) -> Option<&'n Node> {
        self.entry(key).map(|(_, value)| value)
    }

    /// The key itself, for a problem reported where the key is written.
    pub fn key(&self, key: &str) -> Option<&'n Node> {
        self.entry(key).map(|(name, _)| name)
    }

    fn entry(&self, key: &str) -> Option<&'n (Node, Node)> {
        let entries = self.entries;
        entries
            .iter()
            .find(|(name, _)| name.as_str() == Some(key))
            .or_else(|| {
                let (_, index) = self.stand_ins.iter().find(|(meant, _)| *meant == key)?;
                entries.get(*index)
            })
    }
}

/// For each unknown key of `entries` that misspells exactly one valid key absent from the
/// mapping (and is the only key that does), that key and the entry's index.
fn stand_ins(entries: &[(Node, Node)], allowed: &[&'static str]) -> Vec<(&'static str, usize)> {
    let present = |key: &str| entries.iter().any(|(name, _)| name.as_str() == Some(key));
    let mut found: Vec<(&'static str, usize)> = Vec::new();
    let mut ambiguous: Vec<&'static str> = Vec::new();
    for (index, (name, _)) in entries.iter().enumerate() {
        let Some(name) = name.as_str() else { continue };
        if allowed.contains(&name) {
            continue;
        }
        let Some(meant) = super::diagnostic::nearest(name, allowed.iter().copied()) else {
            continue;
        };
        if present(meant) {
            continue;
        }
        if found.iter().any(|(other, _)| *other == meant) {
            ambiguous.push(meant);
        } else {
            found.push((meant, index));
        }
    }
    found.retain(|(meant, _)| !ambiguous.contains(meant));
    found
}

/// Turns nodes into model values, recording problems.
pub(super) struct Decoder<'d> {
    pub diagnostics: &'d mut Diagnostics,
}

impl Decoder<'_> {
    /// Checks that `node` is a mapping whose keys are all in `allowed`.
    pub fn mapping<'n>(
        &mut self,
        node: &'n Node,
        what: &str,
        allowed: &[&'static str],
    ) -> Option<Fields<'n>> {
        let Some(entries) = node.as_map() else {
            self.wrong_type(node, what, "a mapping");
            return None;
        };
        for (key, _) in entries {
            match key.as_str() {
                Some(name) if allowed.contains(&name) => {}
                Some(name) => self
                    .diagnostics
                    .error(
                        key.pos,
                        "unknown-key",
                        format!("unknown key `{name}` in {what}"),
                    )
                    .suggest(
                        name,
                        allowed.iter().copied(),
                        format!("valid keys here: {}", allowed.join(", ")),
                    ),
                None => self
                    .diagnostics
                    .error(
                        key.pos,
                        "wrong-type",
                        format!(
                            "keys of {what} must be strings, found {}",
                            key.value.kind_name()
                        ),
                    )
                    .hint(format!("valid keys here: {}", allowed.join(", "))),
            }
        }
        Some(Fields {
            entries,
            stand_ins: stand_ins(entries, allowed),
            pos: node.pos,
        })
    }

    /// A key that must be present.
    pub fn required<'n>(
        &mut self,
        fields: &Fields<'n>,
        key: &str,
        owner: &str,
    ) -> Option<&'n Node> {
        let found = fields.get(key);
        if found.is_none() {
            self.diagnostics
                .error(
                    fields.pos,
                    "missing-field",
                    format!("{owner} is missing the required key `{key}`"),
                )
                .hint(format!("add `{key}:`"));
        }
        found
    }

    /// Reports a value of the wrong kind.
    pub fn wrong_type(&mut self, node: &Node, what: &str, expected: &str) {
        self.diagnostics
            .error(
                node.pos,
                "wrong-type",
                format!(
                    "{what} must be {expected}, found {}",
                    node.value.kind_name()
                ),
            )
            .hint(format!("write {what} as {expected}"));
    }

    /// A string scalar whose value is free text, taken as written or checked elsewhere:
    /// descriptions, the script (Rhai has its own `${…}` in template strings) and prompts
    /// (literal prompt text has `${name}` substituted; the expression checker sees to it).
    pub fn text(&mut self, node: &Node, what: &str) -> Option<At<String>> {
        match node.as_str() {
            Some(text) => Some(At::new(text.to_owned(), node.pos)),
            None => {
                self.wrong_type(node, what, "a string");
                None
            }
        }
    }

    /// A string scalar the conductor uses as written (a name, a glob, an approver, a path):
    /// `${…}` and `${{ … }}` are refused, since nothing would substitute them (the fields where
    /// expressions are allowed stay raw nodes and never come here).
    /// Every string field of the document goes through here unless it is free text
    /// ([`Self::text`]) or decides routing ([`Self::routing_string`]).
    pub fn string(&mut self, node: &Node, what: &str) -> Option<At<String>> {
        let text = self.text(node, what)?;
        if text.value.contains("${") {
            self.refuse_expression(node, what);
            return None;
        }
        Some(text)
    }

    /// Reports `${…}` or `${{ … }}` in a field that is taken literally.
    pub fn refuse_expression(&mut self, node: &Node, what: &str) {
        self.diagnostics
            .error(
                node.pos,
                "expression-not-allowed",
                format!(
                    "{what} cannot contain `${{…}}` or `${{{{ … }}}}`: nothing substitutes them here, so `{}` would be used as written",
                    node.scalar_text()
                ),
            )
            .hint(EXPRESSIONS_ALLOWED_HINT);
    }

    /// A string where routing is decided: expressions are refused.
    pub fn routing_string(&mut self, node: &Node, what: &str) -> Option<At<String>> {
        let text = self.text(node, what)?;
        if text.value.contains("${") {
            self.diagnostics
                .error(node.pos, "expression-in-routing", format!("{what} cannot contain an expression or substitution"))
                .hint("routing stays in Rust: write literal step ids here and compute values in inputs instead");
            return None;
        }
        Some(text)
    }

    /// A name used as written (a parameter, an input, a validator): letters, digits, `_`, `-`,
    /// `.`, starting with a letter or `_`. `${…}` is refused as in any literal field.
    pub fn identifier(&mut self, node: &Node, what: &str) -> Option<At<String>> {
        let text = self.string(node, what)?;
        self.identifier_syntax(node, what, text)
    }

    /// The workflow's or a step's id: an [`identifier`](Self::identifier) where routing is
    /// decided (`${…}` is an `expression-in-routing`), which also becomes part of git ref names
    /// (the run's branch `tnh/<workflow_id>/<run_id>`, a step's snapshots
    /// `refs/tnh/runs/<run_id>/pre_step/<step_id>/<visit>`), so git's rules for them apply. An
    /// id that breaks only those is reported and kept, so nothing that names it is reported too.
    pub fn id(&mut self, node: &Node, what: &str) -> Option<At<String>> {
        let text = self.routing_string(node, what)?;
        let text = self.identifier_syntax(node, what, text)?;
        if !fits_in_a_ref_name(&text.value) {
            let used = if what == "workflow_id" {
                "the run's branch `tnh/<workflow_id>/<run_id>`"
            } else {
                "the step's snapshots `refs/tnh/runs/<run_id>/pre_step/<step_id>/<visit>`"
            };
            self.diagnostics
                .error(
                    node.pos,
                    "invalid-id",
                    format!(
                        "{what} `{}` cannot be part of a git ref name, as in {used}",
                        text.value
                    ),
                )
                .hint("git refuses `..` anywhere and a name ending in `.lock`: rename it (`a.b`, `foo-lock`)");
        }
        Some(text)
    }

    fn identifier_syntax(
        &mut self,
        node: &Node,
        what: &str,
        text: At<String>,
    ) -> Option<At<String>> {
        let mut chars = text.value.chars();
        let valid_start = chars
            .next()
            .is_some_and(|first| first.is_ascii_alphabetic() || first == '_');
        if !valid_start
            || !chars.all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '_' | '-' | '.'))
        {
            self.diagnostics
                .error(
                    node.pos,
                    "invalid-id",
                    format!("{what} `{}` is not a valid identifier", text.value),
                )
                .hint("use letters, digits, `_`, `-` and `.`, starting with a letter or `_`");
            return None;
        }
        Some(text)
    }

    /// A list of strings.
    pub fn string_list(&mut self, node: &Node, what: &str) -> Vec<At<String>> {
        let Some(items) = node.as_seq() else {
            self.wrong_type(node, what, "a list of strings");
            return Vec::new();
        };
        items
            .iter()
            .filter_map(|item| self.string(item, &format!("an entry of {what}")))
            .collect()
    }

    /// A boolean.
    pub fn boolean(&mut self, node: &Node, what: &str) -> Option<bool> {
        match node.value {
            Value::Bool(flag) => Some(flag),
            _ => {
                self.wrong_type(node, what, "`true` or `false`");
                None
            }
        }
    }

    /// A duration string like `90s`; zero is refused.
    pub fn duration(&mut self, node: &Node, what: &str) -> Option<At<Duration>> {
        let text = match &node.value {
            Value::Str(text) if text.contains("${") => {
                self.refuse_expression(node, what);
                return None;
            }
            Value::Str(text) => text,
            Value::Int(_) | Value::Float(_) => {
                self.diagnostics
                    .error(
                        node.pos,
                        "invalid-duration",
                        format!("{what} must be a duration with a unit, found a bare number"),
                    )
                    .hint(format!(
                        "write e.g. `{}s` (units: ms, s, m, h, d, w)",
                        node.scalar_text()
                    ));
                return None;
            }
            _ => {
                self.wrong_type(node, what, "a duration such as `90s`");
                return None;
            }
        };
        match parse_duration(text) {
            Ok(duration) if duration.is_zero() => {
                self.diagnostics
                    .error(
                        node.pos,
                        "invalid-duration",
                        format!("{what} must be longer than zero"),
                    )
                    .hint("remove the limit to use the default, or give a positive duration");
                None
            }
            Ok(duration) => Some(At::new(duration, node.pos)),
            Err(error) => {
                self.diagnostics
                    .error(node.pos, "invalid-duration", format!("{what}: {error}"))
                    .hint("durations look like `90s`, `20m`, `24h` or `1h30m`");
                None
            }
        }
    }

    /// A whole number of at least 1.
    pub fn positive_int(&mut self, node: &Node, what: &str) -> Option<At<u32>> {
        match node.value {
            Value::Int(number) if number >= 1 => match u32::try_from(number) {
                Ok(value) => Some(At::new(value, node.pos)),
                Err(_) => {
                    self.diagnostics
                        .error(node.pos, "invalid-limit", format!("{what} is too large"))
                        .hint(format!("use at most {}", u32::MAX));
                    None
                }
            },
            Value::Int(_) => {
                self.diagnostics
                    .error(
                        node.pos,
                        "invalid-limit",
                        format!("{what} must be at least 1"),
                    )
                    .hint("remove the limit to use the default, or give a positive number");
                None
            }
            _ => {
                self.wrong_type(node, what, "a whole number");
                None
            }
        }
    }

    fn version(&mut self, node: &Node) -> Option<At<i64>> {
        match node.value {
            Value::Int(number) if number >= 1 => Some(At::new(number, node.pos)),
            Value::Int(_) => {
                self.diagnostics
                    .error(node.pos, "invalid-value", "version must be at least 1")
                    .hint(
                        "start at `version: 1` and raise it when the workflow's behaviour changes",
                    );
                None
            }
            _ => {
                self.wrong_type(node, "version", "a whole number");
                None
            }
        }
    }

    fn defaults(&mut self, node: &Node) -> Defaults {
        let Some(fields) = self.mapping(node, "defaults", keys::<document::Defaults>()) else {
            return Defaults::default();
        };
        Defaults {
            policy: fields.get("policy").and_then(|value| self.policy(value)),
            limits: fields
                .get("limits")
                .map(|value| self.limits(value, true))
                .unwrap_or_default(),
            artifacts_dir: fields
                .get("artifacts_dir")
                .and_then(|value| self.artifacts_dir(value)),
            component_kind: fields
                .get("component_kind")
                .and_then(|value| self.choice(value, "component_kind")),
            eval_profile: fields
                .get("eval_profile")
                .and_then(|value| self.choice(value, "eval_profile")),
            planner: fields
                .get("planner")
                .and_then(|value| self.string(value, "planner")),
        }
    }

    /// `artifacts_dir`: only the default `.tnh/run/` (or a spelling of it). `run` would put
    /// the run directory anywhere, but `status`, `gate`, `resume`, `runs` and `journal` find
    /// runs by id under `<repo>/.tnh/run/` only, so a run written elsewhere could never be
    /// approved or resumed; a folder in the checkout would also make the conductor's own
    /// writes look like the agent's, and an absolute or `..` path writes outside the
    /// repository.
    fn artifacts_dir(&mut self, node: &Node) -> Option<At<String>> {
        let dir = self.string(node, "artifacts_dir")?;
        let path = dir.value.strip_prefix("./").unwrap_or(&dir.value);
        if matches!(path, ".tnh/run" | ".tnh/run/") {
            return Some(At::new(ARTIFACTS_DIR.to_owned(), dir.pos));
        }
        self.diagnostics
            .error(
                node.pos,
                "invalid-value",
                format!(
                    "artifacts_dir `{}` is not supported: run directories live under `{ARTIFACTS_DIR}`",
                    dir.value
                ),
            )
            .hint(format!(
                "remove `artifacts_dir` (or write `{ARTIFACTS_DIR}`): `status`, `gate`, `resume`, `runs` and `journal` find runs only under `<repo>/{ARTIFACTS_DIR}`"
            ));
        None
    }

    /// One of the names of document enum `T`.
    pub fn choice<T: DeserializeOwned>(&mut self, node: &Node, what: &str) -> Option<At<T>> {
        let names = names::<T>();
        let text = self.routing_string(node, what)?;
        match parse::<T>(&text.value) {
            Some(value) => Some(At::new(value, node.pos)),
            None => {
                self.diagnostics
                    .error(
                        node.pos,
                        "invalid-value",
                        format!("{what} `{}` is not one of {}", text.value, names.join(", ")),
                    )
                    .suggest(
                        &text.value,
                        names.iter().copied(),
                        format!("use one of: {}", names.join(", ")),
                    );
                None
            }
        }
    }

    /// A `limits` block; `max_transitions` belongs to the run, so only to `defaults`.
    pub fn limits(&mut self, node: &Node, run_level: bool) -> Limits {
        let Some(fields) = self.mapping(node, "limits", keys::<document::Limits>()) else {
            return Limits::default();
        };
        let max_transitions = fields.get("max_transitions");
        if let (Some(value), false) = (max_transitions, run_level) {
            self.diagnostics
                .error(
                    value.pos,
                    "invalid-limit",
                    "max_transitions limits the whole run, not one step",
                )
                .hint("move it to defaults.limits");
        }
        Limits {
            timeout: fields
                .get("timeout")
                .and_then(|value| self.duration(value, "timeout")),
            idle_timeout: fields
                .get("idle_timeout")
                .and_then(|value| self.duration(value, "idle_timeout")),
            max_turns: fields
                .get("max_turns")
                .and_then(|value| self.positive_int(value, "max_turns")),
            max_budget_usd: fields
                .get("max_budget_usd")
                .and_then(|value| self.budget(value)),
            max_visits: fields
                .get("max_visits")
                .and_then(|value| self.positive_int(value, "max_visits")),
            max_transitions: max_transitions
                .filter(|_| run_level)
                .and_then(|value| self.positive_int(value, "max_transitions")),
        }
    }

    fn budget(&mut self, node: &Node) -> Option<At<f64>> {
        let amount = match node.value {
            Value::Int(number) => number as f64,
            Value::Float(number) => number,
            _ => {
                self.wrong_type(node, "max_budget_usd", "a number of dollars");
                return None;
            }
        };
        if amount.is_finite() && amount > 0.0 {
            return Some(At::new(amount, node.pos));
        }
        self.diagnostics
            .error(
                node.pos,
                "invalid-limit",
                "max_budget_usd must be a positive number of dollars",
            )
            .hint("e.g. `max_budget_usd: 2.5`");
        None
    }

    /// A policy: a `policy.*` reference or an inline mapping.
    pub fn policy(&mut self, node: &Node) -> Option<At<PolicySpec>> {
        if let Some(text) = node.as_str() {
            if is_prompt_reference(text) {
                return Some(At::new(
                    PolicySpec::Reference(PromptRef::new(text)),
                    node.pos,
                ));
            }
            self.diagnostics
                .error(node.pos, "invalid-value", format!("policy `{text}` is not a prompt reference"))
                .hint("write a reference like `policy.workspace_safety.v1`, or an inline mapping with allowed_paths/forbidden_paths/forbidden_operations");
            return None;
        }
        let fields = self.mapping(node, "policy", keys::<document::InlinePolicy>())?;
        let mut list = |key: &str| {
            fields
                .get(key)
                .map(|value| self.string_list(value, key))
                .unwrap_or_default()
        };
        let allowed_paths = list("allowed_paths");
        let forbidden_paths = list("forbidden_paths");
        let forbidden_operations = list("forbidden_operations");
        let check = fields
            .get("check")
            .and_then(|value| self.string(value, "check"));
        for glob in allowed_paths.iter().chain(&forbidden_paths) {
            if let Err(error) = globset::GlobBuilder::new(&glob.value)
                .literal_separator(true)
                .build()
            {
                self.diagnostics
                    .error(
                        glob.pos,
                        "invalid-glob",
                        format!("`{}` is not a valid glob: {}", glob.value, error.kind()),
                    )
                    .hint("`*` matches within one folder, `**` across folders, e.g. `src/**/*.rs`");
            }
        }
        Some(At::new(
            PolicySpec::Inline(InlinePolicy {
                allowed_paths,
                forbidden_paths,
                forbidden_operations,
                check,
            }),
            node.pos,
        ))
    }

    /// A prompt: a library reference or literal text.
    pub fn prompt(&mut self, node: &Node) -> Option<At<PromptSpec>> {
        let text = self.text(node, "prompt")?;
        if text.value.trim().is_empty() {
            self.diagnostics
                .error(node.pos, "invalid-value", "prompt is empty")
                .hint("write a prompt reference like `task.implement_adr.v1`, or the task text itself");
            return None;
        }
        Some(At::new(PromptSpec::classify(&text.value), text.pos))
    }

    /// `inputs`: a list of context names or a mapping of values.
    pub fn inputs(&mut self, node: &Node) -> Inputs {
        match &node.value {
            Value::Seq(_) => Inputs::Names(self.string_list(node, "inputs")),
            Value::Str(text) if super::model::is_whole_expression(text) => {
                Inputs::Expression(node.clone())
            }
            Value::Map(entries) => Inputs::Values(
                entries
                    .iter()
                    .filter_map(|(key, value)| {
                        Some((self.identifier(key, "an input name")?, value.clone()))
                    })
                    .collect(),
            ),
            _ => {
                self.wrong_type(
                    node,
                    "inputs",
                    "a list of names, a mapping of values, or one `${{ expression }}`",
                );
                Inputs::None
            }
        }
    }

    /// `env`: a mapping of variable names to values.
    pub fn env(&mut self, node: &Node) -> Vec<(At<String>, Node)> {
        let Some(entries) = node.as_map() else {
            self.wrong_type(node, "env", "a mapping of variable names to values");
            return Vec::new();
        };
        entries
            .iter()
            .filter_map(|(key, value)| {
                let name = self.string(key, "an environment variable name")?;
                let valid = !name.value.is_empty()
                    && !name.value.starts_with(|ch: char| ch.is_ascii_digit())
                    && name
                        .value
                        .chars()
                        .all(|ch| ch.is_ascii_alphanumeric() || ch == '_');
                if !valid {
                    self.diagnostics
                        .error(
                            key.pos,
                            "invalid-value",
                            format!("`{}` is not a valid environment variable name", name.value),
                        )
                        .hint("use letters, digits and `_`, not starting with a digit");
                    return None;
                }
                Some((name, value.clone()))
            })
            .collect()
    }
}

/// Whether an id can be one part of a git ref name, by the check the workspace makes when it
/// names the run's branch and a step's snapshots (`git2::Reference::is_valid_name`, and no
/// `..`, which libgit2 would accept in some places).
pub fn fits_in_a_ref_name(id: &str) -> bool {
    !id.contains("..")
        && git2::Reference::is_valid_name(&format!("refs/heads/tnh/{id}/run"))
        && git2::Reference::is_valid_name(&format!("refs/tnh/runs/run/pre_step/{id}/1"))
}

#[cfg(test)]
mod tests {
    /// The one `artifacts_dir` validate accepts is where the kernel writes and finds runs.
    #[test]
    fn the_accepted_artifacts_dir_is_the_kernels_run_root() {
        assert_eq!(
            super::ARTIFACTS_DIR,
            crate::kernel::run::DEFAULT_ARTIFACTS_ROOT
        );
    }
}
