//! Rhai through the scripting host, under its limits: arbitrary expressions, token soup,
//! interpolated text and whole scripts end in time with a value inside the data limits or an
//! error, and hostile expressions (deep nesting, endless loops, runaway recursion, huge strings
//! and arrays) are stopped.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::{Value, json};
use tnh_conductor::script::{Context, HostOptions, Limits, ScriptError, ScriptHost};
use tnh_conductor::workflow::model::At;
use tnh_conductor::workflow::yaml::Pos;

use super::config;

/// Functions that run away unless the sandbox stops them, for expressions to call.
const HOSTILE_SCRIPT: &str = r#"
fn forever() { loop { } }
fn recurse(n) { recurse(n + 1) }
fn doubled(s) { loop { s += s; } }
fn grown(n) { let a = []; loop { a.push(n); } }
fn nest(n) { let m = #{}; for i in 0..n { m = #{inner: m}; } m }
fn wrap(n) { let a = []; for i in 0..n { a = [a]; } a }
fn padded(n, fill) { let s = ""; s.pad(n, fill); s }
fn filled(n) { let a = []; a.pad(n, 0); a }
"#;

/// The standard limits with fewer operations and smaller data, so that a runaway case costs
/// milliseconds in a debug build; the limits being enforced is what is under test.
fn property_limits() -> Limits {
    Limits {
        max_operations: 50_000,
        max_string_bytes: 256 * 1024,
        max_array_items: 5_000,
        max_map_entries: 5_000,
        ..Limits::STANDARD
    }
}

fn script_host() -> &'static ScriptHost {
    static HOST: OnceLock<ScriptHost> = OnceLock::new();
    HOST.get_or_init(|| {
        let mut host = ScriptHost::new(HostOptions {
            file: "property.yaml".to_owned(),
            source: String::new(),
            root: None,
            limits: property_limits(),
        })
        .unwrap();
        host.load_script(&At::new(HOSTILE_SCRIPT.to_owned(), Pos::new(1, 1)))
            .unwrap();
        host
    })
}

fn script_context() -> &'static Context {
    static CONTEXT: OnceLock<Context> = OnceLock::new();
    CONTEXT.get_or_init(|| {
        Context::new(json!({
            "run": {"id": "20260101T000000Z-abcdef", "dir": ".tnh/run/x"},
            "step": {"id": "s", "visit": 1},
            "params": {"count": 3, "modules": ["a", "b"], "name": "x"},
        }))
        .unwrap()
    })
}

/// Slack over the deadline for a loaded two-core machine running other tests.
const SLACK: Duration = Duration::from_secs(10);

/// Evaluates `code` and checks it ended within the limits: in time, and with any value inside
/// the data limits.
fn evaluate(code: &str) -> Result<Result<Value, ScriptError>, TestCaseError> {
    let host = script_host();
    let started = Instant::now();
    let result = host.evaluate_code(code, Pos::new(1, 1), script_context());
    let elapsed = started.elapsed();
    prop_assert!(
        elapsed < host.limits().deadline + SLACK,
        "{code:?} took {elapsed:?}"
    );
    if let Ok(value) = &result {
        within_limits(value, host.limits())?;
    }
    if let Err(error) = &result {
        prop_assert!(!error.to_string().is_empty());
    }
    Ok(result)
}

fn within_limits(value: &Value, limits: &Limits) -> Result<(), TestCaseError> {
    match value {
        Value::String(text) => prop_assert!(
            text.len() <= limits.max_string_bytes,
            "{} bytes",
            text.len()
        ),
        Value::Array(items) => {
            prop_assert!(
                items.len() <= limits.max_array_items,
                "{} items",
                items.len()
            );
            for item in items {
                within_limits(item, limits)?;
            }
        }
        Value::Object(entries) => {
            prop_assert!(
                entries.len() <= limits.max_map_entries,
                "{} entries",
                entries.len()
            );
            for item in entries.values() {
                within_limits(item, limits)?;
            }
        }
        _ => {}
    }
    Ok(())
}

const RHAI_TOKENS: &[&str] = &[
    "1",
    "0",
    "-1",
    "2.5",
    "9223372036854775807",
    "-9223372036854775808",
    "1e308",
    "0x7f",
    "+",
    "-",
    "*",
    "/",
    "%",
    "**",
    "<<",
    ">>",
    "&",
    "|",
    "^",
    "==",
    "!=",
    "<",
    "&&",
    "||",
    "!",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "#{",
    ":",
    ",",
    ".",
    "..",
    "..=",
    ";",
    "?",
    "??",
    "?.",
    "\"s\"",
    "'c'",
    "`t${1}`",
    "x",
    "params",
    "params.count",
    "params.modules",
    "ctx",
    "ctx.run.id",
    ".len()",
    ".pad(",
    ".map(",
    ".reduce(",
    ".sort()",
    ".split(",
    ".sub_string(",
    ".to_blob()",
    "|x|",
    "|x, y|",
    "loop",
    "while",
    "for",
    "in",
    "if",
    "else",
    "switch",
    "=>",
    "let",
    "const",
    "fn",
    "return",
    "throw",
    "try",
    "catch",
    "break",
    "this",
    "true",
    "false",
    "()",
    "import",
    "eval",
    "print",
    "debug",
    "Fn(",
    "call(",
    "curry(",
    "range(",
    "parse_json(",
    "truncate(",
    "read_file(",
    "glob(",
    "forever()",
    "recurse(0)",
    "doubled(\"x\")",
    "grown(1)",
    "nest(",
    "wrap(",
    "padded(",
    "filled(",
    "\n",
    " ",
];

