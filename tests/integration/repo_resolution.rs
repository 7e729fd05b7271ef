//! Which repository a command works in: from any checkout (the main one, a linked worktree, a
//! run's worktree, a subfolder) and from `--repo`, every command resolves the same main working
//! tree, where `.tnh/` lives; a `--repo` that names no repository is an error (exit 2).

use std::path::Path;
use std::process::Output;

use crate::kernel_support::RunRepo;
use crate::support::{conductor, git_in, stderr_text, stdout_text};

/// `tnh-conductor ARGS…` run in `dir`, without `--repo`.
fn conductor_in(dir: &Path, args: &[&str]) -> Output {
    conductor()
        .current_dir(dir)
        .args(["--color", "never"])
        .args(args)
        .output()
        .unwrap()
}

fn run_ids(output: &Output) -> Vec<String> {
    let listed: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("not JSON: {}", stdout_text(output)));
    listed["runs"]
        .as_array()
        .unwrap_or_else(|| panic!("no runs in {listed}"))
        .iter()
        .map(|run| run["run_id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_run_started_in_a_linked_worktree_lives_in_the_main_working_tree() {
    let repo = RunRepo::new();
    let primary = repo.path().canonicalize().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let linked = outside.path().join("linked");
    git_in(
        &primary,
        &[
            "worktree",
            "add",
            "-q",
            "--detach",
            linked.to_str().unwrap(),
        ],
    );
    // A linked worktree's own configuration is not the repository's: it is named as ignored.
    std::fs::create_dir_all(linked.join(".tnh")).unwrap();
    std::fs::write(linked.join(".tnh/config.yaml"), "agents: {}\n").unwrap();
    let workflow = std::fs::read_to_string(crate::support::fixture("runs/gate.yaml")).unwrap();
    std::fs::write(linked.join("gate.yaml"), workflow).unwrap();

    let started = conductor_in(&linked, &["run", "--json", "gate.yaml"]);
    assert_eq!(started.status.code(), Some(3), "{}", stderr_text(&started));
    assert!(
        stderr_text(&started).contains(&format!(
            "ignoring `{}`",
            linked
                .canonicalize()
                .unwrap()
                .join(".tnh/config.yaml")
                .display()
        )),
        "{}",
        stderr_text(&started)
    );
    let result: serde_json::Value = serde_json::from_slice(&started.stdout).unwrap();
    let run_id = result["run_id"].as_str().unwrap().to_owned();

    // One place for the run: the main working tree's `.tnh/`.
    let run_dir = primary.join(".tnh/run").join(&run_id);
    let worktree = primary.join(".tnh/worktrees").join(&run_id);
    assert!(run_dir.join("metadata.json").is_file());
    assert!(worktree.is_dir());
    assert!(!linked.join(".tnh/run").exists() && !linked.join(".tnh/worktrees").exists());
    assert_eq!(result["run_dir"], run_dir.display().to_string());

    // Every checkout sees it, and every command finds it.
    for dir in [&primary, &linked, &worktree, &primary.join(".tnh")] {
        let listed = conductor_in(dir, &["runs", "list", "--json"]);
        assert_eq!(
            run_ids(&listed),
            [run_id.as_str()],
            "from {}",
            dir.display()
        );
    }
    let gates = conductor_in(&linked, &["gate", "list"]);
    assert!(
        stdout_text(&gates).contains(&run_id),
        "{}",
        stdout_text(&gates)
    );
    let status = conductor_in(&linked, &["status", &run_id]);
    assert!(
        stdout_text(&status).contains("waiting"),
        "{}",
        stdout_text(&status)
    );
    let journal = conductor_in(&linked, &["journal"]);
    assert!(
        stdout_text(&journal).contains(&run_id),
        "{}",
        stdout_text(&journal)
    );
    let shown = conductor_in(&linked, &["runs", "show", &run_id]);
    assert_eq!(shown.status.code(), Some(0), "{}", stderr_text(&shown));

    let approved = conductor_in(
        &linked,
        &["gate", "approve", &run_id, "--as", "lead", "--resume"],
    );
    assert_eq!(
        approved.status.code(),
        Some(0),
        "{}",
        stderr_text(&approved)
    );
    let final_state = std::fs::read_to_string(run_dir.join("final-state.txt")).unwrap();
    assert!(
        final_state.starts_with("completed success"),
        "{final_state}"
    );
    let rollback = conductor_in(&linked, &["rollback", &run_id]);
    assert_eq!(
        rollback.status.code(),
        Some(0),
        "{}",
        stderr_text(&rollback)
    );
    let cleaned = conductor_in(&linked, &["runs", "clean"]);
    assert_eq!(cleaned.status.code(), Some(0), "{}", stderr_text(&cleaned));
    assert!(!worktree.exists(), "runs clean removed the run's worktree");
}

#[test]
fn a_repo_flag_naming_no_repository_exits_2_for_every_command() {
    let outside = tempfile::tempdir().unwrap();
    let missing = outside.path().join("typo");
    let not_a_repo = outside.path();
    std::fs::write(outside.path().join("wf.yaml"), "workflow_id: w\n").unwrap();
    let commands: &[&[&str]] = &[
        &["gate", "list"],
        &["gate", "show", "R"],
        &["runs", "list"],
        &["runs", "list", "--json"],
        &["runs", "show", "R"],
        &["runs", "events", "R"],
        &["runs", "clean"],
        &["status", "R"],
        &["journal"],
        &["rollback", "R"],
        &["resume", "R"],
        &["run", "wf.yaml"],
        &["init"],
        &["validate", "wf.yaml"],
        &["prompts", "list"],
    ];
    for (repo, says) in [
        (missing.as_path(), "does not exist"),
        (not_a_repo, "is not inside a git repository"),
    ] {
        for args in commands {
            let output = conductor()
                .current_dir(outside.path())
                .arg("--repo")
                .arg(repo)
                .args(*args)
                .output()
                .unwrap();
            let stderr = stderr_text(&output);
            assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
            assert!(
                stderr.contains(&format!("--repo `{}` {says}", repo.display()))
                    && stderr.contains("hint:"),
                "{args:?}: {stderr}"
            );
            assert!(
                output.stdout.is_empty(),
                "{args:?}: {}",
                stdout_text(&output)
            );
        }
    }
}

#[test]
fn a_repo_flag_naming_a_subfolder_works_like_running_there() {
    let repo = RunRepo::new();
    let workflow = repo.workflow("linear.yaml");
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(0), "{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    for subfolder in [".tnh", "wf"] {
        let listed = conductor()
            .arg("--repo")
            .arg(repo.path().join(subfolder))
            .args(["runs", "list", "--json"])
            .output()
            .unwrap();
        assert_eq!(run_ids(&listed), [run_id], "--repo REPO/{subfolder}");
    }
}

