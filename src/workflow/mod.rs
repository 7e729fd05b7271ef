//! Workflow documents: the spanned YAML tree, the document model, decoding with every error
//! collected, static validation, and the JSON Schema.

pub mod decode;
pub mod decode_step;
pub mod diagnostic;
pub mod duration;
pub mod expressions;
pub mod load;
pub mod model;
pub mod schema;
pub mod validate;
pub mod yaml;

/// Loading or validating a workflow failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkflowError {
    /// The workflow has diagnostics.
    #[error("invalid workflow `{0}`")]
    Invalid(String),
}

impl WorkflowError {
    /// What to do about the error.
    pub fn hint(&self) -> Option<String> {
        None
    }
}
