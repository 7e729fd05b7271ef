//! The prompt library: versioned Markdown prompts with YAML front matter, referenced from
//! workflows as `family.name.vN`, and rendered strictly.
//!
//! "The system is written in English": prompts are the program, so they get the rigour of code.
//! A prompt declares its inputs with types; rendering fails loudly (naming the prompt file and
//! line) on an undefined variable, a missing input or a wrong type, and template cost is bounded.
//! The built-in library is embedded in the binary; a repository's `.tnh/prompts/` overrides it.

mod catalog;
mod front_matter;
mod read;
mod render;
mod sandbox;

pub use catalog::{BUILTIN_FILES, BrokenPrompt, Catalog, PromptErrorText, builtin_catalog};
pub use front_matter::{
    FrontMatterDocument, InputDocument, InputType, Prompt, PromptInput, PromptRole, PromptSource,
    PromptStatus, front_matter_keys,
};
pub use read::MAX_PROMPT_FILE_BYTES;
pub use render::render;
pub use sandbox::{ALLOWED_FILTERS, MAX_RENDERED_BYTES};

use std::path::PathBuf;

/// A prompt could not be loaded or rendered.
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    /// A prompt file is malformed.
    #[error("{file}:{line}:{column}: {message}")]
    Invalid {
        /// The prompt file.
        file: String,
        /// 1-based line.
        line: u32,
        /// 1-based column.
        column: u32,
        /// What is wrong.
        message: String,
    },
    /// A reference names no prompt.
    #[error("no prompt `{reference}` in the library")]
    Unknown {
        /// The reference as written.
        reference: String,
        /// A near reference, if any.
        suggestion: Option<String>,
    },
    /// A prompt file is not UTF-8 text or is too large to be a prompt.
    #[error("{file}: {message}")]
    NotText {
        /// The prompt file.
        file: String,
        /// What is wrong.
        message: String,
        /// What to do.
        hint: String,
    },
    /// A prompt's template does not compile, uses what prompts may not, or reads a variable
    /// the prompt does not declare.
    #[error("{file}:{line}{}: {message}", column_suffix(*column))]
    Template {
        /// The prompt file.
        file: String,
        /// 1-based line in the prompt file.
        line: u32,
        /// 1-based column in the prompt file, 0 when not known.
        column: u32,
        /// What is wrong.
        message: String,
        /// What to do.
        hint: String,
    },
    /// A reference names a prompt file that has problems.
    #[error(
        "prompt `{reference}` ({file}) is invalid: {}",
        list_problems(problems)
    )]
    Broken {
        /// The reference as written.
        reference: String,
        /// The prompt file.
        file: String,
        /// Every problem of the file, as `FILE:LINE:COL: message`.
        problems: Vec<String>,
    },
    /// The inputs given do not fit the prompt's declared inputs: a required one is missing,
    /// one has the wrong type, or one is not declared.
    #[error("{file}:{line}: {message}")]
    Inputs {
        /// The prompt file.
        file: String,
        /// The line where the template starts.
        line: u32,
        /// What is wrong.
        message: String,
        /// What to do.
        hint: String,
    },
    /// Rendering the template failed.
    #[error("{file}:{line}: {message}")]
    Render {
        /// The prompt file.
        file: String,
        /// 1-based line in the prompt file.
        line: u32,
        /// What is wrong.
        message: String,
        /// What to do.
        hint: String,
    },
    /// Reading a prompt folder failed.
    #[error("failed to read prompts in `{path}`: {source}")]
    Read {
        /// The folder or file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

impl PromptError {
    /// Line and column in the prompt file, for ordering a file's problems (0 when unknown).
    pub fn position(&self) -> (u32, u32) {
        match self {
            PromptError::Invalid { line, column, .. } => (*line, *column),
            PromptError::Template { line, column, .. } => (*line, *column),
            PromptError::Render { line, .. } | PromptError::Inputs { line, .. } => (*line, 0),
            _ => (0, 0),
        }
    }

    /// What to do about it.
    pub fn hint(&self) -> Option<String> {
        Some(match self {
            PromptError::Invalid { .. } => {
                "fix the prompt's front matter (see docs/prompts.md)".to_owned()
            }
            PromptError::Unknown {
                suggestion: Some(near),
                ..
            } => format!("did you mean `{near}`?"),
            PromptError::Unknown { .. } => {
                "list the library with `tnh-conductor prompts list`".to_owned()
            }
            PromptError::NotText { hint, .. }
            | PromptError::Template { hint, .. }
            | PromptError::Render { hint, .. }
            | PromptError::Inputs { hint, .. } => hint.clone(),
            PromptError::Broken { .. } => {
                "fix the prompt file; `tnh-conductor prompts list` names every invalid prompt"
                    .to_owned()
            }
            PromptError::Read { .. } => "check the folder's permissions".to_owned(),
        })
    }
}

/// `:COL` when the column is known.
fn column_suffix(column: u32) -> String {
    if column == 0 {
        String::new()
    } else {
        format!(":{column}")
    }
}

/// One problem a line, for a message that carries several.
fn list_problems(problems: &[String]) -> String {
    problems
        .iter()
        .map(|problem| format!("\n  {problem}"))
        .collect()
}
