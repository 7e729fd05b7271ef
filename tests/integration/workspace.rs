//! Workspace: creating, reopening and refusing worktrees; snapshots; status and diff capture.

use std::path::{Path, PathBuf};

use tnh_conductor::ids::{RunId, StepId, WorkflowId};
use tnh_conductor::workspace::{ChangeKind, Workspace, WorkspaceError, WorkspaceRecord};

use crate::support::{TempRepo, git_in};

/// A workspace for `run_id` of workflow `wf` in `repo`, from HEAD.
pub fn create(repo: &TempRepo, run_id: &str) -> Workspace {
    Workspace::create(
        repo.path(),
        &RunId::new(run_id),
        &WorkflowId::new("wf"),
        None,
    )
    .expect("create workspace")
}

/// Writes bytes to `dir/relative`, creating parent folders.
pub fn put(dir: &Path, relative: &str, contents: impl AsRef<[u8]>) -> PathBuf {
    let path = dir.join(relative);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(&path, contents).expect("write");
    path
}

/// Reads `dir/relative` as text.
pub fn read(dir: &Path, relative: &str) -> String {
    std::fs::read_to_string(dir.join(relative)).expect("read")
}

/// Sets or clears the executable bits of a file.
pub fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// A repository with a few files of every kind committed on `main`.
pub fn rich_repo() -> TempRepo {
    let repo = TempRepo::new();
    repo.write("src/lib.rs", "pub fn a() {}\n");
    repo.write(
        "src/old_name.rs",
        "// to be renamed\nfn renamed() {}\nfn also() {}\n",
    );
    repo.write("docs/guide.md", "# guide\n");
    repo.write("doomed.txt", "delete me\n");
    repo.write("script.sh", "#!/bin/sh\necho hi\n");
    repo.write(".gitignore", "*.log\nbuild/\n");
    repo.commit_all("rich base");
    repo
}

/// Bytes of a file, for byte-for-byte comparisons.
fn bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).expect("read bytes")
}

#[test]
fn create_makes_a_worktree_on_the_work_branch_from_head() {
    let repo = TempRepo::new();
    let head = repo.git(&["rev-parse", "HEAD"]);
    let workspace = create(&repo, "20260405T100000Z-abc123");
    let record = workspace.record();
    let root = repo.path().canonicalize().unwrap();
    assert_eq!(record.repo_root, root);
    assert_eq!(
        record.worktree_path,
        root.join(".tnh/worktrees/20260405T100000Z-abc123")
    );
    assert_eq!(record.branch, "tnh/wf/20260405T100000Z-abc123");
    assert_eq!(record.base_ref, "HEAD");
    assert_eq!(record.base_sha, head);
    assert_eq!(git_in(workspace.path(), &["rev-parse", "HEAD"]), head);
    assert_eq!(
        git_in(workspace.path(), &["symbolic-ref", "HEAD"]),
        "refs/heads/tnh/wf/20260405T100000Z-abc123"
    );
    assert_eq!(read(workspace.path(), "README.md"), "# test repository\n");
    assert!(
        read(repo.path(), ".git/info/exclude")
            .lines()
            .any(|line| line == "/.tnh/")
    );
    assert_eq!(
        repo.git(&["rev-parse", "refs/tnh/runs/20260405T100000Z-abc123/pre_run"]),
        head
    );
    assert_eq!(
        repo.git(&["status", "--porcelain"]),
        "",
        "the worktree is invisible to the operator"
    );
    // A second run adds no second exclude line.
    create(&repo, "run-2");
    let exclude = read(repo.path(), ".git/info/exclude");
    assert_eq!(exclude.lines().filter(|line| *line == "/.tnh/").count(), 1);
}

#[test]
fn create_starts_from_a_named_base_ref() {
    let repo = TempRepo::new();
    let first = repo.git(&["rev-parse", "HEAD"]);
    repo.git(&["tag", "v1"]);
    repo.write("later.txt", "later\n");
    repo.commit_all("later");
    let workspace = Workspace::create(
        repo.path(),
        &RunId::new("r1"),
        &WorkflowId::new("wf"),
        Some("v1"),
    )
    .unwrap();
    assert_eq!(workspace.record().base_ref, "v1");
    assert_eq!(workspace.record().base_sha, first);
    assert!(!workspace.path().join("later.txt").exists());
}

