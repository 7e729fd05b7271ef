//! `tnh-conductor validate`: valid fixtures pass, each invalid fixture reports its rule at the
//! right line and column, and hostile input gets a diagnostic instead of a panic.

use std::path::Path;

use crate::support::{conductor, fixture, stderr_text, stdout_text};

fn validate(args: &[&str]) -> std::process::Output {
    conductor()
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["--color", "never", "validate"])
        .args(args)
        .output()
        .expect("run tnh-conductor validate")
}

fn relative(path: &Path) -> String {
    path.strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(path)
        .display()
        .to_string()
}

#[test]
fn every_valid_fixture_passes_without_diagnostics() {
    let directory = fixture("workflows/valid");
    let mut files: Vec<_> = std::fs::read_dir(&directory)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 3, "the valid fixtures are missing");
    for file in files {
        let shown = relative(&file);
        let output = validate(&[&shown]);
        assert_eq!(
            stdout_text(&output),
            format!("{shown}: valid\n"),
            "{}",
            stderr_text(&output)
        );
        assert_eq!(output.status.code(), Some(0));
    }
}

#[test]
fn the_shipped_workflows_are_valid() {
    let mut files: Vec<String> =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/workflows"))
            .unwrap()
            .map(|entry| relative(&entry.unwrap().path()))
            .filter(|path| path.ends_with(".yaml"))
            .collect();
    files.sort();
    assert!(!files.is_empty());
    let arguments: Vec<&str> = files.iter().map(String::as_str).collect();
    let output = validate(&arguments);
    assert_eq!(output.status.code(), Some(0), "{}", stdout_text(&output));
}

#[test]
fn each_invalid_fixture_reports_its_rule_with_line_and_column() {
    insta::glob!("../fixtures/workflows/invalid", "*.yaml", |path| {
        let shown = relative(path);
        let output = validate(&[&shown]);
        let stdout = stdout_text(&output);
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let code = stem.split("--").next().unwrap();
        assert!(
            stdout.contains(&format!("[{code}]")),
            "{shown} does not report [{code}]:\n{stdout}"
        );
        assert!(
            stdout
                .lines()
                .all(|line| line.starts_with(&shown) || line.starts_with("  hint: ")),
            "{stdout}"
        );
        // A path that is not a file (`read-error.yaml` is a folder) is a bad invocation.
        let expected = if code == "read-error" { 2 } else { 1 };
        assert_eq!(output.status.code(), Some(expected), "{shown}");
        insta::assert_snapshot!(stdout);
    });
}

#[test]
fn all_errors_of_all_files_are_reported_in_one_run() {
    let output = validate(&[
        "tests/fixtures/workflows/invalid/unknown-key.yaml",
        "tests/fixtures/workflows/valid/builder_loop.yaml",
        "tests/fixtures/workflows/invalid/missing-route.yaml",
    ]);
    let stdout = stdout_text(&output);
    assert_eq!(stdout.matches("[unknown-key]").count(), 3, "{stdout}");
    assert_eq!(stdout.matches("[missing-route]").count(), 2, "{stdout}");
    assert!(stdout.contains("builder_loop.yaml: valid"));
    assert_eq!(output.status.code(), Some(1));
}

#[test]
fn json_format_carries_the_same_diagnostics() {
    let file = "tests/fixtures/workflows/invalid/unsafe-route.yaml";
    let text = stdout_text(&validate(&[file]));
    let output = validate(&["--format", "json", file]);
    assert_eq!(output.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["schema_version"], 1);
    assert_eq!(report["valid"], false);
    let diagnostics = report["files"][0]["diagnostics"].as_array().unwrap();
    assert_eq!(
        diagnostics.len(),
        text.lines()
            .filter(|line| !line.starts_with("  hint"))
            .count()
    );
    for diagnostic in diagnostics {
        let head = format!(
            "{}:{}:{}: error: {} [{}]",
            diagnostic["file"].as_str().unwrap(),
            diagnostic["line"],
            diagnostic["column"],
            diagnostic["message"].as_str().unwrap(),
            diagnostic["code"].as_str().unwrap()
        );
        assert!(text.contains(&head), "{head} not in\n{text}");
        assert!(diagnostic["hint"].is_string());
    }
}

/// Runs validate under python3 and returns (exit code, stdout, peak RSS of validate in KiB).
fn validate_measuring_memory(file: &Path) -> (Option<i32>, String, u64) {
    let script = "import resource, subprocess, sys\n\
                  result = subprocess.run(sys.argv[1:], capture_output=True)\n\
                  sys.stdout.write(result.stdout.decode('utf-8', 'replace'))\n\
                  sys.stderr.write('%d %d' % (result.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n";
    let output = std::process::Command::new("python3")
        .args([
            "-c",
            script,
            env!("CARGO_BIN_EXE_tnh-conductor"),
            "--color",
            "never",
            "validate",
        ])
        .arg(file)
        .output()
        .expect("python3 is needed by the test suite (see README)");
    let figures = stderr_text(&output);
    let mut parts = figures
        .split_whitespace()
        .map(|part| part.parse::<i64>().unwrap());
    let code = parts.next().map(|code| code as i32);
    (code, stdout_text(&output), parts.next().unwrap() as u64)
}

