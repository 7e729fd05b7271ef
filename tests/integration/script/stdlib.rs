//! Every function of `stdlib/`, through `import "tnh/…"` in a workflow script.

use serde_json::json;

use super::{Bench, context, with_changes};

const DOC: &str = r#"script: |
  import "tnh/paths" as paths;
  import "tnh/inputs" as inputs;
  import "tnh/policy" as policy;
  import "tnh/report" as report;
  fn paths_demo() {
      #{
          matches: [paths::matches_any("src/a.rs", "src/*.rs"), paths::matches_any("src/x/a.rs", ["src/*.rs"])],
          filter: paths::filter(["a.rs", "b.md", "c/d.rs"], "**/*.rs"),
          reject: paths::reject(["a.rs", "b.md"], ["*.rs"]),
          top: [paths::top_dir("src/x/a.rs"), paths::top_dir("README.md")],
          name: paths::file_name("src/x/a.rs"),
          parent: [paths::parent("src/x/a.rs"), paths::parent("a.rs")],
          ext: [paths::extension("a/b.tar.gz"), paths::extension("Makefile"), paths::extension(".gitignore")],
          tests: [paths::is_test("tests/cli.rs"), paths::is_test("src/foo_test.go"), paths::is_test("web/a.spec.ts"), paths::is_test("test_x.py"), paths::is_test("src/lib.rs")],
          join: paths::join(["a", "b", "c"], "/"),
      }
  }
  fn select_demo() { [inputs::select("src/**/*.rs"), inputs::select_except(["src/**", "docs/*"], "**/*.md")] }
  fn bundle_demo(budget) { inputs::bundle(["src/a.rs", "src/b.rs", "missing.txt", "docs/guide.md"], budget) }
  fn bundle_glob_demo() { inputs::bundle_glob("docs/*.md", 1000).included }
  fn changed_demo() { inputs::changed_paths(["src/**", "new/**"]) }
  fn summary_demo(max) { inputs::diff_summary(max) }
  fn policy_demo() {
      let changes = changed_files();
      #{
          files_ok: policy::max_changed_files(3),
          files_bad: policy::max_changed_files(1),
          lines_ok: policy::max_diff_lines(100),
          lines_bad: policy::max_diff_lines(10),
          new_dir: changes.map(|c| policy::no_new_top_level_dir(c)),
          tests_bad: policy::tests_touched_with_src("src/**", "tests/**"),
          tests_ok: policy::tests_touched_with_src("src/**", "new/**"),
          first: [policy::first_violation([true, "second", "third"]), policy::first_violation([true, true])],
      }
  }
  fn report_demo(r) {
      #{
          failed: report::failed_cases(r).map(|c| c.id),
          flaky: report::flaky_cases(r).map(|c| c.id),
          repro: report::repro_lines(r),
          summary: report::summary_line(r),
          none: [report::failed_cases(()).len(), report::summary_line(())],
      }
  }
values:
  paths: "${{ paths_demo() }}"
  select: "${{ select_demo() }}"
  bundle_all: "${{ bundle_demo(10000) }}"
  bundle_small: "${{ bundle_demo(40) }}"
  bundle_glob: "${{ bundle_glob_demo() }}"
  changed: "${{ changed_demo() }}"
  summary: "${{ summary_demo(2) }}"
  policy: "${{ policy_demo() }}"
  report: "${{ report_demo(ctx.harness_report) }}"
"#;

const FILES: [(&str, &str); 6] = [
    ("src/a.rs", "fn a() {}\n"),
    ("src/b.rs", "fn b() {}\n"),
    ("src/notes.md", "notes\n"),
    ("docs/guide.md", "# Guide\n"),
    ("docs/api.txt", "api\n"),
    ("new/x.txt", "x\n"),
];

fn changes() -> serde_json::Value {
    json!([
        {"path": "src/a.rs", "kind": "modified", "added": 10, "removed": 2},
        {"path": "new/x.txt", "kind": "added", "added": 1, "removed": 0},
        {"path": "old.txt", "kind": "deleted", "added": 0, "removed": 5},
    ])
}

#[test]
fn paths_predicates_and_filters() {
    let bench = Bench::with_files(DOC, &FILES);
    assert_eq!(
        bench.ok("paths"),
        json!({
            "matches": [true, false],
            "filter": ["a.rs", "c/d.rs"],
            "reject": ["b.md"],
            "top": ["src", ""],
            "name": "a.rs",
            "parent": ["src/x", ""],
            "ext": ["gz", "", ""],
            "tests": [true, true, true, true, false],
            "join": "a/b/c",
        })
    );
}

#[test]
fn inputs_select_files_by_glob() {
    let bench = Bench::with_files(DOC, &FILES);
    assert_eq!(
        bench.ok("select"),
        json!([
            ["src/a.rs", "src/b.rs"],
            ["docs/api.txt", "src/a.rs", "src/b.rs"]
        ])
    );
    assert_eq!(bench.ok("bundle_glob"), json!(["docs/guide.md"]));
}

