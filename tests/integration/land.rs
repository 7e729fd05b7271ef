//! A successful run's result is a commit on its branch, and `land` brings it into a branch of
//! the operator's (fast-forward, merge, squash), refusing — with refs, index and files as they
//! were — a dirty checkout, a conflict, a run that did not succeed, and a second landing;
//! `--push` pushes the run's branch, `--pr` opens a pull request through `gh`.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::kernel_support::{RunRepo, event_types, first_event, real_git};
use crate::support::{conductor, git_in, stderr_text, stdout_text};

/// An agent step, a queued review, a blocking review gate, then a success STOP.
fn gated(repo: &RunRepo) -> PathBuf {
    repo.workflow("gate.yaml")
}

/// A repository whose git identity is `Lead Dev <lead@example.invalid>`.
fn repo_with_identity() -> RunRepo {
    let repo = RunRepo::new();
    repo.repo.git(&["config", "user.name", "Lead Dev"]);
    repo.repo
        .git(&["config", "user.email", "lead@example.invalid"]);
    repo
}

/// A run of the gated workflow, approved by `lead`: it ends in success.
fn approved_run(repo: &RunRepo) -> String {
    let (run_id, _) = repo.run_exits(&gated(repo), &[], 3);
    repo.conductor_exits(&["gate", "approve", &run_id, "--as", "lead", "--resume"], 0);
    run_id
}

fn metadata(repo: &RunRepo, run_id: &str) -> serde_json::Value {
    repo.json(run_id, "metadata.json")
}

fn land(repo: &RunRepo, args: &[&str]) -> Output {
    let mut all = vec!["land"];
    all.extend_from_slice(args);
    repo.conductor(&all)
}

/// Commits `contents` as `path` on the operator's `main`.
fn commit_on_main(repo: &RunRepo, path: &str, contents: &str) {
    repo.repo.write(path, contents);
    repo.repo.git(&["add", path]);
    repo.repo
        .git(&["commit", "-q", "-m", &format!("main: {path}")]);
}

/// Everything a refused `land` must leave as it was: every ref, HEAD, the index file's bytes
/// and entries, and what `git status` says of the checkout.
#[derive(Debug, PartialEq, Eq)]
struct RepositoryState {
    refs: String,
    head: String,
    index: Vec<u8>,
    staged: String,
    status: String,
}

fn repository_state(repo: &Path) -> RepositoryState {
    let index = std::fs::read(repo.join(".git/index")).unwrap();
    RepositoryState {
        refs: git_in(repo, &["for-each-ref", "--format=%(refname) %(objectname)"]),
        head: git_in(repo, &["symbolic-ref", "HEAD"]),
        index,
        staged: git_in(repo, &["ls-files", "-s"]),
        status: git_in(
            repo,
            &[
                "--no-optional-locks",
                "status",
                "--porcelain",
                "--untracked-files=all",
            ],
        ),
    }
}

/// Runs `land ARGS`, asserting it refuses (exit 1) with `expected` in its error and changes
/// nothing of the repository.
#[track_caller]
fn refused(repo: &RunRepo, args: &[&str], expected: &str) -> String {
    // Settle the index's stat data first, so a refresh is not mistaken for a change.
    git_in(repo.path(), &["status", "--porcelain"]);
    let before = repository_state(repo.path());
    let output = land(repo, args);
    let stderr = stderr_text(&output);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(expected), "{stderr}");
    assert!(stderr.contains("nothing was changed"), "{stderr}");
    assert_eq!(repository_state(repo.path()), before, "{stderr}");
    stderr
}

