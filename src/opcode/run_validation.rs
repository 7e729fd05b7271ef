//! RUN_VALIDATION: run each validator under the same supervision as agents (timeouts, process
//! groups, bounded capture), in the worktree, with a sanitised environment and, for script
//! validators, no network where the platform allows; capture declared artifacts and harness
//! reports. `completed` only if every validator exited 0 and every declared artifact exists.
//! Like an agent step, the step is guarded (protected refs and git configuration put back)
//! and its changes to the worktree are captured and checked against the policy.

use std::path::{Path, PathBuf};

use crate::artifacts::{
    ArtifactEntry, ArtifactRole, EventType, write_json_new, write_json_private,
};
use crate::kernel::StepReport;
use crate::kernel::recorder::payload;
use crate::outcome::Outcome;
use crate::runner::{
    CaptureFormat, Limits as RunnerLimits, ProcessKind, ProcessSpec, StopReason,
    validator_environment,
};
use crate::workflow::model::{
    Limits, NetworkAccess, NodeList, RunValidation, ValidatorEntry, ValidatorKind, ValidatorSpec,
};
use crate::workflow::yaml::Node;
use crate::workspace::{
    Capture, Checked, DiffStat, Fingerprint, GUARD_STATE_FILE, Snapshot,
    WORKSPACE_STATUS_SCHEMA_VERSION, Workspace, WorkspaceStatus,
};

use super::remove_guard_state;
use super::step_policy::{self, PolicyCheck};
use super::validators::{self, Command};
use super::{OpcodeError, StepContext, StepResult};

/// The most files one validator's artifact globs may collect.
const MAX_ARTIFACT_FILES: usize = 10_000;

/// One validator's result.
struct Ran {
    id: String,
    outcome: Outcome,
    record: serde_json::Value,
    artifacts: Vec<ArtifactEntry>,
    proposed_goldens: bool,
    /// What the validator left in its folder under the conductor's names (removed).
    tampered: Vec<String>,
}

/// The report a RUN_VALIDATION visit writes after its validators, beside the files every
/// step writes then ([`crate::artifacts::STEP_VISIT_FILES_AFTER`]).
pub(crate) const VALIDATION_REPORT: &str = "validation_report.json";

/// A validator's captures, opened by the conductor before it starts.
const VALIDATOR_CAPTURES: [&str; 2] = ["stdout.txt", "stderr.txt"];

pub(super) fn execute(
    context: &mut StepContext<'_>,
    validation: &RunValidation,
) -> Result<StepResult, OpcodeError> {
    let visit_dir = context.visit_dir()?;
    // A validator that is neither configured nor detectable is a misconfiguration, not a
    // failing check: no validator runs, and the run ends naming it (a fix agent could not
    // make it pass).
    let unconfigured = unconfigured(context, validation);
    if !unconfigured.is_empty() {
        return Err(refuse_unconfigured(&visit_dir, validation, unconfigured)?);
    }
    // Every validator's computed fields (`args`, `entrypoint`, `cwd`, `env`, `artifacts`,
    // `report`) are evaluated before the first validator runs: an expression that fails stops
    // the step before anything ran, never between two validators, where what the first one
    // did would escape the capture and the policy check.
    let evaluated = validation
        .run
        .iter()
        .map(|entry| evaluate(context, entry))
        .collect::<Result<Vec<_>, _>>()?;
    // A validator (or a harness an agent wrote) may change the worktree and the repository
    // like an agent: its changes are captured against the worktree as it was when the step
    // started and checked against the policy, and the guard runs around it. No snapshot is
    // taken: `pre_step` stays the snapshot before the most recent RUN_AGENT.
    let baseline = baseline(context)?;
    let guard = context
        .workspace
        .guard(&context.run.config.protected_branches)?;
    // Kept while the validators run: if this process dies, `resume` checks the step against it.
    let guard_state = visit_dir.join(GUARD_STATE_FILE);
    write_json_private(&guard_state, &guard.state())?;
    let mut ran = Vec::new();
    let mut failure = None;
    for (entry, fields) in validation.run.iter().zip(evaluated) {
        match run_one(context, entry, fields, &validation.limits) {
            Ok(result) => ran.push(result),
            Err(error) => {
                failure = Some((entry.id().value.clone(), error));
                break;
            }
        }
    }
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
            ran.push(not_run(
                &id,
                Outcome::Error,
                format!("could not run: {error}"),
            ));
            let after = validation
                .run
                .iter()
                .skip_while(|entry| entry.id().value != id)
                .skip(1);
            for entry in after {
                ran.push(not_run(
                    &entry.id().value,
                    Outcome::Error,
                    format!("not run: validator `{id}` before it could not run"),
                ));
            }
            // Best effort: what cannot be recorded after the failure does not hide it.
            if let Ok(mut result) = finish(context, validation, &visit_dir, &baseline, checked, ran)
            {
                result.manifest.evidence_summary["step_failed"] = error.to_string().into();
                let _ = context.recorder.write_manifest(&result.manifest);
                let _ = remove_guard_state(&guard_state);
            }
            return Err(error);
        }
    };
    let result = finish(context, validation, &visit_dir, &baseline, checked, ran)?;
    remove_guard_state(&guard_state)?;
    Ok(result)
}

