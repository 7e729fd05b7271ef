//! The one integration-test binary: one module per feature.

mod cli;
mod gate;
mod journal;
mod kernel_crash;
mod kernel_interrupt;
mod kernel_run;
mod kernel_support;
mod mutation;
mod policy;
mod prompts;
mod runner_api;
mod runner_fakes;
mod runner_real_cli;
mod runner_support;
mod runner_zoo;
mod schema;
mod script;
mod starter_workflows;
mod support;
mod tnh_commands;
mod validate;
mod validation;
mod workspace;
mod workspace_cli;
mod workspace_guard;
mod workspace_rollback;
