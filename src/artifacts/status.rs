//! `metadata.json`, `status.json` and `final-state.txt`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where a run is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LifecycleState {
    /// A process is driving it.
    Running,
    /// It waits at a blocking gate.
    Waiting,
    /// It stopped without an end: interrupted, or a process died; `resume` continues it.
    Blocked,
    /// A gate was decided (approved, rejected or timed out) and routed to a step that has not
    /// started: nothing is wrong, `resume` continues the run.
    Decided,
    /// It ended with a runtime error or a failure STOP.
    Failed,
    /// It reached a success STOP.
    Completed,
    /// The operator ended it (`runs abandon`): nothing of it runs, resumes or can be decided.
    Abandoned,
}

impl LifecycleState {
    /// The state's name.
    pub fn name(self) -> &'static str {
        match self {
            LifecycleState::Running => "running",
            LifecycleState::Waiting => "waiting",
            LifecycleState::Blocked => "blocked",
            LifecycleState::Decided => "decided",
            LifecycleState::Failed => "failed",
            LifecycleState::Completed => "completed",
            LifecycleState::Abandoned => "abandoned",
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Termination {
    /// `success`, `failure`, `error` or `abandoned`.
    pub kind: String,
    /// The last step.
    pub step_id: String,
    /// Why.
    pub reason: String,
}

/// `metadata.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunMetadata {
    /// The format's version.
    pub schema_version: u32,
    /// The run.
    pub run_id: String,
    /// The workflow.
    pub workflow_id: String,
    /// The workflow's version.
    pub workflow_version: i64,
    /// The workflow file.
    pub workflow_path: String,
    /// RFC 3339.
    pub started_at: String,
    /// The parent of run directories (e.g. `.tnh/run/`).
    pub artifacts_root: String,
    /// The first step.
    pub entry_step: String,
    /// RFC 3339, once ended.
    pub ended_at: Option<String>,
    /// The last step run.
    pub last_step_id: Option<String>,
    /// How it ended.
    pub termination: Option<Termination>,
    /// Versions of the formats in play.
    pub schema_versions: BTreeMap<String, u32>,
    /// The operator's repository.
    pub repo_root: String,
    /// The run's worktree.
    pub worktree_path: String,
    /// The work branch.
    pub branch: String,
    /// The ref the run started from.
    pub base_ref: String,
    /// Its commit.
    pub base_sha: String,
    /// The run's parameters.
    pub params: serde_json::Map<String, serde_json::Value>,
    /// The planner chosen with `run --planner`, which `resume` keeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planner_override: Option<String>,
    /// SHA-256 of the workflow file the run started with (updated when a change is recorded):
    /// a run that continues with a different file records a `workflow_changed` event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_sha256: Option<String>,
    /// SHA-256 of the configuration file the run started with (`none` without one; updated
    /// when a change is recorded): a run resumed with different agents, validators or
    /// planners records a `config_changed` event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_sha256: Option<String>,
    /// The configuration file given with `--config` when the run started, absolute: `resume`,
    /// gate decisions and the `tnh` commands read it (unless `--config` names another). Absent
    /// when the run uses the repository's `.tnh/config.yaml`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_path: Option<String>,
    /// The repository modules (`.tnh/scripts/…`) the workflow's script loaded when the run
    /// started, each with the SHA-256 of its text: their text is pinned under `scripts/` in
    /// the run directory, and `resume` loads those copies, never the worktree's (which agents
    /// change). Absent for a run that has not loaded its script yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script_modules: Option<BTreeMap<String, String>>,
    /// The repository's prompt files (`.tnh/prompts/**/*.md`, relative to the repository
    /// root) and the SHA-256 of each, as the run started (updated when a change is recorded):
    /// a run that continues with different ones records a `prompts_changed` event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts_sha256: Option<BTreeMap<String, String>>,
    /// The local branch the run started from (the operator's current branch for a `HEAD`
    /// base, the branch a `--base` named), where `land` brings the result by default. Absent
    /// when the base was a tag, a commit or a detached HEAD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_branch: Option<String>,
    /// The commit a success STOP made of the run's change on its work branch (parent: the
    /// base). Absent for a run that did not succeed or changed nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_commit: Option<String>,
    /// Each `land` of the run, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub landings: Vec<Landing>,
}

/// One `tnh-conductor land` of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Landing {
    /// RFC 3339.
    pub at: String,
    /// The branch the result was brought into; absent for a push alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub into: Option<String>,
    /// `fast-forward`, `merge` or `squash`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The branch's tip after the landing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The remote the run's branch was pushed to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
    /// The pull request `gh pr create` opened (its URL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<String>,
}

/// `status.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunStatus {
    /// The format's version.
    pub schema_version: u32,
    /// The run.
    pub run_id: String,
    /// The workflow.
    pub workflow_id: String,
    /// Where the run is in its life.
    pub lifecycle_state: LifecycleState,
    /// The step running, waiting or last run.
    pub current_step_id: Option<String>,
    /// Its visit.
    pub visit: Option<u32>,
    /// RFC 3339 of the last change.
    pub updated_at: String,
    /// Why the run waits, failed or stopped.
    pub reason: Option<String>,
    /// The process driving the run, while running.
    pub pid: Option<u32>,
    /// Transitions so far.
    pub transitions: u32,
}

impl RunStatus {
    /// The one line of `final-state.txt`: e.g. `completed success done`, `waiting gate final_review`.
    pub fn final_state_line(&self, detail: &str) -> String {
        if self.lifecycle_state == LifecycleState::Running {
            return "running\n".to_owned();
        }
        let step = self.current_step_id.as_deref().unwrap_or("-");
        format!("{} {detail} {step}\n", self.lifecycle_state.name())
    }
}
