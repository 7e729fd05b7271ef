//! The one integration-test binary: one module per feature.

mod cli;
mod mutation;
mod prompts;
mod runner_api;
mod runner_fakes;
mod runner_real_cli;
mod runner_support;
mod runner_zoo;
mod schema;
mod support;
mod validate;
