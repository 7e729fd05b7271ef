//! `tnh-conductor rollback` and `tnh-conductor runs clean` against run directories laid out as
//! the run directory layout (`<repo>/.tnh/run/<run_id>/metadata.json`).

use std::path::Path;

use tnh_conductor::workspace::Workspace;

use crate::support::{TempRepo, conductor, stderr_text, stdout_text};
use crate::workspace::{create, put};

/// Writes the run's `metadata.json` as the kernel would (with fields this module ignores).
pub fn write_metadata(repo: &Path, workspace: &Workspace, ended_at: Option<&str>) {
    let record = workspace.record();
    let metadata = serde_json::json!({
        "run_id": record.run_id,
        "workflow_id": "wf",
        "started_at": "2026-04-01T00:00:00Z",
        "ended_at": ended_at,
        "repo_root": record.repo_root,
        "worktree_path": record.worktree_path,
        "branch": record.branch,
        "base_ref": record.base_ref,
        "base_sha": record.base_sha,
        "params": {},
    });
    put(
        repo,
        &format!(".tnh/run/{}/metadata.json", record.run_id),
        serde_json::to_vec_pretty(&metadata).unwrap(),
    );
}

fn run_in(repo: &Path, args: &[&str]) -> std::process::Output {
    conductor()
        .arg("--repo")
        .arg(repo)
        .args(args)
        .output()
        .expect("run tnh-conductor")
}

#[test]
fn rollback_command_restores_the_worktree_and_keeps_a_record() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "cli-run");
    write_metadata(repo.path(), &workspace, None);
    put(workspace.path(), "README.md", "agent was here\n");
    put(workspace.path(), "extra/file.txt", "x\n");

    let output = run_in(repo.path(), &["rollback", "cli-run", "--target", "pre_run"]);

    assert!(output.status.success(), "{}", stderr_text(&output));
    let stdout = stdout_text(&output);
    assert!(
        stdout.contains("rolled back run cli-run to pre_run"),
        "{stdout}"
    );
    assert!(stdout.contains("2 files changed"), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("README.md")).unwrap(),
        "# test repository\n"
    );
    assert!(!workspace.path().join("extra").exists());
    let saved =
        std::fs::read_to_string(repo.path().join(".tnh/run/cli-run/rollbacks/1.json")).unwrap();
    let saved: serde_json::Value = serde_json::from_str(&saved).unwrap();
    assert_eq!(saved["target"], "pre_run");
    assert_eq!(saved["before"]["files_changed"], 2);
}

#[test]
fn rollback_command_prints_json_on_request() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "cli-json");
    write_metadata(repo.path(), &workspace, None);
    let output = run_in(repo.path(), &["rollback", "cli-json", "--json"]);
    assert!(output.status.success(), "{}", stderr_text(&output));
    let record: serde_json::Value = serde_json::from_str(&stdout_text(&output)).unwrap();
    assert_eq!(record["run_id"], "cli-json");
    assert_eq!(record["after"]["files_changed"], 0);
}

