//! The Rhai scripting host: workflow authors write deterministic helpers in Rhai
//! while routing stays in Rust.
//!
//! Scripts are treated as hostile: one sandboxed engine configuration (`engine`) bounds
//! operations, depth, data sizes and wall-clock time identically in debug and release builds;
//! the only way out of the sandbox is the read-only host API (`fs`, `text`), confined to the
//! worktree by `sandbox`; imports resolve only to the embedded `stdlib/` and the repository's
//! `.tnh/scripts/` (`resolver`). Every error keeps the YAML line and column of the code that
//! failed and the Rhai position inside it (`error`).
//!
//! The kernel builds one [`ScriptHost`] per run, loads the workflow's `script` once, and then
//! evaluates `${{ … }}` values ([`ScriptHost::evaluate_node`]) and policy `check` hooks
//! ([`ScriptHost::check_policy`]) against a read-only [`Context`].

mod context;
pub mod engine;
mod error;
mod evaluate;
pub mod expressions;
mod fs;
mod host;
mod memory;
pub mod names;
mod policy;
mod resolver;
mod sandbox;
mod text;
mod value;

pub use context::{ChangeKind, ChangedFile, Context};
pub use engine::Limits;
pub use error::{CodeKind, Location, ScriptError};
pub use host::{HostOptions, MessageKind, ScriptHost, ScriptMessage, WorkflowScript};
pub use policy::{PolicyStage, Violation};
pub use resolver::{STDLIB_MODULES, check_imports, check_imports_in};
pub use value::{dynamic_to_json, json_to_dynamic};
