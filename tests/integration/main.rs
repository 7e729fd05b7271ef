//! The one integration-test binary: one module per feature.

mod cli;
mod mutation;
mod schema;
mod script;
mod support;
mod validate;
