//! What an executor may use: the run's fixed context, the workspace, the recorder, the state,
//! and the step being visited.

use std::path::PathBuf;

use crate::artifacts::{ArtifactEntry, ArtifactRole, SCHEMA_VERSION, StepManifest, now};
use crate::config::Config;
use crate::kernel::recorder::Recorder;
use crate::kernel::{RunState, StepReport};
use crate::prompt::Catalog;
use crate::runner::{Cancellation, HostEnv};
use crate::workflow::model::{Step, Workflow};
use crate::workspace::Workspace;

/// Fixed for the whole run.
#[derive(Debug)]
pub struct RunContext {
    /// The workflow being run.
    pub workflow: Workflow,
    /// The configuration.
    pub config: Config,
    /// The prompt library.
    pub catalog: Catalog,
    /// The run's parameters.
    pub params: serde_json::Map<String, serde_json::Value>,
    /// The conductor's environment (filtered before any child sees it).
    pub host_env: HostEnv,
    /// Fires when the operator presses Ctrl-C.
    pub cancellation: Cancellation,
    /// The process's runtime, processes are supervised on (see `runner::runtime`).
    pub runtime: tokio::runtime::Handle,
    /// The workflow's compiled script and the expression evaluator.
    pub script: crate::script::ScriptHost,
    /// When the run started (RFC 3339).
    pub started_at: String,
}

/// One visit of one step.
#[derive(Debug)]
pub struct StepContext<'a> {
    /// The run.
    pub run: &'a RunContext,
    /// The run's worktree.
    pub workspace: &'a Workspace,
    /// The run directory.
    pub recorder: &'a mut Recorder,
    /// The state before the visit.
    pub state: &'a RunState,
    /// The step.
    pub step: &'a Step,
    /// The visit number.
    pub visit: u32,
    /// When the visit started (RFC 3339).
    pub started_at: String,
}

