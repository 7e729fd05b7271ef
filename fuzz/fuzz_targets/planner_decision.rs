//! The planner contract: any JSON parses as a decision or fails cleanly; any JSON is an envelope
//! the rules backend decides on; the guard never lowers a status and guarding twice is guarding
//! once. An input `{"decision": …, "envelope": …}` drives the guard with both halves.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use tnh_conductor::planner::guard::{Facts, guard};
use tnh_conductor::planner::{Decision, rules};

fn check_guard(decision: Decision, envelope: &Value) {
    let facts = Facts::from_envelope(envelope);
    let once = guard(decision.clone(), &facts);
    assert!(
        once.status >= decision.status,
        "{decision:?} lowered to {once:?}"
    );
    assert!(once.risk_flags.starts_with(&decision.risk_flags));
    let twice = guard(once.clone(), &facts);
    assert_eq!(twice, once, "the guard is not idempotent");
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let decided = rules::decide(&value);
    assert_eq!(
        guard(decided.clone(), &Facts::from_envelope(&value)),
        decided
    );
    if let Ok(decision) = serde_json::from_value::<Decision>(value.clone()) {
        let written = serde_json::to_value(&decision).expect("a decision serialises");
        let again: Decision = serde_json::from_value(written).expect("a decision reads back");
        assert_eq!(again, decision);
        check_guard(decision, &value);
    }
    if let Ok(decision) = serde_json::from_value::<Decision>(value["decision"].clone()) {
        check_guard(decision, &value["envelope"]);
    }
});
