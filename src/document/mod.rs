//! Documents as the operator writes them: the YAML tree with a position on every node,
//! diagnostics that point at those positions, and the keys and names of the types that
//! describe a document's shape. Workflows, the configuration, prompts' front matter and
//! scripts' data all read through it.

pub mod at;
pub mod diagnostic;
pub mod shape;
pub mod yaml;
