//! What a RUN_VALIDATION visit records after its validators: the check of its folder, the
//! capture of the worktree and the policy check, `validation_report.json`,
//! `policy_summary.json`, the events, and the visit's result (its manifest, for the driver to
//! write).

use std::path::Path;

use crate::artifacts::VisitDir;
use crate::artifacts::event_payload::{EvidenceTampered, RunnerCompleted};
use crate::artifacts::evidence::ValidationEvidence;
use crate::artifacts::{
    ArtifactEntry, ArtifactRole, EventPayload, RanValidation, ValidationOutcome, ValidationReport,
    write_json_new,
};
use crate::kernel::StepReport;
use crate::outcome::Outcome;
use crate::policy::PolicySummary;
use crate::workflow::model::RunValidation;
use crate::workspace::{Capture, Checked, Fingerprint, Snapshot};

use super::super::step_policy::{self, PolicyCheck};
use super::super::{OpcodeError, StepContext, StepResult};
use super::{Ran, VALIDATION_REPORT, change};

/// What follows the validators: the check of the visit's folder, the capture of the worktree
/// since `baseline`, the policy check, `validation_report.json`, `policy_summary.json`, the
/// events, and the visit's result (its manifest, for the driver to write).
pub(super) fn finish(
    context: &mut StepContext<'_>,
    validation: &RunValidation,
    visit_dir: &Path,
    baseline: &Snapshot,
    checked: Checked,
    ran: Vec<Ran>,
) -> Result<StepResult, OpcodeError> {
    let Checked {
        report: guard_report,
        head,
    } = checked;
    check_visit_folder(context, visit_dir, &ran)?;
    let patch_file = visit_dir.join(VisitDir::WORKSPACE_DIFF);
    let (Capture { status, tree }, caches_removed) =
        change::capture_change(context.workspace, baseline, &patch_file)?;
    // The next agent step's snapshot, when nothing runs in the worktree before it.
    context.workspace.remember_capture(&tree);
    write_json_new(&visit_dir.join(VisitDir::WORKSPACE_STATUS), &status)?;
    let PolicyCheck {
        summary: policy_summary,
        violations,
    } = step_policy::check(
        context,
        validation.policy.as_ref(),
        &status,
        guard_report,
        // `cargo test`, `npm install` and the like bring a lockfile in line with the
        // manifest the agent changed: the agent's step is where `modify_lockfiles` applies.
        &[crate::policy::Operation::ModifyLockfiles],
    )?;
    let outcome = overall(&ran);
    let proposed_goldens = ran.iter().any(|result| result.proposed_goldens);
    write_validation_report(visit_dir, outcome, &ran)?;
    write_policy_summary(visit_dir, &policy_summary, &ran)?;
    step_policy::record_violations(context, &violations)?;
    // The change is listed (and its diffstat summarised) only when the validators changed
    // something: the gate's review context and the journal show the latest listed change as
    // the run's, which must stay the agent's when the validators changed nothing. The files
    // are written either way.
    let changed = (!status.diffstat.is_empty()).then_some(&status.diffstat);
    let artifacts = listed_artifacts(context, changed.is_some(), &ran);
    let summary = ValidationEvidence {
        diffstat: changed.copied(),
        tool_caches_removed: caches_removed,
        ..evidence_summary(&ran, outcome, proposed_goldens, violations.len())
    };
    let step = (context.step_id().to_owned(), context.visit);
    let fields = RunnerCompleted {
        outcome: Some(outcome),
        cause: None,
        exit_codes: Some(
            ran.iter()
                .map(|result| (result.id.clone(), result.record.exit_code().map(i64::from)))
                .collect(),
        ),
    };
    context.recorder.event(
        Some((&step.0, step.1)),
        EventPayload::RunnerCompleted(fields),
    )?;
    let manifest = context.manifest(outcome.as_str(), &summary, artifacts);
    Ok(StepResult {
        report: StepReport {
            outcome,
            policy_violation: step_policy::violation_text(&violations),
            proposed_goldens,
            stop_reason: None,
        },
        manifest,
        cost_usd: 0.0,
        waiting: false,
        fingerprint: Some(Fingerprint { tree, head }),
    })
}

/// Removes what the validators left in the visit's folder under names the conductor writes
/// after them, and records it with what each validator left in its own folder.
fn check_visit_folder(
    context: &mut StepContext<'_>,
    visit_dir: &Path,
    ran: &[Ran],
) -> Result<(), OpcodeError> {
    let mut tampered: Vec<String> = ran
        .iter()
        .flat_map(|result| result.tampered.iter().cloned())
        .collect();
    tampered.extend(
        crate::artifacts::safe_files::clear_unexpected_entries(
            visit_dir,
            &[],
            &[
                &crate::artifacts::STEP_VISIT_FILES_AFTER[..],
                &[VALIDATION_REPORT],
            ]
            .concat(),
        )
        .map_err(crate::artifacts::ArtifactsError::io("clear", visit_dir))?,
    );
    if !tampered.is_empty() {
        let step = context.step_id().to_owned();
        let tampered = EvidenceTampered { entries: tampered };
        context.recorder.event(
            Some((&step, context.visit)),
            EventPayload::EvidenceTampered(tampered),
        )?;
    }
    Ok(())
}

