//! Rhai through the scripting host with the limits of every run: any text, evaluated as a
//! `${{ … }}` expression or interpolated as a string value, ends within the deadline with a
//! value or an error, never a panic. The host's script gives expressions runaway functions to
//! call, so the fuzzer reaches the operations, call-depth and data-size limits.

#![no_main]

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use tnh_conductor::script::{Context, HostOptions, Limits, ScriptHost};
use tnh_conductor::workflow::model::At;
use tnh_conductor::workflow::yaml::Pos;

const SCRIPT: &str = r#"
fn forever() { loop { } }
fn recurse(n) { recurse(n + 1) }
fn doubled(s) { loop { s += s; } }
fn grown(n) { let a = []; loop { a.push(n); } }
fn padded(n, fill) { let s = ""; s.pad(n, fill); s }
fn filled(n) { let a = []; a.pad(n, 0); a }
"#;

fn host() -> &'static ScriptHost {
    static HOST: OnceLock<ScriptHost> = OnceLock::new();
    HOST.get_or_init(|| {
        let mut host = ScriptHost::new(HostOptions {
            file: "fuzz.yaml".to_owned(),
            source: String::new(),
            root: None,
            limits: Limits::STANDARD,
        })
        .expect("a host without a worktree");
        host.load_script(&At::new(SCRIPT.to_owned(), Pos::new(1, 1)))
            .expect("the fuzz script loads");
        host
    })
}

fn context() -> &'static Context {
    static CONTEXT: OnceLock<Context> = OnceLock::new();
    CONTEXT.get_or_init(|| {
        Context::new(serde_json::json!({
            "run": {"id": "20260101T000000Z-abcdef", "dir": ".tnh/run/x"},
            "step": {"id": "s", "visit": 1},
            "params": {"count": 3, "modules": ["a", "b"]},
        }))
        .expect("an object is a context")
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let host = host();
    let bound = host.limits().deadline + Duration::from_secs(5);
    let started = Instant::now();
    if let Ok(value) = host.evaluate_code(text, Pos::new(1, 1), context()) {
        let rendered = value.to_string();
        assert!(rendered.len() <= 4 * host.limits().max_string_bytes + 1024);
    }
    assert!(
        started.elapsed() < bound,
        "{text:?} took {:?}",
        started.elapsed()
    );
    let started = Instant::now();
    let _ = host.evaluate_text(text, Pos::new(1, 1), context());
    assert!(
        started.elapsed() < bound,
        "{text:?} took {:?}",
        started.elapsed()
    );
});