#[test]
fn the_operators_dirty_checkout_stays_byte_for_byte() {
    let repo = rich_repo();
    repo.write("src/lib.rs", "pub fn a() { /* operator edit */ }\n");
    repo.write("staged.txt", "staged\n");
    repo.git(&["add", "staged.txt"]);
    repo.write("scratch/untracked.txt", "operator's notes\n");
    let index_before = bytes(&repo.path().join(".git/index"));
    let head_before = bytes(&repo.path().join(".git/HEAD"));
    let files = [
        "src/lib.rs",
        "staged.txt",
        "scratch/untracked.txt",
        "doomed.txt",
    ];
    let contents_before: Vec<Vec<u8>> = files.iter().map(|f| bytes(&repo.path().join(f))).collect();

    let workspace = create(&repo, "run-dirty");
    put(workspace.path(), "src/lib.rs", "agent\n");
    std::fs::remove_file(workspace.path().join("doomed.txt")).unwrap();
    let snapshot = workspace
        .snapshot_pre_step(&StepId::new("implement"), 1)
        .unwrap();
    let patch = tempfile::NamedTempFile::new().unwrap();
    workspace.capture_since(&snapshot, patch.path()).unwrap();
    let guard = workspace.guard(&[]).unwrap();
    guard.verify().unwrap();
    workspace
        .rollback(tnh_conductor::workspace::RollbackTarget::PreRun)
        .unwrap();

    assert_eq!(
        bytes(&repo.path().join(".git/index")),
        index_before,
        "operator index untouched"
    );
    assert_eq!(bytes(&repo.path().join(".git/HEAD")), head_before);
    let contents_after: Vec<Vec<u8>> = files.iter().map(|f| bytes(&repo.path().join(f))).collect();
    assert_eq!(contents_after, contents_before);
    let status = repo.git(&["status", "--porcelain"]);
    // (git_in trims the leading space of the first line.)
    assert_eq!(status, "M src/lib.rs\nA  staged.txt\n?? scratch/");
}

#[test]
fn create_refuses_a_bare_repository() {
    let dir = tempfile::tempdir().unwrap();
    git_in(dir.path(), &["init", "-q", "--bare"]);
    let error =
        Workspace::create(dir.path(), &RunId::new("r"), &WorkflowId::new("wf"), None).unwrap_err();
    assert!(
        matches!(error, WorkspaceError::BareRepository(_)),
        "{error}"
    );
    assert!(error.to_string().contains("bare repository"));
}

/// A repository whose refs are kept in the reftable format, which libgit2 cannot read; `None`
/// when this git predates the format (2.45).
fn reftable_repo() -> Option<tempfile::TempDir> {
    let dir = tempfile::tempdir().unwrap();
    let made = crate::support::git_command(dir.path())
        .args(["init", "-q", "--ref-format=reftable", "-b", "main"])
        .status()
        .unwrap()
        .success();
    if !made {
        eprintln!("skipped: this git cannot create a reftable repository");
        return None;
    }
    std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
    git_in(dir.path(), &["add", "a.txt"]);
    git_in(dir.path(), &["commit", "-q", "-m", "base"]);
    Some(dir)
}

