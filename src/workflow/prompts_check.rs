//! Static checks of prompt references: each resolves in the library, its role fits the opcode
//! (RUN_AGENT → task, EVALUATE → planner/triage/risk, `policy:` → policy), and every required
//! input can be supplied by the step.

use super::diagnostic::{Diagnostics, nearest};
use super::expressions::ScriptFunction;
use super::model::{At, Inputs, PolicySpec, PromptSpec, Step, StepBody, Workflow};
use crate::prompt::{Catalog, Prompt, PromptRole, PromptStatus};

/// Context values the kernel gives every RUN_AGENT prompt without the step listing them.
pub const AGENT_CONTEXT_INPUTS: &[&str] = &[
    "run_id",
    "run_dir",
    "step_id",
    "step_dir",
    "worktree",
    "repo",
    "base_sha",
    "workflow_id",
    "component_kind",
    "eval_profile",
];

/// Evidence the kernel looks up by name for a RUN_AGENT step that lists it in `inputs` (the
/// latest of the run so far; nothing when the run has none yet).
pub const AGENT_EVIDENCE_INPUTS: &[&str] = &[
    "diff",
    "fix_instructions",
    "blockers",
    "risk_flags",
    "planner_decision",
    "harness_report",
    "validation_report",
];

/// The planner envelope fields every EVALUATE prompt receives.
pub const PLANNER_ENVELOPE_INPUTS: &[&str] = &[
    "run_id",
    "workflow_id",
    "step_id",
    "evaluate_prompt",
    "allowed_next_steps",
    "provenance_window",
    "evidence",
];

/// Checks every prompt and policy reference of a workflow.
pub fn check_prompts(workflow: &Workflow, catalog: &Catalog, diagnostics: &mut Diagnostics) {
    if let Some(policy) = &workflow.defaults.policy {
        check_policy(policy, catalog, diagnostics);
    }
    for step in &workflow.steps {
        match &step.body {
            StepBody::RunAgent(agent) => {
                if let Some(found) = check_prompt(
                    step,
                    &agent.prompt,
                    &agent.inputs,
                    &[PromptRole::Task],
                    AGENT_CONTEXT_INPUTS,
                    catalog,
                    diagnostics,
                ) {
                    check_undeclared_inputs(step, found, &agent.inputs, diagnostics);
                    check_named_inputs(workflow, found, &agent.inputs, diagnostics);
                    if let Inputs::Values(values) = &agent.inputs {
                        check_literal_types(found, values, diagnostics);
                    }
                }
                if let PromptSpec::Literal(text) = &agent.prompt.value {
                    check_near_miss_reference(text, agent.prompt.pos, catalog, diagnostics);
                    check_literal_prompt_inputs(step, &agent.inputs, diagnostics);
                }
                if let Some(policy) = &agent.policy {
                    check_policy(policy, catalog, diagnostics);
                }
            }
            StepBody::RunValidation(validation) => {
                if let Some(policy) = &validation.policy {
                    check_policy(policy, catalog, diagnostics);
                }
            }
            StepBody::Evaluate(evaluate) => {
                if let PromptSpec::Literal(text) = &evaluate.prompt.value {
                    check_near_miss_reference(text, evaluate.prompt.pos, catalog, diagnostics);
                }
                let roles = [PromptRole::Planner, PromptRole::Triage, PromptRole::Risk];
                check_prompt(
                    step,
                    &evaluate.prompt,
                    &evaluate.inputs,
                    &roles,
                    PLANNER_ENVELOPE_INPUTS,
                    catalog,
                    diagnostics,
                );
            }
            _ => {}
        }
    }
}

