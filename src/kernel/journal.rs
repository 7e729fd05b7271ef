//! The review journal: what the runs of a day did, what waits
//! for a human, what the planner said, and where the evidence is — built deterministically from
//! the run directories, no model needed.

use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::finished_runs::FinishedIndex;
use super::journal_record::{RunRecord, record_of};
use super::run::DEFAULT_ARTIFACTS_ROOT;
use super::state::RunState;
use crate::artifacts::{LifecycleState, RunDir, RunMetadata, RunStatus, is_run_id, read_json};
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
    /// Runs the operator ended with `runs abandon` (listed only when there are some).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub abandoned: Vec<RunEntry>,
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
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
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
/// started by its end, and not ended before it. Runs whose directory `runs clean --all`
/// removed are read from the records kept of them, so a past day reads the same after a clean.
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
    // A run belongs to the days it went on: from the day it started to the day it ended, or
    // to this day while it goes on (waiting, running, stopped).
    let went_on = |started_at: &str, ended_at: Option<&str>| {
        let started = started_at.get(..10).unwrap_or_default();
        let ended = ended_at.and_then(|ended| ended.get(..10));
        started <= last && ended.is_none_or(|ended| ended >= date)
    };
    // A finished run the index knows is read only when it went on during these days.
    let mut finished = FinishedIndex::load(repo);
    let mut records: Vec<RunRecord> = Vec::new();
    for id in &ids {
        let known = finished
            .get(id)
            .map(|run| went_on(&run.started, Some(&run.ended)));
        if known == Some(false) {
            continue;
        }
        let run_dir = RunDir::at(root.join(id));
        let (metadata, damage) = metadata_of(repo, &run_dir, id);
        if known.is_none() && damage.is_none() && metadata.ended_at.is_some() {
            finished.learn(&run_dir, id);
        }
        if went_on(&metadata.started_at, metadata.ended_at.as_deref()) {
            records.push(record_of(&run_dir, &metadata, damage.as_deref()));
        }
    }
    // A run directory still there is the run (a clean stopped after keeping its record); a
    // removed run the index knows is read only when it went on during these days.
    let kept = super::history::kept_runs(repo);
    let present: std::collections::BTreeSet<&String> = if kept.is_empty() {
        std::collections::BTreeSet::new()
    } else {
        ids.iter().collect()
    };
    let wanted = kept.iter().filter(|run_id| {
        finished
            .get_removed(run_id)
            .is_none_or(|run| went_on(&run.started, Some(&run.ended)))
    });
    let (removed, damaged) = super::history::read_history(repo, wanted);
    for (run_id, record) in removed {
        if let Some(ended_at) = &record.ended_at {
            finished.learn_removed(run_id, &record.started_at, ended_at);
        }
        if !present.contains(&record.run_id)
            && went_on(&record.started_at, record.ended_at.as_deref())
        {
            records.push(record);
        }
    }
    finished.save(&ids, Some(&kept));
    // Oldest first; start times have sub-second precision, so the order is the order of runs.
    records.sort_by(|left, right| {
        (&left.started_at, &left.run_id).cmp(&(&right.started_at, &right.run_id))
    });
    let mut journal = Journal {
        schema_version: crate::artifacts::SCHEMA_VERSION,
        date: date.to_owned(),
        until: until.map(str::to_owned),
        ..Journal::default()
    };
    journal.blockers.extend(damaged);
    for record in &records {
        add_record(&mut journal, record, last);
    }
    journal
}