#[test]
fn create_refuses_a_reftable_repository_saying_why() {
    let Some(dir) = reftable_repo() else { return };
    let error =
        Workspace::create(dir.path(), &RunId::new("r"), &WorkflowId::new("wf"), None).unwrap_err();
    assert!(
        matches!(error, WorkspaceError::UnsupportedRepository { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("refstorage"), "{error}");
    assert!(
        error
            .hint()
            .is_some_and(|hint| hint.contains("--ref-format=files")),
        "{:?}",
        error.hint()
    );
    assert_eq!(error.exit_status().code(), 2);
    assert!(!dir.path().join(".tnh/worktrees").exists());

    // `run` says the same, instead of "not inside a git repository", and creates nothing.
    let workflow = dir.path().join("stop.yaml");
    std::fs::write(
        &workflow,
        "workflow_id: stop\nversion: 1\ndescription: stops\nentry_step: done\nsteps:\n  \
         - id: done\n    opcode: STOP\n    outcome: success\n",
    )
    .unwrap();
    let output = crate::support::conductor()
        .arg("--repo")
        .arg(dir.path())
        .arg("run")
        .arg(&workflow)
        .output()
        .unwrap();
    let stderr = crate::support::stderr_text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("format is not supported"), "{stderr}");
    assert!(!stderr.contains("not inside a git repository"), "{stderr}");
    assert!(!dir.path().join(".tnh").exists());
}

#[test]
fn create_refuses_a_repository_without_commits() {
    let dir = tempfile::tempdir().unwrap();
    git_in(dir.path(), &["init", "-q"]);
    let error =
        Workspace::create(dir.path(), &RunId::new("r"), &WorkflowId::new("wf"), None).unwrap_err();
    assert!(matches!(error, WorkspaceError::NoCommits(_)), "{error}");
    assert!(error.to_string().contains("has no commits"));
}

#[test]
fn create_refuses_a_base_ref_that_does_not_resolve() {
    let repo = TempRepo::new();
    for base in ["no-such-branch", "--upload-pack=evil", "HEAD~5"] {
        let error = Workspace::create(
            repo.path(),
            &RunId::new("r"),
            &WorkflowId::new("wf"),
            Some(base),
        )
        .unwrap_err();
        assert!(
            matches!(error, WorkspaceError::UnresolvableBase { .. }),
            "{base}: {error}"
        );
        assert!(error.to_string().contains(base));
    }
    assert!(!repo.path().join(".tnh/worktrees/r").exists());
}

#[test]
fn create_refuses_an_existing_work_branch() {
    let repo = TempRepo::new();
    repo.git(&["branch", "tnh/wf/taken"]);
    let error = Workspace::create(
        repo.path(),
        &RunId::new("taken"),
        &WorkflowId::new("wf"),
        None,
    )
    .unwrap_err();
    assert!(
        matches!(error, WorkspaceError::BranchExists(ref name) if name == "tnh/wf/taken"),
        "{error}"
    );
    assert!(error.hint().is_some());
}

#[test]
fn create_refuses_ids_that_are_not_ref_names() {
    let repo = TempRepo::new();
    let error = Workspace::create(
        repo.path(),
        &RunId::new("a..b"),
        &WorkflowId::new("wf"),
        None,
    )
    .unwrap_err();
    assert!(
        matches!(error, WorkspaceError::InvalidRefName(_)),
        "{error}"
    );
    let error = Workspace::create(repo.path(), &RunId::new("r"), &WorkflowId::new("w f"), None)
        .unwrap_err();
    assert!(
        matches!(error, WorkspaceError::InvalidRefName(_)),
        "{error}"
    );
}

#[test]
fn a_workspace_reopens_from_its_serialised_record() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "resume-me");
    put(workspace.path(), "new.txt", "x\n");
    let json = serde_json::to_string(workspace.record()).unwrap();
    let record: WorkspaceRecord = serde_json::from_str(&json).unwrap();
    let reopened = Workspace::open(&record).unwrap();
    let status = reopened.status_since(&reopened.pre_run().unwrap()).unwrap();
    assert_eq!(status.files.len(), 1);
    assert_eq!(status.files[0].path, "new.txt");

    Workspace::remove_worktree(&record).unwrap();
    let error = Workspace::open(&record).unwrap_err();
    assert!(matches!(error, WorkspaceError::Missing { .. }), "{error}");
}

#[test]
fn a_snapshot_records_the_worktree_without_touching_head_or_index() {
    let repo = rich_repo();
    let workspace = create(&repo, "snap");
    let dir = workspace.path();
    let index_path = PathBuf::from(git_in(dir, &["rev-parse", "--absolute-git-dir"])).join("index");
    let index_before = bytes(&index_path);
    put(dir, "src/lib.rs", "pub fn a() { changed() }\n");
    std::fs::remove_file(dir.join("doomed.txt")).unwrap();
    put(dir, "new/deep/file.txt", "untracked\n");
    let head = git_in(dir, &["rev-parse", "HEAD"]);

    let snapshot = workspace
        .snapshot_pre_step(&StepId::new("implement"), 2)
        .unwrap();

    assert_eq!(
        snapshot.reference,
        "refs/tnh/runs/snap/pre_step/implement/2"
    );
    assert_eq!(snapshot.base, head);
    assert_eq!(
        git_in(dir, &["rev-parse", "HEAD"]),
        head,
        "HEAD did not move"
    );
    assert_eq!(
        bytes(&index_path),
        index_before,
        "the worktree's index is untouched"
    );
    let tree = git_in(dir, &["ls-tree", "-r", "--name-only", &snapshot.commit]);
    assert!(tree.lines().any(|line| line == "new/deep/file.txt"));
    assert!(!tree.lines().any(|line| line == "doomed.txt"));
    assert_eq!(
        git_in(dir, &["show", &format!("{}:src/lib.rs", snapshot.commit)]),
        "pub fn a() { changed() }"
    );
    assert_eq!(
        git_in(dir, &["status", "--porcelain"]),
        "D doomed.txt\n M src/lib.rs\n?? new/"
    );
    assert_eq!(workspace.latest_pre_step().unwrap(), Some(snapshot.clone()));
    let shared = repo.git(&["rev-parse", "refs/tnh/runs/snap/latest_pre_step"]);
    assert_eq!(
        shared, snapshot.commit,
        "refs live in the shared repository"
    );
    // Kept alive by its ref: gc with immediate pruning does not lose it.
    repo.git(&["gc", "--quiet", "--prune=now"]);
    repo.git(&["cat-file", "-e", &snapshot.commit]);
}

