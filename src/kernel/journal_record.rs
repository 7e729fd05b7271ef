//! What the journal shows of one run, gathered from its run directory into a [`RunRecord`]:
//! the journal is built from these records, never from the run directory directly, so a run
//! whose directory `runs clean --all` removed reads the same from the record kept of it
//! (see [`super::history`]).

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::journal::{Assessment, Provenance, ReviewEntry, ViolationEntry};
use super::state::{Phase, RunState};
use crate::artifacts::{
    ArtifactRole, DiffStat, Event, EventLog, EventPayload, EventType, LifecycleState, RunDir,
    RunMetadata, RunStatus, StepManifest, read_json,
};
use crate::policy::Violation;

/// One run as the journal sees it (`tnh-conductor schema run-history`): the journal's view of
/// every day the run went on is computed from this record and the day alone.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunRecord {
    /// The format's version.
    pub schema_version: u32,
    /// The run.
    pub run_id: String,
    /// RFC 3339: when it started.
    pub started_at: String,
    /// RFC 3339: when it ended, once it did.
    pub ended_at: Option<String>,
    /// `workflow_id.vN`.
    pub workflow: String,
    /// Where the run is (or how it ended).
    pub lifecycle_state: LifecycleState,
    /// How it ended or why it stopped.
    pub detail: String,
    /// Its changes (the whole change since it started, as last recorded).
    pub diffstat: String,
    /// Where and when it was landed (`into main (fast-forward) at …`), when it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landed: Option<String>,
    /// What of its files was damaged when it was read, one line each.
    pub damage: Vec<String>,
    /// The gate it waits at, when it waits.
    pub waiting_gate: Option<String>,
    /// The deadline of the gate it waits at, when that deadline had passed.
    pub deadline_passed: Option<String>,
    /// Its policy violations.
    pub policy_violations: Vec<ViolationEntry>,
    /// Its planner decisions.
    pub planner_assessments: Vec<Assessment>,
    /// The blockers of planner decisions that only a human can take, one line each.
    pub planner_blockers: Vec<String>,
    /// Its gates waiting or queued for review.
    pub reviews: Vec<ReviewEntry>,
    /// Where its evidence is.
    pub provenance: Provenance,
    /// The step of each of the provenance's transcripts.
    pub transcript_steps: Vec<String>,
}

