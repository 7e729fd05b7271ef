//! Each event type's line, in the shape the writers produced when payloads were free maps,
//! reads back and is written again with the same keys and values.

use crate::artifacts::Event;

/// One line of each event type (and of each shape an event type has), as recorded.
const LINES: &[(&str, &str)] = &[
    (
        "run_started",
        r#""workflow_id":"fix","base_sha":"1f2e","params":{"goal":"tests pass","tries":2}"#,
    ),
    ("run_resumed", r#""from_seq":7"#),
    ("step_started", r#""opcode":"RUN_AGENT""#),
    ("runner_started", r#""agent":"claude""#),
    (
        "runner_started",
        r#""validator":"tests","argv":["cargo","test"]"#,
    ),
    (
        "runner_completed",
        r#""outcome":"killed_timeout","cause":"timeout: 600s""#,
    ),
    (
        "runner_completed",
        r#""outcome":"error","exit_codes":{"lint":null,"tests":1}"#,
    ),
    (
        "artifact_recorded",
        r#""role":"runner_final_response","path":"artifacts/work/1/final_response.md""#,
    ),
    (
        "policy_violation",
        r#""violation":{"class":"forbidden_path","path":".env","detail":"`.env` is forbidden"}"#,
    ),
    (
        "route_selected",
        r#""outcome":"completed","next_step":"check","next_visit":2"#,
    ),
    (
        "route_selected",
        r#""outcome":"success","next_step":"STOP","recovered":true"#,
    ),
    (
        "step_completed",
        r#""outcome":"error","proposed_goldens":false,"policy_violation":"`.env` is forbidden (and 1 more)","stop_reason":"tests failed""#,
    ),
    (
        "step_failed",
        r#""error":"script error","resumable":true,"hint":"fix the workflow","file":"flow.yaml","line":7,"column":3,"code":"expression","code_position":"1:5""#,
    ),
    ("step_failed", r#""error":"the agent task failed""#),
    (
        "step_interrupted",
        r#""cause":"the driving process ended during the step","killed_orphans":[4321],"surviving_orphans":[4322],"guard_report":{"clean":true},"restored":{"snapshot":{"reference":"refs/tnh/x"}}"#,
    ),
    (
        "rollback_started",
        r#""target":"pre_step","by":"operator","snapshot":"refs/tnh/snapshots/x","snapshot_commit":"9a8b","head_before":"7c6d","tree_before":null"#,
    ),
    (
        "rollback_completed",
        r#""target":"pre_step","record":"rollback.json","undone":"7c6d""#,
    ),
    (
        "rollback_completed",
        r#""target":"pre_run","by":"operator","record":"rollbacks/1.json","undone":"7c6d","policy_violation_cleared":null,"checkpoint_before":null,"interrupted_attempt":{"started_seq":9}"#,
    ),
    (
        "gate_requested",
        r#""gate":"requires_approval","reason":"review the fix","request":"gate_request.json""#,
    ),
    ("gate_resolved", r#""decision":"queued""#),
    (
        "gate_resolved",
        r#""decision":"gate_approved","reviewer":"ana""#,
    ),
    (
        "gate_resolved",
        r#""decision":"gate_timed_out","reviewer":null"#,
    ),
    (
        "human_feedback",
        r#""decision":"gate_approved","comments":null,"reviewer":"ana","related":["artifacts/review/1/gate_request.json"]"#,
    ),
    (
        "planner_decision",
        r#""status":"partial","planner":"rules","decided_by":"planner","risk_flags":["large_diff"]"#,
    ),
    ("script_output", r#""stream":"print","text":"starting""#),
    (
        "drift_accepted",
        r#""recorded":{"tree":"aa","head":"bb"},"found":{"tree":"cc","head":"bb"}"#,
    ),
    (
        "repository_changes_kept",
        r#""ref_changes":[{"name":"refs/heads/x"}],"git_config_changed":[],"by":"operator""#,
    ),
    (
        "guard_check_skipped",
        r#""guard_state":"/r/.tnh/run/x/artifacts/work/1/guard_state.json","reason":"the guard state is damaged","by":"operator""#,
    ),
    (
        "worktree_recreated",
        r#""path":"/r/.tnh/worktrees/x","branch":"tnh/fix/x""#,
    ),
    (
        "workflow_changed",
        r#""path":"workflows/fix.yaml","recorded_sha256":"01","found_sha256":"02""#,
    ),
    (
        "config_changed",
        r#""path":"","recorded_sha256":"01","found_sha256":"02""#,
    ),
    (
        "prompts_changed",
        r#""path":".tnh/prompts","changed":["agent/fix.md"]"#,
    ),
    ("params_changed", r#""added":{"depth":3},"removed":["old"]"#),
    (
        "agent_runlog",
        r#""kind":"note","message":"read the tests","ref":"src/lib.rs","logged_at":"2026-01-01T00:00:00Z""#,
    ),
    (
        "agent_runlog",
        r#""kind":"unreadable","message":"3 line(s) of runlog.ndjson were not JSON objects and were skipped""#,
    ),
    (
        "evidence_tampered",
        r#""entries":["manifest.json: a symbolic link"]"#,
    ),
    (
        "run_committed",
        r#""commit":"c1","parent":"p1","tree":"t1","branch":"tnh/fix/x","author":"Ana <ana@example.com>","identity":"configured""#,
    ),
    ("run_completed", r#""end":"success","reason":"done""#),
    (
        "run_failed",
        r#""end":"error","reason":"the workflow broke""#,
    ),
    (
        "run_interrupted",
        r#""cause":"operator interrupt (SIGINT)""#,
    ),
    (
        "run_interrupted",
        r#""cause":"operator interrupt (SIGTERM)","next_step":"check""#,
    ),
    (
        "run_abandoned",
        r#""by":"operator","was":"waiting","stopped_pids":[],"reason":"not needed","survivors":[77]"#,
    ),
    (
        "landed",
        r#""run_commit":"c1","into":"main","mode":"ff-only","commit":"c1","before":"b0","remote":"origin","pull_request":"https://example.com/pr/1""#,
    ),
    ("landed", r#""run_commit":"c1","remote":"origin""#),
];

fn line(event_type: &str, fields: &str) -> String {
    format!(
        r#"{{"schema_version":1,"seq":3,"timestamp":"2026-01-01T00:00:00Z","run_id":"r","step_id":"work","visit":1,"event_type":"{event_type}",{fields}}}"#
    )
}

#[test]
fn every_event_type_reads_back_and_writes_the_same_keys_and_values() {
    for (event_type, fields) in LINES {
        let text = line(event_type, fields);
        let written: serde_json::Value = serde_json::from_str(&text).unwrap();
        let event: Event = serde_json::from_str(&text).unwrap_or_else(|error| {
            panic!("{event_type}: {error}\n{text}");
        });
        assert_eq!(
            serde_json::to_value(event.event_type()).unwrap(),
            *event_type
        );
        assert_eq!(serde_json::to_value(&event).unwrap(), written, "{text}");
    }
    let covered: std::collections::BTreeSet<&str> =
        LINES.iter().map(|(event_type, _)| *event_type).collect();
    assert_eq!(covered.len(), 34, "every event type has a line");
}

/// A line written by an older release that lacked a field is still read (as when payloads
/// were free maps): the field takes its empty value.
#[test]
fn a_line_missing_its_fields_is_still_read() {
    for (event_type, _) in LINES {
        let text = line(event_type, r#""note":"an older release's field""#);
        let event: Event = serde_json::from_str(&text).unwrap_or_else(|error| {
            panic!("{event_type}: {error}");
        });
        assert_eq!(
            serde_json::to_value(event.event_type()).unwrap(),
            *event_type
        );
    }
}
