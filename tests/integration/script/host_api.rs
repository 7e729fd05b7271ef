//! Every host function, the policy `check` hook and hook calls by name.

use serde_json::json;
use tnh_conductor::script::{Context, HostOptions, Limits, ScriptError, ScriptHost, Violation};
use tnh_conductor::workflow::model::At;
use tnh_conductor::workflow::yaml::Pos;

use super::{Bench, at, context, with_changes};

const DOC: &str = r#"values:
  read: "${{ read_file(\"./src/../src/a.rs\") }}"
  read_missing: "${{ read_file(\"nope.txt\") }}"
  read_dir: "${{ read_file(\"src\") }}"
  read_binary: "${{ read_file(\"blob.bin\") }}"
  read_large: "${{ read_file(\"large.txt\") }}"
  exists: "${{ [file_exists(\"src/a.rs\"), file_exists(\"nope\"), file_exists(\"src\")] }}"
  glob_one: "${{ glob(\"src/*.rs\") }}"
  glob_deep: "${{ glob(\"**/*.rs\") }}"
  glob_many: "${{ glob([\"*.md\", \"src/deep/**\"]) }}"
  glob_git: "${{ glob(\"**/HEAD\") }}"
  glob_bad: "${{ glob(\"src/[\") }}"
  changed: "${{ changed_files() }}"
  stat: "${{ diff_stat() }}"
  paths: "${{ [changed_paths(\"**\", [\"added\", \"renamed\"]), changed_paths([\"src/**\", \"*.png\"], \"modified\"), changed_paths(\"src/**\", \"deleted\")] }}"
  paths_kind_bad: "${{ changed_paths(\"**\", \"moved\") }}"
  paths_type_bad: "${{ changed_paths(1, \"added\") }}"
  matches: "${{ [path_matches(\"src/a.rs\", \"src/*.rs\"), path_matches(\"src/deep/b.rs\", \"src/*.rs\"), path_matches(\"src/deep/b.rs\", [\"*.md\", \"src/**\"]), path_matches(\"./src/a.rs\", \"src/a.rs\")] }}"
  matches_bad: "${{ path_matches(\"a\", [1]) }}"
  json_parse: "${{ parse_json(\"{\\\"a\\\": [1, 2.5, null, true]}\") }}"
  json_parse_bad: "${{ parse_json(\"{\") }}"
  json_out: "${{ to_json(#{b: [1, \"x\"], a: ()}) }}"
  json_pretty: "${{ to_json([1], true) }}"
  json_fn: "${{ to_json(Fn(\"x\")) }}"
  yaml: "${{ parse_yaml(\"a: [1, two]\\nb: {c: true}\") }}"
  yaml_bad: "${{ parse_yaml(\"a: [1\") }}"
  truncate: "${{ [truncate(\"héllo world\", 5), truncate(\"short\", 10), truncate(\"abc\", 0)] }}"
  lines: "${{ lines(\"a\\nb\\r\\n\\nc\") }}"
  sha: "${{ sha256(\"abc\") }}"
"#;

fn bench() -> Bench {
    let bench = Bench::with_files(
        DOC,
        &[
            ("src/a.rs", "fn a() {}\n"),
            ("src/deep/b.rs", "fn b() {}\n"),
            ("README.md", "# readme\n"),
            (".git/HEAD", "ref: refs/heads/main\n"),
        ],
    );
    std::fs::write(bench.worktree.path().join("blob.bin"), [0xff, 0xfe, 0x00]).unwrap();
    let large = "x".repeat(usize::try_from(Limits::STANDARD.max_read_bytes).unwrap() + 1);
    bench.write("large.txt", &large);
    bench
}

fn failure(bench: &Bench, name: &str, needle: &str) -> ScriptError {
    let error = bench.err(name);
    assert!(error.to_string().contains(needle), "{name}: {error}");
    assert!(
        matches!(error, ScriptError::Runtime { .. }),
        "{name}: {error}"
    );
    error
}

#[test]
fn read_file_reads_utf8_files_inside_the_worktree_only() {
    let bench = bench();
    assert_eq!(bench.ok("read"), json!("fn a() {}\n"));
    let error = failure(
        &bench,
        "read_missing",
        "read_file: `nope.txt` does not exist",
    );
    // The scalar holds escapes, so the error points at the scalar itself.
    assert_eq!(at(&error), "flow.yaml:3:17");
    failure(&bench, "read_dir", "is not a file");
    failure(&bench, "read_binary", "is not UTF-8");
    failure(
        &bench,
        "read_large",
        "files read by scripts are limited to 1048576 bytes",
    );
}

