//! `runs abandon`: ending a run that waits at a gate or stands interrupted, without running it
//! further. Its leftover processes are stopped (as `resume` stops them), a `run_abandoned`
//! event says who and why, and the run ends `abandoned`: terminal, so `resume`, gate decisions
//! and `gate list` leave it alone and `runs clean` treats it as ended.

use std::path::Path;

use super::lock::{LockError, RunLock};
use super::recorder::Recorder;
use super::recovery::visit_in_progress;
use super::run::{RunError, find_run_dir};
use super::state::{End, Phase, RunState};
use crate::artifacts::{EventPayload, event_payload::RunAbandoned};
use crate::artifacts::{RunMetadata, read_json};

/// Why a run could not be abandoned (nothing was changed).
#[derive(Debug, thiserror::Error)]
pub enum AbandonError {
    /// A live process drives the run (or decides, rolls back or cleans it): it must be
    /// stopped, or be done, first.
    #[error("cannot abandon run `{run_id}`: {holder}")]
    Driven {
        /// The run.
        run_id: String,
        /// What the run's lock says of its holder.
        holder: String,
    },
    /// No name to record: `--as ""`, or `$USER` set but empty.
    #[error("no name for who abandons run `{run_id}`: the record must say who ended it")]
    NoName {
        /// The run.
        run_id: String,
    },
}

/// Who abandons a run, and why.
#[derive(Debug, Clone, Copy)]
pub struct AbandonRequest<'a> {
    /// The operator's name (`--as`, default `$USER`).
    pub by: &'a str,
    /// Why (`--reason`), when given.
    pub reason: Option<&'a str>,
}

/// What `runs abandon` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Abandoned {
    /// The step the run stood at.
    pub step_id: String,
    /// Where it stood: `waiting` (at a gate), `interrupted` (in a step) or `stopped` (between
    /// steps).
    pub was: &'static str,
    /// The reason recorded as the run's end.
    pub reason: String,
    /// The run's leftover processes that were killed.
    pub stopped_pids: Vec<i32>,
    /// Those that could not be killed.
    pub survivors: Vec<i32>,
}

/// Ends the run `run_id` as `abandoned`. Refused, changing nothing, when a live process
/// drives it, when it already ended, or when its files were written by a newer release.
pub fn abandon_run(
    repo: &Path,
    run_id: &str,
    request: AbandonRequest<'_>,
) -> Result<Abandoned, RunError> {
    if request.by.trim().is_empty() {
        return Err(AbandonError::NoName {
            run_id: run_id.to_owned(),
        }
        .into());
    }
    let run_dir = find_run_dir(repo, run_id)?;
    // A copy of the repository shares the run id with the original's live run: its processes
    // are never the copy's to stop.
    super::run::check_recorded_repository(repo, &run_dir, run_id)?;
    let _lock = lock_run(&run_dir, run_id)?;
    super::state::check_run_versions(&run_dir)?;
    let mut state = current_state(&run_dir)?;
    refuse_ended(run_id, &state)?;
    let mut recorder = Recorder::open(run_dir.clone())?;
    if let Some(reason) = finish_interrupted_abandon(&mut recorder, &mut state)? {
        return Err(RunError::Abandoned {
            run_id: run_id.to_owned(),
            reason,
        });
    }
    let in_progress = visit_in_progress(&run_dir, &state)?;
    // With the lock held no driver is alive: what is left of its processes is the run's own.
    let orphans = super::orphans::kill_run_orphans(run_id);
    let orphans = match &in_progress {
        Some((step_id, visit)) => {
            super::orphans::end_recorded_groups(&run_dir.visit_dir(step_id, *visit), orphans)
        }
        None => orphans,
    };
    let (step_id, visit, was) = where_it_stood(&state, in_progress);
    let reason = end_reason(request.by, request.reason);
    let fields = RunAbandoned {
        by: request.by.to_owned(),
        was: was.to_owned(),
        stopped_pids: orphans.killed.clone(),
        reason: request.reason.map(str::to_owned),
        survivors: (!orphans.survivors.is_empty()).then(|| orphans.survivors.clone()),
    };
    let step = visit.map(|visit| (step_id.as_str(), visit));
    recorder.event(step, EventPayload::RunAbandoned(fields))?;
    state.phase = Phase::Finished {
        end: End::Abandoned,
        step_id: step_id.clone(),
        reason: reason.clone(),
    };
    recorder.commit(&mut state, Some(&reason))?;
    recorder.finish(&state)?;
    Ok(Abandoned {
        step_id,
        was,
        reason,
        stopped_pids: orphans.killed,
        survivors: orphans.survivors,
    })
}

