//! Placeholder: filled by the policy issue.
