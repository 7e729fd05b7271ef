//! Continuing a run (`resume`, `gate approve --resume`) after something changed while it was
//! stopped: an agent rewrote the repository modules or prompts that judge it, or the operator
//! edited the workflow (new or retyped parameters, a renamed step). What judges the run stays
//! what it started with, or the change is recorded; what no longer fits the run is refused
//! with nothing written, so the run stays resumable.

use std::path::PathBuf;

use crate::kernel_support::{RunRepo, assert_contiguous, event_types};
use crate::support::stderr_text;

/// The repository module the policy `check` of the workflows below delegates to: it refuses
/// `secret/`.
const POLICY_MODULE: &str = "fn check(change) {\n    if change.path.starts_with(\"secret/\") { \"secret/ is off limits\" } else { true }\n}\n";

/// A repository whose committed `.tnh/scripts/pol.rhai` refuses `secret/`.
fn repo_with_policy_module() -> RunRepo {
    let repo = RunRepo::new();
    repo.repo.write(".tnh/scripts/pol.rhai", POLICY_MODULE);
    repo.repo.commit_all("policy module");
    repo
}

/// How many `policy_violation` events a step's visits recorded.
fn violations_of(events: &[serde_json::Value], step: &str) -> usize {
    events
        .iter()
        .filter(|event| event["event_type"] == "policy_violation" && event["step_id"] == step)
        .count()
}

/// Runs `text` (written as `wf/wf.yaml`) in a fresh repository made by `make`, with the
/// conductor SIGKILLed right after the `nth` (0-based) `event_type` event of an uninterrupted
/// reference run. Returns the repository, the workflow file and the run id.
fn killed_after(
    make: fn() -> RunRepo,
    text: &str,
    event_type: &str,
    nth: usize,
) -> (RunRepo, PathBuf, String) {
    let reference = make();
    let workflow = reference.workflow_text("wf.yaml", text);
    reference.run(&workflow, &[]);
    let events = reference.events(&reference.only_run_id());
    let seq = events
        .iter()
        .filter(|event| event["event_type"] == event_type)
        .nth(nth)
        .unwrap_or_else(|| panic!("no {event_type} #{nth} in {:?}", event_types(&events)))["seq"]
        .as_u64()
        .unwrap();
    let repo = make();
    let workflow = repo.workflow_text("wf.yaml", text);
    repo.run_killed_at(&workflow, seq);
    let run_id = repo.only_run_id();
    (repo, workflow, run_id)
}

