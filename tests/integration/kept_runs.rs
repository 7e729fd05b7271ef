//! A repository that keeps many finished runs: a finished run's refs are packed, so git reads
//! them with one file, and the runs after it still see them (and their guards still watch
//! them).

use crate::kernel_support::RunRepo;

/// The loose ref files under `folder` (relative to the repository's git folder).
fn loose_refs(repo: &RunRepo, folder: &str) -> Vec<String> {
    let root = repo.path().join(".git").join(folder);
    let mut found = Vec::new();
    let mut pending = vec![root.clone()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_type().unwrap().is_dir() {
                pending.push(entry.path());
            } else {
                found.push(entry.path().display().to_string());
            }
        }
    }
    found
}

#[test]
fn a_finished_runs_refs_are_packed_and_still_read() {
    let repo = RunRepo::new();
    let workflow = repo.workflow("linear.yaml");
    let (first, _) = repo.run_exits(&workflow, &[], 0);
    let own = format!("refs/tnh/runs/{first}");
    let branch = format!("refs/heads/tnh/linear/{first}");
    assert_eq!(loose_refs(&repo, &own), Vec::<String>::new());
    assert_eq!(loose_refs(&repo, &branch), Vec::<String>::new());
    let packed = std::fs::read_to_string(repo.path().join(".git/packed-refs")).unwrap();
    assert!(packed.contains(&format!("{own}/pre_run")), "{packed}");
    assert!(packed.contains(&branch), "{packed}");
    // Git reads them as before.
    let listed = repo
        .repo
        .git(&["for-each-ref", "--format=%(refname)", &own]);
    assert!(listed.contains(&format!("{own}/pre_run")), "{listed}");
    // A second run beside the kept one ends clean, and packs only its own refs: the
    // operator's branch stays loose.
    let (second, result) = repo.run_exits(&workflow, &[], 0);
    assert_ne!(first, second, "{result}");
    assert_eq!(
        loose_refs(&repo, &format!("refs/tnh/runs/{second}")),
        Vec::<String>::new()
    );
    assert!(repo.path().join(".git/refs/heads/main").is_file());
}

/// One agent step, then STOP.
const ONE_STEP: &str = r#"workflow_id: one_step
version: 1
description: one agent step
entry_step: work
steps:
  - id: work
    opcode: RUN_AGENT
    agent: scripted
    prompt: "WRITE work.txt: the work of ${run_id}"
    routes: {"*": STOP}
"#;

/// Sets `retention.finished_checkouts`.
fn keep_checkouts(repo: &RunRepo, count: usize) {
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!("{config}retention:\n  finished_checkouts: {count}\n"),
    );
}

/// The runs that have a checkout under `.tnh/worktrees/`, sorted.
fn checkouts(repo: &RunRepo) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo.path().join(".tnh/worktrees"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn after_twenty_finished_runs_only_the_configured_number_keep_a_checkout() {
    let repo = RunRepo::new();
    keep_checkouts(&repo, 3);
    let workflow = repo.workflow_text("one.yaml", ONE_STEP);
    let runs: Vec<String> = (0..20)
        .map(|_| repo.run_exits(&workflow, &[], 0).0)
        .collect();
    // The three most recent keep theirs; git no longer registers the others.
    assert_eq!(checkouts(&repo), runs[17..].to_vec());
    let registered = repo.repo.git(&["worktree", "list", "--porcelain"]);
    assert_eq!(
        registered.matches("\nworktree ").count() + 1,
        4,
        "{registered}"
    );
    // Branches, snapshot refs and run directories all stay; what a removed checkout held is
    // kept under its `final` ref.
    let branches = repo.repo.git(&["for-each-ref", "refs/heads/tnh/"]);
    assert_eq!(branches.lines().count(), 20, "{branches}");
    assert_eq!(
        std::fs::read_dir(repo.path().join(".tnh/run"))
            .unwrap()
            .count(),
        20
    );
    let first = &runs[0];
    let kept = repo
        .repo
        .git(&["show", &format!("refs/tnh/runs/{first}/final:work.txt")]);
    assert_eq!(kept, format!("the work of {first}"));
}

#[test]
fn runs_that_have_not_finished_keep_their_checkout_and_rollback_checks_a_removed_one_out() {
    let repo = RunRepo::new();
    keep_checkouts(&repo, 1);
    let gate = repo.workflow("gate.yaml");
    let waiting = repo.conductor_exits(&["run", "--json", gate.to_str().unwrap()], 3);
    let waiting: serde_json::Value = serde_json::from_slice(&waiting.stdout).unwrap();
    let waiting = waiting["run_id"].as_str().unwrap().to_owned();
    // A run whose driver was killed mid-run: blocked, for `resume`.
    let workflow = repo.workflow_text("one.yaml", ONE_STEP);
    repo.run_killed_at(&workflow, 8);
    let killed = checkouts(&repo)
        .into_iter()
        .find(|run| *run != waiting)
        .unwrap();
    let finished: Vec<String> = (0..3)
        .map(|_| repo.run_exits(&workflow, &[], 0).0)
        .collect();
    let mut expected = vec![waiting.clone(), killed.clone(), finished[2].clone()];
    expected.sort();
    assert_eq!(checkouts(&repo), expected);
    // A removed checkout is checked out again for a rollback, at the run's snapshot.
    let first = &finished[0];
    repo.conductor_exits(&["rollback", first, "--target", "pre_run"], 0);
    let worktree = repo.path().join(".tnh/worktrees").join(first);
    assert!(worktree.join("README.md").is_file());
    assert!(
        !worktree.join("work.txt").exists(),
        "rolled back to pre_run"
    );
    // The killed run resumes in its own checkout, and the waiting run still has its own.
    repo.conductor_exits(&["resume", &killed], 0);
    assert!(repo.path().join(".tnh/worktrees").join(&waiting).is_dir());
}

#[test]
fn runs_clean_keep_spares_the_newest_finished_runs_and_runs_list_limit_shows_the_newest() {
    let repo = RunRepo::new();
    keep_checkouts(&repo, 10);
    let workflow = repo.workflow_text("one.yaml", ONE_STEP);
    let runs: Vec<String> = (0..4)
        .map(|_| repo.run_exits(&workflow, &[], 0).0)
        .collect();
    assert_eq!(checkouts(&repo), runs);
    let cleaned = repo.conductor_exits(&["runs", "clean", "--keep", "2"], 0);
    assert_eq!(checkouts(&repo), runs[2..].to_vec());
    let said = crate::support::stderr_text(&cleaned);
    assert!(
        said.contains("kept the 2 most recently finished runs"),
        "{said}"
    );
    let listed = repo.conductor_exits(&["runs", "list", "--json", "--limit", "2"], 0);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let ids: Vec<&str> = listed["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [runs[3].as_str(), runs[2].as_str()]);
}
