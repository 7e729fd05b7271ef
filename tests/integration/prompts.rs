//! The prompt library: every built-in parses and renders, strict rendering fails loudly with
//! file and line, released prompts are immutable, and `.tnh/prompts/` overrides built-ins.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};
use tnh_conductor::prompt::{Catalog, PromptError, builtin_catalog, render};

use crate::support::{TempRepo, conductor, fixture, stderr_text, stdout_text};

fn samples() -> BTreeMap<String, serde_json::Map<String, serde_json::Value>> {
    serde_json::from_str(&std::fs::read_to_string(fixture("prompts/samples.json")).unwrap())
        .unwrap()
}

#[test]
fn every_builtin_prompt_parses_and_renders_with_sample_inputs() {
    let catalog = builtin_catalog().unwrap();
    let samples = samples();
    let references: Vec<&str> = catalog.references().collect();
    assert_eq!(
        references.len(),
        samples.len(),
        "samples.json must cover every prompt: {references:?}"
    );
    for prompt in catalog.iter() {
        let inputs = samples
            .get(&prompt.reference())
            .unwrap_or_else(|| panic!("no sample inputs for {}", prompt.reference()));
        let text = render(prompt, inputs)
            .unwrap_or_else(|error| panic!("{}: {error}", prompt.reference()));
        assert!(
            text.len() > 100,
            "{} rendered almost nothing",
            prompt.reference()
        );
        assert!(
            !text.contains("{{") && !text.contains("{%"),
            "{} left template syntax",
            prompt.reference()
        );
        for input in prompt
            .inputs
            .iter()
            .filter(|input| input.required && input.input_type.name() == "string")
        {
            let value = inputs[&input.name].as_str().unwrap();
            assert!(
                text.contains(value),
                "{} does not use its input `{}`",
                prompt.reference(),
                input.name
            );
        }
    }
}

#[test]
fn every_prompt_file_is_embedded() {
    let mut on_disk = Vec::new();
    let mut pending = vec![std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/prompts"
    ))];
    while let Some(directory) = pending.pop() {
        for entry in std::fs::read_dir(directory).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|extension| extension == "md")
                && path.file_name().unwrap() != "README.md"
            {
                on_disk.push(path.file_name().unwrap().to_string_lossy().into_owned());
            }
        }
    }
    let embedded: Vec<String> = builtin_catalog()
        .unwrap()
        .iter()
        .map(|prompt| {
            prompt
                .source
                .display()
                .rsplit('/')
                .next()
                .unwrap()
                .to_owned()
        })
        .collect();
    for file in on_disk {
        assert!(
            embedded.contains(&file),
            "prompts/**/{file} is not listed in BUILTIN_FILES"
        );
    }
}

/// Released prompts never change without a new version: their hashes are pinned here.
#[test]
fn released_prompts_are_immutable() {
    let pinned: BTreeMap<String, String> =
        std::fs::read_to_string(fixture("prompts/released.sha256"))
            .unwrap()
            .lines()
            .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
            .map(|line| {
                let (hash, reference) = line.split_once("  ").unwrap();
                (reference.to_owned(), hash.to_owned())
            })
            .collect();
    for (path, text) in tnh_conductor::prompt::BUILTIN_FILES {
        let prompt = builtin_catalog()
            .unwrap()
            .iter()
            .find(|prompt| prompt.source.display() == *path)
            .unwrap();
        if !prompt.status.is_released() {
            continue;
        }
        let hash: String = Sha256::digest(text.as_bytes())
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        let reference = prompt.reference();
        match pinned.get(&reference) {
            Some(expected) => assert_eq!(
                &hash, expected,
                "{reference} changed after release: add a new version instead ({path})"
            ),
            None => panic!(
                "{reference} is released but not pinned: add `{hash}  {reference}` to tests/fixtures/prompts/released.sha256"
            ),
        }
    }
}

