//! A prompt's render is bounded in size, not only in steps, its template
//! is compiled when the library loads so `validate` catches syntax errors, and one
//! bad prompt file blocks only the workflows that use it.

use tnh_conductor::prompt::{Catalog, MAX_RENDERED_BYTES, PromptError, render};

use crate::support::{TempRepo, conductor, stderr_text, stdout_text};

const FRONT: &str = "---\nprompt_id: task.custom\nversion: 1\nrole: task\nsummary: a test prompt\ninputs:\n  - {name: text, type: string, required: true}\n  - {name: note, type: string, required: false}\n---\n";

/// Writes `task.custom.v1` with this body and loads the catalog.
fn catalog_with(repo: &TempRepo, body: &str) -> Catalog {
    repo.write(".tnh/prompts/task/custom.v1.md", &format!("{FRONT}{body}"));
    Catalog::load(Some(repo.path())).unwrap()
}

/// The problems of the broken `task.custom.v1`.
fn problems(catalog: &Catalog) -> Vec<String> {
    catalog
        .broken("task.custom.v1")
        .expect("task.custom.v1 is broken")
        .problems
        .iter()
        .map(|problem| problem.message.clone())
        .collect()
}

fn render_custom(catalog: &Catalog, inputs: serde_json::Value) -> Result<String, PromptError> {
    render(
        catalog.resolve("task.custom.v1").unwrap(),
        inputs.as_object().unwrap(),
    )
}

/// The review's repro: seven `set` lines of `s ~ s ~ …` rendered 750 MB and aborted under a
/// memory limit. The operators that grow strings are refused when the prompt loads.
#[test]
fn a_string_doubling_template_is_refused_before_it_renders() {
    let repo = TempRepo::new();
    let line = "{% set s = s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s %}";
    let body = format!(
        "{{% set s = \"xxxxxxxxxx\" %}}{}{{{{ s }}}}\n",
        line.repeat(7)
    );
    let catalog = catalog_with(&repo, &body);
    let found = problems(&catalog);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].ends_with("custom.v1.md:10: the `~` operator is not available in prompts"),
        "{found:?}"
    );
    let error = render(
        &catalog_for_render(&repo, &body),
        serde_json::json!({"text": "t"}).as_object().unwrap(),
    )
    .unwrap_err();
    assert!(error.to_string().contains("`~` operator"), "{error}");
    // The CLI refuses it at once, naming the file and the line.
    let output = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["prompts", "render", "task.custom.v1", "-i", "text=t"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(stdout_text(&output).is_empty());
    let stderr = stderr_text(&output);
    assert!(
        stderr.contains("custom.v1.md:10: the `~` operator is not available in prompts"),
        "{stderr}"
    );
}

/// A prompt parsed directly, bypassing the catalog's refusal, so the render-time checks are
/// exercised too.
fn catalog_for_render(repo: &TempRepo, body: &str) -> tnh_conductor::prompt::Prompt {
    let path = repo.path().join(".tnh/prompts/task/custom.v1.md");
    let text = format!("{FRONT}{body}");
    // Parsing reports the problem; a prompt with the same front matter and a harmless body
    // gets the body swapped in to reach `render`.
    let harmless = format!("{FRONT}ok\n");
    let mut prompt = tnh_conductor::prompt::Prompt::parse(
        &harmless,
        tnh_conductor::prompt::PromptSource::Repo(path.display().to_string()),
    )
    .unwrap();
    prompt.body = text[FRONT.len()..].to_owned();
    prompt
}

#[test]
fn every_construct_that_grows_a_value_is_refused_with_its_line() {
    let repo = TempRepo::new();
    let body = "{{ text * 3 }}\n{{ text + text }}\n{% set x %}{{ text }}{% endset %}\n{{ text | replace('a', text) }}\n{{ text | escape }}\n{{ text + (text if note else 1) }}\n";
    let found = problems(&catalog_with(&repo, body));
    let expected = [
        (10, "the `*` operator"),
        (11, "`+` is only available"),
        (12, "capture blocks"),
        (13, "filter `replace` is not available"),
        (14, "filter `escape` is not available"),
        (15, "`+` is only available"),
    ];
    assert_eq!(found.len(), expected.len(), "{found:?}");
    for ((line, message), problem) in expected.iter().zip(&found) {
        assert!(
            problem.contains(&format!("custom.v1.md:{line}: ")) && problem.contains(message),
            "expected line {line} `{message}`, got {problem}"
        );
    }
    // What prompts need stays available: adding a number, joining a list, tests, loops.
    let catalog = catalog_with(
        &repo,
        "{% for item in text | split(',') %}{{ loop.index + 1 }}={{ item | upper }} {% endfor %}{{ text | split(',') | join('+') }}{% if note is none %}!{% endif %}\n",
    );
    assert!(
        catalog.broken_files().is_empty(),
        "{:?}",
        catalog.broken_files()
    );
    assert_eq!(
        render_custom(&catalog, serde_json::json!({"text": "a,b"})).unwrap(),
        "2=A 3=B a+b!\n"
    );
}