/// Reads what the journal needs of the run in `run_dir`. `metadata_damage` says why its
/// `metadata.json` could not be read (then `metadata` is a stand-in).
pub fn record_of(
    run_dir: &RunDir,
    metadata: &RunMetadata,
    metadata_damage: Option<&str>,
) -> RunRecord {
    let run_id = metadata.run_id.clone();
    let workflow = match metadata_damage {
        Some(_) => format!("{}.v?", metadata.workflow_id),
        None => format!("{}.v{}", metadata.workflow_id, metadata.workflow_version),
    };
    let mut damage = Vec::new();
    if let Some(problem) = metadata_damage {
        damage.push(format!(
            "{run_id} ({workflow}): its metadata is damaged: {problem}; restore the file (from a backup) to resume or decide the run; what follows shows what could be read"
        ));
    }
    let relative = |path: &Path| {
        path.strip_prefix(&metadata.repo_root)
            .unwrap_or(path)
            .display()
            .to_string()
    };
    let status = super::run_status::read_status(run_dir);
    // Both `status.json` and `metadata.json` unreadable: say so rather than nothing.
    let status_damage = status.as_ref().err().map(ToString::to_string);
    let status = status.ok();
    let state = read_json::<RunState>(&run_dir.state(), "run state").ok();
    let (events, log_damage) = match EventLog::read_readable(&run_dir.events()) {
        Ok(read) => read,
        Err(error) => (Vec::new(), vec![error]),
    };
    if let Some(first) = log_damage.first() {
        // Said, not hidden: a damaged log would otherwise read as a run that did nothing.
        let more = match log_damage.len() {
            1 => String::new(),
            count => format!(" (and {} more damaged lines)", count - 1),
        };
        damage.push(format!(
            "{run_id} ({workflow}): its event log is damaged: {first}{more}; what follows shows what could be read"
        ));
    }
    let manifests = manifests_in_order(run_dir, &events);
    let lifecycle_state = status
        .as_ref()
        .map_or(LifecycleState::Blocked, |status| status.lifecycle_state);
    let detail = metadata
        .termination
        .as_ref()
        .map(|termination| termination.reason.clone())
        .or_else(|| status.as_ref().and_then(|status| status.reason.clone()))
        .or_else(|| where_it_is(status.as_ref()?))
        .or(status_damage)
        .unwrap_or_default();
    let waiting = state.as_ref().and_then(|state| match &state.phase {
        Phase::Waiting { step_id, visit } => Some((step_id.clone(), *visit)),
        _ => None,
    });
    // A gate past its deadline is not simply waiting: nothing drives the run, and the next
    // `resume` or decision times it out.
    let deadline_passed = waiting
        .as_ref()
        .and_then(|(step, visit)| super::gate::gate_deadline_passed(run_dir, step, *visit));
    let (planner_assessments, planner_blockers, last_flags) =
        assessments(run_dir, &run_id, &workflow, &manifests);
    let reviews = reviews(
        run_dir,
        &run_id,
        &manifests,
        waiting.as_ref(),
        (deadline_passed.is_some(), &last_flags),
        &relative,
    );
    let (provenance, transcript_steps) =
        provenance(run_dir, &run_id, &workflow, &manifests, &relative);
    RunRecord {
        schema_version: crate::artifacts::SCHEMA_VERSION,
        run_id: run_id.clone(),
        started_at: metadata.started_at.clone(),
        ended_at: metadata.ended_at.clone(),
        workflow,
        lifecycle_state,
        detail,
        diffstat: changes_of(&manifests, &events),
        landed: super::journal::landed_text(metadata),
        damage,
        waiting_gate: waiting.map(|(step, _)| step),
        deadline_passed,
        policy_violations: violations(&events, &run_id),
        planner_assessments,
        planner_blockers,
        reviews,
        provenance,
        transcript_steps,
    }
}

/// Every planner decision of the run, the blockers only a human can take, and the risk flags
/// of the last decision.
fn assessments(
    run_dir: &RunDir,
    run_id: &str,
    workflow: &str,
    manifests: &[StepManifest],
) -> (Vec<Assessment>, Vec<String>, Vec<String>) {
    let mut assessments = Vec::new();
    let mut human_blockers = Vec::new();
    let mut last_flags = Vec::new();
    for manifest in manifests {
        let Some(entry) = manifest.artifact(ArtifactRole::PlannerDecision) else {
            continue;
        };
        let Ok(decision) =
            read_json::<DecisionTexts>(&run_dir.root().join(&entry.path), "planner decision")
        else {
            continue;
        };
        let status = decision.status;
        let blockers = texts(decision.blockers);
        last_flags = texts(decision.risk_flags);
        if status == "blocked" || status == "needs_human" {
            human_blockers.extend(
                blockers
                    .iter()
                    .map(|blocker| format!("{run_id} / {}: {status}: {blocker}", manifest.step_id)),
            );
        }
        assessments.push(Assessment {
            run_id: run_id.to_owned(),
            workflow: workflow.to_owned(),
            step: format!("{} #{}", manifest.step_id, manifest.visit),
            status,
            blockers,
            risk_flags: last_flags.clone(),
        });
    }
    (assessments, human_blockers, last_flags)
}

