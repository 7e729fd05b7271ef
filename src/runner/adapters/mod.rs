//! Running one agent step end to end: build the command for the profile's CLI, supervise it,
//! read what it said, refine the mechanical outcome, and write the normalised artifacts.
//!
//! Each adapter ([`claude`], [`codex`], [`gemini`], [`command`]) knows its CLI's argv and stream format;
//! this module holds the flow they share so every agent leaves the same evidence.

pub mod claude;
pub mod codex;
pub mod command;
pub mod gemini;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::RunnerError;
use super::artifacts::{self, ArtifactRecord, PermissionDenial, RunnerMetadata, TokenUsage};
use super::cancel::Cancellation;
use super::clock::rfc3339;
use super::env::{HostEnv, agent_environment, with_step_env};
use super::profile::{AgentKind, AgentProfile};
use super::progress::CaptureFormat;
use super::state::{BUDGET_TOLERANCE_USD, StopReason, Termination};
use super::supervisor::{Limits, ProcessSpec, Supervised};
use super::transcript;
use crate::artifacts::VisitDir;
use crate::outcome::Outcome;

/// Everything the kernel passes to run one agent step.
#[derive(Debug, Clone)]
pub struct StepRequest {
    /// The profile name (`claude-code`, `scripted`), for evidence and errors.
    pub agent_name: String,
    /// The resolved profile.
    pub profile: AgentProfile,
    /// The rendered prompt, written to stdin and saved as `runner_prompt`.
    pub prompt: String,
    /// The folder the agent works in (its cwd): the worktree, or the step's `cwd` inside it.
    pub worktree: PathBuf,
    /// The step's artifact directory (created if missing).
    pub step_dir: PathBuf,
    /// Time limits.
    pub limits: Limits,
    /// Per-step turn limit, passed to the CLI where supported (Claude).
    pub max_turns: Option<u32>,
    /// Per-step budget, passed to the CLI where supported (Claude).
    pub max_budget_usd: Option<f64>,
    /// What is left of the run's budget; a reported cost above it ends the step.
    pub remaining_run_budget_usd: Option<f64>,
    /// The step's `TNH_*` variables (`TNH_RUN_ID`, `TNH_STEP_DIR`, …).
    pub tnh_variables: BTreeMap<String, String>,
    /// The conductor's environment, filtered before the agent sees it.
    pub host_env: HostEnv,
    /// The folder a program named by a relative path (`argv: ["./my-agent.sh"]`,
    /// `TNH_CLAUDE_BIN=bin/claude`) is resolved against: the repository root, the folder
    /// holding `.tnh/` (see [`resolve_program`]). `None`: as written, from the agent's cwd.
    pub program_root: Option<PathBuf>,
    /// The step's own `env`, added to the filtered environment (a `TNH_*` name never replaces
    /// the kernel's variable).
    pub env: Vec<(String, String)>,
}

/// The result of an agent step.
#[derive(Debug, Clone)]
pub struct AgentRun {
    /// The step's outcome (one of the five process outcomes).
    pub outcome: Outcome,
    /// Why.
    pub cause: String,
    /// The reported cost, to subtract from the run budget.
    pub cost_usd: Option<f64>,
    /// The metadata also written to `runner_metadata.json`.
    pub metadata: RunnerMetadata,
    /// The files written to the step directory, for the step manifest.
    pub artifacts: Vec<ArtifactRecord>,
    /// The supervisor's own report.
    pub supervised: Supervised,
    /// What the agent left in the step folder under names of the conductor's (a link, a FIFO,
    /// a file of its own), each described; all of it was replaced, never written through.
    pub evidence_tampering: Vec<String>,
}

/// The command an adapter wants run.
#[derive(Debug, Clone)]
pub(crate) struct Invocation {
    pub program: String,
    pub args: Vec<String>,
    pub format: CaptureFormat,
}

/// What an adapter read from the agent's output.
#[derive(Debug, Clone, Default)]
pub(crate) struct StreamSummary {
    pub session_id: Option<String>,
    pub turns: Option<u64>,
    pub cost_usd: Option<f64>,
    pub usage: Option<TokenUsage>,
    pub permission_denials: Vec<PermissionDenial>,
    pub final_response: Option<String>,
    /// Set when the stream itself says the run failed: the cause.
    pub failure: Option<String>,
    pub unparsed_lines: u64,
    /// A line longer than [`transcript::EVENT_CAP`] was cut and could not be read, with no
    /// readable cost after it: if it was the `result` event, the cost it reported is unknown
    /// (Claude; costs are cumulative, so a readable cost after it bounds it).
    pub overlong_event: bool,
}

