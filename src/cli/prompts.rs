//! `tnh-conductor prompts list | show REF | render REF -i k=v…`.

use std::fmt::Write as _;

use clap::Subcommand;

use super::{Cli, Output, optional_repo_root};
use crate::error::{Error, ExitStatus, Result};
use crate::prompt::{Catalog, Prompt, render};
use crate::workflow::yaml;

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
        }
        PromptsCommand::Show { reference } => output.print(&describe(catalog.resolve(reference)?)),
        PromptsCommand::Render { reference, inputs } => {
            let prompt = catalog.resolve(reference)?;
            let values = parse_inputs(inputs)?;
            output.print(&render(prompt, &values)?);
        }
    }
    Ok(ExitStatus::Success)
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

/// `name=value` pairs, values parsed as YAML (so `3` is a number and `[a, b]` a list).
pub fn parse_inputs(pairs: &[String]) -> Result<serde_json::Map<String, serde_json::Value>> {
    pairs
        .iter()
        .map(|pair| {
            let (name, text) = pair.split_once('=').ok_or_else(|| {
                Error::usage(
                    format!("`{pair}` is not NAME=VALUE"),
                    "write inputs as `-i name=value`",
                )
            })?;
            let value = if text.trim().is_empty() {
                serde_json::Value::String(String::new())
            } else {
                yaml::parse(text.as_bytes())
                    .map(|node| node.to_json())
                    .map_err(|error| {
                        Error::usage(
                            format!("the value of `{name}` is not valid YAML: {}", error.message),
                            "quote text values: -i name='a: b'",
                        )
                    })?
            };
            Ok((name.to_owned(), value))
        })
        .collect()
}
