//! Placeholder: filled by the runner issue.