#[test]
fn rollback_command_refuses_an_unknown_run() {
    let repo = TempRepo::new();
    let output = run_in(repo.path(), &["rollback", "20260101T000000Z-nope00"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = stderr_text(&output);
    assert!(
        stderr.contains("run `20260101T000000Z-nope00`: no such run"),
        "{stderr}"
    );
    assert!(stderr.contains("hint"), "{stderr}");
    let output = run_in(repo.path(), &["rollback", "../../etc"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr_text(&output).contains("not a run id"));
}

#[test]
fn rollback_command_refuses_pre_step_without_a_snapshot_and_unknown_targets() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "cli-nostep");
    write_metadata(repo.path(), &workspace, None);
    let output = run_in(
        repo.path(),
        &["rollback", "cli-nostep", "--target", "pre_step"],
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr_text(&output).contains("has no `pre_step` snapshot"),
        "{}",
        stderr_text(&output)
    );
    let output = run_in(
        repo.path(),
        &["rollback", "cli-nostep", "--target", "checkpoint:a"],
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr_text(&output).contains("reserved"));
}

#[test]
fn runs_clean_removes_only_finished_runs_worktrees_and_keeps_evidence() {
    let repo = TempRepo::new();
    let old = create(&repo, "old-run");
    write_metadata(repo.path(), &old, Some("2020-01-01T00:00:00Z"));
    let recent = create(&repo, "recent-run");
    write_metadata(repo.path(), &recent, Some("2999-01-01T00:00:00Z"));
    let running = create(&repo, "running-run");
    write_metadata(repo.path(), &running, None);

    let output = run_in(repo.path(), &["runs", "clean", "--older-than", "7d"]);

    assert!(output.status.success(), "{}", stderr_text(&output));
    assert!(
        stdout_text(&output).starts_with(
            "removed worktree of old-run (its last state is kept at refs/tnh/runs/old-run/final"
        ),
        "{}",
        stdout_text(&output)
    );
    assert_eq!(stdout_text(&output).lines().count(), 1);
    assert!(stderr_text(&output).contains("kept running-run: not ended"));
    assert!(!old.path().exists());
    assert!(recent.path().exists() && running.path().exists());
    assert!(
        repo.path().join(".tnh/run/old-run/metadata.json").exists(),
        "run directory kept"
    );
    assert_eq!(
        repo.git(&["rev-parse", "tnh/wf/old-run"]),
        old.record().base_sha,
        "branch kept"
    );
    repo.git(&["rev-parse", "refs/tnh/runs/old-run/pre_run"]);
    assert!(!repo.git(&["worktree", "list"]).contains("old-run"));
}

#[test]
fn runs_clean_all_removes_run_directories_refs_and_branches() {
    let repo = TempRepo::new();
    let done = create(&repo, "done-run");
    write_metadata(repo.path(), &done, Some("2020-01-01T00:00:00Z"));
    let running = create(&repo, "live-run");
    write_metadata(repo.path(), &running, None);

    let output = run_in(repo.path(), &["runs", "clean", "--all"]);

    assert!(output.status.success(), "{}", stderr_text(&output));
    assert!(!repo.path().join(".tnh/run/done-run").exists());
    assert_eq!(repo.git(&["for-each-ref", "refs/tnh/runs/done-run/"]), "");
    assert_eq!(repo.git(&["branch", "--list", "tnh/wf/done-run"]), "");
    assert!(repo.path().join(".tnh/run/live-run/metadata.json").exists());
    assert!(running.path().exists());
}

#[test]
fn runs_clean_refuses_a_bad_duration() {
    let repo = TempRepo::new();
    let output = run_in(repo.path(), &["runs", "clean", "--older-than", "soon"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr_text(&output).contains("invalid --older-than: `soon` is not a duration"));
}

#[test]
fn a_missing_git_is_reported_as_such() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "no-git");
    write_metadata(repo.path(), &workspace, None);
    let empty = tempfile::tempdir().unwrap();
    let output = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["rollback", "no-git"])
        .env("PATH", empty.path())
        .output()
        .expect("run tnh-conductor");
    assert_eq!(output.status.code(), Some(4));
    let stderr = stderr_text(&output);
    assert!(
        stderr.contains("`git` is not installed or not on PATH"),
        "{stderr}"
    );
    assert!(stderr.contains("hint: install git"), "{stderr}");
}

#[test]
fn rollback_checks_a_deleted_worktree_out_again_and_rolls_it_back() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "deleted");
    write_metadata(repo.path(), &workspace, None);
    put(workspace.path(), "README.md", "agent was here\n");
    std::fs::remove_dir_all(workspace.path()).unwrap();

    let output = run_in(repo.path(), &["rollback", "deleted", "--target", "pre_run"]);

    assert!(output.status.success(), "{}", stderr_text(&output));
    assert!(
        stderr_text(&output).contains("the worktree folder was gone"),
        "{}",
        stderr_text(&output)
    );
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("README.md")).unwrap(),
        "# test repository\n"
    );
    let head = crate::support::git_in(workspace.path(), &["symbolic-ref", "HEAD"]);
    assert_eq!(head, workspace.branch_ref());
}

#[test]
fn rollback_of_a_deleted_worktree_without_its_branch_says_what_is_gone() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "gone");
    write_metadata(repo.path(), &workspace, None);
    std::fs::remove_dir_all(workspace.path()).unwrap();
    repo.git(&["worktree", "prune"]);
    repo.git(&["branch", "-D", &workspace.record().branch]);

    let output = run_in(repo.path(), &["rollback", "gone"]);

    assert_eq!(output.status.code(), Some(4), "{}", stderr_text(&output));
    assert!(
        stderr_text(&output).contains("its branch `tnh/wf/gone` are both gone"),
        "{}",
        stderr_text(&output)
    );
}