/// A validator that did not run, recorded with why.
fn not_run(id: &str, outcome: Outcome, cause: String) -> Ran {
    Ran {
        id: id.to_owned(),
        outcome,
        record: serde_json::json!({ "outcome": outcome.as_str(), "cause": cause, "exit_code": null, "network": "not run" }),
        artifacts: Vec::new(),
        proposed_goldens: false,
        tampered: Vec::new(),
    }
}

/// What follows the validators: the check of the visit's folder, the capture of the worktree
/// since `baseline`, the policy check, `validation_report.json`, `policy_summary.json`, the
/// events, and the visit's result (its manifest, for the driver to write).
fn finish(
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
        context.recorder.event(
            EventType::EvidenceTampered,
            Some((&step, context.visit)),
            payload([("entries", tampered.into())]),
        )?;
    }
    let patch_file = visit_dir.join("workspace.diff");
    let mut captured = capture(context.workspace, baseline, &patch_file)?;
    // What the validators left in tool caches (`__pycache__/`, `.pytest_cache/`) is removed,
    // and the worktree captured again: it is no one's change, and would otherwise reach the
    // next agent's diff, the policy check and the run's commit.
    let caches_removed = remove_tool_caches(context.workspace.path(), &captured.status);
    if !caches_removed.is_empty() {
        std::fs::remove_file(&patch_file)
            .map_err(crate::artifacts::ArtifactsError::io("remove", &patch_file))?;
        captured = capture(context.workspace, baseline, &patch_file)?;
    }
    let Capture { status, tree } = captured;
    // The next agent step's snapshot, when nothing runs in the worktree before it.
    context.workspace.remember_capture(&tree);
    write_json_new(&visit_dir.join("workspace_status.json"), &status)?;
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
    let report = serde_json::json!({
        "schema_version": crate::artifacts::SCHEMA_VERSION,
        "outcome": outcome.as_str(),
        "validators": ran.iter().map(|result| (result.id.clone(), result.record.clone())).collect::<serde_json::Map<_, _>>(),
    });
    write_json_new(&visit_dir.join(VALIDATION_REPORT), &report)?;
    // The policy summary, with the validators' isolation beside it (top-level keys
    // `environment`, `network`, `entrypoints`).
    let mut policy_json = serde_json::to_value(&policy_summary)
        .map_err(|error| OpcodeError::Other(format!("the policy summary: {error}")))?;
    if let serde_json::Value::Object(fields) = &mut policy_json {
        fields.insert("environment".into(), "allowlist (PATH, HOME, LANG, TERM, USER, SHELL, TMPDIR, TZ) + where the build tools live (RUSTUP_HOME, CARGO_HOME, JAVA_HOME, GOPATH, VIRTUAL_ENV, …) + TNH_* + the validator's env, without names containing KEY, TOKEN, SECRET, PASSWORD or CREDENTIAL".into());
        fields.insert(
            "network".into(),
            ran.iter()
                .map(|result| (result.id.clone(), result.record["network"].clone()))
                .collect::<serde_json::Map<_, _>>()
                .into(),
        );
        fields.insert(
            "entrypoints".into(),
            "script validators must lie under the run directory or script_allowlist".into(),
        );
    }
    write_json_new(&visit_dir.join("policy_summary.json"), &policy_json)?;
    step_policy::record_violations(context, &violations)?;
    let mut artifacts = vec![
        context.artifact(
            ArtifactRole::ValidationReport,
            VALIDATION_REPORT,
            "application/json",
            true,
        ),
        step_policy::policy_artifact(context),
    ];
    // The change is listed (and its diffstat summarised) only when the validators changed
    // something: the gate's review context and the journal show the latest listed change as
    // the run's, which must stay the agent's when the validators changed nothing. The files
    // are written either way.
    let changed = !status.diffstat.is_empty();
    if changed {
        artifacts.extend(step_policy::capture_artifacts(context));
    }
    artifacts.extend(
        ran.iter()
            .flat_map(|result| result.artifacts.iter().cloned()),
    );
    let exit_codes: serde_json::Map<String, serde_json::Value> = ran
        .iter()
        .map(|result| (result.id.clone(), result.record["exit_code"].clone()))
        .collect();
    // Why a validator has no exit code (a timeout, a refused entrypoint), for `runs show`.
    let causes: serde_json::Map<String, serde_json::Value> = ran
        .iter()
        .filter(|result| result.record["exit_code"].is_null())
        .map(|result| (result.id.clone(), result.record["cause"].clone()))
        .collect();
    let timeouts: Vec<&str> = ran
        .iter()
        .filter(|result| result.outcome == Outcome::KilledTimeout)
        .map(|result| result.id.as_str())
        .collect();
    let mut summary = serde_json::json!({
        "mechanical_outcome": outcome.as_str(),
        "exit_codes": exit_codes,
        "causes": causes,
        "timeouts": timeouts,
        "proposed_goldens": proposed_goldens,
        "policy_violations": violations.len(),
    });
    if !caches_removed.is_empty() {
        summary["tool_caches_removed"] = caches_removed.into();
    }
    if changed {
        summary["diffstat"] = serde_json::to_value(status.diffstat).unwrap_or_default();
    }
    let step = (context.step_id().to_owned(), context.visit);
    let fields = payload([
        ("outcome", outcome.as_str().into()),
        ("exit_codes", serde_json::Value::Object(exit_codes.clone())),
    ]);
    context
        .recorder
        .event(EventType::RunnerCompleted, Some((&step.0, step.1)), fields)?;
    let manifest = context.manifest(outcome.as_str(), summary, artifacts);
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

