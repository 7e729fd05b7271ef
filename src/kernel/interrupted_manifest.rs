//! The manifest of a visit that did not finish, and the table of the files a step leaves in
//! its visit's folder with the role each plays.

use std::path::Path;

use super::recorder::Recorder;
use super::run_error::RunError;
use crate::artifacts::ArtifactRole as Role;
use crate::artifacts::{EventPayload, SCHEMA_VERSION, VisitDir, now};

use crate::workflow::model::Workflow;

/// The manifest of a visit that did not finish (termination `interrupted`), listing every file
/// its step left in the visit's folder — an agent's prompt, raw output, stderr and run log, a
/// validation's validator outputs and collected artifacts, an evaluation's planner input, a
/// rollback's record… — so the evidence of an interrupted visit is in the run's record like
/// any other's; the entries of its run log become `agent_runlog` events unless they already
/// are. Its opcode is the one the visit ran with (its `step_started` event), not the edited
/// workflow's. A rollback that reset the worktree before it was interrupted keeps what it
/// undid in the summary (`rollback`). A visit that already has its manifest keeps it.
pub(super) fn record_interrupted_manifest(
    workflow: &Workflow,
    recorder: &mut Recorder,
    events: &[crate::artifacts::Event],
    (step_id, visit): (&str, u32),
    cause: String,
) -> Result<(), RunError> {
    use crate::artifacts::StepManifest;
    use crate::artifacts::evidence::InterruptedEvidence;
    let run_dir = recorder.run_dir().clone();
    if run_dir.visit_manifest(step_id, visit).exists() {
        return Ok(());
    }
    // The agent's run-log entries become events once: here, unless the driver did it when the
    // operator's interrupt cut the visit short.
    if !super::driver::runlog_recorded(events, (step_id, visit)) {
        super::driver::ingest_runlog(recorder, step_id, visit)?;
    }
    let visit_dir = run_dir.visit_dir(step_id, visit);
    let artifacts = interrupted_visit_files(&visit_dir)
        .into_iter()
        .map(|(name, role, media_type)| crate::artifacts::ArtifactEntry {
            role,
            path: run_dir.relative(&visit_dir.join(name)),
            media_type: media_type.to_owned(),
            required: false,
            important: true,
        })
        .collect();
    let started = events.iter().find_map(|event| match &event.payload {
        EventPayload::StepStarted(started) if event.is_of((step_id, visit)) => {
            Some((event, started))
        }
        _ => None,
    });
    let started_at = started
        .map(|(event, _)| event.timestamp.clone())
        .unwrap_or_default();
    let opcode = started
        .map(|(_, started)| started.opcode.clone())
        .or_else(|| {
            workflow
                .step(step_id)
                .map(|step| step.body.opcode().name().to_owned())
        })
        .unwrap_or_default();
    let mut evidence = InterruptedEvidence {
        interrupted: true,
        cause,
        rollback: None,
    };
    if let Ok((bytes, false)) =
        crate::artifacts::safe_files::read_regular(&visit_dir.join(ROLLBACK_RECORD), 1024 * 1024)
    {
        evidence.rollback = serde_json::from_slice(&bytes).ok();
    }
    let manifest = StepManifest {
        schema_version: SCHEMA_VERSION,
        step_id: step_id.to_owned(),
        opcode,
        visit,
        started_at,
        ended_at: now(),
        termination: "interrupted".to_owned(),
        evidence_summary: crate::artifacts::evidence::summary_value(&evidence),
        artifacts,
        timings_ms: None,
    };
    Ok(recorder.write_manifest(&manifest)?)
}

/// The record a ROLLBACK visit writes once it reset the worktree.
const ROLLBACK_RECORD: &str = VisitDir::ROLLBACK;