/// The run's gate waiting for a decision and its queued reviews. `(deadline_passed,
/// risk_flags)`: whether the waiting gate's deadline passed, and the last decision's flags.
fn reviews(
    run_dir: &RunDir,
    run_id: &str,
    manifests: &[StepManifest],
    waiting: Option<&(String, u32)>,
    (deadline_passed, risk_flags): (bool, &[String]),
    relative: &dyn Fn(&Path) -> String,
) -> Vec<ReviewEntry> {
    let mut reviews = Vec::new();
    for manifest in manifests {
        let Some(request) = manifest.artifact(ArtifactRole::GateRequest) else {
            continue;
        };
        let is_waiting = waiting
            .is_some_and(|(step, visit)| *step == manifest.step_id && *visit == manifest.visit);
        if !is_waiting && manifest.termination != "gate_queued" {
            continue;
        }
        let body = read_json::<crate::artifacts::GateRequest>(
            &run_dir.root().join(&request.path),
            "gate request",
        )
        .ok();
        let (reason, deadline) =
            body.map_or_else(Default::default, |body| (body.reason, body.deadline));
        reviews.push(ReviewEntry {
            run_id: run_id.to_owned(),
            step_id: manifest.step_id.clone(),
            kind: if is_waiting {
                "waiting".into()
            } else {
                "queued".into()
            },
            reason,
            deadline,
            deadline_passed: is_waiting && deadline_passed,
            request: relative(&run_dir.root().join(&request.path)),
            risk_flags: risk_flags.to_vec(),
        });
    }
    reviews
}

/// Where the run's evidence is, and the step of each transcript.
fn provenance(
    run_dir: &RunDir,
    run_id: &str,
    workflow: &str,
    manifests: &[StepManifest],
    relative: &dyn Fn(&Path) -> String,
) -> (Provenance, Vec<String>) {
    let mut agents = Vec::new();
    let mut transcripts = Vec::new();
    let mut transcript_steps = Vec::new();
    for manifest in manifests {
        if let Some(entry) = manifest.artifact(ArtifactRole::RunnerMetadata)
            && let Ok(runner) =
                read_json::<RunnerName>(&run_dir.root().join(&entry.path), "runner metadata")
        {
            let agent = format!(
                "{} ({})",
                runner.agent.as_deref().unwrap_or("?"),
                runner.kind.as_deref().unwrap_or("?")
            );
            if !agents.contains(&agent) {
                agents.push(agent);
            }
        }
        if let Some(entry) = manifest.artifact(ArtifactRole::RunnerTranscriptMarkdown) {
            transcripts.push(relative(&run_dir.root().join(&entry.path)));
            transcript_steps.push(manifest.step_id.clone());
        }
    }
    let provenance = Provenance {
        run_id: run_id.to_owned(),
        workflow: workflow.to_owned(),
        agents,
        transcripts,
        transcript_steps: transcript_steps.clone(),
        run_dir: relative(run_dir.root()),
    };
    (provenance, transcript_steps)
}

/// The run's `policy_violation` events, interrupted visits' included.
fn violations(events: &[Event], run_id: &str) -> Vec<ViolationEntry> {
    let mut found = Vec::new();
    for event in events {
        let EventPayload::PolicyViolation(policy) = &event.payload else {
            continue;
        };
        let Ok(violation) = serde_json::from_value::<Violation>(policy.violation.clone()) else {
            continue;
        };
        found.push(ViolationEntry {
            run_id: run_id.to_owned(),
            step: format!(
                "{} #{}",
                event.step_id.as_deref().unwrap_or_default(),
                event.visit.unwrap_or(0)
            ),
            violation,
        });
    }
    found
}

/// Where a run that has not ended stands, when its status gives no reason.
fn where_it_is(status: &RunStatus) -> Option<String> {
    let step = status.current_step_id.as_deref()?;
    match status.lifecycle_state {
        LifecycleState::Waiting => Some(format!("gate `{step}` waits for a decision")),
        LifecycleState::Running | LifecycleState::Blocked | LifecycleState::Decided => {
            Some(format!("at step `{step}`"))
        }
        LifecycleState::Completed | LifecycleState::Failed | LifecycleState::Abandoned => None,
    }
}