/// `.tnh/config.yaml` naming the scripted agent, and the gated workflow, in `checkout`.
fn prepare_checkout(checkout: &Path) {
    let agent = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/agents/scripted.py");
    std::fs::create_dir_all(checkout.join(".tnh")).unwrap();
    std::fs::write(
        checkout.join(".tnh/config.yaml"),
        format!(
            "agents:\n  scripted:\n    kind: command\n    argv: [python3, \"{}\"]\n",
            agent.display()
        ),
    )
    .unwrap();
    let workflow = std::fs::read_to_string(crate::support::fixture("runs/gate.yaml")).unwrap();
    std::fs::write(checkout.join("gate.yaml"), workflow).unwrap();
}

/// `tnh ARGS…` run in `dir`, outside any run.
fn tnh_in(dir: &Path, args: &[&str]) -> Output {
    crate::support::tnh()
        .current_dir(dir)
        .args(args)
        .env_remove("TNH_BASE_SHA")
        .env_remove("TNH_WORKTREE")
        .env_remove("TNH_RUN_DIR")
        .env_remove("TNH_STEP_DIR")
        .env_remove("TNH_RUN_ID")
        .output()
        .unwrap()
}

/// Everything a checkout whose `.git` is a file naming a git folder elsewhere must allow:
/// `tnh context` and `tnh test`, a run (agent step, guard, gate, resume), its listing, and
/// `runs clean` — with `.tnh/` in the checkout and excluded through the real git folder.
fn runs_work_in(checkout: &Path, git_folder: &Path) {
    let checkout = checkout.canonicalize().unwrap();
    prepare_checkout(&checkout);
    std::fs::create_dir_all(checkout.join("src")).unwrap();
    let context = tnh_in(&checkout.join("src"), &["context"]);
    assert_eq!(context.status.code(), Some(0), "{}", stderr_text(&context));
    assert!(
        stdout_text(&context).contains(&format!("repo: {}\n", checkout.display())),
        "{}",
        stdout_text(&context)
    );
    std::fs::write(
        checkout.join(".tnh/config.yaml"),
        format!(
            "{}validators:\n  tests: {{argv: [sh, -c, \"echo suite ran\"]}}\n",
            std::fs::read_to_string(checkout.join(".tnh/config.yaml")).unwrap()
        ),
    )
    .unwrap();
    let tested = tnh_in(&checkout, &["test"]);
    assert_eq!(tested.status.code(), Some(0), "{}", stderr_text(&tested));

    let started = conductor_in(&checkout, &["run", "--json", "gate.yaml"]);
    assert_eq!(started.status.code(), Some(3), "{}", stderr_text(&started));
    let result: serde_json::Value = serde_json::from_slice(&started.stdout).unwrap();
    let run_id = result["run_id"].as_str().unwrap().to_owned();
    let worktree = checkout.join(".tnh/worktrees").join(&run_id);
    assert!(
        checkout
            .join(".tnh/run")
            .join(&run_id)
            .join("metadata.json")
            .is_file()
    );
    assert_eq!(
        std::fs::read_to_string(worktree.join("feature.txt")).unwrap(),
        "the feature"
    );
    let exclude = std::fs::read_to_string(git_folder.join("info/exclude")).unwrap();
    assert!(exclude.lines().any(|line| line == "/.tnh/"), "{exclude}");
    assert_eq!(
        git_in(
            &checkout,
            &["status", "--porcelain", "--untracked-files=all"]
        ),
        "?? gate.yaml"
    );
    let listed = conductor_in(&checkout, &["runs", "list", "--json"]);
    assert_eq!(run_ids(&listed), [run_id.as_str()]);
    let approved = conductor_in(
        &checkout,
        &["gate", "approve", &run_id, "--as", "lead", "--resume"],
    );
    assert_eq!(
        approved.status.code(),
        Some(0),
        "{}",
        stderr_text(&approved)
    );
    let cleaned = conductor_in(&checkout, &["runs", "clean"]);
    assert_eq!(cleaned.status.code(), Some(0), "{}", stderr_text(&cleaned));
    assert!(!worktree.exists(), "runs clean removed the run's worktree");
}