#[test]
fn the_rendered_output_is_capped() {
    let repo = TempRepo::new();
    let catalog = catalog_with(&repo, "{% for i in range(5000) %}{{ text }}{% endfor %}\n");
    let text = "x".repeat(1000);
    let error = render_custom(&catalog, serde_json::json!({"text": text})).unwrap_err();
    let PromptError::Render {
        file,
        message,
        hint,
        ..
    } = &error
    else {
        panic!("expected a render error, got {error:?}");
    };
    assert!(file.ends_with("custom.v1.md"), "{file}");
    assert_eq!(
        message,
        &format!(
            "the rendered prompt exceeds the limit of {} MiB",
            MAX_RENDERED_BYTES / (1024 * 1024)
        )
    );
    assert!(hint.contains("pass large evidence as a file"), "{hint}");
    // Just under the limit renders.
    let catalog = catalog_with(&repo, "{% for i in range(2000) %}{{ text }}{% endfor %}\n");
    let rendered = render_custom(&catalog, serde_json::json!({"text": text})).unwrap();
    assert_eq!(rendered.len(), 2_000_001);
}

/// Lists share their items, so a list of lists of lists is small in memory but huge once
/// written out: `join` and the output stop at the limit instead of building it.
#[test]
fn nested_lists_cannot_be_joined_or_printed_past_the_limit() {
    let repo = TempRepo::new();
    let grow = "{% set l = [l, l, l, l, l, l, l, l, l, l] %}".repeat(8);
    let catalog = catalog_with(
        &repo,
        &format!("{{% set l = [text] %}}{grow}{{{{ l | join }}}}\n"),
    );
    let error = render_custom(&catalog, serde_json::json!({"text": "0123456789"})).unwrap_err();
    assert!(
        error.to_string().contains("`join` would build more than"),
        "{error}"
    );
    let catalog = catalog_with(&repo, &format!("{{% set l = [text] %}}{grow}{{{{ l }}}}\n"));
    let error = render_custom(&catalog, serde_json::json!({"text": "0123456789"})).unwrap_err();
    assert!(error.to_string().contains("exceeds the limit"), "{error}");
}

#[test]
fn a_missing_optional_input_renders_as_nothing() {
    let repo = TempRepo::new();
    let catalog = catalog_with(&repo, "[{{ note }}]\n");
    assert_eq!(
        render_custom(&catalog, serde_json::json!({"text": "t"})).unwrap(),
        "[]\n"
    );
}

fn validate(repo: &TempRepo, workflow: &std::path::Path) -> std::process::Output {
    conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["--color", "never", "validate"])
        .arg(workflow)
        .output()
        .unwrap()
}

fn workflow_using(repo: &TempRepo, name: &str, prompt: &str) -> std::path::PathBuf {
    repo.write(
        name,
        &format!("workflow_id: w\nversion: 1\ndescription: d\nentry_step: a\nsteps:\n  - id: a\n    opcode: RUN_AGENT\n    agent: codex\n    prompt: {prompt}\n    inputs: {{text: t}}\n    routes: {{\"*\": STOP}}\n"),
    )
}

/// A deprecated prompt is a warning (`deprecated-prompt`), at the reference: the workflow
/// stays valid. (No fixture under tests/fixtures/workflows/invalid/: the built-in library has
/// no deprecated prompt, so it needs a repository's own.)
#[test]
fn a_deprecated_prompt_is_a_warning_at_the_reference() {
    let repo = TempRepo::new();
    repo.write(
        ".tnh/prompts/task/old.v1.md",
        "---\nprompt_id: task.old\nversion: 1\nrole: task\nstatus: deprecated\nsummary: an old prompt\ninputs:\n  - {name: text, type: string, required: false}\n---\nDo {{ text }}.\n",
    );
    let workflow = workflow_using(&repo, "wf.yaml", "task.old.v1");
    let output = validate(&repo, &workflow);
    let stdout = stdout_text(&output);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains(
            "wf.yaml:9:13: warning: prompt `task.old.v1` is deprecated [deprecated-prompt]"
        ) && stdout.contains("hint: move to a newer version of the prompt"),
        "{stdout}"
    );
}

