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
