//! Harness reports as RUN_VALIDATION checks them: any JSON is judged without a panic, and
//! anything but an object is refused.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tnh_conductor::artifacts::harness_report_problems;

fuzz_target!(|data: &[u8]| {
    let Ok(report) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let problems = harness_report_problems(&report);
    if !report.is_object() {
        assert!(
            !problems.is_empty(),
            "{report} accepted as a harness report"
        );
    }
    for field in ["suite_id", "cases", "summary"] {
        if report.is_object() && report.get(field).is_none() {
            assert!(
                problems.iter().any(|problem| problem.contains(field)),
                "{report} accepted without `{field}`"
            );
        }
    }
});
