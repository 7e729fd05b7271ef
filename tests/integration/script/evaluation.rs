//! Typed results, interpolation, substitution, script functions called from expressions,
//! compile-once, captured output, and errors located in the YAML file.

use serde_json::json;
use tnh_conductor::script::{MessageKind, ScriptError};

use super::{Bench, at, context};

const DOC: &str = r#"script: |
  fn double(list) {
      list.map(|x| x * 2)
  }
  fn describe(n) {
      #{ count: n, label: "n=" + n }
  }
  fn failing(x) {
      let y = x + 1;
      throw "bad input " + y;
  }
  fn shout(text) {
      print("shouting " + text);
      debug(text);
      text.to_upper()
  }
values:
  list: "${{ double([1, 2, 3]) }}"
  map: "${{ describe(4) }}"
  number: "${{ 40 + 2 }}"
  flag: "${{ params.dry_run }}"
  text: "run ${run_id} has ${{ params.modules.len() }} modules: ${{ params.modules }}"
  nested:
    - "${{ [1, [2, #{a: ()}]] }}"
    - plain
    - { deep: "${{ ctx.step.visit + 1 }}" }
  param: "${params.name}"
  thrown: "${{ failing(1) }}"
  syntax: "${{ 1 + * 2 }}"
  printing: "${{ shout(\"hi\") }}"
  unknown_function: "${{ nope(1) }}"
  unknown_substitution: "x ${step_dir}"
  float: "${{ 1.5 * 2.0 }}"
  function_value: "${{ Fn(\"double\") }}"
"#;

fn params() -> serde_json::Value {
    json!({
        "run": {"id": "20260101T000000Z-abc123", "dir": "/runs/x"},
        "step": {"id": "build", "visit": 2},
        "params": {"dry_run": true, "modules": ["a", "b"], "name": "docs"},
    })
}

#[test]
fn a_whole_expression_keeps_its_type() {
    let bench = Bench::new(DOC);
    let ctx = context(params());
    assert_eq!(bench.eval_in("list", &ctx).unwrap(), json!([2, 4, 6]));
    assert_eq!(
        bench.eval_in("map", &ctx).unwrap(),
        json!({"count": 4, "label": "n=4"})
    );
    assert_eq!(bench.eval_in("number", &ctx).unwrap(), json!(42));
    assert_eq!(bench.eval_in("flag", &ctx).unwrap(), json!(true));
    assert_eq!(bench.eval_in("float", &ctx).unwrap(), json!(3.0));
    assert_eq!(
        bench.eval_in("nested", &ctx).unwrap(),
        json!([[1, [2, {"a": null}]], "plain", {"deep": 3}])
    );
}

#[test]
fn the_yaml_node_of_a_whole_expression_is_a_sequence_at_the_same_position() {
    let bench = Bench::new(DOC);
    let node = bench.value("list");
    let evaluated = bench.host.evaluate_node(node, &context(params())).unwrap();
    assert_eq!(evaluated.pos, node.pos);
    assert_eq!(evaluated.as_seq().map(<[_]>::len), Some(3));
}

#[test]
fn expressions_inside_longer_strings_are_interpolated_as_text_and_names_substituted() {
    let bench = Bench::new(DOC);
    let ctx = context(params());
    assert_eq!(
        bench.eval_in("text", &ctx).unwrap(),
        json!("run 20260101T000000Z-abc123 has 2 modules: [\"a\",\"b\"]")
    );
    assert_eq!(bench.eval_in("param", &ctx).unwrap(), json!("docs"));
}

#[test]
fn a_substitution_without_a_value_names_the_known_ones() {
    let bench = Bench::new(DOC);
    let error = bench
        .eval_in("unknown_substitution", &context(params()))
        .unwrap_err();
    assert_eq!(at(&error), "flow.yaml:32:28");
    assert!(
        error.to_string().contains("`${step_dir}` has no value"),
        "{error}"
    );
    assert!(error.to_string().contains("run_id"), "{error}");
}

#[test]
fn a_thrown_error_points_at_the_expression_and_the_script_line() {
    let bench = Bench::new(DOC);
    let error = bench.err("thrown");
    // `throw` is on line 10 of the file, column 7.
    assert_eq!(at(&error), "flow.yaml:10:7", "{error}");
    let text = error.to_string();
    assert!(text.contains("bad input 2"), "{text}");
    assert!(text.contains("in `failing`"), "{text}");
    assert!(matches!(error, ScriptError::Runtime { .. }));
}

#[test]
fn a_syntax_error_in_an_expression_points_at_the_column() {
    let bench = Bench::new(DOC);
    let error = bench.err("syntax");
    assert!(matches!(error, ScriptError::Compile { .. }), "{error}");
    assert_eq!(at(&error), "flow.yaml:29:20", "{error}");
}