/// The run's changes as the journal shows them: the whole change since the run started as the
/// last step that recorded it saw it (an agent step, a gate), else the last change a step
/// captured, unless a rollback (a ROLLBACK step's or the operator's) came after it.
fn changes_of(manifests: &[StepManifest], events: &[Event]) -> String {
    let mut changes = "no changes".to_owned();
    for event in events {
        match &event.payload {
            EventPayload::StepCompleted(_) => {
                let captured = manifests
                    .iter()
                    .find(|manifest| {
                        Some(manifest.step_id.as_str()) == event.step_id.as_deref()
                            && Some(manifest.visit) == event.visit
                    })
                    .and_then(StepManifest::run_diffstat);
                if let Some(diffstat) = captured {
                    changes = describe_diffstat(&diffstat);
                }
            }
            EventPayload::RollbackCompleted(rollback) => {
                let by = if event.step_id.is_none() {
                    " by the operator"
                } else {
                    ""
                };
                let target = Some(rollback.target.as_str()).filter(|target| !target.is_empty());
                changes = format!("rolled back{by} to {}", target.unwrap_or("a snapshot"));
            }
            _ => {}
        }
    }
    changes
}

/// Every visit's manifest, in the order the visits completed.
fn manifests_in_order(run_dir: &RunDir, events: &[Event]) -> Vec<StepManifest> {
    events
        .iter()
        .filter(|event| {
            event.event_type() == EventType::StepCompleted
                || event.event_type() == EventType::GateRequested
        })
        .filter_map(|event| {
            let (step, visit) = (event.step_id.as_ref()?, event.visit?);
            read_json::<StepManifest>(&run_dir.visit_manifest(step, visit), "manifest")
                .ok()
                .map(|manifest| ((step.clone(), visit), manifest))
        })
        .fold(
            Vec::<((String, u32), StepManifest)>::new(),
            |mut seen, (key, manifest)| {
                if !seen.iter().any(|(existing, _)| *existing == key) {
                    seen.push((key, manifest));
                }
                seen
            },
        )
        .into_iter()
        .map(|(_, manifest)| manifest)
        .collect()
}

fn describe_diffstat(stat: &DiffStat) -> String {
    let files = stat.files_changed;
    let plural = if files == 1 { "" } else { "s" };
    format!(
        "{files} file{plural} changed, +{} -{}",
        stat.insertions, stat.deletions
    )
}

/// What the journal reads of a `planner_decision.json`: its status, and its blockers and
/// risk flags as texts. Any field of another shape reads as empty.
#[derive(Default, Deserialize)]
#[serde(default)]
struct DecisionTexts {
    #[serde(deserialize_with = "crate::artifacts::evidence::lenient")]
    status: String,
    #[serde(deserialize_with = "crate::artifacts::evidence::lenient")]
    blockers: Vec<serde_json::Value>,
    #[serde(deserialize_with = "crate::artifacts::evidence::lenient")]
    risk_flags: Vec<serde_json::Value>,
}

/// What the journal reads of a `runner_metadata.json`: the agent and its kind.
#[derive(Default, Deserialize)]
#[serde(default)]
struct RunnerName {
    #[serde(deserialize_with = "crate::artifacts::evidence::lenient")]
    agent: Option<String>,
    #[serde(deserialize_with = "crate::artifacts::evidence::lenient")]
    kind: Option<String>,
}

/// Each item as a text: a blocker's summary, or the item itself when it is a string.
fn texts(items: Vec<serde_json::Value>) -> Vec<String> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Text {
        Summary { summary: String },
        Plain(String),
    }
    items
        .into_iter()
        .map(|item| match Text::deserialize(item) {
            Ok(Text::Summary { summary } | Text::Plain(summary)) => summary,
            Err(_) => String::new(),
        })
        .collect()
}