/// `gate approve --resume` built a new script host that read `.tnh/scripts/`
/// from the worktree as an earlier agent step had rewritten it (`fn check(change) { true }`),
/// so the rewritten helper let a forbidden file through — only when the run was resumed. The
/// run now pins the modules it loaded at start (`scripts/` in the run directory, digests in
/// `metadata.json`) and a resumed run loads those.
#[test]
fn gate_approve_resume_judges_later_steps_with_the_modules_the_run_started_with() {
    let repo = repo_with_policy_module();
    let workflow = repo.workflow_text(
        "wf.yaml",
        r#"workflow_id: pinned
version: 1
description: an agent rewrites the policy helper, then a gate, then a forbidden write
entry_step: a
script: |
  import ".tnh/scripts/pol" as pol;
  fn check(change) { pol::check(change) }
steps:
  - id: a
    opcode: RUN_AGENT
    agent: scripted
    prompt: "WRITE .tnh/scripts/pol.rhai: fn check(change) { true }"
    routes: {completed: g, "*": f}
  - id: g
    opcode: GATE
    gate: requires_approval
    routes: {gate_approved: b, gate_rejected: f}
  - id: b
    opcode: RUN_AGENT
    agent: scripted
    prompt: "WRITE secret/token.txt: leaked"
    policy: {check: check}
    routes: {completed: STOP, "*": f}
  - id: f
    opcode: STOP
    outcome: failure
"#,
    );
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(3), "{result}{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap().to_owned();
    let worktree = repo.path().join(".tnh/worktrees").join(&run_id);
    assert_eq!(
        std::fs::read_to_string(worktree.join(".tnh/scripts/pol.rhai")).unwrap(),
        "fn check(change) { true }",
        "the agent rewrote the helper in its worktree"
    );
    // What the run pinned: the module as it loaded it, before any agent ran.
    let pinned = repo.run_dir(&run_id).join("scripts/pol.rhai");
    assert_eq!(std::fs::read_to_string(&pinned).unwrap(), POLICY_MODULE);
    let metadata = repo.json(&run_id, "metadata.json");
    assert_eq!(
        metadata["script_modules"][".tnh/scripts/pol.rhai"],
        tnh_conductor::artifacts::sha256_hex(POLICY_MODULE.as_bytes())
    );

    // A damaged pinned copy is refused, not replaced by the worktree's module.
    std::fs::write(&pinned, "fn check(change) { true }\n").unwrap();
    let events_before = repo.events(&run_id).len();
    let refused = repo.conductor_exits(&["resume", &run_id], 2);
    assert!(
        stderr_text(&refused).contains("pinned the repository module `.tnh/scripts/pol.rhai`"),
        "{}",
        stderr_text(&refused)
    );
    assert_eq!(repo.events(&run_id).len(), events_before);
    std::fs::write(&pinned, POLICY_MODULE).unwrap();

    let approved = repo.conductor(&["gate", "approve", &run_id, "--as", "me", "--resume"]);

    assert_eq!(
        approved.status.code(),
        Some(1),
        "{}",
        stderr_text(&approved)
    );
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    assert_eq!(violations_of(&events, "b"), 1, "{:?}", event_types(&events));
    let final_state =
        std::fs::read_to_string(repo.run_dir(&run_id).join("final-state.txt")).unwrap();
    assert!(final_state.starts_with("failed failure"), "{final_state}");
}

/// `a` rewrites the helper, the conductor is killed during `b`,
/// and `resume` used the rewritten helper for `c`'s forbidden write (no violation, exit 0).
#[test]
fn resume_after_a_kill_judges_later_steps_with_the_pinned_modules() {
    let text = r#"workflow_id: pinned
version: 1
description: an agent rewrites the policy helper; the conductor dies in b; c writes a secret
entry_step: a
script: |
  import ".tnh/scripts/pol" as pol;
  fn check(change) { pol::check(change) }
steps:
  - id: a
    opcode: RUN_AGENT
    agent: scripted
    prompt: "WRITE .tnh/scripts/pol.rhai: fn check(change) { true }"
    routes: {completed: b, "*": f}
  - id: b
    opcode: RUN_AGENT
    agent: scripted
    prompt: "WRITE b.txt: b"
    routes: {completed: c, "*": f}
  - id: c
    opcode: RUN_AGENT
    agent: scripted
    prompt: "WRITE secret/token.txt: leaked"
    policy: {check: check}
    routes: {completed: STOP, "*": f}
  - id: f
    opcode: STOP
    outcome: failure
"#;
    let (repo, _, run_id) = killed_after(repo_with_policy_module, text, "step_started", 1);
    let worktree = repo.path().join(".tnh/worktrees").join(&run_id);
    assert_eq!(
        std::fs::read_to_string(worktree.join(".tnh/scripts/pol.rhai")).unwrap(),
        "fn check(change) { true }"
    );

    let resumed = repo.conductor(&["resume", &run_id]);

    assert_eq!(resumed.status.code(), Some(1), "{}", stderr_text(&resumed));
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    assert_eq!(violations_of(&events, "c"), 1, "{:?}", event_types(&events));
}

/// A repository with a policy prompt of its own, `policy.guard.v1`, that forbids `secret/`.
fn repo_with_policy_prompt() -> RunRepo {
    let repo = RunRepo::new();
    repo.repo.write(
        ".tnh/prompts/policy/guard.v1.md",
        "---\nprompt_id: policy.guard\nversion: 1\nrole: policy\nstatus: current\nsummary: no secrets\nallowed_paths: [\"**\"]\nforbidden_paths: [\"secret/**\"]\noutputs: []\n---\nDo not touch secret/.\n",
    );
    repo
}