fn resolve<'c>(
    reference: &str,
    pos: super::yaml::Pos,
    catalog: &'c Catalog,
    diagnostics: &mut Diagnostics,
) -> Option<&'c Prompt> {
    if let Some(broken) = catalog.broken(reference) {
        // Each problem of the file, so one `validate` shows everything to fix.
        for problem in &broken.problems {
            let reported = diagnostics.error(
                pos,
                "invalid-prompt",
                format!("prompt `{reference}` is invalid: {}", problem.message),
            );
            if let Some(hint) = &problem.hint {
                reported.hint(hint.clone());
            }
        }
        return None;
    }
    let found = catalog.get(reference);
    if found.is_none() {
        diagnostics
            .error(pos, "unknown-prompt", format!("prompt `{reference}` is not in the prompt library"))
            .suggest(reference, catalog.references(), "list the library with `tnh-conductor prompts list`, or add the file under .tnh/prompts/");
    }
    if let Some(prompt) = found.filter(|prompt| prompt.status == PromptStatus::Deprecated) {
        diagnostics
            .warning(
                pos,
                "deprecated-prompt",
                format!("prompt `{}` is deprecated", prompt.reference()),
            )
            .hint("move to a newer version of the prompt");
    }
    found
}

/// Reports a role that does not fit; returns whether it fits.
fn check_role(
    prompt: &Prompt,
    pos: super::yaml::Pos,
    allowed: &[PromptRole],
    user: &str,
    diagnostics: &mut Diagnostics,
) -> bool {
    if allowed.contains(&prompt.role) {
        return true;
    }
    let names: Vec<&str> = allowed.iter().map(|role| role.name()).collect();
    diagnostics
        .error(
            pos,
            "prompt-role",
            format!(
                "`{}` is a {} prompt; {user} need a {} prompt",
                prompt.reference(),
                prompt.role.name(),
                names.join(" or ")
            ),
        )
        .hint("use a prompt written for this opcode (see `tnh-conductor prompts list`)");
    false
}

/// Checks a step's prompt reference and the required inputs it needs; returns the prompt
/// when it resolves and fits the opcode.
#[allow(clippy::too_many_arguments)]
fn check_prompt<'c>(
    step: &Step,
    prompt: &At<PromptSpec>,
    inputs: &Inputs,
    roles: &[PromptRole],
    implicit: &[&str],
    catalog: &'c Catalog,
    diagnostics: &mut Diagnostics,
) -> Option<&'c Prompt> {
    let PromptSpec::Reference(reference) = &prompt.value else {
        return None;
    };
    let found = resolve(reference.as_str(), prompt.pos, catalog, diagnostics)?;
    if !check_role(
        found,
        prompt.pos,
        roles,
        &format!("{} steps", step.body.opcode().name()),
        diagnostics,
    ) {
        // Inputs of a prompt written for another opcode say nothing useful about this step.
        return None;
    }
    let supplied: Vec<&str> = match inputs {
        // A computed input mapping cannot be checked before the run.
        Inputs::Expression(_) => return Some(found),
        Inputs::Names(names) => names.iter().map(|name| name.value.as_str()).collect(),
        Inputs::Values(values) => values.iter().map(|(name, _)| name.value.as_str()).collect(),
        Inputs::None => Vec::new(),
    };
    for input in found.inputs.iter().filter(|input| input.required) {
        let name = input.name.as_str();
        if !supplied.contains(&name) && !implicit.contains(&name) {
            diagnostics
                .error(
                    prompt.pos,
                    "missing-input",
                    format!(
                        "prompt `{}` requires input `{name}`, which step `{}` does not supply",
                        found.reference(),
                        step.id.value
                    ),
                )
                .hint(if input.description.is_empty() {
                    format!(
                        "add `{name}` ({}) to the step's inputs",
                        input.input_type.name()
                    )
                } else {
                    format!(
                        "add `{name}` ({}: {}) to the step's inputs",
                        input.input_type.name(),
                        input.description
                    )
                });
        }
    }
    Some(found)
}

