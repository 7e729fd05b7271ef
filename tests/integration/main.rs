//! The one integration-test binary: one module per feature.

mod support;
mod workspace;
mod workspace_rollback;
mod workspace_guard;
mod workspace_cli;
