use super::*;

fn calls(code: &str) -> Vec<String> {
    let ast = checking_engine().compile(code).unwrap();
    let callable = CallableNames::of(&ast, None);
    unknown_calls(&ast, &callable)
        .into_iter()
        .map(|call| call.name)
        .collect()
}

#[test]
fn a_function_nothing_defines_is_found_with_its_position_and_a_near_name() {
    let ast = checking_engine()
        .compile("fn fix(x) { x }\nlet a = 1;\nfixed(a)")
        .unwrap();
    let found = unknown_calls(&ast, &CallableNames::of(&ast, None));
    assert_eq!(
        found,
        vec![UnknownCall {
            name: "fixed".into(),
            position: Some((3, 1)),
            suggestion: Some("fix".into()),
        }]
    );
}

#[test]
fn the_engine_knows_its_packages_keywords_and_the_host_api() {
    let known = engine_functions();
    for name in [
        "len",
        "contains",
        "to_upper",
        "range",
        "call",
        "curry",
        "Fn",
        "type_of",
        "print",
        "is_def_var",
        "parse_int",
        "read_file",
        "glob",
        "changed_files",
        "diff_stat",
        "path_matches",
        "parse_json",
        "truncate",
    ] {
        assert!(known.contains(name), "{name} is not known");
    }
    assert!(!known.contains("eval_me"));
}

#[test]
fn methods_operators_closures_and_function_pointers_are_not_reported() {
    assert!(calls("let x = [1, 2]; x.len() + x.pop() * 2 - -1").is_empty());
    // A method call may call a function pointer kept in a property.
    assert!(calls("let m = #{ act: |x| x + 1 }; m.act(1); m.whatever()").is_empty());
    assert!(calls("let f = |x| x * 2; f(3) + call(f, 1) + f.call(2)").is_empty());
    assert!(calls("fn apply(f, x) { f(x) } apply(|y| y, 1)").is_empty());
    assert!(calls("let s = `${1 + 2}`; s == \"3\" && !(s != \"x\") || s in [\"a\"]").is_empty());
    assert!(calls("for (item, index) in [1] { item(index) }").is_empty());
    assert!(calls("let f = Fn(\"g\"); fn g() { 1 } f.curry().call()").is_empty());
}

#[test]
fn a_namespaced_call_is_checked_against_the_module_imported_under_that_name() {
    assert_eq!(
        calls("import \"tnh/paths\" as paths; paths::join([\"a\"], \",\"); paths::jion([], \"\")"),
        vec!["paths::jion".to_owned()]
    );
    // A module that cannot be read says nothing about its functions.
    assert!(calls("import \".tnh/scripts/mine\" as mine; mine::anything()").is_empty());
    assert!(calls("other::thing()").is_empty());
}

#[test]
fn no_stdlib_module_calls_an_unknown_function() {
    for (path, text) in super::super::STDLIB_MODULES {
        let found = calls(text);
        assert!(found.is_empty(), "{path}: {found:?}");
    }
}

#[test]
fn calls_inside_functions_and_closures_are_checked() {
    assert_eq!(
        calls("fn f() { missing_one() }"),
        vec!["missing_one".to_owned()]
    );
    assert_eq!(
        calls("let f = |x| missing_two(x); f(1)"),
        vec!["missing_two".to_owned()]
    );
}
