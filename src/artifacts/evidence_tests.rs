//! Each summary as its writer produces it reads back and writes the same keys.

use serde_json::{Value, json};

use super::*;

fn manifest(opcode: &str, summary: Value) -> StepManifest {
    StepManifest {
        schema_version: 1,
        step_id: "step".to_owned(),
        opcode: opcode.to_owned(),
        visit: 1,
        started_at: String::new(),
        ended_at: String::new(),
        termination: "completed".to_owned(),
        evidence_summary: summary,
        artifacts: Vec::new(),
        timings_ms: None,
    }
}

/// Reads `written` as `T` and checks it writes back the same JSON.
fn round_trip<T: EvidenceSummary + std::fmt::Debug>(opcode: &str, written: Value) -> T {
    let read: T = manifest(opcode, written.clone()).evidence();
    assert_eq!(summary_value(&read), written);
    read
}

fn stat(files: u64) -> Value {
    json!({"files_changed": files, "insertions": 3, "deletions": 1, "binary_files": 0})
}

#[test]
fn an_agent_summary_reads_back_and_writes_the_same_keys() {
    let written = json!({
        "outcome": "completed", "cause": "exited 0", "cost_usd": 0.25,
        "diffstat": stat(2), "run_diffstat": stat(3), "policy_violations": 1,
    });
    let read: AgentEvidence = round_trip("RUN_AGENT", written);
    assert_eq!(read.diffstat.map(|stat| stat.files_changed), Some(2));
    assert_eq!(read.run_diffstat.map(|stat| stat.files_changed), Some(3));
    assert_eq!(read.cost_usd, Some(0.25));
    let no_cost = json!({
        "outcome": "error", "cause": "", "cost_usd": null,
        "diffstat": stat(0), "run_diffstat": stat(0), "policy_violations": 0,
    });
    let read: AgentEvidence = round_trip("RUN_AGENT", no_cost);
    assert_eq!(read.cost_usd, None);
}

#[test]
fn an_older_agent_summary_reads_its_missing_fields_as_defaults() {
    let older = json!({"outcome": "completed", "cause": "exited 0", "diffstat": stat(1)});
    let read: AgentEvidence = manifest("RUN_AGENT", older).evidence();
    assert_eq!(read.run_diffstat, None);
    assert_eq!(read.policy_violations, 0);
    assert_eq!(read.diffstat.map(|stat| stat.files_changed), Some(1));
    let other: AgentEvidence = manifest("RUN_AGENT", json!("not an object")).evidence();
    assert_eq!(other, AgentEvidence::default());
}

#[test]
fn a_validation_summary_reads_back_and_writes_the_same_keys() {
    let written = json!({
        "mechanical_outcome": "killed_timeout",
        "exit_codes": {"lint": 0, "test": null},
        "causes": {"test": "timed out after 5s"},
        "timeouts": ["test"],
        "proposed_goldens": false,
        "policy_violations": 0,
    });
    let read: ValidationEvidence = round_trip("RUN_VALIDATION", written.clone());
    assert_eq!(read.exit_codes.get("test"), Some(&None));
    let mut failed = written;
    failed["step_failed"] = json!("validator `x`: not found");
    failed["diffstat"] = stat(1);
    failed["tool_caches_removed"] = json!(["__pycache__"]);
    let read: ValidationEvidence = round_trip("RUN_VALIDATION", failed);
    assert_eq!(
        read.step_failed.as_deref(),
        Some("validator `x`: not found")
    );
}

#[test]
fn an_evaluation_summary_reads_its_decision_and_old_text_blockers() {
    let written = json!({
        "status": "blocked", "planner_status": "needs_fix",
        "decision": {
            "status": "blocked", "next_step": null, "fix_instructions": null,
            "blockers": [{"code": "tests", "summary": "failing", "evidence_ref": null}],
            "risk_flags": [], "planner": "rules", "decided_by": "rules"
        },
        "worktree_fingerprint": "abc",
    });
    let read: EvaluationEvidence = manifest("EVALUATE", written).evidence();
    assert_eq!(read.status, "blocked");
    assert_eq!(read.planner_status.as_deref(), Some("needs_fix"));
    assert_eq!(read.decision.planner.as_deref(), Some("rules"));
    assert_eq!(
        read.decision.blockers,
        vec![BlockerEvidence::Coded {
            code: "tests".to_owned(),
            summary: "failing".to_owned()
        }]
    );
    let older = json!({"status": "blocked", "decision": {"blockers": ["a text"]}});
    let read: EvaluationEvidence = manifest("EVALUATE", older).evidence();
    assert_eq!(
        read.decision.blockers,
        vec![BlockerEvidence::Text("a text".to_owned())]
    );
}

#[test]
fn gate_and_stop_summaries_read_back_and_write_the_same_keys() {
    let waiting = json!({"gate": "human_approval", "waiting": true, "run_diffstat": stat(1)});
    let read: GateEvidence = round_trip("GATE", waiting);
    assert!(read.waiting && !read.queued_for_review);
    let queued = json!({"gate": "review", "queued_for_review": true, "run_diffstat": stat(0)});
    let read: GateEvidence = round_trip("GATE", queued);
    assert!(read.queued_for_review);
    let stop = json!({"stop": "failure", "reason": {"why": ["any", "value"]}});
    let read: StopEvidence = round_trip("STOP", stop);
    assert_eq!(read.stop, "failure");
    let read: StopEvidence = round_trip("STOP", json!({"stop": "success", "reason": null}));
    assert_eq!(read.reason, None);
}

#[test]
fn rollback_and_interrupted_summaries_keep_the_whole_record() {
    let record = json!({
        "schema_version": 1, "run_id": "r", "target": "last_snapshot",
        "snapshot": {"tree": "t"}, "head_before": "a", "head_after": "b",
        "before": stat(2), "after": stat(0),
    });
    let read: RollbackEvidence = round_trip("ROLLBACK", record.clone());
    assert_eq!(read.target.as_deref(), Some("last_snapshot"));
    assert_eq!(read.before.map(|stat| stat.files_changed), Some(2));
    let failed: RollbackEvidence = round_trip("ROLLBACK", json!({"error": "no snapshot"}));
    assert_eq!(failed.error.as_deref(), Some("no snapshot"));
    let interrupted = json!({"interrupted": true, "cause": "killed", "rollback": record});
    let read: InterruptedEvidence = round_trip("ROLLBACK", interrupted);
    assert_eq!(read.cause, "killed");
    assert!(
        read.rollback
            .is_some_and(|rollback| rollback.before.is_some())
    );
    round_trip::<InterruptedEvidence>("RUN_AGENT", json!({"interrupted": true, "cause": "c"}));
}