#[test]
fn inputs_bundle_contents_under_a_budget_and_list_what_was_left_out() {
    let bench = Bench::with_files(DOC, &FILES);
    let all = bench.ok("bundle_all");
    assert_eq!(
        all["text"],
        json!(
            "=== src/a.rs ===\nfn a() {}\n\n=== src/b.rs ===\nfn b() {}\n\n=== docs/guide.md ===\n# Guide\n\n"
        )
    );
    assert_eq!(
        all["included"],
        json!(["src/a.rs", "src/b.rs", "docs/guide.md"])
    );
    assert_eq!(all["bytes"], json!(all["text"].as_str().unwrap().len()));
    let omitted = all["omitted"].as_array().unwrap();
    assert_eq!(omitted.len(), 1);
    assert_eq!(omitted[0]["path"], json!("missing.txt"));
    assert!(
        omitted[0]["reason"]
            .as_str()
            .unwrap()
            .contains("does not exist")
    );

    let small = bench.ok("bundle_small");
    assert_eq!(small["included"], json!(["src/a.rs"]));
    assert!(small["bytes"].as_i64().unwrap() <= 40);
    let over: Vec<&str> = small["omitted"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["reason"] == "over budget")
        .map(|item| item["path"].as_str().unwrap())
        .collect();
    assert_eq!(over, ["src/b.rs", "docs/guide.md"]);
}

#[test]
fn inputs_summarise_the_diff() {
    let bench = Bench::with_files(DOC, &FILES);
    let ctx = with_changes(json!({}), changes());
    assert_eq!(
        bench.eval_in("changed", &ctx).unwrap(),
        json!(["src/a.rs", "new/x.txt"])
    );
    assert_eq!(
        bench.eval_in("summary", &ctx).unwrap(),
        json!(
            "3 files changed (+11 -7): 1 added, 1 modified, 1 deleted, 0 renamed\n\
             modified src/a.rs (+10 -2)\nadded new/x.txt (+1 -0)\n... and 1 more"
        )
    );
    let empty = bench.eval("summary").unwrap();
    assert_eq!(
        empty,
        json!("0 files changed (+0 -0): 0 added, 0 modified, 0 deleted, 0 renamed")
    );
}

#[test]
fn policy_checks_return_true_or_a_reason() {
    let bench = Bench::with_files(DOC, &FILES);
    let ctx = with_changes(json!({}), changes());
    assert_eq!(
        bench.eval_in("policy", &ctx).unwrap(),
        json!({
            "files_ok": true,
            "files_bad": "3 files changed; the policy allows at most 1",
            "lines_ok": true,
            "lines_bad": "18 lines changed; the policy allows at most 10",
            "new_dir": [true, "adds the new top-level directory `new/`", true],
            "tests_bad": "1 source files changed without any test change",
            "tests_ok": true,
            "first": ["second", true],
        })
    );
}

#[test]
fn a_top_level_dir_with_older_files_is_not_new() {
    let mut files = FILES.to_vec();
    files.push(("new/old.txt", "committed before the run\n"));
    let bench = Bench::with_files(DOC, &files);
    let ctx = with_changes(json!({}), changes());
    let policy = bench.eval_in("policy", &ctx).unwrap();
    assert_eq!(policy["new_dir"], json!([true, true, true]));
}

#[test]
fn report_helpers_find_failed_and_flaky_cases_and_repro_lines() {
    let bench = Bench::with_files(DOC, &FILES);
    let ctx = context(json!({"harness_report": {
        "suite_id": "cli_smoke",
        "cases": [
            {"id": "help", "status": "passed", "repro": "tool --help", "observations": []},
            {"id": "bad_flag", "status": "failed", "repro": "tool --bad", "observations": ["exit 0, expected 1"]},
            {"id": "slow", "status": "flaky", "repro": "tool slow"},
            {"id": "crash", "status": "failed", "repro": "tool crash"},
        ],
        "summary": {"passed": 1, "failed": 2, "flaky": 1},
    }}));
    assert_eq!(
        bench.eval_in("report", &ctx).unwrap(),
        json!({
            "failed": ["bad_flag", "crash"],
            "flaky": ["slow"],
            "repro": ["bad_flag: tool --bad (exit 0, expected 1)", "crash: tool crash"],
            "summary": "cli_smoke: 1 passed, 2 failed, 1 flaky, 0 skipped",
            "none": [0, "no report: 0 passed, 0 failed, 0 flaky, 0 skipped"],
        })
    );
}

#[test]
fn every_stdlib_module_compiles_with_the_checking_engine() {
    let engine = tnh_conductor::script::engine::checking_engine();
    for (name, source) in tnh_conductor::script::STDLIB_MODULES {
        engine
            .compile(source)
            .unwrap_or_else(|error| panic!("{name}: {error}"));
    }
}

/// `n` added files under `src/`, with a test file every 10th.
fn many_changes(n: usize) -> serde_json::Value {
    (0..n)
        .map(|i| {
            let path = if i % 10 == 0 {
                format!("tests/module_{}/case_{i}.rs", i / 100)
            } else {
                format!("src/module_{}/file_{i}.rs", i / 100)
            };
            json!({"path": path, "kind": "added", "added": 1, "removed": 0})
        })
        .collect()
}