fn rhai_soup() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(RHAI_TOKENS), 1..24)
        .prop_map(|tokens| tokens.concat())
}

/// What a hostile expression must do under the property limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Value,
    Error,
    Either,
}

/// Expressions built to run away, to nest past the depth limits, or to grow data past the size
/// limits, with what each must do.
fn hostile_expression() -> impl Strategy<Value = (String, Expect)> {
    let limits = property_limits();
    let brackets = prop::sample::select(&[("(", ")"), ("[", "]"), ("#{a:", "}"), ("-(", ")")][..]);
    let nesting = (brackets.clone(), 1_usize..20_000).prop_map(|((open, close), depth)| {
        let code = format!("{}1{}", open.repeat(depth), close.repeat(depth));
        let expect = match depth {
            0..16 => Expect::Value,
            16..=64 => Expect::Either,
            _ => Expect::Error,
        };
        (code, expect)
    });
    let links = prop::sample::select(&[" + 1", " * 1", " == 1", ".len()", " ?? 1"][..]);
    let chains = (links, 1_usize..5_000).prop_map(|(link, length)| {
        let expect = if length > 64 {
            Expect::Error
        } else {
            Expect::Either
        };
        (format!("1{}", link.repeat(length)), expect)
    });
    let runaway = prop::sample::select(
        &[
            "forever()",
            "recurse(0)",
            "doubled(\"x\")",
            "grown(1)",
            "loop { }",
            "while true { }",
            "\"x\".pad(1000000000, \"x\")",
            "range(0, 9223372036854775807).map(|x| x).len()",
            "parse_json(padded(100000, \"[\"))",
        ][..],
    )
    .prop_map(|code| (code.to_owned(), Expect::Error));
    // Nested values deeper than the conversion limit (64) are refused. Kept under 200 levels:
    // deeper ones overflow the stack inside Rhai's recursive clone (docs/reliability.md).
    let nested = (prop::sample::select(&["nest", "wrap"][..]), 0_usize..200).prop_map(
        |(function, depth)| {
            let expect = match depth {
                0..60 => Expect::Value,
                60..70 => Expect::Either,
                _ => Expect::Error,
            };
            (format!("{function}({depth})"), expect)
        },
    );
    let string_limit = limits.max_string_bytes;
    let padded = (0_usize..4 * string_limit).prop_map(move |size| {
        let expect = if size > string_limit {
            Expect::Error
        } else {
            Expect::Value
        };
        (format!("padded({size}, \"c\").len()"), expect)
    });
    let array_limit = limits.max_array_items;
    let filled = (0_usize..4 * array_limit).prop_map(move |size| {
        let expect = if size > array_limit {
            Expect::Error
        } else {
            Expect::Value
        };
        (format!("filled({size})"), expect)
    });
    prop_oneof![nesting, chains, runaway, nested, padded, filled]
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn arbitrary_expressions_end_within_the_limits(code in "\\PC{0,64}") {
        let _ = evaluate(&code)?;
    }

    #[test]
    fn rhai_token_soup_ends_within_the_limits(code in rhai_soup()) {
        let _ = evaluate(&code)?;
    }

    #[test]
    fn arbitrary_text_interpolates_within_the_limits(text in prop::collection::vec(prop_oneof![Just("${{ ".to_owned()), Just(" }}".to_owned()), Just("${".to_owned()), Just("}".to_owned()), rhai_soup()], 0..8)) {
        let text = text.concat();
        let host = script_host();
        let started = Instant::now();
        let result = host.evaluate_text(&text, Pos::new(1, 1), script_context());
        prop_assert!(started.elapsed() < host.limits().deadline + SLACK);
        if !text.contains("${") {
            prop_assert_eq!(result.ok(), Some(text), "text without `${{` is kept as it is");
        }
    }
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn hostile_expressions_are_stopped_by_the_limits((code, expect) in hostile_expression()) {
        let result = evaluate(&code)?;
        let shown: String = code.chars().take(80).collect();
        match expect {
            Expect::Value => prop_assert!(result.is_ok(), "{}: {:?}", shown, result),
            Expect::Error => prop_assert!(result.is_err(), "{} evaluated", shown),
            Expect::Either => {}
        }
    }

    #[test]
    fn arbitrary_scripts_load_within_the_limits(code in prop::collection::vec(prop_oneof![rhai_soup(), Just("fn f(x) { ".to_owned()), Just("}".to_owned()), Just("loop { }".to_owned()), Just("import \"tnh/text\" as t;".to_owned())], 1..6)) {
        let code = code.concat();
        let mut host = ScriptHost::new(HostOptions {
            file: "property.yaml".to_owned(),
            source: String::new(),
            root: None,
            limits: property_limits(),
        })
        .unwrap();
        let started = Instant::now();
        let _ = host.load_script(&At::new(code.clone(), Pos::new(1, 1)));
        prop_assert!(started.elapsed() < host.limits().deadline + SLACK, "{code:?}");
    }
}