/// Writes a run folder `<repo>/.tnh/run/<run_id>/metadata.json` as an agent can forge it: a
/// well-formed record of a run that ended long ago, with `fields` changed.
fn forge_run(repo: &Path, run_id: &str, fields: serde_json::Value) {
    let root = repo.canonicalize().unwrap();
    let mut metadata = serde_json::json!({
        "run_id": run_id,
        "workflow_id": "wf",
        "started_at": "2020-01-01T00:00:00Z",
        "ended_at": "2020-01-01T00:00:00Z",
        "repo_root": root,
        "worktree_path": root.join(".tnh/worktrees").join(run_id),
        "branch": format!("tnh/wf/{run_id}"),
        "base_ref": "HEAD",
        "base_sha": "0".repeat(40),
    });
    for (key, value) in fields.as_object().unwrap() {
        metadata[key] = value.clone();
    }
    put(
        repo,
        &format!(".tnh/run/{run_id}/metadata.json"),
        serde_json::to_vec_pretty(&metadata).unwrap(),
    );
}

/// The operator's linked worktree `feature` (`git worktree add`) beside `repo`, on its own
/// branch, with an uncommitted file; returns its folder (kept while the guard lives).
fn operators_linked_worktree(repo: &TempRepo) -> (tempfile::TempDir, std::path::PathBuf) {
    let parent = tempfile::tempdir().unwrap();
    let feature = parent.path().join("feature");
    repo.git(&[
        "worktree",
        "add",
        "-q",
        "-b",
        "feature",
        feature.to_str().unwrap(),
    ]);
    put(&feature, "uncommitted.txt", "the operator's work\n");
    (parent, feature)
}

/// An agent can write `<repo>/.tnh/run/<id>/metadata.json`, and `runs clean`
/// trusted every field of it: `branch: main` made `runs clean --all` delete `refs/heads/main`,
/// a `worktree_path` naming the operator's linked worktree made plain `runs clean`
/// force-remove it, uncommitted files and all, and `repo_root` could name another repository.
/// Now a record that names anything but what its run can own is skipped and reported, and
/// `rollback` refuses it.
#[test]
fn runs_clean_and_rollback_never_touch_what_a_forged_run_folder_names() {
    let repo = TempRepo::new();
    let main = repo.git(&["rev-parse", "refs/heads/main"]);
    let (_parent, feature) = operators_linked_worktree(&repo);
    let other = TempRepo::new();
    let other_id = "20200101T000000Z-cccccc";
    other.git(&["branch", &format!("tnh/wf/{other_id}")]);
    let other_root = other.path().canonicalize().unwrap();
    let forged = [
        (
            "20200101T000000Z-aaaaaa",
            serde_json::json!({"branch": "main"}),
            "branch `main`",
        ),
        (
            "20200101T000000Z-bbbbbb",
            serde_json::json!({"worktree_path": feature}),
            "worktree_path",
        ),
        (
            other_id,
            serde_json::json!({
                "repo_root": other_root,
                "worktree_path": other_root.join(".tnh/worktrees").join(other_id),
            }),
            "is not this repository",
        ),
        (
            "20200101T000000Z-dddddd",
            serde_json::json!({"run_id": "20200101T000000Z-eeeeee"}),
            "not the run of its folder",
        ),
    ];
    for (run_id, fields, _) in &forged {
        forge_run(repo.path(), run_id, fields.clone());
    }

    let plain = run_in(repo.path(), &["runs", "clean"]);
    let all = run_in(repo.path(), &["runs", "clean", "--all"]);

    for output in [&plain, &all] {
        assert!(output.status.success(), "{}", stderr_text(output));
        assert_eq!(stdout_text(output), "", "nothing removed");
        let stderr = stderr_text(output);
        for (run_id, _, why) in &forged {
            assert!(
                stderr.contains(&format!("skipped {run_id}:"))
                    && stderr.contains("is not valid run metadata")
                    && stderr.contains(why),
                "{run_id}: {stderr}"
            );
        }
    }
    assert_eq!(repo.git(&["rev-parse", "refs/heads/main"]), main);
    assert!(feature.join("uncommitted.txt").is_file());
    assert!(repo.git(&["worktree", "list"]).contains("feature"));
    other.git(&["rev-parse", &format!("refs/heads/tnh/wf/{other_id}")]);
    for (run_id, _, _) in &forged {
        assert!(repo.path().join(".tnh/run").join(run_id).is_dir());
        let rollback = run_in(repo.path(), &["rollback", run_id, "--target", "pre_run"]);
        assert_eq!(
            rollback.status.code(),
            Some(2),
            "{}",
            stderr_text(&rollback)
        );
        assert!(
            stderr_text(&rollback).contains("is not valid run metadata"),
            "{}",
            stderr_text(&rollback)
        );
    }
    assert_eq!(repo.git(&["rev-parse", "refs/heads/main"]), main);
}