/// The registered validators of the step (named, or inline `builtin`) that are neither
/// configured nor detectable in the worktree, with why.
fn unconfigured(context: &StepContext<'_>, validation: &RunValidation) -> Vec<(String, String)> {
    let worktree = context.workspace.path();
    validation
        .run
        .iter()
        .filter_map(|entry| {
            let id = match entry {
                ValidatorEntry::Named(name) => &name.value,
                ValidatorEntry::Spec(spec) if spec.kind.value == ValidatorKind::Builtin => {
                    &spec.id.value
                }
                ValidatorEntry::Spec(_) => return None,
            };
            validators::registered(id, &context.run.config, worktree)
                .err()
                .map(|reason| (id.clone(), reason))
        })
        .collect()
}

/// Records the visit's `validation_report.json` — status `not_configured` for each validator
/// that cannot be resolved, `not_run` for the others — and the error that ends the run.
fn refuse_unconfigured(
    visit_dir: &Path,
    validation: &RunValidation,
    unconfigured: Vec<(String, String)>,
) -> Result<OpcodeError, OpcodeError> {
    let validators: serde_json::Map<String, serde_json::Value> = validation
        .run
        .iter()
        .map(|entry| {
            let id = match entry {
                ValidatorEntry::Named(name) => name.value.clone(),
                ValidatorEntry::Spec(spec) => spec.id.value.clone(),
            };
            let record = match unconfigured.iter().find(|(name, _)| *name == id) {
                Some((_, reason)) => serde_json::json!({
                    "status": "not_configured",
                    "cause": format!("{reason}: set validators.{id} in .tnh/config.yaml"),
                    "exit_code": null,
                }),
                None => serde_json::json!({
                    "status": "not_run",
                    "cause": "not run: another validator of the step is not configured",
                    "exit_code": null,
                }),
            };
            (id, record)
        })
        .collect();
    let report = serde_json::json!({
        "schema_version": crate::artifacts::SCHEMA_VERSION,
        "status": "not_configured",
        "validators": validators,
    });
    write_json_new(&visit_dir.join(VALIDATION_REPORT), &report)?;
    Ok(OpcodeError::ValidatorsNotConfigured {
        names: unconfigured.into_iter().map(|(name, _)| name).collect(),
    })
}

/// What the step's changes are compared with: the worktree as the last checkpoint recorded it
/// (the kernel checkpoints after every step that may change the worktree, and `resume` refuses
/// a worktree that drifted from it), read afresh only before a run's first checkpoint. No git
/// process for it then; and a visit run again after its process died is compared with the
/// worktree from before the interrupted visit, so what that visit changed is checked too.
/// The snapshot is not kept by any ref: it is never a rollback target.
fn baseline(context: &StepContext<'_>) -> Result<Snapshot, OpcodeError> {
    let tree = match &context.state.fingerprint {
        Some(fingerprint) => fingerprint.tree.clone(),
        None => context.workspace.worktree_tree()?,
    };
    Ok(Snapshot {
        reference: format!(
            "the worktree before step {} visit {}",
            context.step_id(),
            context.visit
        ),
        commit: String::new(),
        tree,
        base: String::new(),
    })
}

/// The change since `baseline`, as [`Workspace::capture_since`] records it. When the worktree's
/// tree is still the baseline's (the common case: validators that leave only ignored files)
/// the empty patch and status are written without diffing: one git process (`add`; the tree
/// of a small index is written in-process) instead of three.
fn capture(
    workspace: &Workspace,
    baseline: &Snapshot,
    patch_file: &Path,
) -> Result<Capture, OpcodeError> {
    let scratch = workspace.refresh_scratch_index()?;
    let tree = workspace.write_scratch_tree(&scratch.git)?;
    if tree != baseline.tree {
        let mut capture = workspace.capture_since(baseline, patch_file)?;
        if !scratch.access_restored.is_empty() {
            let restored = &mut capture.status.access_restored;
            restored.extend(scratch.access_restored);
            restored.sort();
            restored.dedup();
        }
        return Ok(capture);
    }
    crate::artifacts::safe_files::write_new(patch_file, b"")
        .map_err(crate::artifacts::ArtifactsError::io("write", patch_file))?;
    Ok(Capture {
        status: WorkspaceStatus {
            schema_version: WORKSPACE_STATUS_SCHEMA_VERSION,
            since: baseline.reference.clone(),
            since_tree: baseline.tree.clone(),
            files: Vec::new(),
            new_top_level_dirs: Vec::new(),
            diffstat: DiffStat::default(),
            access_restored: scratch.access_restored,
        },
        tree,
    })
}