/// Takes the run's lock: held, a live process drives the run (or decides, rolls back or cleans
/// it), and the run is refused.
fn lock_run(run_dir: &crate::artifacts::RunDir, run_id: &str) -> Result<RunLock, RunError> {
    match RunLock::acquire(&run_dir.lock()) {
        Ok(lock) => Ok(lock),
        Err(held @ LockError::Held { .. }) => Err(AbandonError::Driven {
            run_id: run_id.to_owned(),
            holder: held.to_string(),
        }
        .into()),
        Err(error) => Err(error.into()),
    }
}

/// Refuses a run that already ended: abandoned, or otherwise.
fn refuse_ended(run_id: &str, state: &RunState) -> Result<(), RunError> {
    let Phase::Finished { end, reason, .. } = &state.phase else {
        return Ok(());
    };
    Err(match end {
        End::Abandoned => RunError::Abandoned {
            run_id: run_id.to_owned(),
            reason: reason.clone(),
        },
        _ => RunError::Finished {
            run_id: run_id.to_owned(),
            how: format!("{}: {reason}", end.name()),
        },
    })
}

/// The step the run stood at, the visit its driver left in the middle (or the gate's), and
/// the word for it: `waiting`, `interrupted` or `stopped` (between steps).
fn where_it_stood(
    state: &RunState,
    in_progress: Option<(String, u32)>,
) -> (String, Option<u32>, &'static str) {
    match (&state.phase, in_progress) {
        (Phase::Waiting { step_id, visit }, _) => (step_id.clone(), Some(*visit), "waiting"),
        (_, Some((step_id, visit))) => (step_id, Some(visit), "interrupted"),
        (
            Phase::Ready { step_id, .. }
            | Phase::Running { step_id, .. }
            | Phase::Finished { step_id, .. },
            None,
        ) => (step_id.clone(), None, "stopped"),
    }
}

/// The reason recorded as an abandoned run's end: `abandoned by NAME (WHY)`.
fn end_reason(by: &str, why: Option<&str>) -> String {
    match why {
        Some(why) => format!("abandoned by {by} ({why})"),
        None => format!("abandoned by {by}"),
    }
}

/// Ends the run as abandoned when a `runs abandon` recorded its `run_abandoned` event and was
/// killed before its checkpoint: the operator's decision stands, and nothing continues or
/// decides the run. Returns the reason recorded as its end, when it did.
pub(crate) fn finish_interrupted_abandon(
    recorder: &mut Recorder,
    state: &mut RunState,
) -> Result<Option<String>, crate::artifacts::ArtifactsError> {
    if matches!(state.phase, Phase::Finished { .. }) {
        return Ok(None);
    }
    let events = crate::artifacts::EventLog::read_all(&recorder.run_dir().events())?;
    let Some((abandoned, fields)) = events.iter().rev().find_map(|event| match &event.payload {
        EventPayload::RunAbandoned(fields) if event.seq > state.events_seq => Some((event, fields)),
        _ => None,
    }) else {
        return Ok(None);
    };
    let by = Some(fields.by.as_str()).filter(|by| !by.is_empty());
    let reason = end_reason(by.unwrap_or("operator"), fields.reason.as_deref());
    let step_id = match (&abandoned.step_id, &state.phase) {
        (Some(step_id), _) => step_id.clone(),
        (
            None,
            Phase::Ready { step_id, .. }
            | Phase::Running { step_id, .. }
            | Phase::Waiting { step_id, .. }
            | Phase::Finished { step_id, .. },
        ) => step_id.clone(),
    };
    state.phase = Phase::Finished {
        end: End::Abandoned,
        step_id,
        reason: reason.clone(),
    };
    recorder.commit(state, Some(&reason))?;
    recorder.finish(state)?;
    Ok(Some(reason))
}

/// The run's checkpoint; a run killed before its first one stands before its entry step.
fn current_state(run_dir: &crate::artifacts::RunDir) -> Result<RunState, RunError> {
    if run_dir.state().is_file() {
        return Ok(super::state::read_state(&run_dir.state())?);
    }
    let metadata: RunMetadata = read_json(&run_dir.metadata(), "run metadata")?;
    Ok(RunState::new(
        &metadata.run_id,
        &metadata.workflow_id,
        &metadata.entry_step,
    ))
}
