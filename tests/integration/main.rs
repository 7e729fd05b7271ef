//! The one integration-test binary: one module per feature.

mod policy;
mod support;
mod workspace;
mod workspace_cli;
mod workspace_guard;
mod workspace_rollback;