/// Removes the files the visit added in tool caches (see [`crate::policy::tool_caches`]) and
/// the cache folders left empty; returns the cache entries removed (`__pycache__/`), each once.
/// A file whose folder is reached through a symbolic link is left alone (and charged).
fn remove_tool_caches(worktree: &Path, status: &WorkspaceStatus) -> Vec<String> {
    let mut entries: Vec<String> = Vec::new();
    for file in &status.files {
        let added = file.kind == crate::workspace::ChangeKind::Add && file.old_mode.is_none();
        let Some(entry) = crate::policy::tool_caches::cache_entry(&file.path) else {
            continue;
        };
        if !added || file.quoted_path.is_some() || !real_folders_up_to(worktree, &file.path) {
            continue;
        }
        if std::fs::remove_file(worktree.join(&file.path)).is_err() {
            continue;
        }
        // Cache folders emptied by the removal go too.
        let mut folder = file.path.rsplit_once('/').map(|(dir, _)| dir);
        while let Some(dir) = folder {
            let in_cache = crate::policy::tool_caches::cache_entry(dir).is_some();
            if !in_cache || std::fs::remove_dir(worktree.join(dir)).is_err() {
                break;
            }
            folder = dir.rsplit_once('/').map(|(parent, _)| parent);
        }
        if !entries.iter().any(|known| known == entry) {
            entries.push(entry.to_owned());
        }
    }
    entries
}