/// `validation_report.json`: the step's outcome and each validator's record.
fn write_validation_report(
    visit_dir: &Path,
    outcome: Outcome,
    ran: &[Ran],
) -> Result<(), OpcodeError> {
    let report = ValidationReport::Ran(RanValidation {
        schema_version: crate::artifacts::SCHEMA_VERSION,
        outcome: ValidationOutcome::of(outcome),
        validators: ran
            .iter()
            .map(|result| (result.id.clone(), result.record.clone()))
            .collect(),
    });
    write_json_new(&visit_dir.join(VALIDATION_REPORT), &report)?;
    Ok(())
}

/// `policy_summary.json`: the policy summary, with the validators' isolation beside it
/// (top-level keys `environment`, `network`, `entrypoints`).
fn write_policy_summary(
    visit_dir: &Path,
    policy_summary: &PolicySummary,
    ran: &[Ran],
) -> Result<(), OpcodeError> {
    let mut policy_json = serde_json::to_value(policy_summary)
        .map_err(|error| OpcodeError::Other(format!("the policy summary: {error}")))?;
    if let serde_json::Value::Object(fields) = &mut policy_json {
        fields.insert("environment".into(), "allowlist (PATH, HOME, LANG, TERM, USER, SHELL, TMPDIR, TZ) + where the build tools live (RUSTUP_HOME, CARGO_HOME, JAVA_HOME, GOPATH, VIRTUAL_ENV, …) + TNH_* + the validator's env, without names containing KEY, TOKEN, SECRET, PASSWORD or CREDENTIAL".into());
        fields.insert(
            "network".into(),
            ran.iter()
                .map(|result| (result.id.clone(), result.record.network().into()))
                .collect::<serde_json::Map<_, _>>()
                .into(),
        );
        fields.insert(
            "entrypoints".into(),
            "script validators must lie under the run directory or script_allowlist".into(),
        );
    }
    write_json_new(&visit_dir.join(VisitDir::POLICY_SUMMARY), &policy_json)?;
    Ok(())
}

/// The artifacts the visit's manifest lists: the report, the policy summary, the capture of
/// the worktree when it `changed`, and each validator's.
fn listed_artifacts(context: &StepContext<'_>, changed: bool, ran: &[Ran]) -> Vec<ArtifactEntry> {
    let mut artifacts = vec![
        context.artifact(
            ArtifactRole::ValidationReport,
            VALIDATION_REPORT,
            "application/json",
            true,
        ),
        step_policy::policy_artifact(context),
    ];
    if changed {
        artifacts.extend(step_policy::capture_artifacts(context));
    }
    artifacts.extend(
        ran.iter()
            .flat_map(|result| result.artifacts.iter().cloned()),
    );
    artifacts
}

/// The manifest's evidence summary: the outcome, each validator's exit code (and why it has
/// none), the timeouts, the proposed goldens and the number of policy violations.
fn evidence_summary(
    ran: &[Ran],
    outcome: Outcome,
    proposed_goldens: bool,
    violations: usize,
) -> ValidationEvidence {
    let exit_codes = ran
        .iter()
        .map(|result| (result.id.clone(), result.record.exit_code().map(i64::from)))
        .collect();
    // Why a validator has no exit code (a timeout, a refused entrypoint), for `runs show`.
    let causes = ran
        .iter()
        .filter(|result| result.record.exit_code().is_none())
        .map(|result| (result.id.clone(), result.record.cause().to_owned()))
        .collect();
    let timeouts = ran
        .iter()
        .filter(|result| result.outcome == Outcome::KilledTimeout)
        .map(|result| result.id.clone())
        .collect();
    ValidationEvidence {
        mechanical_outcome: outcome.as_str().to_owned(),
        exit_codes,
        causes,
        timeouts,
        proposed_goldens,
        policy_violations: violations,
        ..ValidationEvidence::default()
    }
}

/// The step's outcome: a kill wins over an error, an error over completion.
fn overall(ran: &[Ran]) -> Outcome {
    for outcome in [
        Outcome::KilledTimeout,
        Outcome::KilledIdle,
        Outcome::KilledPolicy,
        Outcome::Error,
    ] {
        if ran.iter().any(|result| result.outcome == outcome) {
            return outcome;
        }
    }
    Outcome::Completed
}
