//! Files an agent can make that git cannot record or remove by itself: a name git refuses to
//! index, files in a submodule folder the worktree never checked out, a path deeper than
//! PATH_MAX, a hard link to the operator's checkout. Each must show in the capture (so the
//! policy checks it) and be gone after a rollback that calls itself exact.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use tnh_conductor::ids::StepId;
use tnh_conductor::policy::{Policy, PolicySpec, ViolationClass};
use tnh_conductor::workspace::{GuardReport, RollbackTarget, WorkspaceStatus};

use crate::support::{TempRepo, git_in};
use crate::workspace::{create, put, read};

fn forbidding_secret() -> Policy {
    Policy::compile(&PolicySpec {
        allowed_paths: vec!["src/**".to_owned()],
        forbidden_paths: vec!["secret/**".to_owned()],
        ..PolicySpec::default()
    })
    .unwrap()
}

fn paths(status: &WorkspaceStatus) -> Vec<String> {
    status.files.iter().map(|file| file.path.clone()).collect()
}

/// The paths the policy flags, with their class.
fn flagged(status: &WorkspaceStatus) -> Vec<(ViolationClass, String)> {
    forbidding_secret()
        .check(status, &GuardReport::default(), None)
        .into_iter()
        .filter_map(|violation| Some((violation.class, violation.path?)))
        .collect()
}

fn repo_with_secret() -> TempRepo {
    let repo = TempRepo::new();
    repo.write("secret/key.txt", "key=1\n");
    repo.write("src/main.rs", "fn main() {}\n");
    repo.commit_all("files");
    repo
}

/// Names git refuses to index (`core.protectNTFS`, `.gitmodules` as a
/// symlink) failed the whole capture and every rollback. They are recorded as changes, the
/// rest of the change is recorded as usual, and a rollback removes them.
#[test]
fn paths_git_refuses_to_index_are_captured_flagged_and_rolled_back() {
    let repo = repo_with_secret();
    let workspace = create(&repo, "refused");
    let dir = workspace.path();
    put(dir, "secret/key.txt", "key=stolen\n");
    put(dir, "secret/GIT~1", "pwned\n");
    put(dir, "src/.git.", "x\n");
    put(dir, "src/y/.Git/hooks/post-checkout", "x\n");
    put(dir, "src/main.rs", "fn main() { evil() }\n");
    std::os::unix::fs::symlink("/etc/passwd", dir.join(".gitmodules")).unwrap();
    let pre_run = workspace.pre_run().unwrap();

    let patch = repo.path().join(".tnh/refused.patch");
    let capture = workspace.capture_since(&pre_run, &patch).unwrap();
    let status = capture.status;

    assert_eq!(
        paths(&status),
        [
            ".gitmodules",
            "secret/GIT~1",
            "secret/key.txt",
            "src/.git.",
            "src/main.rs",
            "src/y/.Git/hooks/post-checkout"
        ],
        "{status:#?}"
    );
    let link = &status.files[0];
    assert_eq!(link.symlink_target.as_deref(), Some("/etc/passwd"));
    let flags = flagged(&status);
    for path in ["secret/GIT~1", "secret/key.txt"] {
        assert!(
            flags.contains(&(ViolationClass::ForbiddenPath, path.to_owned())),
            "{path}: {flags:?}"
        );
    }
    assert!(
        std::fs::read_to_string(&patch)
            .unwrap()
            .contains("key=stolen"),
        "the rest of the change is in the patch"
    );
    // Snapshots (a pre-step one, `runs clean`'s final one) work too.
    workspace
        .snapshot_pre_step(&StepId::new("next"), 1)
        .unwrap();

    let record = workspace.rollback(RollbackTarget::PreRun).unwrap();

    assert!(record.after.is_empty(), "{record:?}");
    assert_eq!(record.before.files_changed, 6, "{record:?}");
    for gone in ["secret/GIT~1", "src/.git.", "src/y", ".gitmodules"] {
        assert!(
            std::fs::symlink_metadata(dir.join(gone)).is_err(),
            "{gone} left"
        );
    }
    assert_eq!(read(dir, "secret/key.txt"), "key=1\n");
}

/// Git never looks into the folder of a gitlink, and `git worktree add`
/// leaves a submodule's folder empty. Files an agent writes there are captured (the folder
/// stands for them, as a nested repository's does), flagged, and removed by a rollback.
#[test]
fn files_in_a_submodule_folder_never_checked_out_are_captured_flagged_and_rolled_back() {
    let repo = repo_with_secret();
    let head = repo.git(&["rev-parse", "HEAD"]);
    let cacheinfo = format!("160000,{head},vendor/lib");
    repo.git(&["update-index", "--add", "--cacheinfo", &cacheinfo]);
    repo.git(&["commit", "-q", "-m", "a submodule"]);
    let workspace = create(&repo, "unpopulated");
    let dir = workspace.path();
    assert!(dir.join("vendor/lib").is_dir(), "an empty folder for it");
    let quiet = workspace
        .status_since(&workspace.pre_run().unwrap())
        .unwrap();
    assert!(quiet.files.is_empty(), "an empty folder is no change");
    put(dir, "vendor/lib/lib.c", "int backdoor = 1;\n");
    put(dir, "vendor/lib/more/x.c", "evil\n");

    let status = workspace
        .status_since(&workspace.pre_run().unwrap())
        .unwrap();

    assert_eq!(paths(&status), ["vendor/lib"], "{status:#?}");
    let flags = flagged(&status);
    assert!(
        flags.contains(&(ViolationClass::OutsideAllowedPaths, "vendor/lib".to_owned())),
        "{flags:?}"
    );

    let record = workspace.rollback(RollbackTarget::PreRun).unwrap();

    assert!(record.after.is_empty(), "{record:?}");
    assert_eq!(record.before.files_changed, 1, "{record:?}");
    let left: Vec<_> = std::fs::read_dir(dir.join("vendor/lib")).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    // The same for a pre-step rollback, whose snapshot never records them either.
    workspace
        .snapshot_pre_step(&StepId::new("step"), 1)
        .unwrap();
    put(dir, "vendor/lib/again.c", "again\n");
    let record = workspace.rollback(RollbackTarget::PreStep).unwrap();
    assert!(record.after.is_empty(), "{record:?}");
    assert!(!dir.join("vendor/lib/again.c").exists());
}