#[test]
fn a_snapshot_leaves_ignored_files_out() {
    let repo = rich_repo();
    let workspace = create(&repo, "ignored");
    put(workspace.path(), "debug.log", "noise\n");
    put(workspace.path(), "build/out.bin", [0u8, 1, 2]);
    put(workspace.path(), "kept.txt", "kept\n");
    let snapshot = workspace.snapshot_pre_step(&StepId::new("s"), 1).unwrap();
    let tree = git_in(
        workspace.path(),
        &["ls-tree", "-r", "--name-only", &snapshot.commit],
    );
    assert!(tree.lines().any(|line| line == "kept.txt"));
    assert!(!tree.contains("debug.log"));
    assert!(!tree.contains("build/"));
}

#[test]
fn the_latest_pre_step_snapshot_is_the_most_recent() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "latest");
    assert_eq!(workspace.latest_pre_step().unwrap(), None);
    put(workspace.path(), "a.txt", "1\n");
    workspace
        .snapshot_pre_step(&StepId::new("b_step"), 1)
        .unwrap();
    put(workspace.path(), "a.txt", "2\n");
    let second = workspace
        .snapshot_pre_step(&StepId::new("a_step"), 1)
        .unwrap();
    assert_eq!(workspace.latest_pre_step().unwrap().unwrap(), second);
}

#[test]
fn status_classifies_every_kind_of_change() {
    let repo = rich_repo();
    let workspace = create(&repo, "kinds");
    let dir = workspace.path();
    put(
        dir,
        "src/lib.rs",
        "pub fn a() {}\npub fn b() {}\npub fn c() {}\n",
    );
    std::fs::remove_file(dir.join("doomed.txt")).unwrap();
    git_in(dir, &["mv", "src/old_name.rs", "src/new_name.rs"]);
    chmod(&dir.join("script.sh"), 0o755);
    std::os::unix::fs::symlink("../README.md", dir.join("docs/link.md")).unwrap();
    put(
        dir,
        "assets/logo.png",
        [0x89, b'P', b'N', b'G', 0, 0, 1, 2, 0, 3],
    );
    put(dir, "tools/new tool ünïcode.py", "print('hi')\n");

    let status = workspace
        .status_since(&workspace.pre_run().unwrap())
        .unwrap();
    let kind_of = |path: &str| {
        status
            .files
            .iter()
            .find(|file| file.path == path)
            .unwrap_or_else(|| panic!("{path} missing: {status:#?}"))
    };
    assert_eq!(kind_of("src/lib.rs").kind, ChangeKind::Modify);
    assert_eq!(
        (
            kind_of("src/lib.rs").lines_added,
            kind_of("src/lib.rs").lines_removed
        ),
        (2, 0)
    );
    assert_eq!(kind_of("doomed.txt").kind, ChangeKind::Delete);
    assert_eq!(kind_of("doomed.txt").lines_removed, 1);
    let renamed = kind_of("src/new_name.rs");
    assert_eq!(renamed.kind, ChangeKind::Rename);
    assert_eq!(renamed.old_path.as_deref(), Some("src/old_name.rs"));
    let mode = kind_of("script.sh");
    assert_eq!(mode.kind, ChangeKind::Mode);
    assert_eq!(
        (mode.old_mode.as_deref(), mode.new_mode.as_deref()),
        (Some("100644"), Some("100755"))
    );
    let link = kind_of("docs/link.md");
    assert_eq!(link.kind, ChangeKind::Symlink);
    assert_eq!(link.symlink_target.as_deref(), Some("../README.md"));
    assert!(link.is_new());
    let binary = kind_of("assets/logo.png");
    assert_eq!(binary.kind, ChangeKind::Binary);
    assert!(binary.binary && binary.is_new());
    assert_eq!(kind_of("tools/new tool ünïcode.py").kind, ChangeKind::Add);
    assert_eq!(status.files.len(), 7);
    assert_eq!(
        status.new_top_level_dirs,
        vec!["assets".to_owned(), "tools".to_owned()]
    );
    assert_eq!(status.diffstat.files_changed, 7);
    assert_eq!(status.diffstat.binary_files, 1);
    assert_eq!(
        status.diffstat.to_string(),
        format!(
            "7 files changed, +{} -{} (1 binary)",
            status.diffstat.insertions, status.diffstat.deletions
        )
    );

    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(json["schema_version"], 1);
    assert_eq!(json["files"][0]["kind"], "binary");
    let schema = tnh_conductor::workspace::workspace_status_schema();
    assert!(schema["properties"]["files"].is_object(), "{schema}");
}

