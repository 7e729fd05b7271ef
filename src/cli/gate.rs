//! `tnh-conductor gate list | show RUN_ID | approve RUN_ID | reject RUN_ID`.

use std::fmt::Write as _;

use clap::{Args, Subcommand};

use super::{Cli, Output, one_line, repo_root};
use crate::artifacts::{GatePlanner, RunBeside, RunDir, RunMetadata, is_run_id, read_json};
use crate::error::{Error, ExitStatus, Result};
use crate::kernel::finished_runs::FinishedIndex;
use crate::kernel::gate::{
    Decision, DecisionRequest, decide, is_due, notice_timeout, read_request, request_of,
    rollback_since_request,
};
use crate::kernel::recorder::Recorder;

use crate::kernel::run::{DEFAULT_ARTIFACTS_ROOT, RunError, find_run_dir};
use crate::kernel::{Phase, RunState};

/// Options shared by gate decisions.
#[derive(Debug, Args)]
pub struct GateDecisionArgs {
    /// The waiting run.
    pub run_id: String,
    /// A comment recorded with the decision.
    #[arg(long)]
    pub comment: Option<String>,
    /// The reviewer's name (checked against the gate's `approvers`; default: $USER).
    #[arg(long = "as", value_name = "NAME")]
    pub reviewer: Option<String>,
    /// Resume the run after deciding.
    #[arg(long)]
    pub resume: bool,
    /// Decide even though the worktree changed since the gate's checkpoint (what the reviewer
    /// was shown); the change is recorded as a `drift_accepted` event.
    #[arg(long)]
    pub accept_drift: bool,
}

/// `gate …`.
#[derive(Debug, Subcommand)]
pub enum GateCommand {
    /// Every waiting gate, oldest first, with its age and reason.
    List,
    /// A gate's request, the diff summary and the planner's view.
    Show {
        /// The waiting run.
        run_id: String,
    },
    /// Approve a waiting gate.
    Approve(GateDecisionArgs),
    /// Reject a waiting gate.
    Reject(GateDecisionArgs),
}

fn run_error(error: RunError) -> Error {
    Error::Run(Box::new(error))
}

/// Runs a `gate` subcommand.
pub fn cmd_gate(cli: &Cli, command: &GateCommand, output: &mut Output) -> Result<ExitStatus> {
    match command {
        GateCommand::List => list(cli, output),
        GateCommand::Show { run_id } => show(cli, run_id, output),
        GateCommand::Approve(args) => decide_gate(cli, args, Decision::Approve, output),
        GateCommand::Reject(args) => decide_gate(cli, args, Decision::Reject, output),
    }
}

fn decide_gate(
    cli: &Cli,
    args: &GateDecisionArgs,
    decision: Decision,
    output: &mut Output,
) -> Result<ExitStatus> {
    let repo = repo_root(cli)?;
    let reviewer = args
        .reviewer
        .clone()
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "operator".into());
    let phase = decide(&DecisionRequest {
        repo: &repo,
        run_id: &args.run_id,
        decision,
        reviewer: &reviewer,
        comment: args.comment.as_deref(),
        accept_drift: args.accept_drift,
        answered_at: None,
    })
    .map_err(|error| super::run::run_failure(error, output))?;
    let verb = match decision {
        Decision::Approve => "approved",
        Decision::Reject => "rejected",
    };
    output.note(&format!("gate of run {} {verb} by {reviewer}", args.run_id));
    if args.resume && !matches!(phase, Phase::Finished { .. }) {
        let resume = super::run::ResumeArgs {
            run_id: args.run_id.clone(),
            wait: false,
            reviewer: None,
            accept_drift: false,
            put_back: false,
            skip_guard_check: false,
            json: false,
        };
        return super::run::cmd_resume(cli, &resume, output);
    }
    if let Phase::Finished { end, reason, .. } = phase {
        let run_dir = crate::kernel::run::find_run_dir(&repo, &args.run_id)
            .map(|run_dir| run_dir.root().to_path_buf())
            .unwrap_or_default();
        let end = super::run::EndLine::of(
            &crate::kernel::driver::RunEnd::Finished { end, reason },
            &run_dir,
        );
        output.print(&format!("{}\n", end.line(&args.run_id)));
        return Ok(end.status);
    }
    output.note(&format!(
        "continue with `tnh-conductor resume {}`",
        args.run_id
    ));
    Ok(ExitStatus::Success)
}