/// Whether every folder on the way from `worktree` to `relative` is a real folder (no link).
fn real_folders_up_to(worktree: &Path, relative: &str) -> bool {
    let mut path = worktree.to_path_buf();
    let Some((folders, _)) = relative.rsplit_once('/') else {
        return true;
    };
    folders.split('/').all(|component| {
        path.push(component);
        std::fs::symlink_metadata(&path).is_ok_and(|metadata| metadata.is_dir())
    })
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

/// A computed single-text field (`entrypoint`, `cwd`, `report`, one `env` value): `None` when
/// its value is `()`, which leaves the field unset.
fn evaluate_text(
    context: &StepContext<'_>,
    node: &Node,
    what: &str,
) -> Result<Option<String>, OpcodeError> {
    let script_context = context.script_context()?;
    Ok(context
        .run
        .script
        .evaluate_field_text(node, &script_context, what)?)
}

/// A computed list field (`args`, `artifacts`); items whose value is `()` are left out.
fn evaluate_list(
    context: &StepContext<'_>,
    list: &NodeList,
    what: &str,
) -> Result<Vec<String>, OpcodeError> {
    let script_context = context.script_context()?;
    Ok(context
        .run
        .script
        .evaluate_field_list(list, &script_context, what)?)
}

/// What an inline validator's fields gave, evaluated before any validator of the step runs
/// (all `None`/empty for a registered validator named by itself).
#[derive(Debug, Default)]
struct Evaluated {
    args: Vec<String>,
    entrypoint: Option<String>,
    /// The `cwd` as given, with where it is written.
    cwd: Option<(String, crate::workflow::yaml::Pos)>,
    env: Vec<(String, String)>,
    globs: Vec<String>,
    report: Option<String>,
}

/// Evaluates the expressions of one entry of `run`: nothing here touches the worktree or
/// starts a process.
fn evaluate(context: &StepContext<'_>, entry: &ValidatorEntry) -> Result<Evaluated, OpcodeError> {
    let ValidatorEntry::Spec(spec) = entry else {
        return Ok(Evaluated::default());
    };
    let entrypoint = match (&spec.kind.value, &spec.entrypoint) {
        (ValidatorKind::Script, Some(node)) => evaluate_text(context, node, "`entrypoint`")?,
        _ => None,
    };
    let cwd = match &spec.cwd {
        // `()` leaves it unset: the worktree's root.
        Some(node) => evaluate_text(context, node, "`cwd`")?.map(|given| (given, node.pos)),
        None => None,
    };
    let mut env = Vec::new();
    for (name, node) in &spec.env {
        let what = format!("the `env` value of `{}`", name.value);
        if let Some(value) = evaluate_text(context, node, &what)? {
            env.push((name.value.clone(), value));
        }
    }
    if let Some(node) = &spec.env_expression {
        let script_context = context.script_context()?;
        env.extend(context.run.script.evaluate_env(node, &script_context)?);
    }
    let report = match &spec.report {
        Some(node) => evaluate_text(context, node, "`report`")?,
        None => None,
    };
    Ok(Evaluated {
        args: evaluate_list(context, &spec.args, "`args`")?,
        entrypoint,
        cwd,
        env,
        globs: evaluate_list(context, &spec.artifacts, "`artifacts`")?,
        report,
    })
}

/// The command, cwd, extra environment, artifacts globs, report path and network of an entry.
struct Plan {
    command: Result<Command, (Outcome, String)>,
    cwd: PathBuf,
    env: Vec<(String, String)>,
    globs: Vec<String>,
    report: Option<String>,
    network: NetworkAccess,
    timeout: Option<std::time::Duration>,
}

/// Resolves an entry just before it runs: its command (a registered validator, or a script
/// entrypoint, whose file a validator before it may have written) and its `cwd` (which one
/// before it may have created).
fn plan(
    context: &StepContext<'_>,
    spec: Option<&ValidatorSpec>,
    id: &str,
    evaluated: Evaluated,
) -> Result<Plan, OpcodeError> {
    let worktree = context.workspace.path().to_path_buf();
    let Some(spec) = spec else {
        let command = validators::registered(id, &context.run.config, &worktree)
            .map_err(|reason| (Outcome::Error, reason));
        return Ok(Plan {
            command,
            cwd: worktree,
            env: Vec::new(),
            globs: Vec::new(),
            report: None,
            network: NetworkAccess::Allow,
            timeout: None,
        });
    };
    let Evaluated {
        args,
        entrypoint,
        cwd,
        env,
        globs,
        report,
    } = evaluated;
    let command = match spec.kind.value {
        ValidatorKind::Builtin => validators::registered(id, &context.run.config, &worktree)
            .map(|mut command| {
                command.argv.extend(args);
                command
            })
            .map_err(|reason| (Outcome::Error, reason)),
        ValidatorKind::Script => {
            let record = context.workspace.record();
            validators::script(
                &entrypoint.unwrap_or_default(),
                args,
                context.recorder.run_dir().root(),
                &record.repo_root,
                &worktree,
                &context.run.config,
            )
            .map_err(|reason| (Outcome::KilledPolicy, format!("refused: {reason}")))
        }
    };
    let cwd = match cwd {
        Some((given, pos)) => {
            validators::working_directory(&worktree, &given).map_err(|reason| {
                OpcodeError::ValidatorCwd {
                    step: context.step_id().to_owned(),
                    validator: id.to_owned(),
                    at: format!("{}:{}", context.recorder.metadata().workflow_path, pos),
                    cwd: given,
                    reason,
                }
            })?
        }
        None => worktree,
    };
    // A script has no network unless it asks; a builtin (a test suite that may fetch its
    // dependencies) has the host's unless the entry says `network: deny`.
    let network = spec.network_access();
    Ok(Plan {
        command,
        cwd,
        env,
        globs,
        report,
        network,
        timeout: spec.timeout.as_ref().map(|timeout| timeout.value),
    })
}

fn run_one(
    context: &mut StepContext<'_>,
    entry: &ValidatorEntry,
    evaluated: Evaluated,
    limits: &Limits,
) -> Result<Ran, OpcodeError> {
    let (id, spec) = match entry {
        ValidatorEntry::Named(name) => (name.value.clone(), None),
        ValidatorEntry::Spec(spec) => (spec.id.value.clone(), Some(spec.as_ref())),
    };
    let plan = plan(context, spec, &id, evaluated)?;
    let command = match plan.command.clone() {
        Ok(command) => command,
        Err((outcome, reason)) => return Ok(not_run(&id, outcome, reason)),
    };
    let visit_dir = context.visit_dir()?;
    let folder = visit_dir.join("validators").join(&id);
    crate::artifacts::safe_files::create_real_folders(&visit_dir, &["validators", &id])
        .map_err(crate::artifacts::ArtifactsError::io("create", &folder))?;
    let (environment, dropped) =
        validator_environment(&context.run.host_env, &plan.env, &context.tnh_variables());
    let (mut argv, network) = match plan.network {
        NetworkAccess::Deny if let Some(helper) = validators::isolation_helper() => (
            // The helper is the conductor's; the validator's program is found on the
            // validator's own PATH, as it would be without isolation, and a program found
            // nowhere is the validator's spawn failure, not a failing check.
            std::iter::once(helper.display().to_string())
                .chain(["-rn", "--"].iter().map(|part| (*part).to_owned()))
                .chain(std::iter::once(isolated_program(
                    &id,
                    &command,
                    &environment,
                    &plan,
                )?))
                .chain(command.argv.iter().skip(1).cloned())
                .collect::<Vec<_>>(),
            "denied (own network namespace)",
        ),
        NetworkAccess::Deny => (
            command.argv.clone(),
            "not isolated: unshare is not available here",
        ),
        NetworkAccess::Allow => (command.argv.clone(), "allowed"),
    };
    let mut runner_limits = RunnerLimits::default();
    // Bounded like an agent's: a validator printing without end stops at the limit instead of
    // filling the disk that holds the run's evidence.
    let output_limit = output_limit_bytes(spec);
    runner_limits.max_stdout_bytes = Some(output_limit);
    runner_limits.max_stderr_bytes = Some(output_limit);
    let timeout = effective_timeout(&plan, limits, context);
    if let Some(timeout) = timeout {
        runner_limits.timeout = timeout;
    }
    runner_limits.idle_timeout = limits
        .idle_timeout
        .as_ref()
        .or(context.run.workflow.defaults.limits.idle_timeout.as_ref())
        .map(|at| at.value);
    let program = argv.remove(0);
    let spec = ProcessSpec {
        kind: ProcessKind::Validator,
        agent: id.clone(),
        program,
        args: argv,
        cwd: plan.cwd.clone(),
        env: environment,
        stdin: Vec::new(),
        stdout_path: folder.join("stdout.txt"),
        stderr_path: folder.join("stderr.txt"),
        format: CaptureFormat::Text,
        limits: runner_limits,
        remaining_budget_usd: None,
    };
    let step = (context.step_id().to_owned(), context.visit);
    context.recorder.event(
        EventType::RunnerStarted,
        Some((&step.0, step.1)),
        payload([
            ("validator", id.clone().into()),
            ("argv", command.argv.clone().into()),
        ]),
    )?;
    let cancellation = context.run.cancellation.clone();
    // Recorded in the validator's folder while it runs: how `resume` ends the group if this
    // process dies meanwhile.
    let record = folder.join(crate::runner::PROCESS_GROUP_FILE);
    let supervised = context
        .run
        .runtime
        .block_on(async move {
            tokio::spawn(async move {
                crate::runner::supervise_recorded(spec, cancellation, Some(&record)).await
            })
            .await
        })
        .map_err(|error| OpcodeError::Other(format!("the validator task failed: {error}")))??;
    let relative = |file: &str| format!("validators/{id}/{file}");
    let tampered = check_validator_folder(&folder, &format!("validators/{id}"))?;
    let mut artifacts = vec![
        context.artifact(
            ArtifactRole::ValidationStdout,
            &relative("stdout.txt"),
            "text/plain",
            true,
        ),
        context.artifact(
            ArtifactRole::ValidationStderr,
            &relative("stderr.txt"),
            "text/plain",
            true,
        ),
    ];
    let Collected {
        copied: collected,
        missing,
        refused,
        skipped,
    } = collect_artifacts(&plan.cwd, &plan.globs, (&folder, "artifacts"));
    artifacts.extend(collected.iter().map(|path| {
        context.artifact(
            ArtifactRole::ValidationArtifact,
            &relative(&format!("artifacts/{path}")),
            "application/octet-stream",
            false,
        )
    }));
    let (report, report_problem) =
        harness_report(&plan, &collected, &folder.join("artifacts"), &visit_dir);
    if let Some((path, _)) = &report {
        let listed = match path {
            ReportPath::Collected(path) => relative(&format!("artifacts/{path}")),
            ReportPath::InStepFolder(path) => path.clone(),
        };
        artifacts.push(context.artifact(
            ArtifactRole::HarnessReport,
            &listed,
            "application/json",
            true,
        ));
    }
    let proposed_goldens = report.as_ref().is_some_and(|(_, value)| {
        value["proposed_goldens"]
            .as_array()
            .is_some_and(|goldens| !goldens.is_empty())
    });
    if supervised.outcome != Outcome::Completed
        && let Some(module) = missing_module(&command.argv, &folder)
    {
        return Err(OpcodeError::ValidatorCouldNotRun {
            validator: id,
            command: command.argv.join(" "),
            module,
        });
    }
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
            .any(|name| entry.starts_with(&format!("`{}` ", relative(name))))
    }) {
        outcome = Outcome::Error;
        cause = format!("evidence_tampered: {lost}");
    } else if outcome == Outcome::Completed && (!missing.is_empty() || report_problem.is_some()) {
        outcome = Outcome::Error;
        cause = report_problem
            .unwrap_or_else(|| format!("declared artifacts missing: {}", missing.join(", ")));
    }
    let duration = supervised
        .ended_at
        .duration_since(supervised.started_at)
        .unwrap_or_default();
    let record = serde_json::json!({
        "argv": command.argv,
        "cwd": plan.cwd.display().to_string(),
        "detected": command.detected,
        "outcome": outcome.as_str(),
        "cause": cause,
        "exit_code": supervised.exit_code,
        "signal": supervised.signal,
        "duration_ms": duration.as_millis() as u64,
        "timeout_ms": timeout.map(|timeout| timeout.as_millis() as u64),
        "artifacts": collected,
        "missing_artifacts": missing,
        "refused_artifacts": refused.iter().map(|(path, reason)| serde_json::json!({ "path": path, "reason": reason })).collect::<Vec<_>>(),
        "skipped_artifacts": skipped.iter().map(|(path, reason)| serde_json::json!({ "path": path, "reason": reason })).collect::<Vec<_>>(),
        "harness_report": report.as_ref().map(|(path, _)| path.as_str()),
        "proposed_goldens": proposed_goldens,
        "network": network,
        "dropped_env": dropped,
    });
    Ok(Ran {
        id,
        outcome,
        record,
        artifacts,
        proposed_goldens,
        tampered,
    })
}

