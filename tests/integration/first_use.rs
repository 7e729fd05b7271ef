//! The first-use path: `tnh-conductor demo` runs the builder loop offline on a throwaway
//! repository and says where to look; `tnh-conductor init` writes a commented configuration.

use crate::support::{TempRepo, conductor, git_in, stderr_text, stdout_text, tnh};

#[test]
fn the_demo_runs_the_builder_loop_through_a_fix_a_queued_review_and_an_approved_gate() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("demo");
    let output = conductor()
        .args(["demo", "--dir"])
        .arg(&root)
        .output()
        .unwrap();
    let stdout = stdout_text(&output);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}{}",
        stderr_text(&output)
    );
    let run_id = stdout
        .lines()
        .find_map(|line| line.strip_prefix("run "))
        .and_then(|rest| rest.split(':').next())
        .expect("the run is named")
        .to_owned();
    assert!(
        stdout.contains(&format!(
            "run {run_id}: completed — reached STOP step `done`"
        )),
        "{stdout}"
    );
    for hint in ["run directory", "runs show", "diff main", "journal"] {
        assert!(stdout.contains(hint), "`{hint}` missing: {stdout}");
    }
    // The fix loop happened: validation failed, the planner asked for a fix, then success.
    let run_dir = root.join(".tnh/run").join(&run_id);
    let read = |relative: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(run_dir.join(relative)).unwrap()).unwrap()
    };
    assert_eq!(
        read("artifacts/validate/1/manifest.json")["termination"],
        "error"
    );
    assert_eq!(
        read("artifacts/evaluate_results/1/planner_decision.json")["status"],
        "partial"
    );
    assert_eq!(
        read("artifacts/validate/2/manifest.json")["termination"],
        "completed"
    );
    assert_eq!(
        read("artifacts/evaluate_results/2/planner_decision.json")["status"],
        "success"
    );
    assert_eq!(
        read("artifacts/final_review/1/gate_outcome.json")["reviewer"],
        "lead"
    );
    // The implementer was given the plan the `plan` step answered (and the planner judged).
    let implemented =
        std::fs::read_to_string(run_dir.join("artifacts/implement/1/final_response.md")).unwrap();
    assert!(
        implemented.contains("Followed the approved plan: Plan for ADR-1: add a `mul` branch"),
        "{implemented}"
    );
    // ADR-1 is a real ADR: the plan prompt's `tnh adr open ADR-1` finds it, in the repository
    // and in the run's worktree.
    for place in [root.clone(), root.join(".tnh/worktrees").join(&run_id)] {
        let opened = tnh()
            .args(["adr", "open", "ADR-1"])
            .current_dir(&place)
            .env_remove("TNH_WORKTREE")
            .output()
            .unwrap();
        let text = stdout_text(&opened);
        assert_eq!(
            opened.status.code(),
            Some(0),
            "{text}{}",
            stderr_text(&opened)
        );
        assert!(text.contains("calc.sh gains a `mul` command"), "{text}");
        let listed = stdout_text(
            &tnh()
                .args(["adr", "list"])
                .current_dir(&place)
                .env_remove("TNH_WORKTREE")
                .output()
                .unwrap(),
        );
        assert!(listed.starts_with("1\taccepted\tADR-1: "), "{listed}");
    }
    // The run's branch holds the change as one commit on `main`, approved by `lead`.
    assert!(stdout.contains(&format!("land {run_id}")), "{stdout}");
    let branch = format!("tnh/implement_adr/{run_id}");
    assert_eq!(
        git_in(&root, &["rev-parse", &format!("{branch}^")]),
        git_in(&root, &["rev-parse", "main"])
    );
    let trailers = git_in(&root, &["log", "-1", "--format=%(trailers:only)", &branch]);
    assert!(trailers.contains("Tnh-Approved-By: lead"), "{trailers}");
    // The worktree holds the working change; the operator's checkout is untouched.
    let worktree = root.join(".tnh/worktrees").join(&run_id);
    let calc = std::fs::read_to_string(worktree.join("calc.sh")).unwrap();
    assert!(calc.contains("mul) echo $(($2 * $3))"), "{calc}");
    assert!(
        !std::fs::read_to_string(root.join("calc.sh"))
            .unwrap()
            .contains("mul")
    );
    assert_eq!(
        git_in(&root, &["rev-parse", "--abbrev-ref", "HEAD"]),
        "main"
    );
    let tests = std::process::Command::new("sh")
        .arg("tests/test_calc.sh")
        .current_dir(&worktree)
        .output()
        .unwrap();
    assert!(tests.status.success(), "{}", stdout_text(&tests));
    // The queued review is in the journal.
    let journal = conductor()
        .arg("--repo")
        .arg(&root)
        .arg("journal")
        .output()
        .unwrap();
    let journal = stdout_text(&journal);
    assert!(
        journal.contains(&run_id) && journal.contains("queue_review"),
        "{journal}"
    );
}

