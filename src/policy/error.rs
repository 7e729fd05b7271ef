//! Errors of the policy module.

/// A policy could not be compiled.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// A glob in the policy is invalid.
    #[error("invalid glob `{pattern}` in `{field}`: {reason}")]
    InvalidGlob {
        /// `allowed_paths` or `forbidden_paths`.
        field: &'static str,
        /// The pattern as written.
        pattern: String,
        /// Why it is invalid.
        reason: String,
    },
}

impl PolicyError {
    /// What to do about the error.
    pub fn hint(&self) -> Option<String> {
        match self {
            PolicyError::InvalidGlob { .. } => Some(
                "globs use `*` (within one folder), `**` (any depth), `?`, `[abc]` and `{a,b}`"
                    .to_owned(),
            ),
        }
    }
}