#[test]
fn file_exists_is_true_for_files_only() {
    assert_eq!(bench().ok("exists"), json!([true, false, false]));
}

#[test]
fn glob_lists_sorted_matches_without_crossing_directories_with_a_single_star() {
    let bench = bench();
    assert_eq!(bench.ok("glob_one"), json!(["src/a.rs"]));
    assert_eq!(bench.ok("glob_deep"), json!(["src/a.rs", "src/deep/b.rs"]));
    assert_eq!(bench.ok("glob_many"), json!(["README.md", "src/deep/b.rs"]));
    assert_eq!(bench.ok("glob_git"), json!([]), ".git is never searched");
    failure(&bench, "glob_bad", "is not a glob");
}

#[test]
fn glob_stops_at_the_entry_limit() {
    let limits = Limits {
        max_glob_entries: 3,
        ..Limits::STANDARD
    };
    let bench = Bench::with_limits(DOC, limits);
    for index in 0..5 {
        bench.write(&format!("f{index}.txt"), "x");
    }
    failure(&bench, "glob_deep", "more than 3 entries");
}

/// `glob` walked the whole worktree whatever the pattern, so one large folder (a
/// git-ignored `build/` an agent or a validator filled) made `glob("src/*.txt")` fail, with a
/// hint no narrower pattern could follow. Only the folders a pattern can match in are entered.
#[test]
fn glob_enters_only_the_folders_its_patterns_reach() {
    const PRUNED: &str = r#"values:
  sources: "${{ glob(\"src/*.txt\") }}"
  nested: "${{ glob([\"src/**/*.txt\", \"docs/*.md\"]) }}"
  top: "${{ glob(\"src/**\") }}"
  everywhere: "${{ glob(\"**/*.txt\") }}"
"#;
    let limits = Limits {
        max_glob_entries: 50,
        ..Limits::STANDARD
    };
    let bench = Bench::with_limits(PRUNED, limits);
    for index in 0..200 {
        bench.write(&format!("build/o{index}.txt"), "x");
    }
    bench.write("src/a.txt", "a");
    bench.write("src/deep/b.txt", "b");
    bench.write("docs/guide.md", "g");
    assert_eq!(bench.ok("sources"), json!(["src/a.txt"]));
    assert_eq!(
        bench.ok("nested"),
        json!(["docs/guide.md", "src/a.txt", "src/deep/b.txt"])
    );
    assert_eq!(bench.ok("top"), json!(["src/a.txt", "src/deep/b.txt"]));
    // A pattern that reaches the large folder still meets the bound, and says where.
    let error = failure(&bench, "everywhere", "more than 50 entries to search");
    assert!(error.to_string().contains("`build/`"), "{error}");
}

#[test]
fn changed_files_and_diff_stat_come_from_the_supplied_changes() {
    let bench = bench();
    let ctx = with_changes(
        json!({}),
        json!([
            {"path": "src/a.rs", "kind": "modified", "added": 3, "removed": 1},
            {"path": "logo.png", "kind": "added", "added": 0, "removed": 0, "binary": true},
            {"path": "new.rs", "kind": "renamed", "added": 0, "removed": 0, "old_path": "old.rs"},
        ]),
    );
    assert_eq!(
        bench.eval_in("changed", &ctx).unwrap(),
        json!([
            {"path": "src/a.rs", "kind": "modified", "added": 3, "removed": 1, "old_path": null, "binary": false},
            {"path": "logo.png", "kind": "added", "added": 0, "removed": 0, "old_path": null, "binary": true},
            {"path": "new.rs", "kind": "renamed", "added": 0, "removed": 0, "old_path": "old.rs", "binary": false},
        ])
    );
    assert_eq!(
        bench.eval_in("stat", &ctx).unwrap(),
        json!({"files": 3, "added": 3, "removed": 1, "binary": 1,
               "by_kind": {"added": 1, "modified": 1, "deleted": 0, "renamed": 1}})
    );
    assert_eq!(bench.ok("changed"), json!([]));
    // `changed_paths` filters the same changes by kind and glob, natively.
    assert_eq!(
        bench.eval_in("paths", &ctx).unwrap(),
        json!([["logo.png", "new.rs"], ["src/a.rs"], []])
    );
    for (name, needle) in [
        (
            "paths_kind_bad",
            "changed_paths: `moved` is not a kind of change",
        ),
        (
            "paths_type_bad",
            "changed_paths: expected a string or an array of strings, found i64",
        ),
    ] {
        let error = bench.eval_in(name, &ctx).unwrap_err().to_string();
        assert!(error.contains(needle), "{name}: {error}");
    }
}