/// Runs the agent described by `request` and writes its artifacts.
///
/// `cancel` is the kernel's cancellation (operator Ctrl-C); see [`super::CancelHandle`].
pub async fn run_agent(
    request: &StepRequest,
    cancel: Cancellation,
) -> Result<AgentRun, RunnerError> {
    request.profile.check(&request.agent_name)?;
    let (step_dir, real_folder) = prepare_step_folder(request)?;
    let mut invocation = match request.profile.kind {
        AgentKind::Command => command::invocation(&request.profile),
        AgentKind::Claude => claude::invocation(request),
        AgentKind::Codex => codex::invocation(request, &step_dir),
        AgentKind::Gemini => gemini::invocation(request),
    };
    let written = invocation.program.clone();
    invocation.program = resolve_program(&written, request.program_root.as_deref());
    let stdout_name = stdout_name(invocation.format);
    let environment = with_step_env(
        agent_environment(
            &request.host_env,
            &request.profile.pass_env,
            &request.tnh_variables,
        ),
        &request.env,
    );
    let spec = ProcessSpec {
        kind: crate::runner::ProcessKind::Agent,
        agent: request.agent_name.clone(),
        program: invocation.program.clone(),
        args: invocation.args.clone(),
        cwd: request.worktree.clone(),
        env: environment.clone(),
        stdin: request.prompt.as_bytes().to_vec(),
        stdout_path: step_dir.join(stdout_name),
        stderr_path: step_dir.join(VisitDir::STDERR_TXT),
        format: invocation.format,
        limits: output_limited(request),
        remaining_budget_usd: request.remaining_run_budget_usd,
    };
    let supervised = match request
        .remaining_run_budget_usd
        .filter(|remaining| *remaining <= BUDGET_TOLERANCE_USD)
    {
        Some(remaining) => not_started_for_budget(&spec, remaining)?,
        // Recorded in the step's folder while it runs: how `resume` ends the group if this
        // process dies meanwhile.
        None => {
            let record = step_dir.join(crate::runner::PROCESS_GROUP_FILE);
            crate::runner::supervise_recorded(spec, cancel, Some(&record))
                .await
                .map_err(|error| resolved_from(error, &written, request.program_root.as_deref()))?
        }
    };
    let evidence_tampering = check_step_folder(request, &step_dir, &real_folder, stdout_name)?;
    let exit_code = supervised.exit_code;
    let mut summary = match summarize(request.profile.kind, &step_dir, stdout_name, exit_code) {
        Ok(summary) => summary,
        // The agent replaced its own capture (with a FIFO, a link): what it said is unknown.
        Err(error) if !evidence_tampering.is_empty() => StreamSummary {
            failure: Some(format!("evidence_tampered: {error}")),
            ..StreamSummary::default()
        },
        Err(error) => return Err(error),
    };
    // An agent's answer is its answer only when it ended by itself: what an agent stopped by a
    // timeout, an idle timeout or a policy was printing (a plain program's stdout, Codex's
    // agent message of an unfinished turn) is not its answer, and would read as a claim.
    if supervised.termination.reason.is_some() {
        summary.final_response = None;
    }
    // Codex writes its `-o` file itself, even in a turn that never ended: with no answer,
    // nothing may stand under the answer's name (its messages stay in the stream).
    if summary.final_response.is_none() {
        let path = step_dir.join(VisitDir::FINAL_RESPONSE);
        crate::artifacts::safe_files::remove_entry(&path)
            .map_err(|error| RunnerError::io("remove", &path, error))?;
    }
    let (outcome, cause) = refine(
        &supervised,
        &summary,
        &step_dir,
        request.remaining_run_budget_usd,
    );
    let context = RecordContext {
        request,
        invocation: &invocation,
        environment: &environment,
        step_dir: &step_dir,
    };
    let mut run = record(context, supervised, summary, outcome, cause)?;
    run.evidence_tampering = evidence_tampering;
    Ok(run)
}

