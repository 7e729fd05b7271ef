//! Everything the driver writes into the run directory goes through here, in an order that a
//! crash at any instant cannot make inconsistent: events are appended first, then made durable,
//! then `state.json` (which names the last event it accounts for) is replaced atomically, then
//! the human-facing `status.json` and `final-state.txt` follow.

use super::state::{End, Phase, RunState};
use crate::artifacts::event_payload::ArtifactRecorded;
use crate::artifacts::{
    ArtifactsError, Event, EventLog, EventPayload, LifecycleState, RunDir, RunMetadata, RunStatus,
    SCHEMA_VERSION, StepManifest, Termination, link_atomic, now, read_json, replace_json,
    write_atomic, write_json_atomic, write_json_new,
};

/// Test hook: `TNH_TEST_KILL_AT_EVENT=N` makes the process SIGKILL itself right after writing
/// event N, to test that a crash at any instant loses nothing and resumes cleanly.
const KILL_AT_EVENT: &str = "TNH_TEST_KILL_AT_EVENT";

/// Called with every event as it is recorded (the CLI's progress view); the library itself
/// never prints.
pub type Observer = Box<dyn FnMut(&Event) + Send>;

/// Writes the run directory of one run.
pub struct Recorder {
    run_dir: RunDir,
    events: EventLog,
    metadata: RunMetadata,
    kill_at_event: Option<u64>,
    observer: Option<Observer>,
    /// The status last written, to skip rewriting an unchanged one.
    last_status: Option<RunStatus>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Recorder")
            .field("run_dir", &self.run_dir)
            .field("events", &self.events)
            .finish_non_exhaustive()
    }
}

/// The last event `state.json` accounts for (its `events_seq`), when it can be read; a missing
/// or damaged `state.json` is left to the readers of the state, which say what is wrong.
pub(crate) fn checkpointed_seq(run_dir: &RunDir) -> Option<u64> {
    let state = run_dir.state();
    if !state.is_file() {
        return None;
    }
    read_json::<serde_json::Value>(&state, "run state")
        .ok()?
        .get("events_seq")?
        .as_u64()
}

fn kill_at_event() -> Option<u64> {
    std::env::var(KILL_AT_EVENT)
        .ok()
        .and_then(|value| value.parse().ok())
}

impl Recorder {
    /// Creates the run directory and writes `metadata.json`.
    pub fn create(run_dir: RunDir, metadata: RunMetadata) -> Result<Self, ArtifactsError> {
        std::fs::create_dir_all(run_dir.artifacts_dir())
            .map_err(ArtifactsError::io("create", run_dir.root()))?;
        write_json_atomic(&run_dir.metadata(), &metadata)?;
        let events = EventLog::open(&run_dir.events(), &metadata.run_id)?;
        Ok(Self {
            run_dir,
            events,
            metadata,
            kill_at_event: kill_at_event(),
            observer: None,
            last_status: None,
        })
    }

    /// Opens an existing run directory (for resume). An event log that is missing or ends
    /// before the last event `state.json` accounts for is refused, untouched (see
    /// [`EventLog::open_after`]).
    pub fn open(run_dir: RunDir) -> Result<Self, ArtifactsError> {
        let metadata: RunMetadata = run_dir.read_metadata()?;
        let state = run_dir.state();
        let checkpoint = checkpointed_seq(&run_dir);
        let events = EventLog::open_after(
            &run_dir.events(),
            &metadata.run_id,
            checkpoint.map(|seq| (state.as_path(), seq)),
        )?;
        Ok(Self {
            run_dir,
            events,
            metadata,
            kill_at_event: kill_at_event(),
            observer: None,
            last_status: None,
        })
    }

    /// Sets the observer every later event is shown to.
    pub fn observe(&mut self, observer: Option<Observer>) {
        self.observer = observer;
    }

    /// The run directory.
    pub fn run_dir(&self) -> &RunDir {
        &self.run_dir
    }

    /// `metadata.json` as recorded.
    pub fn metadata(&self) -> &RunMetadata {
        &self.metadata
    }

    /// The last event's sequence number.
    pub fn last_seq(&self) -> u64 {
        self.events.last_seq()
    }

    /// Appends an event.
    pub fn event(
        &mut self,
        step: Option<(&str, u32)>,
        payload: EventPayload,
    ) -> Result<Event, ArtifactsError> {
        let event = self.events.append(step, payload)?;
        if self.kill_at_event == Some(event.seq) {
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        }
        if let Some(observer) = &mut self.observer {
            observer(&event);
        }
        Ok(event)
    }

