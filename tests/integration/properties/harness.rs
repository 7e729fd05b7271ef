//! Harness reports against the minimal structure RUN_VALIDATION checks (`tnh-conductor schema
//! harness-report`): anything may be fed in without a panic, every well-shaped report is
//! accepted, and one missing or mistyping a required field is refused.

use proptest::prelude::*;
use serde_json::{Value, json};
use tnh_conductor::artifacts::harness_report_problems;

use super::{case, config, json_value};

const REQUIRED_REPORT_FIELDS: [&str; 3] = ["suite_id", "cases", "summary"];

fn optional(value: impl Strategy<Value = Value>) -> impl Strategy<Value = Option<Value>> {
    prop_oneof![Just(None), Just(Some(Value::Null)), value.prop_map(Some)]
}

/// Reports of every valid shape: required fields, optional ones absent, null or set, and
/// fields of the harness's own.
fn valid_report() -> impl Strategy<Value = Value> {
    let summary = (
        0_u32..500,
        0_u32..500,
        0_u32..50,
        prop::option::of(0_u64..10_000_000),
    )
        .prop_map(|(passed, failed, flaky, duration)| {
            let mut summary = json!({"passed": passed, "failed": failed, "flaky": flaky});
            if let Some(duration) = duration {
                summary["duration_ms"] = duration.into();
            }
            summary
        });
    let strings =
        prop::collection::vec("\\PC{0,24}".prop_map(Value::from), 0..4).prop_map(Value::Array);
    (
        "\\PC{0,24}",
        prop::collection::vec(prop_oneof![case(), json_value()], 0..5),
        summary,
        optional("[0-9.]{1,6}".prop_map(Value::from)),
        optional(Just(Value::from("2026-01-01T00:00:00Z"))),
        optional(prop::collection::vec(json_value(), 0..3).prop_map(Value::Array)),
        optional(strings),
        prop::collection::btree_map("x_[a-z]{1,8}", json_value(), 0..3),
    )
        .prop_map(
            |(suite_id, cases, summary, version, generated_at, ux_flags, goldens, extra)| {
                let mut report = json!({"suite_id": suite_id, "cases": cases, "summary": summary});
                let optional = [
                    ("version", version),
                    ("generated_at", generated_at),
                    ("ux_flags", ux_flags),
                    ("proposed_goldens", goldens),
                ];
                for (name, value) in optional {
                    if let Some(value) = value {
                        report[name] = value;
                    }
                }
                for (name, value) in extra {
                    report[name.as_str()] = value;
                }
                report
            },
        )
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn arbitrary_json_as_a_harness_report_never_panics(value in json_value()) {
        let problems = harness_report_problems(&value);
        if !value.is_object() {
            prop_assert!(!problems.is_empty(), "{value} accepted as a report");
        }
    }

    #[test]
    fn a_well_shaped_harness_report_is_accepted(report in valid_report()) {
        let problems = harness_report_problems(&report);
        prop_assert!(problems.is_empty(), "{report:#}: {problems:?}");
    }

    #[test]
    fn a_harness_report_without_a_required_field_is_refused(
        report in valid_report(),
        field in prop::sample::select(&REQUIRED_REPORT_FIELDS[..]),
    ) {
        let mut report = report;
        report.as_object_mut().unwrap().remove(field);
        let problems = harness_report_problems(&report);
        prop_assert!(problems.iter().any(|problem| problem.contains(field)), "{report:#}: {problems:?}");
    }

    #[test]
    fn a_harness_report_with_a_mistyped_required_field_is_refused(
        report in valid_report(),
        field in prop::sample::select(&REQUIRED_REPORT_FIELDS[..]),
        replacement in json_value(),
    ) {
        let expected_type = match field {
            "suite_id" => replacement.is_string(),
            "cases" => replacement.is_array(),
            _ => replacement.is_object(),
        };
        prop_assume!(!expected_type);
        let mut report = report;
        report[field] = replacement;
        prop_assert!(!harness_report_problems(&report).is_empty(), "{report:#}");
    }
}
