//! The one integration-test binary: one module per feature.

mod cli;
mod mutation;
mod prompts;
mod schema;
mod support;
mod validate;