#[test]
fn a_success_stop_commits_the_change_on_the_run_branch() {
    let repo = repo_with_identity();
    let main_before = repo.repo.git(&["rev-parse", "main"]);
    let run_id = approved_run(&repo);
    let recorded = metadata(&repo, &run_id);
    let branch = recorded["branch"].as_str().unwrap();
    let commit = repo
        .repo
        .git(&["rev-parse", &format!("refs/heads/{branch}")]);
    assert_eq!(recorded["result_commit"], commit.as_str());
    assert_eq!(recorded["base_branch"], "main");

    // Its parent is the base; its tree is the worktree's content, and the worktree is clean
    // on it.
    assert_eq!(
        repo.repo.git(&["rev-parse", &format!("{commit}^@")]),
        recorded["base_sha"].as_str().unwrap()
    );
    let worktree = Path::new(recorded["worktree_path"].as_str().unwrap());
    assert_eq!(git_in(worktree, &["rev-parse", "HEAD"]), commit);
    assert_eq!(
        git_in(worktree, &["symbolic-ref", "HEAD"]),
        format!("refs/heads/{branch}")
    );
    assert_eq!(
        git_in(
            worktree,
            &["status", "--porcelain", "--untracked-files=all"]
        ),
        ""
    );
    assert_eq!(
        repo.repo.git(&["show", &format!("{commit}:feature.txt")]),
        "the feature"
    );

    let message = repo.repo.git(&["log", "-1", "--format=%B", &commit]);
    let mut lines = message.lines();
    assert_eq!(
        lines.next(),
        Some(format!("gated: Approve the feature of {run_id}").as_str()),
        "{message}"
    );
    assert_eq!(lines.next(), Some(""), "{message}");
    for visit in [
        "- implement #1 (RUN_AGENT): completed",
        "- queue #1 (GATE): gate_queued",
        "- review #1 (GATE): gate_approved",
    ] {
        assert!(message.contains(visit), "{message}");
    }
    let trailers = repo
        .repo
        .git(&["log", "-1", "--format=%(trailers:only,unfold)", &commit]);
    assert_eq!(
        trailers,
        format!("Tnh-Run: {run_id}\nTnh-Workflow: gated v1\nTnh-Approved-By: lead")
    );
    assert_eq!(
        repo.repo
            .git(&["log", "-1", "--format=%an <%ae>|%cn <%ce>", &commit]),
        "Lead Dev <lead@example.invalid>|Lead Dev <lead@example.invalid>"
    );

    let events = repo.events(&run_id);
    let types = event_types(&events);
    let committed = types.iter().position(|kind| kind == "run_committed");
    let completed = types.iter().position(|kind| kind == "run_completed");
    assert!(committed.is_some() && committed < completed, "{types:?}");
    let event = first_event(&events, "run_committed");
    assert_eq!(event["commit"], commit.as_str());
    assert_eq!(event["identity"], "configured");
    // Nothing lands without the operator.
    assert_eq!(repo.repo.git(&["rev-parse", "main"]), main_before);
}

#[test]
fn without_a_git_identity_the_result_commit_is_written_by_the_conductor() {
    let repo = RunRepo::new();
    let without_identity = |args: &[&str]| {
        conductor()
            .arg("--repo")
            .arg(repo.path())
            .args(args)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env_remove("GIT_AUTHOR_NAME")
            .env_remove("GIT_AUTHOR_EMAIL")
            .env_remove("GIT_COMMITTER_NAME")
            .env_remove("GIT_COMMITTER_EMAIL")
            .env_remove("EMAIL")
            .output()
            .unwrap()
    };
    let workflow = gated(&repo);
    let started = without_identity(&["run", "--json", workflow.to_str().unwrap()]);
    assert_eq!(started.status.code(), Some(3), "{}", stderr_text(&started));
    let run_id = repo.only_run_id();
    let approved = without_identity(&["gate", "approve", &run_id, "--as", "lead"]);
    assert_eq!(
        approved.status.code(),
        Some(0),
        "{}",
        stderr_text(&approved)
    );

    let commit = metadata(&repo, &run_id)["result_commit"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        repo.repo.git(&["log", "-1", "--format=%an <%ae>", &commit]),
        "tnh-conductor <tnh-conductor@localhost>"
    );
    assert_eq!(
        first_event(&repo.events(&run_id), "run_committed")["identity"],
        "fallback"
    );
}

