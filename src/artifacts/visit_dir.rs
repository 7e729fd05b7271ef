//! The files of one visit's folder, `artifacts/<step_id>/<visit>/`: every name is here, so a
//! reader and a writer cannot disagree on one.

use std::path::{Path, PathBuf};

/// Names every file a visit's folder can hold.
macro_rules! visit_files {
    ($($(#[$doc:meta])* $method:ident => $constant:ident = $name:literal;)*) => {
        impl VisitDir {
            $(
                $(#[$doc])*
                pub const $constant: &'static str = $name;
            )*
            $(
                $(#[$doc])*
                pub fn $method(&self) -> PathBuf {
                    self.root.join(Self::$constant)
                }
            )*

            /// The name of every file above, for a check that no other module spells one.
            pub const ALL: &'static [&'static str] = &[$(Self::$constant),*];
        }
    };
}

/// `artifacts/<step_id>/<visit>/` of a run directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VisitDir {
    root: PathBuf,
}

impl VisitDir {
    /// The visit folder at a known path.
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The folder itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `validators/`: a validation's folder of validator folders.
    pub const VALIDATORS: &'static str = "validators";

    /// `artifacts/` of a validator's folder: the files it collected from the worktree.
    pub const VALIDATOR_ARTIFACTS: &'static str = "artifacts";

    /// The start of the name of a `tnh test|lint|typecheck` log (`tnh-<name>[.<N>].log`).
    pub const TOOL_LOG_PREFIX: &'static str = "tnh-";

    /// The end of the name of a `tnh test|lint|typecheck` log.
    pub const TOOL_LOG_SUFFIX: &'static str = ".log";

    /// `validators/`.
    pub fn validators_dir(&self) -> PathBuf {
        self.root.join(Self::VALIDATORS)
    }

    /// `validators/<id>/`: one validator's captured output.
    pub fn validator_dir(&self, validator_id: &str) -> PathBuf {
        self.validators_dir().join(validator_id)
    }

    /// `validators/<id>/stdout.txt`: a validator's output.
    pub fn validator_stdout(&self, validator_id: &str) -> PathBuf {
        self.validator_dir(validator_id).join(Self::STDOUT_TXT)
    }

    /// `validators/<id>/stderr.txt`.
    pub fn validator_stderr(&self, validator_id: &str) -> PathBuf {
        self.validator_dir(validator_id).join(Self::STDERR_TXT)
    }

    /// `validators/<id>/artifacts/`: what a validator collected.
    pub fn validator_artifacts(&self, validator_id: &str) -> PathBuf {
        self.validator_dir(validator_id)
            .join(Self::VALIDATOR_ARTIFACTS)
    }

    /// `validators/<id>`, relative to the visit's folder.
    pub fn validator_dir_relative(validator_id: &str) -> String {
        format!("{}/{validator_id}", Self::VALIDATORS)
    }

    /// `validators/<id>/<name>` as a manifest records it, relative to the visit's folder.
    pub fn validator_relative(validator_id: &str, name: &str) -> String {
        format!("{}/{name}", Self::validator_dir_relative(validator_id))
    }

    /// `validators/<id>/artifacts/<path>`: a file a validator collected, relative to the
    /// visit's folder.
    pub fn validator_artifact_relative(validator_id: &str, path: &str) -> String {
        let name = format!("{}/{path}", Self::VALIDATOR_ARTIFACTS);
        Self::validator_relative(validator_id, &name)
    }
}

visit_files! {
    /// `manifest.json`: outcome, evidence summary, artifact list.
    manifest => MANIFEST = "manifest.json";
    /// `prompt.md`: the rendered prompt.
    prompt => PROMPT = "prompt.md";
    /// `inputs.json`: the values the prompt was rendered with.
    prompt_inputs => PROMPT_INPUTS = "inputs.json";
    /// `stdout.jsonl`: a JSON-speaking agent CLI's output (claude, codex, gemini).
    stdout_jsonl => STDOUT_JSONL = "stdout.jsonl";
    /// `stdout.txt`: a command's output.
    stdout_txt => STDOUT_TXT = "stdout.txt";
    /// `stderr.txt`.
    stderr_txt => STDERR_TXT = "stderr.txt";
    /// `transcript.md`: the agent's session, readable.
    transcript => TRANSCRIPT = "transcript.md";
    /// `final_response.md`: the agent's last answer.
    final_response => FINAL_RESPONSE = "final_response.md";
    /// `runner_metadata.json`: how the agent ran.
    runner_metadata => RUNNER_METADATA = "runner_metadata.json";
    /// `runlog.ndjson`: the agent's notes (`tnh runlog append`).
    runlog => RUNLOG = "runlog.ndjson";
    /// `workspace.diff`: what the step changed.
    workspace_diff => WORKSPACE_DIFF = "workspace.diff";
    /// `workspace_status.json`: the changed paths.
    workspace_status => WORKSPACE_STATUS = "workspace_status.json";
    /// `policy_summary.json`: the change judged against the policy.
    policy_summary => POLICY_SUMMARY = "policy_summary.json";
    /// `validation_report.json`: each validator's result.
    validation_report => VALIDATION_REPORT = "validation_report.json";
    /// `harness_report.json`: a test harness's report.
    harness_report => HARNESS_REPORT = "harness_report.json";
    /// `planner_input.json`: the envelope given to the planner.
    planner_input => PLANNER_INPUT = "planner_input.json";
    /// `planner_prompt.md`: an agent planner's prompt.
    planner_prompt => PLANNER_PROMPT = "planner_prompt.md";
    /// `planner_decision.json`: the planner's decision.
    planner_decision => PLANNER_DECISION = "planner_decision.json";
    /// `planner_attempts.json`: each try of an external planner.
    planner_attempts => PLANNER_ATTEMPTS = "planner_attempts.json";
    /// `gate_request.json`: what a gate asks its reviewers.
    gate_request => GATE_REQUEST = "gate_request.json";
    /// `run.diff`: the run's whole change, for a gate's reviewer.
    run_diff => RUN_DIFF = "run.diff";
    /// `gate_outcome.json`: how a blocking gate was decided.
    gate_outcome => GATE_OUTCOME = "gate_outcome.json";
    /// `rollback.json`: what a ROLLBACK step reset.
    rollback => ROLLBACK = "rollback.json";
    /// `guard_state.json`: the guard's record while a process runs.
    guard_state => GUARD_STATE = "guard_state.json";
    /// `process_group.json`: the step's process group while it runs.
    process_group => PROCESS_GROUP = "process_group.json";
    /// `stopped_orphans.json`: pids a refused `resume` killed.
    stopped_orphans => STOPPED_ORPHANS = "stopped_orphans.json";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_file_is_named_once_under_the_visit() {
        let visit = VisitDir::at("/r/artifacts/s/1");
        assert_eq!(
            visit.gate_request(),
            Path::new("/r/artifacts/s/1/gate_request.json")
        );
        assert_eq!(
            visit.validator_dir("unit"),
            Path::new("/r/artifacts/s/1/validators/unit")
        );
        assert_eq!(
            visit.validator_stderr("unit"),
            Path::new("/r/artifacts/s/1/validators/unit/stderr.txt")
        );
        assert_eq!(
            visit.validator_artifacts("unit"),
            Path::new("/r/artifacts/s/1/validators/unit/artifacts")
        );
        assert_eq!(
            VisitDir::validator_relative("unit", VisitDir::STDOUT_TXT),
            "validators/unit/stdout.txt"
        );
        assert_eq!(
            VisitDir::validator_artifact_relative("unit", "out/r.json"),
            "validators/unit/artifacts/out/r.json"
        );
    }

    #[test]
    fn every_file_name_is_listed_once() {
        let mut names = VisitDir::ALL.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), VisitDir::ALL.len());
        assert!(VisitDir::ALL.contains(&VisitDir::STOPPED_ORPHANS));
        assert!(VisitDir::ALL.contains(&VisitDir::MANIFEST));
    }
}
