//! The prompt library: versioned Markdown prompts with YAML front matter, referenced from
//! workflows as `family.name.vN`, and rendered strictly.
//!
//! "The system is written in English": prompts are the program, so they get the rigour of code.
//! A prompt declares its inputs with types; rendering fails loudly (naming the prompt file and
//! line) on an undefined variable, a missing input or a wrong type, and template cost is bounded.
//! The built-in library is embedded in the binary; a repository's `.tnh/prompts/` overrides it.

mod catalog;
mod front_matter;
mod render;

pub use catalog::{BUILTIN_FILES, Catalog, builtin_catalog};
pub use front_matter::{InputType, Prompt, PromptInput, PromptRole, PromptSource, PromptStatus};
pub use render::render;

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
    /// Rendering failed.
    #[error("{file}:{line}: {message}")]
    Render {
        /// The prompt file.
        file: String,
        /// 1-based line in the prompt file.
        line: u32,
        /// What is wrong.
        message: String,
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
            PromptError::Render { .. } => {
                "pass every required input with the declared type (`-i name=value`)".to_owned()
            }
            PromptError::Read { .. } => "check the folder's permissions".to_owned(),
        })
    }
}