#[test]
fn path_matches_takes_one_glob_or_a_list() {
    let bench = bench();
    assert_eq!(bench.ok("matches"), json!([true, false, true, true]));
    failure(&bench, "matches_bad", "expected strings");
}

#[test]
fn json_parsing_and_printing() {
    let bench = bench();
    assert_eq!(bench.ok("json_parse"), json!({"a": [1, 2.5, null, true]}));
    failure(&bench, "json_parse_bad", "parse_json:");
    assert_eq!(bench.ok("json_out"), json!("{\"a\":null,\"b\":[1,\"x\"]}"));
    assert_eq!(bench.ok("json_pretty"), json!("[\n  1\n]"));
    failure(&bench, "json_fn", "cannot leave the script");
}

#[test]
fn yaml_parsing_uses_the_bounded_workflow_parser() {
    let bench = bench();
    assert_eq!(bench.ok("yaml"), json!({"a": [1, "two"], "b": {"c": true}}));
    failure(&bench, "yaml_bad", "parse_yaml: 1:");
}

#[test]
fn text_helpers() {
    let bench = bench();
    assert_eq!(bench.ok("truncate"), json!(["héll…", "short", ""]));
    assert_eq!(bench.ok("lines"), json!(["a", "b", "", "c"]));
    assert_eq!(
        bench.ok("sha"),
        json!("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    );
}

#[test]
fn a_host_without_a_worktree_refuses_file_access() {
    let host = ScriptHost::new(HostOptions {
        file: "flow.yaml".to_owned(),
        source: String::new(),
        root: None,
        limits: Limits::STANDARD,
    })
    .unwrap();
    let error = host
        .evaluate_code("read_file(\"a\")", Pos::new(1, 1), &Context::empty())
        .unwrap_err();
    assert!(error.to_string().contains("needs a worktree"), "{error}");
}

const POLICY: &str = r#"script: |
  fn check(change) {
      if change.path.starts_with("vendor/") {
          return "vendored code is off limits";
      }
      if change.kind == "deleted" { return false; }
      true
  }
  fn wrong(change) { 42 }
  fn broken(change) {
      let value = change.nope.len();
      true
  }
  fn summarize(evidence, limit) {
      #{ count: evidence.len(), first: evidence.extract(0, limit) }
  }
values:
  check: check
  wrong: wrong
  broken: broken
"#;

fn policy_context() -> Context {
    with_changes(
        json!({}),
        json!([
            {"path": "src/a.rs", "kind": "modified", "added": 1, "removed": 1},
            {"path": "vendor/lib.c", "kind": "added", "added": 9, "removed": 0},
            {"path": "gone.txt", "kind": "deleted", "added": 0, "removed": 3},
        ]),
    )
}

fn named(bench: &Bench, key: &str) -> At<String> {
    let node = bench.value(key);
    At::new(node.as_str().unwrap().to_owned(), node.pos)
}

#[test]
fn a_policy_check_is_called_per_changed_file_and_reasons_become_violations() {
    let bench = Bench::new(POLICY);
    let violations = bench
        .host
        .check_policy(&named(&bench, "check"), &policy_context())
        .unwrap();
    assert_eq!(
        violations,
        [
            Violation {
                path: "vendor/lib.c".to_owned(),
                reason: "vendored code is off limits".to_owned()
            },
            Violation {
                path: "gone.txt".to_owned(),
                reason: "rejected by the policy check".to_owned()
            },
        ]
    );
    assert!(
        bench
            .host
            .check_policy(&named(&bench, "check"), &context(json!({})))
            .unwrap()
            .is_empty()
    );
}

/// Nothing bounded the policy stage: `check` ran once per changed file, each call
/// with its own 2 s deadline, so a slow check over thousands of files ran for minutes. Now
/// all the calls of a stage share one budget; a call in progress stops at its end and the
/// files left fail closed with a reason that says so.
#[test]
fn the_check_calls_of_one_policy_stage_share_one_budget_and_the_rest_fail_closed() {
    let doc = "script: |\n  fn slow(change) {\n      let n = 0;\n      for i in 0..200000 { n += i; }\n      true\n  }\nvalues:\n  slow: slow\n";
    let limits = Limits {
        max_check_time: std::time::Duration::from_millis(300),
        ..Limits::STANDARD
    };
    let bench = Bench::with_limits(doc, limits);
    let changes: Vec<serde_json::Value> = (0..40)
        .map(|index| json!({"path": format!("f{index}.txt"), "kind": "added", "added": 1, "removed": 0}))
        .collect();
    let started = std::time::Instant::now();
    let violations = bench
        .host
        .check_policy(
            &named(&bench, "slow"),
            &with_changes(json!({}), json!(changes)),
        )
        .unwrap();
    let elapsed = started.elapsed();
    // Forty calls of this check take several seconds in a debug build; the stage ends soon
    // after its budget.
    assert!(
        elapsed < std::time::Duration::from_millis(1500),
        "took {elapsed:?}"
    );
    assert!(!violations.is_empty());
    for violation in &violations {
        assert!(
            violation.reason.starts_with(
                "not checked: the policy's `check` calls of this step ran out of their 300 ms budget after "
            ),
            "{violation:?}"
        );
    }
    // The files left unchecked are the last ones, in change order.
    assert_eq!(violations.last().unwrap().path, "f39.txt");
}

#[test]
fn a_policy_check_returning_something_else_is_an_error_at_the_check_line() {
    let bench = Bench::new(POLICY);
    let error = bench
        .host
        .check_policy(&named(&bench, "wrong"), &policy_context())
        .unwrap_err();
    assert!(matches!(error, ScriptError::Value { .. }), "{error}");
    assert!(
        error.to_string().contains("returned a value of type `i64`"),
        "{error}"
    );
    assert_eq!(at(&error), "flow.yaml:19:10");
}

#[test]
fn a_failing_policy_check_points_into_the_script() {
    let bench = Bench::new(POLICY);
    let error = bench
        .host
        .check_policy(&named(&bench, "broken"), &policy_context())
        .unwrap_err();
    assert_eq!(at(&error).split(':').nth(1), Some("11"), "{error}");
    assert!(error.to_string().contains("in `broken`"), "{error}");
}

#[test]
fn a_hook_is_called_by_name_with_json_arguments() {
    let bench = Bench::new(POLICY);
    let value = bench
        .host
        .call_function(
            &At::new("summarize".to_owned(), Pos::new(1, 1)),
            &[json!(["a", "b", "c"]), json!(2)],
            &Context::empty(),
        )
        .unwrap();
    assert_eq!(value, json!({"count": 3, "first": ["a", "b"]}));
    let error = bench
        .host
        .call_function(
            &At::new("x); eval(\"1\"".to_owned(), Pos::new(4, 2)),
            &[],
            &Context::empty(),
        )
        .unwrap_err();
    assert!(
        error.to_string().contains("is not a function name"),
        "{error}"
    );
}

#[test]
fn check_change_adapts_to_the_policy_modules_per_file_hook() {
    let bench = Bench::new(POLICY);
    let check = named(&bench, "check");
    let ctx = Context::empty();
    let vendored = tnh_conductor::workspace::ChangedFile {
        path: "vendor/lib.c".to_owned(),
        old_path: None,
        kind: tnh_conductor::workspace::ChangeKind::Add,
        old_mode: None,
        new_mode: Some("100644".to_owned()),
        binary: false,
        symlink_target: None,
        lines_added: 9,
        lines_removed: 0,
        quoted_path: None,
        quoted_old_path: None,
    };
    let hook = |change: &tnh_conductor::workspace::ChangedFile| {
        bench
            .host
            .check_change(&check, &change.into(), &ctx)
            .unwrap_or_else(|error| Some(format!("the check failed: {error}")))
    };
    assert_eq!(
        hook(&vendored).as_deref(),
        Some("vendored code is off limits")
    );
    let fine = tnh_conductor::workspace::ChangedFile {
        path: "src/a.rs".to_owned(),
        ..vendored
    };
    assert_eq!(hook(&fine), None);
}