/// A run's worktree folder replaced by a link
/// to the operator's linked worktree made `runs clean` hand the link to `git worktree
/// remove`, which resolves it to the operator's worktree; only git's own check ("does not
/// point back") stopped it, and `runs clean` failed. The link is removed, never followed,
/// and the run's worktree cleaned.
#[test]
fn runs_clean_removes_a_link_in_place_of_a_runs_worktree_not_what_it_leads_to() {
    let repo = TempRepo::new();
    let (_parent, feature) = operators_linked_worktree(&repo);
    let workspace = create(&repo, "linked-away");
    write_metadata(repo.path(), &workspace, Some("2020-01-01T00:00:00Z"));
    std::fs::remove_dir_all(workspace.path()).unwrap();
    std::os::unix::fs::symlink(&feature, workspace.path()).unwrap();

    let output = run_in(repo.path(), &["runs", "clean"]);

    assert!(output.status.success(), "{}", stderr_text(&output));
    assert_eq!(stdout_text(&output), "removed worktree of linked-away\n");
    assert!(feature.join("uncommitted.txt").is_file());
    assert!(repo.git(&["worktree", "list"]).contains("feature"));
    assert!(std::fs::symlink_metadata(workspace.path()).is_err());
    assert!(!repo.git(&["worktree", "list"]).contains("linked-away"));
}

/// `runs clean` removed the worktree of every ended run,
/// and with it the only copy of the agents' work, which they leave uncommitted (the work
/// branch still names the base; the snapshots are taken before each step). The worktree's
/// last state is kept as `refs/tnh/runs/<id>/final` first; `--all` removes it with the refs.
#[test]
fn runs_clean_keeps_the_last_state_of_a_worktree_it_removes() {
    let repo = TempRepo::new();
    let run = create(&repo, "worked-run");
    put(run.path(), "feature.txt", "the agent's work\n");
    put(run.path(), "nested/new/deep.txt", "deep\n");
    let tracked = repo.git(&["ls-files"]);
    let first = tracked.lines().next().unwrap().to_owned();
    std::fs::remove_file(run.path().join(&first)).unwrap();
    write_metadata(repo.path(), &run, Some("2020-01-01T00:00:00Z"));

    let output = run_in(repo.path(), &["runs", "clean"]);
    assert!(output.status.success(), "{}", stderr_text(&output));
    assert!(!run.path().exists());
    let kept = "refs/tnh/runs/worked-run/final";
    assert!(
        stdout_text(&output).contains(kept),
        "{}",
        stdout_text(&output)
    );
    assert_eq!(
        repo.git(&["show", &format!("{kept}:feature.txt")]),
        "the agent's work"
    );
    assert_eq!(
        repo.git(&["show", &format!("{kept}:nested/new/deep.txt")]),
        "deep"
    );
    let files = repo.git(&["ls-tree", "-r", "--name-only", kept]);
    assert!(!files.lines().any(|file| file == first), "{files}");
    assert_eq!(
        repo.git(&["rev-parse", &format!("{kept}^")]),
        run.record().base_sha,
        "a commit on the base, like the snapshots"
    );

    let all = run_in(repo.path(), &["runs", "clean", "--all"]);
    assert!(all.status.success(), "{}", stderr_text(&all));
    assert_eq!(repo.git(&["for-each-ref", "refs/tnh/runs/worked-run/"]), "");
}

/// A finished run with uncommitted work in its worktree, and its refs as `git for-each-ref`
/// lists them.
fn finished_run_with_work(repo: &TempRepo, run_id: &str) -> Workspace {
    let run = create(repo, run_id);
    write_metadata(repo.path(), &run, Some("2020-01-01T00:00:00Z"));
    put(run.path(), "work.txt", "the run's uncommitted work\n");
    run
}

