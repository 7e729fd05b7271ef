//! Workspace benchmark: each operation of `tnh_conductor::workspace` side by side with the git
//! CLI doing the same work, on a generated repository (default 20,000 files, ~200 MB).
//!
//! Run with `bench/workspace.sh` (or `cargo bench --bench workspace`). Sizes can be changed
//! with `TNH_BENCH_FILES`, `TNH_BENCH_FILE_BYTES` and `TNH_BENCH_ITERATIONS`;
//! `TNH_BENCH_ONLY=diff,rollback` measures only the operations named. Each figure is
//! the median of the iterations after one warm-up; the file system cache is warm, as it is
//! for an overnight run working on a repository.

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tnh_conductor::ids::{RunId, StepId, WorkflowId};
use tnh_conductor::workspace::{RollbackTarget, Workspace};

mod support;
use support::{env_number, git, git_with};

const MODIFIED: usize = 200;
const DELETED: usize = 50;
const ADDED: usize = 200;

/// Deterministic text content: lines of pseudo-random hex, so diffs and compression are real.
fn contents(seed: usize, bytes: usize) -> Vec<u8> {
    let mut state = (seed as u64)
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1);
    let mut text = Vec::with_capacity(bytes + 80);
    while text.len() < bytes {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        text.extend_from_slice(
            format!("{state:016x} {:016x} line\n", state.rotate_left(17)).as_bytes(),
        );
    }
    text
}

fn file_path(index: usize) -> String {
    format!(
        "d{:02}/s{:02}/f{:04}.txt",
        index / 1000,
        (index / 100) % 10,
        index
    )
}

/// Creates the repository with `files` files of `bytes` bytes each, committed on `main`.
fn generate(root: &Path, files: usize, bytes: usize) {
    git(root, &["init", "-q", "-b", "main"]);
    for index in 0..files {
        let path = root.join(file_path(index));
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, contents(index, bytes)).expect("write");
    }
    git(root, &["add", "-A"]);
    // Packed in the foreground, as a clone is: otherwise the commit's automatic gc packs the
    // 20,000 loose objects in the background while the first measurements run.
    git(
        root,
        &["-c", "gc.auto=0", "commit", "-q", "-m", "generated"],
    );
    git(root, &["gc", "-q"]);
}

/// What an agent does between two measurements: edits, deletions, new untracked files in new
/// nested directories.
fn agent_changes(worktree: &Path, files: usize) {
    for step in 0..MODIFIED {
        let path = worktree.join(file_path((step * 97) % files));
        let mut text = std::fs::read(&path).unwrap_or_default();
        text.extend_from_slice(b"agent edit\n");
        std::fs::write(&path, text).expect("edit");
    }
    for step in 0..DELETED {
        let _ = std::fs::remove_file(worktree.join(file_path((step * 89 + 13) % files)));
    }
    for step in 0..ADDED {
        let path = worktree.join(format!("agent/new{:02}/file{step:03}.txt", step % 10));
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, contents(1_000_000 + step, 4096)).expect("write");
    }
}

/// Median durations of both sides over `iterations` rounds after one warm-up round, each
/// timing preceded by the same untimed `prepare`. The sides alternate within each round, so
/// load from other processes on the machine hits both alike.
fn compare(
    iterations: usize,
    prepare: &dyn Fn(),
    ours: &dyn Fn(),
    git: &dyn Fn(),
) -> (Duration, Duration) {
    let time = |measured: &dyn Fn()| {
        prepare();
        let start = Instant::now();
        measured();
        start.elapsed()
    };
    time(ours);
    time(git);
    let mut ours_times = Vec::new();
    let mut git_times = Vec::new();
    for _ in 0..iterations {
        ours_times.push(time(ours));
        git_times.push(time(git));
    }
    ours_times.sort();
    git_times.sort();
    (ours_times[iterations / 2], git_times[iterations / 2])
}

/// git's side of the status and its line counts, as `status_since` asks for them.
fn numstat_args(tree: &str) -> [&str; 7] {
    [
        "diff-index",
        "--cached",
        "-z",
        "-M",
        "--raw",
        "--numstat",
        tree,
    ]
}

fn nothing() {}