#[test]
fn a_50_mb_file_is_refused_without_reading_it_into_memory() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("huge.yaml");
    let line = "# padding padding padding padding padding padding padding padding padding\n";
    let contents = line.repeat(50 * 1024 * 1024 / line.len());
    std::fs::write(&file, contents).unwrap();
    let (code, stdout, peak_kib) = validate_measuring_memory(&file);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains("[file-too-large]") && stdout.contains(":1:1: error: the file is 52428"),
        "{stdout}"
    );
    assert!(
        peak_kib < 40 * 1024,
        "validate used {peak_kib} KiB for a 50 MB file"
    );
}

#[test]
fn an_alias_bomb_is_stopped_within_bounded_memory() {
    let (code, stdout, peak_kib) =
        validate_measuring_memory(&fixture("workflows/invalid/yaml-limits.yaml"));
    assert_eq!(code, Some(1));
    assert!(
        stdout.contains("(alias expansion) [yaml-limits]"),
        "{stdout}"
    );
    assert!(
        peak_kib < 40 * 1024,
        "validate used {peak_kib} KiB on an alias bomb"
    );
}

/// Every anchored collection was copied with its whole subtree into the
/// anchor table, so 30 nested anchors that no alias used held 30 copies of the nodes inside
/// them (143 MB here, 1.1 GB for a 1.8 MB file). Only anchors an alias refers to are copied.
#[test]
fn nested_anchors_without_aliases_cost_no_memory() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nested.yaml");
    let mut text = String::from("x: ");
    for level in 0..30 {
        text.push_str(&format!("&a{level} {{k{level}: "));
    }
    text.push('[');
    text.push_str(&vec!["1"; 100_000].join(","));
    text.push(']');
    text.push_str(&"}".repeat(30));
    text.push('\n');
    std::fs::write(&file, text).unwrap();
    let (code, stdout, peak_kib) = validate_measuring_memory(&file);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains("[missing-field]"), "{stdout}");
    assert!(
        peak_kib < 40 * 1024,
        "validate used {peak_kib} KiB on nested anchors"
    );
}

#[test]
fn empty_binary_and_directory_inputs_get_diagnostics_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.yaml");
    std::fs::write(&empty, "").unwrap();
    let binary = dir.path().join("binary.yaml");
    std::fs::write(&binary, b"\x7fELF\x02\x01\x01\x00\x00\x00\xff\xfe").unwrap();
    let cases = [
        (&empty, "[empty-document]", 1),
        (&binary, "[not-text]", 1),
        (&dir.path().to_path_buf(), "is a directory", 2),
    ];
    for (path, expected, code) in cases {
        let output = validate(&[path.to_str().unwrap()]);
        let stdout = stdout_text(&output);
        assert!(stdout.contains(expected), "{stdout}");
        assert_eq!(output.status.code(), Some(code), "{stdout}");
        assert!(!stderr_text(&output).contains("panicked"));
    }
}

#[test]
fn ten_thousand_deep_nesting_is_a_diagnostic() {
    let dir = tempfile::tempdir().unwrap();
    let flow = dir.path().join("flow.yaml");
    std::fs::write(
        &flow,
        format!(
            "workflow_id: {}{}\n",
            "[".repeat(10_000),
            "]".repeat(10_000)
        ),
    )
    .unwrap();
    let block = dir.path().join("block.yaml");
    let nested: String = (0..2_000)
        .map(|depth| format!("{}k{depth}:\n", " ".repeat(depth)))
        .collect();
    std::fs::write(&block, nested).unwrap();
    for path in [flow, block] {
        let output = validate(&[path.to_str().unwrap()]);
        assert!(
            stdout_text(&output).contains("[yaml-limits]"),
            "{}",
            stdout_text(&output)
        );
        assert_eq!(output.status.code(), Some(1));
    }
}

#[test]
fn bad_invocation_exits_2() {
    let output = validate(&[]);
    assert_eq!(output.status.code(), Some(2));
    let output = validate(&[
        "--format",
        "xml",
        "tests/fixtures/workflows/valid/builder_loop.yaml",
    ]);
    assert_eq!(output.status.code(), Some(2));
}

/// A workflow of `steps` agent steps (8 lines each from line 6), valid unless edited.
fn large_workflow(steps: usize) -> String {
    let mut text = String::from(
        "workflow_id: large\nversion: 1\ndescription: a large generated workflow\nentry_step: s0\nsteps:\n",
    );
    for index in 0..steps {
        let next = if index + 1 == steps {
            "STOP".to_owned()
        } else {
            format!("s{}", index + 1)
        };
        text.push_str(&format!(
            "  - id: s{index}\n    opcode: RUN_AGENT\n    agent: claude-code\n    prompt: task.implement_adr.v1\n    inputs:\n      adr_id: \"${{{{ {index} + 1 }}}}\"\n    routes:\n      \"*\": {next}\n"
        ));
    }
    text
}

