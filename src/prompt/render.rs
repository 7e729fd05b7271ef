//! Strict rendering with minijinja: undefined variables, missing or undeclared inputs and wrong
//! types are errors naming the prompt file and line; there is no loader (no includes); the
//! template language is the bounded subset of [`super::sandbox`], and so is the output's size.

use minijinja::Template;

use super::sandbox::{self, BoundedOutput, MAX_RENDERED_BYTES};
use super::{Prompt, PromptError};

/// Renders a prompt with inputs given as a JSON object.
pub fn render(
    prompt: &Prompt,
    inputs: &serde_json::Map<String, serde_json::Value>,
) -> Result<String, PromptError> {
    let file = prompt.source.display().to_owned();
    check_inputs(prompt, inputs)?;
    let environment = sandbox::environment();
    let template = compile(&environment, &file, &prompt.body, prompt.body_line)
        .map_err(|mut problems| problems.remove(0))?;
    let mut context = inputs.clone();
    for declared in &prompt.inputs {
        // Optional inputs that were not given are none: `{% if x %}` works, `{{ x }}` is empty.
        context
            .entry(declared.name.clone())
            .or_insert(serde_json::Value::Null);
    }
    let mut output = BoundedOutput::default();
    let result = template
        .render_captured_to(minijinja::value::Serde(&context), &mut output)
        .map(drop);
    if let Err(failure) = result {
        let line = body_line(prompt.body_line, &failure);
        if output.exceeded {
            return Err(PromptError::Render {
                file,
                line,
                message: format!(
                    "the rendered prompt exceeds the limit of {} MiB",
                    MAX_RENDERED_BYTES / (1024 * 1024)
                ),
                hint: "a prompt is instructions, not data: pass large evidence as a file the agent reads, or loop over less".to_owned(),
            });
        }
        return Err(PromptError::Render {
            file,
            line,
            hint: render_hint(&failure),
            message: describe(&failure),
        });
    }
    // The writer only ever receives the template's `&str` pieces.
    let mut text = String::from_utf8_lossy(&output.bytes).into_owned();
    // minijinja drops the template's final newline; a prompt file's text keeps it.
    if prompt.body.ends_with('\n') && !text.ends_with('\n') {
        text.push('\n');
    }
    Ok(text)
}

/// Every problem of a prompt's template: a syntax error, or the constructs prompts may not use.
pub(crate) fn template_problems(file: &str, body: &str, body_line: u32) -> Vec<PromptError> {
    let environment = sandbox::environment();
    compile(&environment, file, body, body_line)
        .err()
        .unwrap_or_default()
}

fn compile<'env>(
    environment: &'env minijinja::Environment<'static>,
    file: &'env str,
    body: &'env str,
    first_line: u32,
) -> Result<Template<'env, 'env>, Vec<PromptError>> {
    let template = environment
        .template_from_named_str(file, body)
        .map_err(|failure| {
            vec![PromptError::Template {
                file: file.to_owned(),
                line: body_line(first_line, &failure),
                message: describe(&failure),
                hint: "fix the template syntax (minijinja, see docs/prompts.md)".to_owned(),
            }]
        })?;
    let refused: Vec<PromptError> = sandbox::refusals(&template)
        .into_iter()
        .map(|refusal| PromptError::Template {
            file: file.to_owned(),
            line: first_line + refusal.line.saturating_sub(1),
            message: refusal.message,
            hint: refusal.hint,
        })
        .collect();
    if refused.is_empty() {
        Ok(template)
    } else {
        Err(refused)
    }
}

fn check_inputs(
    prompt: &Prompt,
    inputs: &serde_json::Map<String, serde_json::Value>,
) -> Result<(), PromptError> {
    let error = |message: String| PromptError::Render {
        file: prompt.source.display().to_owned(),
        line: prompt.body_line,
        message,
        hint: "pass every required input with the declared type (`-i name=value`)".to_owned(),
    };
    for declared in &prompt.inputs {
        match inputs.get(&declared.name) {
            None | Some(serde_json::Value::Null) if declared.required => {
                return Err(error(format!(
                    "the required input `{}` ({}) is missing",
                    declared.name,
                    declared.input_type.name()
                )));
            }
            Some(value) if !value.is_null() && !declared.input_type.accepts(value) => {
                return Err(error(format!(
                    "input `{}` must be of type {}, got {}",
                    declared.name,
                    declared.input_type.name(),
                    json_kind(value)
                )));
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
        return Err(error(format!(
            "input `{name}` is not declared by `{}` (declared: {})",
            prompt.reference(),
            declared.join(", ")
        )));
    }
    Ok(())
}

fn render_hint(failure: &minijinja::Error) -> String {
    match failure.kind() {
        minijinja::ErrorKind::OutOfFuel => {
            "the template runs too many steps: loop over fewer items".to_owned()
        }
        minijinja::ErrorKind::UndefinedError => {
            "declare the variable as an input in the front matter, or guard it with `{% if x is defined %}`".to_owned()
        }
        _ => "check the template at that line (docs/prompts.md)".to_owned(),
    }
}

fn body_line(first_line: u32, failure: &minijinja::Error) -> u32 {
    let line = failure
        .line()
        .and_then(|line| u32::try_from(line).ok())
        .unwrap_or(1);
    first_line + line.saturating_sub(1)
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
