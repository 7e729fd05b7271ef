//! The planner contract: decisions from outside parse or fail without a panic and round
//! trip; the guard never lowers a status, only appends flags and blockers, and is idempotent;
//! the rules backend survives any envelope and honours the evidence the contract makes binding.

use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestCaseError;
use serde_json::{Value, json};
use tnh_conductor::planner::guard::{Facts, guard};
use tnh_conductor::planner::{Blocker, Decision, PlannerInput, Status, rules};

use super::{case, config, json_value, node_mut, node_paths};
use crate::support::fixture;

/// The contract's order, written out rather than taken from `Ord`.
fn rank(status: Status) -> u8 {
    match status {
        Status::Success => 0,
        Status::Partial => 1,
        Status::Blocked => 2,
        Status::NeedsHuman => 3,
        Status::Unsafe => 4,
    }
}

const STATUSES: [Status; 5] = [
    Status::Success,
    Status::Partial,
    Status::Blocked,
    Status::NeedsHuman,
    Status::Unsafe,
];

const FLAGS: &[&str] = &[
    "policy_violation",
    "report_execution_mismatch",
    "transcript_workspace_mismatch",
    "repeated_contradiction",
    "proposed_goldens_present",
    "repeated_partial_loop",
    "missing_artifact",
    "repeated_blocker",
    "killed_timeout",
    "planner_error",
    "style",
];

fn flag() -> impl Strategy<Value = String> {
    prop_oneof![4 => prop::sample::select(FLAGS).prop_map(str::to_owned), 1 => "[a-z_]{0,10}"]
}

fn status() -> impl Strategy<Value = Status> {
    prop::sample::select(&STATUSES[..])
}

fn decision() -> impl Strategy<Value = Decision> {
    let blocker = (flag(), "\\PC{0,16}", prop::option::of("[a-z/.]{1,12}")).prop_map(
        |(code, summary, evidence_ref)| Blocker {
            code,
            summary,
            evidence_ref,
            severity: None,
        },
    );
    (
        status(),
        prop::option::of("[a-z_]{1,8}"),
        prop::collection::vec(blocker, 0..4),
        prop::collection::vec(flag(), 0..4),
    )
        .prop_map(|(status, next_step, blockers, risk_flags)| Decision {
            next_step,
            blockers,
            risk_flags,
            ..Decision::status(status)
        })
}

const STATUS_NAMES: &[&str] = &[
    "success",
    "partial",
    "blocked",
    "needs_human",
    "unsafe",
    "completed",
    "error",
];

/// An earlier evaluation, as the provenance window or the kernel's history records it.
fn earlier_step() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(&["EVALUATE", "RUN_AGENT", "RUN_VALIDATION"][..]),
        prop::sample::select(STATUS_NAMES),
        prop::collection::vec(flag(), 0..2),
        prop::collection::vec(flag(), 0..2),
        prop::sample::select(&["no changes", "2 files changed, +40 -3", ""][..]),
        prop::option::of(prop::sample::select(&["tree-a", "tree-b"][..])),
    )
        .prop_map(
            |(opcode, status, risk_flags, blocker_codes, diff, fingerprint)| {
                let mut entry = json!({
                    "step_id": "s",
                    "opcode": opcode,
                    "outcome": status,
                    "status": status,
                    "risk_flags": risk_flags,
                    "blocker_codes": blocker_codes,
                    "diff_summary": diff,
                });
                if let Some(fingerprint) = fingerprint {
                    entry["worktree_fingerprint"] = fingerprint.into();
                }
                entry
            },
        )
}