struct Row {
    name: &'static str,
    ours: Duration,
    git: Duration,
    git_command: &'static str,
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this binary without it
    // (or with `--list`), and must not spend minutes generating 200 MB.
    if !std::env::args().any(|arg| arg == "--bench") {
        return;
    }
    let files = env_number("TNH_BENCH_FILES", 20_000);
    let bytes = env_number("TNH_BENCH_FILE_BYTES", 10_240);
    let iterations = env_number("TNH_BENCH_ITERATIONS", 5);
    let scratch = tempfile::tempdir().expect("temp dir");
    let root = scratch.path().join("repo");
    std::fs::create_dir_all(&root).expect("mkdir");
    let start = Instant::now();
    generate(&root, files, bytes);
    eprintln!(
        "generated {files} files of {bytes} bytes ({} MB) in {:.1?}",
        files * bytes / 1_000_000,
        start.elapsed()
    );
    // `TNH_BENCH_ONLY=status,rollback` runs only the operations named (and their "same work"
    // rows).
    let only = std::env::var("TNH_BENCH_ONLY").unwrap_or_default();
    let wanted = |name: &str| only.is_empty() || only.split(',').any(|part| part.trim() == name);
    let mut rows = Vec::new();
    if wanted("create") {
        rows.push(bench_create(&root, iterations));
    }
    if wanted("snapshot") {
        rows.push(bench_snapshot(&root, files, iterations));
    }
    if wanted("status") {
        rows.push(bench_status(&root, files, iterations));
        rows.push(bench_status_same_work(&root, files, iterations));
    }
    if wanted("diff") {
        rows.push(bench_diff(&root, files, iterations));
        rows.push(bench_diff_same_work(&root, files, iterations));
    }
    if wanted("rollback") {
        rows.push(bench_rollback(&root, files, iterations));
        rows.push(bench_rollback_same_work(&root, files, iterations));
    }
    println!(
        "{:<10} {:>12} {:>12} {:>7}  git command",
        "operation", "workspace", "git", "ratio"
    );
    for row in &rows {
        println!(
            "{:<10} {:>10.1}ms {:>10.1}ms {:>6.2}x  {}",
            row.name,
            row.ours.as_secs_f64() * 1000.0,
            row.git.as_secs_f64() * 1000.0,
            row.ours.as_secs_f64() / row.git.as_secs_f64(),
            row.git_command
        );
    }
}

fn bench_create(root: &Path, iterations: usize) -> Row {
    // The worktree made by the previous measurement, removed (untimed) before the next one.
    let last: RefCell<Option<PathBuf>> = RefCell::new(None);
    let cleanup = || {
        if let Some(path) = last.borrow_mut().take() {
            git(
                root,
                &[
                    "worktree",
                    "remove",
                    "--force",
                    path.to_str().expect("utf-8 path"),
                ],
            );
        }
    };
    let counter = Cell::new(0);
    let next = || {
        counter.set(counter.get() + 1);
        counter.get()
    };
    let ours = || {
        let run = RunId::new(format!("create-{}", next()));
        let workspace =
            Workspace::create(root, &run, &WorkflowId::new("bench"), None).expect("create");
        *last.borrow_mut() = Some(workspace.path().to_owned());
    };
    let plain = || {
        let number = next();
        let path = root.join(format!(".tnh/plain/{number}"));
        let branch = format!("plain-{number}");
        let path_text = path.to_str().expect("utf-8");
        git(
            root,
            &["worktree", "add", "-q", "-b", &branch, path_text, "HEAD"],
        );
        *last.borrow_mut() = Some(path);
    };
    let (ours, git_time) = compare(iterations, &cleanup, &ours, &plain);
    cleanup();
    Row {
        name: "create",
        ours,
        git: git_time,
        git_command: "git worktree add -b BRANCH PATH HEAD",
    }
}

/// A workspace with the agent's changes applied, and the git dir of its worktree.
fn changed_workspace(root: &Path, name: &str, files: usize) -> (Workspace, PathBuf) {
    let workspace = Workspace::create(root, &RunId::new(name), &WorkflowId::new("bench"), None)
        .expect("create");
    agent_changes(workspace.path(), files);
    let git_dir = PathBuf::from(git(workspace.path(), &["rev-parse", "--absolute-git-dir"]));
    (workspace, git_dir)
}

fn bench_snapshot(root: &Path, files: usize, iterations: usize) -> Row {
    let (workspace, git_dir) = changed_workspace(root, "snapshot", files);
    let visit = Cell::new(0);
    let ours = || {
        visit.set(visit.get() + 1);
        workspace
            .snapshot_pre_step(&StepId::new("step"), visit.get())
            .expect("snapshot");
    };
    let scratch = git_dir.join("bench-index");
    let plain = || {
        std::fs::copy(git_dir.join("index"), &scratch).expect("copy index");
        git_with(workspace.path(), &["add", "-A"], Some(&scratch));
        git_with(workspace.path(), &["write-tree"], Some(&scratch));
    };
    let (ours, git_time) = compare(iterations, &nothing, &ours, &plain);
    Row {
        name: "snapshot",
        ours,
        git: git_time,
        git_command: "cp index; git add -A && git write-tree (scratch index)",
    }
}

fn bench_status(root: &Path, files: usize, iterations: usize) -> Row {
    let (workspace, _) = changed_workspace(root, "status", files);
    let pre_run = workspace.pre_run().expect("pre_run");
    let ours = || {
        workspace.status_since(&pre_run).expect("status");
    };
    let plain = || {
        git(workspace.path(), &["status", "--porcelain"]);
    };
    let (ours, git_time) = compare(iterations, &nothing, &ours, &plain);
    Row {
        name: "status",
        ours,
        git: git_time,
        git_command: "git status --porcelain",
    }
}

