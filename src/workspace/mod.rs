//! Placeholder: filled by the workspace issue.
