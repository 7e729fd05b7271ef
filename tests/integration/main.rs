//! The one integration-test binary: one module per feature.

mod schema;
mod support;
mod validate;
