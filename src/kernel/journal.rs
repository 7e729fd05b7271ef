//! The review journal (OA01.1 "Daily Review Journal"): what the runs of a day did, what waits
//! for a human, what the planner said, and where the evidence is — built deterministically from
//! the run directories, no model needed.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::run::DEFAULT_ARTIFACTS_ROOT;
use super::state::{Phase, RunState};
use crate::artifacts::{
    ArtifactRole, Event, EventLog, EventType, LifecycleState, RunDir, RunMetadata, RunStatus,
    StepManifest, is_run_id, read_json,
};
use crate::policy::Violation;
use crate::text::one_line;

/// The journal's data (also what `--format json` prints).
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct Journal {
    /// The format's version.
    pub schema_version: u32,
    /// The first day covered (`YYYY-MM-DD`).
    pub date: String,
    /// The last day covered, when a range was asked for.
    pub until: Option<String>,
    /// Runs that reached a success STOP.
    pub completed: Vec<RunEntry>,
    /// Runs still running or waiting at a gate.
    pub in_progress: Vec<RunEntry>,
    /// Waiting gates and queued reviews.
    pub pending_review: Vec<ReviewEntry>,
    /// Failures, runs stopped until someone resumes them, damaged runs, and decisions only a
    /// human can take.
    pub blockers: Vec<String>,
    /// Every policy violation the runs recorded (restored refs and configuration included:
    /// what an agent tried is worth a look even when it was undone).
    pub policy_violations: Vec<ViolationEntry>,
    /// Every planner decision.
    pub planner_assessments: Vec<Assessment>,
    /// Where each run's evidence is.
    pub provenance: Vec<Provenance>,
}

/// A policy violation of a run's visit.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ViolationEntry {
    /// The run.
    pub run_id: String,
    /// `step #visit`.
    pub step: String,
    /// The violation as recorded.
    pub violation: Violation,
}

/// One run.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RunEntry {
    /// The run.
    pub run_id: String,
    /// Its workflow.
    pub workflow: String,
    /// Its state.
    pub state: String,
    /// How it ended or why it stopped.
    pub detail: String,
    /// Its changes (the whole change since it started, as last recorded).
    pub diffstat: String,
    /// Where and when `land` brought it (`into main (fast-forward) at …`, `pushed to origin
    /// at …`), when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub landed: Option<String>,
}

/// A review waiting for a human.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ReviewEntry {
    /// The run.
    pub run_id: String,
    /// The gate step.
    pub step_id: String,
    /// `waiting` (a blocking gate) or `queued`.
    pub kind: String,
    /// Why.
    pub reason: String,
    /// When a waiting gate times out (RFC 3339), when it has a `timeout:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
    /// The waiting gate's deadline has passed: nothing drives the run, and `resume` or any
    /// decision times the gate out (its `gate_timed_out` route).
    pub deadline_passed: bool,
    /// The gate request, relative to the repository.
    pub request: String,
    /// Risk flags of the last planner decision of the run.
    pub risk_flags: Vec<String>,
}

/// One planner decision.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Assessment {
    /// The run.
    pub run_id: String,
    /// The workflow and version.
    pub workflow: String,
    /// The EVALUATE step and visit.
    pub step: String,
    /// The status.
    pub status: String,
    /// Blocker summaries.
    pub blockers: Vec<String>,
    /// Risk flags.
    pub risk_flags: Vec<String>,
}

/// Where a run's evidence is.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Provenance {
    /// The run.
    pub run_id: String,
    /// `workflow_id.vN`.
    pub workflow: String,
    /// The agents that ran, with their kind.
    pub agents: Vec<String>,
    /// Transcripts, relative to the repository: every agent visit's, in the order the visits
    /// completed (the Markdown lists each step's last one).
    pub transcripts: Vec<String>,
    /// The step of each of `transcripts`, for the Markdown view.
    #[serde(skip)]
    pub transcript_steps: Vec<String>,
    /// The run directory, relative to the repository.
    pub run_dir: String,
}