const MIB: u64 = 1024 * 1024;

/// The Python module a `python -m` validator's interpreter could not find, read from the
/// start of what it printed (the interpreter says it before anything else runs).
fn missing_module(argv: &[String], folder: &Path) -> Option<String> {
    use std::io::Read as _;
    for name in ["stderr.txt", "stdout.txt"] {
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

/// The most bytes a validator's stdout (and its stderr) keeps per visit: its own
/// `max_output_mib`, or the agents' default.
fn output_limit_bytes(spec: Option<&ValidatorSpec>) -> u64 {
    spec.and_then(|spec| spec.max_output_mib.as_ref())
        .map_or(crate::runner::DEFAULT_MAX_OUTPUT_MIB, |mib| {
            u64::from(mib.value)
        })
        * MIB
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

/// The validator's program by path, looked up on its own `PATH` in its working directory.
fn isolated_program(
    id: &str,
    command: &Command,
    environment: &[(String, String)],
    plan: &Plan,
) -> Result<String, OpcodeError> {
    let program = command.argv.first().map_or("", String::as_str);
    crate::runner::supervisor::find_program(program, environment, &plan.cwd)
        .map(|path| path.display().to_string())
        .ok_or_else(|| {
            let missing = std::io::Error::from(std::io::ErrorKind::NotFound);
            crate::runner::RunnerError::spawn(ProcessKind::Validator, id, program, missing).into()
        })
}

/// The validator's own `timeout`, else the step's, else the workflow default.
fn effective_timeout(
    plan: &Plan,
    limits: &Limits,
    context: &StepContext<'_>,
) -> Option<std::time::Duration> {
    let defaults = &context.run.workflow.defaults.limits;
    plan.timeout
        .or(limits.timeout.as_ref().map(|at| at.value))
        .or(defaults.timeout.as_ref().map(|at| at.value))
}

/// The largest artifact file copied, in bytes.
const MAX_ARTIFACT_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// The most artifact bytes one validator may copy.
const MAX_ARTIFACT_TOTAL_BYTES: u64 = 512 * 1024 * 1024;

/// What artifact capture did.
#[derive(Debug, Default)]
struct Collected {
    /// Relative paths copied.
    copied: Vec<String>,
    /// Literal (wildcard-free) or refused patterns that produced nothing.
    missing: Vec<String>,
    /// Patterns and files refused because they leave the worktree, with the reason.
    refused: Vec<(String, String)>,
    /// Files left out by the size caps, with the reason.
    skipped: Vec<(String, String)>,
}

/// Copies files matching the globs (relative to `root`) into `base/name`. Patterns with `..` or an
/// absolute path, and files whose real path leaves `root` (symlinks out), are refused and
/// recorded; the per-file and per-validator size caps are recorded when hit.
fn collect_artifacts(root: &Path, globs: &[String], (base, name): (&Path, &str)) -> Collected {
    let mut collected = Collected::default();
    let Ok(real_root) = root.canonicalize() else {
        collected.missing = globs.to_vec();
        return collected;
    };
    let files = if globs.is_empty() {
        Vec::new()
    } else {
        walk(&real_root)
    };
    let mut total: u64 = 0;
    for pattern in globs {
        let escapes = Path::new(pattern).is_absolute()
            || Path::new(pattern)
                .components()
                .any(|component| matches!(component, std::path::Component::ParentDir));
        if escapes {
            collected.refused.push((
                pattern.clone(),
                "the pattern leaves the working directory".into(),
            ));
            collected.missing.push(pattern.clone());
            continue;
        }
        let Ok(glob) = globset::GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map(|glob| glob.compile_matcher())
        else {
            collected.missing.push(pattern.clone());
            continue;
        };
        let mut matched = false;
        for relative in files.iter().filter(|relative| glob.is_match(relative)) {
            if collected.copied.contains(relative) {
                matched = true;
                continue;
            }
            let source = real_root.join(relative);
            if !source
                .canonicalize()
                .is_ok_and(|real| real.starts_with(&real_root))
            {
                collected.refused.push((
                    relative.clone(),
                    "a symlink to outside the working directory".into(),
                ));
                continue;
            }
            let Ok(size) = std::fs::metadata(&source).map(|metadata| metadata.len()) else {
                continue;
            };
            if size > MAX_ARTIFACT_FILE_BYTES
                || total + size > MAX_ARTIFACT_TOTAL_BYTES
                || collected.copied.len() >= MAX_ARTIFACT_FILES
            {
                collected.skipped.push((
                    relative.clone(),
                    format!("{size} bytes: over the artifact size or count caps"),
                ));
                continue;
            }
            // The copy lands in the step folder, where what the validator ran (the agent's
            // code) may have put links: folders on the way are real ones, the file a new one,
            // and only a regular file is read (a FIFO would block the copy).
            let mut folders = vec![name];
            folders.extend(
                Path::new(relative)
                    .parent()
                    .into_iter()
                    .flat_map(Path::components)
                    .filter_map(|part| part.as_os_str().to_str()),
            );
            let copied = crate::artifacts::safe_files::create_real_folders(base, &folders)
                .and_then(|(folder, _)| {
                    let target = folder.join(Path::new(relative).file_name().unwrap_or_default());
                    crate::artifacts::safe_files::copy_regular(&source, &target, size)
                })
                .is_ok();
            if copied {
                matched = true;
                total += size;
                collected.copied.push(relative.clone());
            }
        }
        if !matched && !pattern.contains(['*', '?', '[', '{']) {
            collected.missing.push(pattern.clone());
        }
    }
    collected
}

/// Relative paths of the files under `root` (symlinks listed, not followed), bounded.
fn walk(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(directory) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&directory) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_name() == ".git" {
                continue;
            }
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => pending.push(path),
                Ok(_) => {
                    if let Ok(relative) = path.strip_prefix(root) {
                        found.push(relative.to_string_lossy().into_owned());
                    }
                }
                Err(_) => {}
            }
            if found.len() > 50 * MAX_ARTIFACT_FILES {
                return found;
            }
        }
    }
    found
}

