//! What the pages show of a run, read from its typed records: metadata, status, the event
//! stream (up to its last complete line), and one row per visit from its events and manifest.

use std::path::Path;

use crate::artifacts::{
    ArtifactRole, Event, EventPayload, LifecycleState, RunDir, RunMetadata, RunStatus,
    StepManifest, read_json,
};
use crate::kernel::step_lines;
use crate::outcome::Outcome;
use crate::policy::PolicySummary;
use crate::runner::RunnerMetadata;

/// The most bytes of `events.ndjson` a page reads (a run of thousands of visits is far less).
const EVENTS_LIMIT: u64 = 64 * 1024 * 1024;

/// The complete events of a log and the byte offset just past the last complete line; a
/// torn last line (a write in progress) is left for later and reported.
#[derive(Debug, Default)]
pub(super) struct EventsRead {
    pub(super) events: Vec<Event>,
    pub(super) offset: u64,
    pub(super) torn: bool,
}

/// Reads `events.ndjson` (a link or a FIFO in its place is refused, never followed).
pub(super) fn read_events(path: &Path) -> EventsRead {
    let Ok((bytes, _cut)) = crate::artifacts::safe_files::read_regular(path, EVENTS_LIMIT) else {
        return EventsRead::default();
    };
    let complete = bytes
        .iter()
        .rposition(|byte| *byte == b'\n')
        .map_or(0, |at| at + 1);
    let events = bytes[..complete]
        .split(|byte| *byte == b'\n')
        .filter(|line| !line.is_empty())
        .filter_map(|line| serde_json::from_slice::<Event>(line).ok())
        .collect();
    EventsRead {
        events,
        offset: complete as u64,
        torn: complete < bytes.len(),
    }
}

/// One visit of a step, as the run page lists it.
#[derive(Debug, Clone)]
pub(super) struct VisitRow {
    pub(super) step_id: String,
    pub(super) visit: u32,
    pub(super) opcode: String,
    /// Its outcome, once it ended.
    pub(super) outcome: Option<String>,
    pub(super) started_at: String,
    pub(super) ended_at: Option<String>,
    pub(super) agent: Option<String>,
    pub(super) turns: Option<u64>,
    pub(super) cost_usd: Option<f64>,
    pub(super) lines_changed: String,
    pub(super) violations: Vec<String>,
    /// What it did, in a line or a few (`runs show`'s lines).
    pub(super) summary: Vec<String>,
}

/// A run as its pages show it.
#[derive(Debug)]
pub(super) struct RunView {
    pub(super) run_id: String,
    pub(super) metadata: Option<RunMetadata>,
    pub(super) status: Option<RunStatus>,
    pub(super) events: EventsRead,
    pub(super) visits: Vec<VisitRow>,
}

impl RunView {
    /// Reads the run in `run_dir`.
    pub(super) fn load(run_dir: &RunDir, run_id: &str) -> Self {
        let metadata = run_dir.read_metadata().ok();
        let status = crate::kernel::run_status::read_status(run_dir).ok();
        let events = read_events(&run_dir.events());
        let visits = visit_rows(run_dir, &events.events);
        Self {
            run_id: run_id.to_owned(),
            metadata,
            status,
            events,
            visits,
        }
    }

    /// Whether the run may still write (its files may be half-written).
    pub(super) fn is_active(&self) -> bool {
        self.status
            .as_ref()
            .is_none_or(|status| status.lifecycle_state == LifecycleState::Running)
    }

    /// Whether the run can still move (it runs, or waits, stopped or was decided and can be
    /// resumed): its page follows its events.
    pub(super) fn may_move(&self) -> bool {
        self.status.as_ref().is_none_or(|status| {
            !matches!(
                status.lifecycle_state,
                LifecycleState::Completed | LifecycleState::Failed | LifecycleState::Abandoned
            )
        })
    }

    /// The steps visited, in order (the path taken).
    pub(super) fn path_taken(&self) -> Vec<&str> {
        self.visits
            .iter()
            .map(|visit| visit.step_id.as_str())
            .collect()
    }
}

/// One row per `step_started` event, completed by its visit's manifest when there is one.
fn visit_rows(run_dir: &RunDir, events: &[Event]) -> Vec<VisitRow> {
    let mut rows: Vec<VisitRow> = Vec::new();
    for event in events {
        let (Some(step_id), Some(visit)) = (&event.step_id, event.visit) else {
            continue;
        };
        match &event.payload {
            EventPayload::StepStarted(started) => rows.push(VisitRow {
                step_id: step_id.clone(),
                visit,
                opcode: started.opcode.clone(),
                outcome: None,
                started_at: event.timestamp.clone(),
                ended_at: None,
                agent: None,
                turns: None,
                cost_usd: None,
                lines_changed: String::new(),
                violations: Vec::new(),
                summary: Vec::new(),
            }),
            EventPayload::StepCompleted(_)
            | EventPayload::StepFailed(_)
            | EventPayload::StepInterrupted(_) => {
                if let Some(row) = rows
                    .iter_mut()
                    .rev()
                    .find(|row| row.step_id == *step_id && row.visit == visit)
                {
                    row.ended_at = Some(event.timestamp.clone());
                    row.outcome = Some(match &event.payload {
                        EventPayload::StepCompleted(completed) => completed
                            .outcome
                            .map_or("completed", Outcome::as_str)
                            .to_owned(),
                        EventPayload::StepFailed(_) => "failed".to_owned(),
                        _ => "interrupted".to_owned(),
                    });
                }
            }
            _ => {}
        }
    }
    for row in &mut rows {
        fill_from_manifest(run_dir, row);
    }
    rows
}

/// What the visit's manifest, runner metadata and policy summary add.
fn fill_from_manifest(run_dir: &RunDir, row: &mut VisitRow) {
    let Ok(manifest) = read_json::<StepManifest>(
        &run_dir.visit_manifest(&row.step_id, row.visit),
        "step manifest",
    ) else {
        return;
    };
    if row.opcode.is_empty() {
        row.opcode.clone_from(&manifest.opcode);
    }
    if row.outcome.is_none() {
        row.outcome = Some(manifest.termination.clone());
    }
    row.lines_changed = step_lines::diffstat(manifest.step_diffstat().as_ref());
    row.summary = step_lines::describe_visit(&manifest, run_dir);
    let artifact = |role| {
        manifest
            .artifact(role)
            .map(|entry| run_dir.root().join(&entry.path))
    };
    if let Some(path) = artifact(ArtifactRole::RunnerMetadata)
        && let Ok(runner) = read_json::<RunnerMetadata>(&path, "runner metadata")
    {
        row.agent = Some(runner.agent);
        row.turns = runner.turns;
        row.cost_usd = runner.cost_usd;
    }
    if let Some(path) = artifact(ArtifactRole::PolicySummary)
        && let Ok(policy) = read_json::<PolicySummary>(&path, "policy summary")
    {
        row.violations = policy.violations.iter().map(ToString::to_string).collect();
    }
}