/// One waiting gate.
struct Waiting {
    run_id: String,
    step_id: String,
    requested_at: String,
    reason: String,
    deadline: Option<String>,
    /// What is wrong with the run's files, when something is.
    damage: Option<String>,
}

/// The waiting gates, and the runs whose gate was just found past its deadline (resolved as
/// timed out now, their route waiting for `resume`): run and step.
fn waiting_gates(repo: &std::path::Path) -> (Vec<Waiting>, Vec<(String, String)>) {
    let root = repo.join(DEFAULT_ARTIFACTS_ROOT);
    let Ok(entries) = std::fs::read_dir(&root) else {
        return (Vec::new(), Vec::new());
    };
    let names: Vec<String> = entries
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| is_run_id(name))
        .collect();
    // A finished run never waits again: those the index knows are not read.
    let mut finished = FinishedIndex::load(repo);
    let mut gates = Vec::new();
    let mut timed_out = Vec::new();
    for name in &names {
        if finished.get(name).is_some() {
            continue;
        }
        let name = name.clone();
        let run_dir = RunDir::at(root.join(&name));
        // A waiting gate is listed even when its run is damaged, with what is wrong: hidden,
        // it would wait for ever. A damaged state.json leaves status.json to say it waits.
        let (step_id, visit, state_damage) =
            match crate::kernel::state::read_state(&run_dir.state()) {
                Ok(state) => match state.phase {
                    Phase::Waiting { step_id, visit } => (step_id, visit, None),
                    Phase::Finished { .. } => {
                        finished.learn(&run_dir, &name);
                        continue;
                    }
                    _ => continue,
                },
                Err(error) => {
                    match read_json::<crate::artifacts::RunStatus>(&run_dir.status(), "run status")
                    {
                        Ok(crate::artifacts::RunStatus {
                            lifecycle_state: crate::artifacts::LifecycleState::Waiting,
                            current_step_id: Some(step_id),
                            visit: Some(visit),
                            ..
                        }) => {
                            let advice = match error {
                                crate::kernel::state::StateError::Newer { .. } => {
                                    "use the newer tnh-conductor that wrote it to decide this gate"
                                }
                                _ => "restore the file (from a backup) to decide this gate",
                            };
                            (step_id, visit, Some(format!("{error}; {advice}")))
                        }
                        _ => continue,
                    }
                }
            };
        let request = request_of(&run_dir, &step_id, visit);
        // A gate past its deadline is resolved as soon as it is noticed (if no one drives the
        // run); the request read here says whether it is due, so only then is it read again,
        // under the lock.
        if state_damage.is_none() && request.as_ref().is_ok_and(is_due) && notice_timeout(&run_dir)
        {
            timed_out.push((name, step_id));
            continue;
        }
        let metadata = read_json::<RunMetadata>(&run_dir.metadata(), "run metadata");
        let damage = match (&metadata, &request) {
            _ if state_damage.is_some() => state_damage,
            (Err(error), _) | (Ok(_), Err(error)) => Some(format!(
                "{error}; restore the file (from a backup) to decide this gate"
            )),
            (Ok(_), Ok(_)) => None,
        };
        let (requested_at, reason, deadline) = match request {
            Ok(request) => (request.requested_at, request.reason, request.deadline),
            Err(_) => Default::default(),
        };
        gates.push(Waiting {
            run_id: name,
            step_id,
            requested_at,
            reason,
            deadline,
            damage,
        });
    }
    finished.save(&names, None);
    gates.sort_by(|left, right| left.requested_at.cmp(&right.requested_at));
    timed_out.sort();
    (gates, timed_out)
}

fn age(since: &str) -> String {
    let Ok(then) = since.parse::<jiff::Timestamp>() else {
        return "?".into();
    };
    let seconds = jiff::Timestamp::now().as_second() - then.as_second();
    match seconds {
        ..=0 => "now".into(),
        1..=119 => format!("{seconds}s"),
        120..=7199 => format!("{}m", seconds / 60),
        7200..=172_799 => format!("{}h", seconds / 3600),
        _ => format!("{}d", seconds / 86_400),
    }
}