/// An agent rewrote the repository's policy prompt from its worktree
/// (`../../prompts/policy/guard.v1.md`) with no violation (runs exclude `.tnh/` from git, so
/// the checkout guard did not see it), and after `gate approve --resume` the rewritten policy
/// judged the next step with nothing recorded. Now the edit is a `path_escape` violation of
/// the step, and the decision records a `prompts_changed` event naming the file.
#[test]
fn an_agent_rewriting_the_repositorys_policy_prompt_is_caught_and_the_change_recorded() {
    let repo = repo_with_policy_prompt();
    let workflow = repo.workflow_text(
        "wf.yaml",
        r#"workflow_id: prompts
version: 1
description: an agent rewrites the repository's policy prompt
entry_step: a
defaults:
  policy: policy.guard.v1
steps:
  - id: a
    opcode: RUN_AGENT
    agent: scripted
    prompt: "WRITE ../../prompts/policy/guard.v1.md: ---\\nprompt_id: policy.guard\\nversion: 1\\nrole: policy\\nstatus: current\\nsummary: anything goes\\nallowed_paths: [\"**\"]\\nforbidden_paths: []\\noutputs: []\\n---\\nAnything.\\n"
    routes: {completed: g, "*": g}
  - id: g
    opcode: GATE
    gate: requires_approval
    routes: {gate_approved: STOP, gate_rejected: STOP}
"#,
    );
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(3), "{result}{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap().to_owned();
    assert!(
        std::fs::read_to_string(repo.path().join(".tnh/prompts/policy/guard.v1.md"))
            .unwrap()
            .contains("anything goes"),
        "the agent reached the repository's prompt"
    );
    let events = repo.events(&run_id);
    let escape = events
        .iter()
        .find(|event| event["event_type"] == "policy_violation" && event["step_id"] == "a")
        .unwrap_or_else(|| panic!("no violation of a: {:?}", event_types(&events)));
    assert_eq!(escape["violation"]["class"], "path_escape", "{escape}");
    assert_eq!(
        escape["violation"]["path"], ".tnh/prompts/policy/guard.v1.md",
        "{escape}"
    );

    let approved = repo.conductor(&["gate", "approve", &run_id, "--as", "me"]);

    assert_eq!(
        approved.status.code(),
        Some(1),
        "{}",
        stderr_text(&approved)
    );
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let changed: Vec<&serde_json::Value> = events
        .iter()
        .filter(|event| event["event_type"] == "prompts_changed")
        .collect();
    assert_eq!(changed.len(), 1, "{:?}", event_types(&events));
    assert_eq!(
        changed[0]["changed"],
        serde_json::json!([".tnh/prompts/policy/guard.v1.md"])
    );
    let digests = &repo.json(&run_id, "metadata.json")["prompts_sha256"];
    assert_eq!(
        digests[".tnh/prompts/policy/guard.v1.md"],
        tnh_conductor::artifacts::sha256_hex(
            &std::fs::read(repo.path().join(".tnh/prompts/policy/guard.v1.md")).unwrap()
        )
    );
}

/// A prompt edited (or added) between a crash and `resume`
/// changed the running workflow silently, since `metadata.json` pinned the workflow's and the
/// configuration's digests but not the prompts'. `resume` now records `prompts_changed`.
#[test]
fn resume_records_the_repository_prompts_that_changed_while_the_run_was_stopped() {
    let text = "workflow_id: prompts\nversion: 1\ndescription: d\nentry_step: a\ndefaults:\n  policy: policy.guard.v1\nsteps:\n  - id: a\n    opcode: RUN_AGENT\n    agent: scripted\n    prompt: \"WRITE a.txt: a\"\n    routes: {\"*\": STOP}\n";
    let (repo, _, run_id) = killed_after(repo_with_policy_prompt, text, "step_started", 0);
    let prompt = repo.path().join(".tnh/prompts/policy/guard.v1.md");
    let edited = std::fs::read_to_string(&prompt)
        .unwrap()
        .replace("[\"secret/**\"]", "[\"secret/**\", \"private/**\"]");
    std::fs::write(&prompt, edited).unwrap();
    repo.repo.write(
        ".tnh/prompts/task/extra.v1.md",
        "---\nprompt_id: task.extra\nversion: 1\nrole: task\nstatus: current\nsummary: s\noutputs: []\n---\nExtra.\n",
    );

    let resumed = repo.conductor(&["resume", &run_id]);

    assert_eq!(resumed.status.code(), Some(0), "{}", stderr_text(&resumed));
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let types = event_types(&events);
    let changed = events
        .iter()
        .find(|event| event["event_type"] == "prompts_changed")
        .unwrap_or_else(|| panic!("no prompts_changed: {types:?}"));
    assert_eq!(
        changed["changed"],
        serde_json::json!([
            ".tnh/prompts/policy/guard.v1.md",
            ".tnh/prompts/task/extra.v1.md"
        ])
    );
}

