//! Rollback: the worktree's files equal the snapshot exactly afterwards, untracked files
//! included, and the work branch's HEAD is back at the snapshot's base.

use std::path::Path;

use tnh_conductor::ids::StepId;
use tnh_conductor::workspace::{RollbackTarget, WorkspaceError};

use crate::support::git_in;
use crate::workspace::{chmod, create, put, read, rich_repo};

/// `git status --porcelain --ignored` in `dir`: empty when the worktree equals HEAD exactly.
fn status_with_ignored(dir: &Path) -> String {
    git_in(
        dir,
        &[
            "status",
            "--porcelain",
            "--ignored",
            "--untracked-files=all",
        ],
    )
}

/// An agent that makes every kind of change, commits some of it and leaves the rest.
fn messy_agent(dir: &Path) {
    put(dir, "src/lib.rs", "pub fn a() { rewritten() }\n");
    std::fs::remove_file(dir.join("doomed.txt")).unwrap();
    git_in(dir, &["mv", "src/old_name.rs", "src/renamed.rs"]);
    chmod(&dir.join("script.sh"), 0o755);
    std::os::unix::fs::symlink("/etc/passwd", dir.join("docs/passwd")).unwrap();
    put(dir, "committed.txt", "agent commit\n");
    git_in(dir, &["add", "committed.txt"]);
    git_in(dir, &["commit", "-q", "-m", "agent commit"]);
    put(dir, "brand/new/nested/dirs/file.txt", "untracked\n");
    put(dir, "top.txt", "untracked\n");
    put(dir, "build/artifact.o", [0u8, 1, 2]);
    put(dir, "trace.log", "ignored\n");
    git_in(dir, &["init", "-q", "nested-repo"]);
}