/// Two new names that differ only in bytes that are not UTF-8 read as one lossy `path`; each
/// keeps its own line counts and its exact name in `quoted_path`, in a status and in a
/// capture alike; a UTF-8 name has none.
#[test]
fn names_that_are_not_utf8_keep_their_exact_name_and_their_own_counts() {
    use std::os::unix::ffi::OsStrExt;
    let repo = TempRepo::new();
    let workspace = create(&repo, "bytes");
    let dir = workspace.path();
    let name = |bytes: &[u8]| dir.join(std::ffi::OsStr::from_bytes(bytes));
    std::fs::write(name(b"caf\xe9.txt"), "one\n").unwrap();
    std::fs::write(name(b"caf\xff.txt"), "one\ntwo\n").unwrap();
    std::fs::write(dir.join("café.txt"), "one\ntwo\nthree\n").unwrap();
    let since = workspace.pre_run().unwrap();
    let patch = repo.path().join(".tnh/bytes.patch");

    let status = workspace.status_since(&since).unwrap();
    let captured = workspace.capture_since(&since, &patch).unwrap().status;

    for files in [&status.files, &captured.files] {
        let found: Vec<(&str, Option<&str>, u64)> = files
            .iter()
            .map(|file| {
                (
                    file.path.as_str(),
                    file.quoted_path.as_deref(),
                    file.lines_added,
                )
            })
            .collect();
        assert_eq!(
            found,
            [
                ("café.txt", None, 3),
                ("caf\u{fffd}.txt", Some("\"caf\\351.txt\""), 1),
                ("caf\u{fffd}.txt", Some("\"caf\\377.txt\""), 2),
            ]
        );
    }
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(json["files"][0].get("quoted_path"), None, "{json}");
}

#[test]
fn a_clean_worktree_has_an_empty_status() {
    let repo = rich_repo();
    let workspace = create(&repo, "clean");
    let status = workspace
        .status_since(&workspace.pre_run().unwrap())
        .unwrap();
    assert!(status.files.is_empty());
    assert_eq!(status.diffstat.to_string(), "no changes");
}

#[test]
fn the_captured_patch_is_binary_safe_and_reproduces_the_change() {
    let repo = rich_repo();
    let workspace = create(&repo, "patch");
    let dir = workspace.path();
    put(dir, "src/lib.rs", "pub fn a() { 1 }\n");
    put(dir, "blob.bin", (0u8..=255).collect::<Vec<u8>>());
    std::fs::remove_file(dir.join("doomed.txt")).unwrap();
    put(dir, "untracked/new.txt", "new\n");
    let pre_run = workspace.pre_run().unwrap();
    let patch = tempfile::NamedTempFile::new().unwrap();
    let capture = workspace.capture_since(&pre_run, patch.path()).unwrap();
    // The tree the capture was taken of is the worktree's, as a fingerprint reads it.
    assert_eq!(capture.tree, workspace.fingerprint().unwrap().tree);
    let status = capture.status;
    assert_eq!(status.diffstat.files_changed, 4);
    let text = String::from_utf8_lossy(&std::fs::read(patch.path()).unwrap()).into_owned();
    assert!(text.contains("GIT binary patch"), "{text}");

    // Applying the patch to a fresh checkout of the base reproduces the worktree exactly.
    let clone = tempfile::tempdir().unwrap();
    git_in(
        clone.path(),
        &["clone", "-q", repo.path().to_str().unwrap(), "."],
    );
    git_in(
        clone.path(),
        &["checkout", "-q", &workspace.record().base_sha],
    );
    git_in(
        clone.path(),
        &[
            "apply",
            "--binary",
            "--index",
            patch.path().to_str().unwrap(),
        ],
    );
    let now = workspace
        .snapshot_pre_step(&StepId::new("after"), 1)
        .unwrap();
    assert_eq!(git_in(clone.path(), &["write-tree"]), now.tree);
}