#[test]
fn land_fast_forwards_the_branch_the_run_started_from_and_says_so() {
    let repo = repo_with_identity();
    let run_id = approved_run(&repo);
    let commit = metadata(&repo, &run_id)["result_commit"]
        .as_str()
        .unwrap()
        .to_owned();

    let output = land(&repo, &[&run_id]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr_text(&output));
    assert!(
        stdout_text(&output).contains("into main (fast-forward)"),
        "{}",
        stdout_text(&output)
    );
    assert_eq!(repo.repo.git(&["rev-parse", "main"]), commit);
    // The operator's checkout followed: the file is there, index and files agree.
    assert_eq!(
        std::fs::read_to_string(repo.path().join("feature.txt")).unwrap(),
        "the feature"
    );
    assert_eq!(
        repo.repo
            .git(&["status", "--porcelain", "--untracked-files=no"]),
        ""
    );
    let landed = first_event(&repo.events(&run_id), "landed").clone();
    assert_eq!(
        (&landed["into"], &landed["mode"], &landed["commit"]),
        (
            &serde_json::json!("main"),
            &serde_json::json!("fast-forward"),
            &serde_json::json!(commit)
        )
    );
    assert!(landed["timestamp"].is_string());

    let show = stdout_text(&repo.conductor(&["runs", "show", &run_id]));
    assert!(
        show.contains(&format!("commit:    {commit}"))
            && show.contains("landed:    into main (fast-forward) at "),
        "{show}"
    );
    let list = stdout_text(&repo.conductor(&["runs", "list"]));
    assert!(list.contains("(landed: main)"), "{list}");
    let listed = stdout_text(&repo.conductor(&["runs", "list", "--json"]));
    assert!(listed.contains("\"landed\": \"main\""), "{listed}");
    let journal = stdout_text(&repo.conductor(&["journal"]));
    assert!(
        journal.contains("landed into main (fast-forward) at "),
        "{journal}"
    );
}

#[test]
fn land_makes_a_merge_commit_when_main_moved_since_the_run_started() {
    let repo = repo_with_identity();
    let run_id = approved_run(&repo);
    let commit = metadata(&repo, &run_id)["result_commit"]
        .as_str()
        .unwrap()
        .to_owned();
    commit_on_main(&repo, "other.txt", "meanwhile\n");
    let moved = repo.repo.git(&["rev-parse", "main"]);

    // `--ff-only` refuses, the default merges.
    refused(&repo, &[&run_id, "--ff-only"], "no fast-forward");
    let output = land(&repo, &[&run_id]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr_text(&output));
    assert_eq!(
        repo.repo.git(&["rev-parse", "main^1", "main^2"]),
        format!("{moved}\n{commit}")
    );
    assert_eq!(repo.repo.git(&["show", "main:feature.txt"]), "the feature");
    assert_eq!(repo.repo.git(&["show", "main:other.txt"]), "meanwhile");
    assert_eq!(
        std::fs::read_to_string(repo.path().join("feature.txt")).unwrap(),
        "the feature"
    );
    let message = repo.repo.git(&["log", "-1", "--format=%B", "main"]);
    assert!(message.contains(&format!("Tnh-Run: {run_id}")), "{message}");
    assert_eq!(
        first_event(&repo.events(&run_id), "landed")["mode"],
        "merge"
    );
}