    /// Makes the events durable, then checkpoints the state and the status.
    pub fn commit(
        &mut self,
        state: &mut RunState,
        reason: Option<&str>,
    ) -> Result<(), ArtifactsError> {
        self.events.sync()?;
        state.events_seq = self.events.last_seq();
        write_json_atomic(&self.run_dir.state(), state)?;
        self.write_status(state, reason, Some(std::process::id()))
    }

    /// Makes the events durable and refreshes the status, without a checkpoint. A visit's
    /// start is recorded this way: `resume` replays a `step_started` event that follows the
    /// last checkpoint, since starting a visit is a pure function of that checkpoint.
    pub fn flush(&mut self, state: &RunState) -> Result<(), ArtifactsError> {
        self.events.sync()?;
        self.write_status(state, None, Some(std::process::id()))
    }

    /// Writes `status.json` (and `final-state.txt`) for the state. The status is rewritten only
    /// when it says something new, and `final-state.txt` while running only says `running`:
    /// each replacement costs a new inode. `status.json` is derived from `state.json` and
    /// rewritten by `resume`, so it is replaced atomically but not fsynced.
    pub fn write_status(
        &mut self,
        state: &RunState,
        reason: Option<&str>,
        pid: Option<u32>,
    ) -> Result<(), ArtifactsError> {
        let (lifecycle_state, step, visit, detail) = describe(state);
        let pid = if lifecycle_state == LifecycleState::Running {
            pid
        } else {
            None
        };
        let status = RunStatus {
            schema_version: SCHEMA_VERSION,
            run_id: state.run_id.clone(),
            workflow_id: state.workflow_id.clone(),
            lifecycle_state,
            current_step_id: Some(step),
            visit,
            updated_at: now(),
            reason: reason.map(str::to_owned).or_else(|| standing_reason(state)),
            pid,
            transitions: state.transitions,
        };
        let unchanged = |last: &RunStatus| {
            RunStatus {
                updated_at: status.updated_at.clone(),
                ..last.clone()
            } == status
        };
        if self.last_status.as_ref().is_some_and(unchanged) {
            return Ok(());
        }
        let was_running = self
            .last_status
            .as_ref()
            .is_some_and(|last| last.lifecycle_state == LifecycleState::Running);
        replace_json(&self.run_dir.status(), &status)?;
        if lifecycle_state != LifecycleState::Running || !was_running {
            write_atomic(
                &self.run_dir.final_state(),
                status.final_state_line(detail).as_bytes(),
            )?;
        }
        self.last_status = Some(status);
        Ok(())
    }

    /// Marks the status `blocked` (interrupted; `resume` continues it).
    pub fn write_blocked(&mut self, reason: &str) -> Result<(), ArtifactsError> {
        self.write_stopped(reason, "interrupted")
    }

    /// Marks the run blocked with `reason`, `how` (`interrupted`, `stopped`, `decided`) in
    /// `final-state.txt`: the visit stays marked running and `resume` runs it again.
    pub fn write_stopped(&mut self, reason: &str, how: &str) -> Result<(), ArtifactsError> {
        self.write_standing(LifecycleState::Blocked, reason, how)
    }

    /// Marks the run `decided` with `reason`: a gate's decision (`outcome`) was routed to a step
    /// `resume` runs next. Nothing is wrong, so it is not `blocked` (`final-state.txt`:
    /// `decided OUTCOME NEXT_STEP`).
    pub fn write_decided(&mut self, reason: &str, outcome: &str) -> Result<(), ArtifactsError> {
        self.write_standing(LifecycleState::Decided, reason, outcome)
    }

    fn write_standing(
        &mut self,
        lifecycle: LifecycleState,
        reason: &str,
        how: &str,
    ) -> Result<(), ArtifactsError> {
        self.last_status = None;
        let mut status: RunStatus = read_json(&self.run_dir.status(), "run status")?;
        status.lifecycle_state = lifecycle;
        status.reason = Some(reason.to_owned());
        status.pid = None;
        status.updated_at = now();
        write_json_atomic(&self.run_dir.status(), &status)?;
        let step = status.current_step_id.clone().unwrap_or_else(|| "-".into());
        write_atomic(
            &self.run_dir.final_state(),
            format!("{} {how} {step}\n", lifecycle.name()).as_bytes(),
        )
    }

    /// Changes `metadata.json`.
    pub fn update_metadata(
        &mut self,
        change: impl FnOnce(&mut RunMetadata),
    ) -> Result<(), ArtifactsError> {
        change(&mut self.metadata);
        write_json_atomic(&self.run_dir.metadata(), &self.metadata)
    }