/// The step's folder, made and holding the prompt, with no answer of an earlier attempt:
/// its absolute path, and where it really is.
fn prepare_step_folder(request: &StepRequest) -> Result<(PathBuf, PathBuf), RunnerError> {
    let step_dir = std::path::absolute(&request.step_dir)
        .map_err(|error| RunnerError::io("resolve", &request.step_dir, error))?;
    std::fs::create_dir_all(&step_dir)
        .map_err(|error| RunnerError::io("create", &step_dir, error))?;
    // Where the folder really is: the agent can write it and the folders above it, and the
    // evidence must not follow a link it puts in their place.
    let real_folder = std::fs::canonicalize(&step_dir)
        .map_err(|error| RunnerError::io("resolve", &step_dir, error))?;
    artifacts::write_file(&step_dir, VisitDir::PROMPT, request.prompt.as_bytes())?;
    // A stale answer from an earlier attempt must not pass for this one's.
    let _ = crate::artifacts::safe_files::remove_entry(&step_dir.join(VisitDir::FINAL_RESPONSE));
    Ok((step_dir, real_folder))
}

/// The step's limits with an output limit on both streams: the request's own, else the
/// profile's `max_output_mib` (default 256 MiB), so an agent printing without end stops there
/// instead of filling the disk.
fn output_limited(request: &StepRequest) -> Limits {
    let profile_limit = Some(request.profile.max_output_bytes());
    Limits {
        max_stdout_bytes: request.limits.max_stdout_bytes.or(profile_limit),
        max_stderr_bytes: request.limits.max_stderr_bytes.or(profile_limit),
        ..request.limits
    }
}

/// After the agent: the step folder must still be the one it was (else nothing more is written
/// there, see [`RunnerError::FolderReplaced`]), and each name the conductor wrote before the
/// agent started or writes now must hold its own regular file or nothing. What the agent left
/// instead is described and removed; the prompt, if it was, is written again (the captures
/// cannot be: the event that reports their loss says so).
fn check_step_folder(
    request: &StepRequest,
    step_dir: &Path,
    real_folder: &Path,
    stdout_name: &str,
) -> Result<Vec<String>, RunnerError> {
    match std::fs::canonicalize(step_dir) {
        Ok(now) if now == real_folder => {}
        now => {
            return Err(RunnerError::FolderReplaced {
                path: step_dir.to_path_buf(),
                now: now.map_or_else(|error| error.to_string(), |now| now.display().to_string()),
            });
        }
    }
    let mut created_before = vec![VisitDir::PROMPT, stdout_name, VisitDir::STDERR_TXT];
    created_before.extend(crate::artifacts::AGENT_VISIT_FILES_BEFORE);
    // The supervisor removed its record of the process group when the group ended.
    let mut written_after = vec![
        VisitDir::TRANSCRIPT,
        VisitDir::RUNNER_METADATA,
        crate::runner::PROCESS_GROUP_FILE,
    ];
    // Codex writes its own answer to `final_response.md` (`-o`); any other agent's is the
    // conductor's to write.
    if request.profile.kind != AgentKind::Codex {
        written_after.push(VisitDir::FINAL_RESPONSE);
    }
    written_after.extend(crate::artifacts::STEP_VISIT_FILES_AFTER);
    let mut found = crate::artifacts::safe_files::clear_unexpected_entries(
        step_dir,
        &created_before,
        &written_after,
    )
    .map_err(|error| RunnerError::io("clear what the agent left in", step_dir, error))?;
    let reported = |found: &[String], name: &str| {
        found
            .iter()
            .any(|entry| entry.starts_with(&format!("`{name}` ")))
    };
    crate::artifacts::safe_files::note_removed(
        step_dir,
        &[stdout_name, VisitDir::STDERR_TXT],
        &mut found,
    );
    // The prompt is the record of what the agent was asked: one it rewrote is put back.
    let prompt = step_dir.join(VisitDir::PROMPT);
    let limit = request.prompt.len() as u64;
    match crate::artifacts::safe_files::read_regular(&prompt, limit) {
        Ok((bytes, false)) if bytes == request.prompt.as_bytes() => {}
        Ok(_) => {
            found.push(format!("`{}` was rewritten", VisitDir::PROMPT));
            artifacts::write_file(step_dir, VisitDir::PROMPT, request.prompt.as_bytes())?;
        }
        Err(_) => {
            if !reported(&found, VisitDir::PROMPT) {
                found.push(format!("`{}` was removed", VisitDir::PROMPT));
            }
            artifacts::write_file(step_dir, VisitDir::PROMPT, request.prompt.as_bytes())?;
        }
    }
    Ok(found)
}