/// `{% if %}` in a repository prompt passed `validate`, and the run
/// created its worktree before failing at the step.
#[test]
fn a_template_syntax_error_fails_validate_with_the_prompt_line() {
    let repo = TempRepo::new();
    catalog_with(&repo, "line one\nline two {% if %}\n");
    let workflow = workflow_using(&repo, "wf.yaml", "task.custom.v1");
    let output = validate(&repo, &workflow);
    assert_eq!(output.status.code(), Some(1), "{}", stdout_text(&output));
    let stdout = stdout_text(&output);
    assert!(
        stdout.contains("wf.yaml:9:13: error: prompt `task.custom.v1` is invalid: ")
            && stdout.contains("custom.v1.md:11: syntax error")
            && stdout.contains("[invalid-prompt]")
            && stdout.contains("hint: fix the template syntax"),
        "{stdout}"
    );
    let run = conductor()
        .arg("--repo")
        .arg(repo.path())
        .arg("run")
        .arg(&workflow)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(2), "{}", stderr_text(&run));
    assert!(
        !repo.path().join(".tnh/run").exists(),
        "no run is started for an invalid prompt"
    );
}

/// One bad prompt file made `validate` and `prompts list` fail for every
/// workflow, and only its first problem was shown.
#[test]
fn a_bad_prompt_file_blocks_only_the_workflows_that_use_it_and_shows_every_problem() {
    let repo = TempRepo::new();
    repo.write(
        ".tnh/prompts/task/badfm.v1.md",
        "---\nprompt_id: task.badfm\nversion: one\nrole: wizard\ninputs:\n  - {name: a, type: blob}\n  - {name: a, type: string}\nbogus: 1\n---\nhi\n",
    );
    std::fs::write(
        repo.path().join(".tnh/prompts/task/latin.v1.md"),
        b"---\nprompt_id: task.latin\nversion: 1\nrole: task\nsummary: x\n---\ncaf\xe9\n",
    )
    .unwrap();
    std::fs::write(
        repo.path().join(".tnh/prompts/task/wide.v1.md"),
        b"\xff\xfe-\x00-\x00-\x00\n\x00",
    )
    .unwrap();
    catalog_with(&repo, "Hello {{ text }}\n");

    let good = workflow_using(&repo, "good.yaml", "task.custom.v1");
    let output = validate(&repo, &good);
    assert_eq!(output.status.code(), Some(0), "{}", stdout_text(&output));

    let bad = workflow_using(&repo, "bad.yaml", "task.badfm.v1");
    let output = validate(&repo, &bad);
    assert_eq!(output.status.code(), Some(1), "{}", stdout_text(&output));
    let stdout = stdout_text(&output);
    for expected in [
        "badfm.v1.md:2:1: the front matter is missing `summary`",
        "badfm.v1.md:3:10: version must be a whole number",
        "badfm.v1.md:4:7: role `wizard` is not one of",
        "badfm.v1.md:6:21: input type `blob` is not one of",
        "badfm.v1.md:7:5: input `a` is declared twice",
        "badfm.v1.md:8:1: unknown front-matter key `bogus`",
    ] {
        assert!(
            stdout.contains(expected),
            "missing `{expected}` in\n{stdout}"
        );
    }

    let list = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["prompts", "list"])
        .output()
        .unwrap();
    assert_eq!(list.status.code(), Some(1));
    assert!(stdout_text(&list).contains("task.custom.v1"));
    assert!(stdout_text(&list).contains("task.plan_adr.v1"));
    let stderr = stderr_text(&list);
    assert!(stderr.contains("prompt `task.badfm.v1`"), "{stderr}");
    assert!(
        stderr.contains("latin.v1.md: the file is not valid UTF-8 (the first invalid byte is at line 7, column 4)")
            && stderr.contains("hint: save the file as UTF-8"),
        "{stderr}"
    );
    assert!(
        stderr.contains("wide.v1.md: the file is UTF-16 text"),
        "{stderr}"
    );
    assert!(!stderr.contains("permissions"), "{stderr}");
}