fn list(cli: &Cli, output: &mut Output) -> Result<ExitStatus> {
    let (gates, timed_out) = waiting_gates(&repo_root(cli)?);
    for (run_id, step_id) in &timed_out {
        output.note(&format!(
            "gate `{step_id}` of run {run_id} timed out (its deadline passed) and was resolved as gate_timed_out; `tnh-conductor resume {run_id}` takes that route"
        ));
    }
    if gates.is_empty() {
        output.note("no gate is waiting");
        return Ok(ExitStatus::Success);
    }
    let mut text = String::new();
    for gate in gates {
        let deadline = gate
            .deadline
            .map(|deadline| format!(" (until {})", one_line(&deadline)))
            .unwrap_or_default();
        let _ = writeln!(
            text,
            "{}  {:>5}  {}  {}{deadline}",
            gate.run_id,
            age(&gate.requested_at),
            gate.step_id,
            one_line(&gate.reason)
        );
        if let Some(damage) = &gate.damage {
            let _ = writeln!(text, "    damaged: {}", one_line(damage));
        }
    }
    output.print(&text);
    Ok(ExitStatus::Success)
}

/// The latest planner decision a gate's reviewer sees: its status and risk flags, then one line
/// per blocker.
fn planner_lines(planner: Option<&GatePlanner>, run_dir: &RunDir, text: &mut String) {
    let Some(planner) = planner else {
        let _ = writeln!(text, "  planner:   no decision before this gate");
        return;
    };
    let flags: Vec<String> = planner
        .risk_flags
        .iter()
        .map(|flag| one_line(flag).into_owned())
        .collect();
    let flags = if flags.is_empty() {
        "no risk flags".to_owned()
    } else {
        format!("risk flags: {}", flags.join(", "))
    };
    let _ = writeln!(text, "  planner:   {}, {flags}", planner.status.name());
    for blocker in &planner.blockers {
        let _ = writeln!(text, "    blocker: {}", one_line(&blocker.summary));
    }
    if !planner.path.is_empty() {
        let _ = writeln!(
            text,
            "    decision: {}",
            one_line(&run_dir.root().join(&planner.path).display().to_string())
        );
    }
}

/// The other runs driven while the run's steps ran (the gate request's `runs_beside`): their
/// agents could have written into this worktree, and the diff shows such a write as this
/// run's.
fn runs_beside_lines(runs: &[RunBeside], text: &mut String) {
    if runs.is_empty() {
        return;
    }
    let _ = writeln!(
        text,
        "  BESIDE:    other runs were driven while this run's steps ran; their agents could have \
         written into this worktree, and the diff below shows such a write as this run's change:"
    );
    for run in runs {
        let visits: Vec<String> = run
            .visits
            .iter()
            .map(|visit| one_line(visit).into_owned())
            .collect();
        let _ = writeln!(
            text,
            "    run {} (during {})",
            one_line(&run.run_id),
            visits.join(", ")
        );
    }
}

