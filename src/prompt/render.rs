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
            hint: render_hint(&failure, &file, line),
            file,
            line,
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

/// Every problem of a prompt's template: a syntax error, the constructs prompts may not use,
/// and, when the inputs are known (`declared`), each variable the template reads that is
/// neither a declared input, set by the template itself, nor a global (`range`, `loop`…):
/// rendering is strict, so such a variable stops every render, and it is reported when the
/// prompt is loaded instead (by `validate` and `prompts list`) rather than in the middle of a
/// run.
pub(crate) fn template_problems(
    file: &str,
    body: &str,
    body_line: u32,
    declared: Option<&[String]>,
) -> Vec<PromptError> {
    let environment = sandbox::environment();
    match compile(&environment, file, body, body_line) {
        Err(problems) => problems,
        Ok(template) => match declared {
            Some(declared) => {
                undeclared_problems(&environment, &template, file, body, body_line, declared)
            }
            None => Vec::new(),
        },
    }
}

/// The template's free variables that no declared input gives, one problem each, at the
/// first place the template reads it.
fn undeclared_problems(
    environment: &minijinja::Environment<'static>,
    template: &Template<'_, '_>,
    file: &str,
    body: &str,
    body_line: u32,
    declared: &[String],
) -> Vec<PromptError> {
    let globals: Vec<&str> = environment.globals().map(|(name, _)| name).collect();
    let mut names: Vec<String> = template
        .undeclared_variables(false)
        .into_iter()
        .filter(|name| !declared.contains(name) && !globals.contains(&name.as_str()))
        .collect();
    names.sort();
    let declared_list = if declared.is_empty() {
        "it declares no inputs".to_owned()
    } else {
        format!(
            "declared: {}",
            declared
                .iter()
                .map(|name| format!("`{name}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let mut problems: Vec<PromptError> = names
        .iter()
        .map(|name| {
            let (line, column) = sandbox::first_lookup(template, name)
                .map(|line| (line, word_column(body, line, name)))
                .unwrap_or((1, 0));
            let near = crate::document::diagnostic::nearest(name, declared.iter().map(String::as_str))
                .map(|near| format!("did you mean `{near}`? Otherwise "))
                .unwrap_or_default();
            PromptError::Template {
                file: file.to_owned(),
                line: body_line + line.saturating_sub(1),
                column,
                message: format!(
                    "the template uses `{name}`, which is not an input of the prompt ({declared_list}); rendering is strict, so every render would fail here"
                ),
                hint: format!(
                    "{near}declare it under `inputs:` in the front matter (`- {{name: {name}, type: string}}`) and give it from the step's `inputs`, or remove it from the template"
                ),
            }
        })
        .collect();
    problems.sort_by_key(PromptError::position);
    problems
}

/// The 1-based column of the first whole-word `name` on the template's `line` (1-based), or 0.
fn word_column(body: &str, line: u32, name: &str) -> u32 {
    let Some(text) = body.lines().nth(line.saturating_sub(1) as usize) else {
        return 0;
    };
    let is_word = |character: char| character.is_alphanumeric() || character == '_';
    text.match_indices(name)
        .find(|(at, _)| {
            let before = text[..*at].chars().next_back();
            let after = text[at + name.len()..].chars().next();
            !before.is_some_and(is_word) && !after.is_some_and(is_word)
        })
        .map_or(0, |(at, _)| {
            u32::try_from(text[..at].chars().count() + 1).unwrap_or(0)
        })
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
                column: 0,
                message: describe(&failure),
                hint: "fix the template syntax (minijinja, see docs/prompts.md)".to_owned(),
            }]
        })?;
    let refused: Vec<PromptError> = sandbox::refusals(&template)
        .into_iter()
        .map(|refusal| PromptError::Template {
            file: file.to_owned(),
            line: first_line + refusal.line.saturating_sub(1),
            column: 0,
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
    let error = |message: String| PromptError::Inputs {
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

/// What to do about a failed render: the fix is in the template, at `file:line`.
fn render_hint(failure: &minijinja::Error, file: &str, line: u32) -> String {
    match failure.kind() {
        minijinja::ErrorKind::OutOfFuel => {
            format!("the template at {file}:{line} runs too many steps: loop over fewer items")
        }
        minijinja::ErrorKind::UndefinedError => format!(
            "fix the template at {file}:{line}: it reads a value its inputs do not have (a field of an input that is not there, or a variable it does not declare under `inputs:`); `tnh-conductor prompts render REF -i …` tries it"
        ),
        _ => format!("fix the template at {file}:{line} (docs/prompts.md)"),
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
