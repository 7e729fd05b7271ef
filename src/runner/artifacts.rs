//! The normalised files an agent step leaves in its step directory, and the
//! `runner_metadata` format with its JSON Schema.
//!
//! Whatever the CLI, a consumer finds the same roles: `runner_prompt`, `runner_transcript`
//! (the raw stdout stream), `runner_stderr`, `runner_final_response`, `runner_metadata` and a
//! readable `runner_transcript_markdown`. The kernel writes the step manifest from the
//! [`ArtifactRecord`]s returned here; paths are relative to the step directory and the kernel
//! prefixes them with the step's place in the run directory.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::artifacts::VisitDir;

use super::RunnerError;
use super::capture::TailLine;
use super::process::StrayProcess;
use super::profile::AgentKind;
use super::progress::CaptureFormat;
use super::state::Termination;

/// The version of the `runner_metadata` format.
pub const RUNNER_METADATA_SCHEMA_VERSION: u32 = 1;

/// One file produced by a step, for the step manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ArtifactRecord {
    /// Canonical role (`runner_transcript`, `runner_metadata`, …).
    pub role: String,
    /// Path relative to the step directory.
    pub path: String,
    /// Coarse media type.
    pub media_type: String,
    /// Whether the artifact is contract-critical.
    pub required: bool,
}

impl ArtifactRecord {
    pub(crate) fn new(role: &str, path: &str, media_type: &str, required: bool) -> ArtifactRecord {
        ArtifactRecord {
            role: role.to_owned(),
            path: path.to_owned(),
            media_type: media_type.to_owned(),
            required,
        }
    }
}

/// Token counts reported by the agent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TokenUsage {
    /// Input tokens (not counting cache reads).
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input tokens read from the prompt cache.
    pub cache_read_input_tokens: u64,
    /// Input tokens written to the prompt cache.
    pub cache_creation_input_tokens: u64,
    /// Reasoning tokens (Codex).
    pub reasoning_output_tokens: u64,
}

/// A tool use the agent's permission settings refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PermissionDenial {
    /// The tool (`Bash`, `Write`).
    pub tool_name: String,
    /// The tool-use id in the transcript.
    pub tool_use_id: Option<String>,
    /// What was asked, as the agent reported it.
    pub tool_input: Option<serde_json::Value>,
}

/// `runner_metadata.json`: how an agent step ran, in one CLI-independent shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunnerMetadata {
    /// The version of this format.
    pub schema_version: u32,
    /// The profile name.
    pub agent: String,
    /// The adapter.
    pub kind: AgentKind,
    /// The program and arguments as spawned (the prompt is on stdin, not here).
    pub argv: Vec<String>,
    /// The working directory.
    pub cwd: String,
    /// Names (never values) of the environment variables the agent got.
    pub environment_names: Vec<String>,
    /// Start time, RFC 3339 UTC.
    pub started_at: String,
    /// End time, RFC 3339 UTC.
    pub ended_at: String,
    /// Wall-clock duration in milliseconds.
    pub duration_ms: u64,
    /// `completed`, `error`, `killed_timeout`, `killed_idle` or `killed_policy`.
    pub outcome: String,
    /// Why, starting with a stable code for killed outcomes (`interactive_prompt: …`).
    pub cause: String,
    /// The leader's exit code, when it exited by itself.
    pub exit_code: Option<i32>,
    /// The signal that ended the leader, when one did.
    pub signal: Option<i32>,
    /// What the supervisor did to end the process.
    pub termination: Termination,
    /// How stdout was interpreted.
    pub capture_format: CaptureFormat,
    /// Bytes of stdout.
    pub stdout_bytes: u64,
    /// Bytes of stderr.
    pub stderr_bytes: u64,
    /// The agent's session or thread id.
    pub session_id: Option<String>,
    /// Model turns, as reported.
    pub turns: Option<u64>,
    /// Cost in US dollars, as reported (Codex reports none).
    pub cost_usd: Option<f64>,
    /// Token usage, as reported.
    pub usage: Option<TokenUsage>,
    /// Tool uses refused by the permission settings.
    pub permission_denials: Vec<PermissionDenial>,
    /// Whether a final response was found.
    pub final_response_present: bool,
    /// Lines of stdout that were not valid events (structured formats only).
    pub unparsed_lines: u64,
    /// Descendants found alive after the leader exited, all killed.
    pub leaked_processes: Vec<StrayProcess>,
    /// The last lines of output.
    pub output_tail: Vec<TailLine>,
}

/// The JSON Schema of `runner_metadata.json`.
pub fn runner_metadata_schema() -> serde_json::Value {
    let schema = schemars::schema_for!(RunnerMetadata);
    // A derived schema always serialises; a failure would be a schemars bug.
    serde_json::to_value(schema).unwrap_or(serde_json::Value::Null)
}

/// Writes `contents` to `dir/name` as a new file: whatever the agent left under that name in
/// its step folder (a link to a file of the operator's) is removed, never written through.
pub(crate) fn write_file(dir: &Path, name: &str, contents: &[u8]) -> Result<(), RunnerError> {
    let path = dir.join(name);
    crate::artifacts::safe_files::write_new(&path, contents)
        .map_err(|error| RunnerError::io("write", &path, error))
}

/// Writes the metadata as pretty JSON.
pub(crate) fn write_metadata(dir: &Path, metadata: &RunnerMetadata) -> Result<(), RunnerError> {
    let mut json = serde_json::to_vec_pretty(metadata)?;
    json.push(b'\n');
    write_file(dir, VisitDir::RUNNER_METADATA, &json)
}