fn show(cli: &Cli, run_id: &str, output: &mut Output) -> Result<ExitStatus> {
    let run_dir = find_run_dir(&repo_root(cli)?, run_id).map_err(run_error)?;
    let state: RunState =
        read_json(&run_dir.state(), "run state").map_err(|error| run_error(error.into()))?;
    if let Phase::Finished {
        end: crate::kernel::End::Abandoned,
        reason,
        ..
    } = &state.phase
    {
        return Err(run_error(RunError::Gate(
            crate::kernel::gate::GateError::Abandoned {
                run_id: run_id.to_owned(),
                reason: reason.clone(),
            },
        )));
    }
    let elsewhere = match &state.phase {
        Phase::Waiting { .. } => None,
        Phase::Ready { step_id, .. } => Some(format!("stopped before step `{step_id}`")),
        Phase::Running { step_id, .. } => Some(format!("at step `{step_id}`")),
        Phase::Finished { end, .. } => Some(format!("finished ({})", end.name())),
    };
    let Phase::Waiting { step_id, visit } = &state.phase else {
        return Err(run_error(RunError::Gate(
            crate::kernel::gate::GateError::NotWaiting {
                run_id: run_id.to_owned(),
                state: elsewhere.unwrap_or_default(),
            },
        )));
    };
    let recorder = Recorder::open(run_dir.clone()).map_err(|error| run_error(error.into()))?;
    let request = read_request(&recorder, step_id, *visit).map_err(run_error)?;
    let context = &request.context;
    let approvers = if request.approvers.is_empty() {
        "anyone".to_owned()
    } else {
        let names: Vec<_> = request
            .approvers
            .iter()
            .map(|name| one_line(name))
            .collect();
        names.join(", ")
    };
    let mut text = format!(
        "gate `{step_id}` of run {run_id} ({}, waiting {})\n  reason:    {}\n  approvers: {approvers}\n",
        request.gate.as_str(),
        age(&request.requested_at),
        one_line(&request.reason),
    );
    if let Some(deadline) = &request.deadline {
        let passed = if is_due(&request) {
            " — PASSED: the gate times out (its `gate_timed_out` route) as soon as `resume`, \
             `gate list` or `status` notices it; a decision now is refused"
        } else {
            ""
        };
        let _ = writeln!(text, "  deadline:  {}{passed}", one_line(deadline));
    }
    let _ = writeln!(
        text,
        "  diffstat:  {} (the whole run)",
        crate::kernel::step_lines::diffstat(Some(&context.diffstat))
    );
    if let Some(last) = &context.last_step {
        let _ = writeln!(
            text,
            "  last step: `{}` #{}: {}",
            one_line(&last.step_id),
            last.visit,
            crate::kernel::step_lines::diffstat(last.diffstat.as_ref())
        );
    }
    planner_lines(context.planner.as_ref(), &run_dir, &mut text);
    // A key an older request lacks reads as empty: nothing to show.
    for (key, path) in [
        ("diff", Some(&context.diff)),
        ("transcript", context.transcript.as_ref()),
    ] {
        if let Some(path) = path.filter(|path| !path.is_empty()) {
            let _ = writeln!(
                text,
                "  {key}: {}",
                one_line(&run_dir.root().join(path).display().to_string())
            );
        }
    }
    let _ = writeln!(text, "  worktree:  {}", one_line(&context.worktree));
    runs_beside_lines(&context.runs_beside, &mut text);
    // The change below is what the gate was requested with; an operator's rollback since
    // removed it from the worktree, and a decision then needs `--accept-drift`.
    if let Ok(Some((timestamp, rollback))) = rollback_since_request(&recorder, step_id, *visit) {
        let _ = writeln!(
            text,
            "  ROLLED BACK: the operator rolled the worktree back to {} at {} ({}), after this \
             gate was requested: the change below is no longer in the worktree; a decision \
             needs `--accept-drift` and decides on what the worktree holds now",
            one_line(&rollback.target),
            one_line(&timestamp),
            one_line(&rollback.record),
        );
    }
    if !context.diff.is_empty()
        && let Some(patch) = patch_view(&run_dir.root().join(&context.diff))
    {
        let _ = writeln!(text, "\n{patch}");
    }
    output.print(&text);
    Ok(ExitStatus::Success)
}

/// The longest line of a gate's patch shown on the terminal, in bytes (a minified bundle is
/// one line of megabytes).
pub(super) const SHOWN_LINE_BYTES: usize = 4 * 1024;

/// The most lines of a gate's patch shown on the terminal.
pub(super) const SHOWN_PATCH_LINES: usize = 2_000;

/// The most bytes of a gate's patch shown on the terminal (lines as cut).
pub(super) const SHOWN_PATCH_BYTES: usize = 1024 * 1024;

/// The most of a patch read to show it: past it (a line of more), the rest is only counted
/// from the file's size. A run's files are the agent's to tamper with: the patch is read only
/// as a regular file, without blocking, up to this.
const MAX_SCANNED_PATCH_BYTES: u64 = 64 * 1024 * 1024;