/// The highest cost seen, in the stream as it arrived or read again afterwards (costs are
/// cumulative, and neither reading counts a negative one).
fn highest_cost(summary: &StreamSummary, supervised: &Supervised) -> Option<f64> {
    match (summary.cost_usd, supervised.reported_cost_usd) {
        (Some(read), Some(seen)) => Some(read.max(seen)),
        (read, seen) => read.or(seen),
    }
}

/// The record of a step that was not started because the run budget is spent: no process,
/// empty output files, outcome `killed_policy` with cause `budget_exhausted: …`.
fn not_started_for_budget(
    spec: &ProcessSpec,
    remaining_budget_usd: f64,
) -> Result<Supervised, RunnerError> {
    for path in [&spec.stdout_path, &spec.stderr_path] {
        crate::artifacts::safe_files::write_new(path, b"")
            .map_err(|error| RunnerError::io("create", path, error))?;
    }
    let reason = StopReason::BudgetSpent {
        remaining_budget_usd,
    };
    let now = std::time::SystemTime::now();
    Ok(Supervised {
        outcome: reason.outcome(),
        cause: reason.cause(),
        pid: 0,
        exit_code: None,
        signal: None,
        termination: Termination {
            reason: Some(reason),
            ..Termination::default()
        },
        started_at: now,
        ended_at: now,
        stdout_bytes: 0,
        stderr_bytes: 0,
        stdout_lines: 0,
        stderr_lines: 0,
        leaked: Vec::new(),
        tail: Vec::new(),
        reported_cost_usd: None,
    })
}

fn stdout_name(format: CaptureFormat) -> &'static str {
    match format {
        CaptureFormat::Text => VisitDir::STDOUT_TXT,
        CaptureFormat::ClaudeStreamJson
        | CaptureFormat::CodexJson
        | CaptureFormat::GeminiStreamJson => VisitDir::STDOUT_JSONL,
    }
}

fn summarize(
    kind: AgentKind,
    step_dir: &Path,
    stdout_name: &str,
    exit_code: Option<i32>,
) -> Result<StreamSummary, RunnerError> {
    let stdout = step_dir.join(stdout_name);
    let read_error = |error| RunnerError::io("read", &stdout, error);
    match kind {
        AgentKind::Command => command::summarize(&stdout).map_err(read_error),
        AgentKind::Claude => claude::summarize(&stdout).map_err(read_error),
        AgentKind::Codex => {
            codex::summarize(&stdout, &step_dir.join(VisitDir::FINAL_RESPONSE)).map_err(read_error)
        }
        AgentKind::Gemini => gemini::summarize(&stdout, exit_code).map_err(read_error),
    }
}

/// A killed outcome stands; then the run budget, checked again on the whole stream; otherwise
/// the stream's own verdict can turn success into error.
fn refine(
    supervised: &Supervised,
    summary: &StreamSummary,
    step_dir: &Path,
    remaining_budget_usd: Option<f64>,
) -> (Outcome, String) {
    match supervised.outcome {
        Outcome::Completed | Outcome::Error => {}
        killed => {
            let hint = match supervised.termination.reason {
                Some(StopReason::OutputLimit { .. }) => {
                    "; hint: if the agent must print this much, raise `max_output_mib` in its profile (.tnh/config.yaml)"
                }
                _ => "",
            };
            return (killed, format!("{}{hint}", supervised.cause));
        }
    }
    if let Some(verdict) = budget_verdict(supervised, summary, remaining_budget_usd) {
        return verdict;
    }
    // A stream that says why it failed explains more than an exit code; a stream that is
    // merely missing (the CLI refused its arguments) does not, and stderr does.
    let said_nothing = summary.failure.as_deref().is_some_and(|failure| {
        failure.starts_with("no_result") || failure.starts_with("no_final_message")
    });
    // Whatever the exit code: a CLI (or a wrapper) that exits 0 with its error on stderr
    // only must not lose the reason.
    let stderr_line = (supervised.outcome == Outcome::Error || said_nothing)
        .then(|| last_meaningful_line(&step_dir.join(VisitDir::STDERR_TXT)))
        .flatten();
    if let Some(cause) = authentication_cause(summary.failure.as_deref(), stderr_line.as_deref()) {
        return (Outcome::Error, cause);
    }
    if let Some(failure) = summary
        .failure
        .as_ref()
        .filter(|_| !(said_nothing && supervised.outcome == Outcome::Error))
    {
        let cause = match stderr_line.as_deref().filter(|_| said_nothing) {
            Some(line) => format!("{failure}; stderr: {line}"),
            None => failure.clone(),
        };
        return (Outcome::Error, cause);
    }
    if supervised.outcome == Outcome::Error {
        let cause = match stderr_line {
            Some(line) => format!("{}: {line}", supervised.cause),
            None => supervised.cause.clone(),
        };
        return (Outcome::Error, cause);
    }
    (Outcome::Completed, supervised.cause.clone())
}