impl StepContext<'_> {
    /// The step id.
    pub fn step_id(&self) -> &str {
        self.step.id.value.as_str()
    }

    /// `artifacts/<step>/<visit>/`, created as real folders: an agent of an earlier step knows
    /// the run directory and may have put a link to elsewhere in the place of a folder of a
    /// visit to come; such a link is replaced, never followed.
    pub fn visit_dir(&self) -> Result<PathBuf, crate::artifacts::ArtifactsError> {
        self.recorder
            .run_dir()
            .create_visit_dir(self.step_id(), self.visit)
    }

    /// An artifact entry for a file in the visit folder.
    pub fn artifact(
        &self,
        role: ArtifactRole,
        file: &str,
        media_type: &str,
        required: bool,
    ) -> ArtifactEntry {
        let path = crate::artifacts::RunDir::visit_file_relative(self.step_id(), self.visit, file);
        ArtifactEntry {
            role,
            path,
            media_type: media_type.to_owned(),
            required,
            important: false,
        }
    }

    /// The `TNH_*` variables agents and validators see.
    pub fn tnh_variables(&self) -> std::collections::BTreeMap<String, String> {
        let run_dir = self.recorder.run_dir();
        let step_dir = run_dir.visit_dir(self.step_id(), self.visit);
        [
            ("TNH_RUN_ID", self.state.run_id.clone()),
            ("TNH_RUN_DIR", run_dir.root().display().to_string()),
            ("TNH_STEP_ID", self.step_id().to_owned()),
            ("TNH_STEP_DIR", step_dir.display().to_string()),
            ("TNH_WORKTREE", self.workspace.path().display().to_string()),
            ("TNH_BASE_SHA", self.workspace.record().base_sha.clone()),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value))
        .collect()
    }

    /// The read-only `ctx` scripts and expressions see, with the workspace changes
    /// since `pre_run` behind `changed_files()` and `diff_stat()`.
    ///
    /// Built once per visit (the host keeps it), since every validator field and every
    /// expression of the visit asks for it. The changes are those of the worktree as the visit
    /// found it (the last checkpoint's tree against `pre_run`'s), read from git's objects only
    /// when a script first asks, and not at all when no step has changed the worktree yet.
    pub fn script_context(&self) -> Result<crate::script::Context, crate::script::ScriptError> {
        let key = format!(
            "{}/{}/{}/{}",
            self.state.run_id,
            self.step_id(),
            self.visit,
            self.state.transitions
        );
        self.run.script.visit_context(&key, || {
            let json = self.script_json();
            let Some(fingerprint) = &self.state.fingerprint else {
                // No checkpoint yet: no step has run, and the worktree is as `pre_run` left it.
                return crate::script::Context::new(json);
            };
            let workspace = self.workspace.clone();
            let tree = fingerprint.tree.clone();
            crate::script::Context::with_deferred_changes(
                json,
                format!("pre_run..{tree}"),
                Box::new(move || {
                    let pre_run = workspace.pre_run().map_err(|error| error.to_string())?;
                    let files = workspace
                        .changes_between(&pre_run.tree, &tree)
                        .map_err(|error| error.to_string())?;
                    Ok(files.iter().map(Into::into).collect())
                }),
            )
        })
    }

    /// The `ctx` of a policy `check` run on a step's capture: `changed_files()` and
    /// `diff_stat()` are the changes the capture recorded (the `workspace_status` the policy
    /// judges), not recomputed.
    pub fn script_context_with_changes(
        &self,
        changes: &[crate::workspace::ChangedFile],
    ) -> Result<crate::script::Context, crate::script::ScriptError> {
        crate::script::Context::with_changes(
            self.script_json(),
            changes.iter().map(Into::into).collect(),
        )
    }

    /// The JSON behind `ctx`: run, params, step, per-step outcomes, evidence and final
    /// responses, workspace, defaults, the last planner decision and the last harness report.
    fn script_json(&self) -> serde_json::Value {
        let run_dir = self.recorder.run_dir();
        let record = self.workspace.record();
        let defaults = &self.run.workflow.defaults;
        let manifests = self.latest_manifests();
        let mut steps: std::collections::BTreeMap<String, ScriptStep> = self
            .state
            .last_outcomes
            .iter()
            .map(|(step, outcome)| {
                let view = ScriptStep {
                    outcome: Some(outcome.clone()),
                    ..ScriptStep::default()
                };
                (step.clone(), view)
            })
            .collect();
        for manifest in &manifests {
            let mut artifacts = std::collections::BTreeMap::<String, Vec<String>>::new();
            for entry in &manifest.artifacts {
                let role = serde_json::to_value(entry.role)
                    .ok()
                    .and_then(|role| role.as_str().map(str::to_owned))
                    .unwrap_or_default();
                artifacts.entry(role).or_default().push(entry.path.clone());
            }
            let step = steps.entry(manifest.step_id.clone()).or_default();
            step.status = Some(manifest.termination.clone());
            step.visit = Some(manifest.visit);
            step.evidence = Some(manifest.evidence_summary.clone());
            step.artifacts = Some(artifacts);
            step.final_response = Some(
                manifest
                    .artifact(ArtifactRole::RunnerFinalResponse)
                    .and_then(|entry| final_response(&run_dir.root().join(&entry.path))),
            );
        }
        let latest = |role: ArtifactRole| {
            manifests
                .iter()
                .rev()
                .find_map(|manifest| manifest.artifact(role))
                .and_then(|entry| {
                    crate::artifacts::read_json::<serde_json::Value>(
                        &run_dir.root().join(&entry.path),
                        "artifact",
                    )
                    .ok()
                })
                .unwrap_or(serde_json::Value::Null)
        };
        // Every declared parameter is there: one declared without a default and not given is
        // `null` (`()` in Rhai, empty text in `${params.NAME}`), never missing.
        let mut params = self.run.params.clone();
        for param in &self.run.workflow.params {
            params
                .entry(param.name.value.clone())
                .or_insert(serde_json::Value::Null);
        }
        serde_json::json!({
            "run": {
                "id": self.state.run_id,
                "dir": run_dir.root().display().to_string(),
                "workflow": self.state.workflow_id,
                "started_at": self.run.started_at,
            },
            "params": params,
            "step": {
                "id": self.step_id(),
                "visit": self.visit,
                "dir": run_dir.visit_dir(self.step_id(), self.visit).display().to_string(),
            },
            "steps": steps,
            "workspace": {
                "root": self.workspace.path().display().to_string(),
                "repo": record.repo_root.display().to_string(),
                "branch": record.branch,
                "base_sha": record.base_sha,
            },
            "defaults": {
                "component_kind": defaults.component_kind.as_ref().map(|kind| crate::workflow::model::ComponentKind::NAMES[kind.value as usize]),
                "eval_profile": defaults.eval_profile.as_ref().map(|profile| crate::workflow::model::EvalProfile::NAMES[profile.value as usize]),
            },
            "planner": latest(ArtifactRole::PlannerDecision),
            "harness_report": latest(ArtifactRole::HarnessReport),
        })
    }

    /// The latest manifest of every step that ran, oldest first (the order their visits ended):
    /// where later evidence is looked up by role.
    pub fn latest_manifests(&self) -> Vec<StepManifest> {
        let run_dir = self.recorder.run_dir();
        let mut manifests: Vec<StepManifest> = self
            .run
            .workflow
            .steps
            .iter()
            .filter_map(|step| {
                crate::artifacts::read_json(
                    &run_dir.step_manifest(step.id.value.as_str()),
                    "manifest",
                )
                .ok()
            })
            .collect();
        manifests.sort_by(|left, right| left.ended_at.cmp(&right.ended_at));
        manifests
    }

    /// A manifest for this visit, with the opcode's evidence summary.
    pub fn manifest(
        &self,
        termination: &str,
        evidence: &impl serde::Serialize,
        artifacts: Vec<ArtifactEntry>,
    ) -> StepManifest {
        StepManifest {
            schema_version: SCHEMA_VERSION,
            step_id: self.step_id().to_owned(),
            opcode: self.step.body.opcode().name().to_owned(),
            visit: self.visit,
            started_at: self.started_at.clone(),
            ended_at: now(),
            termination: termination.to_owned(),
            evidence_summary: crate::artifacts::evidence::summary_value(evidence),
            artifacts,
            timings_ms: None,
        }
    }
}