/// The workflow of the parameter and step tests: `a` (killed while it runs), then `b`.
const TWO_STEPS: &str = "workflow_id: edits\nversion: 1\ndescription: d\nentry_step: a\nparams:\n  n: {type: string, default: \"abc\"}\nsteps:\n  - id: a\n    opcode: RUN_AGENT\n    agent: scripted\n    prompt: \"WRITE a.txt: ${params.n}\"\n    routes: {\"*\": b}\n  - id: b\n    opcode: RUN_AGENT\n    agent: scripted\n    prompt: \"WRITE b.txt: ${params.n}\"\n    routes: {\"*\": STOP}\n";

/// `resume` passed the parameters recorded in `metadata.json` on as they were: a
/// parameter the edited workflow added had no value (the run re-ran an agent, then died with
/// exit 4 at `${params.newp}`). Its default is now filled in, and recorded.
#[test]
fn resume_fills_in_the_default_of_a_parameter_the_edited_workflow_added() {
    let (repo, workflow, run_id) = killed_after(RunRepo::new, TWO_STEPS, "step_started", 0);
    let edited = TWO_STEPS
        .replace(
            "  n: {type: string, default: \"abc\"}\n",
            "  n: {type: string, default: \"abc\"}\n  newp: {type: string, default: \"dflt\"}\n",
        )
        .replace("WRITE b.txt: ${params.n}", "WRITE b.txt: ${params.newp}");
    std::fs::write(&workflow, edited).unwrap();

    let resumed = repo.conductor(&["resume", &run_id]);

    assert_eq!(resumed.status.code(), Some(0), "{}", stderr_text(&resumed));
    let worktree = repo.path().join(".tnh/worktrees").join(&run_id);
    assert_eq!(
        std::fs::read_to_string(worktree.join("b.txt")).unwrap(),
        "dflt"
    );
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let changed = events
        .iter()
        .find(|event| event["event_type"] == "params_changed")
        .unwrap_or_else(|| panic!("no params_changed: {:?}", event_types(&events)));
    assert_eq!(changed["added"], serde_json::json!({"newp": "dflt"}));
    assert_eq!(
        repo.json(&run_id, "metadata.json")["params"],
        serde_json::json!({"n": "abc", "newp": "dflt"})
    );
}

/// A parameter retyped by the edited workflow (`n: string` → `int`, the run holds
/// `"abc"`) was passed on unchecked, and a new required parameter was not reported. `resume`
/// now refuses both (exit 2, nothing written, the parameter named), and the run continues once
/// the workflow fits it again.
#[test]
fn resume_refuses_parameters_the_edited_workflow_no_longer_fits_and_writes_nothing() {
    let (repo, workflow, run_id) = killed_after(RunRepo::new, TWO_STEPS, "step_started", 0);
    let events_before = repo.events(&run_id).len();
    let metadata_before = repo.json(&run_id, "metadata.json");
    for (edited, expected) in [
        (
            TWO_STEPS.replace(
                "n: {type: string, default: \"abc\"}",
                "n: {type: int, default: 1}",
            ),
            "the run's parameter `n` is a string (\"abc\"), but the edited workflow declares it as int",
        ),
        (
            TWO_STEPS.replace(
                "  n: {type: string, default: \"abc\"}\n",
                "  n: {type: string, default: \"abc\"}\n  ticket: {type: string, required: true}\n",
            ),
            "the edited workflow requires parameter `ticket` (string), which the run was not started with",
        ),
    ] {
        std::fs::write(&workflow, edited).unwrap();
        let refused = repo.conductor_exits(&["resume", &run_id], 2);
        assert!(
            stderr_text(&refused).contains(expected),
            "{}",
            stderr_text(&refused)
        );
        assert!(
            stderr_text(&refused).contains("hint: nothing was changed"),
            "{}",
            stderr_text(&refused)
        );
        assert_eq!(repo.events(&run_id).len(), events_before);
        assert_eq!(repo.json(&run_id, "metadata.json"), metadata_before);
    }

    std::fs::write(&workflow, TWO_STEPS).unwrap();
    repo.conductor_exits(&["resume", &run_id], 0);
}

