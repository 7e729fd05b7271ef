//! A RUN_AGENT step's `cwd` and `env`: the agent runs in the step's `cwd` inside
//! the worktree, with the step's `env` added to its filtered environment; a `cwd` outside the
//! worktree is refused, by `validate` when it is literal and when the step runs otherwise.

use crate::kernel_support::{RunRepo, first_event};
use crate::support::stderr_text;

/// A repository with a committed `src/` folder and a `where` agent that answers with its
/// working directory and the variables `MY_VAR`, `EMPTY` and `TNH_RUN_ID`.
fn repo() -> RunRepo {
    let repo = RunRepo::new();
    repo.repo.write("src/a.txt", "a\n");
    repo.repo.commit_all("a source folder");
    let agent = repo.repo.write(
        ".tnh/where.py",
        "import os, sys\nsys.stdin.read()\nprint('cwd=' + os.getcwd())\nfor name in ['MY_VAR', 'EMPTY', 'TNH_RUN_ID']:\n    print(name + '=' + repr(os.environ.get(name)))\n",
    );
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "{config}  where:\n    kind: command\n    argv: [python3, \"{}\"]\n",
            agent.display()
        ),
    );
    repo
}

fn workflow(fields: &str) -> String {
    format!(
        r#"workflow_id: place
version: 1
description: an agent's cwd and env
entry_step: work
steps:
  - id: work
    opcode: RUN_AGENT
    agent: where
    prompt: "where are you?"
{fields}    routes: {{"*": STOP}}
"#
    )
}

#[test]
fn the_agent_runs_in_its_steps_cwd_with_its_steps_env() {
    let repo = repo();
    let workflow = repo.workflow_text(
        "place.yaml",
        &workflow(
            "    cwd: src\n    env:\n      MY_VAR: \"hello ${run_id}\"\n      EMPTY: \"${{ () }}\"\n",
        ),
    );
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(0), "{result}\n{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let answer = std::fs::read_to_string(
        repo.run_dir(run_id)
            .join("artifacts/work/1/final_response.md"),
    )
    .unwrap();
    let worktree = repo.path().join(".tnh/worktrees").join(run_id);
    let real = worktree.canonicalize().unwrap();
    assert!(
        answer.contains(&format!("cwd={}/src\n", real.display()))
            || answer.contains(&format!("cwd={}/src\n", worktree.display())),
        "{answer}"
    );
    assert!(
        answer.contains(&format!("MY_VAR='hello {run_id}'")),
        "{answer}"
    );
    // A value of `()` leaves the variable unset; the kernel's variables stay.
    assert!(answer.contains("EMPTY=None"), "{answer}");
    assert!(
        answer.contains(&format!("TNH_RUN_ID='{run_id}'")),
        "{answer}"
    );
    let metadata = repo.json(run_id, "artifacts/work/1/runner_metadata.json");
    assert!(
        metadata["cwd"].as_str().unwrap().ends_with("/src"),
        "{metadata}"
    );
}

#[test]
fn validate_refuses_a_literal_agent_cwd_outside_the_worktree_and_the_kernels_variables() {
    let repo = repo();
    for (fields, needle) in [
        (
            "    cwd: /etc\n",
            "`cwd` `/etc` of step `work` is an absolute path",
        ),
        (
            "    cwd: src/../..\n",
            "`cwd` `src/../..` of step `work` climbs out of the worktree",
        ),
        (
            "    env: {TNH_RUN_ID: forged}\n",
            "`TNH_RUN_ID` in the `env` of step `work` is a name the conductor sets",
        ),
    ] {
        let workflow = repo.workflow_text("refused.yaml", &workflow(fields));
        let output = repo.conductor(&["validate", workflow.to_str().unwrap()]);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            stderr_text(&output)
        );
        assert_eq!(output.status.code(), Some(1), "{fields}: {text}");
        assert!(text.contains(needle), "{fields}: {text}");
    }
}

#[test]
fn a_computed_agent_cwd_outside_the_worktree_stops_the_step_before_the_agent_runs() {
    let repo = repo();
    std::os::unix::fs::symlink("/tmp", repo.path().join("out")).unwrap();
    repo.repo.commit_all("a link out of the repository");
    for (cwd, needle) in [
        ("\"${worktree}/..\"", "is an absolute path"),
        ("\"${{ `out` }}\"", "outside the worktree"),
        ("\"${{ `missing` }}\"", "is not a folder of the worktree"),
    ] {
        let workflow = repo.workflow_text("computed.yaml", &workflow(&format!("    cwd: {cwd}\n")));
        let (code, result, output) = repo.run(&workflow, &[]);
        assert_eq!(code, Some(4), "{cwd}: {result}\n{}", stderr_text(&output));
        let run_id = result["run_id"].as_str().unwrap();
        let events = repo.events(run_id);
        let failed = first_event(&events, "step_failed");
        let error = failed["error"].as_str().unwrap();
        assert!(error.contains("step `work`: `cwd`"), "{cwd}: {failed}");
        assert!(error.contains(needle), "{cwd}: {failed}");
        assert!(error.contains("computed.yaml:10:"), "{cwd}: {failed}");
        assert!(
            !events
                .iter()
                .any(|event| event["event_type"] == "runner_started"),
            "{cwd}: the agent never started"
        );
    }
}