#[test]
fn rollback_to_pre_run_restores_every_kind_of_change() {
    let repo = rich_repo();
    let workspace = create(&repo, "undo-all");
    let dir = workspace.path();
    let base = workspace.record().base_sha.clone();
    messy_agent(dir);
    let undone = workspace
        .status_since(&workspace.pre_run().unwrap())
        .unwrap()
        .diffstat;

    let record = workspace.rollback(RollbackTarget::PreRun).unwrap();

    assert_eq!(
        status_with_ignored(dir),
        "",
        "no file differs from the base, ignored ones included"
    );
    assert_eq!(git_in(dir, &["rev-parse", "HEAD"]), base);
    assert_eq!(
        git_in(dir, &["symbolic-ref", "HEAD"]),
        workspace.branch_ref()
    );
    assert_eq!(read(dir, "doomed.txt"), "delete me\n");
    assert_eq!(
        read(dir, "src/old_name.rs"),
        "// to be renamed\nfn renamed() {}\nfn also() {}\n"
    );
    assert!(!dir.join("src/renamed.rs").exists());
    assert!(
        !dir.join("brand").exists(),
        "nested new directories are removed"
    );
    assert!(!dir.join("nested-repo").exists());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.join("script.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0, "mode change undone");
    assert_eq!(record.target, RollbackTarget::PreRun);
    assert_eq!(record.head_after, base);
    assert_ne!(record.head_before, base);
    // Counted while the reset ran, the undone change is the one a status saw before it.
    assert!(record.before.files_changed >= 8, "{:?}", record.before);
    assert_eq!(record.before, undone);
    assert!(record.after.is_empty(), "{:?}", record.after);
    let json = serde_json::to_value(&record).unwrap();
    assert_eq!(json["target"], "pre_run");
    assert_eq!(json["schema_version"], 1);
    let schema = tnh_conductor::workspace::rollback_record_schema();
    assert!(schema["properties"]["before"].is_object(), "{schema}");
}

#[test]
fn rollback_to_pre_step_restores_the_snapshot_with_its_untracked_files() {
    let repo = rich_repo();
    let workspace = create(&repo, "undo-step");
    let dir = workspace.path();
    // Step one: a commit, an uncommitted edit, an untracked file, a deletion.
    put(dir, "feature.rs", "fn feature() {}\n");
    git_in(dir, &["add", "feature.rs"]);
    git_in(dir, &["commit", "-q", "-m", "step one"]);
    let step_one_head = git_in(dir, &["rev-parse", "HEAD"]);
    put(dir, "src/lib.rs", "pub fn a() { step_one() }\n");
    put(dir, "notes/todo.txt", "step one notes\n");
    std::fs::remove_file(dir.join("doomed.txt")).unwrap();
    let snapshot = workspace.snapshot_pre_step(&StepId::new("fix"), 1).unwrap();
    let status_at_snapshot = git_in(dir, &["status", "--porcelain"]);
    // Step two: everything goes wrong.
    put(dir, "notes/todo.txt", "overwritten\n");
    std::fs::remove_file(dir.join("src/lib.rs")).unwrap();
    put(dir, "junk/a/b.txt", "junk\n");
    put(dir, "doomed.txt", "resurrected\n");
    git_in(dir, &["add", "-A"]);
    git_in(dir, &["commit", "-q", "-m", "step two"]);
    git_in(dir, &["checkout", "-q", "--detach"]);

    let record = workspace.rollback(RollbackTarget::PreStep).unwrap();

    assert_eq!(record.snapshot, snapshot);
    assert_eq!(
        git_in(dir, &["rev-parse", "HEAD"]),
        step_one_head,
        "HEAD at the snapshot's base"
    );
    assert_eq!(
        git_in(dir, &["symbolic-ref", "HEAD"]),
        workspace.branch_ref()
    );
    assert_eq!(git_in(dir, &["status", "--porcelain"]), status_at_snapshot);
    assert_eq!(read(dir, "notes/todo.txt"), "step one notes\n");
    assert_eq!(read(dir, "src/lib.rs"), "pub fn a() { step_one() }\n");
    assert!(!dir.join("doomed.txt").exists());
    assert!(!dir.join("junk").exists());
    assert!(record.after.is_empty(), "{:?}", record.after);
    assert_eq!(workspace.status_since(&snapshot).unwrap().files, vec![]);
}

#[test]
fn rollback_to_pre_step_keeps_ignored_build_output() {
    let repo = rich_repo();
    let workspace = create(&repo, "keep-ignored");
    let dir = workspace.path();
    put(dir, "build/cache.o", "expensive\n");
    workspace.snapshot_pre_step(&StepId::new("s"), 1).unwrap();
    put(dir, "src/lib.rs", "broken\n");
    workspace.rollback(RollbackTarget::PreStep).unwrap();
    assert_eq!(read(dir, "build/cache.o"), "expensive\n");
    assert_eq!(read(dir, "src/lib.rs"), "pub fn a() {}\n");
}

#[test]
fn rollback_to_pre_step_without_a_snapshot_is_refused() {
    let repo = rich_repo();
    let workspace = create(&repo, "no-step");
    put(workspace.path(), "kept.txt", "x\n");
    let error = workspace.rollback(RollbackTarget::PreStep).unwrap_err();
    assert!(
        matches!(error, WorkspaceError::NoSnapshot { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("has no `pre_step` snapshot"));
    assert!(
        workspace.path().join("kept.txt").exists(),
        "nothing was changed"
    );
}

#[test]
fn rollback_is_deterministic_when_repeated() {
    let repo = rich_repo();
    let workspace = create(&repo, "twice");
    messy_agent(workspace.path());
    workspace.rollback(RollbackTarget::PreRun).unwrap();
    let again = workspace.rollback(RollbackTarget::PreRun).unwrap();
    assert!(again.before.is_empty() && again.after.is_empty());
    assert_eq!(again.head_before, again.head_after);
}

#[test]
fn rollback_targets_parse_and_reject_checkpoints() {
    assert_eq!(
        "pre_run".parse::<RollbackTarget>(),
        Ok(RollbackTarget::PreRun)
    );
    assert_eq!(
        "pre_step".parse::<RollbackTarget>(),
        Ok(RollbackTarget::PreStep)
    );
    assert!(
        "checkpoint:x"
            .parse::<RollbackTarget>()
            .unwrap_err()
            .contains("reserved")
    );
    assert!("latest".parse::<RollbackTarget>().is_err());
}

#[test]
fn rollback_recreates_a_deleted_work_branch() {
    let repo = rich_repo();
    let workspace = create(&repo, "lost-branch");
    let dir = workspace.path();
    git_in(dir, &["checkout", "-q", "--detach"]);
    git_in(dir, &["branch", "-D", "tnh/wf/lost-branch"]);
    put(dir, "junk.txt", "junk\n");
    let reopened = tnh_conductor::workspace::Workspace::open(workspace.record()).unwrap();

    reopened.rollback(RollbackTarget::PreRun).unwrap();

    assert_eq!(
        git_in(dir, &["symbolic-ref", "HEAD"]),
        workspace.branch_ref()
    );
    assert_eq!(
        repo.git(&["rev-parse", "tnh/wf/lost-branch"]),
        workspace.record().base_sha
    );
    assert!(!dir.join("junk.txt").exists());
}

#[test]
fn files_the_agent_told_git_to_leave_alone_are_rolled_back_and_captured_afterwards() {
    let repo = rich_repo();
    let workspace = create(&repo, "flags");
    let dir = workspace.path();
    // `assume-unchanged` and `skip-worktree` make git ignore a file's changes: `reset --hard`
    // would keep them and `status` would call the result exact.
    git_in(dir, &["update-index", "--assume-unchanged", "src/lib.rs"]);
    git_in(dir, &["update-index", "--skip-worktree", "docs/guide.md"]);
    put(dir, "src/lib.rs", "pub fn a() { hidden() }\n");
    put(dir, "docs/guide.md", "# rewritten\n");

    let record = workspace.rollback(RollbackTarget::PreRun).unwrap();

    assert_eq!(record.before.files_changed, 2, "{record:?}");
    assert!(record.after.is_empty(), "{record:?}");
    assert_eq!(read(dir, "src/lib.rs"), "pub fn a() {}\n");
    assert_eq!(read(dir, "docs/guide.md"), "# guide\n");
    assert_eq!(
        git_in(dir, &["ls-files", "-v", "src/lib.rs", "docs/guide.md"]),
        "H docs/guide.md\nH src/lib.rs"
    );
    // The index the next captures start from does not hide these files either.
    put(dir, "src/lib.rs", "pub fn a() { later() }\n");
    let status = workspace
        .status_since(&workspace.pre_run().unwrap())
        .unwrap();
    assert_eq!(status.files.len(), 1, "{status:?}");
    assert_eq!(status.files[0].path, "src/lib.rs");
}

#[test]
fn a_sparse_checkout_the_agent_set_up_is_rolled_back_to_every_file() {
    let repo = rich_repo();
    let workspace = create(&repo, "sparse");
    let dir = workspace.path();
    git_in(dir, &["sparse-checkout", "set", "src"]);
    assert!(
        !dir.join("docs/guide.md").exists(),
        "outside the sparse patterns"
    );

    let record = workspace.rollback(RollbackTarget::PreRun).unwrap();

    assert!(record.after.is_empty(), "{record:?}");
    assert_eq!(read(dir, "doomed.txt"), "delete me\n");
    assert_eq!(read(dir, "docs/guide.md"), "# guide\n");
    assert_eq!(
        git_in(dir, &["ls-files", "-t", "docs/guide.md"]),
        "H docs/guide.md"
    );
}

#[test]
fn locks_left_by_an_agent_killed_inside_git_do_not_stop_a_rollback() {
    let repo = rich_repo();
    let workspace = create(&repo, "locked");
    let dir = workspace.path();
    put(dir, "src/lib.rs", "pub fn a() { changed() }\n");
    let admin = std::path::PathBuf::from(git_in(dir, &["rev-parse", "--absolute-git-dir"]));
    let branch_lock = repo
        .path()
        .join(".git")
        .join(format!("{}.lock", workspace.branch_ref()));
    for lock in [
        admin.join("index.lock"),
        admin.join("HEAD.lock"),
        branch_lock,
    ] {
        std::fs::write(lock, "").unwrap();
    }

    let record = workspace.rollback(RollbackTarget::PreRun).unwrap();

    assert!(record.after.is_empty(), "{record:?}");
    assert_eq!(read(dir, "src/lib.rs"), "pub fn a() {}\n");
    assert!(!admin.join("index.lock").exists());
}

/// Gives every file of the nested repository `nested` (but its `.git`) a new modification
/// time, contents unchanged: a `git status` inside it must then read the files again, through
/// their filters.
fn stir(nested: &Path, seconds: u64) {
    for entry in std::fs::read_dir(nested).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            let later = std::time::SystemTime::now() + std::time::Duration::from_secs(seconds);
            let file = std::fs::File::options().write(true).open(&path).unwrap();
            file.set_modified(later).unwrap();
        }
    }
}

/// A repository an agent creates inside its worktree, with a commit, has a
/// configuration of its own. The workspace's git ran what it names — a `core.fsmonitor` hook,
/// a clean filter — as the conductor's child, outside any step: `git add --all` on the scratch
/// index (snapshot, capture, rollback) and the rollback's `git status
/// --ignore-submodules=none` asked the nested repository whether it was dirty by running `git
/// status` inside it. Now nothing runs there, and the nested repositories are still recorded
/// as the commits their HEADs name.
#[test]
fn a_nested_repositorys_own_hooks_and_filters_never_run_in_the_workspaces_git() {
    let repo = rich_repo();
    let workspace = create(&repo, "nested-hooks");
    let dir = workspace.path();
    let outside = tempfile::tempdir().unwrap();
    let marker = outside.path().join("ran");
    let hook = outside.path().join("hook.sh");
    std::fs::write(
        &hook,
        format!("#!/bin/sh\necho \"$0 $*\" >> '{}'\ncat\n", marker.display()),
    )
    .unwrap();
    chmod(&hook, 0o755);
    let hook = hook.display().to_string();
    // The agent's own git, told not to run the hook itself.
    let quiet = |nested: &Path, args: &[&str]| {
        let mut all = vec!["-c", "core.fsmonitor=false", "-c", "filter.evil.clean=cat"];
        all.extend_from_slice(args);
        git_in(nested, &all)
    };
    let monitored = dir.join("src/monitored");
    let filtered = dir.join("src/filtered");
    for (nested, setting) in [
        (&monitored, "core.fsmonitor"),
        (&filtered, "filter.evil.clean"),
    ] {
        git_in(dir, &["init", "-q", nested.to_str().unwrap()]);
        put(nested, "lib.txt", "vendored\n");
        put(nested, ".gitattributes", "* filter=evil\n");
        quiet(nested, &["add", "-A"]);
        quiet(nested, &["commit", "-q", "-m", "vendored"]);
        git_in(nested, &["config", setting, &hook]);
        // Read whatever attributes the conductor's git points at (`GIT_ATTR_SOURCE`).
        put(nested, ".git/info/attributes", "* filter=evil\n");
    }
    let ran = || std::fs::read_to_string(&marker).unwrap_or_default();

    let snapshot = workspace.snapshot_pre_step(&StepId::new("fix"), 1).unwrap();
    stir(&monitored, 10);
    stir(&filtered, 10);
    let status = workspace
        .status_since(&workspace.pre_run().unwrap())
        .unwrap();
    assert_eq!(ran(), "", "capture");
    let gitlinks: Vec<(&str, Option<&str>)> = status
        .files
        .iter()
        .filter(|file| file.new_mode.as_deref() == Some("160000"))
        .map(|file| (file.path.as_str(), file.old_mode.as_deref()))
        .collect();
    assert_eq!(
        gitlinks,
        [("src/filtered", None), ("src/monitored", None)],
        "{status:?}"
    );
    // A new commit in a nested repository is seen: its gitlink moves.
    put(&monitored, "more.txt", "more\n");
    quiet(&monitored, &["add", "more.txt"]);
    quiet(&monitored, &["commit", "-q", "-m", "more"]);
    stir(&filtered, 20);
    let moved = workspace.status_since(&snapshot).unwrap();
    let changed: Vec<&str> = moved.files.iter().map(|file| file.path.as_str()).collect();
    assert_eq!(changed, ["src/monitored"], "{moved:?}");
    assert_eq!(ran(), "", "capture after a nested commit");

    stir(&filtered, 30);
    let record = workspace.rollback(RollbackTarget::PreStep).unwrap();
    assert_eq!(ran(), "", "rollback to pre_step");
    assert_eq!(record.before.files_changed, 1, "{record:?}");
    stir(&monitored, 40);
    stir(&filtered, 40);
    workspace.snapshot_pre_step(&StepId::new("fix"), 2).unwrap();
    let record = workspace.rollback(RollbackTarget::PreRun).unwrap();
    assert_eq!(ran(), "", "rollback to pre_run");
    assert!(record.after.is_empty(), "{record:?}");
    assert!(!monitored.exists() && !filtered.exists());
}
