//! Strict rendering with minijinja: undefined variables, missing or undeclared inputs and wrong
//! types are errors naming the prompt file and line; there is no loader (no includes) and the
//! template's cost is bounded by fuel.

use minijinja::{Environment, UndefinedBehavior};

use super::{Prompt, PromptError};

/// The most template instructions one render may execute.
const FUEL: u64 = 200_000;

/// Renders a prompt with inputs given as a JSON object.
pub fn render(
    prompt: &Prompt,
    inputs: &serde_json::Map<String, serde_json::Value>,
) -> Result<String, PromptError> {
    let file = prompt.source.display().to_owned();
    let error = |line: u32, message: String| PromptError::Render {
        file: file.clone(),
        line,
        message,
    };
    for declared in &prompt.inputs {
        match inputs.get(&declared.name) {
            None | Some(serde_json::Value::Null) if declared.required => {
                return Err(error(
                    prompt.body_line,
                    format!(
                        "the required input `{}` ({}) is missing",
                        declared.name,
                        declared.input_type.name()
                    ),
                ));
            }
            Some(value) if !value.is_null() && !declared.input_type.accepts(value) => {
                return Err(error(
                    prompt.body_line,
                    format!(
                        "input `{}` must be of type {}, got {}",
                        declared.name,
                        declared.input_type.name(),
                        json_kind(value)
                    ),
                ));
            }
            _ => {}
        }
    }
    if let Some(name) = inputs
        .keys()
        .find(|name| !prompt.inputs.iter().any(|declared| &declared.name == *name))
    {
        let declared: Vec<&str> = prompt
            .inputs
            .iter()
            .map(|input| input.name.as_str())
            .collect();
        return Err(error(
            prompt.body_line,
            format!(
                "input `{name}` is not declared by `{}` (declared: {})",
                prompt.reference(),
                declared.join(", ")
            ),
        ));
    }
    let mut environment = Environment::new();
    environment.set_undefined_behavior(UndefinedBehavior::Strict);
    environment.set_fuel(Some(FUEL));
    environment.set_recursion_limit(32);
    let mut context = inputs.clone();
    for declared in &prompt.inputs {
        // Optional inputs that were not given are defined as none, so `{% if x %}` works.
        context
            .entry(declared.name.clone())
            .or_insert(serde_json::Value::Null);
    }
    let template = environment
        .template_from_named_str(&file, &prompt.body)
        .map_err(|failure| error(body_line(prompt, &failure), describe(&failure)))?;
    let mut text = template
        .render(minijinja::value::Serde(&context))
        .map_err(|failure| error(body_line(prompt, &failure), describe(&failure)))?;
    // minijinja drops the template's final newline; a prompt file's text keeps it.
    if prompt.body.ends_with('\n') && !text.ends_with('\n') {
        text.push('\n');
    }
    Ok(text)
}

fn body_line(prompt: &Prompt, failure: &minijinja::Error) -> u32 {
    let line = failure
        .line()
        .and_then(|line| u32::try_from(line).ok())
        .unwrap_or(1);
    prompt.body_line + line.saturating_sub(1)
}

fn describe(failure: &minijinja::Error) -> String {
    match failure.detail() {
        Some(detail) => format!("{}: {detail}", failure.kind()),
        None => failure.kind().to_string(),
    }
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "a mapping",
    }
}