/// planner envelopes with the evidence the rules and the guard read, every field varied.
fn envelope() -> impl Strategy<Value = Value> {
    let strings = |pattern: &'static str| prop::collection::vec(pattern, 0..3);
    let report =
        prop_oneof![
        Just(Value::Null),
        (prop::collection::vec(case(), 0..4), strings("[a-z/]{1,10}\\.png")).prop_map(
            |(cases, goldens)| {
                json!({"suite_id": "s", "cases": cases, "summary": {}, "proposed_goldens": goldens})
            }
        ),
    ];
    let exit_codes = prop::collection::btree_map(
        "[a-z]{1,6}",
        prop_oneof![Just(Value::Null), (-2_i64..3).prop_map(Value::from)],
        0..3,
    );
    let transcript = prop::sample::select(&["Implemented it.", "I could not finish.", ""][..]);
    let diff = prop::sample::select(&["2 files changed, +40 -3", "no changes", ""][..]);
    let outcome =
        prop::sample::select(&["completed", "error", "killed_timeout", "killed_idle"][..]);
    let history = prop::option::of(prop::collection::vec(earlier_step(), 0..4));
    let context = (
        prop::option::of(prop::sample::select(&["tree-a", "tree-b"][..])),
        prop::option::of(any::<bool>()),
    );
    (
        (transcript, diff, outcome),
        (exit_codes, strings("[a-z/]{1,12}\\.json")),
        report,
        strings("\\PC{1,24}"),
        (prop::collection::vec(earlier_step(), 0..4), history),
        context,
    )
        .prop_map(
            |(
                (transcript, diff, outcome),
                (exit_codes, missing),
                report,
                policy_events,
                (window, history),
                (fingerprint, expects_changes),
            )| {
                let mut envelope = json!({
                    "schema_version": 1,
                    "run_id": "20260101T000000Z-abcdef",
                    "workflow_id": "w",
                    "step_id": "evaluate",
                    "evaluate_prompt": "planner.evaluate_step.v1",
                    "allowed_next_steps": ["fix", "review", "rollback"],
                    "provenance_window": window,
                    "evidence": {
                        "transcript_summary": transcript,
                        "workspace_diff_summary": diff,
                        "validation": {
                            "mechanical_outcome": outcome,
                            "exit_codes": exit_codes,
                            "timeouts": [],
                            "missing_artifacts": missing,
                        },
                        "harness_report": report,
                        "artifacts": [],
                        "policy_events": policy_events,
                    }
                });
                if let Some(history) = history {
                    envelope["evaluation_history"] = history.into();
                }
                if let Some(fingerprint) = fingerprint {
                    envelope["evidence"]["worktree_fingerprint"] = fingerprint.into();
                }
                if let Some(expects_changes) = expects_changes {
                    envelope["inputs"] = json!({"expects_changes": expects_changes});
                }
                envelope
            },
        )
}

/// Structured envelopes, and arbitrary JSON as an envelope.
fn any_envelope() -> impl Strategy<Value = Value> {
    prop_oneof![3 => envelope(), 1 => json_value()]
}

/// The least status the contract lets an envelope's evidence end in, whoever decided:
/// a policy event is unsafe, proposed goldens need a human (rule 2), and
/// missing artifacts block.
fn evidence_floor(envelope: &Value) -> Status {
    let evidence = &envelope["evidence"];
    let present = |value: &Value| value.as_array().is_some_and(|items| !items.is_empty());
    if present(&evidence["policy_events"]) {
        Status::Unsafe
    } else if present(&evidence["harness_report"]["proposed_goldens"]) {
        Status::NeedsHuman
    } else if present(&evidence["validation"]["missing_artifacts"]) {
        Status::Blocked
    } else {
        Status::Success
    }
}

