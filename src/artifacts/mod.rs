//! The run directory: metadata, status, final state, the event stream, the
//! kernel's resumable state, and per-step, per-visit artifact folders with manifests.
//!
//! Everything here is written so that a crash at any instant loses nothing already recorded:
//! whole files are replaced atomically (temp file, fsync, rename, fsync of the folder), and the
//! event stream is append-only with contiguous sequence numbers that a resume continues.

mod atomic;
pub mod event_payload;
mod events;
pub mod evidence;
mod gate_records;
pub(crate) mod harness;
pub mod lock;
mod manifest;
mod records;
mod run_dir;
mod run_id;
mod runlog_entry;
pub mod safe_files;
mod status;
mod tool_logs;
mod validation_records;
mod visit_dir;

pub use atomic::{
    link_atomic, read_json, replace_file, replace_json, write_atomic, write_json_atomic,
    write_json_new, write_json_private, write_json_unsynced,
};
pub use event_payload::EventPayload;
pub(crate) use events::check_against_checkpoint;
pub use events::{Event, EventLog, EventType};
pub use gate_records::{
    GateContext, GateDecision, GateLastStep, GateOutcome, GatePlanner, GateRequest, GateType,
    RequiredDecision, RunBeside,
};
pub use harness::{harness_report_problems, harness_report_schema};
pub use manifest::{ArtifactEntry, ArtifactRole, PromptInputs, StepManifest, StepTimings};
pub use records::{Blocker, DiffStat, GUARD_STATE_FILE, Status};
pub use run_dir::RunDir;
pub use run_id::{is_run_id, new_run_id};
pub use runlog_entry::{RunlogEntry, RunlogKind};
pub use status::{Landing, LifecycleState, RunMetadata, RunStatus, Termination};
pub use tool_logs::{RUNLOG_FILE, tool_log_name, tool_logs};
pub use validation_records::{
    NotConfigured, NotRun, NotedPath, RanValidation, UnconfiguredValidation, UnresolvedStatus,
    UnresolvedValidator, ValidationOutcome, ValidationReport, ValidatorNotStarted, ValidatorRecord,
    ValidatorRun,
};
pub use visit_dir::VisitDir;

use std::path::PathBuf;

/// The file of a RUN_AGENT visit holding the inputs its prompt was rendered with.
pub const PROMPT_INPUTS_FILE: &str = VisitDir::PROMPT_INPUTS;

/// Files of a RUN_AGENT visit the conductor writes before the agent starts, besides the
/// runner's own (`prompt.md`, the captures): after the agent each must still be a regular
/// file of one name, or gone.
pub const AGENT_VISIT_FILES_BEFORE: [&str; 2] = [PROMPT_INPUTS_FILE, GUARD_STATE_FILE];

/// Files of a RUN_AGENT or RUN_VALIDATION visit the conductor writes after the agent (or the
/// validators) ended, besides the runner's own (`transcript.md`, `runner_metadata.json`) and
/// RUN_VALIDATION's report: anything under these names then was left there by what ran.
pub const STEP_VISIT_FILES_AFTER: [&str; 4] = [
    VisitDir::WORKSPACE_DIFF,
    VisitDir::WORKSPACE_STATUS,
    VisitDir::POLICY_SUMMARY,
    VisitDir::MANIFEST,
];

/// The schema version of every artifact format this release writes.
pub const SCHEMA_VERSION: u32 = 1;

/// The SHA-256 of `bytes` in lowercase hex, as the run directory records digests.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The current time as an RFC 3339 UTC timestamp.
pub fn now() -> String {
    jiff::Timestamp::now().to_string()
}