/// A RUN_AGENT step's input its prompt does not declare would be dropped when the prompt is
/// rendered (a misspelt `fix_instuctions` would leave the agent without the planner's
/// instructions): an error, with the nearest declared name. The kernel's context values
/// (`AGENT_CONTEXT_INPUTS`) stay allowed: the kernel gives them to any prompt that declares
/// them, so naming one is harmless.
fn check_undeclared_inputs(
    step: &Step,
    prompt: &Prompt,
    inputs: &Inputs,
    diagnostics: &mut Diagnostics,
) {
    let names: Vec<&At<String>> = match inputs {
        Inputs::Names(names) => names.iter().collect(),
        Inputs::Values(values) => values.iter().map(|(name, _)| name).collect(),
        Inputs::Expression(_) | Inputs::None => return,
    };
    let declared: Vec<&str> = prompt
        .inputs
        .iter()
        .map(|input| input.name.as_str())
        .collect();
    for name in names {
        let typed = name.value.as_str();
        if declared.contains(&typed) || AGENT_CONTEXT_INPUTS.contains(&typed) {
            continue;
        }
        let fallback = if declared.is_empty() {
            format!(
                "prompt `{}` declares no inputs; remove `{typed}` from the step's inputs",
                prompt.reference()
            )
        } else {
            format!(
                "prompt `{}` declares {}; remove `{typed}` or declare it in the prompt's front matter",
                prompt.reference(),
                declared
                    .iter()
                    .map(|name| format!("`{name}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        diagnostics
            .error(
                name.pos,
                "undeclared-input",
                format!(
                    "step `{}` gives input `{typed}`, which prompt `{}` does not declare (it would be dropped)",
                    step.id.value,
                    prompt.reference()
                ),
            )
            .suggest(typed, declared.iter().copied(), fallback);
    }
}

/// A name in a RUN_AGENT step's `inputs` list is looked up when the step runs: a run
/// parameter of that name, a context value or a piece of evidence the kernel knows. A name
/// the prompt declares that is none of these can never have a value: the prompt would miss it
/// (a required input stops the run, exit 4; an optional one is dropped without a word).
/// Reported now, at the name (`missing-input`). Names the prompt does not declare are
/// `undeclared-input`.
fn check_named_inputs(
    workflow: &Workflow,
    prompt: &Prompt,
    inputs: &Inputs,
    diagnostics: &mut Diagnostics,
) {
    let Inputs::Names(names) = inputs else {
        return;
    };
    let params: Vec<&str> = workflow
        .params
        .iter()
        .map(|param| param.name.value.as_str())
        .collect();
    for name in names {
        let typed = name.value.as_str();
        if params.contains(&typed)
            || AGENT_CONTEXT_INPUTS.contains(&typed)
            || AGENT_EVIDENCE_INPUTS.contains(&typed)
            || !prompt.inputs.iter().any(|input| input.name == typed)
        {
            continue;
        }
        let agent_step = workflow.steps.iter().find(|step| {
            step.id.value.as_str() == typed && matches!(step.body, StepBody::RunAgent(_))
        });
        let reported = diagnostics.error(
            name.pos,
            "missing-input",
            format!(
                "input `{typed}` is named, but nothing can supply it: there is no param `{typed}`, and it is not a value the kernel gives"
            ),
        );
        if agent_step.is_some() {
            reported.hint(format!(
                "to give step `{typed}`'s answer, use the mapping form: `inputs: {{{typed}: \"${{{{ ctx.steps.{typed}?.final_response }}}}\", …}}`"
            ));
            continue;
        }
        let candidates = params
            .iter()
            .copied()
            .chain(AGENT_CONTEXT_INPUTS.iter().copied())
            .chain(AGENT_EVIDENCE_INPUTS.iter().copied());
        reported.suggest(
            typed,
            candidates,
            format!(
                "declare `params.{typed}`, or give the value with the mapping form (`inputs: {{{typed}: …}}`)"
            ),
        );
    }
}

/// A prompt that is one token (no whitespace inside) and looks like a prompt reference
/// (`word.word` or `word.word.vN`, any case, `-` or `_`) or is close to one of the library,
/// but is not one, is a typo of a reference: `task.implement_adr.V1`, `task.implement-adr.v1`,
/// `task.implement_adr` (no version), `"task.implement_adr.v1 "` (a space). As literal text it
/// would be sent as the whole task, and the agent would improvise. Reported as an unknown
/// prompt with the nearest reference; task texts (with spaces) stay literal.
fn check_near_miss_reference(
    text: &str,
    pos: super::yaml::Pos,
    catalog: &Catalog,
    diagnostics: &mut Diagnostics,
) {
    let token = text.trim();
    if token.is_empty() || token.contains(char::is_whitespace) || token.contains("${") {
        return;
    }
    let normalized = token.to_ascii_lowercase().replace('-', "_");
    let exact = catalog
        .references()
        .find(|reference| *reference == normalized);
    let near = exact
        .or_else(|| nearest(&normalized, catalog.references()))
        .or_else(|| nearest(token, catalog.references()));
    if near.is_none() && !looks_like_reference(token) {
        return;
    }
    let reported = diagnostics.error(
        pos,
        "unknown-prompt",
        format!(
            "prompt `{text}` looks like a prompt reference but is not one (references are `family.name.vN`: lowercase, `_`, a version), so it would be sent, as it is, as the whole prompt"
        ),
    );
    match near {
        Some(reference) => reported.hint(format!("did you mean `{reference}`?")),
        None => reported.hint(
            "write a reference from `tnh-conductor prompts list` (or add the prompt under .tnh/prompts/), or write the task as a sentence",
        ),
    }
}

/// `word.word` or `word.word.vN`: dot-separated words of letters, digits, `-` and `_`, the
/// first starting with a letter.
fn looks_like_reference(token: &str) -> bool {
    let parts: Vec<&str> = token.split('.').collect();
    let word = |part: &&str| {
        !part.is_empty()
            && part
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '_' | '-'))
    };
    (2..=3).contains(&parts.len())
        && parts.iter().all(word)
        && parts[0].starts_with(|first: char| first.is_ascii_alphabetic())
}

/// A RUN_AGENT step whose prompt is literal text gets no inputs: the text is sent as written
/// (with `${name}` substituted), so every input the step gives would be computed and then
/// dropped. An error, like an input a prompt reference does not declare (`undeclared-input`),
/// reported at the first input.
fn check_literal_prompt_inputs(step: &Step, inputs: &Inputs, diagnostics: &mut Diagnostics) {
    let first = match inputs {
        Inputs::None => return,
        Inputs::Names(names) => names.first().map(|name| name.pos),
        Inputs::Values(values) => values.first().map(|(name, _)| name.pos),
        Inputs::Expression(node) => Some(node.pos),
    };
    let Some(pos) = first else {
        return;
    };
    diagnostics
        .error(
            pos,
            "literal-prompt-inputs",
            format!(
                "step `{}` gives `inputs`, but its prompt is literal text, which takes no inputs (they would be dropped)",
                step.id.value
            ),
        )
        .hint("use a prompt reference whose front matter declares these inputs (`tnh-conductor prompts list`, or add one under .tnh/prompts/), or remove `inputs`; literal text can use `${name}` substitutions only");
}

fn check_policy(policy: &At<PolicySpec>, catalog: &Catalog, diagnostics: &mut Diagnostics) {
    let PolicySpec::Reference(reference) = &policy.value else {
        return;
    };
    if let Some(found) = resolve(reference.as_str(), policy.pos, catalog, diagnostics)
        && check_role(
            found,
            policy.pos,
            &[PromptRole::Policy],
            "`policy:` entries",
            diagnostics,
        )
    {
        check_policy_prompt_literals(found, policy.pos, diagnostics);
    }
}

/// A policy prompt's fields are used as written, like an inline policy's: a `${…}` or
/// `${{ … }}` in them would make a glob that matches nothing (a forbidden path not forbidden).
/// Reported at the reference, naming the prompt's file.
fn check_policy_prompt_literals(
    prompt: &Prompt,
    pos: super::yaml::Pos,
    diagnostics: &mut Diagnostics,
) {
    let Some(fields) = &prompt.policy else {
        return;
    };
    let lists = [
        ("allowed_paths", &fields.allowed_paths),
        ("forbidden_paths", &fields.forbidden_paths),
        ("forbidden_operations", &fields.forbidden_operations),
    ];
    let entries = lists
        .iter()
        .flat_map(|(key, values)| values.iter().map(move |value| (*key, value)))
        .chain(fields.check.iter().map(|value| ("check", value)));
    for (key, value) in entries.filter(|(_, value)| value.contains("${")) {
        diagnostics
            .error(
                pos,
                "expression-not-allowed",
                format!(
                    "policy prompt `{}` ({}) has `{value}` in `{key}`: `${{…}}` and `${{{{ … }}}}` are not substituted in a policy, so it would be used as written",
                    prompt.reference(),
                    prompt.source.display()
                ),
            )
            .hint("write the literal value in the prompt's front matter");
    }
}

/// A literal input value (not an expression) of the wrong type for the prompt's declaration
/// would fail when the step renders its prompt: reported now, at the value.
fn check_literal_types(
    prompt: &Prompt,
    values: &[(At<String>, super::yaml::Node)],
    diagnostics: &mut Diagnostics,
) {
    for (name, node) in values {
        if node.as_str().is_some_and(|text| text.contains("${")) {
            continue;
        }
        let Some(declared) = prompt.inputs.iter().find(|input| input.name == name.value) else {
            continue;
        };
        let value = node.to_json();
        if value.is_null() || declared.input_type.accepts(&value) {
            continue;
        }
        diagnostics
            .error(
                node.pos,
                "input-type",
                format!(
                    "input `{}` of prompt `{}` must be of type {}, but this is {}",
                    name.value,
                    prompt.reference(),
                    declared.input_type.name(),
                    node.value.kind_name()
                ),
            )
            .hint(format!(
                "give a value of type {} (the prompt declares `{}` as {})",
                declared.input_type.name(),
                name.value,
                declared.input_type.name()
            ));
    }
}

/// Every policy's `check` (inline, or in a referenced policy prompt's front matter) names a
/// one-parameter function of the workflow's script: the host calls `NAME(change)` for each
/// changed file, and a typo, a wrong arity or an expression would otherwise be found only
/// after the agent worked (each changed file then fails the check). `functions` are the
/// script's callable functions ([`super::expressions::ScriptFunction`]).
pub fn check_policy_functions(
    workflow: &Workflow,
    catalog: &Catalog,
    functions: &[ScriptFunction],
    diagnostics: &mut Diagnostics,
) {
    let step_policies = workflow.steps.iter().filter_map(|step| match &step.body {
        StepBody::RunAgent(agent) => agent.policy.as_ref(),
        StepBody::RunValidation(validation) => validation.policy.as_ref(),
        _ => None,
    });
    for policy in workflow.defaults.policy.iter().chain(step_policies) {
        let (name, pos, owner) = match &policy.value {
            PolicySpec::Inline(inline) => match &inline.check {
                Some(check) => (check.value.as_str(), check.pos, String::from("check")),
                None => continue,
            },
            PolicySpec::Reference(reference) => {
                let Some(check) = catalog
                    .get(reference.as_str())
                    .filter(|prompt| prompt.role == PromptRole::Policy)
                    .and_then(|prompt| prompt.policy.as_ref())
                    .and_then(|fields| fields.check.as_deref())
                else {
                    continue;
                };
                (
                    check,
                    policy.pos,
                    format!("policy prompt `{reference}`'s check"),
                )
            }
        };
        // A `${…}` is reported as such (`expression-not-allowed`).
        if !name.contains("${") {
            check_function(name, pos, &owner, workflow, functions, diagnostics);
        }
    }
}

/// A policy check's function: a public one-parameter function of the workflow's `script`.
fn check_function(
    name: &str,
    pos: super::yaml::Pos,
    owner: &str,
    workflow: &Workflow,
    functions: &[ScriptFunction],
    diagnostics: &mut Diagnostics,
) {
    if !is_identifier(name) {
        diagnostics
            .error(
                pos,
                "unknown-function",
                format!("{owner} `{name}` is not a function name"),
            )
            .hint(format!(
                "write the name of a function of the workflow's `script`, without arguments: {ONE_PARAMETER}"
            ));
        return;
    }
    if functions
        .iter()
        .filter(callable)
        .any(|function| function.name == name)
    {
        return;
    }
    if workflow.script.is_none() {
        diagnostics
            .error(
                pos,
                "unknown-function",
                format!("{owner} `{name}` names a function, but the workflow has no `script`"),
            )
            .hint(format!(
                "add a `script` with `fn {name}(change) {{ … }}`: {ONE_PARAMETER}"
            ));
        return;
    }
    if !same_name_mismatch(name, pos, owner, functions, diagnostics) {
        not_a_function(name, pos, owner, functions, diagnostics);
    }
}

/// Reports a function of that name the host cannot call (private, or of another arity);
/// `true` when it did.
fn same_name_mismatch(
    name: &str,
    pos: super::yaml::Pos,
    owner: &str,
    functions: &[ScriptFunction],
    diagnostics: &mut Diagnostics,
) -> bool {
    let same_name: Vec<&ScriptFunction> = functions
        .iter()
        .filter(|function| function.name == name)
        .collect();
    if let Some(private) = same_name.iter().find(|function| function.private) {
        diagnostics
            .error(
                pos,
                "unknown-function",
                format!("{owner} `{name}` is a private function of the script, which the host cannot call"),
            )
            .hint(format!(
                "remove `private` from `fn {name}({})`",
                if private.arity == 1 { "change" } else { "…" }
            ));
        return true;
    }
    if let Some(other) = same_name.first() {
        let takes = match other.arity {
            0 => "takes no parameter".to_owned(),
            count => format!("takes {count} parameters"),
        };
        diagnostics
            .error(
                pos,
                "unknown-function",
                format!("{owner} `{name}` {takes}; a check takes one"),
            )
            .hint(format!("define `fn {name}(change)`: {ONE_PARAMETER}"));
        return true;
    }
    false
}

/// Reports a name the script has no function for, with the callable ones to choose from.
fn not_a_function(
    name: &str,
    pos: super::yaml::Pos,
    owner: &str,
    functions: &[ScriptFunction],
    diagnostics: &mut Diagnostics,
) {
    let candidates: Vec<&str> = functions
        .iter()
        .filter(callable)
        .map(|function| function.name.as_str())
        .collect();
    let fallback = if candidates.is_empty() {
        format!(
            "the script has no one-parameter function; define `fn {name}(change)`: {ONE_PARAMETER}"
        )
    } else {
        format!(
            "the script's one-parameter functions: {}",
            candidates
                .iter()
                .map(|candidate| format!("`{candidate}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    diagnostics
        .error(
            pos,
            "unknown-function",
            format!("{owner} `{name}` is not a function of the workflow's `script`"),
        )
        .suggest(name, candidates, fallback);
}

/// What a policy check is called with and returns, for the hints.
const ONE_PARAMETER: &str = "a policy check is called with one argument, the changed file, and returns `true` or a reason string";

/// A function the host can call as a check: public, of one parameter.
fn callable(function: &&ScriptFunction) -> bool {
    !function.private && function.arity == 1
}

/// A bare Rhai function name (a letter or `_`, then letters, digits or `_`).
fn is_identifier(name: &str) -> bool {
    name.chars()
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && name
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}
