//! Hostile scripts: each is stopped by the sandbox with a clear error that points at the YAML
//! line of the code, quickly, and without touching anything outside the worktree.

use std::time::{Duration, Instant};

use serde_json::json;
use tnh_conductor::script::{Limits, ScriptError};

use super::{Bench, at, context};

const DOC: &str = r#"script: |
  fn forever() {
      loop { }
  }
  fn recurse(n) {
      recurse(n + 1)
  }
  fn huge_string() {
      let s = "x";
      loop { s += s; }
  }
  fn huge_array() {
      let a = [];
      loop { a.push(1); }
  }
  fn padded() {
      let a = [];
      a.pad(1000000000, 0);
      a
  }
  fn change_ctx() {
      ctx.run.id = "forged";
  }
  fn read_outside() {
      read_file("../../etc/passwd")
  }
values:
  loop: "${{ forever() }}"
  recursion: "${{ recurse(0) }}"
  string: "${{ huge_string() }}"
  array: "${{ huge_array() }}"
  pad: "${{ padded() }}"
  mutate_ctx: "${{ change_ctx() }}"
  mutate_params: "${{ params.x = 1 }}"
  read: "${{ read_outside() }}"
  absolute: "${{ read_file(\"/etc/passwd\") }}"
  symlink: "${{ read_file(\"escape/passwd\") }}"
  symlink_exists: "${{ file_exists(\"escape/passwd\") }}"
  glob_outside: "${{ glob(\"../*\") }}"
  repeat: "${{ \"x\".pad(1000000000, \"x\") }}"
"#;

/// Evaluates `name`, which must fail, within a generous bound that still catches a hang.
fn stopped(bench: &Bench, name: &str) -> ScriptError {
    let started = Instant::now();
    let error = bench.err(name);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{name} took {:?}",
        started.elapsed()
    );
    assert!(error.hint().is_some());
    error
}

#[test]
fn an_endless_loop_stops_at_the_operations_limit() {
    let bench = Bench::new(DOC);
    let error = stopped(&bench, "loop");
    assert!(
        matches!(&error, ScriptError::Limit { limit, .. } if limit == "operations"),
        "{error}"
    );
    // Limits are not catchable errors, so Rhai reports them at the call in the expression.
    assert_eq!(at(&error), "flow.yaml:28:14", "{error}");
}

#[test]
fn an_endless_loop_stops_at_the_deadline_when_operations_allow_more() {
    let limits = Limits {
        max_operations: 0,
        deadline: Duration::from_millis(100),
        ..Limits::STANDARD
    };
    let bench = Bench::with_limits(DOC, limits);
    let error = stopped(&bench, "loop");
    assert!(
        matches!(error, ScriptError::Deadline { millis: 100, .. }),
        "{error}"
    );
    assert!(error.to_string().contains("100 ms deadline"), "{error}");
}

#[test]
fn unbounded_recursion_stops_at_the_call_depth_without_overflowing_the_stack() {
    let bench = Bench::new(DOC);
    let error = stopped(&bench, "recursion");
    assert!(
        matches!(&error, ScriptError::Limit { limit, .. } if limit == "call depth"),
        "{error}"
    );
    assert_eq!(at(&error), "flow.yaml:29:19", "{error}");
}

#[test]
fn a_gigabyte_string_stops_at_the_string_size_limit() {
    let bench = Bench::new(DOC);
    for name in ["string", "repeat"] {
        let error = stopped(&bench, name);
        assert!(
            matches!(&error, ScriptError::Limit { limit, .. } if limit.contains("string")),
            "{error}"
        );
    }
    assert_eq!(at(&bench.err("string")), "flow.yaml:30:16");
}

#[test]
fn strings_held_in_a_container_count_towards_the_string_limit() {
    let doc = "script: |\n  fn many_strings() {\n      let big = \"x\";\n      big.pad(1000000, \"x\");\n      let a = [];\n      for i in 0..100 { a.push(big + i); }\n      a.len()\n  }\nvalues:\n  many: \"${{ many_strings() }}\"\n";
    let bench = Bench::new(doc);
    let error = stopped(&bench, "many");
    assert!(
        matches!(&error, ScriptError::Limit { limit, .. } if limit.contains("string")),
        "{error}"
    );
}

#[test]
fn a_huge_array_stops_at_the_array_size_limit() {
    // Pushing 20,000 items one by one takes seconds in a debug build on a loaded machine (Rhai
    // sizes the array at every push): the deadline must not be what stops it here.
    let limits = Limits {
        deadline: Duration::from_secs(120),
        ..Limits::STANDARD
    };
    let bench = Bench::with_limits(DOC, limits);
    for name in ["array", "pad"] {
        let error = stopped(&bench, name);
        assert!(
            matches!(&error, ScriptError::Limit { limit, .. } if limit.contains("array")),
            "{name}: {error}"
        );
    }
}

