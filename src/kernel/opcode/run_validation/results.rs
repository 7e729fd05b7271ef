//! What one validator left, judged once its process ended: its captures checked, its declared
//! artifacts and harness report collected, its outcome, and the record the report keeps of it.

use std::path::Path;

use crate::artifacts::VisitDir;
use crate::artifacts::{
    ArtifactEntry, ArtifactRole, NotedPath, ValidationOutcome, ValidatorRecord, ValidatorRun,
};
use crate::outcome::Outcome;
use crate::runner::{StopReason, Supervised};

use super::super::validators;
use super::super::{OpcodeError, StepContext};
use super::collect::{Collected, collect_artifacts};
use super::harness::{ReportPath, harness_report};
use super::planning::Plan;
use super::spawn::{MIB, Spawned, Validator};
use super::{Ran, VALIDATOR_CAPTURES};

/// The files one validator left for the evidence.
struct Evidence {
    /// Its captures, its collected artifacts and its harness report, as the manifest lists
    /// them.
    artifacts: Vec<ArtifactEntry>,
    collected: Collected,
    report: Option<(ReportPath, serde_json::Value)>,
    /// Why the harness report it named or left does not count.
    report_problem: Option<String>,
}

/// The validator's result from what it left in its folder and how its process ended.
pub(super) fn judge(
    context: &StepContext<'_>,
    validator: Validator<'_>,
    visit_dir: &Path,
    spawned: Spawned,
) -> Result<Ran, OpcodeError> {
    let Validator {
        id,
        plan,
        command,
        folder,
        ..
    } = validator;
    let Spawned {
        supervised,
        network,
        dropped,
        output_limit,
        timeout,
    } = spawned;
    let tampered = check_validator_folder(folder, &VisitDir::validator_dir_relative(id))?;
    let Evidence {
        artifacts,
        collected,
        report,
        report_problem,
    } = evidence(context, id, plan, folder, visit_dir);
    let proposed_goldens = report.as_ref().is_some_and(|(_, value)| {
        value["proposed_goldens"]
            .as_array()
            .is_some_and(|goldens| !goldens.is_empty())
    });
    if supervised.outcome != Outcome::Completed
        && let Some(module) = missing_module(&command.argv, folder)
    {
        return Err(OpcodeError::ValidatorCouldNotRun {
            validator: id.to_owned(),
            command: command.argv.join(" "),
            module,
        });
    }
    let (outcome, cause) = verdict(
        id,
        &supervised,
        output_limit,
        &tampered,
        &collected.missing,
        report_problem,
    );
    let duration = supervised
        .ended_at
        .duration_since(supervised.started_at)
        .unwrap_or_default();
    let Collected {
        copied,
        missing,
        refused,
        skipped,
    } = collected;
    let record = ValidatorRecord::Ran(Box::new(ValidatorRun {
        argv: command.argv.clone(),
        cwd: plan.cwd.display().to_string(),
        detected: command.detected,
        outcome: ValidationOutcome::of(outcome),
        cause,
        exit_code: supervised.exit_code,
        signal: supervised.signal,
        duration_ms: duration.as_millis() as u64,
        timeout_ms: timeout.map(|timeout| timeout.as_millis() as u64),
        artifacts: copied,
        missing_artifacts: missing,
        refused_artifacts: noted(refused),
        skipped_artifacts: noted(skipped),
        harness_report: report.as_ref().map(|(path, _)| path.as_str().to_owned()),
        proposed_goldens,
        network: network.to_owned(),
        dropped_env: dropped,
    }));
    Ok(Ran {
        id: id.to_owned(),
        outcome,
        record,
        artifacts,
        proposed_goldens,
        tampered,
    })
}

/// Paths left out of what a validator left, with why, as the report records them.
fn noted(paths: Vec<(String, String)>) -> Vec<NotedPath> {
    paths
        .into_iter()
        .map(|(path, reason)| NotedPath { path, reason })
        .collect()
}

