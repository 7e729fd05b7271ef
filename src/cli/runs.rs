//! `tnh-conductor status RUN_ID`, `runs show RUN_ID`, `runs events RUN_ID` (`runs list` is
//! in `runs_list.rs`).

use std::fmt::Write as _;
use std::path::Path;

use clap::Args;

use super::output::one_line;
use super::step_lines::{describe_violation, describe_visit};
use super::{Cli, Output, repo_root};
use crate::artifacts::{
    EventLog, EventPayload, EventType, LifecycleState, RunDir, RunMetadata, RunStatus,
    StepManifest, VisitDir, read_json,
};
use crate::error::{Error, ExitStatus, Result};
use crate::kernel::run::find_run_dir;

/// `status RUN_ID`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The run to show.
    pub run_id: String,
    /// Keep printing the status as it changes until the run stops running.
    #[arg(long)]
    pub watch: bool,
    /// Print `status.json`.
    #[arg(long)]
    pub json: bool,
}

fn run_dir(cli: &Cli, run_id: &str) -> Result<RunDir> {
    find_run_dir(&repo_root(cli)?, run_id).map_err(|error| Error::Run(Box::new(error)))
}

pub(super) fn status_of(run_dir: &RunDir) -> Result<RunStatus> {
    crate::kernel::run_status::read_status(run_dir).map_err(artifacts)
}

fn artifacts(error: crate::artifacts::ArtifactsError) -> Error {
    Error::Run(Box::new(crate::kernel::run::RunError::Artifacts(error)))
}

/// What is wrong with the run's `state.json`, which its `status.json` (what these views show)
/// does not say, and what to do: damaged or written by a newer release (`resume`, gate
/// decisions and `rollback` refuse the run until it is dealt with), or gone while the run
/// waits at a gate. `None` when the state is sound. Said even when the status, read without
/// the state, names the problem in its reason: `runs list` and `runs show` do not print it.
pub(super) fn state_damage(run_dir: &RunDir, status: Option<&RunStatus>) -> Option<String> {
    use crate::kernel::state::StateError;
    let path = run_dir.state();
    let (problem, advice) = if path.is_file() {
        match crate::kernel::state::read_state(&path) {
            Ok(_) => return None,
            Err(error @ StateError::Newer { .. }) => (
                error.to_string(),
                "use the newer tnh-conductor that wrote it to resume, decide or roll back the run",
            ),
            Err(error) => (
                error.to_string(),
                "restore the file (from a backup) to resume, decide or roll back the run",
            ),
        }
    } else if status.is_some_and(|status| status.lifecycle_state == LifecycleState::Waiting) {
        (
            format!("`{}` is missing", path.display()),
            "restore the file (from a backup) to decide the run's gate",
        )
    } else {
        return None;
    };
    Some(format!("{problem}; {advice}"))
}

