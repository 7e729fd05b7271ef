//! Documents as the operator writes them: the YAML tree with a position on every node, and
//! diagnostics that point at those positions. Workflows, the configuration, prompts' front
//! matter and scripts' data all read through it.

pub mod at;
pub mod diagnostic;
pub mod yaml;