/// Reading or writing the run directory failed.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactsError {
    /// A file operation failed.
    #[error("failed to {action} `{path}`: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A record could not be encoded or decoded.
    #[error("`{path}` is not a valid {what}: {source}")]
    Json {
        /// What the file should hold.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: serde_json::Error,
    },
    /// The run's `metadata.json` is not valid run metadata (cut short by a crash or a full
    /// disk, or edited): the run directory is damaged. Commands that need it refuse the run
    /// (nothing is changed) until it is put back.
    #[error("`{}` is not a valid run metadata: {source}; the run directory is damaged", path.display())]
    MetadataDamaged {
        /// `metadata.json`.
        path: PathBuf,
        /// What is wrong.
        source: serde_json::Error,
    },
    /// The event stream is damaged beyond a torn last line.
    #[error("`{path}` line {line}: {message}")]
    Events {
        /// The stream.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The event stream is gone although `state.json` holds a checkpoint: the run did start,
    /// and its record of what happened is lost.
    #[error("`{}` is missing, but the run's checkpoint `{}` accounts for events 1–{checkpoint}: the run started, and its event log was deleted or lost", path.display(), state.display())]
    EventsMissing {
        /// The stream.
        path: PathBuf,
        /// `state.json`.
        state: PathBuf,
        /// The last event the checkpoint accounts for.
        checkpoint: u64,
    },
    /// The event stream ends before the last event `state.json` accounts for: lines that were
    /// made durable are gone (or torn), which no crash does.
    #[error("`{}` ends before the run's checkpoint: `{}` accounts for events 1–{checkpoint}, but {}{}: events {}–{checkpoint} are missing or damaged", path.display(), state.display(), if *last == 0 { "the log holds no complete event".to_owned() } else { format!("its last good line is line {last} (event {last})") }, torn_line.map(|line| format!(" and line {line} is cut short")).unwrap_or_default(), last + 1)]
    EventsShort {
        /// The stream.
        path: PathBuf,
        /// `state.json`.
        state: PathBuf,
        /// The last complete event (its sequence number, which is also its line).
        last: u64,
        /// The last event the checkpoint accounts for.
        checkpoint: u64,
        /// The incomplete line after the last good one, when there is one.
        torn_line: Option<u64>,
    },
    /// A success STOP could not commit the run's change on its work branch: the run is not
    /// recorded as ended, and `resume` (or the gate decision again) commits it.
    #[error("failed to commit the result of run `{run_id}` on its branch: {reason}")]
    ResultCommit {
        /// The run.
        run_id: String,
        /// What failed.
        reason: String,
    },
}

impl ArtifactsError {
    /// What to do about it.
    pub fn hint(&self) -> Option<String> {
        Some(match self {
            // A file of the run that is not there was removed: space and permissions are not
            // the question.
            ArtifactsError::Io { source, .. }
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                "a file of the run directory is missing: restore it (from a backup or a copy of \
                 the run directory); `tnh-conductor runs show RUN_ID` shows what the other files say"
                    .to_owned()
            }
            ArtifactsError::Io { .. } => {
                "check free disk space and the permissions of the run directory".to_owned()
            }
            ArtifactsError::Json { .. } | ArtifactsError::Events { .. } => {
                "the run directory was edited or damaged; inspect it, or start a new run".to_owned()
            }
            ArtifactsError::MetadataDamaged { path, .. } => format!(
                "nothing was changed; `{}` records the run's workflow, repository, worktree and \
                 branch, which resuming the run and deciding its gates need: put it back (from a \
                 backup or a copy of the run directory), then try again; `tnh-conductor status \
                 RUN_ID` and `runs show RUN_ID` show what the run's other files say",
                path.display()
            ),
            ArtifactsError::EventsMissing { path, .. } | ArtifactsError::EventsShort { path, .. } => {
                format!(
                    "nothing was changed: the log was not repaired and no worktree was touched; \
                     events the checkpoint accounts for were lost (a disk error, a full disk, an \
                     edit, or an agent writing into the run directory); put `{}` back from a \
                     backup or a copy of the run directory, then try again; or start a new run \
                     (the work of this one stays on its work branch and its snapshot refs under \
                     `refs/tnh/runs/`)",
                    path.display()
                )
            }
            ArtifactsError::ResultCommit { run_id, .. } => format!(
                "the run's worktree and branch are as they were; once git works there again, `tnh-conductor resume {run_id}` records the end and commits it"
            ),
        })
    }

    /// Whether the run's record is refused as it is (nothing was changed), rather than a file
    /// operation having failed.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            ArtifactsError::EventsMissing { .. }
                | ArtifactsError::EventsShort { .. }
                | ArtifactsError::MetadataDamaged { .. }
        )
    }

    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| ArtifactsError::Io {
            action,
            path,
            source,
        }
    }
}
