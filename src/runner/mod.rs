//! Runners: spawning and supervising agent and validator processes, and turning what they
//! printed into the normalised step artifacts.
//!
//! The [`supervisor`] runs one process per step and decides its mechanical outcome
//! (`completed`, `error`, `killed_timeout`, `killed_idle`, `killed_policy`); the
//! [`adapters`] know how to invoke Claude Code, Codex, the Gemini CLI or any command and how
//! to read their output. This layer judges nothing beyond the mechanical outcome.

pub mod adapters;
pub mod artifacts;
mod cancel;
mod capture;
mod clock;
pub mod env;
mod error;
pub mod interactive;
pub mod interrupts;
pub mod probe;
pub mod process;
pub mod profile;
pub mod progress;
pub mod runtime;
mod state;
pub mod supervisor;
mod sweep;
pub mod transcript;
pub mod versions;

pub use adapters::{AgentRun, StepRequest, run_agent};
pub use artifacts::{ArtifactRecord, RunnerMetadata, runner_metadata_schema};
pub use cancel::{CancelHandle, Cancellation};
pub use capture::{LINE_CAP, TAIL_LINES, TailLine};
pub use clock::rfc3339;
pub use env::{HostEnv, TOOLCHAIN, is_secret_name, validator_environment};
pub use error::RunnerError;
pub use process::{StrayProcess, processes_with_variable};
pub use profile::{
    AgentKind, AgentProfile, DEFAULT_MAX_OUTPUT_MIB, builtin_profiles, resolve_profile,
};
pub use progress::{CaptureFormat, Stream};
pub use state::{StopReason, Termination};
pub use supervisor::{Limits, ProcessKind, ProcessSpec, Supervised, supervise, supervise_recorded};
pub use sweep::{
    GroupEnding, KilledProcesses, PROCESS_GROUP_FILE, RecordedGroup, kill_marked,
    kill_recorded_group,
};