/// Regression: `lines`, `split` and `parse_yaml` built their whole result (hundreds of MB for
/// a 4 MiB text) before Rhai's size limits applied. They now stop at the limit while building.
#[test]
fn splitting_or_parsing_a_huge_text_stops_at_the_limits_before_building_it() {
    let doc = r#"script: |
  fn big(unit) {
      let s = unit;
      while s.len() < 2000000 { s += s; }
      s
  }
  fn flow_list() { "[" + big("1,") + "1]" }
  fn list_of(items) {
      let s = "";
      s.pad(2 * items, "1,");
      "[" + s + "1]"
  }
values:
  lines: "${{ lines(big(\"a\\n\")).len() }}"
  split: "${{ big(\"a,\").split(\",\").len() }}"
  split_char: "${{ big(\"a,\").split(',').len() }}"
  split_whitespace: "${{ big(\"a \").split().len() }}"
  split_rev: "${{ big(\"a,\").split_rev(\",\").len() }}"
  chars: "${{ big(\"ab\").to_chars().len() }}"
  yaml: "${{ parse_yaml(flow_list()) }}"
  yaml_nodes: "${{ parse_yaml(list_of(60001)) }}"
  json_nodes: "${{ parse_json(list_of(60001)) }}"
  sha: "${{ sha256(big(\"ab\")) }}"
  within: "${{ lines(\"a\\nb\").len() + \"a,b\".split(\",\").len() + parse_yaml(\"[1, 2]\").len() + parse_json(list_of(19999)).len() }}"
"#;
    let bench = Bench::new(doc);
    for name in [
        "lines",
        "split",
        "split_char",
        "split_whitespace",
        "split_rev",
        "chars",
    ] {
        let error = stopped(&bench, name);
        assert!(
            matches!(&error, ScriptError::Limit { limit, .. } if limit.contains("array")),
            "{name}: {error}"
        );
    }
    for name in ["yaml", "sha"] {
        let error = stopped(&bench, name);
        assert!(
            error
                .to_string()
                .contains("at most 1048576 bytes are accepted"),
            "{name}: {error}"
        );
    }
    for name in ["yaml_nodes", "json_nodes"] {
        let error = stopped(&bench, name);
        assert!(
            error.to_string().contains("holds more than 60001 values"),
            "{name}: {error}"
        );
    }
    assert_eq!(bench.eval("within").unwrap(), json!(20_006));
}

#[test]
fn eval_is_refused_when_compiling() {
    let doc = "script: |\n  fn run(code) {\n      eval(code)\n  }\nvalues: {}\n";
    let error = Bench::try_with_files(doc, &[]).err().expect("eval refused");
    assert!(matches!(error, ScriptError::Compile { .. }), "{error}");
    assert!(error.to_string().contains("'eval' is disabled"), "{error}");
    assert_eq!(at(&error), "flow.yaml:3:7");
}

#[test]
fn sleep_exit_and_time_are_not_part_of_the_language() {
    let doc = "values:\n  sleep: \"${{ sleep(10) }}\"\n  exit: \"${{ exit(1) }}\"\n  time: \"${{ timestamp() }}\"\n";
    let bench = Bench::new(doc);
    for name in ["sleep", "exit", "time"] {
        let error = stopped(&bench, name);
        assert!(error.to_string().contains("function not found"), "{error}");
    }
}

#[test]
fn importing_a_file_outside_stdlib_and_the_repository_modules_is_refused() {
    for path in [
        "/etc/passwd",
        "../secrets",
        "tnh/missing",
        ".tnh/scripts/../../x",
    ] {
        let doc = format!("script: |\n  import \"{path}\" as m;\nvalues: {{}}\n");
        let error = Bench::try_with_files(&doc, &[])
            .err()
            .expect("import refused");
        assert!(error.to_string().contains("is refused"), "{path}: {error}");
        assert_eq!(at(&error), "flow.yaml:2:10", "{error}");
    }
}

#[test]
fn an_import_cycle_is_an_error_not_a_hang() {
    let files = [
        (
            ".tnh/scripts/a.rhai",
            "import \".tnh/scripts/b\" as b;\nfn f() { 1 }\n",
        ),
        (
            ".tnh/scripts/b.rhai",
            "import \".tnh/scripts/a\" as a;\nfn g() { 2 }\n",
        ),
    ];
    let doc = "script: |\n  import \".tnh/scripts/a\" as a;\nvalues: {}\n";
    let error = Bench::try_with_files(doc, &files).err().expect("a cycle");
    assert!(error.to_string().contains("import cycle"), "{error}");
}