    /// Records the end of the run in `metadata.json`.
    pub fn finish(&mut self, state: &RunState) -> Result<(), ArtifactsError> {
        if let Phase::Finished {
            end,
            step_id,
            reason,
        } = &state.phase
        {
            self.metadata.ended_at = Some(now());
            self.metadata.last_step_id = Some(step_id.clone());
            self.metadata.termination = Some(Termination {
                kind: end.name().to_owned(),
                step_id: step_id.clone(),
                reason: reason.clone(),
            });
            write_json_atomic(&self.run_dir.metadata(), &self.metadata)?;
        }
        Ok(())
    }

    /// Writes a visit's manifest and the step's latest-visit copy, with one
    /// `artifact_recorded` event per artifact.
    pub fn write_manifest(&mut self, manifest: &StepManifest) -> Result<(), ArtifactsError> {
        let step = (manifest.step_id.as_str(), manifest.visit);
        for entry in &manifest.artifacts {
            let recorded = ArtifactRecorded {
                role: Some(entry.role),
                path: entry.path.clone(),
            };
            self.event(Some(step), EventPayload::ArtifactRecorded(recorded))?;
        }
        let visit_manifest = self.run_dir.visit_manifest(step.0, step.1);
        if visit_manifest.exists() {
            // A gate decision rewrites its visit's manifest: replaced whole, never edited in
            // place, since the step's latest-visit name is the same file.
            write_json_atomic(&visit_manifest, manifest)?;
        } else {
            // A visit's first manifest is a new file in the visit's own folder, written after
            // everything it lists and before the latest-visit name points at it.
            write_json_new(&visit_manifest, manifest)?;
        }
        // The step's latest-visit copy is another name of the visit's manifest.
        link_atomic(&visit_manifest, &self.run_dir.step_manifest(step.0))
    }
}

/// Lifecycle, step, visit and the middle word of `final-state.txt`.
pub(crate) fn describe(state: &RunState) -> (LifecycleState, String, Option<u32>, &'static str) {
    match &state.phase {
        Phase::Ready { step_id, visit } | Phase::Running { step_id, visit } => (
            LifecycleState::Running,
            step_id.clone(),
            Some(*visit),
            "step",
        ),
        Phase::Waiting { step_id, visit } => (
            LifecycleState::Waiting,
            step_id.clone(),
            Some(*visit),
            "gate",
        ),
        Phase::Finished {
            end: End::Success,
            step_id,
            ..
        } => (LifecycleState::Completed, step_id.clone(), None, "success"),
        Phase::Finished {
            end: End::Failure,
            step_id,
            ..
        } => (LifecycleState::Failed, step_id.clone(), None, "failure"),
        Phase::Finished {
            end: End::Error,
            step_id,
            ..
        } => (LifecycleState::Failed, step_id.clone(), None, "error"),
        // `abandoned operator STEP`: the operator ended it where it stood.
        Phase::Finished {
            end: End::Abandoned,
            step_id,
            ..
        } => (LifecycleState::Abandoned, step_id.clone(), None, "operator"),
    }
}

/// Why a run stands where it does, when the caller gives no reason: how it ended, or that a
/// gate waits (a `resume` that finds the gate still undecided says so again).
fn standing_reason(state: &RunState) -> Option<String> {
    match &state.phase {
        Phase::Finished { reason, .. } => Some(reason.clone()),
        Phase::Waiting { .. } => Some(WAITING_REASON.to_owned()),
        Phase::Ready { .. } | Phase::Running { .. } => None,
    }
}

/// The status reason of a run waiting at a blocking gate.
pub(crate) const WAITING_REASON: &str = "waiting for a human decision";

/// Test hook: `TNH_TEST_SIGNAL_AT_EVENT=N` makes the process send itself SIGTERM right after
/// recording event N, and go on once the signal is noticed — a signal arriving at that exact
/// instant, to test that every phase stops resumable.
const SIGNAL_AT_EVENT: &str = "TNH_TEST_SIGNAL_AT_EVENT";

/// `observer`, preceded by the [`SIGNAL_AT_EVENT`] test hook when it is set.
pub(crate) fn with_test_signal(
    observer: Option<Observer>,
    cancellation: &crate::runner::Cancellation,
) -> Option<Observer> {
    let Some(at) = std::env::var(SIGNAL_AT_EVENT)
        .ok()
        .and_then(|value| value.parse::<u64>().ok())
    else {
        return observer;
    };
    let cancellation = cancellation.clone();
    let mut observer = observer;
    Some(Box::new(move |event| {
        if event.seq == at {
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGTERM);
            let limit = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !cancellation.is_cancelled() && std::time::Instant::now() < limit {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        if let Some(observer) = observer.as_mut() {
            observer(event);
        }
    }))
}