/// Prints a run's status.
pub fn cmd_status(cli: &Cli, args: &StatusArgs, output: &mut Output) -> Result<ExitStatus> {
    let run_dir = run_dir(cli, &args.run_id)?;
    if status_of(&run_dir)?.lifecycle_state == crate::artifacts::LifecycleState::Waiting {
        crate::kernel::gate::notice_timeout(&run_dir);
    }
    // A frame is printed when the status changes and, while a step runs, when the time since
    // it started or since its last output reads differently (looked at once a second): a
    // hanging agent must show its silence growing, not "0s ago" for ever.
    let mut shown_key = String::new();
    let mut shown_frame = String::new();
    let mut rendered_at: Option<std::time::Instant> = None;
    let mut warned = false;
    loop {
        let status = status_of(&run_dir)?;
        // `status.json` may look sound while the state the run continues from is not.
        let damage = state_damage(&run_dir, Some(&status));
        if args.json
            && !warned
            && let Some(damage) = &damage
        {
            output.note(&format!(
                "warning: run {} is damaged: {damage}",
                args.run_id
            ));
            warned = true;
        }
        // The state too: a driver killed meanwhile leaves the same `updated_at`, and the
        // watch must end by showing it blocked, not with `running` on the screen.
        let key = format!("{} {}", status.updated_at, status.lifecycle_state.name());
        let aged = rendered_at.is_none_or(|at| at.elapsed() >= std::time::Duration::from_secs(1));
        if key != shown_key || (!args.json && aged) {
            let mut frame = render_status(&run_dir, &status, args.json)?;
            if !args.json
                && let Some(damage) = &damage
            {
                let _ = writeln!(frame, "  damaged: {damage}");
            }
            rendered_at = Some(std::time::Instant::now());
            shown_key = key;
            if frame != shown_frame {
                output.print(&frame);
                shown_frame = frame;
            }
        }
        if !args.watch || status.lifecycle_state != crate::artifacts::LifecycleState::Running {
            return Ok(ExitStatus::Success);
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// One frame of `status`: the status as JSON, or the text an operator reads.
fn render_status(run_dir: &RunDir, status: &RunStatus, json: bool) -> Result<String> {
    if json {
        return Ok(format!("{}\n", serde_json::to_string_pretty(status)?));
    }
    let mut text = format!(
        "run {}  ({})\n  state: {}\n",
        status.run_id,
        status.workflow_id,
        status.lifecycle_state.name()
    );
    if let Some(step) = &status.current_step_id {
        let visit = status
            .visit
            .map(|visit| format!(" (visit {visit})"))
            .unwrap_or_default();
        let _ = writeln!(text, "  step:  {step}{visit}");
        if status.lifecycle_state == crate::artifacts::LifecycleState::Running
            && let Some(visit) = status.visit
        {
            let _ = writeln!(text, "  {}", activity(run_dir, step, visit));
        }
    }
    if let Some(reason) = &status.reason {
        let _ = writeln!(text, "  why:   {}", one_line(reason));
    }
    let _ = writeln!(
        text,
        "  transitions: {}\n  updated: {}",
        status.transitions, status.updated_at
    );
    Ok(text)
}

/// For a visit being driven: how long it has run and when its output last grew, so a
/// hanging agent shows as one (`running for 25m; last output 24m ago (stdout.txt)`).
fn activity(run_dir: &RunDir, step: &str, visit: u32) -> String {
    let now = std::time::SystemTime::now();
    let ago = |then: std::time::SystemTime| {
        compact_duration(now.duration_since(then).unwrap_or_default().as_secs())
    };
    let events = EventLog::read_all(&run_dir.events()).unwrap_or_default();
    let started_event = events.iter().rev().find_map(|event| match &event.payload {
        EventPayload::StepStarted(started) if event.is_of((step, visit)) => Some((event, started)),
        _ => None,
    });
    let started = started_event
        .and_then(|(event, _)| event.timestamp.parse::<jiff::Timestamp>().ok())
        .map(std::time::SystemTime::from);
    let running = started.map_or_else(
        || "running".to_owned(),
        |started| format!("running for {}", ago(started)),
    );
    // An EVALUATE's files are the conductor's, not a process's output: what it waits for is
    // the planner's answer.
    if started_event.is_some_and(|(_, started)| started.opcode == "EVALUATE") {
        let input = run_dir.visit(step, visit).planner_input();
        return match std::fs::metadata(input).and_then(|file| file.modified()) {
            Ok(written) => format!(
                "{running}; waiting for the planner's decision (asked {} ago)",
                ago(written)
            ),
            Err(_) => format!("{running}; preparing the planner's input"),
        };
    }
    match last_output(&run_dir.visit_dir(step, visit)) {
        Some((name, written)) => format!("{running}; last output {} ago ({name})", ago(written)),
        None => format!("{running}; no output yet"),
    }
}

/// The newest non-empty file a visit's processes wrote (its prompt, its inputs, the guard's
/// state and the process group's record, which the conductor writes, left out), with when it
/// was last written.
fn last_output(visit_dir: &Path) -> Option<(String, std::time::SystemTime)> {
    let mut newest: Option<(String, std::time::SystemTime)> = None;
    // The visit's folder and two levels of folders below it; links not followed.
    for entry in walkdir::WalkDir::new(visit_dir).min_depth(1).max_depth(3) {
        let entry = entry.ok()?;
        let Ok(metadata) = entry.metadata() else {
            continue;
        };
        let name = entry.file_name().to_string_lossy().into_owned();
        let written = metadata.modified().ok();
        if !metadata.is_file()
            || metadata.len() == 0
            || [
                VisitDir::PROMPT,
                VisitDir::PROMPT_INPUTS,
                VisitDir::GUARD_STATE,
                VisitDir::PROCESS_GROUP,
            ]
            .contains(&name.as_str())
        {
            continue;
        }
        if let Some(written) = written
            && newest.as_ref().is_none_or(|(_, newest)| written > *newest)
        {
            let relative = entry.path();
            let relative = relative.strip_prefix(visit_dir).unwrap_or(relative);
            newest = Some((relative.display().to_string(), written));
        }
    }
    newest
}

/// `45s`, `3m05s`, `2h14m`.
fn compact_duration(seconds: u64) -> String {
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3600 => format!("{}m{:02}s", seconds / 60, seconds % 60),
        _ => format!("{}h{:02}m", seconds / 3600, seconds % 3600 / 60),
    }
}

/// The `commit:`, `landed:` and `pushed:` lines of `runs show`.
fn landing_lines(metadata: &RunMetadata, text: &mut String) {
    if let Some(commit) = &metadata.result_commit {
        let _ = writeln!(text, "  commit:    {commit} on {}", metadata.branch);
    }
    for landing in &metadata.landings {
        if let Some(into) = &landing.into {
            let _ = writeln!(
                text,
                "  landed:    into {} ({}) at {}: {}",
                one_line(into),
                landing.mode.as_deref().unwrap_or("?"),
                landing.at,
                landing.commit.as_deref().unwrap_or("?")
            );
        }
        if let Some(remote) = &landing.remote {
            let pull_request = landing
                .pull_request
                .as_deref()
                .map(|url| format!(", pull request {}", one_line(url)))
                .unwrap_or_default();
            let _ = writeln!(
                text,
                "  pushed:    to {} at {}{pull_request}",
                one_line(remote),
                landing.at
            );
        }
    }
}

/// `runs show RUN_ID`: metadata, steps and their outcomes.
pub fn cmd_runs_show(cli: &Cli, run_id: &str, output: &mut Output) -> Result<ExitStatus> {
    let run_dir = run_dir(cli, run_id)?;
    // A damaged `metadata.json` is the command's error, after what the other files say.
    let (metadata, metadata_damage) = match run_dir.read_metadata() {
        Ok(metadata) => (metadata, None),
        Err(error) => {
            let stand_in =
                crate::kernel::journal::stand_in_metadata(&run_dir, run_id, &repo_root(cli)?);
            (stand_in, Some(error))
        }
    };
    let metadata: RunMetadata = metadata;
    let status = status_of(&run_dir)?;
    let mut text = show_header(&metadata, metadata_damage.is_some(), &status, &run_dir);
    damage_lines(&run_dir, run_id, &status, &mut text, output);
    if let Some(termination) = &metadata.termination {
        let _ = writeln!(
            text,
            "  ended:     {} at `{}`: {}",
            termination.kind,
            one_line(&termination.step_id),
            one_line(&termination.reason)
        );
    }
    landing_lines(&metadata, &mut text);
    text.push_str("steps:\n");
    let (events, damage) = EventLog::read_readable(&run_dir.events()).map_err(artifacts)?;
    let manifest_damage = step_lines(&run_dir, run_id, &status, &events, &mut text);
    output.print(&text);
    match metadata_damage {
        Some(error) => Err(artifacts(error)),
        None if damage.is_empty() => match manifest_damage.into_iter().next() {
            Some(error) => Err(artifacts(error)),
            None => Ok(ExitStatus::Success),
        },
        None => damaged(damage),
    }
}

/// The first lines of `runs show`: what the run is and where it lives (only what the run's
/// other files say when its metadata is `unreadable`).
fn show_header(
    metadata: &RunMetadata,
    unreadable: bool,
    status: &RunStatus,
    run_dir: &RunDir,
) -> String {
    if unreadable {
        format!(
            "run {}\n  workflow:  {}\n  state:     {}\n  started:   {}\n  run dir:   {}\n  metadata:  unreadable (see the error below)\n",
            metadata.run_id,
            metadata.workflow_id,
            status.lifecycle_state.name(),
            metadata.started_at,
            run_dir.root().display()
        )
    } else {
        format!(
            "run {}\n  workflow:  {} v{} ({})\n  state:     {}\n  started:   {}\n  base:      {} ({})\n  branch:    {}\n  worktree:  {}\n  run dir:   {}\n",
            metadata.run_id,
            metadata.workflow_id,
            metadata.workflow_version,
            metadata.workflow_path,
            status.lifecycle_state.name(),
            metadata.started_at,
            metadata.base_ref,
            metadata.base_sha,
            metadata.branch,
            metadata.worktree_path,
            run_dir.root().display()
        )
    }
}

/// The `damaged:` lines of a run whose state or event log is damaged, each also warned of.
fn damage_lines(
    run_dir: &RunDir,
    run_id: &str,
    status: &RunStatus,
    text: &mut String,
    output: &mut Output,
) {
    if let Some(damage) = state_damage(run_dir, Some(status)) {
        let _ = writeln!(text, "  damaged:   {damage}");
        output.note(&format!("warning: run {run_id} is damaged: {damage}"));
    }
    if let Some(short) = short_of_checkpoint(run_dir) {
        let _ = writeln!(text, "  damaged:   {}", one_line(&short.to_string()));
        output.note(&format!(
            "warning: the event log of run {run_id} is incomplete: {short}"
        ));
    }
}

/// The `steps:` lines, one per visit and operator rollback, from the run's events; returns
/// the manifests that could not be read (the command fails on them after printing).
fn step_lines(
    run_dir: &RunDir,
    run_id: &str,
    status: &RunStatus,
    events: &[crate::artifacts::Event],
    text: &mut String,
) -> Vec<crate::artifacts::ArtifactsError> {
    let open = open_visit(events);
    let mut manifest_damage = Vec::new();
    for event in events {
        let step = event.step_id.clone().unwrap_or_default();
        let visit = event.visit.unwrap_or(0);
        match &event.payload {
            // The visit the run is at (waiting at a gate, running, or cut short), which no
            // `step_completed` describes yet.
            EventPayload::StepStarted(_)
                if open.as_ref().is_some_and(|(open_step, open_visit)| {
                    *open_step == step && *open_visit == visit
                }) =>
            {
                open_visit_line(run_dir, run_id, status, events, &step, visit, text);
            }
            EventPayload::StepFailed(failed) => {
                let _ = writeln!(
                    text,
                    "  {step} #{visit}: could not run — {}",
                    one_line(&failed.error)
                );
            }
            EventPayload::StepCompleted(completed) => {
                let outcome = completed
                    .outcome
                    .map_or("?", crate::outcome::Outcome::as_str);
                if let Err(error) = completed_lines(run_dir, &step, visit, outcome, text) {
                    manifest_damage.push(error);
                }
            }
            // A visit whose process died: what the guard found when `resume` checked it.
            EventPayload::StepInterrupted(interrupted) => {
                interrupted_lines(run_dir, events, event, &interrupted.cause, text);
            }
            // A rollback the operator ran with `tnh-conductor rollback` (a ROLLBACK step's
            // own is described by its step line).
            EventPayload::RollbackCompleted(rollback) if event.step_id.is_none() => {
                let _ = writeln!(
                    text,
                    "  rollback by the operator to {}: {} undone ({})",
                    rollback.target, rollback.undone, rollback.record
                );
                if let Some(attempt) = &rollback.interrupted_attempt {
                    let attempt = <InterruptedAttempt as serde::Deserialize>::deserialize(attempt)
                        .unwrap_or_default();
                    let head = attempt.head_before.as_deref().unwrap_or_default();
                    let seq = attempt
                        .started_seq
                        .as_ref()
                        .map_or_else(|| "null".to_owned(), serde_json::Value::to_string);
                    let _ = writeln!(
                        text,
                        "      after an earlier rollback that was interrupted (event {seq}; HEAD was {} then)",
                        head.get(..12).unwrap_or(head)
                    );
                }
            }
            // The operator's rollback killed part-way: what it was undoing.
            EventPayload::RollbackStarted(started)
                if !events.iter().any(|later| {
                    later.seq > event.seq
                        && later.event_type() == EventType::RollbackCompleted
                        && later.step_id.is_none()
                }) =>
            {
                let head = &started.head_before;
                let _ = writeln!(
                    text,
                    "  rollback by the operator to {}: started, never completed (HEAD was {} then); `tnh-conductor rollback` again finishes it",
                    started.target,
                    head.get(..12).unwrap_or(head)
                );
            }
            _ => {}
        }
    }
    manifest_damage
}

/// The line of the visit the run is at, with a passed gate deadline when it waits.
fn open_visit_line(
    run_dir: &RunDir,
    run_id: &str,
    status: &RunStatus,
    events: &[crate::artifacts::Event],
    step: &str,
    visit: u32,
    text: &mut String,
) {
    let mut line = visit_in_progress(events, step, visit, status);
    if status.lifecycle_state == LifecycleState::Waiting
        && let Some(deadline) = crate::kernel::gate::gate_deadline_passed(run_dir, step, visit)
    {
        let _ = write!(
            line,
            "; {}",
            crate::kernel::journal::deadline_passed_text(run_id, &deadline)
        );
    }
    let _ = writeln!(text, "  {step} #{visit}: {}", one_line(&line));
}

/// The lines of a completed visit: its outcome and what its manifest records.
fn completed_lines(
    run_dir: &RunDir,
    step: &str,
    visit: u32,
    outcome: &str,
    text: &mut String,
) -> std::result::Result<(), crate::artifacts::ArtifactsError> {
    // A missing or unreadable manifest is lost evidence, never "0 artifacts": the line names
    // the file, and the command fails after printing (exit 4).
    let manifest: StepManifest = match read_json(&run_dir.visit_manifest(step, visit), "manifest") {
        Ok(manifest) => manifest,
        Err(error) => {
            let _ = writeln!(
                text,
                "  {step} #{visit}: {outcome} (manifest artifacts/{step}/{visit}/manifest.json {}: see the error below)",
                if run_dir.visit_manifest(step, visit).exists() {
                    "unreadable"
                } else {
                    "missing"
                }
            );
            return Err(error);
        }
    };
    let files = manifest.artifacts.len();
    let plural = if files == 1 { "" } else { "s" };
    let _ = writeln!(
        text,
        "  {step} #{visit}: {outcome} ({files} artifact{plural})"
    );
    for line in describe_visit(&manifest, run_dir) {
        let _ = writeln!(text, "      {}", one_line(&line));
    }
    Ok(())
}

/// The lines of a visit whose process died: the cause, what its manifest records, and the
/// policy violations found in it.
fn interrupted_lines(
    run_dir: &RunDir,
    events: &[crate::artifacts::Event],
    event: &crate::artifacts::Event,
    cause: &str,
    text: &mut String,
) {
    let step = event.step_id.as_deref().unwrap_or_default();
    let visit = event.visit.unwrap_or(0);
    let cause = Some(cause).filter(|cause| !cause.is_empty()).unwrap_or("?");
    let _ = writeln!(text, "  {step} #{visit}: interrupted — {}", one_line(cause));
    let manifest = read_json::<StepManifest>(&run_dir.visit_manifest(step, visit), "manifest");
    for line in manifest
        .iter()
        .flat_map(|manifest| describe_visit(manifest, run_dir))
    {
        let _ = writeln!(text, "      {}", one_line(&line));
    }
    let violations = events.iter().filter_map(|other| match &other.payload {
        EventPayload::PolicyViolation(policy)
            if other.step_id == event.step_id && other.visit == event.visit =>
        {
            Some(&policy.violation)
        }
        _ => None,
    });
    for violation in violations {
        let _ = writeln!(
            text,
            "      policy violation — {}",
            one_line(&describe_violation(Some(violation)))
        );
    }
}

/// The visit started last, when no event ended it yet.
fn open_visit(events: &[crate::artifacts::Event]) -> Option<(String, u32)> {
    let started = events
        .iter()
        .rposition(|event| event.event_type() == EventType::StepStarted)?;
    let event = &events[started];
    let key = (event.step_id.clone()?, event.visit?);
    let ended = events[started..].iter().any(|later| {
        matches!(
            later.event_type(),
            EventType::StepCompleted | EventType::StepFailed | EventType::StepInterrupted
        ) && later.step_id.as_deref() == Some(key.0.as_str())
            && later.visit == Some(key.1)
    });
    (!ended).then_some(key)
}

/// What the visit the run is at is doing: `waiting — REASON (since …)`, `running since …`, or
/// stopped before it finished.
fn visit_in_progress(
    events: &[crate::artifacts::Event],
    step: &str,
    visit: u32,
    status: &RunStatus,
) -> String {
    let of_visit = |event_type: EventType| {
        events.iter().rev().find(|event| {
            event.event_type() == event_type
                && event.step_id.as_deref() == Some(step)
                && event.visit == Some(visit)
        })
    };
    let since = of_visit(EventType::StepStarted)
        .map(|event| event.timestamp.clone())
        .unwrap_or_default();
    match status.lifecycle_state {
        LifecycleState::Waiting => {
            let reason = of_visit(EventType::GateRequested)
                .and_then(|event| match &event.payload {
                    EventPayload::GateRequested(requested) => Some(requested.reason.clone()),
                    _ => None,
                })
                .or_else(|| status.reason.clone())
                .unwrap_or_default();
            format!("waiting — {reason} (since {since})")
        }
        LifecycleState::Running => format!("running since {since}"),
        LifecycleState::Decided => format!(
            "a gate was decided; waiting to resume (started {since}); `tnh-conductor resume {}` continues it",
            status.run_id
        ),
        LifecycleState::Blocked => format!(
            "stopped before it finished (started {since}); `tnh-conductor resume {}` continues it",
            status.run_id
        ),
        LifecycleState::Abandoned => format!("abandoned before it finished (started {since})"),
        LifecycleState::Failed | LifecycleState::Completed => {
            format!("did not finish (started {since})")
        }
    }
}

/// After printing what could be read of a damaged event log: the first damaged line, as the
/// command's error (exit 4), with how many more there are.
fn damaged(damage: Vec<crate::artifacts::ArtifactsError>) -> Result<ExitStatus> {
    let count = damage.len();
    match damage.into_iter().next() {
        None => Ok(ExitStatus::Success),
        Some(crate::artifacts::ArtifactsError::Events {
            path,
            line,
            message,
        }) if count > 1 => Err(artifacts(crate::artifacts::ArtifactsError::Events {
            path,
            line,
            message: format!("{message} (and {} more damaged lines)", count - 1),
        })),
        Some(first) => Err(artifacts(first)),
    }
}

/// `runs events RUN_ID`: the event stream, one JSON object a line.
pub fn cmd_runs_events(
    cli: &Cli,
    run_id: &str,
    follow: bool,
    output: &mut Output,
) -> Result<ExitStatus> {
    let run_dir = run_dir(cli, run_id)?;
    // A log that lost events the checkpoint accounts for is printed as it is, said to be short.
    if let Some(short) = short_of_checkpoint(&run_dir) {
        output.note(&format!(
            "warning: the event log of run {run_id} is incomplete: {short}"
        ));
    }
    let mut printed = 0;
    loop {
        // The status is read before the events: a run records its last events before the
        // status that says it ended, so once that status is seen, the events read after it
        // hold everything the run wrote (`run_completed` included), however long printing
        // the previous batch took.
        let running = follow
            && status_of(&run_dir)?.lifecycle_state == crate::artifacts::LifecycleState::Running;
        let (events, damage) = EventLog::read_readable(&run_dir.events()).map_err(artifacts)?;
        let mut text = String::new();
        for event in events.iter().skip(printed) {
            let _ = writeln!(text, "{}", serde_json::to_string(event)?);
        }
        printed = events.len();
        output.print(&text);
        if !damage.is_empty() {
            return damaged(damage);
        }
        // Follow while a process drives the run; stop once it ends, waits or was killed.
        if !running {
            return Ok(ExitStatus::Success);
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// What the run's event log lacks of what its checkpoint (`state.json`'s `events_seq`)
/// accounts for — the check `resume` refuses a run for ([`EventLog::open_after`]): the log is
/// missing, or its complete events end before the checkpoint. `None` when it holds them all,
/// or when there is no readable checkpoint to compare with.
fn short_of_checkpoint(run_dir: &RunDir) -> Option<crate::artifacts::ArtifactsError> {
    let checkpoint = crate::kernel::recorder::checkpointed_seq(run_dir)?;
    crate::artifacts::check_against_checkpoint(&run_dir.events(), &run_dir.state(), checkpoint)
        .err()
        .filter(crate::artifacts::ArtifactsError::is_refusal)
}

/// How often `--follow` and `--watch` look for news.
const POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(200);

/// What `runs show` reads of an operator's rollback that was interrupted: where it started
/// (its event's number, shown as recorded) and the HEAD it found.
#[derive(Default, serde::Deserialize)]
#[serde(default)]
struct InterruptedAttempt {
    started_seq: Option<serde_json::Value>,
    #[serde(deserialize_with = "crate::artifacts::evidence::lenient")]
    head_before: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    fn written(path: &Path, text: &str, at: SystemTime) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(at)
            .unwrap();
    }

    #[test]
    fn last_output_is_the_newest_non_empty_file_a_process_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let visit = dir.path();
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let later = |seconds| start + Duration::from_secs(seconds);
        written(&visit.join("prompt.md"), "the task", later(50));
        written(&visit.join("guard_state.json"), "{}", later(50));
        written(&visit.join("stdout.txt"), "", later(40));
        assert_eq!(last_output(visit), None, "nothing printed yet");
        written(&visit.join("stderr.txt"), "warning\n", later(10));
        assert_eq!(
            last_output(visit),
            Some(("stderr.txt".to_owned(), later(10)))
        );
        written(&visit.join("tests/stdout.txt"), "ok\n", later(20));
        assert_eq!(
            last_output(visit),
            Some(("tests/stdout.txt".to_owned(), later(20)))
        );
    }

    #[test]
    fn durations_read_at_a_glance() {
        for (seconds, text) in [
            (0, "0s"),
            (59, "59s"),
            (60, "1m00s"),
            (185, "3m05s"),
            (3600, "1h00m"),
            (8040, "2h14m"),
        ] {
            assert_eq!(compact_duration(seconds), text);
        }
    }
}