/// git doing exactly the work `status_since` does: bring a scratch index up to date with the
/// worktree, then compare it with the snapshot's tree with rename detection and line counts.
fn bench_status_same_work(root: &Path, files: usize, iterations: usize) -> Row {
    let (workspace, git_dir) = changed_workspace(root, "status-same", files);
    let pre_run = workspace.pre_run().expect("pre_run");
    let ours = || {
        workspace.status_since(&pre_run).expect("status");
    };
    let scratch = git_dir.join("bench-index");
    std::fs::copy(git_dir.join("index"), &scratch).expect("copy index");
    let plain = || {
        git_with(workspace.path(), &["add", "-A"], Some(&scratch));
        git_with(
            workspace.path(),
            &numstat_args(&pre_run.tree),
            Some(&scratch),
        );
    };
    let (ours, git_time) = compare(iterations, &nothing, &ours, &plain);
    Row {
        name: "status=",
        ours,
        git: git_time,
        git_command: "git add -A && git diff-index --cached -M --raw --numstat (scratch index)",
    }
}

fn bench_diff(root: &Path, files: usize, iterations: usize) -> Row {
    let (workspace, _) = changed_workspace(root, "diff", files);
    let pre_run = workspace.pre_run().expect("pre_run");
    let patch = root.join(".tnh/bench.patch");
    let ours = || {
        workspace.capture_since(&pre_run, &patch).expect("capture");
    };
    let plain = || {
        git(workspace.path(), &["diff", "--stat", "HEAD"]);
    };
    let (ours, git_time) = compare(iterations, &nothing, &ours, &plain);
    Row {
        name: "diff",
        ours,
        git: git_time,
        git_command: "git diff --stat HEAD",
    }
}

/// git doing exactly the work `capture_since` does: the status above plus the binary patch.
fn bench_diff_same_work(root: &Path, files: usize, iterations: usize) -> Row {
    let (workspace, git_dir) = changed_workspace(root, "diff-same", files);
    let pre_run = workspace.pre_run().expect("pre_run");
    let patch = root.join(".tnh/bench-same.patch");
    let ours = || {
        workspace.capture_since(&pre_run, &patch).expect("capture");
    };
    let scratch = git_dir.join("bench-index");
    std::fs::copy(git_dir.join("index"), &scratch).expect("copy index");
    let output = format!("--output={}", patch.display());
    let plain = || {
        git_with(workspace.path(), &["add", "-A"], Some(&scratch));
        let patch_args = [
            "diff-index",
            "--cached",
            "-p",
            "--binary",
            "-M",
            &output,
            &pre_run.tree,
        ];
        git_with(workspace.path(), &patch_args, Some(&scratch));
        git_with(
            workspace.path(),
            &numstat_args(&pre_run.tree),
            Some(&scratch),
        );
    };
    let (ours, git_time) = compare(iterations, &nothing, &ours, &plain);
    Row {
        name: "diff=",
        ours,
        git: git_time,
        git_command: "the same + git diff-index --cached -p --binary -M > patch",
    }
}

fn bench_rollback(root: &Path, files: usize, iterations: usize) -> Row {
    let (workspace, _) = changed_workspace(root, "rollback", files);
    let change = || agent_changes(workspace.path(), files);
    let ours = || {
        workspace
            .rollback(RollbackTarget::PreRun)
            .expect("rollback");
    };
    let plain = || {
        git(workspace.path(), &["reset", "-q", "--hard"]);
        git(workspace.path(), &["clean", "-q", "-fd"]);
    };
    let (ours, git_time) = compare(iterations, &change, &ours, &plain);
    Row {
        name: "rollback",
        ours,
        git: git_time,
        git_command: "git reset --hard && git clean -fd",
    }
}

/// git doing exactly the work `rollback` does: hash the worktree into a scratch index and count
/// the lines undone, reset and clean, then prove the result exact with a status and re-seed
/// the scratch index from the refreshed index.
fn bench_rollback_same_work(root: &Path, files: usize, iterations: usize) -> Row {
    let (workspace, git_dir) = changed_workspace(root, "rollback-same", files);
    let pre_run = workspace.pre_run().expect("pre_run");
    let change = || agent_changes(workspace.path(), files);
    let ours = || {
        workspace
            .rollback(RollbackTarget::PreRun)
            .expect("rollback");
    };
    let scratch = git_dir.join("bench-index");
    std::fs::copy(git_dir.join("index"), &scratch).expect("copy index");
    let dir = workspace.path();
    let plain = || {
        git(dir, &["rev-parse", "--verify", "HEAD^{commit}"]);
        git_with(dir, &["add", "-A"], Some(&scratch));
        git_with(dir, &numstat_args(&pre_run.tree), Some(&scratch));
        git(dir, &["reset", "-q", "--hard", &pre_run.commit]);
        git(dir, &["clean", "-q", "-ffdx"]);
        let status = git(dir, &["status", "--porcelain", "--untracked-files=all"]);
        assert_eq!(status, "", "git's rollback is exact");
        std::fs::copy(git_dir.join("index"), &scratch).expect("copy index");
    };
    let (ours, git_time) = compare(iterations, &change, &ours, &plain);
    Row {
        name: "rollback=",
        ours,
        git: git_time,
        git_command: "git add -A && diff-index --numstat -M; reset --hard; clean -ffdx; status; cp index",
    }
}