#[test]
fn reading_outside_the_worktree_is_refused() {
    let bench = Bench::new(DOC);
    let error = stopped(&bench, "read");
    assert!(
        error.to_string().contains("leads outside the worktree"),
        "{error}"
    );
    assert!(error.to_string().contains("in `read_outside`"), "{error}");
    assert_eq!(at(&error), "flow.yaml:25:7", "{error}");
    let error = stopped(&bench, "absolute");
    assert!(error.to_string().contains("is absolute"), "{error}");
    let error = stopped(&bench, "glob_outside");
    assert!(error.to_string().contains("leads outside"), "{error}");
}

#[test]
fn a_symlink_that_leads_outside_the_worktree_is_refused() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("passwd"), "root:x:0:0").unwrap();
    let bench = Bench::new(DOC);
    std::os::unix::fs::symlink(outside.path(), bench.worktree.path().join("escape")).unwrap();
    for name in ["symlink", "symlink_exists"] {
        let error = stopped(&bench, name);
        assert!(
            error.to_string().contains("symlink that leads outside"),
            "{error}"
        );
    }
    bench.write("inside.txt", "fine");
    std::os::unix::fs::symlink("inside.txt", bench.worktree.path().join("link.txt")).unwrap();
    let doc = "values:\n  via_link: \"${{ read_file(\\\"link.txt\\\") }}\"\n";
    let inner = Bench::new(doc);
    inner.write("inside.txt", "fine");
    std::os::unix::fs::symlink("inside.txt", inner.worktree.path().join("link.txt")).unwrap();
    assert_eq!(inner.ok("via_link"), json!("fine"));
}

#[test]
fn mutating_ctx_or_params_is_an_error() {
    let bench = Bench::new(DOC);
    let ctx = context(json!({"run": {"id": "r1"}, "params": {"x": 0}}));
    let error = bench.eval_in("mutate_ctx", &ctx).unwrap_err();
    assert!(matches!(error, ScriptError::ReadOnly { .. }), "{error}");
    assert!(error.to_string().contains("read-only"), "{error}");
    assert_eq!(at(&error).split(':').nth(1), Some("22"), "{error}");
    let error = bench.eval_in("mutate_params", &ctx).unwrap_err();
    assert!(
        matches!(
            error,
            ScriptError::ReadOnly { .. } | ScriptError::Compile { .. }
        ),
        "{error}"
    );
    // A local copy may change; the context stays as it was for the next evaluation.
    let doc = "script: |\n  fn forge() { let c = ctx; c.run.id = \"forged\"; c.run.id }\nvalues:\n  forge: \"${{ forge() }}\"\n  id: \"${{ ctx.run.id }}\"\n";
    let copy = Bench::new(doc);
    assert_eq!(copy.eval_in("forge", &ctx).unwrap(), json!("forged"));
    assert_eq!(copy.eval_in("id", &ctx).unwrap(), json!("r1"));
    let error = bench.eval_in("mutate_ctx", &ctx).unwrap_err();
    assert!(
        error.to_string().contains("tried to modify `ctx`"),
        "{error}"
    );
}

#[test]
fn a_print_flood_is_bounded() {
    let doc = "script: |\n  fn flood() { for i in 0..5000 { print(i) } 1 }\nvalues:\n  flood: \"${{ flood() }}\"\n";
    let limits = Limits {
        max_messages: 10,
        ..Limits::STANDARD
    };
    let bench = Bench::with_limits(doc, limits);
    let _ = bench.eval("flood");
    let output = bench.host.take_output();
    assert_eq!(output.len(), 11);
    assert!(output[10].text.contains("4990 more messages were dropped"));
}

#[test]
fn a_stopped_script_and_its_output_are_recorded_in_the_run_events() {
    use tnh_conductor::artifacts::{EventLog, EventPayload, EventType};
    let doc = "script: |\n  fn noisy() {\n      print(\"starting\");\n      loop { }\n  }\nvalues:\n  x: \"${{ noisy() }}\"\n";
    let bench = Bench::new(doc);
    let error = bench.err("x");
    let run = tempfile::tempdir().unwrap();
    let path = run.path().join("events.ndjson");
    let mut log = EventLog::open(&path, "r1").unwrap();
    for message in bench.host.take_output() {
        log.append(Some(("a", 1)), message.event_payload()).unwrap();
    }
    log.append(
        Some(("a", 1)),
        EventPayload::StepFailed(error.step_failed()),
    )
    .unwrap();
    let events = EventLog::read_all(&path).unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].event_type(), EventType::ScriptOutput);
    let EventPayload::ScriptOutput(output) = &events[0].payload else {
        panic!("{:?}", events[0]);
    };
    assert_eq!(output.text, "starting");
    let EventPayload::StepFailed(failed) = &events[1].payload else {
        panic!("{:?}", events[1]);
    };
    assert_eq!(failed.file.as_deref(), Some("flow.yaml"));
    assert_eq!(failed.line, Some(7));
    assert!(failed.error.contains("exceeded the operations limit"));
    // As written: the fields keep their names in the line.
    let line: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .nth(1)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(line["file"], json!("flow.yaml"));
    assert_eq!(line["line"], json!(7));
}

