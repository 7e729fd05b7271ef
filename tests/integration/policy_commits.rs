//! What a step commits on the work branch is judged too: an agent that commits
//! a forbidden change and then puts the file back in the worktree (so the capture sees only
//! its allowed edit) no longer passes the policy while the work branch carries the change.

use tnh_conductor::ids::StepId;
use tnh_conductor::policy::{Policy, PolicySpec, ViolationClass};
use tnh_conductor::workspace::Workspace;

use crate::support::{TempRepo, git_in};
use crate::workspace::{create, put};

/// A repository with `src/`, `docs/` and `secret/` committed.
fn three_folders() -> TempRepo {
    let repo = TempRepo::new();
    repo.write("src/main.rs", "fn main() {}\n");
    repo.write("docs/a.md", "# doc\n");
    repo.write("secret/key.txt", "key=1\n");
    repo.commit_all("three folders");
    repo
}

fn src_only() -> Policy {
    Policy::compile(&PolicySpec {
        allowed_paths: vec!["src/**".to_owned()],
        forbidden_paths: vec!["secret/**".to_owned()],
        ..PolicySpec::default()
    })
    .unwrap()
}

fn commit(dir: &std::path::Path, message: &str) {
    git_in(dir, &["add", "-A"]);
    git_in(dir, &["commit", "-q", "-m", message]);
}

/// A violation as (class, path, detail).
type Found = (ViolationClass, Option<String>, String);

/// The step runs `agent` in the worktree of a fresh run whose previous step left `docs/a.md`
/// changed and uncommitted; returns the workspace, the capture's paths, and the violations
/// of the capture and of the commits, as (class, path, detail).
fn step(
    repo: &TempRepo,
    agent: impl FnOnce(&std::path::Path),
) -> (Workspace, Vec<String>, Vec<Found>) {
    let workspace = create(repo, "commits");
    // What an earlier step left in the worktree: judged by that step, committed by this one.
    put(
        workspace.path(),
        "docs/a.md",
        "# doc\nfrom the earlier step\n",
    );
    let snapshot = workspace
        .snapshot_pre_step(&StepId::new("work"), 1)
        .unwrap();
    let guard = workspace.guard(&[]).unwrap();
    agent(workspace.path());
    let report = guard.check().unwrap().report;
    let status = workspace.status_since(&snapshot).unwrap();
    let policy = src_only();
    let mut violations = policy.check(&status, &report, None);
    if let Some(moved) = &report.work_branch_moved {
        let committed = workspace
            .committed_changes(moved, &status.since_tree)
            .unwrap();
        violations.extend(policy.check_committed(&committed, &status, None));
    }
    let paths = status.files.iter().map(|file| file.path.clone()).collect();
    let found = violations
        .into_iter()
        .map(|violation| (violation.class, violation.path, violation.detail))
        .collect();
    (workspace, paths, found)
}

#[test]
fn a_forbidden_change_committed_then_put_back_in_the_worktree_is_a_violation() {
    let repo = three_folders();
    let (workspace, captured, found) = step(&repo, |dir| {
        put(dir, "secret/key.txt", "key=stolen\n");
        commit(dir, "tidy");
        git_in(dir, &["checkout", "HEAD~1", "--", "secret/key.txt"]);
        git_in(dir, &["reset", "-q"]);
        put(dir, "src/main.rs", "fn main() {}\nfn y() {}\n");
    });
    assert_eq!(captured, vec!["src/main.rs".to_owned()]);
    let tip = git_in(workspace.path(), &["rev-parse", "HEAD"]);
    let classes: Vec<_> = found.iter().map(|(class, _, _)| *class).collect();
    assert_eq!(
        classes,
        vec![
            ViolationClass::ForbiddenPath,
            ViolationClass::OutsideAllowedPaths
        ],
        "{found:#?}"
    );
    for (_, path, detail) in &found {
        assert_eq!(path.as_deref(), Some("secret/key.txt"));
        assert!(detail.contains(&tip), "the commit is named: {detail}");
        assert!(detail.contains("committed on the work branch"), "{detail}");
    }
}

#[test]
fn a_forbidden_change_committed_and_reverted_in_history_is_a_violation() {
    // The branch's tip holds the base's content again, yet its history (what a push or a
    // merge carries) holds the forbidden change.
    let repo = three_folders();
    let (workspace, captured, found) = step(&repo, |dir| {
        put(dir, "secret/key.txt", "key=stolen\n");
        git_in(dir, &["add", "secret/key.txt"]);
        git_in(dir, &["commit", "-q", "-m", "steal"]);
        git_in(dir, &["revert", "--no-edit", "HEAD"]);
    });
    assert!(captured.is_empty(), "{captured:?}");
    let stolen = git_in(workspace.path(), &["rev-parse", "HEAD~1"]);
    let paths: Vec<_> = found.iter().map(|(_, path, _)| path.clone()).collect();
    assert_eq!(
        paths,
        vec![Some("secret/key.txt".to_owned()); 2],
        "{found:#?}"
    );
    assert!(found[0].2.contains(&stolen), "{found:#?}");
}