#[test]
fn land_squash_makes_one_commit_with_the_run_message_on_the_moved_branch() {
    let repo = repo_with_identity();
    let run_id = approved_run(&repo);
    let commit = metadata(&repo, &run_id)["result_commit"]
        .as_str()
        .unwrap()
        .to_owned();
    commit_on_main(&repo, "other.txt", "meanwhile\n");
    let moved = repo.repo.git(&["rev-parse", "main"]);

    let output = land(&repo, &[&run_id, "--squash"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr_text(&output));
    assert_eq!(repo.repo.git(&["rev-parse", "main^@"]), moved);
    assert_eq!(
        repo.repo.git(&["log", "-1", "--format=%B", "main"]),
        repo.repo.git(&["log", "-1", "--format=%B", &commit])
    );
    assert_eq!(repo.repo.git(&["show", "main:feature.txt"]), "the feature");
    assert_eq!(repo.repo.git(&["show", "main:other.txt"]), "meanwhile");
}

#[test]
fn land_into_a_branch_not_checked_out_moves_only_the_ref() {
    let repo = repo_with_identity();
    let run_id = approved_run(&repo);
    repo.repo.git(&["branch", "release"]);
    let output = land(&repo, &[&run_id, "--into", "release"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr_text(&output));
    assert_eq!(
        repo.repo.git(&["rev-parse", "release"]),
        metadata(&repo, &run_id)["result_commit"].as_str().unwrap()
    );
    assert!(!repo.path().join("feature.txt").exists());
}

#[test]
fn land_refuses_a_dirty_checkout_and_changes_nothing() {
    let repo = repo_with_identity();
    let run_id = approved_run(&repo);
    repo.repo.write("README.md", "edited by hand\n");
    refused(&repo, &[&run_id], "README.md");
}

#[test]
fn land_refuses_a_conflict_naming_the_file_and_changes_nothing() {
    let repo = repo_with_identity();
    let run_id = approved_run(&repo);
    commit_on_main(&repo, "feature.txt", "another feature\n");
    let stderr = refused(&repo, &[&run_id], "conflicts");
    assert!(stderr.contains("feature.txt"), "{stderr}");
}

#[test]
fn land_refuses_a_run_that_did_not_succeed_whose_branch_stays_at_its_base() {
    let repo = repo_with_identity();
    let (run_id, _) = repo.run_exits(&gated(&repo), &[], 3);
    repo.conductor_exits(&["gate", "reject", &run_id, "--as", "lead", "--resume"], 1);
    let recorded = metadata(&repo, &run_id);
    let branch = recorded["branch"].as_str().unwrap();
    assert_eq!(
        repo.repo
            .git(&["rev-parse", &format!("refs/heads/{branch}")]),
        recorded["base_sha"].as_str().unwrap()
    );
    assert!(recorded.get("result_commit").is_none(), "{recorded:#}");
    refused(&repo, &[&run_id], "did not end in success");
}

#[test]
fn land_refuses_a_second_landing_and_changes_nothing() {
    let repo = repo_with_identity();
    let run_id = approved_run(&repo);
    repo.conductor_exits(&["land", &run_id], 0);
    refused(&repo, &[&run_id, "--into", "main"], "landed already");
}

/// A bare repository in a temporary folder, added as `origin`.
fn bare_origin(repo: &RunRepo) -> tempfile::TempDir {
    let remote = tempfile::tempdir().unwrap();
    git_in(remote.path(), &["init", "-q", "--bare"]);
    repo.repo
        .git(&["remote", "add", "origin", remote.path().to_str().unwrap()]);
    remote
}

#[test]
fn land_push_pushes_the_run_branch_and_leaves_local_branches_alone() {
    let repo = repo_with_identity();
    let run_id = approved_run(&repo);
    let remote = bare_origin(&repo);
    let main_before = repo.repo.git(&["rev-parse", "main"]);
    let recorded = metadata(&repo, &run_id);
    let branch = recorded["branch"].as_str().unwrap();

    let output = land(&repo, &[&run_id, "--push", "origin"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr_text(&output));
    assert_eq!(
        git_in(
            remote.path(),
            &["rev-parse", &format!("refs/heads/{branch}")]
        ),
        recorded["result_commit"].as_str().unwrap()
    );
    assert_eq!(repo.repo.git(&["rev-parse", "main"]), main_before);
    let landed = first_event(&repo.events(&run_id), "landed").clone();
    assert_eq!(landed["remote"], "origin");
    assert!(landed.get("into").is_none(), "{landed}");
    let show = stdout_text(&repo.conductor(&["runs", "show", &run_id]));
    assert!(show.contains("pushed:    to origin at "), "{show}");
}

/// A folder holding `gh` (a script that records its arguments, one per NUL-terminated entry,
/// and prints a URL) and `git`, for a `PATH` of its own.
fn fake_gh(dir: &Path, record: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = format!(
        "#!/bin/sh\nfor arg in \"$@\"; do printf '%s\\0' \"$arg\" >> '{}'; done\necho https://example.invalid/pull/7\n",
        record.display()
    );
    std::fs::write(bin.join("gh"), script).unwrap();
    std::fs::set_permissions(
        bin.join("gh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::os::unix::fs::symlink(real_git(), bin.join("git")).unwrap();
    bin
}

fn land_with_path(repo: &RunRepo, path: &Path, args: &[&str]) -> Output {
    conductor()
        .arg("--repo")
        .arg(repo.path())
        .arg("land")
        .args(args)
        .env("PATH", path)
        .output()
        .unwrap()
}

#[test]
fn land_pr_opens_a_pull_request_through_gh() {
    let repo = repo_with_identity();
    let run_id = approved_run(&repo);
    let _remote = bare_origin(&repo);
    let scratch = tempfile::tempdir().unwrap();
    let record = scratch.path().join("gh-args");
    let bin = fake_gh(scratch.path(), &record);

    let output = land_with_path(&repo, &bin, &[&run_id, "--push", "origin", "--pr"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr_text(&output));
    assert!(
        stdout_text(&output).contains("pull request: https://example.invalid/pull/7"),
        "{}",
        stdout_text(&output)
    );
    let recorded = std::fs::read_to_string(&record).unwrap();
    let args: Vec<&str> = recorded.split('\0').filter(|arg| !arg.is_empty()).collect();
    let branch = metadata(&repo, &run_id)["branch"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        args[..9],
        [
            "pr",
            "create",
            "--head",
            branch.as_str(),
            "--base",
            "main",
            "--title",
            &format!("gated: Approve the feature of {run_id}"),
            "--body"
        ]
    );
    let body = args[9];
    for part in [
        "### Steps",
        "- implement #1 (RUN_AGENT): completed",
        "### Approved by",
        "- lead",
        &format!("Run `{run_id}`"),
    ] {
        assert!(body.contains(part), "{part} not in {body}");
    }
    let landings = &metadata(&repo, &run_id)["landings"];
    assert_eq!(
        landings[0]["pull_request"],
        "https://example.invalid/pull/7"
    );
}

#[test]
fn land_pr_without_gh_prints_the_command() {
    let repo = repo_with_identity();
    let run_id = approved_run(&repo);
    let _remote = bare_origin(&repo);
    let scratch = tempfile::tempdir().unwrap();
    let bin = scratch.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(real_git(), bin.join("git")).unwrap();

    let output = land_with_path(&repo, &bin, &[&run_id, "--push", "origin", "--pr"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr_text(&output));
    assert!(
        stderr_text(&output).contains("`gh` is not on PATH"),
        "{}",
        stderr_text(&output)
    );
    let branch = metadata(&repo, &run_id)["branch"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        stdout_text(&output).contains(&format!(
            "gh pr create --head {branch} --base main --title 'gated: Approve the feature of {run_id}' --body '"
        )),
        "{}",
        stdout_text(&output)
    );
}

#[test]
fn land_pr_needs_push() {
    let repo = repo_with_identity();
    let output = land(&repo, &["20260101T000000Z-abcdef", "--pr"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr_text(&output));
}

#[test]
fn a_squash_landing_interrupted_before_it_was_recorded_is_not_made_twice() {
    let repo = repo_with_identity();
    let run_id = approved_run(&repo);
    commit_on_main(&repo, "other.txt", "meanwhile\n");
    repo.conductor_exits(&["land", &run_id, "--squash"], 0);
    // As if the process had died after moving `main`, before recording the landing.
    let events = repo.run_dir(&run_id).join("events.ndjson");
    let text = std::fs::read_to_string(&events).unwrap();
    let kept: Vec<&str> = text
        .lines()
        .filter(|line| !line.contains("\"landed\""))
        .collect();
    std::fs::write(&events, format!("{}\n", kept.join("\n"))).unwrap();
    let metadata_path = repo.run_dir(&run_id).join("metadata.json");
    let mut recorded = metadata(&repo, &run_id);
    recorded.as_object_mut().unwrap().remove("landings");
    std::fs::write(&metadata_path, recorded.to_string()).unwrap();

    refused(
        &repo,
        &[&run_id, "--squash"],
        "already holds the run's change",
    );
}
