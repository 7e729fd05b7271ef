//! The deadline under a controllable clock, and deferred workspace changes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::*;
use crate::document::yaml::Pos;
use crate::script::ChangeKind;

/// Reads `start` for the first `fresh_reads` readings, then a time long past any deadline.
#[derive(Debug)]
struct ExpiringClock {
    start: Instant,
    fresh_reads: usize,
    reads: AtomicUsize,
}

impl ExpiringClock {
    fn new(fresh_reads: usize) -> Arc<Self> {
        Arc::new(Self {
            start: Instant::now(),
            fresh_reads,
            reads: AtomicUsize::new(0),
        })
    }

    fn reads(&self) -> usize {
        self.reads.load(Ordering::SeqCst)
    }
}

impl Clock for ExpiringClock {
    fn now(&self) -> Instant {
        if self.reads.fetch_add(1, Ordering::SeqCst) < self.fresh_reads {
            self.start
        } else {
            self.start + Duration::from_secs(3600)
        }
    }
}

fn host(clock: Arc<dyn Clock>, script: Option<&str>) -> ScriptHost {
    let mut host = ScriptHost::with_clock(
        HostOptions {
            file: "flow.yaml".to_owned(),
            source: String::new(),
            root: None,
            limits: Limits::STANDARD,
        },
        clock,
    )
    .unwrap();
    if let Some(script) = script {
        host.load_script(&At::new(script.to_owned(), Pos::new(1, 1)))
            .unwrap();
    }
    host
}

fn evaluate(
    host: &ScriptHost,
    code: &str,
    context: &Context,
) -> Result<serde_json::Value, ScriptError> {
    host.evaluate_code(code, Pos::new(1, 1), context)
}

/// Regression: the clock was read every 512 operations only, so a few slow host calls (a
/// `sha256` of 4 MiB each) ran for seconds past the deadline. Now the call reads it first.
#[test]
fn a_slow_host_function_reads_the_deadline_before_it_works() {
    for code in [
        r#"sha256("a")"#,
        r#"lines("a")"#,
        r#""a b".split(" ")"#,
        r#"parse_json("1")"#,
        r#"parse_yaml("a: 1")"#,
        "changed_files()",
    ] {
        // The only fresh reading is the one that sets the deadline.
        let clock = ExpiringClock::new(1);
        let host = host(clock.clone(), None);
        let error = evaluate(&host, code, &Context::empty()).unwrap_err();
        assert!(
            matches!(error, ScriptError::Deadline { .. }),
            "{code}: {error}"
        );
        assert!(
            clock.reads() >= 2,
            "{code}: the host function read the clock"
        );
    }
}

#[test]
fn the_deadline_is_read_within_a_few_dozen_operations() {
    let script = "fn spin() { let n = 0; for i in 0..40 { n += i; } n }";
    // A fresh clock lets the loop finish.
    let relaxed = host(ExpiringClock::new(usize::MAX), Some(script));
    assert_eq!(
        evaluate(&relaxed, "spin()", &Context::empty()).unwrap(),
        780
    );
    let clock = ExpiringClock::new(2);
    let strict = host(clock.clone(), Some(script));
    let error = evaluate(&strict, "spin()", &Context::empty()).unwrap_err();
    assert!(matches!(error, ScriptError::Deadline { .. }), "{error}");
}

fn change(path: &str) -> ChangedFile {
    ChangedFile {
        path: path.to_owned(),
        kind: ChangeKind::Added,
        added: 2,
        removed: 0,
        old_path: None,
        binary: false,
    }
}

fn deferred(key: &str, loads: &Arc<AtomicUsize>) -> Context {
    let counter = Arc::clone(loads);
    Context::with_deferred_changes(
        serde_json::json!({}),
        key,
        Box::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(vec![change("src/a.rs"), change("src/b.rs")])
        }),
    )
    .unwrap()
}

#[test]
fn deferred_changes_load_only_when_asked_and_once_per_key() {
    let host = host(ExpiringClock::new(usize::MAX), None);
    let loads = Arc::new(AtomicUsize::new(0));
    let first = deferred("pre_run..tree1", &loads);
    assert_eq!(evaluate(&host, "1 + 1", &first).unwrap(), 2);
    assert_eq!(loads.load(Ordering::SeqCst), 0, "no script asked");
    assert_eq!(evaluate(&host, "changed_files().len()", &first).unwrap(), 2);
    assert_eq!(evaluate(&host, "diff_stat().added", &first).unwrap(), 4);
    // Another context of the same worktree state reuses the load.
    let same = deferred("pre_run..tree1", &loads);
    assert_eq!(evaluate(&host, "diff_stat().files", &same).unwrap(), 2);
    assert_eq!(loads.load(Ordering::SeqCst), 1);
    let other = deferred("pre_run..tree2", &loads);
    assert_eq!(
        evaluate(&host, "changed_files()[1].path", &other).unwrap(),
        "src/b.rs"
    );
    assert_eq!(loads.load(Ordering::SeqCst), 2);
}

#[test]
fn a_failed_load_is_an_error_of_the_call() {
    let host = host(ExpiringClock::new(usize::MAX), None);
    let context = Context::with_deferred_changes(
        serde_json::json!({}),
        "k",
        Box::new(|| Err("git failed".to_owned())),
    )
    .unwrap();
    let error = evaluate(&host, "changed_files()", &context).unwrap_err();
    assert!(
        error.to_string().contains("changed_files: git failed"),
        "{error}"
    );
}

#[test]
fn a_visit_context_is_built_once_per_key() {
    let host = host(ExpiringClock::new(usize::MAX), None);
    let builds = AtomicUsize::new(0);
    let build = || {
        builds.fetch_add(1, Ordering::SeqCst);
        Ok(Context::empty())
    };
    host.visit_context("run/a/1/0", build).unwrap();
    host.visit_context("run/a/1/0", build).unwrap();
    host.visit_context("run/b/1/1", build).unwrap();
    assert_eq!(builds.load(Ordering::SeqCst), 2);
}