/// A submodule's checkout (`.git` is the file `gitdir: ../.git/modules/lib`)
/// was refused as "a bare repository" by `tnh context`, `tnh test` and every `tnh-conductor`
/// command, because only a git folder named `.git` was taken to have a working tree.
#[test]
fn a_submodule_checkout_is_a_repository_like_any_other() {
    let lib = crate::support::TempRepo::new();
    let superproject = crate::support::TempRepo::new();
    git_in(
        superproject.path(),
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            lib.path().to_str().unwrap(),
            "lib",
        ],
    );
    superproject.commit_all("the submodule");
    let checkout = superproject.path().join("lib");
    assert!(checkout.join(".git").is_file());
    runs_work_in(&checkout, &superproject.path().join(".git/modules/lib"));
    // The superproject's own checkout is untouched by the submodule's runs.
    assert_eq!(
        superproject.git(&["status", "--porcelain", "--ignore-submodules=untracked"]),
        ""
    );
    // From a linked worktree of the submodule, the submodule's checkout is the main one
    // (its git folder's `core.worktree`).
    let outside = tempfile::tempdir().unwrap();
    let linked = outside.path().join("linked");
    git_in(
        &checkout,
        &[
            "worktree",
            "add",
            "-q",
            "--detach",
            linked.to_str().unwrap(),
        ],
    );
    let listed = conductor_in(&linked, &["runs", "list", "--json"]);
    assert_eq!(listed.status.code(), Some(0), "{}", stderr_text(&listed));
    let context = tnh_in(&linked, &["test"]);
    assert_eq!(context.status.code(), Some(0), "{}", stderr_text(&context));
    assert!(stdout_text(&context).contains("suite ran"));
}

/// A checkout made with `git init --separate-git-dir` was refused as "a bare
/// repository"; a bare repository's linked worktree is still refused, with a hint, and so is
/// a linked worktree of a separate git folder that does not say where its main checkout is.
#[test]
fn a_separate_git_dir_checkout_works_and_a_bare_repository_is_refused() {
    let outside = tempfile::tempdir().unwrap();
    let checkout = outside.path().join("checkout");
    let git_folder = outside.path().join("checkout.git");
    git_in(
        outside.path(),
        &[
            "init",
            "-q",
            "-b",
            "main",
            "--separate-git-dir",
            git_folder.to_str().unwrap(),
            checkout.to_str().unwrap(),
        ],
    );
    git_in(&checkout, &["commit", "-q", "--allow-empty", "-m", "one"]);
    runs_work_in(&checkout, &git_folder);

    let linked = outside.path().join("linked");
    git_in(
        &checkout,
        &[
            "worktree",
            "add",
            "-q",
            "--detach",
            linked.to_str().unwrap(),
        ],
    );
    let listed = conductor_in(&linked, &["runs", "list"]);
    assert_eq!(listed.status.code(), Some(2));
    let stderr = stderr_text(&listed);
    assert!(
        stderr.contains("main working tree")
            && stderr.contains("hint: run from the repository's main checkout"),
        "{stderr}"
    );

    let bare = outside.path().join("bare.git");
    git_in(
        outside.path(),
        &[
            "clone",
            "-q",
            "--bare",
            git_folder.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    );
    let bare_linked = outside.path().join("bare-linked");
    git_in(
        &bare,
        &[
            "worktree",
            "add",
            "-q",
            "--detach",
            bare_linked.to_str().unwrap(),
        ],
    );
    for dir in [&bare, &bare_linked] {
        let listed = conductor_in(dir, &["runs", "list"]);
        assert_eq!(listed.status.code(), Some(2));
        let stderr = stderr_text(&listed);
        assert!(
            stderr.contains("is a bare repository") && stderr.contains("hint:"),
            "{stderr}"
        );
    }
    let context = tnh_in(&bare_linked, &["context"]);
    assert_eq!(context.status.code(), Some(2));
    let stderr = stderr_text(&context);
    assert!(
        stderr.contains("is a bare repository")
            && stderr.contains("hint: a bare repository has no working tree"),
        "{stderr}"
    );
}
