//! The shape of a `planners:` entry: its keys, what each holds, and which kinds read it.
//! The checks in `planners.rs` take their key list and per-kind restrictions from here.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

/// A planner's backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PlannerKind {
    /// The built-in rules (offline).
    Rules,
    /// Any program: envelope on stdin, decision on stdout.
    Command,
    /// Claude Code in print mode.
    Claude,
    /// `codex exec`.
    Codex,
    /// An OpenAI-compatible chat completions endpoint.
    Http,
}

/// A planner definition as written (docs/planner.md). A key read by some kinds only names
/// them (`x-kinds`): every other kind would ignore it, so it is refused there (`kind: rules`
/// takes no other key).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DefinitionDocument {
    /// The backend.
    pub kind: PlannerKind,
    /// The program and its arguments.
    #[schemars(extend("x-kinds" = ["command"]))]
    pub argv: Option<Vec<String>>,
    /// The binary to run instead of `claude`/`codex` (`TNH_CLAUDE_BIN`/`TNH_CODEX_BIN` win).
    #[schemars(extend("x-kinds" = ["claude", "codex"]))]
    pub binary: Option<String>,
    /// The model.
    #[schemars(extend("x-kinds" = ["claude", "codex", "http"]))]
    pub model: Option<String>,
    /// Codex `-c key=value` pairs.
    #[schemars(extend("x-kinds" = ["codex"]))]
    pub config: Option<BTreeMap<String, serde_json::Value>>,
    /// The endpoint (`…/v1/chat/completions`).
    #[schemars(extend("x-kinds" = ["http"]))]
    pub url: Option<String>,
    /// The variable holding the bearer token.
    #[schemars(extend("x-kinds" = ["http"]))]
    pub api_key_env: Option<String>,
    /// How long one attempt may take (a duration such as `2m`).
    #[schemars(extend("x-kinds" = ["command", "claude", "codex", "http"]))]
    pub timeout: Option<String>,
    /// Attempts before the kernel decides (1 to 10).
    #[schemars(extend("x-kinds" = ["command", "claude", "codex", "http"]))]
    pub attempts: Option<u32>,
    /// Host variables passed through to the process (API keys).
    #[schemars(extend("x-kinds" = ["command", "claude", "codex"]))]
    pub pass_env: Option<Vec<String>>,
}