/// `depth` folders of 200 `d`s under `under`, the last holding `name`: deeper than PATH_MAX
/// from 21 folders on. Made relative to each open folder, as only an `openat` reaches them.
fn deep(dir: &Path, under: &str, depth: usize, name: &str) {
    use nix::fcntl::{OFlag, openat};
    use nix::sys::stat::{Mode, mkdirat};
    let folder = "d".repeat(200);
    let mut open = std::fs::File::open(dir.join(under)).unwrap().into();
    for _ in 0..depth {
        mkdirat(&open, folder.as_str(), Mode::from_bits_truncate(0o755)).unwrap();
        open = openat(
            &open,
            folder.as_str(),
            OFlag::O_RDONLY | OFlag::O_DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
    }
    let file = openat(
        &open,
        name,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL,
        Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    nix::unistd::write(&file, b"hidden\n").unwrap();
}

/// Git skips a folder deeper than PATH_MAX with a mere warning (the
/// change escaped the capture and the run succeeded) and dies on a file there (the capture
/// failed); `git clean` fails on them (the rollback failed half-way). They are captured as
/// changes, flagged, and removed by a rollback, which is exact.
#[test]
fn paths_deeper_than_path_max_are_captured_flagged_and_rolled_back() {
    let repo = repo_with_secret();
    let workspace = create(&repo, "deep");
    let dir = workspace.path();
    // A folder git cannot open.
    deep(dir, "secret", 25, "payload.txt");
    // A file git cannot stat in a folder it can open (its path is 4,276 bytes long).
    put(dir, "src/ok.rs", "fn ok() {}\n");
    deep(dir, "src", 20, &"f".repeat(250));

    let status = workspace
        .status_since(&workspace.pre_run().unwrap())
        .unwrap();

    let found = paths(&status);
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(found.contains(&"src/ok.rs".to_owned()), "{found:?}");
    let secret = found
        .iter()
        .find(|path| path.starts_with("secret/ddd"))
        .expect("the deep folder under secret/");
    assert!(secret.len() >= 4095, "{}", secret.len());
    let flags = flagged(&status);
    assert!(
        flags.contains(&(ViolationClass::ForbiddenPath, secret.clone())),
        "{flags:?}"
    );
    let long_file = found
        .iter()
        .find(|path| path.ends_with(&"f".repeat(250)))
        .expect("the file too deep to stat");
    assert!(long_file.len() > 4096);

    let record = workspace.rollback(RollbackTarget::PreRun).unwrap();

    assert!(record.after.is_empty(), "{record:?}");
    assert_eq!(record.before.files_changed, 3, "{record:?}");
    assert!(!dir.join(format!("secret/{}", "d".repeat(200))).exists());
    assert!(!dir.join(format!("src/{}", "d".repeat(200))).exists());
    assert!(!dir.join("src/ok.rs").exists());
    assert_eq!(read(dir, "secret/key.txt"), "key=1\n");
}

/// A worktree file replaced by a hard link to the operator's copy (same
/// bytes) looked unchanged to git, and a rollback that called itself exact kept the link, so
/// the next write to the worktree's file changed the operator's. A rollback gives every file
/// it keeps that has other links a fresh copy, and lists it.
#[test]
fn a_hard_link_to_the_operators_checkout_does_not_survive_a_rollback() {
    let repo = repo_with_secret();
    let workspace = create(&repo, "hardlink");
    let dir = workspace.path();
    std::fs::remove_file(dir.join("README.md")).unwrap();
    std::fs::hard_link(repo.path().join("README.md"), dir.join("README.md")).unwrap();
    put(dir, "src/main.rs", "fn main() { more() }\n");

    let record = workspace.rollback(RollbackTarget::PreRun).unwrap();

    assert!(record.after.is_empty(), "{record:?}");
    assert_eq!(record.hard_links_replaced, ["README.md"], "{record:?}");
    let ours = std::fs::metadata(dir.join("README.md")).unwrap();
    let operators = std::fs::metadata(repo.path().join("README.md")).unwrap();
    assert_ne!(ours.ino(), operators.ino());
    assert_eq!((ours.nlink(), operators.nlink()), (1, 1));
    std::fs::write(dir.join("README.md"), "edited in the worktree\n").unwrap();
    assert_eq!(read(repo.path(), "README.md"), "# test repository\n");
    assert_eq!(git_in(repo.path(), &["status", "--porcelain"]), "");
}