/// Builds the journal of the runs that went on during `date` (or from `date` through `until`):
/// started by its end, and not ended before it.
pub fn build_journal(repo: &Path, date: &str, until: Option<&str>) -> Journal {
    let root = repo.join(DEFAULT_ARTIFACTS_ROOT);
    let ids: Vec<String> = std::fs::read_dir(&root)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .filter(|name| is_run_id(name))
                .collect()
        })
        .unwrap_or_default();
    let last = until.unwrap_or(date);
    let mut runs: Vec<(RunDir, RunMetadata, Option<String>)> = ids
        .into_iter()
        .filter_map(|id| {
            let run_dir = RunDir::at(root.join(&id));
            // A run whose metadata cannot be read is kept, dated by its id, and reported.
            let (metadata, damage) =
                match read_json::<RunMetadata>(&run_dir.metadata(), "run metadata") {
                    Ok(metadata) => (metadata, None),
                    Err(error) => (
                        stand_in_metadata(&run_dir, &id, repo),
                        Some(error.to_string()),
                    ),
                };
            // A run belongs to the days it went on: from the day it started to the day it
            // ended, or to this day while it goes on (waiting, running, stopped).
            let started = metadata.started_at.get(..10).unwrap_or_default();
            let ended = metadata
                .ended_at
                .as_deref()
                .and_then(|ended| ended.get(..10));
            (started <= last && ended.is_none_or(|ended| ended >= date))
                .then_some((run_dir, metadata, damage))
        })
        .collect();
    // Oldest first; start times have sub-second precision, so the order is the order of runs.
    runs.sort_by(|left, right| {
        (&left.1.started_at, &left.1.run_id).cmp(&(&right.1.started_at, &right.1.run_id))
    });
    let mut journal = Journal {
        schema_version: crate::artifacts::SCHEMA_VERSION,
        date: date.to_owned(),
        until: until.map(str::to_owned),
        ..Journal::default()
    };
    for (run_dir, metadata, damage) in &runs {
        add_run(&mut journal, run_dir, metadata, damage.as_deref(), last);
    }
    journal
}

/// What can be known of a run whose `metadata.json` is unreadable: its id, its start (to the
/// second, from the id), its workflow (from `state.json` or `status.json`) and the repository.
pub fn stand_in_metadata(run_dir: &RunDir, run_id: &str, repo: &Path) -> RunMetadata {
    let workflow_id = read_json::<RunState>(&run_dir.state(), "run state")
        .map(|state| state.workflow_id)
        .or_else(|_| {
            read_json::<RunStatus>(&run_dir.status(), "run status").map(|status| status.workflow_id)
        })
        .unwrap_or_else(|_| "?".to_owned());
    // `YYYYMMDDTHHMMSSZ-…` → `YYYY-MM-DDTHH:MM:SSZ`.
    let stamp = |range: std::ops::Range<usize>| run_id.get(range).unwrap_or_default();
    let started_at = format!(
        "{}-{}-{}T{}:{}:{}Z",
        stamp(0..4),
        stamp(4..6),
        stamp(6..8),
        stamp(9..11),
        stamp(11..13),
        stamp(13..15)
    );
    RunMetadata {
        schema_version: crate::artifacts::SCHEMA_VERSION,
        run_id: run_id.to_owned(),
        workflow_id,
        workflow_version: 0,
        workflow_path: String::new(),
        started_at,
        artifacts_root: DEFAULT_ARTIFACTS_ROOT.to_owned(),
        entry_step: String::new(),
        ended_at: None,
        last_step_id: None,
        termination: None,
        schema_versions: std::collections::BTreeMap::new(),
        repo_root: repo.display().to_string(),
        worktree_path: String::new(),
        branch: String::new(),
        base_ref: String::new(),
        base_sha: String::new(),
        params: serde_json::Map::new(),
        planner_override: None,
        workflow_sha256: None,
        config_sha256: None,
        config_path: None,
        script_modules: None,
        prompts_sha256: None,
        base_branch: None,
        result_commit: None,
        landings: Vec::new(),
    }
}