/// Where a harness report was found: among the validator's collected artifacts (relative to
/// its `artifacts/` folder), or written by the harness straight into the step's folder
/// (`report: "${step_dir}/…"`, relative to the visit folder), so it never enters the worktree.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ReportPath {
    Collected(String),
    InStepFolder(String),
}

impl ReportPath {
    fn as_str(&self) -> &str {
        match self {
            ReportPath::Collected(path) | ReportPath::InStepFolder(path) => path,
        }
    }
}

/// The harness report: the `report` path, else a collected `harness_report.json`.
/// A relative `report` names a collected artifact; an absolute one must lie in the step's
/// visit folder (`${step_dir}`). The kernel checks that it parses and has `suite_id`, `cases`
/// and `summary`, and that it matches the schema.
fn harness_report(
    plan: &Plan,
    collected: &[String],
    folder: &Path,
    visit_dir: &Path,
) -> (Option<(ReportPath, serde_json::Value)>, Option<String>) {
    let wanted = plan.report.clone().or_else(|| {
        collected
            .iter()
            .find(|path| path.ends_with("harness_report.json"))
            .cloned()
    });
    let Some(path) = wanted else {
        return (None, None);
    };
    let (file, found) = if Path::new(&path).is_absolute() {
        let inside = visit_dir.canonicalize().ok().and_then(|visit| {
            let real = Path::new(&path).canonicalize().ok()?;
            let relative = real.strip_prefix(&visit).ok()?.to_str()?.replace('\\', "/");
            Some((real, relative))
        });
        match inside {
            Some((real, relative)) => (real, ReportPath::InStepFolder(relative)),
            None if Path::new(&path).exists() => {
                return (
                    None,
                    Some(format!(
                        "harness report `{path}` is outside the step's folder: write it under `${{step_dir}}`, or in the worktree and list it in `artifacts`"
                    )),
                );
            }
            None => return (None, Some(format!("harness report `{path}` is missing"))),
        }
    } else {
        (folder.join(&path), ReportPath::Collected(path.clone()))
    };
    // In the step folder or the worktree, both the agent's: a FIFO must not block the read,
    // nor a link to `/dev/zero` fill memory.
    let text =
        crate::artifacts::safe_files::read_text_following(&file, MAX_ARTIFACT_FILE_BYTES).ok();
    let Some(text) = text else {
        return (None, Some(format!("harness report `{path}` is missing")));
    };
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(value) => {
            let absent: Vec<&str> = ["suite_id", "cases", "summary"]
                .into_iter()
                .filter(|key| value.get(key).is_none())
                .collect();
            let problems = crate::artifacts::harness_report_problems(&value);
            if absent.is_empty() && problems.is_empty() {
                (Some((found, value)), None)
            } else if absent.is_empty() {
                let message = format!(
                    "harness report `{path}` does not match `tnh-conductor schema harness-report`: {}",
                    problems.join("; ")
                );
                (None, Some(message))
            } else {
                (
                    None,
                    Some(format!(
                        "harness report `{path}` lacks {}",
                        absent.join(", ")
                    )),
                )
            }
        }
        Err(error) => (
            None,
            Some(format!(
                "harness report `{path}` is not valid JSON: {error}"
            )),
        ),
    }
}
