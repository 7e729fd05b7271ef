//! RUN_VALIDATION: run each validator under the same supervision as agents (timeouts, process
//! groups, bounded capture), in the worktree, with a sanitised environment and, for script
//! validators, no network where the platform allows; capture declared artifacts and harness
//! reports. `completed` only if every validator exited 0 and every declared artifact exists.
//! Like an agent step, the step is guarded (protected refs and git configuration put back)
//! and its changes to the worktree are captured and checked against the policy.
//!
//! One file a part: `planning` says which validators run and how, `spawn` starts and
//! supervises each, `results` judges what one left (`collect` copies its artifacts, `harness`
//! reads its harness report), `change` captures what they changed in the worktree, and
//! `report` writes what the visit records after them.

mod change;
mod collect;
mod harness;
mod planning;
mod report;
mod results;
mod spawn;

use crate::artifacts::evidence::{ValidationEvidence, summary_value};
use crate::artifacts::{
    ArtifactEntry, ValidationOutcome, ValidatorNotStarted, ValidatorRecord, VisitDir,
    write_json_private,
};
use crate::outcome::Outcome;
use crate::workflow::model::RunValidation;
use crate::workspace::GUARD_STATE_FILE;

use super::remove_guard_state;
use super::{OpcodeError, StepContext, StepResult};

/// One validator's result.
struct Ran {
    id: String,
    outcome: Outcome,
    record: ValidatorRecord,
    artifacts: Vec<ArtifactEntry>,
    proposed_goldens: bool,
    /// What the validator left in its folder under the conductor's names (removed).
    tampered: Vec<String>,
}

/// The report a RUN_VALIDATION visit writes after its validators, beside the files every
/// step writes then ([`crate::artifacts::STEP_VISIT_FILES_AFTER`]).
pub(crate) const VALIDATION_REPORT: &str = VisitDir::VALIDATION_REPORT;

/// A validator's captures, opened by the conductor before it starts.
const VALIDATOR_CAPTURES: [&str; 2] = [VisitDir::STDOUT_TXT, VisitDir::STDERR_TXT];

pub(super) fn execute(
    context: &mut StepContext<'_>,
    validation: &RunValidation,
) -> Result<StepResult, OpcodeError> {
    let visit_dir = context.visit_dir()?;
    // A validator that is neither configured nor detectable is a misconfiguration, not a
    // failing check: no validator runs, and the run ends naming it (a fix agent could not
    // make it pass).
    let unconfigured = planning::unconfigured(context, validation);
    if !unconfigured.is_empty() {
        return Err(planning::refuse_unconfigured(
            &visit_dir,
            validation,
            unconfigured,
        )?);
    }
    // Every validator's computed fields (`args`, `entrypoint`, `cwd`, `env`, `artifacts`,
    // `report`) are evaluated before the first validator runs: an expression that fails stops
    // the step before anything ran, never between two validators, where what the first one
    // did would escape the capture and the policy check.
    let evaluated = validation
        .run
        .iter()
        .map(|entry| planning::evaluate(context, entry))
        .collect::<Result<Vec<_>, _>>()?;
    // A validator (or a harness an agent wrote) may change the worktree and the repository
    // like an agent: its changes are captured against the worktree as it was when the step
    // started and checked against the policy, and the guard runs around it. No snapshot is
    // taken: `pre_step` stays the snapshot before the most recent RUN_AGENT.
    let baseline = change::baseline(context)?;
    let guard = context
        .workspace
        .guard(&context.run.config.protected_branches)?;
    // Kept while the validators run: if this process dies, `resume` checks the step against it.
    let guard_state = visit_dir.join(GUARD_STATE_FILE);
    write_json_private(&guard_state, &guard.state())?;
    let (mut ran, failure) = run_all(context, validation, evaluated);
    // Checked even when a validator could not be run or recorded: what it did to protected
    // refs and git configuration is put back before the error ends the run.
    // The saved state is removed once the check is done and `runner_completed` recorded (in
    // `finish`): `resume` takes a missing state without that event, after the validators
    // started, for one deleted to hide what they did; kept longer, it is only checked again.
    let checked = guard.check();
    let checked = match (checked, failure) {
        (Ok(checked), None) => checked,
        (Err(error), None) => return Err(error.into()),
        (Err(_), Some((_, error))) => return Err(error),
        // A validator could not be run (a program found nowhere, a `cwd` a validator before
        // it did not create, the run directory failing): what the validators before it did is
        // still recorded — their results, the capture of the worktree, the policy check and
        // the visit's manifest — and then the error stops the step.
        (Ok(checked), Some((id, error))) => {
            ran.extend(not_run_from(validation, &id, &error));
            // Best effort: what cannot be recorded after the failure does not hide it.
            if let Ok(mut result) =
                report::finish(context, validation, &visit_dir, &baseline, checked, ran)
            {
                let mut evidence = result.manifest.evidence::<ValidationEvidence>();
                evidence.step_failed = Some(error.to_string());
                result.manifest.evidence_summary = summary_value(&evidence);
                let _ = context.recorder.write_manifest(&result.manifest);
                let _ = remove_guard_state(&guard_state);
            }
            return Err(error);
        }
    };
    let result = report::finish(context, validation, &visit_dir, &baseline, checked, ran)?;
    remove_guard_state(&guard_state)?;
    Ok(result)
}

/// Runs the step's validators in order; the first that cannot be run stops the others, and
/// is returned with its error.
fn run_all(
    context: &mut StepContext<'_>,
    validation: &RunValidation,
    evaluated: Vec<planning::Evaluated>,
) -> (Vec<Ran>, Option<(String, OpcodeError)>) {
    let mut ran = Vec::new();
    for (entry, fields) in validation.run.iter().zip(evaluated) {
        match spawn::run_one(context, entry, fields, &validation.limits) {
            Ok(result) => ran.push(result),
            Err(error) => return (ran, Some((entry.id().value.clone(), error))),
        }
    }
    (ran, None)
}

/// The validator `id` that could not be run, and those after it, recorded as errors.
fn not_run_from(validation: &RunValidation, id: &str, error: &OpcodeError) -> Vec<Ran> {
    let after = validation
        .run
        .iter()
        .skip_while(|entry| entry.id().value != id)
        .skip(1)
        .map(|entry| {
            not_run(
                &entry.id().value,
                Outcome::Error,
                format!("not run: validator `{id}` before it could not run"),
            )
        });
    std::iter::once(not_run(
        id,
        Outcome::Error,
        format!("could not run: {error}"),
    ))
    .chain(after)
    .collect()
}

/// A validator that did not run, recorded with why.
fn not_run(id: &str, outcome: Outcome, cause: String) -> Ran {
    Ran {
        id: id.to_owned(),
        outcome,
        record: ValidatorRecord::NotStarted(ValidatorNotStarted::new(
            ValidationOutcome::of(outcome),
            cause,
        )),
        artifacts: Vec::new(),
        proposed_goldens: false,
        tampered: Vec::new(),
    }
}