fn custom_prompt(repo: &TempRepo, body: &str) -> Catalog {
    let front = "---\nprompt_id: task.custom\nversion: 1\nrole: task\nsummary: a test prompt\ninputs:\n  - {name: count, type: int, required: true}\n  - {name: note, type: string, required: false}\n---\n";
    repo.write(".tnh/prompts/task/custom.v1.md", &format!("{front}{body}"));
    Catalog::load(Some(repo.path())).unwrap()
}

fn render_error(catalog: &Catalog, inputs: serde_json::Value) -> (String, u32, String) {
    let prompt = catalog.resolve("task.custom.v1").unwrap();
    match render(prompt, inputs.as_object().unwrap()) {
        Err(
            PromptError::Render {
                file,
                line,
                message,
                ..
            }
            | PromptError::Inputs {
                file,
                line,
                message,
                ..
            },
        ) => (file, line, message),
        other => panic!("expected a render error, got {other:?}"),
    }
}

#[test]
fn strict_rendering_fails_with_file_and_line() {
    let repo = TempRepo::new();
    let catalog = custom_prompt(
        &repo,
        "Line one.\nCount: {{ count }}\nThen {{ note.field }}\n",
    );
    let (file, line, message) =
        render_error(&catalog, serde_json::json!({"count": 3, "note": "text"}));
    assert!(file.ends_with(".tnh/prompts/task/custom.v1.md"), "{file}");
    assert_eq!(
        line, 12,
        "the undefined field is on line 12 of the file: {message}"
    );
    assert!(message.contains("undefined"), "{message}");

    let (_, line, message) = render_error(&catalog, serde_json::json!({}));
    assert!(message.contains("required input `count`"), "{message}");
    assert_eq!(line, 10);
    let (_, _, message) = render_error(&catalog, serde_json::json!({"count": "three"}));
    assert!(message.contains("must be of type int"), "{message}");
    let (_, _, message) = render_error(&catalog, serde_json::json!({"count": 1, "cuont": 2}));
    assert!(message.contains("`cuont` is not declared"), "{message}");
}

#[test]
fn includes_are_refused_and_runaway_templates_stop() {
    let repo = TempRepo::new();
    let catalog = custom_prompt(&repo, "{% include '/etc/passwd' %}\n");
    let error = catalog.resolve("task.custom.v1").unwrap_err().to_string();
    assert!(
        error.contains("custom.v1.md:10: syntax error: unknown statement include"),
        "{error}"
    );
    let catalog = custom_prompt(
        &repo,
        "{% for a in range(10000) %}{% for b in range(10000) %}x{% endfor %}{% endfor %}\n",
    );
    let (_, _, message) = render_error(&catalog, serde_json::json!({"count": 1}));
    assert!(message.contains("fuel"), "{message}");
}

#[test]
fn repo_prompts_take_precedence_over_builtins() {
    let repo = TempRepo::new();
    let builtin = builtin_catalog()
        .unwrap()
        .resolve("task.plan_adr.v1")
        .unwrap()
        .clone();
    let override_text = "---\nprompt_id: task.plan_adr\nversion: 1\nrole: task\nsummary: our own planning prompt\ninputs:\n  - {name: adr_id, type: string}\n---\nPlan {{ adr_id }} the way this team does.\n";
    repo.write(".tnh/prompts/task/plan_adr.v1.md", override_text);
    let catalog = Catalog::load(Some(repo.path())).unwrap();
    let prompt = catalog.resolve("task.plan_adr.v1").unwrap();
    assert_eq!(prompt.summary, "our own planning prompt");
    assert_ne!(prompt.summary, builtin.summary);
    let inputs = serde_json::json!({"adr_id": "ADR-7"});
    assert_eq!(
        render(prompt, inputs.as_object().unwrap()).unwrap(),
        "Plan ADR-7 the way this team does.\n"
    );
    // The CLI sees the override too.
    let output = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args([
            "prompts",
            "render",
            "task.plan_adr.v1",
            "-i",
            "adr_id=ADR-7",
        ])
        .output()
        .unwrap();
    assert_eq!(
        stdout_text(&output),
        "Plan ADR-7 the way this team does.\n",
        "{}",
        stderr_text(&output)
    );
}

