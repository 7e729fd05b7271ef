//! Workflow documents: the spanned YAML tree, the document model, decoding with every error
//! collected, static validation, and the JSON Schema.

pub mod decode;
pub mod decode_params;
pub mod decode_step;
pub use crate::document::diagnostic;
pub mod duration;
pub mod expressions;
pub mod graph;
pub mod load;
pub mod model;
pub mod prompts_check;
pub mod schema;
mod stop_paths;
pub mod validate;
pub use crate::document::yaml;

/// Loading or validating a workflow failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkflowError {
    /// The workflow has diagnostics (already shown to the operator).
    #[error("workflow `{file}` is invalid ({errors} problem(s) above)")]
    Invalid {
        /// The file as given.
        file: String,
        /// How many diagnostics were reported.
        errors: usize,
    },
}

impl WorkflowError {
    /// What to do about the error.
    pub fn hint(&self) -> Option<String> {
        match self {
            WorkflowError::Invalid { file, .. } => Some(format!(
                "fix the problems, then check with `tnh-conductor validate {file}`"
            )),
        }
    }
}