/// The supervisor reads costs from lines of up to [`super::capture::LINE_CAP`] as they
/// arrive; a longer line (a `result` carrying a long final answer) is read only here, whole,
/// once the process ended. A cost found there that passes the remaining run budget ends the
/// step as the supervisor would have (`killed_policy`, `budget_exhausted: …`); a line too long
/// even for this reading may have carried a cost, so it is not taken for a step within budget.
fn budget_verdict(
    supervised: &Supervised,
    summary: &StreamSummary,
    remaining_budget_usd: Option<f64>,
) -> Option<(Outcome, String)> {
    let remaining = remaining_budget_usd?;
    if let Some(cost) = highest_cost(summary, supervised)
        .filter(|cost| super::state::exceeds_budget(*cost, remaining))
    {
        let reason = StopReason::BudgetExhausted {
            reported_cost_usd: cost,
            remaining_budget_usd: remaining,
        };
        return Some((reason.outcome(), reason.cause()));
    }
    summary.overlong_event.then(|| {
        (
            Outcome::KilledPolicy,
            format!(
                "budget_exhausted: a stream line longer than {} MiB could not be read, so the cost it may report is unknown and the remaining run budget ${} cannot be checked",
                transcript::EVENT_CAP / (1024 * 1024),
                super::state::dollars(remaining)
            ),
        )
    })
}

/// An `authentication_failed: …` cause when the stream's failure or the last stderr line
/// says the agent could not log in; the operator's fix (a key, a login) differs from any
/// other error's, so the cause must say so whichever channel the CLI used.
fn authentication_cause(failure: Option<&str>, stderr_line: Option<&str>) -> Option<String> {
    // A capture the agent replaced says nothing of the agent's login, whatever the error
    // reading it names (a path holds a run id, whose time may hold `401`).
    if failure.is_some_and(|failure| failure.starts_with("evidence_tampered")) {
        return None;
    }
    if let Some(failure) = failure.filter(|failure| failure.starts_with("authentication_failed")) {
        return Some(failure.to_owned());
    }
    let failure_detail = failure.map(|failure| {
        failure
            .split_once(": ")
            .map_or(failure, |(_, detail)| detail)
    });
    [failure_detail, stderr_line]
        .into_iter()
        .flatten()
        .find(|text| mentions_authentication(text))
        .map(|text| format!("authentication_failed: {text}"))
}

/// Whether an error text is about missing or rejected credentials.
pub(crate) fn mentions_authentication(text: &str) -> bool {
    let lowered = text.to_lowercase();
    // The status code as a number of its own, not digits of a longer one (a time, a run id).
    let status_401 = lowered.match_indices("401").any(|(at, _)| {
        let before = lowered[..at].chars().next_back();
        let after = lowered[at + 3..].chars().next();
        ![before, after]
            .into_iter()
            .flatten()
            .any(|next| next.is_ascii_alphanumeric())
    });
    status_401
        || [
            "not logged in",
            "unauthorized",
            "api key",
            "api_key",
            "authentication",
            "/login",
            "please log in",
            "login required",
        ]
        .iter()
        .any(|pattern| lowered.contains(pattern))
}

/// The last non-blank line of a (small) stderr file, for the cause of a failed exit.
fn last_meaningful_line(path: &Path) -> Option<String> {
    let text = transcript::read_end(path, 8192).ok()?;
    text.lines()
        .rev()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .map(|line| line.chars().take(300).collect())
}