/// A gate's patch (`run.diff`, the whole change of the run) as `gate show` and the `--wait`
/// prompt's "show diff" print it: each line cut at [`SHOWN_LINE_BYTES`] with `… (N more
/// bytes)`, and the patch stopped after [`SHOWN_PATCH_LINES`] lines or [`SHOWN_PATCH_BYTES`]
/// bytes with a line saying how much is not shown and naming `path`, which holds all of it.
/// Bytes that are not UTF-8 are shown as U+FFFD. `None` when the patch cannot be read (gone,
/// not a regular file).
pub(super) fn patch_view(path: &std::path::Path) -> Option<String> {
    use std::io::{BufRead, Read};
    let file = crate::artifacts::safe_files::open_regular_following(path).ok()?;
    let total = file.metadata().ok()?.len();
    let mut reader = std::io::BufReader::new(file.take(MAX_SCANNED_PATCH_BYTES));
    let mut text = String::new();
    let mut consumed: u64 = 0;
    let mut lines = 0;
    while lines < SHOWN_PATCH_LINES && text.len() < SHOWN_PATCH_BYTES {
        // One line: its first SHOWN_LINE_BYTES kept, the rest counted.
        let mut kept = Vec::new();
        let mut more: u64 = 0;
        let mut ended = false;
        while let Ok(buffer) = reader.fill_buf() {
            if buffer.is_empty() {
                break;
            }
            let newline = buffer.iter().position(|byte| *byte == b'\n');
            let content = &buffer[..newline.unwrap_or(buffer.len())];
            let room = SHOWN_LINE_BYTES
                .saturating_sub(kept.len())
                .min(content.len());
            kept.extend_from_slice(&content[..room]);
            more += (content.len() - room) as u64;
            let used = newline.map_or(buffer.len(), |at| at + 1);
            reader.consume(used);
            consumed += used as u64;
            if newline.is_some() {
                ended = true;
                break;
            }
        }
        if kept.is_empty() && more == 0 && !ended {
            break;
        }
        if more > 0 {
            // Cut on a character's boundary: a character the cut splits goes with the rest.
            if let Err(error) = std::str::from_utf8(&kept)
                && error.error_len().is_none()
            {
                more += (kept.len() - error.valid_up_to()) as u64;
                kept.truncate(error.valid_up_to());
            }
        }
        text.push_str(&String::from_utf8_lossy(&kept));
        if more > 0 {
            let _ = write!(text, "… ({more} more bytes)");
        }
        if ended {
            text.push('\n');
        }
        lines += 1;
    }
    let left = total.saturating_sub(consumed);
    if left > 0 {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        let _ = writeln!(
            text,
            "… {left} more bytes of the diff are not shown (the first {lines} lines are; at most {SHOWN_PATCH_LINES} lines or {SHOWN_PATCH_BYTES} bytes are shown): the whole diff is {}",
            path.display()
        );
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(bytes: &[u8]) -> String {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("run.diff");
        std::fs::write(&path, bytes).unwrap();
        patch_view(&path).unwrap()
    }

    #[test]
    fn a_small_patch_is_shown_whole() {
        assert_eq!(view(b"+a\n-b\n"), "+a\n-b\n");
        assert_eq!(view(b"+no newline"), "+no newline");
        assert_eq!(view(b""), "");
    }

    #[test]
    fn a_long_line_is_cut_on_a_character_boundary_saying_how_much_is_left() {
        // 4095 bytes of `a`, then `é` (2 bytes) across the limit, then 10 more bytes.
        let mut line = vec![b'a'; SHOWN_LINE_BYTES - 1];
        line.extend("é".as_bytes());
        line.extend(b"0123456789\n+next\n");
        let shown = view(&line);
        assert_eq!(
            shown,
            format!(
                "{}… (12 more bytes)\n+next\n",
                "a".repeat(SHOWN_LINE_BYTES - 1)
            )
        );
    }

    #[test]
    fn a_patch_past_the_line_or_byte_bound_stops_naming_the_whole_diff() {
        let patch: String = (0..5_000).map(|n| format!("+{n}\n")).collect();
        let shown = view(patch.as_bytes());
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(lines.len(), SHOWN_PATCH_LINES + 1);
        assert_eq!(lines[SHOWN_PATCH_LINES - 1], "+1999");
        let shown_bytes: usize = (0..2_000).map(|n| format!("+{n}\n").len()).sum();
        let left = patch.len() - shown_bytes;
        assert!(
            lines[SHOWN_PATCH_LINES].starts_with(&format!(
                "… {left} more bytes of the diff are not shown (the first 2000 lines are"
            )) && lines[SHOWN_PATCH_LINES].ends_with("run.diff"),
            "{}",
            lines[SHOWN_PATCH_LINES]
        );
        // 1,000 lines of 5 KiB: each cut at 4 KiB, and the bytes bound stops the patch first.
        let wide = format!("+{}\n", "x".repeat(5 * 1024 - 2)).repeat(1_000);
        let shown = view(wide.as_bytes());
        assert!(
            shown.len() < SHOWN_PATCH_BYTES + 2 * SHOWN_LINE_BYTES,
            "{}",
            shown.len()
        );
        let lines: Vec<&str> = shown.lines().collect();
        let kept = lines.len() - 1;
        assert!(kept < SHOWN_PATCH_LINES, "{kept}");
        assert!(
            lines[0].ends_with("… (1023 more bytes)"),
            "{}",
            &lines[0][4000..]
        );
        assert!(
            lines[kept].starts_with(&format!(
                "… {} more bytes of the diff are not shown",
                (1_000 - kept) * 5 * 1024
            )),
            "{}",
            lines[kept]
        );
    }
}
