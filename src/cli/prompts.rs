//! `tnh-conductor prompts list | show REF | render REF -i k=v…`.

use std::fmt::Write as _;

use clap::Subcommand;

use super::{Cli, Output, optional_repo_root};
use crate::document::yaml;
use crate::error::{Error, ExitStatus, Result};
use crate::prompt::{Catalog, Prompt, render};

/// `prompts …`.
#[derive(Debug, Subcommand)]
pub enum PromptsCommand {
    /// Every prompt in the library (built-in and the repository's `.tnh/prompts/`).
    List,
    /// One prompt's front matter and template.
    Show {
        /// `family.name.vN`.
        reference: String,
    },
    /// Render a prompt with inputs, strictly.
    Render {
        /// `family.name.vN`.
        reference: String,
        /// An input, `name=value` (the value is parsed as YAML: `n=3`, `paths=[a, b]`).
        #[arg(short = 'i', long = "input", value_name = "NAME=VALUE")]
        inputs: Vec<String>,
    },
}

/// Runs a `prompts` subcommand.
pub fn cmd_prompts(cli: &Cli, command: &PromptsCommand, output: &mut Output) -> Result<ExitStatus> {
    let catalog = Catalog::load(optional_repo_root(cli)?.as_deref())?;
    match command {
        PromptsCommand::List => {
            let width = catalog.references().map(str::len).max().unwrap_or(0);
            let mut text = String::new();
            for prompt in catalog.iter() {
                let _ = writeln!(
                    text,
                    "{:width$}  {:8} {:10} {}",
                    prompt.reference(),
                    prompt.role.name(),
                    prompt.status.name(),
                    prompt.summary
                );
            }
            output.print(&text);
            if !catalog.broken_files().is_empty() {
                output.diagnostic(&broken_report(&catalog));
                return Ok(ExitStatus::Failure);
            }
        }
        PromptsCommand::Show { reference } => output.print(&describe(catalog.resolve(reference)?)),
        PromptsCommand::Render { reference, inputs } => {
            let prompt = catalog.resolve(reference)?;
            let values = parse_inputs(inputs, prompt)?;
            output.print(&render(prompt, &values)?);
        }
    }
    Ok(ExitStatus::Success)
}

/// The repository's prompt files that could not be loaded, each with all its problems.
fn broken_report(catalog: &Catalog) -> String {
    let mut text = String::new();
    for broken in catalog.broken_files() {
        let name = broken
            .reference
            .as_deref()
            .map(|reference| format!("`{reference}` "))
            .unwrap_or_default();
        let _ = writeln!(
            text,
            "error: prompt {name}({}) is invalid; workflows that use it cannot run:",
            broken.file
        );
        for problem in &broken.problems {
            let _ = writeln!(text, "  {}", problem.message);
            if let Some(hint) = &problem.hint {
                let _ = writeln!(text, "    hint: {hint}");
            }
        }
    }
    text
}

fn describe(prompt: &Prompt) -> String {
    let mut text = format!(
        "# {}  ({})\nrole: {}\nstatus: {}\nsummary: {}\n",
        prompt.reference(),
        prompt.source.display(),
        prompt.role.name(),
        prompt.status.name(),
        prompt.summary
    );
    if !prompt.inputs.is_empty() {
        text.push_str("inputs:\n");
        for input in &prompt.inputs {
            let required = if input.required {
                "required"
            } else {
                "optional"
            };
            let _ = writeln!(
                text,
                "  {} ({}, {required}): {}",
                input.name,
                input.input_type.name(),
                input.description
            );
        }
    }
    if !prompt.outputs.is_empty() {
        let _ = writeln!(text, "outputs: {}", prompt.outputs.join("; "));
    }
    let _ = write!(text, "---\n{}", prompt.body);
    text
}

/// `name=value` pairs for `prompt`, values parsed as YAML (so `3` is a number and `[a, b]` a
/// list). As `run -p` does for a `string` parameter (docs/reference/commands.md), an input the
/// prompt declares `string` takes the text as given whenever YAML reads it as something else
/// (`-i adr_id=7`, `-i "bug=panic: at x"`, `-i "bug=[flaky] test"`). A pair without a name
/// and a name given twice are refused.
pub fn parse_inputs(
    pairs: &[String],
    prompt: &Prompt,
) -> Result<serde_json::Map<String, serde_json::Value>> {
    let mut values = serde_json::Map::new();
    for pair in pairs {
        let (name, text) = split_input(pair)?;
        let text_input = prompt.inputs.iter().any(|input| {
            input.name == name && input.input_type == crate::prompt::InputType::String
        });
        let value = match parse_value(name, text) {
            Ok(value) if !text_input || value.is_string() => value,
            _ if text_input => serde_json::Value::String(text.to_owned()),
            other => other?,
        };
        if values.contains_key(name) {
            return Err(Error::usage(
                format!("input `{name}` is given twice"),
                "give each input once",
            ));
        }
        values.insert(name.to_owned(), value);
    }
    Ok(values)
}

fn split_input(pair: &str) -> Result<(&str, &str)> {
    pair.split_once('=')
        .filter(|(name, _)| !name.trim().is_empty())
        .ok_or_else(|| {
            Error::usage(
                format!("`{pair}` is not NAME=VALUE"),
                "write inputs as `-i name=value`",
            )
        })
}

fn parse_value(name: &str, text: &str) -> Result<serde_json::Value> {
    if text.trim().is_empty() {
        return Ok(serde_json::Value::String(String::new()));
    }
    yaml::parse(text.as_bytes())
        .map(|node| node.to_json())
        .map_err(|error| {
            Error::usage(
                format!("the value of `{name}` is not valid YAML: {}", error.message),
                "quote text values: -i name='a: b'",
            )
        })
}