struct RecordContext<'a> {
    request: &'a StepRequest,
    invocation: &'a Invocation,
    environment: &'a [(String, String)],
    step_dir: &'a Path,
}

fn record(
    context: RecordContext<'_>,
    supervised: Supervised,
    summary: StreamSummary,
    outcome: Outcome,
    cause: String,
) -> Result<AgentRun, RunnerError> {
    let RecordContext {
        request,
        invocation,
        environment,
        step_dir,
    } = context;
    if let Some(response) = &summary.final_response {
        artifacts::write_file(step_dir, VisitDir::FINAL_RESPONSE, response.as_bytes())?;
    }
    let stdout_name = stdout_name(invocation.format);
    let markdown = transcript::render(
        invocation.format,
        &request.prompt,
        &step_dir.join(stdout_name),
        &step_dir.join(VisitDir::STDERR_TXT),
    );
    artifacts::write_file(step_dir, VisitDir::TRANSCRIPT, markdown.as_bytes())?;
    let metadata = metadata(
        request,
        invocation,
        environment,
        &supervised,
        &summary,
        outcome,
        &cause,
    );
    artifacts::write_metadata(step_dir, &metadata)?;
    let artifacts = artifact_list(
        stdout_name,
        invocation.format,
        metadata.final_response_present,
    );
    Ok(AgentRun {
        outcome,
        cause,
        cost_usd: highest_cost(&summary, &supervised),
        metadata,
        artifacts,
        supervised,
        evidence_tampering: Vec::new(),
    })
}

fn metadata(
    request: &StepRequest,
    invocation: &Invocation,
    environment: &[(String, String)],
    supervised: &Supervised,
    summary: &StreamSummary,
    outcome: Outcome,
    cause: &str,
) -> RunnerMetadata {
    let duration = supervised
        .ended_at
        .duration_since(supervised.started_at)
        .unwrap_or_default();
    RunnerMetadata {
        schema_version: artifacts::RUNNER_METADATA_SCHEMA_VERSION,
        agent: request.agent_name.clone(),
        kind: request.profile.kind,
        argv: std::iter::once(invocation.program.clone())
            .chain(invocation.args.iter().cloned())
            .collect(),
        cwd: request.worktree.display().to_string(),
        environment_names: environment.iter().map(|(name, _)| name.clone()).collect(),
        started_at: rfc3339(supervised.started_at),
        ended_at: rfc3339(supervised.ended_at),
        duration_ms: duration.as_millis() as u64,
        outcome: outcome.as_str().to_owned(),
        cause: cause.to_owned(),
        exit_code: supervised.exit_code,
        signal: supervised.signal,
        termination: supervised.termination.clone(),
        capture_format: invocation.format,
        stdout_bytes: supervised.stdout_bytes,
        stderr_bytes: supervised.stderr_bytes,
        session_id: summary.session_id.clone(),
        turns: summary.turns,
        cost_usd: highest_cost(summary, supervised),
        usage: summary.usage.clone(),
        permission_denials: summary.permission_denials.clone(),
        final_response_present: summary.final_response.is_some(),
        unparsed_lines: summary.unparsed_lines,
        leaked_processes: supervised.leaked.clone(),
        output_tail: supervised.tail.clone(),
    }
}

fn artifact_list(
    stdout_name: &str,
    format: CaptureFormat,
    final_response: bool,
) -> Vec<ArtifactRecord> {
    let stdout_type = match format {
        CaptureFormat::Text => "text/plain",
        _ => "application/x-ndjson",
    };
    let mut list = vec![
        ArtifactRecord::new("runner_prompt", VisitDir::PROMPT, "text/markdown", true),
        ArtifactRecord::new("runner_transcript", stdout_name, stdout_type, true),
        ArtifactRecord::new("runner_stderr", VisitDir::STDERR_TXT, "text/plain", false),
        ArtifactRecord::new(
            "runner_transcript_markdown",
            VisitDir::TRANSCRIPT,
            "text/markdown",
            false,
        ),
        ArtifactRecord::new(
            "runner_metadata",
            VisitDir::RUNNER_METADATA,
            "application/json",
            true,
        ),
    ];
    if final_response {
        list.push(ArtifactRecord::new(
            "runner_final_response",
            VisitDir::FINAL_RESPONSE,
            "text/markdown",
            true,
        ));
    }
    list
}

