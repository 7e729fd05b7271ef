//! Which planner the shipped workflows ask: none names one, so a planner configured as
//! `default` in `.tnh/config.yaml` judges their EVALUATE steps (as README and `init` say),
//! and without one the built-in `rules` does.

use std::path::Path;

use crate::kernel_support::RunRepo;
use crate::support::stderr_text;

/// The shipped workflows with an EVALUATE step, their parameters, and their first EVALUATE.
const SHIPPED: [(&str, &[&str], &str); 5] = [
    (
        "implement_adr.yaml",
        &["-p", "adr_id=ADR-7"],
        "evaluate_plan",
    ),
    (
        "fix_bug.yaml",
        &["-p", "bug=crash on empty config"],
        "evaluate",
    ),
    ("review_code.yaml", &[], "evaluate"),
    (
        "update_docs.yaml",
        &["-p", "topic=the --base option"],
        "evaluate",
    ),
    ("generative_eval.yaml", &[], "evaluate"),
];

/// The starter-workflow setup with `planners` appended to the configuration.
fn starter_repo(planners: &str) -> RunRepo {
    crate::starter_workflows::starter_repo_with(planners)
}

fn first_decision(repo: &RunRepo, workflow: &str, args: &[&str], step: &str) -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("workflows")
        .join(workflow);
    let (_, result, output) = repo.run(&path, args);
    let run_id = result["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{workflow}: {result}\n{}", stderr_text(&output)));
    repo.json(run_id, &format!("artifacts/{step}/1/planner_decision.json"))
}

#[test]
fn the_shipped_workflows_ask_the_planner_configured_as_default() {
    for (workflow, args, step) in SHIPPED {
        let repo = starter_repo("");
        let judge = repo.repo.write(
            ".tnh/judge.sh",
            "#!/bin/sh\ncat > /dev/null\necho '{\"status\": \"blocked\", \"next_step\": null, \"risk_flags\": [], \"blockers\": [{\"code\": \"configured_default\", \"summary\": \"the configured default planner answered\"}]}'\n",
        );
        let config = repo.path().join(".tnh/config.yaml");
        let mut text = std::fs::read_to_string(&config).unwrap();
        text.push_str(&format!(
            "planners:\n  default: {{kind: command, argv: [sh, \"{}\"]}}\n",
            judge.display()
        ));
        std::fs::write(&config, text).unwrap();

        let decision = first_decision(&repo, workflow, args, step);

        assert_eq!(decision["planner"], "default", "{workflow}: {decision}");
        assert_eq!(decision["decided_by"], "default", "{workflow}: {decision}");
        assert_eq!(
            decision["blockers"][0]["code"], "configured_default",
            "{workflow}: {decision}"
        );
    }
}

#[test]
fn without_a_configured_default_the_shipped_workflows_ask_rules() {
    for (workflow, args, step) in SHIPPED {
        let repo = starter_repo("");
        let decision = first_decision(&repo, workflow, args, step);
        assert_eq!(decision["decided_by"], "rules", "{workflow}: {decision}");
    }
}