/// The most of an agent's final response `ctx.steps.<id>.final_response` holds; a longer one
/// is cut at a character boundary and ends with a line saying so.
pub const MAX_FINAL_RESPONSE_BYTES: usize = 256 * 1024;

/// An agent step's final response (`final_response.md`), at most `MAX_FINAL_RESPONSE_BYTES`.
fn final_response(path: &std::path::Path) -> Option<String> {
    // Read back from a step folder a later agent could write: a regular file only.
    let text = crate::artifacts::safe_files::read_regular_text(path).ok()?;
    if text.len() <= MAX_FINAL_RESPONSE_BYTES {
        return Some(text);
    }
    let mut end = MAX_FINAL_RESPONSE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Some(format!(
        "{}\n[… truncated: the final response is {} bytes; the whole text is {}]\n",
        &text[..end],
        text.len(),
        path.display()
    ))
}

/// What a visit produced.
#[derive(Debug)]
pub struct StepResult {
    /// What routes.
    pub report: StepReport,
    /// The visit's manifest.
    pub manifest: StepManifest,
    /// Cost reported by an agent, in US dollars.
    pub cost_usd: f64,
    /// A blocking gate: the run waits instead of routing.
    pub waiting: bool,
    /// The worktree's fingerprint as the executor last read it (tree and HEAD), when nothing
    /// can have changed since (RUN_AGENT: the agent's processes are gone); the checkpoint
    /// reuses it instead of reading the worktree again.
    pub fingerprint: Option<crate::workspace::Fingerprint>,
}

/// One step as a script's `ctx.steps.NAME` shows it: the outcome it last routed on, and for a
/// step with a manifest its status, visit, evidence summary, artifacts by role and final
/// response.
#[derive(Debug, Default, serde::Serialize)]
struct ScriptStep {
    /// The outcome it last routed on (`null` when the state has none).
    outcome: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    visit: Option<u32>,
    /// The step's evidence summary: a script value, whatever its opcode wrote.
    #[serde(skip_serializing_if = "Option::is_none")]
    evidence: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    artifacts: Option<std::collections::BTreeMap<String, Vec<String>>>,
    /// The agent's final response (`null` when it has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    final_response: Option<Option<String>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_final_response_is_given_whole_or_cut_at_a_character_with_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let short = dir.path().join("short.md");
        std::fs::write(&short, "the plan\n").unwrap();
        assert_eq!(final_response(&short).as_deref(), Some("the plan\n"));
        let long = dir.path().join("long.md");
        std::fs::write(&long, "é".repeat(MAX_FINAL_RESPONSE_BYTES)).unwrap();
        let cut = final_response(&long).unwrap();
        let (kept, note) = cut.split_once("\n[… truncated: ").unwrap();
        assert_eq!(kept.len(), MAX_FINAL_RESPONSE_BYTES);
        assert!(kept.chars().all(|c| c == 'é'));
        assert!(note.contains(&format!("{} bytes", 2 * MAX_FINAL_RESPONSE_BYTES)));
        assert_eq!(final_response(&dir.path().join("missing.md")), None);
    }
}