#[test]
fn repository_modules_are_not_read_after_the_script_is_loaded() {
    let files = [(".tnh/scripts/rules.rhai", "fn verdict() { \"strict\" }\n")];
    let doc = "script: |\n  import \".tnh/scripts/rules\" as rules;\n  fn early() { rules::verdict() }\n  fn late() {\n      import \".tnh/scripts/other\" as other;\n      other::verdict()\n  }\nvalues:\n  early: \"${{ early() }}\"\n  late: \"${{ late() }}\"\n";
    let bench = Bench::with_files(doc, &files);
    // An agent rewrites the module after the run loaded the script: the loaded one stays.
    bench.write(".tnh/scripts/rules.rhai", "fn verdict() { \"lenient\" }\n");
    bench.write(".tnh/scripts/other.rhai", "fn verdict() { \"lenient\" }\n");
    assert_eq!(bench.ok("early"), json!("strict"));
    let error = stopped(&bench, "late");
    assert!(
        error
            .to_string()
            .contains("repository modules are read when the run loads"),
        "{error}"
    );
    assert_eq!(at(&error), "flow.yaml:5:14", "{error}");
}

/// A script that keeps 1 MiB strings as map keys, which Rhai's data-size limits do not count.
const MAP_KEYS: &str = r#"script: |
  fn hoard() {
      let s = "x";
      s.pad(1048576, "x");
      let m = #{};
      for i in 0..400 { m[i.to_string() + s] = 1; }
      m.len()
  }
values:
  hoard: "${{ hoard() }}"
"#;

/// Map keys are not counted by the data-size limits, so `m[s + i] = 1` with large
/// strings held hundreds of MB (430 MB in the review) and only the deadline stopped it. The
/// host now reads the process's memory while a script runs and stops an evaluation that grew
/// it past the budget.
#[test]
fn map_keys_that_grow_the_process_past_the_memory_budget_are_stopped() {
    // A small budget: the test process is shared with other tests' evaluations.
    let limits = Limits {
        max_memory_growth: 16 * 1024 * 1024,
        ..Limits::STANDARD
    };
    let bench = Bench::with_limits(MAP_KEYS, limits);
    let error = stopped(&bench, "hoard");
    assert!(
        matches!(&error, ScriptError::Limit { limit, .. } if limit.starts_with("memory (16 MiB")),
        "{error}"
    );
    assert_eq!(at(&error), "flow.yaml:10:15", "{error}");
}

/// The same script in a real run, under the standard budget: the gate's reason fails with the
/// memory limit at the expression, and the conductor never held more than a couple of hundred
/// MB (it went to 430 MB before, and 400 MB of keys here).
#[test]
fn a_run_whose_script_hoards_memory_stops_with_the_memory_limit() {
    use nix::sys::resource::{UsageWho, getrusage};

    use crate::kernel_support::{RunRepo, first_event};
    use crate::support::stderr_text;

    let repo = RunRepo::new();
    let script = MAP_KEYS
        .split("values:")
        .next()
        .unwrap()
        .replace("script: |\n", "");
    let path = repo.workflow_text(
        "hoard.yaml",
        &format!(
            "workflow_id: hoard\nversion: 1\ndescription: d\nentry_step: review\nscript: |\n{script}steps:\n  - id: review\n    opcode: GATE\n    gate: queue_for_review\n    reason: \"${{{{ hoard() }}}}\"\n    routes: {{gate_queued: STOP}}\n"
        ),
    );
    let (code, result, output) = repo.run(&path, &[]);
    assert_eq!(code, Some(4), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let failed = first_event(&repo.events(run_id), "step_failed").clone();
    assert!(
        failed["error"].as_str().unwrap().ends_with(
            "/wf/hoard.yaml:17:18 (expression 1:2): the expression exceeded the memory (128 MiB more than the process held as the evaluation began) limit"
        ),
        "{failed}"
    );
    // The largest child this test process has waited for (in kilobytes on Linux): the other
    // tests' children are far smaller.
    let peak_kib = getrusage(UsageWho::RUSAGE_CHILDREN).unwrap().max_rss();
    assert!(peak_kib < 300 * 1024, "a child held {peak_kib} KiB");
}
