//! What a backend is asked: the request, and the prompt model backends send with the envelope.

/// The prompt model backends get when the step names none (and for decision vectors).
pub const DEFAULT_PROMPT: &str = "Judge the evidence of this EVALUATE step against the planner contract: `success` when the work is done and validated, `partial` when it falls short but is fixable (give fix_instructions), `blocked` when the environment prevents progress (give blockers), `unsafe` on any policy event or contradiction that hides a failure, `needs_human` when a person must decide.";

/// What a backend is asked.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The planner envelope as sent to the planner.
    pub envelope: &'a serde_json::Value,
    /// The same envelope as the rules planner and the guard read it.
    pub input: &'a crate::planner::PlannerInput,
    /// The rendered planner prompt (model backends send it; `command` gets the envelope only).
    pub prompt: &'a str,
    /// Where planner processes run (the run's worktree), else the current directory.
    pub cwd: Option<&'a std::path::Path>,
    /// The run's `TNH_*` variables (`TNH_RUN_ID`, `TNH_STEP_DIR`, …), given to planner
    /// processes like to agents, so that `resume` finds and kills a planner a killed conductor
    /// left running; `None` outside a run (`planner check`).
    pub run_variables: Option<&'a std::collections::BTreeMap<String, String>>,
    /// The run's cancellation (Ctrl-C, SIGTERM): a planner process is stopped like an agent,
    /// an HTTP call is abandoned, and no new attempt starts once it fires.
    pub cancellation: &'a crate::runner::Cancellation,
}

/// The instruction model backends get after the rendered prompt.
pub(super) fn model_prompt(request: &Request<'_>) -> String {
    let envelope = serde_json::to_string_pretty(request.envelope).unwrap_or_default();
    format!(
        "{}\n\n## Evidence envelope\n\n```json\n{envelope}\n```\n\nAnswer with one JSON object that conforms to the planner decision schema: `status` (success, partial, blocked, unsafe or needs_human), `next_step` (one of allowed_next_steps, or null), `fix_instructions` (null, or {{objective, constraints: [strings], edits: [{{target, action, rationale}}], verification: [{{command, expected_signal}}]}} with `objective` required), `blockers` (list of {{code, summary}}), `risk_flags` (list of strings). Do not edit any file.\n",
        request.prompt.trim_end()
    )
}

/// What the CLIs are given as their structured-output schema (see `answer_schema`).
pub(super) fn schema_text() -> String {
    crate::planner::answer_schema::answer_schema_text()
}
