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
    /// The async runtime processes are supervised on.
    pub runtime: tokio::runtime::Runtime,
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

    /// `artifacts/<step>/<visit>/`, created.
    pub fn visit_dir(&self) -> Result<PathBuf, crate::artifacts::ArtifactsError> {
        let dir = self
            .recorder
            .run_dir()
            .visit_dir(self.step_id(), self.visit);
        std::fs::create_dir_all(&dir).map_err(crate::artifacts::ArtifactsError::io(
            "create the step folder",
            &dir,
        ))?;
        Ok(dir)
    }

    /// An artifact entry for a file in the visit folder.
    pub fn artifact(
        &self,
        role: ArtifactRole,
        file: &str,
        media_type: &str,
        required: bool,
    ) -> ArtifactEntry {
        let path = format!("artifacts/{}/{}/{file}", self.step_id(), self.visit);
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

    /// The read-only `ctx` scripts and expressions see (DESIGN §9).
    pub fn script_context(&self) -> Result<crate::script::Context, crate::script::ScriptError> {
        let run_dir = self.recorder.run_dir();
        let record = self.workspace.record();
        let defaults = &self.run.workflow.defaults;
        let steps: serde_json::Map<String, serde_json::Value> = self
            .state
            .last_outcomes
            .iter()
            .map(|(step, outcome)| (step.clone(), serde_json::json!({ "outcome": outcome })))
            .collect();
        crate::script::Context::new(serde_json::json!({
            "run": {
                "id": self.state.run_id,
                "dir": run_dir.root().display().to_string(),
                "workflow": self.state.workflow_id,
                "started_at": self.run.started_at,
            },
            "params": self.run.params,
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
        }))
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

    /// A manifest for this visit.
    pub fn manifest(
        &self,
        termination: &str,
        evidence_summary: serde_json::Value,
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
            evidence_summary,
            artifacts,
            timings_ms: None,
        }
    }
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
