//! The one integration-test binary: one module per feature.

mod runner_fakes;
mod runner_support;
mod runner_zoo;
mod support;