#[test]
fn a_missing_function_is_an_error_at_the_call() {
    let bench = Bench::new(DOC);
    let error = bench.err("unknown_function");
    assert_eq!(at(&error), "flow.yaml:31:26", "{error}");
    assert!(error.to_string().contains("nope"), "{error}");
}

#[test]
fn a_value_that_cannot_leave_the_script_is_refused() {
    let bench = Bench::new(DOC);
    let error = bench.err("function_value");
    assert!(matches!(error, ScriptError::Value { .. }), "{error}");
    assert!(
        error.to_string().contains("cannot leave the script"),
        "{error}"
    );
}

#[test]
fn print_and_debug_are_captured_for_the_caller_not_printed() {
    let bench = Bench::new(DOC);
    assert_eq!(bench.ok("printing"), json!("HI"));
    let output = bench.host.take_output();
    assert_eq!(output.len(), 2);
    assert_eq!(output[0].kind, MessageKind::Print);
    assert_eq!(output[0].text, "shouting hi");
    assert_eq!(output[1].kind, MessageKind::Debug);
    assert!(bench.host.take_output().is_empty());
}

#[test]
fn a_script_that_does_not_compile_is_refused_at_its_line() {
    let doc = "script: |\n  fn ok() { 1 }\n  fn bad() { let = 2; }\nvalues: {}\n";
    let error = Bench::try_with_files(doc, &[])
        .err()
        .expect("a compile error");
    assert!(matches!(error, ScriptError::Compile { .. }), "{error}");
    assert_eq!(at(&error), "flow.yaml:3:18", "{error}");
    assert!(error.hint().is_some());
}

#[test]
fn expressions_are_compiled_once_and_reused() {
    let bench = Bench::new(DOC);
    let ctx = context(params());
    for _ in 0..3 {
        assert_eq!(bench.eval_in("number", &ctx).unwrap(), json!(42));
    }
}

#[test]
fn repository_modules_load_from_tnh_scripts_in_the_worktree() {
    let doc = "script: |\n  import \".tnh/scripts/naming\" as naming;\n  fn slug(text) { naming::slug(text) }\nvalues:\n  slug: \"${{ slug(\\\"Hello World\\\") }}\"\n";
    let files = [(
        ".tnh/scripts/naming.rhai",
        "fn slug(text) { let s = text.to_lower(); s.replace(\" \", \"-\"); s }\n",
    )];
    let bench = Bench::with_files(doc, &files);
    assert_eq!(bench.ok("slug"), json!("hello-world"));
    let missing = "script: |\n  import \".tnh/scripts/absent\" as absent;\nvalues: {}\n";
    let error = Bench::try_with_files(missing, &[])
        .err()
        .expect("a missing module");
    assert!(error.to_string().contains("does not exist"), "{error}");
}

#[test]
fn an_error_inside_a_stdlib_function_names_the_module_and_its_position() {
    let doc = "script: |\n  import \"tnh/inputs\" as inputs;\n  fn bad() { inputs::bundle(5, 10) }\nvalues:\n  x: \"${{ bad() }}\"\n";
    let error = Bench::new(doc).err("x");
    let text = error.to_string();
    assert_eq!(at(&error), "flow.yaml:3:22", "{text}");
    assert!(
        text.contains("in `bad`, in `bundle` of `tnh/inputs`, at "),
        "{text}"
    );
}

#[test]
fn the_script_top_level_runs_once_at_load_with_the_same_limits() {
    let doc = "script: |\n  const GREETING = \"hi\";\n  fn greet() { global::GREETING }\nvalues:\n  x: \"${{ greet() }}\"\n";
    assert_eq!(Bench::new(doc).ok("x"), json!("hi"));
    let endless = "script: |\n  loop { }\nvalues: {}\n";
    let error = Bench::try_with_files(endless, &[]).err().expect("stopped");
    assert!(matches!(error, ScriptError::Limit { .. }), "{error}");
    assert_eq!(at(&error), "flow.yaml:2:8");
}

#[test]
fn prompt_text_gets_substitutions_but_refuses_expressions() {
    let bench = Bench::new(DOC);
    let ctx = context(params());
    let pos = tnh_conductor::workflow::yaml::Pos::new(40, 3);
    assert_eq!(
        bench
            .host
            .substitute_names("Run ${run_id} for ${params.name}.", pos, &ctx)
            .unwrap(),
        "Run 20260101T000000Z-abc123 for docs."
    );
    let error = bench
        .host
        .substitute_names("n = ${{ 1 + 1 }}", pos, &ctx)
        .unwrap_err();
    assert!(
        error.to_string().contains("not `${{ … }}` expressions"),
        "{error}"
    );
    assert_eq!(
        bench
            .host
            .evaluate_text("n = ${{ 1 + 1 }}!", pos, &ctx)
            .unwrap(),
        "n = 2!"
    );
}