/// The problems of the first broken prompt file of a catalog, as messages.
fn broken_problems(catalog: &Catalog) -> Vec<String> {
    catalog.broken_files()[0]
        .problems
        .iter()
        .map(|problem| problem.message.clone())
        .collect()
}

#[test]
fn a_misnamed_or_malformed_prompt_file_is_reported_with_its_position() {
    let repo = TempRepo::new();
    repo.write(
        ".tnh/prompts/task/wrong_name.v1.md",
        "---\nprompt_id: task.custom\nversion: 1\nrole: task\nsummary: x\n---\nbody\n",
    );
    let catalog = Catalog::load(Some(repo.path())).unwrap();
    let problems = broken_problems(&catalog);
    assert!(
        problems[0].contains("must live in a file ending `task/custom.v1.md`"),
        "{problems:?}"
    );
    repo.write(
        ".tnh/prompts/task/wrong_name.v1.md",
        "---\nprompt_id: task.wrong_name\nversion: 1\nrole: tsak\nsummary: x\n---\nbody\n",
    );
    let catalog = Catalog::load(Some(repo.path())).unwrap();
    let problems = broken_problems(&catalog);
    assert!(problems[0].ends_with("wrong_name.v1.md:4:7: role `tsak` is not one of task, policy, planner, triage, risk, journal, agent"), "{problems:?}");
    let error = catalog
        .resolve("task.wrong_name.v1")
        .unwrap_err()
        .to_string();
    assert!(error.contains("role `tsak`"), "{error}");
}