/// The validator's captures, its artifacts copied from its working directory, and its
/// harness report, each listed for the manifest.
fn evidence(
    context: &StepContext<'_>,
    id: &str,
    plan: &Plan,
    folder: &Path,
    visit_dir: &Path,
) -> Evidence {
    let relative = |file: &str| VisitDir::validator_relative(id, file);
    let mut artifacts = vec![
        context.artifact(
            ArtifactRole::ValidationStdout,
            &relative(VisitDir::STDOUT_TXT),
            "text/plain",
            true,
        ),
        context.artifact(
            ArtifactRole::ValidationStderr,
            &relative(VisitDir::STDERR_TXT),
            "text/plain",
            true,
        ),
    ];
    let collected = collect_artifacts(
        &plan.cwd,
        &plan.globs,
        (folder, VisitDir::VALIDATOR_ARTIFACTS),
    );
    artifacts.extend(collected.copied.iter().map(|path| {
        context.artifact(
            ArtifactRole::ValidationArtifact,
            &VisitDir::validator_artifact_relative(id, path),
            "application/octet-stream",
            false,
        )
    }));
    let (report, report_problem) = harness_report(
        plan,
        &collected.copied,
        &folder.join(VisitDir::VALIDATOR_ARTIFACTS),
        visit_dir,
    );
    if let Some((path, _)) = &report {
        let listed = match path {
            ReportPath::Collected(path) => VisitDir::validator_artifact_relative(id, path),
            ReportPath::InStepFolder(path) => path.clone(),
        };
        artifacts.push(context.artifact(
            ArtifactRole::HarnessReport,
            &listed,
            "application/json",
            true,
        ));
    }
    Evidence {
        artifacts,
        collected,
        report,
        report_problem,
    }
}

/// The validator's outcome and its cause: the supervisor's, unless a capture was lost or a
/// validator that exited 0 lacks a declared artifact or a valid harness report.
fn verdict(
    id: &str,
    supervised: &Supervised,
    output_limit: u64,
    tampered: &[String],
    missing: &[String],
    report_problem: Option<String>,
) -> (Outcome, String) {
    let mut outcome = supervised.outcome;
    let mut cause = supervised.cause.clone();
    if matches!(
        supervised.termination.reason,
        Some(StopReason::OutputLimit { .. })
    ) {
        cause.push_str(&format!(
            "; hint: if the validator must print this much, give it `max_output_mib` (more than {}) on the step's validator `{id}`",
            output_limit / MIB
        ));
    }
    // A capture the validator replaced or removed is lost: whatever its exit code said, what
    // it printed cannot be audited, so it does not count as a pass.
    if let Some(lost) = tampered.iter().find(|entry| {
        VALIDATOR_CAPTURES
            .iter()
            .any(|name| entry.starts_with(&format!("`validators/{id}/{name}` ")))
    }) {
        outcome = Outcome::Error;
        cause = format!("evidence_tampered: {lost}");
    } else if outcome == Outcome::Completed && (!missing.is_empty() || report_problem.is_some()) {
        outcome = Outcome::Error;
        cause = report_problem
            .unwrap_or_else(|| format!("declared artifacts missing: {}", missing.join(", ")));
    }
    (outcome, cause)
}

/// The Python module a `python -m` validator's interpreter could not find, read from the
/// start of what it printed (the interpreter says it before anything else runs).
fn missing_module(argv: &[String], folder: &Path) -> Option<String> {
    use std::io::Read as _;
    for name in [VisitDir::STDERR_TXT, VisitDir::STDOUT_TXT] {
        let mut text = String::new();
        let Ok(file) = crate::artifacts::safe_files::open_regular_following(&folder.join(name))
        else {
            continue;
        };
        let _ = file.take(64 * 1024).read_to_string(&mut text);
        if let Some(module) = validators::missing_python_module(argv, &text) {
            return Some(module);
        }
    }
    None
}

/// After a validator: each capture must still be the regular file the conductor opened, and
/// the supervisor's record of the process group gone. What the validator left instead is
/// described (named by its place in the visit folder, `shown`) and removed.
fn check_validator_folder(folder: &Path, shown: &str) -> Result<Vec<String>, OpcodeError> {
    let mut found = crate::artifacts::safe_files::clear_unexpected_entries(
        folder,
        &VALIDATOR_CAPTURES,
        &[crate::runner::PROCESS_GROUP_FILE],
    )
    .map_err(crate::artifacts::ArtifactsError::io("clear", folder))?;
    crate::artifacts::safe_files::note_removed(folder, &VALIDATOR_CAPTURES, &mut found);
    Ok(found
        .into_iter()
        .map(|entry| match entry.strip_prefix('`') {
            Some(rest) => format!("`{shown}/{rest}"),
            None => entry,
        })
        .collect())
}
