//! `tnh-conductor run` end to end on real repositories with the scripted agent.

use crate::kernel_support::{RunRepo, assert_contiguous, event_types, first_event};
use crate::support::{git_in, stderr_text};

#[test]
fn a_linear_workflow_runs_to_a_success_stop_with_a_complete_run_directory() {
    let repo = RunRepo::new();
    let workflow = repo.workflow("linear.yaml");
    // `.tnh/` holds the configuration here; the run adds it to .git/info/exclude.
    let operator_status = repo
        .repo
        .git(&["status", "--porcelain"])
        .replace("?? .tnh/\n", "");
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(0), "{result}\n{}", stderr_text(&output));
    assert_eq!(result["state"], "completed");
    let run_id = result["run_id"].as_str().unwrap();
    let worktree = std::path::PathBuf::from(result["worktree"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(worktree.join("hello.txt")).unwrap(),
        format!("hello from {run_id}second line\n")
    );
    assert!(worktree.join("docs/nested/notes.md").is_file());
    // The operator's checkout is untouched.
    assert!(!repo.path().join("hello.txt").exists());
    assert_eq!(repo.repo.git(&["status", "--porcelain"]), operator_status);

    // metadata.json, field by field.
    let metadata = repo.json(run_id, "metadata.json");
    assert_eq!(metadata["run_id"], run_id);
    assert_eq!(metadata["workflow_id"], "linear");
    assert_eq!(metadata["workflow_version"], 1);
    assert_eq!(metadata["artifacts_root"], ".tnh/run/");
    assert_eq!(metadata["entry_step"], "write");
    assert_eq!(metadata["last_step_id"], "extend");
    assert_eq!(metadata["termination"]["kind"], "success");
    assert_eq!(metadata["branch"], format!("tnh/linear/{run_id}"));
    assert_eq!(metadata["base_ref"], "HEAD");
    assert_eq!(metadata["base_sha"], repo.repo.git(&["rev-parse", "HEAD"]));
    assert_eq!(metadata["worktree_path"], worktree.display().to_string());
    for key in [
        "started_at",
        "ended_at",
        "schema_versions",
        "repo_root",
        "params",
    ] {
        assert!(!metadata[key].is_null(), "metadata.{key} missing");
    }
    let status = repo.json(run_id, "status.json");
    assert_eq!(status["lifecycle_state"], "completed");
    assert_eq!(status["schema_version"], 1);
    let final_state =
        std::fs::read_to_string(repo.run_dir(run_id).join("final-state.txt")).unwrap();
    assert_eq!(final_state, "completed success extend\n");
    let state = repo.json(run_id, "state.json");
    assert_eq!(state["phase"]["phase"], "finished");

    // Events: contiguous, in the documented order.
    let events = repo.events(run_id);
    assert_contiguous(&events);
    let types = event_types(&events);
    assert_eq!(types.first().map(String::as_str), Some("run_started"));
    assert_eq!(types.last().map(String::as_str), Some("run_completed"));
    assert_eq!(
        types
            .iter()
            .filter(|kind| *kind == "step_completed")
            .count(),
        2
    );
    for event in &events {
        assert_eq!(event["run_id"], run_id);
        assert!(event["timestamp"].is_string());
    }

    // Manifests: per visit and latest, with canonical roles and paths that exist.
    for step in ["write", "extend"] {
        let manifest = repo.json(run_id, &format!("artifacts/{step}/1/manifest.json"));
        assert_eq!(
            manifest,
            repo.json(run_id, &format!("artifacts/{step}/manifest.json"))
        );
        assert_eq!(manifest["termination"], "completed");
        // Where the visit's time went: the agent and the git work, both within the visit.
        let timings = &manifest["timings_ms"];
        let (agent, workspace) = (
            timings["agent"].as_f64().unwrap(),
            timings["workspace"].as_f64().unwrap(),
        );
        let instant = |key: &str| {
            manifest[key]
                .as_str()
                .unwrap()
                .parse::<jiff::Timestamp>()
                .unwrap()
        };
        let visit_ms = (instant("ended_at") - instant("started_at"))
            .total(jiff::Unit::Millisecond)
            .unwrap();
        assert!(agent > 0.0 && workspace > 0.0, "{timings}");
        assert!(agent + workspace <= visit_ms, "{timings} in {visit_ms} ms");
        let roles: Vec<&str> = manifest["artifacts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|entry| entry["role"].as_str().unwrap())
            .collect();
        for role in [
            "runner_prompt",
            "runner_transcript",
            "runner_metadata",
            "workspace_diff",
            "workspace_status",
            "policy_summary",
        ] {
            assert!(roles.contains(&role), "{step} lacks {role}: {roles:?}");
        }
        for entry in manifest["artifacts"].as_array().unwrap() {
            assert!(
                repo.run_dir(run_id)
                    .join(entry["path"].as_str().unwrap())
                    .is_file(),
                "{entry}"
            );
        }
    }
    let status = repo.json(run_id, "artifacts/extend/1/workspace_status.json");
    let paths: Vec<&str> = status["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|file| file["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["docs/nested/notes.md", "hello.txt"]);
    let prompt =
        std::fs::read_to_string(repo.run_dir(run_id).join("artifacts/write/1/prompt.md")).unwrap();
    assert!(
        prompt.contains(&format!("hello from {run_id}")),
        "${{run_id}} is substituted: {prompt}"
    );
    let _ = git_in;
}

#[test]
fn invalid_params_exit_2_and_create_nothing() {
    let repo = RunRepo::new();
    let workflow = repo.workflow_text(
        "params.yaml",
        "workflow_id: needs_params\nversion: 1\ndescription: d\nentry_step: a\nparams:\n  count: {type: int, required: true}\nsteps:\n  - id: a\n    opcode: STOP\n",
    );
    for args in [&[][..], &["-p", "count=many"][..], &["-p", "cuont=3"][..]] {
        let (code, _, output) = repo.run(&workflow, args);
        assert_eq!(code, Some(2), "{args:?}: {}", stderr_text(&output));
        assert!(
            stderr_text(&output).contains("hint:"),
            "{}",
            stderr_text(&output)
        );
    }
    assert!(
        !repo.path().join(".tnh/run").exists(),
        "a run directory was created"
    );
    assert!(
        !repo.path().join(".tnh/worktrees").exists(),
        "a worktree was created"
    );
    assert_eq!(repo.repo.git(&["branch", "--list", "tnh/*"]), "");
}

#[test]
fn an_invalid_workflow_exits_2_with_its_diagnostics() {
    let repo = RunRepo::new();
    let workflow = repo.workflow_text("bad.yaml", "workflow_id: bad\nversion: 1\ndescription: d\nentry_step: nowhere\nsteps:\n  - id: a\n    opcode: STOP\n");
    let (code, _, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(2));
    assert!(
        stderr_text(&output).contains("bad.yaml:4:13: error: entry_step `nowhere` is not a step"),
        "{}",
        stderr_text(&output)
    );
}

#[test]
fn a_fix_loop_reaches_success_after_an_evaluation_asks_for_a_fix() {
    let repo = RunRepo::new();
    let (code, result, output) = repo.run(&repo.workflow("fix_loop.yaml"), &[]);
    assert_eq!(code, Some(0), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let decision = repo.json(run_id, "artifacts/evaluate/1/planner_decision.json");
    assert_eq!(decision["status"], "partial");
    assert_eq!(decision["next_step"], "implement");
    assert!(decision["fix_instructions"]["objective"].is_string());
    assert_eq!(
        repo.json(run_id, "artifacts/evaluate/2/planner_decision.json")["status"],
        "success"
    );
    let worktree = std::path::PathBuf::from(result["worktree"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(worktree.join("feature.txt")).unwrap(),
        "working"
    );
    let completed: Vec<String> = repo
        .events(run_id)
        .iter()
        .filter(|event| event["event_type"] == "step_completed")
        .map(|event| {
            format!(
                "{}#{}:{}",
                event["step_id"].as_str().unwrap(),
                event["visit"],
                event["outcome"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        completed,
        [
            "implement#1:error",
            "evaluate#1:partial",
            "implement#2:completed",
            "evaluate#2:success"
        ]
    );
}

#[test]
fn a_fix_loop_that_never_converges_ends_at_max_visits_with_exit_4() {
    let repo = RunRepo::new();
    let text = std::fs::read_to_string(crate::support::fixture("runs/fix_loop.yaml"))
        .unwrap()
        .replace(
            "AFTER_FIRST WRITE feature.txt: working",
            "FAIL still broken",
        )
        // Two visits: the limit ends the loop before the guard's third-partial rule can.
        .replace("max_visits: 3", "max_visits: 2");
    let (code, result, output) = repo.run(&repo.workflow_text("never.yaml", &text), &[]);
    assert_eq!(code, Some(4), "{result}\n{}", stderr_text(&output));
    assert_eq!(result["state"], "error");
    assert!(
        result["detail"]
            .as_str()
            .unwrap()
            .contains("step `implement` reached its limit of 2 visits"),
        "{result}"
    );
    let run_id = result["run_id"].as_str().unwrap();
    assert_eq!(
        repo.json(run_id, "status.json")["lifecycle_state"],
        "failed"
    );
    assert!(
        repo.json(run_id, "metadata.json")["termination"]["reason"]
            .as_str()
            .unwrap()
            .contains("limit of 2 visits")
    );
    let events = repo.events(run_id);
    assert_contiguous(&events);
    assert_eq!(
        event_types(&events).last().map(String::as_str),
        Some("run_failed")
    );
}

/// With room for three visits, the guard ends the loop first: a third `partial` evaluation in
/// a row is raised to `needs_human` (`repeated_partial_loop`), seen through the run's
/// evaluation history although each window holds only one earlier evaluation.
#[test]
fn a_fix_loop_that_keeps_failing_is_stopped_by_the_guard_at_the_third_partial() {
    let repo = RunRepo::new();
    let text = std::fs::read_to_string(crate::support::fixture("runs/fix_loop.yaml"))
        .unwrap()
        .replace(
            "AFTER_FIRST WRITE feature.txt: working",
            "FAIL still broken",
        );
    let (code, result, output) = repo.run(&repo.workflow_text("never.yaml", &text), &[]);
    assert_eq!(code, Some(1), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    for visit in [1, 2] {
        let decision = repo.json(
            run_id,
            &format!("artifacts/evaluate/{visit}/planner_decision.json"),
        );
        assert_eq!(decision["status"], "partial", "visit {visit}: {decision}");
    }
    let third = repo.json(run_id, "artifacts/evaluate/3/planner_decision.json");
    assert_eq!(third["status"], "needs_human", "{third}");
    assert!(
        third["risk_flags"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("repeated_partial_loop")),
        "{third}"
    );
    let input = repo.json(run_id, "artifacts/evaluate/3/planner_input.json");
    assert_eq!(input["evaluation_history"].as_array().unwrap().len(), 2);
}

#[test]
fn an_unsafe_change_is_rolled_back_to_the_base_and_stops() {
    let repo = RunRepo::new();
    let (code, result, output) = repo.run(&repo.workflow("unsafe.yaml"), &[]);
    assert_eq!(code, Some(1), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let events = repo.events(run_id);
    let violation = first_event(&events, "policy_violation");
    assert_eq!(
        violation["violation"]["class"], "forbidden_path",
        "{violation}"
    );
    let summary = repo.json(run_id, "artifacts/implement/1/policy_summary.json");
    assert_eq!(summary["verdict"], "violation");
    assert_eq!(
        repo.json(run_id, "artifacts/evaluate/1/planner_decision.json")["status"],
        "unsafe"
    );
    assert!(
        events
            .iter()
            .any(|event| event["event_type"] == "rollback_completed")
    );
    // The worktree is exactly the base again: no new files, README restored.
    let worktree = std::path::PathBuf::from(result["worktree"].as_str().unwrap());
    assert_eq!(
        crate::support::git_in(
            &worktree,
            &["status", "--porcelain", "--untracked-files=all"]
        ),
        ""
    );
    assert_eq!(
        crate::support::git_in(&worktree, &["rev-parse", "HEAD"]),
        repo.repo.git(&["rev-parse", "HEAD"])
    );
    assert_eq!(
        std::fs::read_to_string(repo.run_dir(run_id).join("final-state.txt")).unwrap(),
        "failed failure rolled_back\n"
    );
    // `runs show` says what each visit did and why the run went where it went.
    let show = crate::support::stdout_text(&repo.conductor(&["runs", "show", run_id]));
    for line in [
        "  implement #1: completed",
        "      exit code 0; 3 file(s) +3 −0; 1 policy violation(s)",
        "      policy violation — forbidden path `.github/workflows/ci.yml`",
        "      unsafe by the `rules` planner, next `undo`",
        "      to pre_run: undid 3 file(s) +3 −0",
        "      failure: the change broke the policy and was rolled back",
    ] {
        assert!(show.contains(line), "`{line}` missing from:\n{show}");
    }
}

#[test]
fn a_script_policy_check_flags_files_and_its_prints_become_events() {
    let repo = RunRepo::new();
    let (code, result, output) = repo.run(&repo.workflow("policy_check.yaml"), &[]);
    // ROLLBACK completed → bare STOP through `completed` is a success stop.
    assert_eq!(code, Some(0), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let events = repo.events(run_id);
    let violations: Vec<&serde_json::Value> = events
        .iter()
        .filter(|event| event["event_type"] == "policy_violation")
        .collect();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert_eq!(violations[0]["violation"]["path"], "config/token.secret");
    assert!(
        violations[0]["violation"]
            .to_string()
            .contains("secret files must not be committed"),
        "{}",
        violations[0]
    );
    let printed: Vec<&str> = events
        .iter()
        .filter(|event| event["event_type"] == "script_output")
        .map(|event| event["text"].as_str().unwrap_or_default())
        .collect();
    assert!(
        printed.contains(&"checking config/token.secret")
            && printed.contains(&"checking src/ok.txt"),
        "{printed:?}"
    );
    assert_eq!(
        repo.json(run_id, "artifacts/implement/1/policy_summary.json")["effective"]["check_hook"],
        true
    );
    assert_eq!(
        repo.json(run_id, "artifacts/evaluate/1/planner_decision.json")["status"],
        "unsafe"
    );
}

#[test]
fn a_summarize_function_shapes_the_evidence_the_planner_reads() {
    let repo = RunRepo::new();
    let text = std::fs::read_to_string(crate::support::fixture("runs/fix_loop.yaml"))
        .unwrap()
        .replace("entry_step: implement\n", "entry_step: implement\nscript: |\n  fn summarize(evidence) {\n      #{ short: \"summary for the planner\", outcome: evidence.validation.mechanical_outcome }\n  }\n")
        .replace("    prompt: planner.evaluate_step.v1\n", "    prompt: planner.evaluate_step.v1\n    inputs:\n      focus: \"${{ [\\\"feature.txt\\\"] + [ctx.step.id] }}\"\n");
    let (code, result, output) = repo.run(&repo.workflow_text("summarized.yaml", &text), &[]);
    assert_eq!(code, Some(0), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let input = repo.json(run_id, "artifacts/evaluate/1/planner_input.json");
    assert_eq!(
        input["evidence"]["summary"]["short"],
        "summary for the planner"
    );
    assert_eq!(input["evidence"]["summary"]["outcome"], "error");
    // Computed inputs of the EVALUATE step keep their types.
    assert_eq!(
        input["inputs"]["focus"],
        serde_json::json!(["feature.txt", "evaluate"])
    );
    // The raw evidence is still there, and the status is derived from it.
    assert_eq!(
        input["evidence"]["validation"]["mechanical_outcome"],
        "error"
    );
    assert_eq!(
        repo.json(run_id, "artifacts/evaluate/1/planner_decision.json")["status"],
        "partial"
    );
}

#[test]
fn progress_lines_status_and_events_are_shown_to_the_operator() {
    let repo = RunRepo::new();
    let workflow = repo.workflow("linear.yaml");
    let output = repo.conductor_exits(&["run", workflow.to_str().unwrap()], 0);
    let stderr = stderr_text(&output);
    for line in [
        "▶ write #1 (RUN_AGENT)",
        "  write #1: completed",
        "▶ extend #1 (RUN_AGENT)",
        "  extend #1: completed",
    ] {
        assert!(stderr.contains(line), "`{line}` missing from:\n{stderr}");
    }
    let stdout = crate::support::stdout_text(&output);
    let run_id = stdout
        .split_whitespace()
        .nth(1)
        .unwrap()
        .trim_end_matches(':');
    let quiet = repo.conductor(&["-q", "run", workflow.to_str().unwrap()]);
    assert!(
        !stderr_text(&quiet).contains('▶'),
        "{}",
        stderr_text(&quiet)
    );

    // On a finished run, --follow and --watch print what there is and return.
    let events = repo.conductor(&["runs", "events", "--follow", run_id]);
    assert_eq!(events.status.code(), Some(0));
    assert_eq!(
        crate::support::stdout_text(&events).lines().count(),
        repo.events(run_id).len()
    );
    let watch = repo.conductor(&["status", "--watch", run_id]);
    assert!(
        crate::support::stdout_text(&watch).contains("state: completed"),
        "{}",
        crate::support::stdout_text(&watch)
    );
    let show = repo.conductor(&["runs", "show", run_id]);
    assert!(
        crate::support::stdout_text(&show).contains("write #1: completed"),
        "{}",
        crate::support::stdout_text(&show)
    );
    let list = repo.conductor(&["runs", "list", "--json"]);
    let runs: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(runs["runs"].as_array().unwrap().len(), 2, "{runs}");
}

/// A runaway expression stops the run where it is, resumable once the workflow is fixed.
#[test]
fn a_runaway_script_stops_the_run_with_its_yaml_position_recorded() {
    let repo = RunRepo::new();
    let workflow = repo.workflow_text(
        "spin.yaml",
        "workflow_id: spin\nversion: 1\ndescription: d\nentry_step: work\nscript: |\n  fn spin() {\n      let n = 0;\n      loop { n += 1; }\n  }\nsteps:\n  - id: work\n    opcode: RUN_AGENT\n    agent: scripted\n    prompt: task.review_diff.v1\n    inputs:\n      diff: \"${{ spin() }}\"\n    routes:\n      \"*\": STOP\n",
    );
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(4), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let failed = first_event(&repo.events(run_id), "step_failed").clone();
    let error = failed["error"].as_str().unwrap();
    assert!(
        error.contains("spin.yaml:16"),
        "the error names the YAML line of the expression: {error}"
    );
    assert_eq!(failed["resumable"], true, "{failed}");
    assert_eq!(
        repo.json(run_id, "status.json")["lifecycle_state"],
        "blocked"
    );
    assert!(
        repo.json(run_id, "status.json")["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("could not run"),
        "{}",
        repo.json(run_id, "status.json")
    );
}

/// A route that asks no planner cannot turn a change outside the policy into a success: the
/// success STOP ends the run as a failure that names the violation.
#[test]
fn a_policy_violation_never_rolled_back_cannot_end_in_success() {
    let repo = RunRepo::new();
    let workflow = repo.workflow_text(
        "straight.yaml",
        r#"workflow_id: straight
version: 1
description: an agent breaks the policy and the route goes straight to STOP
entry_step: work
steps:
  - id: work
    opcode: RUN_AGENT
    agent: scripted
    prompt: |
      WRITE src/ok.txt: fine
      WRITE .github/workflows/ci.yml: on: push
    policy:
      allowed_paths: ["src/**"]
    routes:
      "*": STOP
"#,
    );

    let (code, result, output) = repo.run(&workflow, &[]);

    assert_eq!(code, Some(1), "{result}\n{}", stderr_text(&output));
    let detail = result["detail"].as_str().unwrap();
    assert!(
        detail.contains("policy violation of work:")
            && detail.contains(".github/workflows/ci.yml")
            && detail.contains("never rolled back"),
        "{detail}"
    );
    let run_id = result["run_id"].as_str().unwrap();
    let final_state =
        std::fs::read_to_string(repo.run_dir(run_id).join("final-state.txt")).unwrap();
    assert!(final_state.starts_with("failed failure"), "{final_state}");
}

/// A typo in an agent profile no step uses stops `run` before anything is created, with the
/// profile's position, instead of failing the run's first agent step.
#[test]
fn a_broken_agent_profile_stops_run_before_anything_starts() {
    let repo = RunRepo::new();
    let config = repo.path().join(".tnh/config.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("{text}  spare:\n    kind: codex\n    timout: 5m\n"),
    )
    .unwrap();

    let (code, _, output) = repo.run(&repo.workflow("linear.yaml"), &[]);

    assert_eq!(code, Some(2), "{}", stderr_text(&output));
    let stderr = stderr_text(&output);
    assert!(
        stderr.contains(".tnh/config.yaml:")
            && stderr.contains("agent profile `spare` is invalid: unknown key `timout`"),
        "{stderr}"
    );
    assert!(!repo.path().join(".tnh/run").exists());
    assert!(!repo.path().join(".tnh/worktrees").exists());
}

/// The run directory is written before the worktree, so a start that git refuses (a base that
/// does not resolve) removes it again: exit 2, no run left behind.
#[test]
fn a_base_that_does_not_resolve_exits_2_and_leaves_no_run() {
    let repo = RunRepo::new();
    let (code, _, output) = repo.run(&repo.workflow("linear.yaml"), &["--base", "no-such-ref"]);
    assert_eq!(code, Some(2), "{}", stderr_text(&output));
    assert!(
        stderr_text(&output).contains("no-such-ref"),
        "{}",
        stderr_text(&output)
    );
    let runs: Vec<_> = std::fs::read_dir(repo.path().join(".tnh/run"))
        .map(|entries| entries.flatten().map(|entry| entry.file_name()).collect())
        .unwrap_or_default();
    assert!(runs.is_empty(), "{runs:?}");
    assert!(!repo.path().join(".tnh/worktrees").exists());
    assert_eq!(repo.repo.git(&["branch", "--list", "tnh/*"]), "");
    repo.conductor_exits(&["runs", "list"], 0);
}

/// A `pre_step` rollback undoes only the most recent agent step: when a clean step ran after
/// the one that broke the policy, the violation stands (and the run cannot succeed); a
/// `pre_run` rollback undoes it.
#[test]
fn a_pre_step_rollback_that_does_not_reach_the_violation_does_not_clear_it() {
    for (target, expected) in [("pre_step", Some(1)), ("pre_run", Some(0))] {
        let repo = RunRepo::new();
        let workflow = repo.workflow_text(
            "two_steps.yaml",
            &format!(
                r#"workflow_id: two_steps
version: 1
description: a violation, a clean step after it, then a rollback
entry_step: implement
defaults:
  policy:
    forbidden_paths: [".github/**"]
steps:
  - id: implement
    opcode: RUN_AGENT
    agent: scripted
    prompt: |
      WRITE .github/workflows/ci.yml: on: push
    routes:
      "*": polish
  - id: polish
    opcode: RUN_AGENT
    agent: scripted
    prompt: |
      WRITE src/polish.txt: polished
    routes:
      "*": undo
  - id: undo
    opcode: ROLLBACK
    target: {target}
    routes:
      completed: STOP
      error: STOP
"#
            ),
        );

        let (code, result, output) = repo.run(&workflow, &[]);

        assert_eq!(
            code,
            expected,
            "{target}: {result}\n{}",
            stderr_text(&output)
        );
        let worktree = std::path::PathBuf::from(result["worktree"].as_str().unwrap());
        let forbidden = worktree.join(".github/workflows/ci.yml").exists();
        assert_eq!(forbidden, target == "pre_step", "{target}");
        if target == "pre_step" {
            assert!(
                result["detail"]
                    .as_str()
                    .unwrap()
                    .contains("never rolled back"),
                "{result}"
            );
        }
    }
}

/// Inputs computed by one expression are checked at run time as written ones are by
/// `validate`: a name the prompt does not declare stops the step, naming it and where it was
/// computed, instead of vanishing.
#[test]
fn a_computed_input_the_prompt_does_not_declare_is_an_error_not_dropped() {
    let repo = RunRepo::new();
    let workflow = repo.workflow_text(
        "computed.yaml",
        r#"workflow_id: computed
version: 1
description: inputs computed by an expression, one of them misspelt
entry_step: plan
steps:
  - id: plan
    opcode: RUN_AGENT
    agent: scripted
    prompt: task.plan_adr.v1
    inputs: "${{ #{adr_id: \"ADR-1\", adr_idd: \"typo\"} }}"
    routes:
      "*": STOP
"#,
    );
    repo.conductor_exits(&["validate", workflow.to_str().unwrap()], 0);

    let (code, result, output) = repo.run(&workflow, &[]);

    assert_eq!(code, Some(4), "{result}\n{}", stderr_text(&output));
    let detail = result["detail"].as_str().unwrap_or_default().to_owned();
    let stderr = stderr_text(&output);
    assert!(
        format!("{detail}{stderr}").contains("the computed inputs name `adr_idd` that prompt `task.plan_adr.v1` does not declare (it declares: adr_id)"),
        "{result}\n{stderr}"
    );
}

/// An agent whose program is missing cannot run: `run` refuses it before anything starts;
/// when the program goes missing after the run started, the step stops the run with exit 4,
/// and what to do about it is printed with the step that could not run, not only recorded.
#[test]
fn an_agent_that_cannot_start_says_what_to_do() {
    let repo = RunRepo::new();
    let broken = "agents:\n  broken:\n    kind: command\n    argv: [/nonexistent/agent.sh]\n";
    repo.repo.write(".tnh/config.yaml", broken);
    let workflow = repo.workflow_text(
        "broken.yaml",
        // One visit allowed: the visit that could not start does not use it up.
        "workflow_id: broken\nversion: 1\ndescription: d\nentry_step: work\ndefaults:\n  limits: {max_visits: 1}\nsteps:\n  - id: work\n    opcode: RUN_AGENT\n    agent: broken\n    prompt: do it\n    routes:\n      \"*\": STOP\n",
    );
    let refused = repo.conductor_exits(&["run", workflow.to_str().unwrap()], 2);
    assert!(
        stderr_text(&refused).contains(
            "step `work`: agent `broken` runs `/nonexistent/agent.sh`, which is not found (no executable file at that path)"
        ),
        "{}",
        stderr_text(&refused)
    );
    assert!(
        !repo.path().join(".tnh/run").exists(),
        "nothing was started"
    );
    let scripted =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/agents/scripted.py");
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "agents:\n  broken:\n    kind: command\n    argv: [python3, \"{}\"]\n",
            scripted.display()
        ),
    );
    let (code, _, output) = repo.start_then_resume_with(&workflow, broken, &[]);
    assert_eq!(code, Some(4), "{}", stderr_text(&output));
    let stderr = stderr_text(&output);
    assert!(
        stderr.contains(
            "could not run — failed to spawn agent `broken`: `/nonexistent/agent.sh` does not exist"
        ) && stderr.contains("hint: install `/nonexistent/agent.sh` or point the profile"),
        "{stderr}"
    );
    // Nothing of the step ran: the run stops resumable, and once the profile is fixed resume
    // runs the step again.
    let run_id = repo.only_run_id();
    assert_eq!(
        repo.json(&run_id, "status.json")["lifecycle_state"],
        "blocked"
    );
    assert_eq!(
        std::fs::read_to_string(repo.run_dir(&run_id).join("final-state.txt")).unwrap(),
        "blocked stopped work\n"
    );
    let agent =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/agents/scripted.py");
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "agents:\n  broken:\n    kind: command\n    argv: [python3, \"{}\"]\n",
            agent.display()
        ),
    );
    repo.conductor_exits(&["resume", &run_id], 0);
    assert_eq!(
        std::fs::read_to_string(repo.run_dir(&run_id).join("final-state.txt")).unwrap(),
        "completed success work\n"
    );
}

/// A workflow script that fails as it loads (a top-level `throw`, or a repository module that
/// throws at its top level) ends the run with that reason recorded and the run named, instead
/// of leaving it marked running with nothing said; resume then says the run is over. (A
/// repository module that is missing is refused before the run starts:
/// `script_runs::a_missing_or_broken_repository_module_is_refused_before_anything_starts`.)
#[test]
fn a_script_that_fails_to_load_ends_the_run_with_its_reason() {
    for (name, script) in [
        ("throws", "  throw \"at load\";\n"),
        ("module throws", "  import \".tnh/scripts/throws\" as m;\n"),
    ] {
        let repo = RunRepo::new();
        repo.repo
            .write(".tnh/scripts/throws.rhai", "throw \"module at load\";\n");
        let workflow = repo.workflow_text(
            "load.yaml",
            &format!("workflow_id: load\nversion: 1\ndescription: d\nentry_step: g\nscript: |\n{script}steps:\n  - id: g\n    opcode: GATE\n    gate: queue_for_review\n    routes: {{gate_queued: STOP}}\n"),
        );
        let (code, result, output) = repo.run(&workflow, &[]);
        assert_eq!(code, Some(4), "{name}: {result}\n{}", stderr_text(&output));
        let run_id = result["run_id"].as_str().unwrap();
        let detail = result["detail"].as_str().unwrap();
        assert!(
            detail.starts_with("the workflow could not be loaded"),
            "{name}: {detail}"
        );
        let events = repo.events(run_id);
        let failed = first_event(&events, "run_failed");
        assert!(
            failed["reason"]
                .as_str()
                .unwrap()
                .contains("could not be loaded"),
            "{name}: {failed}"
        );
        assert_eq!(
            repo.json(run_id, "status.json")["lifecycle_state"],
            "failed",
            "{name}"
        );
        let resumed = repo.conductor(&["resume", run_id]);
        assert_eq!(
            resumed.status.code(),
            Some(2),
            "{name}: {}",
            stderr_text(&resumed)
        );
    }
}

/// The run budget (`defaults.limits.max_budget_usd`) through the kernel: what each step costs
/// is added up across steps; a step whose reported cost exceeds what is left ends
/// `killed_policy`, and once the budget is spent the next agent is not started at all.
#[test]
fn the_run_budget_is_spent_across_steps_and_then_starts_no_agent() {
    let repo = RunRepo::new();
    // Agents see only the variables their profile passes.
    let config = repo.path().join(".tnh/config.yaml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(
        "  claude-code:\n    kind: claude\n    pass_env: [TNH_FAKE_SCENARIO, TNH_FAKE_RECORD]\n",
    );
    std::fs::write(&config, text).unwrap();
    // One replayed Claude session costs $0.000148: the first fits in $0.0002, the second
    // overspends what is left, the third finds nothing left.
    let workflow = repo.workflow_text(
        "budget.yaml",
        "workflow_id: budget\nversion: 1\ndescription: d\nentry_step: a\ndefaults:\n  limits: {max_budget_usd: 0.0002}\nsteps:\n  - id: a\n    opcode: RUN_AGENT\n    agent: claude-code\n    prompt: First.\n    routes: {completed: b, \"*\": failed}\n  - id: b\n    opcode: RUN_AGENT\n    agent: claude-code\n    prompt: Second.\n    routes: {killed_policy: c, \"*\": failed}\n  - id: c\n    opcode: RUN_AGENT\n    agent: claude-code\n    prompt: Third.\n    routes: {killed_policy: spent, \"*\": failed}\n  - id: spent\n    opcode: STOP\n    outcome: failure\n    reason: the budget is spent\n  - id: failed\n    opcode: STOP\n    outcome: failure\n    reason: unexpected outcome\n",
    );
    let record = repo.path().join(".tnh/received.ndjson");
    let fake = crate::support::fixture("agents/bin/claude");
    let output = crate::support::conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["run", "--json"])
        .arg(&workflow)
        .env("TNH_CLAUDE_BIN", &fake)
        .env("TNH_FAKE_SCENARIO", "claude-stream-success-tool-use")
        .env("TNH_FAKE_RECORD", &record)
        .output()
        .unwrap();
    let result: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("{}", stderr_text(&output)));
    assert_eq!(output.status.code(), Some(1), "{result}");
    let run_id = result["run_id"].as_str().unwrap();
    let steps: Vec<String> = repo
        .events(run_id)
        .iter()
        .filter(|event| event["event_type"] == "step_completed")
        .map(|event| {
            format!(
                "{}:{}",
                event["step_id"].as_str().unwrap(),
                event["outcome"]
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            "a:\"completed\"",
            "b:\"killed_policy\"",
            "c:\"killed_policy\"",
            "spent:\"completed\""
        ],
        "{result}"
    );
    // Claude was started twice, never for the third step.
    let calls = std::fs::read_to_string(&record).unwrap().lines().count();
    assert_eq!(calls, 2);
    let metadata =
        |step: &str| repo.json(run_id, &format!("artifacts/{step}/1/runner_metadata.json"));
    assert_eq!(metadata("a")["outcome"], "completed");
    let overspent = metadata("b");
    assert!(
        overspent["cause"]
            .as_str()
            .unwrap()
            .starts_with("budget_exhausted: reported cost $0.000148"),
        "{overspent}"
    );
    let refused = metadata("c");
    assert!(
        refused["cause"]
            .as_str()
            .unwrap()
            .starts_with("budget_exhausted: the run budget is spent"),
        "{refused}"
    );
    let spent = repo.json(run_id, "state.json")["spent_usd"]
        .as_f64()
        .unwrap();
    assert!((spent - 0.000296).abs() < 1e-9, "{spent}");
}