/// With the step the crashed run was in renamed in the edited workflow, `resume`
/// ended the run for good with "step `a` routes to `a`, which is not a step". It now refuses
/// (exit 2, nothing written) saying the step is gone, and resumes once it is back.
#[test]
fn resume_refuses_when_the_edited_workflow_no_longer_has_the_step_the_run_stopped_in() {
    let (repo, workflow, run_id) = killed_after(RunRepo::new, TWO_STEPS, "step_started", 0);
    let events_before = repo.events(&run_id).len();
    std::fs::write(
        &workflow,
        TWO_STEPS
            .replace("entry_step: a", "entry_step: a_renamed")
            .replace("- id: a\n", "- id: a_renamed\n"),
    )
    .unwrap();

    let refused = repo.conductor(&["resume", &run_id]);

    assert_eq!(refused.status.code(), Some(2), "{}", stderr_text(&refused));
    let message = stderr_text(&refused);
    assert!(
        message.contains("stopped in step `a`, which the edited workflow")
            && message.contains("no longer has"),
        "{message}"
    );
    assert!(message.contains("restore step `a`"), "{message}");
    assert_eq!(repo.events(&run_id).len(), events_before);
    let status = repo.conductor(&["status", "--json", &run_id]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["lifecycle_state"], "blocked", "{status}");

    std::fs::write(&workflow, TWO_STEPS).unwrap();
    repo.conductor_exits(&["resume", &run_id], 0);
}

/// A workflow that waits at gate `g` before `b` uses its parameter.
const GATED: &str = "workflow_id: gated\nversion: 1\ndescription: d\nentry_step: g\nparams:\n  n: {type: string, default: \"abc\"}\nsteps:\n  - id: g\n    opcode: GATE\n    gate: requires_approval\n    routes: {gate_approved: b, gate_rejected: STOP}\n  - id: b\n    opcode: RUN_AGENT\n    agent: scripted\n    prompt: \"WRITE b.txt: ${params.n}\"\n    routes: {\"*\": STOP}\n";

