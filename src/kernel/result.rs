//! A success STOP's result: the run's change committed on its work branch before the end is
//! recorded, so a run that ended in success always has its commit (or changed nothing).
//!
//! Order, for crash safety: the commit (found again on the branch by its `Tnh-Run` trailer if
//! a process died after writing it), then `run_committed`, then `run_completed` and the
//! checkpoint. A process that dies anywhere in between leaves the run unended; whoever takes
//! the route again (`resume`, a gate decision) finds the commit, or the `run_committed` event
//! written after the checkpoint, and never commits twice. The work branch moving here is the
//! kernel's own doing while it holds the run's lock, which the guards of runs beside this one
//! take as that run's work.

use super::recorder::Recorder;
use super::run_story::RunStory;
use super::state::RunState;
use crate::artifacts::{ArtifactsError, EventLog};
use crate::artifacts::{EventPayload, event_payload::RunCommitted};
use crate::workspace::{Fingerprint, Workspace};

/// Commits the run's change at a success STOP and records it, unless `recorded` (the commit of
/// a `run_committed` event written after the last checkpoint) says it was done.
pub(super) fn commit_at_success(
    recorder: &mut Recorder,
    state: &mut RunState,
    recorded: Option<String>,
) -> Result<(), ArtifactsError> {
    if let Some(commit) = recorded {
        return recorder.update_metadata(|metadata| metadata.result_commit = Some(commit));
    }
    let failed = |reason: String| ArtifactsError::ResultCommit {
        run_id: state.run_id.clone(),
        reason,
    };
    let metadata = recorder.metadata().clone();
    let workspace = Workspace::open(&super::run::workspace_record(&metadata))
        .map_err(|error| failed(error.to_string()))?;
    let events = EventLog::read_all(&recorder.run_dir().events())?;
    let story = RunStory::of(recorder.run_dir(), &metadata, &events);
    let Some(result) = workspace
        .commit_result(&story.commit_message())
        .map_err(|error| failed(error.to_string()))?
    else {
        return Ok(());
    };
    let identity = if result.author.configured {
        "configured"
    } else {
        "fallback"
    };
    let fields = RunCommitted {
        commit: result.commit.clone(),
        parent: result.parent.clone(),
        tree: result.tree.clone(),
        branch: metadata.branch.clone(),
        author: format!("{} <{}>", result.author.name, result.author.email),
        identity: identity.to_owned(),
    };
    recorder.event(None, EventPayload::RunCommitted(fields))?;
    // The worktree is now the commit checked out: what `rollback` and `runs clean` compare
    // with from here on.
    state.fingerprint = Some(Fingerprint {
        tree: result.tree,
        head: result.commit.clone(),
    });
    recorder.update_metadata(|metadata| metadata.result_commit = Some(result.commit))
}