#[test]
fn the_demo_refuses_a_folder_that_is_not_empty() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("precious.txt"), "keep me").unwrap();
    let output = conductor()
        .args(["demo", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = stderr_text(&output);
    assert!(
        stderr.contains("not empty") && stderr.contains("hint:"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("precious.txt")).unwrap(),
        "keep me"
    );
}

#[test]
fn init_writes_a_configuration_that_loads_and_keeps_an_existing_one() {
    let repo = TempRepo::new();
    let init = || {
        conductor()
            .arg("--repo")
            .arg(repo.path())
            .arg("init")
            .output()
            .unwrap()
    };
    let first = init();
    assert_eq!(first.status.code(), Some(0), "{}", stderr_text(&first));
    let config = repo.path().join(".tnh/config.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(
        text.contains("planners:") && text.contains("# judge:"),
        "{text}"
    );
    // The written file is used as is by the next command.
    let checked = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["planner", "check"])
        .arg(crate::support::fixture("planner_vectors"))
        .args(["--planner", "default"])
        .output()
        .unwrap();
    assert_eq!(checked.status.code(), Some(0), "{}", stderr_text(&checked));
    std::fs::write(&config, "agents: {}\n").unwrap();
    let again = init();
    assert_eq!(again.status.code(), Some(2));
    assert!(stderr_text(&again).contains("--force"));
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "agents: {}\n");
    let forced = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["init", "--force"])
        .output()
        .unwrap();
    assert_eq!(forced.status.code(), Some(0));
    assert!(
        std::fs::read_to_string(&config)
            .unwrap()
            .contains("planners:")
    );
}

/// `tnh-conductor --config FILE init` wrote `<repo>/.tnh/config.yaml` and
/// left FILE unwritten. It writes FILE (creating its folder), which the next command given
/// `--config FILE` reads, leaves the repository's own file alone, and refuses to overwrite
/// FILE without `--force`.
#[test]
fn init_with_config_writes_that_file() {
    let repo = TempRepo::new();
    let file = repo.path().join("ci/tnh.yaml");
    let init = |extra: &[&str]| {
        conductor()
            .arg("--repo")
            .arg(repo.path())
            .arg("--config")
            .arg(&file)
            .arg("init")
            .args(extra)
            .output()
            .unwrap()
    };
    let first = init(&[]);
    assert_eq!(first.status.code(), Some(0), "{}", stderr_text(&first));
    assert!(
        stderr_text(&first).contains(&format!("wrote {}", file.display())),
        "{}",
        stderr_text(&first)
    );
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .contains("planners:")
    );
    assert!(!repo.path().join(".tnh/config.yaml").exists());
    let checked = conductor()
        .arg("--repo")
        .arg(repo.path())
        .arg("--config")
        .arg(&file)
        .args(["planner", "check"])
        .arg(crate::support::fixture("planner_vectors"))
        .args(["--planner", "default"])
        .output()
        .unwrap();
    assert_eq!(checked.status.code(), Some(0), "{}", stderr_text(&checked));
    std::fs::write(&file, "agents: {}\n").unwrap();
    let again = init(&[]);
    assert_eq!(again.status.code(), Some(2));
    assert!(
        stderr_text(&again).contains(&format!("`{}` already exists", file.display())),
        "{}",
        stderr_text(&again)
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "agents: {}\n");
    let forced = init(&["--force"]);
    assert_eq!(forced.status.code(), Some(0), "{}", stderr_text(&forced));
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .contains("planners:")
    );
    // A folder is not a configuration file.
    let folder = conductor()
        .arg("--config")
        .arg(repo.path())
        .arg("init")
        .output()
        .unwrap();
    assert_eq!(folder.status.code(), Some(2));
    assert!(
        stderr_text(&folder).contains("is a folder"),
        "{}",
        stderr_text(&folder)
    );
}

/// The folder of a repository prompt is its `prompt_id`'s family, not its role. The paths the
/// guide gives are the ones the library loads, and a prompt put under its role instead is
/// refused.
#[test]
fn the_guide_names_the_folder_repository_prompts_live_in() {
    let readme = include_str!("../../docs/guide.md");
    assert!(
        readme.contains("`.tnh/prompts/<family>/<name>.v<N>.md`")
            && !readme.contains(".tnh/prompts/<role>/"),
        "the guide's \"Prompts\" section names the wrong folder"
    );
    let prompt = "---\nprompt_id: mine.fix\nversion: 1\nrole: task\nsummary: s\n---\nhi\n";
    let repo = TempRepo::new();
    assert!(readme.contains("`.tnh/prompts/mine/fix.v1.md`"));
    repo.write(".tnh/prompts/mine/fix.v1.md", prompt);
    let list = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["prompts", "list"])
        .output()
        .unwrap();
    assert_eq!(list.status.code(), Some(0), "{}", stderr_text(&list));
    assert!(
        stdout_text(&list).contains("mine.fix.v1"),
        "{}",
        stdout_text(&list)
    );
    let misplaced = TempRepo::new();
    misplaced.write(".tnh/prompts/task/fix.v1.md", prompt);
    let list = conductor()
        .arg("--repo")
        .arg(misplaced.path())
        .args(["prompts", "list"])
        .output()
        .unwrap();
    assert_eq!(list.status.code(), Some(1));
    assert!(
        stdout_text(&list).contains("mine/fix.v1.md")
            || stderr_text(&list).contains("mine/fix.v1.md"),
        "{}{}",
        stdout_text(&list),
        stderr_text(&list)
    );
}
