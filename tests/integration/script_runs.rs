//! Scripts in real runs: where their prints are recorded, what an optional parameter without a
//! value gives, and where repository modules (`.tnh/scripts/`) are read from.

use crate::kernel_support::{RunRepo, first_event};
use crate::support::{stderr_text, stdout_text};

/// The `script_output` events of a run: (step id, text).
fn prints(repo: &RunRepo, run_id: &str) -> Vec<(Option<String>, String)> {
    repo.events(run_id)
        .iter()
        .filter(|event| event["event_type"] == "script_output")
        .map(|event| {
            (
                event["step_id"].as_str().map(str::to_owned),
                event["text"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// A print in a gate's `reason` was recorded under the next step, one in a STOP's
/// `reason` nowhere. Each is recorded under the visit that printed, whatever its opcode, and
/// what the script's top level prints as the run loads it is the run's.
#[test]
fn prints_are_recorded_under_the_step_that_printed_them() {
    let repo = RunRepo::new();
    let workflow = repo.workflow_text(
        "prints.yaml",
        r#"workflow_id: prints
version: 1
description: prints in gate and STOP reasons
entry_step: g
script: |
  print("loading");
  fn say(text) { print("printed in " + text); text }
steps:
  - id: g
    opcode: GATE
    gate: queue_for_review
    reason: "${{ say(`gate`) }}"
    routes: {gate_queued: work}
  - id: work
    opcode: RUN_AGENT
    agent: scripted
    prompt: "SAY ok"
    routes: {"*": done}
  - id: done
    opcode: STOP
    reason: "${{ say(`stop`) }}"
"#,
    );
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(0), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    assert_eq!(
        prints(&repo, run_id),
        [
            (None, "loading".to_owned()),
            (Some("g".to_owned()), "printed in gate".to_owned()),
            (Some("done".to_owned()), "printed in stop".to_owned()),
        ]
    );
}

/// A print before the expression fails is recorded under the failing step too.
#[test]
fn prints_of_a_step_whose_expression_fails_are_recorded_under_it() {
    let repo = RunRepo::new();
    let workflow = repo.workflow_text(
        "fails.yaml",
        r#"workflow_id: fails
version: 1
description: a print, then a failure
entry_step: done
script: |
  fn fail() { print("about to fail"); throw "no reason" }
steps:
  - id: done
    opcode: STOP
    reason: "${{ fail() }}"
"#,
    );
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(4), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    assert_eq!(
        prints(&repo, run_id),
        [(Some("done".to_owned()), "about to fail".to_owned())]
    );
}

/// An optional parameter without a default, not given: `${params.o}` stopped the
/// run while `${{ params.o }}` gave nothing. Both give nothing now, in a reason and in a
/// literal prompt, and `ctx.params` holds it as `()`.
#[test]
fn an_optional_parameter_without_a_value_is_empty_in_every_substitution() {
    let repo = RunRepo::new();
    let workflow = repo.workflow_text(
        "optional.yaml",
        r#"workflow_id: optional
version: 1
description: an optional parameter without a default
entry_step: work
params:
  o: {type: string}
steps:
  - id: work
    opcode: RUN_AGENT
    agent: scripted
    prompt: "SAY prompt=[${params.o}]"
    routes: {"*": done}
  - id: done
    opcode: STOP
    reason: "o=[${params.o}] e=[${{ params.o }}] in=${{ \"o\" in params }} type=${{ type_of(params.o) }}"
"#,
    );
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(0), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    assert_eq!(
        repo.json(run_id, "metadata.json")["termination"]["reason"],
        "reached STOP step `done`: o=[] e=[] in=true type=()"
    );
    let answer = std::fs::read_to_string(
        repo.run_dir(run_id)
            .join("artifacts/work/1/final_response.md"),
    )
    .unwrap();
    assert!(answer.contains("prompt=[]"), "{answer}");
    // Given, it is its value.
    let (code, result, _) = repo.run(&workflow, &["-p", "o=x"]);
    assert_eq!(code, Some(0), "{result}");
    let run_id = result["run_id"].as_str().unwrap();
    assert_eq!(
        repo.json(run_id, "metadata.json")["termination"]["reason"],
        "reached STOP step `done`: o=[x] e=[x] in=true type=string"
    );
}

const MODULE_WORKFLOW: &str = r#"workflow_id: modules
version: 1
description: imports a repository module
entry_step: done
script: |
  import ".tnh/scripts/helpers" as h;
  fn r() { h::greet() }
steps:
  - id: done
    opcode: STOP
    reason: "${{ r() }}"
"#;

/// Repository modules were read from the run's worktree, where `.tnh/` (excluded
/// from git) is only when committed, so an uncommitted module passed `validate` and failed the
/// run after it had made its worktree. They are read from the repository, as its prompts are,
/// and pinned in the run directory.
#[test]
fn an_uncommitted_repository_module_is_read_from_the_repository_and_pinned() {
    let repo = RunRepo::new();
    repo.repo.write(
        ".tnh/scripts/helpers.rhai",
        "fn greet() { \"hi from the repository\" }\n",
    );
    let workflow = repo.workflow_text("modules.yaml", MODULE_WORKFLOW);
    let valid = repo.conductor(&["validate", workflow.to_str().unwrap()]);
    assert_eq!(valid.status.code(), Some(0), "{}", stdout_text(&valid));
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(0), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    assert_eq!(
        repo.json(run_id, "metadata.json")["termination"]["reason"],
        "reached STOP step `done`: hi from the repository"
    );
    let pinned =
        std::fs::read_to_string(repo.run_dir(run_id).join("scripts/helpers.rhai")).unwrap();
    assert!(pinned.contains("hi from the repository"), "{pinned}");
}

/// docs/workflows.md (`script-import`): a module that is nowhere, or that does not compile, is
/// refused by `validate` at its import, and `run` starts nothing.
#[test]
fn a_missing_or_broken_repository_module_is_refused_before_anything_starts() {
    let repo = RunRepo::new();
    let workflow = repo.workflow_text("modules.yaml", MODULE_WORKFLOW);
    let refused = repo.conductor(&["validate", workflow.to_str().unwrap()]);
    let text = stdout_text(&refused);
    assert_eq!(refused.status.code(), Some(1), "{text}");
    assert!(
        text.contains("modules.yaml:6:10: error: import `.tnh/scripts/helpers` is refused: `.tnh/scripts/helpers.rhai` does not exist in the repository"),
        "{text}"
    );
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(2), "{result}\n{}", stderr_text(&output));
    assert!(
        !repo.path().join(".tnh/run").exists()
            || std::fs::read_dir(repo.path().join(".tnh/run"))
                .unwrap()
                .next()
                .is_none(),
        "no run was started"
    );
    repo.repo
        .write(".tnh/scripts/helpers.rhai", "fn greet() { \"unclosed }\n");
    let broken = repo.conductor(&["validate", workflow.to_str().unwrap()]);
    let text = stdout_text(&broken);
    assert_eq!(broken.status.code(), Some(1), "{text}");
    assert!(
        text.contains(
            "modules.yaml:6:10: error: module `.tnh/scripts/helpers.rhai` does not compile"
        ),
        "{text}"
    );
}

/// The step_failed event of a script error carries where it is (docs/scripting.md).
#[test]
fn a_script_errors_step_failed_event_names_the_file_line_and_column() {
    let repo = RunRepo::new();
    let workflow = repo.workflow_text(
        "located.yaml",
        "workflow_id: located\nversion: 1\ndescription: d\nentry_step: done\nsteps:\n  - id: done\n    opcode: STOP\n    reason: \"${{ 1 + #{}.absent }}\"\n",
    );
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(4), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let events = repo.events(run_id);
    let failed = first_event(&events, "step_failed");
    assert!(
        failed["file"].as_str().unwrap().ends_with("located.yaml"),
        "{failed}"
    );
    assert_eq!(failed["line"], 8, "{failed}");
    assert!(failed["column"].as_u64().unwrap() >= 13, "{failed}");
    assert_eq!(failed["code"], "expression", "{failed}");
    assert!(failed["code_position"].is_string(), "{failed}");
}