/// A workflow edited while the gate waited (a new
/// required parameter, the gate step renamed) is refused by `gate approve --resume` with
/// nothing decided; a new parameter's default is filled in for the steps after the gate.
#[test]
fn a_gate_decision_checks_the_edited_workflow_against_the_run_before_deciding() {
    let repo = RunRepo::new();
    let workflow = repo.workflow_text("wf.yaml", GATED);
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(3), "{result}{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap().to_owned();
    let events_before = repo.events(&run_id).len();
    for (edited, expected) in [
        (
            GATED.replace(
                "  n: {type: string, default: \"abc\"}\n",
                "  n: {type: string, default: \"abc\"}\n  ticket: {type: string, required: true}\n",
            ),
            "requires parameter `ticket` (string)",
        ),
        (
            GATED
                .replace("entry_step: g", "entry_step: review")
                .replace("- id: g\n", "- id: review\n"),
            "waits at step `g`, which the edited workflow",
        ),
    ] {
        std::fs::write(&workflow, edited).unwrap();
        let refused =
            repo.conductor_exits(&["gate", "approve", &run_id, "--as", "me", "--resume"], 2);
        assert!(
            stderr_text(&refused).contains(expected),
            "{}",
            stderr_text(&refused)
        );
        assert_eq!(repo.events(&run_id).len(), events_before);
    }

    std::fs::write(
        &workflow,
        GATED
            .replace(
                "  n: {type: string, default: \"abc\"}\n",
                "  n: {type: string, default: \"abc\"}\n  newp: {type: string, default: \"dflt\"}\n",
            )
            .replace("WRITE b.txt: ${params.n}", "WRITE b.txt: ${params.newp}"),
    )
    .unwrap();
    repo.conductor_exits(&["gate", "approve", &run_id, "--as", "me", "--resume"], 0);
    let worktree = repo.path().join(".tnh/worktrees").join(&run_id);
    assert_eq!(
        std::fs::read_to_string(worktree.join("b.txt")).unwrap(),
        "dflt"
    );
    let events = repo.events(&run_id);
    assert_contiguous(&events);
    let types = event_types(&events);
    assert_eq!(
        types
            .iter()
            .filter(|kind| *kind == "params_changed")
            .count(),
        1,
        "{types:?}"
    );
}

/// A step whose agent could not start (its program missing) ran nothing, so it leaves no
/// guard state behind: while the run waits, the operator fixes the cause, commits on their
/// branch and edits their checkout, and `resume` runs the step again without calling any of
/// that drift (it would offer `--put-back`, moving their branch back) or recording it as
/// `path_escape` violations of an agent that never existed.
#[test]
fn resume_after_an_agent_that_could_not_start_takes_no_operator_change_for_the_agents() {
    let repo = RunRepo::new();
    let agent = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/agents/scripted.py");
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "agents:\n  broken:\n    kind: command\n    argv: [python3, \"{}\"]\n",
            agent.display()
        ),
    );
    repo.repo.commit_all("an agent profile");
    let workflow = repo.workflow_text(
        "broken.yaml",
        "workflow_id: broken\nversion: 1\ndescription: d\nentry_step: work\nsteps:\n  - id: work\n    opcode: RUN_AGENT\n    agent: broken\n    prompt: do it\n    routes:\n      \"*\": STOP\n",
    );
    // The profile breaks after the run started (`run` refuses a missing program up front).
    let (code, _, output) = repo.start_then_resume_with_config(
        &workflow,
        "agents:\n  broken:\n    kind: command\n    argv: [/nonexistent/agent.sh]\n",
    );
    assert_eq!(code, Some(4), "{}", stderr_text(&output));
    let run_id = repo.only_run_id();
    assert_eq!(
        repo.json(&run_id, "status.json")["lifecycle_state"],
        "blocked"
    );
    assert!(
        !repo
            .run_dir(&run_id)
            .join("artifacts/work/1/guard_state.json")
            .exists(),
        "a step that ran nothing keeps no guard state"
    );
    // The operator fixes the profile and commits it on their (protected) branch, and goes on
    // working in their checkout.
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "agents:\n  broken:\n    kind: command\n    argv: [python3, \"{}\"]\n",
            agent.display()
        ),
    );
    repo.repo.commit_all("fix the agent profile");
    repo.repo.write("notes.txt", "my notes\n");
    repo.repo.write("README.md", "edited by the operator\n");
    let resumed = repo.conductor_exits(&["resume", &run_id], 0);
    assert!(
        !stderr_text(&resumed).contains("--put-back"),
        "{}",
        stderr_text(&resumed)
    );
    assert_eq!(
        std::fs::read_to_string(repo.run_dir(&run_id).join("final-state.txt")).unwrap(),
        "completed success work\n"
    );
    let events = repo.events(&run_id);
    let types = event_types(&events);
    for absent in ["policy_violation", "repository_changes_kept"] {
        assert!(
            !types.iter().any(|found| found == absent),
            "{absent}: {types:?}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(repo.path().join("notes.txt")).unwrap(),
        "my notes\n"
    );
    assert!(
        repo.repo
            .git(&["log", "-1", "--format=%s"])
            .contains("fix the agent profile")
    );
}