/// A large workflow (4,000 steps, over 256 KiB) gets every diagnostic at its line, in order,
/// and a syntax error at its very end is found at its line.
#[test]
fn a_large_workflow_gets_every_diagnostic_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("large.yaml");
    let valid = large_workflow(4000);
    assert!(
        valid.len() > 256 * 1024,
        "large enough for the parallel path"
    );
    std::fs::write(&path, &valid).unwrap();
    let output = validate(&[path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr_text(&output));

    let text = valid
        .replacen("adr_id: \"${{ 10 + 1 }}\"", "adr_id: \"${{ 10 + }}\"", 1)
        .replacen("\"*\": STOP\n", "\"*\": s_missing\n", 1);
    std::fs::write(&path, &text).unwrap();
    let output = validate(&["--format", "json", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr_text(&output));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let found: Vec<(u64, String)> = report["files"][0]["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|diagnostic| {
            (
                diagnostic["line"].as_u64().unwrap(),
                diagnostic["code"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let shown = format!("{:?}", &found[..found.len().min(5)]);
    // Step 10's expression (line 6 + 8·10 + 5) and the last step's route (6 + 8·3999 + 7).
    assert_eq!(
        found,
        [
            (91, "script-syntax".to_owned()),
            (32005, "unknown-target".to_owned())
        ],
        "{shown}"
    );

    // A syntax error at the end is found at its line.
    let broken = valid + "  - id: [unclosed\n";
    std::fs::write(&path, &broken).unwrap();
    let output = validate(&["--format", "json", path.to_str().unwrap()]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let diagnostic = &report["files"][0]["diagnostics"][0];
    assert_eq!(diagnostic["code"], "yaml-syntax", "{diagnostic}");
    assert!(
        diagnostic["line"].as_u64().unwrap() >= broken.lines().count() as u64,
        "{diagnostic}"
    );
}

/// Validates workflow text written to a temporary file; returns stdout and the exit code.
fn validate_text(text: &str) -> (String, Option<i32>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wf.yaml");
    std::fs::write(&path, text).unwrap();
    let output = validate(&[path.to_str().unwrap()]);
    (stdout_text(&output), output.status.code())
}

/// The `[code]`s of a validate output, in order.
fn codes(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter_map(|line| line.rsplit_once(" [")?.1.strip_suffix(']'))
        .collect()
}

/// Steps that only route to each other validated clean and the run
/// looped until `max_visits`. Only the trapped steps are named; loops with an exit pass.
#[test]
fn steps_from_which_no_route_reaches_stop_are_errors() {
    let (stdout, code) = validate_text(
        "workflow_id: t\nversion: 1\ndescription: d\nentry_step: a\nsteps:\n  - id: a\n    opcode: ROLLBACK\n    target: pre_run\n    routes: {error: STOP, completed: b}\n  - id: b\n    opcode: ROLLBACK\n    target: pre_run\n    routes: {\"*\": c}\n  - id: c\n    opcode: ROLLBACK\n    target: pre_run\n    routes: {completed: b, error: c}\n",
    );
    assert_eq!(code, Some(1), "{stdout}");
    assert_eq!(
        codes(&stdout),
        ["no-path-to-stop", "no-path-to-stop"],
        "{stdout}"
    );
    assert!(
        stdout.contains(
            ":10:9: error: no chain of routes from step `b` reaches STOP (it leads only to `c`)"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains(":14:9: error: no chain of routes from step `c` reaches STOP (it leads only to `b`, `c`)"),
        "{stdout}"
    );
    // The same loop with one exit through the wildcard is valid.
    let (stdout, code) = validate_text(
        "workflow_id: t\nversion: 1\ndescription: d\nentry_step: a\nsteps:\n  - id: a\n    opcode: ROLLBACK\n    target: pre_run\n    routes: {error: STOP, completed: b}\n  - id: b\n    opcode: ROLLBACK\n    target: pre_run\n    routes: {\"*\": c}\n  - id: c\n    opcode: ROLLBACK\n    target: pre_run\n    routes: {completed: b, \"*\": STOP}\n",
    );
    assert_eq!(code, Some(0), "{stdout}");
}

/// One bad field dropped its whole step from the checks across steps,
/// adding false errors (unknown entry step, unreachable target, missing route) and hiding a
/// duplicate id. Only the real problem is reported now.
#[test]
fn one_bad_field_does_not_drop_its_step_from_the_checks_across_steps() {
    let head = "workflow_id: t\nversion: 1\ndescription: d\nentry_step: a\nsteps:\n";
    let cases: [(&str, &[&str]); 5] = [
        (
            "  - id: a\n    opcode: RUN_AGENT\n    agent: codex\n    prompt: 42\n    routes: {\"*\": b}\n  - id: b\n    opcode: STOP\n",
            &["wrong-type"],
        ),
        (
            "  - id: a\n    opcode: STP\n  - id: b\n    opcode: STOP\n    allow_unreachable: true\n",
            &["invalid-value"],
        ),
        (
            "  - id: a\n    opcode: RUN_AGNT\n    routes: {completed: b}\n  - id: a\n    opcode: STOP\n  - id: b\n    opcode: STOP\n",
            &["invalid-value", "duplicate-step-id"],
        ),
        (
            "  - id: a\n    opcode: RUN_AGENT\n    agent: codex\n    prompt: do it\n    routes: {completed: \"${{ x }}\", \"*\": b}\n  - id: b\n    opcode: STOP\n    outcome: failure\n",
            &["expression-in-routing"],
        ),
        (
            "  - id: a\n    opcode: ROLLBACK\n    target: pre_rn\n    routes: {complted: b, \"*\": STOP}\n  - id: b\n    opcode: STOP\n",
            &["invalid-value", "unknown-outcome"],
        ),
    ];
    for (steps, expected) in cases {
        let (stdout, code) = validate_text(&format!("{head}{steps}"));
        assert_eq!(code, Some(1), "{stdout}");
        assert_eq!(codes(&stdout), expected, "{steps}\n{stdout}");
    }
}

/// A misspelled key is one error: read as the key it misspells, it leaves no required key
/// missing and no step it routes to unreachable.
#[test]
fn one_typo_is_one_error() {
    let head = "workflow_id: t\nversion: 1\ndescription: d\n";
    let cases: [(&str, &[&str], &str); 3] = [
        (
            "entry_step: a\nsteps:\n  - id: a\n    opcode: ROLLBACK\n    target: pre_run\n    rotues: {completed: b, error: STOP}\n  - id: b\n    opcode: ROLLBACK\n    target: pre_run\n    routes: {\"*\": STOP}\n",
            &["unknown-key"],
            "unknown key `rotues` in step `a`",
        ),
        (
            "entry_stpe: a\nsteps:\n  - id: a\n    opcode: STOP\n",
            &["unknown-key"],
            "did you mean `entry_step`?",
        ),
        // Two keys that misspell the same key: neither stands in for it.
        (
            "entry_step: a\nsteps:\n  - id: a\n    opcode: ROLLBACK\n    target: pre_run\n    rotues: {\"*\": STOP}\n    routse: {\"*\": STOP}\n",
            &["missing-field", "unknown-key", "unknown-key"],
            "missing the required key `routes`",
        ),
    ];
    for (rest, expected, says) in cases {
        let (stdout, code) = validate_text(&format!("{head}{rest}"));
        assert_eq!(code, Some(1), "{stdout}");
        assert_eq!(codes(&stdout), expected, "{rest}\n{stdout}");
        assert!(stdout.contains(says), "{stdout}");
    }
}

/// `{{ … }}` (template syntax) where `${{ … }}` was meant is sent as written: a warning says
/// so and how to write it, in a value and in literal prompt text alike.
#[test]
fn template_syntax_gets_a_hint_to_write_an_expression() {
    let (stdout, code) = validate_text(
        "workflow_id: t\nversion: 1\ndescription: d\nentry_step: a\nparams:\n  test: {type: string}\nsteps:\n  - id: a\n    opcode: RUN_AGENT\n    agent: codex\n    prompt: \"Fix {{ params.test }}\"\n    routes: {\"*\": b}\n  - id: b\n    opcode: GATE\n    gate: queue_for_review\n    reason: \"Fixed {{ params.test }}; ${{ params.test }} stays\"\n    routes: {gate_queued: STOP}\n",
    );
    assert_eq!(
        code,
        Some(0),
        "a warning does not make the file invalid: {stdout}"
    );
    assert_eq!(
        codes(&stdout),
        ["template-syntax", "template-syntax"],
        "{stdout}"
    );
    assert!(
        stdout.contains(":11:18: warning: `{{ … }}` is sent as written"),
        "{stdout}"
    );
    assert!(
        stdout.contains(":16:20: warning: `{{ … }}` is sent as written"),
        "{stdout}"
    );
    assert!(stdout.contains("write `${{ EXPR }}`"), "{stdout}");
    assert!(
        stdout.contains("literal prompt text is not a template"),
        "{stdout}"
    );
}

/// `golden-gate-missing` is for script validators that can write a harness report (they name
/// a `report`, or collect a `harness_report.json`); a script validator that cannot is not
/// asked for a gate.
#[test]
fn only_a_script_validator_that_can_report_needs_a_gate() {
    let workflow = |validator: &str| {
        format!(
            "workflow_id: t\nversion: 1\ndescription: d\nentry_step: v\nsteps:\n  - id: v\n    opcode: RUN_VALIDATION\n    run:\n      - id: check\n        kind: script\n        entrypoint: scripts/check.py\n{validator}    routes: {{\"*\": STOP}}\n"
        )
    };
    for quiet in ["", "        artifacts: [coverage.xml, \"out/*.txt\"]\n"] {
        let (stdout, code) = validate_text(&workflow(quiet));
        assert_eq!(code, Some(0), "{quiet}\n{stdout}");
    }
    for reporting in [
        "        artifacts: [\"out/*.json\"]\n",
        "        report: out/report.json\n",
    ] {
        let (stdout, code) = validate_text(&workflow(reporting));
        assert_eq!(code, Some(1), "{reporting}\n{stdout}");
        assert_eq!(codes(&stdout), ["golden-gate-missing"], "{stdout}");
    }
}

/// A UTF-16 workflow was called "binary (it contains a NUL byte)".
#[test]
fn a_utf16_workflow_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wide.yaml");
    let mut bytes = vec![0xFF, 0xFE];
    for unit in "workflow_id: w\n".encode_utf16() {
        bytes.extend_from_slice(&unit.to_le_bytes());
    }
    std::fs::write(&path, bytes).unwrap();
    let output = validate(&[path.to_str().unwrap()]);
    let stdout = stdout_text(&output);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(":1:1: error: the file is UTF-16 text") && stdout.contains("[not-text]"),
        "{stdout}"
    );
    assert!(
        stdout.contains("hint: save the workflow as UTF-8"),
        "{stdout}"
    );
}

/// docs/workflows.md's rule table and the fixtures agree: every fixture's code is in the
/// table, and every code in the table has a fixture, except the three the docs name as tested
/// otherwise.
#[test]
fn the_documented_rule_table_and_the_invalid_fixtures_agree() {
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/workflows.md")).unwrap();
    let table: Vec<&str> = docs
        .lines()
        .skip_while(|line| !line.starts_with("| code | rule |"))
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .collect();
    let documented: Vec<String> = table
        .iter()
        .flat_map(|line| {
            let first = line.split(" | ").next().unwrap_or_default();
            first
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    let fixtures: Vec<String> = std::fs::read_dir(fixture("workflows/invalid"))
        .unwrap()
        .map(|entry| {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            name.trim_end_matches(".yaml")
                .split("--")
                .next()
                .unwrap()
                .to_owned()
        })
        .collect();
    for code in &fixtures {
        assert!(documented.contains(code), "`{code}` is not in the table");
    }
    let without_fixture = [
        "file-too-large",
        "template-syntax",
        "invalid-prompt",
        "deprecated-prompt",
        "failure-to-success-stop",
        // These depend on the repository and the machine `validate` runs in:
        // `run_checks::validate_reports_the_unknown_function_and_the_unresolvable_validator`.
        "validator-not-configured",
        "validator-program-missing",
        "python-module-missing",
    ];
    for code in &documented {
        assert!(
            fixtures.contains(code) || without_fixture.contains(&code.as_str()),
            "`{code}` has no fixture in tests/fixtures/workflows/invalid/"
        );
    }
}

/// Every refused import of a script is reported, each at its own line and column (only the
/// first was, and the author fixed them one `validate` at a time); allowed imports between
/// them are not reported.
#[test]
fn every_refused_import_is_reported_at_its_own_position() {
    let (stdout, code) = validate_text(
        "workflow_id: t\nversion: 1\ndescription: d\nentry_step: a\nscript: |\n  import \"/etc/passwd\" as a;\n  import \"tnh/paths\" as p;\n  import \"../x\" as b;\n  import \"/etc/passwd\" as c;\n  fn f() { 1 }\nsteps:\n  - id: a\n    opcode: STOP\n",
    );
    assert_eq!(code, Some(1), "{stdout}");
    assert_eq!(
        codes(&stdout),
        ["script-import", "script-import", "script-import"],
        "{stdout}"
    );
    for (line, path) in [(6, "/etc/passwd"), (8, "../x"), (9, "/etc/passwd")] {
        assert!(
            stdout.contains(&format!(":{line}:10: error: import `{path}` is refused")),
            "line {line}:\n{stdout}"
        );
    }
}

/// `${params.X}` and `${{ … }}` in policy globs and gate
/// `approvers` passed `validate` and were used as the literal text, so
/// `forbidden_paths: ["${params.protected}/**"]` forbade nothing. Every field that is used as
/// written now refuses them, at the value.
#[test]
fn substitutions_in_policy_fields_and_approvers_are_refused_as_they_would_be_used_as_written() {
    let (stdout, code) = validate_text(
        "workflow_id: t\nversion: 1\ndescription: d\nentry_step: a\nparams:\n  protected: {type: string, default: secret}\n  lead: {type: string, default: alice}\ndefaults:\n  policy: {allowed_paths: [\"${{ params.protected }}/**\"]}\nsteps:\n  - id: a\n    opcode: RUN_AGENT\n    agent: codex\n    prompt: \"Fix it in ${worktree}\"\n    policy:\n      forbidden_paths: [\"src/**\", \"${params.protected}/**\"]\n      forbidden_operations: [\"${params.lead}\"]\n      check: \"${{ params.lead }}\"\n    limits: {timeout: \"${{ params.lead }}\"}\n    routes: {\"*\": g}\n  - id: g\n    opcode: GATE\n    gate: requires_approval\n    approvers: [\"${params.lead}\"]\n    routes: {gate_approved: STOP, gate_rejected: STOP}\n",
    );
    assert_eq!(code, Some(1), "{stdout}");
    assert_eq!(codes(&stdout), ["expression-not-allowed"; 6], "{stdout}");
    for (at, field, value) in [
        (
            "9:28",
            "an entry of allowed_paths",
            "${{ params.protected }}/**",
        ),
        (
            "16:35",
            "an entry of forbidden_paths",
            "${params.protected}/**",
        ),
        (
            "17:30",
            "an entry of forbidden_operations",
            "${params.lead}",
        ),
        ("18:14", "check", "${{ params.lead }}"),
        ("19:23", "timeout", "${{ params.lead }}"),
        ("24:17", "an entry of approvers", "${params.lead}"),
    ] {
        assert!(
            stdout.contains(&format!(
                ":{at}: error: {field} cannot contain `${{…}}` or `${{{{ … }}}}`: nothing substitutes them here, so `{value}` would be used as written"
            )),
            "{at}:\n{stdout}"
        );
    }
    assert!(
        stdout.contains(
            "hint: write the literal value; `${…}` and `${{ … }}` work only in `inputs` values"
        ),
        "{stdout}"
    );
}

/// The refusal is only where a value is used as written: free text (descriptions, the Rhai
/// script with its own `${…}` template strings) and the fields that take expressions stay valid.
#[test]
fn substitutions_stay_valid_in_free_text_and_in_the_fields_that_evaluate_them() {
    let (stdout, code) = validate_text(
        "workflow_id: t\nversion: 1\ndescription: \"runs ${run_id}\"\nentry_step: a\nparams:\n  n: {type: int, default: 1, description: \"${n}\"}\nscript: |\n  fn label(x) { `n=${x}` }\nsteps:\n  - id: a\n    opcode: RUN_VALIDATION\n    description: \"checks ${worktree}\"\n    run:\n      - {id: v, kind: script, entrypoint: \"${run_dir}/h.py\", args: [\"${params.n}\", \"${{ label(params.n) }}\"], cwd: \"${{ \\\".\\\" }}\", env: {N: \"${params.n}\"}}\n    routes: {\"*\": g}\n  - id: g\n    opcode: GATE\n    gate: requires_approval\n    reason: \"${{ label(1) }}\"\n    routes: {gate_approved: s, gate_rejected: s}\n  - id: s\n    opcode: STOP\n    reason: \"${run_id}\"\n",
    );
    assert_eq!(code, Some(0), "{stdout}");
}

/// The same defect through a `policy.*` prompt: its front matter's globs are used as written
/// too, so a `${…}` there is reported at the workflow's reference, naming the prompt file.
#[test]
fn a_substitution_in_a_referenced_policy_prompt_is_refused_at_the_reference() {
    let repo = crate::support::TempRepo::new();
    repo.write(
        ".tnh/prompts/policy/guarded.v1.md",
        "---\nprompt_id: policy.guarded\nversion: 1\nrole: policy\nsummary: s\nforbidden_paths: [\"${params.protected}/**\"]\n---\nRules.\n",
    );
    let workflow = repo.write(
        "wf.yaml",
        "workflow_id: t\nversion: 1\ndescription: d\nentry_step: a\ndefaults:\n  policy: policy.guarded.v1\nsteps:\n  - id: a\n    opcode: STOP\n",
    );
    let output = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["--color", "never", "validate"])
        .arg(&workflow)
        .output()
        .unwrap();
    let stdout = stdout_text(&output);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert_eq!(codes(&stdout), ["expression-not-allowed"], "{stdout}");
    assert!(
        stdout.contains(":6:11: error: policy prompt `policy.guarded.v1` (")
            && stdout.contains("guarded.v1.md) has `${params.protected}/**` in `forbidden_paths`"),
        "{stdout}"
    );
}

/// `defaults.artifacts_dir` was only type-checked. `run`
/// wrote the run directory there, but `status`, `gate approve`, `resume` and `gate list` look
/// only under `<repo>/.tnh/run/`, so the run was stranded (its gate could never be approved);
/// a folder in the checkout made the conductor's own writes path-escape violations, and an
/// absolute or `..` path wrote outside the repository. Only the run root is accepted now.
#[test]
fn an_artifacts_dir_other_than_the_run_root_is_refused() {
    let workflow = |dir: &str| {
        format!(
            "workflow_id: t\nversion: 1\ndescription: d\nentry_step: a\ndefaults:\n  artifacts_dir: \"{dir}\"\nsteps:\n  - id: a\n    opcode: STOP\n"
        )
    };
    for dir in [
        "/tmp/runs/",
        "../up/",
        "src/runs/",
        ".tnh/runs/",
        ".tnh/run/x",
        "",
    ] {
        let (stdout, code) = validate_text(&workflow(dir));
        assert_eq!(code, Some(1), "{dir}: {stdout}");
        assert_eq!(codes(&stdout), ["invalid-value"], "{dir}: {stdout}");
        assert!(
            stdout.contains(&format!(
                ":6:18: error: artifacts_dir `{dir}` is not supported: run directories live under `.tnh/run/`"
            )) && stdout.contains("hint: remove `artifacts_dir` (or write `.tnh/run/`): `status`, `gate`, `resume`, `runs` and `journal` find runs only under `<repo>/.tnh/run/`"),
            "{dir}: {stdout}"
        );
    }
    for dir in [".tnh/run/", ".tnh/run", "./.tnh/run/", "./.tnh/run"] {
        let (stdout, code) = validate_text(&workflow(dir));
        assert_eq!(code, Some(0), "{dir}: {stdout}");
    }
}

/// A RUN_AGENT step with this `policy` and, when given, this `script`.
fn workflow_with_policy(policy: &str, script: Option<&str>) -> String {
    let script = script.map_or_else(String::new, |code| format!("script: |\n  {code}\n"));
    format!(
        "workflow_id: t\nversion: 1\ndescription: d\nentry_step: a\n{script}steps:\n  - id: a\n    opcode: RUN_AGENT\n    agent: codex\n    prompt: \"Fix the tests\"\n    policy: {policy}\n    routes: {{\"*\": STOP}}\n"
    )
}

/// `policy: {check: NAME}` was not checked by `validate`;
/// a typo, a function of the wrong arity or a call expression was found only after the agent
/// worked (every changed file then failed the check and the run failed). Now `check` must name
/// a public one-parameter function of the script, reported at the name with the nearest one.
#[test]
fn a_policy_check_must_name_a_one_parameter_function_of_the_script() {
    let script = Some("fn check(change) { true }\n  fn check2(change, limit) { true }");
    for (policy, message, hint) in [
        (
            "{check: chekc}",
            "check `chekc` is not a function of the workflow's `script`",
            "did you mean `check`?",
        ),
        (
            "{check: check2}",
            "check `check2` takes 2 parameters; a check takes one",
            "define `fn check2(change)`",
        ),
        (
            "{check: \"check(1)\"}",
            "check `check(1)` is not a function name",
            "without arguments",
        ),
    ] {
        let (stdout, code) = validate_text(&workflow_with_policy(policy, script));
        assert_eq!(code, Some(1), "{policy}: {stdout}");
        assert_eq!(codes(&stdout), ["unknown-function"], "{policy}: {stdout}");
        assert!(
            stdout.contains(&format!(":13:21: error: {message} [unknown-function]"))
                && stdout.contains(hint),
            "{policy}: {stdout}"
        );
    }
    let (stdout, code) = validate_text(&workflow_with_policy("{check: check}", None));
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains(
            "error: check `check` names a function, but the workflow has no `script` [unknown-function]"
        ),
        "{stdout}"
    );
    let (stdout, code) = validate_text(&workflow_with_policy("{check: check}", script));
    assert_eq!(code, Some(0), "{stdout}");
}

/// The same for a `policy.*` prompt whose front matter holds `check`: reported at the
/// workflow's reference.
#[test]
fn a_referenced_policy_prompts_check_must_name_a_function_of_the_script() {
    let repo = crate::support::TempRepo::new();
    repo.write(
        ".tnh/prompts/policy/checked.v1.md",
        "---\nprompt_id: policy.checked\nversion: 1\nrole: policy\nsummary: s\ncheck: chekc\n---\nRules.\n",
    );
    let validate_in_repo = |text: &str| {
        let workflow = repo.write("wf.yaml", text);
        let output = conductor()
            .arg("--repo")
            .arg(repo.path())
            .args(["--color", "never", "validate"])
            .arg(&workflow)
            .output()
            .unwrap();
        (stdout_text(&output), output.status.code())
    };
    let script = Some("fn check(change) { true }");
    let (stdout, code) = validate_in_repo(&workflow_with_policy("policy.checked.v1", script));
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains(":12:13: error: policy prompt `policy.checked.v1`'s check `chekc` is not a function of the workflow's `script` [unknown-function]")
            && stdout.contains("hint: did you mean `check`?"),
        "{stdout}"
    );
    let fixed = Some("fn chekc(change) { true }");
    let (stdout, code) = validate_in_repo(&workflow_with_policy("policy.checked.v1", fixed));
    assert_eq!(code, Some(0), "{stdout}");
}

/// Integers too large for 64 bits were read as text, so
/// `version: 99999999999999999999` was "must be a whole number, found a string". The number
/// is now reported as out of range, at the value.
#[test]
fn an_integer_too_large_for_64_bits_is_out_of_range_not_a_string() {
    let (stdout, code) = validate_text(
        "workflow_id: t\nversion: 99999999999999999999\ndescription: d\nentry_step: a\ndefaults:\n  limits: {max_transitions: 18446744073709551615}\nsteps:\n  - id: a\n    opcode: STOP\n",
    );
    assert_eq!(code, Some(1), "{stdout}");
    assert!(!stdout.contains("found a string"), "{stdout}");
    assert!(
        stdout.contains(":2:10: error: the integer `99999999999999999999` is out of range (it does not fit in 64 bits) [invalid-value]")
            && stdout.contains(":6:29: error: the integer `18446744073709551615` is out of range (it does not fit in 64 bits) [invalid-value]")
            && stdout.contains("hint: use a whole number from -9223372036854775808 to 9223372036854775807 (quote it to make it text)"),
        "{stdout}"
    );
}

/// An invalid `protected_branches` glob in
/// `.tnh/config.yaml` passed `validate`; `run` created the run and its worktree and died at the
/// first agent step, without the configuration's position. It is now refused when the
/// configuration is read, at `FILE:LINE:COL`, like every other configuration error.
#[test]
fn an_invalid_protected_branch_glob_in_the_config_is_refused_at_its_position() {
    let repo = crate::support::TempRepo::new();
    repo.write(
        ".tnh/config.yaml",
        "protected_branches:\n  - release/*\n  - \"[invalid\"\n",
    );
    let workflow = repo.write(
        "wf.yaml",
        "workflow_id: t\nversion: 1\ndescription: d\nentry_step: a\nsteps:\n  - id: a\n    opcode: STOP\n",
    );
    let output = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["--color", "never", "validate"])
        .arg(&workflow)
        .output()
        .unwrap();
    let stderr = stderr_text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(".tnh/config.yaml:3:5: invalid protected branch pattern `[invalid`: unclosed character class"),
        "{stderr}"
    );
}

/// A near-miss prompt reference (`task.implement_adr.V1`,
/// `task.implement-adr.v1`, a trailing space, no version) passed `validate` as literal text
/// and was sent to the agent as the whole task. A one-token prompt that looks like a reference
/// (or is close to one) is now an unknown prompt with the nearest reference; task text with
/// spaces stays literal.
#[test]
fn a_one_token_prompt_that_looks_like_a_reference_is_an_unknown_prompt() {
    let workflow = |prompt: &str| {
        format!(
            "workflow_id: t\nversion: 1\ndescription: d\nentry_step: a\nsteps:\n  - id: a\n    opcode: RUN_AGENT\n    agent: codex\n    prompt: {prompt}\n    routes: {{\"*\": STOP}}\n"
        )
    };
    for (prompt, hint) in [
        (
            "task.implement_adr.V1",
            "did you mean `task.implement_adr.v1`?",
        ),
        (
            "task.implement-adr.v1",
            "did you mean `task.implement_adr.v1`?",
        ),
        (
            "\"task.review_diff.v1 \"",
            "did you mean `task.review_diff.v1`?",
        ),
        (
            "task.implement_adr",
            "did you mean `task.implement_adr.v1`?",
        ),
        (
            "docs.tidy_up",
            "write a reference from `tnh-conductor prompts list`",
        ),
    ] {
        let (stdout, code) = validate_text(&workflow(prompt));
        assert_eq!(code, Some(1), "{prompt}: {stdout}");
        assert_eq!(codes(&stdout), ["unknown-prompt"], "{prompt}: {stdout}");
        assert!(
            stdout.contains(":9:13: error: prompt `")
                && stdout.contains("looks like a prompt reference but is not one")
                && stdout.contains(hint),
            "{prompt}: {stdout}"
        );
    }
    for prompt in [
        "\"Fix the failing tests\"",
        "\"Implement task.implement_adr.v1 in the docs\"",
        "go",
        "\"${worktree}\"",
    ] {
        let (stdout, code) = validate_text(&workflow(prompt));
        assert_eq!(code, Some(0), "{prompt}: {stdout}");
    }
}

/// `tnh-conductor --repo REPO ARGS…`, failing (and killing it) if it has not ended within a
/// minute, so that a command that hangs fails the test instead of holding it for ever.
fn conductor_within_a_minute(repo: &Path, args: &[&str]) -> std::process::Output {
    let child = conductor()
        .arg("--repo")
        .arg(repo)
        .args(["--color", "never"])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (sender, ended) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(child.wait_with_output());
    });
    match ended.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
            panic!("`tnh-conductor {args:?}` hung");
        }
    }
}