/// `program` as a process is started with. A relative path (`./my-agent.sh`, `bin/claude`:
/// it has a `/` but is not absolute) is resolved against `root`, the repository root (the
/// folder holding `.tnh/`), where the operator wrote it and sees it, not against the
/// process's working folder (the run's worktree, which holds only what was committed); a bare
/// name (looked up on `PATH`) or an absolute path is kept as written.
pub fn resolve_program(program: &str, root: Option<&Path>) -> String {
    let path = Path::new(program);
    match root {
        Some(root) if program.contains('/') && path.is_relative() => root
            .join(path.strip_prefix(".").unwrap_or(path))
            .display()
            .to_string(),
        _ => program.to_owned(),
    }
}

/// A spawn failure of a program written as the relative path `written`, saying what it was
/// resolved against (the error names the resolved path).
pub fn resolved_from(error: RunnerError, written: &str, root: Option<&Path>) -> RunnerError {
    match (error, root) {
        (
            RunnerError::Spawn {
                kind,
                name,
                program,
                reason,
                source,
            },
            Some(root),
        ) if program != written => RunnerError::Spawn {
            kind,
            name,
            reason: format!(
                "{reason} (`{written}` as written, resolved against the repository root `{}`)",
                root.display()
            ),
            program,
            source,
        },
        (error, _) => error,
    }
}

/// The binary for a CLI: the `TNH_*_BIN` override, then the profile's, then the default.
pub(crate) fn binary(request: &StepRequest, override_variable: &str, default: &str) -> String {
    request
        .host_env
        .get(override_variable)
        .filter(|value| !value.is_empty())
        .map(str::to_owned)
        .or_else(|| request.profile.binary.clone())
        .unwrap_or_else(|| default.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relative_program_path_is_resolved_against_the_repository_root() {
        let root = Path::new("/repo");
        assert_eq!(
            resolve_program("./my-agent.sh", Some(root)),
            "/repo/my-agent.sh"
        );
        assert_eq!(
            resolve_program("bin/claude", Some(root)),
            "/repo/bin/claude"
        );
        assert_eq!(
            resolve_program("../tools/a", Some(root)),
            "/repo/../tools/a"
        );
        assert_eq!(resolve_program("python3", Some(root)), "python3");
        assert_eq!(resolve_program("/usr/bin/env", Some(root)), "/usr/bin/env");
        assert_eq!(resolve_program("./my-agent.sh", None), "./my-agent.sh");
    }

    #[test]
    fn authentication_failures_are_named_whatever_channel_reports_them() {
        let stderr = Some("Error: Not logged in. Run `codex login` or set CODEX_API_KEY");
        assert_eq!(
            authentication_cause(None, stderr).as_deref(),
            Some(
                "authentication_failed: Error: Not logged in. Run `codex login` or set CODEX_API_KEY"
            )
        );
        let stream = Some("no_final_message: unexpected status 401 Unauthorized");
        assert_eq!(
            authentication_cause(stream, None).as_deref(),
            Some("authentication_failed: unexpected status 401 Unauthorized")
        );
        assert_eq!(
            authentication_cause(Some("agent_error (error_max_turns): Reached maximum"), None),
            None
        );
        assert_eq!(
            authentication_cause(None, Some("error: invalid value 'bogus'")),
            None
        );
        assert_eq!(
            authentication_cause(None, Some("HTTP 401: bad credentials")).as_deref(),
            Some("authentication_failed: HTTP 401: bad credentials")
        );
    }

    /// A run id's time may hold `401` (`20261122T153401Z`): a path naming it, in the error of
    /// a capture the agent replaced, read as a login failure, and the step's cause said
    /// `authentication_failed` instead of `evidence_tampered`.
    #[test]
    fn digits_of_a_longer_number_or_a_replaced_capture_are_no_login_failure() {
        let read = "failed to read `/tmp/x/.tnh/run/20261122T153401Z-ed759e/artifacts/work/1/stdout.txt`: \
                    No such file or directory (os error 2)";
        assert!(!mentions_authentication(read));
        assert!(!mentions_authentication("took 14012 ms"));
        let tampered = format!("evidence_tampered: {read} (status 401)");
        assert_eq!(authentication_cause(Some(&tampered), None), None);
    }
}