/// The run's metadata and, when it cannot be read, why: a run whose metadata cannot be read
/// is kept, dated by its id, and reported.
pub(crate) fn metadata_of(
    repo: &Path,
    run_dir: &RunDir,
    run_id: &str,
) -> (RunMetadata, Option<String>) {
    match read_json::<RunMetadata>(&run_dir.metadata(), "run metadata") {
        Ok(metadata) => (metadata, None),
        Err(error) => (
            stand_in_metadata(run_dir, run_id, repo),
            Some(error.to_string()),
        ),
    }
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
pub(super) fn landed_text(metadata: &RunMetadata) -> Option<String> {
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

/// Adds a run to the journal of the days up to `last_day`.
fn add_record(journal: &mut Journal, record: &RunRecord, last_day: &str) {
    let run_id = &record.run_id;
    let workflow = &record.workflow;
    // A run that ended after the journal's last day was still going on then.
    let ended_later = record
        .ended_at
        .as_deref()
        .filter(|ended| ended.get(..10).is_some_and(|day| day > last_day));
    journal.blockers.extend(record.damage.iter().cloned());
    journal
        .policy_violations
        .extend(record.policy_violations.iter().cloned());
    let deadline_passed = record
        .deadline_passed
        .as_ref()
        .filter(|_| ended_later.is_none());
    let detail = match (deadline_passed, &record.waiting_gate) {
        (Some(deadline), Some(step)) => format!(
            "{}; gate `{step}` is {}",
            record.detail,
            deadline_passed_text(run_id, deadline)
        ),
        _ => record.detail.clone(),
    };
    let entry = RunEntry {
        run_id: run_id.clone(),
        workflow: workflow.clone(),
        state: record.lifecycle_state.name().into(),
        detail: detail.clone(),
        diffstat: record.diffstat.clone(),
        landed: record.landed.clone(),
    };
    // Finished runs are completed tasks or blockers, and so is a run that stopped
    // (killed, interrupted, unreadable) and needs someone to resume it; "In Progress" is what
    // still goes on (running, waiting at a gate, which Pending Review lists). An abandoned run
    // needs no one: it has its own list.
    match record.lifecycle_state {
        _ if let Some(ended) = ended_later => journal.in_progress.push(RunEntry {
            detail: format!(
                "went on past {last_day}; ended {ended} ({}): {}",
                entry.state, entry.detail
            ),
            ..entry
        }),
        LifecycleState::Completed => journal.completed.push(entry),
        LifecycleState::Abandoned => journal.abandoned.push(entry),
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
        LifecycleState::Running | LifecycleState::Waiting | LifecycleState::Decided => {
            journal.in_progress.push(entry)
        }
    }
    journal
        .blockers
        .extend(record.planner_blockers.iter().cloned());
    journal
        .planner_assessments
        .extend(record.planner_assessments.iter().cloned());
    // An abandoned run's work is thrown away: nothing of it is left to review (on the days
    // before it was abandoned, its reviews were still pending).
    let reviews = match record.lifecycle_state {
        LifecycleState::Abandoned if ended_later.is_none() => &[][..],
        _ => &record.reviews[..],
    };
    journal
        .pending_review
        .extend(reviews.iter().map(|review| ReviewEntry {
            deadline_passed: review.deadline_passed && ended_later.is_none(),
            ..review.clone()
        }));
    journal.provenance.push(Provenance {
        transcript_steps: record.transcript_steps.clone(),
        ..record.provenance.clone()
    });
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

impl Journal {
    /// The journal in Markdown (planner format).
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
        // Only on days with abandoned runs: other days read as they always did.
        if !self.abandoned.is_empty() {
            text.push_str("\n## Abandoned\n");
            list(
                &mut text,
                self.abandoned.iter().map(|run| {
                    format!(
                        "- [-] {} `{}`: {} ({})",
                        l(&run.workflow),
                        l(&run.run_id),
                        l(&run.detail),
                        l(&run.diffstat)
                    )
                }),
            );
        }
        text.push_str("\n## Pending Review\n");
        list(
            &mut text,
            self.pending_review.iter().map(pending_review_line),
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
            self.planner_assessments.iter().map(assessment_lines),
        );
        text.push_str("\n## Provenance\n");
        list(&mut text, self.provenance.iter().map(provenance_lines));
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

/// A Pending Review line of the Markdown journal, every value on one line.
fn pending_review_line(review: &ReviewEntry) -> String {
    let l = |text: &str| one_line(text).into_owned();
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
}

/// A Planner Assessments entry of the Markdown journal, every value on one line.
fn assessment_lines(assessment: &Assessment) -> String {
    let l = |text: &str| one_line(text).into_owned();
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
}

/// A Provenance entry of the Markdown journal, every value on one line.
fn provenance_lines(run: &Provenance) -> String {
    let l = |text: &str| one_line(text).into_owned();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn abandoned_run(ended_at: &str) -> RunRecord {
        RunRecord {
            schema_version: crate::artifacts::SCHEMA_VERSION,
            run_id: "20261201T080000Z-abcdef".into(),
            started_at: "2026-12-01T08:00:00Z".into(),
            ended_at: Some(ended_at.into()),
            workflow: "gated.v1".into(),
            lifecycle_state: LifecycleState::Abandoned,
            detail: "abandoned by carol (superseded)".into(),
            diffstat: "no changes".into(),
            landed: None,
            damage: Vec::new(),
            waiting_gate: None,
            deadline_passed: None,
            policy_violations: Vec::new(),
            planner_assessments: Vec::new(),
            planner_blockers: Vec::new(),
            reviews: vec![ReviewEntry {
                run_id: "20261201T080000Z-abcdef".into(),
                step_id: "queue".into(),
                kind: "queued".into(),
                reason: "for the journal".into(),
                deadline: None,
                deadline_passed: false,
                request: "r.json".into(),
                risk_flags: Vec::new(),
            }],
            provenance: Provenance {
                run_id: "20261201T080000Z-abcdef".into(),
                workflow: "gated.v1".into(),
                agents: Vec::new(),
                transcripts: Vec::new(),
                transcript_steps: Vec::new(),
                run_dir: ".tnh/run/20261201T080000Z-abcdef".into(),
            },
            transcript_steps: Vec::new(),
        }
    }

    #[test]
    fn an_abandoned_run_is_listed_apart_without_reviews_and_in_progress_before_it_ended() {
        let mut on_the_day = Journal::default();
        add_record(
            &mut on_the_day,
            &abandoned_run("2026-12-01T09:00:00Z"),
            "2026-12-01",
        );
        assert_eq!(on_the_day.abandoned.len(), 1);
        assert!(on_the_day.in_progress.is_empty() && on_the_day.pending_review.is_empty());
        assert!(on_the_day.to_markdown().contains(
            "## Abandoned\n- [-] gated.v1 `20261201T080000Z-abcdef`: abandoned by carol (superseded) (no changes)\n"
        ));

        let mut before = Journal::default();
        add_record(
            &mut before,
            &abandoned_run("2026-12-03T09:00:00Z"),
            "2026-12-01",
        );
        assert!(before.abandoned.is_empty());
        assert_eq!(before.in_progress.len(), 1);
        assert_eq!(
            before.pending_review.len(),
            1,
            "its review was still pending"
        );
        assert!(!before.to_markdown().contains("## Abandoned"));
    }

    #[test]
    fn a_kept_record_stands_in_for_its_run_only_once_the_run_directory_is_gone() {
        let repo = tempfile::tempdir().unwrap();
        let record = abandoned_run("2026-12-01T09:00:00Z");
        let kept = super::super::history::history_file(repo.path(), &record.run_id);
        std::fs::create_dir_all(kept.parent().unwrap()).unwrap();
        std::fs::write(&kept, serde_json::to_vec(&record).unwrap()).unwrap();
        let run_dir = repo
            .path()
            .join(DEFAULT_ARTIFACTS_ROOT)
            .join(&record.run_id);
        std::fs::create_dir_all(&run_dir).unwrap();

        let with_directory = build_journal(repo.path(), "2026-12-01", None);
        std::fs::remove_dir(&run_dir).unwrap();
        let without = build_journal(repo.path(), "2026-12-01", None);

        assert_eq!(
            with_directory.provenance.len(),
            1,
            "the run once, from its directory"
        );
        assert!(with_directory.abandoned.is_empty());
        assert_eq!(without.provenance.len(), 1);
        assert_eq!(without.abandoned.len(), 1, "from the kept record");
    }
}