#[test]
fn prompts_list_show_and_render_commands() {
    let output = conductor().args(["prompts", "list"]).output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    let list = stdout_text(&output);
    for reference in builtin_catalog().unwrap().references() {
        assert!(
            list.contains(reference),
            "{reference} missing from `prompts list`"
        );
    }
    let show = stdout_text(
        &conductor()
            .args(["prompts", "show", "task.implement_adr.v1"])
            .output()
            .unwrap(),
    );
    assert!(
        show.contains("role: task") && show.contains("adr_id"),
        "{show}"
    );
    let rendered = conductor()
        .args([
            "prompts",
            "render",
            "task.plan_adr.v1",
            "-i",
            "adr_id=ADR-9",
        ])
        .output()
        .unwrap();
    assert_eq!(rendered.status.code(), Some(0));
    assert!(stdout_text(&rendered).contains("**ADR-9**"));
    let missing = conductor()
        .args(["prompts", "render", "task.plan_adr.v1"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(stderr_text(&missing).contains("required input `adr_id`"));
    let unknown = conductor()
        .args(["prompts", "show", "task.plan_adr.v2"])
        .output()
        .unwrap();
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        stderr_text(&unknown).contains("did you mean `task.plan_adr.v1`"),
        "{}",
        stderr_text(&unknown)
    );
}

#[test]
fn validate_resolves_prompts_from_the_repository_library() {
    let repo = TempRepo::new();
    let workflow = "workflow_id: local\nversion: 1\ndescription: uses a team prompt\nentry_step: a\nsteps:\n  - id: a\n    opcode: RUN_AGENT\n    agent: codex\n    prompt: task.team_style.v2\n    routes:\n      \"*\": STOP\n";
    let path = repo.write("wf.yaml", workflow);
    let before = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["--color", "never", "validate"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(before.status.code(), Some(1));
    assert!(stdout_text(&before).contains(":9:13: error: prompt `task.team_style.v2` is not in the prompt library [unknown-prompt]"), "{}", stdout_text(&before));
    repo.write(".tnh/prompts/task/team_style.v2.md", "---\nprompt_id: task.team_style\nversion: 2\nrole: task\nsummary: our house style\n---\nFollow the house style.\n");
    let after = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["validate"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(after.status.code(), Some(0), "{}", stdout_text(&after));
}

/// The fix prompt says why a validator has no exit code (a timeout) instead of presenting
/// `exited none` as a failing check.
#[test]
fn the_fix_prompt_never_says_a_validator_exited_none() {
    let catalog = builtin_catalog().unwrap();
    let prompt = catalog.resolve("task.fix_from_logs.v2").unwrap();
    let inputs = serde_json::json!({"validation_report": {"validators": {
        "lint": {"exit_code": 1},
        "tests": {"exit_code": null, "outcome": "killed_timeout", "cause": "timeout: wall-clock limit of 20m reached"},
    }}});
    let text = render(prompt, inputs.as_object().unwrap()).unwrap();
    assert!(text.contains("- `lint` exited 1"), "{text}");
    assert!(
        text.contains("- `tests` did not finish: timeout: wall-clock limit of 20m reached"),
        "{text}"
    );
    assert!(!text.to_lowercase().contains("exited none"), "{text}");
}

/// `prompts render -i` types values as `run -p` does: an input the prompt declares `string`
/// takes the text as given whenever YAML reads it as something else (`7`, `panic: at x`,
/// `[flaky] test`), so checking a prompt by hand renders what a run with the same value sends
/// the agent. Other types are still parsed and checked.
#[test]
fn prompts_render_types_a_string_input_as_run_types_a_string_parameter() {
    let repo = crate::kernel_support::RunRepo::new();
    repo.repo.write(
        ".tnh/prompts/task/hello.v1.md",
        "---\nprompt_id: task.hello\nversion: 1\nrole: task\nsummary: s\ninputs:\n  - {name: adr_id, type: string, required: true}\n  - {name: count, type: int, required: false}\n---\nImplement ADR {{ adr_id }}\nSAY done\n",
    );
    let workflow = repo.workflow_text(
        "hello.yaml",
        "workflow_id: hello\nversion: 1\ndescription: d\nentry_step: work\nparams:\n  adr_id: {type: string, required: true}\nsteps:\n  - id: work\n    opcode: RUN_AGENT\n    agent: scripted\n    prompt: task.hello.v1\n    inputs: [adr_id]\n    routes:\n      \"*\": STOP\n",
    );
    for value in ["7", "panic: at x", "[flaky] test", "true", "'quoted: text'"] {
        let rendered = repo.conductor(&[
            "prompts",
            "render",
            "task.hello.v1",
            "-i",
            &format!("adr_id={value}"),
        ]);
        assert_eq!(
            rendered.status.code(),
            Some(0),
            "{value}: {}",
            stderr_text(&rendered)
        );
        let (code, result, output) = repo.run(&workflow, &["-p", &format!("adr_id={value}")]);
        assert_eq!(code, Some(0), "{value}: {result}\n{}", stderr_text(&output));
        let sent = std::fs::read_to_string(
            repo.run_dir(result["run_id"].as_str().unwrap())
                .join("artifacts/work/1/prompt.md"),
        )
        .unwrap();
        assert_eq!(stdout_text(&rendered), sent, "{value}");
        let text = if value == "'quoted: text'" {
            "quoted: text"
        } else {
            value
        };
        assert!(
            sent.contains(&format!("Implement ADR {text}\n")),
            "{value}: {sent}"
        );
    }
    let wrong = repo.conductor(&[
        "prompts",
        "render",
        "task.hello.v1",
        "-i",
        "adr_id=7",
        "-i",
        "count=three",
    ]);
    assert_eq!(wrong.status.code(), Some(2), "{}", stdout_text(&wrong));
    assert!(
        stderr_text(&wrong).contains("count"),
        "{}",
        stderr_text(&wrong)
    );
}

/// A template that reads a variable its front matter does not declare can never render
/// (rendering is strict, and only declared inputs are given): the prompt is broken when it is
/// loaded, so `validate` and `prompts list` name the variable at its file:line:col, instead of
/// the run failing when it reaches the step.
#[test]
fn a_template_variable_the_prompt_does_not_declare_is_a_problem_of_the_file() {
    let repo = TempRepo::new();
    let catalog = custom_prompt(
        &repo,
        "Count: {{ count }}\n{% for item in range(count) %}{{ loop.index }} {{ item }}{% endfor %}\n{% set total = count + 1 %}{{ total }}\nFix {{ cuont }} and {{ worktree }}.\n",
    );
    let problems = broken_problems(&catalog);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].ends_with("custom.v1.md:13:8: the template uses `cuont`, which is not an input of the prompt (declared: `count`, `note`); rendering is strict, so every render would fail here"),
        "{problems:?}"
    );
    assert!(
        problems[1].contains("custom.v1.md:13:24: the template uses `worktree`"),
        "{problems:?}"
    );
    let hint = catalog.broken_files()[0].problems[0].hint.clone().unwrap();
    assert!(hint.starts_with("did you mean `count`?"), "{hint}");
    assert!(hint.contains("declare it under `inputs:`"), "{hint}");

    let workflow = "workflow_id: typo\nversion: 1\ndescription: d\nentry_step: a\nparams:\n  count: {type: int, required: true}\nsteps:\n  - id: a\n    opcode: RUN_AGENT\n    agent: codex\n    prompt: task.custom.v1\n    inputs: [count]\n    routes:\n      \"*\": STOP\n";
    let path = repo.write("wf.yaml", workflow);
    let validate = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["--color", "never", "validate"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(
        validate.status.code(),
        Some(1),
        "{}",
        stdout_text(&validate)
    );
    let report = stdout_text(&validate);
    assert!(
        report.contains("custom.v1.md:13:8: the template uses `cuont`")
            && report.contains("[invalid-prompt]"),
        "{report}"
    );
    let list = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["prompts", "list"])
        .output()
        .unwrap();
    assert_eq!(list.status.code(), Some(1));
    assert!(
        stderr_text(&list).contains("custom.v1.md:13:8: the template uses `cuont`"),
        "{}",
        stderr_text(&list)
    );
}

/// A prompt saved with CRLF line endings reads like the same file with LF.
#[test]
fn a_prompt_file_with_crlf_line_endings_is_read_like_one_with_lf() {
    let repo = TempRepo::new();
    let text = "---\nprompt_id: task.custom\nversion: 1\nrole: task\nsummary: a test prompt\ninputs:\n  - {name: count, type: int}\n---\nCount: {{ count }}\nDone.\n";
    repo.write(
        ".tnh/prompts/task/custom.v1.md",
        &text.replace('\n', "\r\n"),
    );
    let catalog = Catalog::load(Some(repo.path())).unwrap();
    assert!(
        catalog.broken_files().is_empty(),
        "{:?}",
        catalog.broken_files()
    );
    let prompt = catalog.resolve("task.custom.v1").unwrap();
    assert_eq!(prompt.summary, "a test prompt");
    assert_eq!(prompt.body_line, 9);
    let inputs = serde_json::json!({"count": 3});
    assert_eq!(
        render(prompt, inputs.as_object().unwrap()).unwrap(),
        "Count: 3\nDone.\n"
    );
    // Positions of problems in a CRLF file are those of its lines.
    repo.write(
        ".tnh/prompts/task/custom.v1.md",
        &text
            .replace("role: task", "role: tsak")
            .replace('\n', "\r\n"),
    );
    let catalog = Catalog::load(Some(repo.path())).unwrap();
    let problems = broken_problems(&catalog);
    assert!(problems[0].ends_with("custom.v1.md:4:7: role `tsak` is not one of task, policy, planner, triage, risk, journal, agent"), "{problems:?}");
}