/// The configuration was read by path,
/// so a FIFO at `.tnh/config.yaml` (an agent runs as the operator) hung every command that
/// loads it. Only a regular file is read: the FIFO is named as not one. (The prompt catalog
/// lists regular files only, and now also opens them as such.)
#[test]
fn a_fifo_as_the_configuration_is_reported_not_waited_on() {
    let repo = crate::support::TempRepo::new();
    let path = repo.path().join(".tnh/config.yaml");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .unwrap();
    assert!(made.success());
    let workflow = repo.path().join("wf.yaml");
    std::fs::write(
        &workflow,
        "workflow_id: t\nversion: 1\ndescription: d\nentry_step: a\nsteps:\n  - id: a\n    opcode: STOP\n",
    )
    .unwrap();
    let output = conductor_within_a_minute(repo.path(), &["validate", workflow.to_str().unwrap()]);
    assert_ne!(output.status.code(), Some(0));
    let said = format!("{}{}", stdout_text(&output), stderr_text(&output));
    assert!(said.contains("a FIFO, not a regular file"), "{said}");
}

/// A FIFO given as the workflow blocked `open()` forever, in `validate` and in `run` (which
/// then ignored Ctrl-C as well); a device was read and called "too large" with a size of 0.
/// Anything that is not a regular file is refused from its `fstat`, without blocking.
#[test]
fn a_fifo_or_a_device_as_the_workflow_is_refused_without_blocking() {
    let repo = crate::support::TempRepo::new();
    let fifo = repo.path().join("wf.yaml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let link = repo.path().join("link.yaml");
    std::os::unix::fs::symlink(&fifo, &link).unwrap();
    for file in [&fifo, &link] {
        let shown = file.display().to_string();
        let output = conductor_within_a_minute(repo.path(), &["validate", &shown]);
        let stdout = stdout_text(&output);
        assert_eq!(output.status.code(), Some(2), "{stdout}");
        assert!(
            stdout.contains(&format!(
                "{shown}:1:1: error: `{shown}` is a FIFO, not a regular file [read-error]"
            )),
            "{stdout}"
        );
        assert!(
            stdout.contains("hint: pass the workflow's .yaml file"),
            "{stdout}"
        );
    }
    let output = conductor_within_a_minute(repo.path(), &["run", fifo.to_str().unwrap()]);
    let said = format!("{}{}", stdout_text(&output), stderr_text(&output));
    assert_eq!(output.status.code(), Some(2), "{said}");
    assert!(said.contains("is a FIFO, not a regular file"), "{said}");
    let output = conductor_within_a_minute(repo.path(), &["validate", "/dev/zero"]);
    let stdout = stdout_text(&output);
    assert_eq!(output.status.code(), Some(2), "{stdout}");
    assert!(
        stdout.contains("`/dev/zero` is a device, not a regular file [read-error]"),
        "{stdout}"
    );
}

/// A STOP step without `outcome:` is a success stop, so `"*": done` sent a
/// timeout to exit 0. Each failure routed to such a step is a warning at its route key (the
/// file stays valid); `outcome: success` written out, the bare `STOP`, and successes are not.
#[test]
fn failures_routed_to_a_stop_without_outcome_are_warned_at_their_route() {
    let workflow = |done: &str| {
        format!(
            "workflow_id: t\nversion: 1\ndescription: d\nentry_step: check\nsteps:\n  - id: check\n    opcode: RUN_VALIDATION\n    run: [tests]\n    routes:\n      completed: done\n      killed_timeout: done\n      error: STOP\n      \"*\": done\n  - id: review\n    opcode: GATE\n    gate: requires_approval\n    allow_unreachable: true\n    routes: {{gate_approved: done, gate_rejected: STOP}}\n  - id: done\n    opcode: STOP\n{done}"
        )
    };
    let (stdout, code) = validate_text(&workflow(""));
    assert_eq!(code, Some(0), "{stdout}");
    assert_eq!(
        codes(&stdout),
        ["failure-to-success-stop", "failure-to-success-stop"],
        "{stdout}"
    );
    assert!(
        stdout.contains(":11:7: warning: step `check` routes `killed_timeout` to `done`, a STOP without `outcome:`, which ends the run in success (exit 0)")
            && stdout.contains(":13:7: warning: step `check` routes `killed_idle`, `killed_policy` (through `*`) to `done`")
            && stdout.contains("hint: give `done` `outcome: failure`"),
        "{stdout}"
    );
    for written in ["    outcome: success\n", "    outcome: failure\n"] {
        let (stdout, code) = validate_text(&workflow(written));
        assert_eq!(code, Some(0), "{stdout}");
        assert!(codes(&stdout).is_empty(), "{written}: {stdout}");
    }
}