/// The files a step may leave at the top of its visit's folder, by the names the opcodes
/// write, each with its role and media type, in the order a manifest lists them.
const VISIT_FILES: [(&str, Role, &str); 22] = [
    (VisitDir::PROMPT, Role::RunnerPrompt, "text/markdown"),
    (
        crate::artifacts::PROMPT_INPUTS_FILE,
        Role::PromptInputs,
        "application/json",
    ),
    (
        VisitDir::STDOUT_JSONL,
        Role::RunnerTranscript,
        "application/x-ndjson",
    ),
    (VisitDir::STDOUT_TXT, Role::RunnerTranscript, "text/plain"),
    (VisitDir::STDERR_TXT, Role::RunnerStderr, "text/plain"),
    (
        VisitDir::TRANSCRIPT,
        Role::RunnerTranscriptMarkdown,
        "text/markdown",
    ),
    (
        VisitDir::FINAL_RESPONSE,
        Role::RunnerFinalResponse,
        "text/markdown",
    ),
    (
        VisitDir::RUNNER_METADATA,
        Role::RunnerMetadata,
        "application/json",
    ),
    (
        crate::artifacts::RUNLOG_FILE,
        Role::AgentRunlog,
        "application/x-ndjson",
    ),
    (VisitDir::WORKSPACE_DIFF, Role::WorkspaceDiff, "text/x-diff"),
    (
        VisitDir::WORKSPACE_STATUS,
        Role::WorkspaceStatus,
        "application/json",
    ),
    (
        VisitDir::POLICY_SUMMARY,
        Role::PolicySummary,
        "application/json",
    ),
    (
        VisitDir::VALIDATION_REPORT,
        Role::ValidationReport,
        "application/json",
    ),
    (
        VisitDir::HARNESS_REPORT,
        Role::HarnessReport,
        "application/json",
    ),
    (
        VisitDir::PLANNER_INPUT,
        Role::PlannerInput,
        "application/json",
    ),
    (
        VisitDir::PLANNER_DECISION,
        Role::PlannerDecision,
        "application/json",
    ),
    (
        VisitDir::PLANNER_PROMPT,
        Role::PlannerPrompt,
        "text/markdown",
    ),
    (
        VisitDir::PLANNER_ATTEMPTS,
        Role::PlannerAttempts,
        "application/json",
    ),
    (
        VisitDir::GATE_REQUEST,
        Role::GateRequest,
        "application/json",
    ),
    (VisitDir::RUN_DIFF, Role::WorkspaceDiff, "text/x-diff"),
    (
        VisitDir::GATE_OUTCOME,
        Role::GateOutcome,
        "application/json",
    ),
    (ROLLBACK_RECORD, Role::RollbackRecord, "application/json"),
];

/// The files an interrupted visit's step left in its folder, by the names the opcodes write
/// (`validators/<id>/…` for a validation's validators), each with its role and media type, in
/// a stable order. What the conductor keeps only while a step runs (the saved guard state, the
/// process-group records, the pids a refused `resume` killed) and anything else an agent
/// left there are not evidence of the step, and are not listed; nothing is followed.
fn interrupted_visit_files(visit_dir: &Path) -> Vec<(String, Role, &'static str)> {
    let is_file = |path: &Path| {
        std::fs::symlink_metadata(path).is_ok_and(|metadata| metadata.file_type().is_file())
    };
    let mut files: Vec<(String, Role, &'static str)> = VISIT_FILES
        .into_iter()
        .filter(|(name, _, _)| is_file(&visit_dir.join(name)))
        .map(|(name, role, media_type)| (name.to_owned(), role, media_type))
        .collect();
    files.extend(
        crate::artifacts::tool_logs(visit_dir)
            .into_iter()
            .map(|name| (name, Role::ToolLog, "text/plain")),
    );
    files.extend(validator_files(visit_dir));
    files
}

/// The files of a validation's validators (`validators/<id>/…`), validators in name order.
fn validator_files(visit_dir: &Path) -> Vec<(String, Role, &'static str)> {
    let is_file = |path: &Path| {
        std::fs::symlink_metadata(path).is_ok_and(|metadata| metadata.file_type().is_file())
    };
    let mut files = Vec::new();
    let validators = visit_dir.join(VisitDir::VALIDATORS);
    let mut ids: Vec<String> = std::fs::read_dir(&validators)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
        .filter_map(|entry| entry.file_name().into_string().ok())
        .collect();
    ids.sort();
    for id in ids {
        let folder = validators.join(&id);
        for (name, role, media_type) in [
            (VisitDir::STDOUT_TXT, Role::ValidationStdout, "text/plain"),
            (VisitDir::STDERR_TXT, Role::ValidationStderr, "text/plain"),
            (
                VisitDir::HARNESS_REPORT,
                Role::HarnessReport,
                "application/json",
            ),
        ] {
            if is_file(&folder.join(name)) {
                files.push((VisitDir::validator_relative(&id, name), role, media_type));
            }
        }
        let collected = folder.join(VisitDir::VALIDATOR_ARTIFACTS);
        let mut found = Vec::new();
        collect_files(&collected, &mut found);
        found.sort();
        files.extend(found.into_iter().map(|path| {
            (
                VisitDir::validator_artifact_relative(&id, &path),
                Role::ValidationArtifact,
                "application/octet-stream",
            )
        }));
    }
    files
}

/// The regular files under `dir` (links not followed, at most 16 folders deep and 10 000
/// files), as paths relative to it.
fn collect_files(dir: &Path, found: &mut Vec<String>) {
    let mut walker = walkdir::WalkDir::new(dir)
        .min_depth(1)
        .max_depth(17)
        .into_iter();
    while let Some(next) = walker.next() {
        if found.len() >= 10_000 {
            return;
        }
        let Ok(entry) = next else {
            continue;
        };
        let relative = entry.path().strip_prefix(dir).ok().and_then(Path::to_str);
        let Some(relative) = relative else {
            // A name that is not UTF-8 is passed over, and a folder so named not entered.
            if entry.file_type().is_dir() {
                walker.skip_current_dir();
            }
            continue;
        };
        if entry.file_type().is_file() {
            found.push(relative.to_owned());
        }
    }
}