const MANY: &str = r#"script: |
  import "tnh/inputs" as inputs;
  import "tnh/policy" as policy;
  fn review_reason(test) {
      let changed = inputs::changed_paths(["**"]);
      "Fixed " + test + ": " + changed.len() + " file(s) changed"
  }
  fn helpers() {
      let changes = changed_files();
      #{
          count: changes.len(),
          files_ok: policy::max_changed_files(20000),
          files_bad: policy::max_changed_files(100),
          tests: policy::tests_touched_with_src("src/**", "tests/**"),
          new_dir: policy::no_new_top_level_dir(changes[0]),
          summary: inputs::diff_summary(1),
      }
  }
  fn limit() { policy::max_changed_files(100) }
  fn summary(n) { inputs::diff_summary(n) }
  fn first(n) { changed_files(n).map(|c| c.path) }
values:
  reason: "${{ review_reason(`parser::empty`) }}"
  helpers: "${{ helpers() }}"
  changed: "${{ changed_files().len() }}"
  limit: "${{ limit() }}"
  summary: "${{ summary(2) }}"
  summary_none: "${{ summary(0) }}"
  first: "${{ first(3) }}"
  negative: "${{ first(-1) }}"
"#;

/// Each change is a 6-entry map and Rhai counts the entries of all maps in a value
/// together, so `changed_files()` failed with the map size limit once more than ~3,333 files
/// changed — and with it `policy::max_changed_files`, `inputs::changed_paths` and the README's
/// gate-reason helper. Now a change list as large as one value may hold (20,000 items) works.
#[test]
fn the_readme_reason_and_the_stdlib_helpers_work_on_20000_changed_files() {
    let bench = Bench::new(MANY);
    let ctx = with_changes(json!({}), many_changes(20_000));
    assert_eq!(
        bench.eval_in("reason", &ctx).unwrap(),
        json!("Fixed parser::empty: 20000 file(s) changed")
    );
    let helpers = bench
        .eval_in("helpers", &ctx)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(
        helpers,
        json!({
            "count": 20_000,
            "files_ok": true,
            "files_bad": "20000 files changed; the policy allows at most 100",
            "tests": true,
            "new_dir": "adds the new top-level directory `tests/`",
            "summary": "20000 files changed (+20000 -0): 20000 added, 0 modified, 0 deleted, 0 renamed\nadded tests/module_0/case_0.rs (+1 -0)\n... and 19999 more",
        })
    );
}

/// Beyond what one value may hold, `changed_files()` says so and how to count instead, and
/// `policy::max_changed_files` still answers.
#[test]
fn more_changes_than_a_value_holds_are_refused_by_name_and_still_counted() {
    let bench = Bench::new(MANY);
    let ctx = with_changes(json!({}), many_changes(20_001));
    let error = bench.eval_in("changed", &ctx).unwrap_err().to_string();
    assert!(
        error.ends_with(
            "changed_files: 20001 files changed, more than the 20000 items one value may hold; count them with `diff_stat().files`"
        ),
        "{error}"
    );
    assert_eq!(
        bench.eval_in("limit", &ctx).unwrap(),
        json!("20001 files changed; the policy allows at most 100")
    );
}

/// `inputs::diff_summary(n)` looped over `changed_files()`, so it failed once more
/// than 20,000 files changed (vendoring, generated files). It reads only the first `n` changes
/// now (`changed_files(n)`), whatever their number.
#[test]
fn diff_summary_works_beyond_the_changes_one_value_holds() {
    let bench = Bench::new(MANY);
    let ctx = with_changes(json!({}), many_changes(50_000));
    assert_eq!(
        bench
            .eval_in("summary", &ctx)
            .unwrap_or_else(|error| panic!("{error}")),
        json!(
            "50000 files changed (+50000 -0): 50000 added, 0 modified, 0 deleted, 0 renamed\nadded tests/module_0/case_0.rs (+1 -0)\nadded src/module_0/file_1.rs (+1 -0)\n... and 49998 more"
        )
    );
    assert_eq!(
        bench.eval_in("summary_none", &ctx).unwrap(),
        json!(
            "50000 files changed (+50000 -0): 50000 added, 0 modified, 0 deleted, 0 renamed\n... and 50000 more"
        )
    );
    assert_eq!(
        bench.eval_in("first", &ctx).unwrap(),
        json!([
            "tests/module_0/case_0.rs",
            "src/module_0/file_1.rs",
            "src/module_0/file_2.rs"
        ])
    );
    let error = bench.eval_in("negative", &ctx).unwrap_err().to_string();
    assert!(
        error.contains("changed_files: the number of changes to give is negative (-1)"),
        "{error}"
    );
    // Fewer changes than asked for: all of them, and no "more" line.
    let few = with_changes(json!({}), many_changes(2));
    assert_eq!(
        bench.eval_in("summary", &few).unwrap(),
        json!(
            "2 files changed (+2 -0): 2 added, 0 modified, 0 deleted, 0 renamed\nadded tests/module_0/case_0.rs (+1 -0)\nadded src/module_0/file_1.rs (+1 -0)"
        )
    );
}
