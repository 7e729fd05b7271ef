//! What a run makes of the text of a workflow: positions inside its code (the same as
//! `validate` gives), `$${` for a literal `${`, and expressions holding nested maps.

use crate::kernel_support::RunRepo;
use crate::support::stderr_text;

const HEADER: &str = "workflow_id: text\nversion: 1\ndescription: d\nentry_step: done\n";

/// The `detail` of a run of `body` (after the header) that ends in a script error.
fn failed_detail(body: &str) -> String {
    let repo = RunRepo::new();
    let workflow = repo.workflow_text("wf.yaml", &format!("{HEADER}{body}"));
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(4), "{result}\n{}", stderr_text(&output));
    result["detail"].as_str().unwrap().to_owned()
}

/// A `script: |` block starting with an empty line put every position a
/// line low (Rhai counts the empty line; the scalar's position is its first line of content).
#[test]
fn a_script_error_after_an_empty_first_line_is_on_its_own_line() {
    let detail = failed_detail(
        "script: |\n\n  fn ok() { 1 }\n  fn bad() { throw \"boom\"; }\nsteps:\n  - id: done\n    opcode: STOP\n    reason: \"${{ bad() }}\"\n",
    );
    assert!(
        detail.contains("wf.yaml:8:14 (script 3:12, in `bad`): the script failed: boom"),
        "{detail}"
    );
}

/// A script in a double-quoted scalar with `\n` escapes: its lines are not the file's, so the
/// error is at the scalar (5:9), with the position inside the script beside it; it was a
/// column of the next line that the line does not have.
#[test]
fn a_script_error_in_an_escaped_scalar_is_at_the_scalar() {
    let detail = failed_detail(
        "script: \"fn ok() { 1 }\\nfn bad() { throw \\\"boom\\\"; }\"\nsteps:\n  - id: done\n    opcode: STOP\n    reason: \"${{ bad() }}\"\n",
    );
    assert!(
        detail.contains("wf.yaml:5:9 (script 2:12, in `bad`): the script failed: boom"),
        "{detail}"
    );
}

/// `$${` is a literal `${`, and `${{ … }}` ends at the `}}` that
/// closes it, not at the first `}}` of a map inside a map.
#[test]
fn a_literal_dollar_brace_and_a_nested_map_reach_the_run_as_written() {
    let repo = RunRepo::new();
    let workflow = repo.workflow_text(
        "wf.yaml",
        &format!(
            "{HEADER}steps:\n  - id: done\n    opcode: STOP\n    reason: \"HOME is $${{HOME}}; ${{{{ to_json(#{{a: #{{b: 1}}}}) }}}}\"\n"
        ),
    );
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(0), "{result}\n{}", stderr_text(&output));
    assert_eq!(
        result["detail"],
        "reached STOP step `done`: HOME is ${HOME}; {\"a\":{\"b\":1}}"
    );
}