/// `runs clean` wrote `refs/tnh/runs/<B>/final` (and removed B's worktree)
/// without taking B's lock. Run A's guard, whose step was running meanwhile — or checking the
/// interrupted step of a killed run A on resume, from its saved state — saw a new ref of a run
/// that was not driven, deleted it as an agent's tampering (the only copy of B's uncommitted
/// work) and failed A. Now `runs clean` holds B's lock while it works, A's guard sees B was
/// worked on, and the `final` ref is left as B's, listed in `other_runs_refs_changed`.
#[test]
fn runs_clean_during_another_runs_step_leaves_the_final_ref_to_the_cleaned_run() {
    for from_saved_state in [false, true] {
        let repo = TempRepo::new();
        let cleaned = finished_run_with_work(&repo, "cleaned-run");
        let stepping = create(&repo, "stepping-run");
        write_metadata(repo.path(), &stepping, None);
        let mut guard = stepping.guard(&[]).unwrap();
        if from_saved_state {
            // The step's process died; `resume` checks the step from what was saved.
            let saved = serde_json::to_string(&guard.state()).unwrap();
            guard = stepping
                .guard_from_state(serde_json::from_str(&saved).unwrap())
                .unwrap();
        }

        let output = run_in(repo.path(), &["runs", "clean"]);
        assert!(output.status.success(), "{}", stderr_text(&output));
        assert!(!cleaned.path().exists());
        let report = guard.check().unwrap().report;

        let final_ref = "refs/tnh/runs/cleaned-run/final";
        let kept = repo.git(&["show", &format!("{final_ref}:work.txt")]);
        assert_eq!(kept, "the run's uncommitted work", "{from_saved_state}");
        assert!(
            report.ref_changes.is_empty(),
            "{from_saved_state}: {report:?}"
        );
        assert_eq!(
            report.other_runs_refs_changed,
            [final_ref],
            "{from_saved_state}"
        );
    }
}

/// A run whose lock another process holds (a `resume`, a gate
/// decision, another `runs clean`) is skipped, saying who holds it; before, `runs clean`
/// removed it from under that process (two `runs clean --all` at once failed with exit 4,
/// racing on the same run).
#[test]
fn runs_clean_skips_a_run_whose_lock_another_process_holds() {
    use tnh_conductor::kernel::lock::RunLock;
    for all in [false, true] {
        let repo = TempRepo::new();
        let held = finished_run_with_work(&repo, "held-run");
        let free = finished_run_with_work(&repo, "free-run");
        let holder = RunLock::acquire(&repo.path().join(".tnh/run/held-run/lock")).unwrap();
        let args: &[&str] = if all {
            &["runs", "clean", "--all"]
        } else {
            &["runs", "clean"]
        };

        let output = run_in(repo.path(), args);

        assert!(output.status.success(), "{}", stderr_text(&output));
        let stderr = stderr_text(&output);
        assert!(
            stderr.contains(&format!(
                "skipped held-run: run is being driven by process {}",
                std::process::id()
            )),
            "{stderr}"
        );
        assert!(held.path().join("work.txt").exists(), "{all}");
        assert!(repo.path().join(".tnh/run/held-run/metadata.json").exists());
        assert!(!free.path().exists(), "{all}");
        assert_eq!(
            repo.path().join(".tnh/run/free-run").exists(),
            !all,
            "{all}"
        );
        drop(holder);
        let output = run_in(repo.path(), args);
        assert!(output.status.success(), "{}", stderr_text(&output));
        assert!(!held.path().exists(), "{all}: cleaned once free");
    }
}

/// A `runs clean --all` killed while it deleted a run directory left one
/// without `metadata.json`, which no command could remove and which every journal listed as
/// a blocker. The directory is now renamed to `.tnh/run/.removing-<id>` in one step before it
/// is deleted; a folder left so (the state a kill leaves) is listed nowhere and the next
/// `runs clean` finishes removing it.
#[test]
fn runs_clean_finishes_a_run_directory_an_interrupted_clean_set_aside() {
    let repo = TempRepo::new();
    let run_id = "20260101T000000Z-abc123";
    let trash = repo.path().join(format!(".tnh/run/.removing-{run_id}"));
    // What a kill part-way through the deletion leaves: no metadata, some artifacts.
    put(&trash, "artifacts/work/1/result.json", "{}\n");
    put(&trash, "status.json", "{}\n");

    let listed = run_in(repo.path(), &["runs", "list"]);
    assert!(listed.status.success(), "{}", stderr_text(&listed));
    assert!(
        !stdout_text(&listed).contains(run_id),
        "{}",
        stdout_text(&listed)
    );
    let journal = run_in(repo.path(), &["journal"]);
    assert!(
        !stdout_text(&journal).contains(run_id),
        "{}",
        stdout_text(&journal)
    );

    let output = run_in(repo.path(), &["runs", "clean"]);

    assert!(output.status.success(), "{}", stderr_text(&output));
    assert!(!trash.exists());
    assert!(
        stdout_text(&output).contains(&format!("finished removing {run_id}")),
        "{}",
        stdout_text(&output)
    );
    assert!(
        !stderr_text(&output).contains("skipped"),
        "{}",
        stderr_text(&output)
    );
}