#[test]
fn committing_what_the_worktree_already_held_before_the_step_is_no_violation() {
    // The earlier step's `docs/a.md` (outside this step's `allowed_paths`) and the step's own
    // allowed `src/` edit, committed: the commit holds nothing the captures did not show.
    let repo = three_folders();
    let (workspace, captured, found) = step(&repo, |dir| {
        put(dir, "src/main.rs", "fn main() {}\nfn z() {}\n");
        commit(dir, "the work so far");
    });
    assert_eq!(captured, vec!["src/main.rs".to_owned()]);
    assert!(found.is_empty(), "{found:#?}");
    let committed = last_commits_changes(&workspace);
    let mut paths: Vec<_> = committed
        .iter()
        .map(|change| change.file.path.clone())
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        vec!["docs/a.md", "src/main.rs"],
        "against the base both are new"
    );
}

/// A committed name that is not UTF-8 keeps its exact name beside the lossy path the policy
/// judges, as a captured one does.
#[test]
fn a_committed_name_that_is_not_utf8_keeps_its_exact_name() {
    use std::os::unix::ffi::OsStrExt;
    let repo = three_folders();
    let (workspace, _, _) = step(&repo, |dir| {
        let name = dir.join(std::ffi::OsStr::from_bytes(b"src/caf\xe9.rs"));
        std::fs::write(name, "fn x() {}\n").unwrap();
        commit(dir, "latin-1 name");
    });
    let committed = last_commits_changes(&workspace);
    let names: Vec<(&str, Option<&str>)> = committed
        .iter()
        .map(|change| {
            (
                change.file.path.as_str(),
                change.file.quoted_path.as_deref(),
            )
        })
        .filter(|(path, _)| path.starts_with("src/caf"))
        .collect();
    assert_eq!(names, [("src/caf\u{fffd}.rs", Some("\"src/caf\\351.rs\""))]);
}

/// What the worktree's last commit changed against its parent's tree, as the guard lists a
/// step's committed changes.
fn last_commits_changes(workspace: &Workspace) -> Vec<tnh_conductor::workspace::CommittedChange> {
    workspace
        .committed_changes(
            &tnh_conductor::workspace::BranchMove {
                before: git_in(workspace.path(), &["rev-parse", "HEAD~1"]),
                after: git_in(workspace.path(), &["rev-parse", "HEAD"]),
            },
            &git_in(workspace.path(), &["rev-parse", "HEAD~1^{tree}"]),
        )
        .unwrap()
}

/// Runs a one-step workflow whose agent runs the shell `script` in the worktree (a repository
/// holding `src/main.rs` and `secret/key.txt`), with the step policy `policy`; returns the exit
/// code and the step's `policy_summary.json`.
fn run_agent(policy: &str, script: &str) -> (Option<i32>, serde_json::Value) {
    let prepare = |repo: &crate::support::TempRepo| {
        repo.write("src/main.rs", "fn main() {}\n");
        repo.write("secret/key.txt", "key=1\n");
        repo.commit_all("src and secret");
    };
    let (code, _, summary) = crate::policy::run_with_agent(prepare, policy, script);
    (code, summary)
}

#[test]
fn a_run_whose_agent_commits_a_forbidden_change_and_hides_it_fails_the_policy() {
    let script = "cat >/dev/null; echo key=stolen > secret/key.txt \
                  && git add -A && git -c user.name=a -c user.email=a@x commit -qm tidy \
                  && git checkout HEAD~1 -- secret/key.txt && git reset -q \
                  && echo 'fn y(){}' >> src/main.rs";
    let (code, summary) = run_agent(
        r#"{allowed_paths: ["src/**"], forbidden_paths: ["secret/**"]}"#,
        script,
    );
    assert_ne!(code, Some(0), "{summary}");
    assert_eq!(summary["verdict"], "violation", "{summary}");
    let violations = summary["violations"].as_array().unwrap();
    assert_eq!(violations.len(), 2, "{summary}");
    assert_eq!(violations[0]["class"], "forbidden_path");
    assert_eq!(violations[0]["path"], "secret/key.txt");
    assert_eq!(violations[0]["rule"], "secret/**");
    assert_eq!(violations[1]["class"], "outside_allowed_paths");
    let moved = &summary["guard_report"]["work_branch_moved"];
    assert!(
        moved["before"].is_string() && moved["after"].is_string(),
        "{summary}"
    );
    assert_eq!(summary["guard_report"]["commits"], 1);
}