fn assert_only_appended<T: PartialEq + std::fmt::Debug>(
    before: &[T],
    after: &[T],
) -> Result<(), TestCaseError> {
    prop_assert!(
        after.len() >= before.len() && &after[..before.len()] == before,
        "{before:?} became {after:?}"
    );
    Ok(())
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn arbitrary_json_as_a_decision_never_panics_and_round_trips(value in json_value()) {
        if let Ok(decision) = serde_json::from_value::<Decision>(value.clone()) {
            let name = value["status"].as_str().unwrap_or_default();
            prop_assert!(STATUSES.iter().any(|status| status.name() == name), "{value}");
            let again: Decision = serde_json::from_value(serde_json::to_value(&decision).unwrap()).unwrap();
            prop_assert_eq!(again, decision);
        }
    }

    #[test]
    fn a_decision_with_any_status_name_parses(status in status(), decision in decision()) {
        let mut value = serde_json::to_value(&decision).unwrap();
        value["status"] = Value::from(status.name());
        let parsed: Decision = serde_json::from_value(value).unwrap();
        prop_assert_eq!(parsed.status, status);
    }

    #[test]
    fn the_guard_never_lowers_a_status_and_only_adds(decision in decision(), envelope in any_envelope()) {
        let guarded = guard(decision.clone(), &Facts::from_input(&PlannerInput::read(&envelope)));
        prop_assert!(
            rank(guarded.status) >= rank(decision.status),
            "{:?} lowered to {:?}", decision.status, guarded.status
        );
        prop_assert!(
            rank(guarded.status) >= rank(evidence_floor(&envelope)),
            "{:?} below the evidence's {:?}", guarded.status, evidence_floor(&envelope)
        );
        assert_only_appended(&decision.risk_flags, &guarded.risk_flags)?;
        assert_only_appended(&decision.blockers, &guarded.blockers)?;
    }

    #[test]
    fn guarding_twice_is_guarding_once(decision in decision(), envelope in any_envelope()) {
        let facts = Facts::from_input(&PlannerInput::read(&envelope));
        let once = guard(decision, &facts);
        let twice = guard(once.clone(), &facts);
        prop_assert_eq!(twice, once);
    }

    #[test]
    fn the_rules_planner_decides_guarded_and_within_the_evidence(envelope in any_envelope()) {
        let decision = rules::decide(&PlannerInput::read(&envelope));
        let facts = Facts::from_input(&PlannerInput::read(&envelope));
        prop_assert_eq!(&guard(decision.clone(), &facts), &decision, "a rules decision is already guarded");
        prop_assert!(rank(decision.status) >= rank(evidence_floor(&envelope)), "{:?}", decision.status);
        let validation = &envelope["evidence"]["validation"];
        let killed = validation["mechanical_outcome"].as_str().is_some_and(|outcome| outcome.starts_with("killed_"));
        if killed {
            prop_assert!(rank(decision.status) >= rank(Status::Blocked), "{:?}", decision.status);
        }
        let validator_failed = validation["exit_codes"]
            .as_object()
            .is_some_and(|codes| codes.values().any(|code| code.as_i64().is_some_and(|code| code != 0)));
        if validator_failed {
            prop_assert_ne!(decision.status, Status::Success);
        }
    }

    #[test]
    fn the_rules_planner_survives_any_field_of_a_vector_replaced(
        vector in any::<Index>(),
        edits in prop::collection::vec((any::<Index>(), json_value()), 1..4),
    ) {
        let mut envelope = planner_envelope(&vector);
        for (at, value) in edits {
            let mut paths = Vec::new();
            node_paths(&envelope, &mut Vec::new(), &mut paths);
            let path = at.get(&paths).clone();
            *node_mut(&mut envelope, &path) = value;
        }
        let decision = rules::decide(&PlannerInput::read(&envelope));
        prop_assert_eq!(guard(decision.clone(), &Facts::from_input(&PlannerInput::read(&envelope))), decision);
    }
}

fn planner_envelope(index: &Index) -> Value {
    static ENVELOPES: OnceLock<Vec<Value>> = OnceLock::new();
    let envelopes = ENVELOPES.get_or_init(|| {
        let mut paths: Vec<_> = std::fs::read_dir(fixture("planner_vectors"))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .collect();
        paths.sort();
        paths
            .iter()
            .map(|path| {
                let vector: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
                vector["envelope"].clone()
            })
            .collect()
    });
    envelopes[index.index(envelopes.len())].clone()
}