/// Where and when a run was landed, one phrase per landing.
fn landed_text(metadata: &RunMetadata) -> Option<String> {
    let phrases: Vec<String> = metadata
        .landings
        .iter()
        .map(|landing| match (&landing.into, &landing.remote) {
            (Some(into), _) => format!(
                "into {into} ({}) at {}",
                landing.mode.as_deref().unwrap_or("?"),
                landing.at
            ),
            (None, Some(remote)) => format!("pushed to {remote} at {}", landing.at),
            (None, None) => format!("at {}", landing.at),
        })
        .collect();
    (!phrases.is_empty()).then(|| phrases.join("; "))
}

fn add_run(
    journal: &mut Journal,
    run_dir: &RunDir,
    metadata: &RunMetadata,
    metadata_damage: Option<&str>,
    last_day: &str,
) {
    let run_id = metadata.run_id.clone();
    // A run that ended after the journal's last day was still going on then.
    let ended_later = metadata
        .ended_at
        .as_deref()
        .filter(|ended| ended.get(..10).is_some_and(|day| day > last_day));
    let workflow = match metadata_damage {
        Some(_) => format!("{}.v?", metadata.workflow_id),
        None => format!("{}.v{}", metadata.workflow_id, metadata.workflow_version),
    };
    if let Some(damage) = metadata_damage {
        journal.blockers.push(format!(
            "{run_id} ({workflow}): its metadata is damaged: {damage}; restore the file (from a backup) to resume or decide the run; what follows shows what could be read"
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
    let (events, damage) = match EventLog::read_readable(&run_dir.events()) {
        Ok(read) => read,
        Err(error) => (Vec::new(), vec![error]),
    };
    if let Some(first) = damage.first() {
        // Said, not hidden: a damaged log would otherwise read as a run that did nothing.
        let more = match damage.len() {
            1 => String::new(),
            count => format!(" (and {} more damaged lines)", count - 1),
        };
        journal.blockers.push(format!(
            "{run_id} ({workflow}): its event log is damaged: {first}{more}; what follows shows what could be read"
        ));
    }
    let manifests = manifests_in_order(run_dir, &events);
    add_violations(journal, &events, &run_id);
    let diffstat = changes_of(&manifests, &events);
    let lifecycle = status
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
        .filter(|_| ended_later.is_none())
        .and_then(|(step, visit)| super::gate::gate_deadline_passed(run_dir, step, *visit));
    let detail = match (&deadline_passed, &waiting) {
        (Some(deadline), Some((step, _))) => format!(
            "{detail}; gate `{step}` is {}",
            deadline_passed_text(&run_id, deadline)
        ),
        _ => detail,
    };
    let entry = RunEntry {
        run_id: run_id.clone(),
        workflow: workflow.clone(),
        state: lifecycle.name().into(),
        detail: detail.clone(),
        diffstat,
        landed: landed_text(metadata),
    };
    // OA01.1: finished runs are completed tasks or blockers, and so is a run that stopped
    // (killed, interrupted, unreadable) and needs someone to resume it; "In Progress" is what
    // still goes on (running, waiting at a gate, which Pending Review lists).
    match lifecycle {
        _ if let Some(ended) = ended_later => journal.in_progress.push(RunEntry {
            detail: format!(
                "went on past {last_day}; ended {ended} ({}): {}",
                entry.state, entry.detail
            ),
            ..entry
        }),
        LifecycleState::Completed => journal.completed.push(entry),
        LifecycleState::Failed => journal.blockers.push(format!(
            "{run_id} ({workflow}) failed: {detail} ({})",
            entry.diffstat
        )),
        LifecycleState::Blocked => {
            let hint = if detail.contains("tnh-conductor resume") {
                String::new()
            } else {
                format!("; `tnh-conductor resume {run_id}` continues it")
            };
            journal.blockers.push(format!(
                "{run_id} ({workflow}) stopped: {detail}{hint} ({})",
                entry.diffstat
            ));
        }
        LifecycleState::Running | LifecycleState::Waiting => journal.in_progress.push(entry),
    }
    let mut last_flags = Vec::new();
    for manifest in &manifests {
        let Some(entry) = manifest.artifact(ArtifactRole::PlannerDecision) else {
            continue;
        };
        let Ok(decision) =
            read_json::<serde_json::Value>(&run_dir.root().join(&entry.path), "planner decision")
        else {
            continue;
        };
        let strings = |key: &str| -> Vec<String> {
            decision[key]
                .as_array()
                .map(|items| {
                    items
                        .iter()
                        .map(|item| {
                            item["summary"]
                                .as_str()
                                .or(item.as_str())
                                .unwrap_or_default()
                                .to_owned()
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        let status = decision["status"].as_str().unwrap_or_default().to_owned();
        let blockers = strings("blockers");
        last_flags = strings("risk_flags");
        if status == "blocked" || status == "needs_human" {
            journal.blockers.extend(
                blockers
                    .iter()
                    .map(|blocker| format!("{run_id} / {}: {status}: {blocker}", manifest.step_id)),
            );
        }
        journal.planner_assessments.push(Assessment {
            run_id: run_id.clone(),
            workflow: workflow.clone(),
            step: format!("{} #{}", manifest.step_id, manifest.visit),
            status,
            blockers,
            risk_flags: last_flags.clone(),
        });
    }
    for manifest in &manifests {
        let Some(request) = manifest.artifact(ArtifactRole::GateRequest) else {
            continue;
        };
        let is_waiting = waiting
            .as_ref()
            .is_some_and(|(step, visit)| *step == manifest.step_id && *visit == manifest.visit);
        if !is_waiting && manifest.termination != "gate_queued" {
            continue;
        }
        let body =
            read_json::<serde_json::Value>(&run_dir.root().join(&request.path), "gate request")
                .unwrap_or_default();
        journal.pending_review.push(ReviewEntry {
            run_id: run_id.clone(),
            step_id: manifest.step_id.clone(),
            kind: if is_waiting {
                "waiting".into()
            } else {
                "queued".into()
            },
            reason: body["reason"].as_str().unwrap_or_default().to_owned(),
            deadline: body["deadline"].as_str().map(str::to_owned),
            deadline_passed: is_waiting && deadline_passed.is_some(),
            request: relative(&run_dir.root().join(&request.path)),
            risk_flags: last_flags.clone(),
        });
    }
    journal.provenance.push(provenance(
        run_dir, &run_id, &workflow, &manifests, &relative,
    ));
}

fn provenance(
    run_dir: &RunDir,
    run_id: &str,
    workflow: &str,
    manifests: &[StepManifest],
    relative: &dyn Fn(&Path) -> String,
) -> Provenance {
    let mut agents = Vec::new();
    let mut transcripts = Vec::new();
    let mut transcript_steps = Vec::new();
    for manifest in manifests {
        if let Some(entry) = manifest.artifact(ArtifactRole::RunnerMetadata)
            && let Ok(runner) =
                read_json::<serde_json::Value>(&run_dir.root().join(&entry.path), "runner metadata")
        {
            let agent = format!(
                "{} ({})",
                runner["agent"].as_str().unwrap_or("?"),
                runner["kind"].as_str().unwrap_or("?")
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
    Provenance {
        run_id: run_id.to_owned(),
        workflow: workflow.to_owned(),
        agents,
        transcripts,
        transcript_steps,
        run_dir: relative(run_dir.root()),
    }
}

/// The run's `policy_violation` events, interrupted visits' included.
fn add_violations(journal: &mut Journal, events: &[Event], run_id: &str) {
    for event in events {
        if event.event_type != EventType::PolicyViolation {
            continue;
        }
        let Some(violation) = event
            .payload
            .get("violation")
            .and_then(|value| serde_json::from_value::<Violation>(value.clone()).ok())
        else {
            continue;
        };
        journal.policy_violations.push(ViolationEntry {
            run_id: run_id.to_owned(),
            step: format!(
                "{} #{}",
                event.step_id.as_deref().unwrap_or_default(),
                event.visit.unwrap_or(0)
            ),
            violation,
        });
    }
}

/// What a gate past its deadline means, for the views that show it waiting:
/// `past its deadline (D): ...` with what will happen.
pub fn deadline_passed_text(run_id: &str, deadline: &str) -> String {
    format!(
        "PAST its deadline ({}): `tnh-conductor resume {run_id}` or any decision times it out \
         (its `gate_timed_out` route)",
        one_line(deadline)
    )
}

/// Where a run that has not ended stands, when its status gives no reason.
fn where_it_is(status: &RunStatus) -> Option<String> {
    let step = status.current_step_id.as_deref()?;
    match status.lifecycle_state {
        LifecycleState::Waiting => Some(format!("gate `{step}` waits for a decision")),
        LifecycleState::Running | LifecycleState::Blocked => Some(format!("at step `{step}`")),
        LifecycleState::Completed | LifecycleState::Failed => None,
    }
}

/// The run's changes as the journal shows them: the whole change since the run started as the
/// last step that recorded it saw it (an agent step, a gate), else the last change a step
/// captured, unless a rollback (a ROLLBACK step's or the operator's) came after it.
fn changes_of(manifests: &[StepManifest], events: &[Event]) -> String {
    let mut changes = "no changes".to_owned();
    for event in events {
        match event.event_type {
            EventType::StepCompleted => {
                let captured = manifests
                    .iter()
                    .find(|manifest| {
                        Some(manifest.step_id.as_str()) == event.step_id.as_deref()
                            && Some(manifest.visit) == event.visit
                    })
                    .and_then(|manifest| {
                        let summary = &manifest.evidence_summary;
                        summary
                            .get("run_diffstat")
                            .filter(|value| value.is_object())
                            .or_else(|| summary.get("diffstat"))
                    });
                if let Some(diffstat) = captured {
                    changes = describe_diffstat(diffstat);
                }
            }
            EventType::RollbackCompleted => {
                let by = if event.step_id.is_none() {
                    " by the operator"
                } else {
                    ""
                };
                changes = format!(
                    "rolled back{by} to {}",
                    event.text("target").unwrap_or("a snapshot")
                );
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
            event.event_type == EventType::StepCompleted
                || event.event_type == EventType::GateRequested
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

fn describe_diffstat(value: &serde_json::Value) -> String {
    let number = |key: &str| value[key].as_u64().unwrap_or(0);
    let files = number("files_changed");
    let plural = if files == 1 { "" } else { "s" };
    format!(
        "{files} file{plural} changed, +{} -{}",
        number("insertions"),
        number("deletions")
    )
}

impl Journal {
    /// The journal in Markdown (OA01.1 format).
    pub fn to_markdown(&self) -> String {
        // Every value on one line: a file name an agent chose, a STOP reason read from a file
        // it wrote or a planner's blocker holding a newline would otherwise start lines of its
        // own — a forged heading, task or "none" (the JSON format keeps them exact).
        let l = |text: &str| one_line(text).into_owned();
        let range = self
            .until
            .as_ref()
            .map(|until| format!(" to {}", l(until)))
            .unwrap_or_default();
        let mut text = format!(
            "# TNH-Journal: {}{range}\n\n## Completed Tasks\n",
            l(&self.date)
        );
        list(
            &mut text,
            self.completed.iter().map(|run| {
                let landed = run
                    .landed
                    .as_deref()
                    .map(|landed| format!(" — landed {}", l(landed)))
                    .unwrap_or_default();
                format!(
                    "- [x] {} `{}`: {} ({}){landed}",
                    l(&run.workflow),
                    l(&run.run_id),
                    l(&run.detail),
                    l(&run.diffstat)
                )
            }),
        );
        text.push_str("\n## In Progress\n");
        list(
            &mut text,
            self.in_progress.iter().map(|run| {
                format!(
                    "- [ ] {} `{}`: {} — {} ({})",
                    l(&run.workflow),
                    l(&run.run_id),
                    l(&run.state),
                    l(&run.detail),
                    l(&run.diffstat)
                )
            }),
        );
        text.push_str("\n## Pending Review\n");
        list(
            &mut text,
            self.pending_review.iter().map(|review| {
                let flags = if review.risk_flags.is_empty() {
                    String::new()
                } else {
                    format!(" — risk: {}", l(&review.risk_flags.join(", ")))
                };
                let deadline = match &review.deadline {
                    Some(deadline) if review.deadline_passed => {
                        format!(" — {}", l(&deadline_passed_text(&review.run_id, deadline)))
                    }
                    _ => String::new(),
                };
                format!(
                    "- [ ] {} `{}` / {}: {} ({}){deadline}{flags}",
                    l(&review.kind),
                    l(&review.run_id),
                    l(&review.step_id),
                    l(&review.reason),
                    l(&review.request)
                )
            }),
        );
        text.push_str("\n## Blockers & Decisions Needed\n");
        list(
            &mut text,
            self.blockers
                .iter()
                .map(|blocker| format!("- {}", l(blocker))),
        );
        text.push_str("\n## Policy Violations\n");
        list(
            &mut text,
            self.policy_violations.iter().map(|entry| {
                format!(
                    "- `{}` / {}: {}",
                    l(&entry.run_id),
                    l(&entry.step),
                    l(&entry.violation.to_string())
                )
            }),
        );
        text.push_str("\n## Planner Assessments\n");
        list(
            &mut text,
            self.planner_assessments.iter().map(|assessment| {
                let mut line = format!(
                    "→ {} / `{}` / step: {}\n  Status: {}",
                    l(&assessment.workflow),
                    l(&assessment.run_id),
                    l(&assessment.step),
                    l(&assessment.status)
                );
                for blocker in &assessment.blockers {
                    let _ = write!(line, "\n  Blocker: \"{}\"", l(blocker));
                }
                if !assessment.risk_flags.is_empty() {
                    let _ = write!(
                        line,
                        "\n  Risk flags: {}",
                        l(&assessment.risk_flags.join(", "))
                    );
                }
                line
            }),
        );
        text.push_str("\n## Provenance\n");
        list(
            &mut text,
            self.provenance.iter().map(|run| {
                let mut line = format!(
                    "- Run `{}`: workflow {}, run directory {}",
                    l(&run.run_id),
                    l(&run.workflow),
                    l(&run.run_dir)
                );
                if !run.agents.is_empty() {
                    let _ = write!(line, "\n  - Agents: {}", l(&run.agents.join(", ")));
                }
                // Each step's last transcript: a loop of 250 visits is one line, not 250.
                let latest = run.latest_transcripts();
                for transcript in &latest {
                    let _ = write!(line, "\n  - Transcript: {}", l(transcript));
                }
                let earlier = run.transcripts.len() - latest.len();
                if earlier > 0 {
                    let _ = write!(
                        line,
                        "\n  - ({earlier} earlier visit{} not listed: each visit's transcript is artifacts/STEP/VISIT/transcript.md of the run directory; `tnh-conductor runs show {}` lists the visits)",
                        if earlier == 1 { "" } else { "s" },
                        l(&run.run_id)
                    );
                }
                line
            }),
        );
        text
    }
}

impl Provenance {
    /// The last transcript of each step, the steps in the order their first transcript came.
    fn latest_transcripts(&self) -> Vec<&str> {
        let mut latest: Vec<(&str, &str)> = Vec::new();
        for (index, transcript) in self.transcripts.iter().enumerate() {
            // A provenance without steps (built by hand) lists every transcript.
            let step = self
                .transcript_steps
                .get(index)
                .map_or(transcript.as_str(), String::as_str);
            match latest.iter_mut().find(|(known, _)| *known == step) {
                Some(entry) => entry.1 = transcript,
                None => latest.push((step, transcript)),
            }
        }
        latest
            .into_iter()
            .map(|(_, transcript)| transcript)
            .collect()
    }
}

fn list(text: &mut String, lines: impl Iterator<Item = String>) {
    let mut any = false;
    for line in lines {
        text.push_str(&line);
        text.push('\n');
        any = true;
    }
    if !any {
        text.push_str("- none\n");
    }
}

/// The JSON Schema of `journal --format json`.
pub fn journal_schema() -> serde_json::Value {
    schemars::schema_for!(Journal).to_value()
}
