//! A run directory damaged after a crash, or found in a moved or copied repository: `resume`
//! (and a gate decision, a rollback) refuses with what is
//! wrong and how to go on, and changes nothing — no repaired log, no worktree made again.

use std::path::{Path, PathBuf};

use crate::kernel_support::{RunRepo, assert_contiguous};
use crate::support::{stderr_text, stdout_text};

/// A run of the gate fixture waiting at its blocking review (after `implement` wrote
/// `feature.txt` in the worktree); returns its id and worktree.
fn waiting_run(repo: &RunRepo) -> (String, PathBuf) {
    let (code, result, output) = repo.run(&repo.workflow("gate.yaml"), &[]);
    assert_eq!(code, Some(3), "{result}\n{}", stderr_text(&output));
    (
        result["run_id"].as_str().unwrap().to_owned(),
        PathBuf::from(result["worktree"].as_str().unwrap()),
    )
}

/// The last event `state.json` accounts for.
fn checkpoint(repo: &RunRepo, run_id: &str) -> u64 {
    repo.json(run_id, "state.json")["events_seq"]
        .as_u64()
        .unwrap()
}

/// Every file of a folder, recursively, with its bytes (`.git` files included).
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(folder) = stack.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push((path.clone(), std::fs::read(&path).unwrap_or_default()));
            }
        }
    }
    files.sort();
    files
}

/// `resume` and `gate approve --resume` on a damaged run both exit 2, say `expected` (and the
/// file's path), and leave the run directory and the worktree exactly as they were.
fn refused_unchanged(repo: &RunRepo, run_id: &str, worktree: &Path, expected: &[&str]) {
    let run_dir = repo.run_dir(run_id);
    // `status.json` is refreshed by commands that read the run; the record is the rest.
    let record = |dir: &Path| {
        snapshot(dir)
            .into_iter()
            .filter(|(path, _)| !path.ends_with("status.json") && !path.ends_with("lock"))
            .collect::<Vec<_>>()
    };
    let before = (record(&run_dir), snapshot(worktree));
    for args in [
        vec!["resume", run_id],
        vec!["gate", "approve", run_id, "--as", "lead", "--resume"],
    ] {
        let output = repo.conductor_exits(&args, 2);
        let stderr = stderr_text(&output);
        for text in expected {
            assert!(
                stderr.contains(text),
                "{args:?}: {text:?} not in:\n{stderr}"
            );
        }
        assert!(stderr.contains("events.ndjson"), "{stderr}");
        assert!(stderr.contains("nothing was changed"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert_eq!(
            (record(&run_dir), snapshot(worktree)),
            before,
            "{args:?} changed the run directory or the worktree"
        );
    }
    assert_eq!(
        std::fs::read_to_string(worktree.join("feature.txt")).unwrap(),
        "the feature"
    );
}

/// A run whose `events.ndjson` is gone while `state.json` holds a checkpoint did start: it is
/// refused as such, never taken for a run killed before `run_started` (whose worktree `resume`
/// makes again from scratch, which used to delete the steps' work and then blame "drift").
#[test]
fn a_missing_event_log_is_refused_and_the_worktree_is_kept() {
    let repo = RunRepo::new();
    let (run_id, worktree) = waiting_run(&repo);
    let log = repo.run_dir(&run_id).join("events.ndjson");
    std::fs::remove_file(&log).unwrap();

    refused_unchanged(
        &repo,
        &run_id,
        &worktree,
        &["is missing", "the run started"],
    );
    assert!(!log.exists(), "the log was made again");
}

/// Whole lines the checkpoint accounts for are gone: refused with the last good line and the
/// missing events, instead of reusing their sequence numbers.
#[test]
fn an_event_log_shorter_than_the_checkpoint_is_refused_untouched() {
    let repo = RunRepo::new();
    let (run_id, worktree) = waiting_run(&repo);
    let checkpoint = checkpoint(&repo, &run_id);
    let log = repo.run_dir(&run_id).join("events.ndjson");
    let text = std::fs::read_to_string(&log).unwrap();
    let kept: String = text
        .lines()
        .take(checkpoint as usize - 3)
        .map(|line| format!("{line}\n"))
        .collect();
    std::fs::write(&log, kept).unwrap();
    let last = checkpoint - 3;

    refused_unchanged(
        &repo,
        &run_id,
        &worktree,
        &[
            &format!("its last good line is line {last} (event {last})"),
            &format!("events {}–{checkpoint} are missing or damaged", last + 1),
        ],
    );
}

/// The checkpoint's own last line cut in half: not a crash's torn line (it was made durable
/// before the checkpoint), so not dropped.
#[test]
fn a_torn_line_the_checkpoint_accounts_for_is_refused_not_dropped() {
    let repo = RunRepo::new();
    let (run_id, worktree) = waiting_run(&repo);
    let checkpoint = checkpoint(&repo, &run_id);
    let log = repo.run_dir(&run_id).join("events.ndjson");
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().take(checkpoint as usize).collect();
    let (last, kept) = lines.split_last().unwrap();
    let mut damaged: String = kept.iter().map(|line| format!("{line}\n")).collect();
    damaged.push_str(&last[..last.len() / 2]);
    std::fs::write(&log, damaged).unwrap();

    refused_unchanged(
        &repo,
        &run_id,
        &worktree,
        &[&format!("line {checkpoint} is cut short")],
    );
}

/// A torn line after the checkpoint is what a crash mid-append leaves: it is still dropped, and
/// the run continues with contiguous events.
#[test]
fn a_torn_line_after_the_checkpoint_is_still_dropped() {
    let repo = RunRepo::new();
    let (run_id, _) = waiting_run(&repo);
    let checkpoint = checkpoint(&repo, &run_id);
    let log = repo.run_dir(&run_id).join("events.ndjson");
    let mut text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.lines().count() as u64, checkpoint);
    text.push_str(&format!(
        "{{\"schema_version\":1,\"seq\":{},\"timest",
        checkpoint + 1
    ));
    std::fs::write(&log, text).unwrap();

    let output = repo.conductor_exits(&["gate", "approve", &run_id, "--as", "lead", "--resume"], 0);
    assert!(!stdout_text(&output).is_empty());
    assert_contiguous(&repo.events(&run_id));
}

/// `tnh-conductor --repo DIR ARGS…`, asserting it exits 2 and names `texts`.
fn refused_in(dir: &Path, args: &[&str], texts: &[&str]) {
    let output = crate::support::conductor()
        .arg("--repo")
        .arg(dir)
        .args(["--color", "never"])
        .args(args)
        .output()
        .unwrap();
    let stderr = stderr_text(&output);
    assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
    for text in texts {
        assert!(
            stderr.contains(text),
            "{args:?}: {text:?} not in:\n{stderr}"
        );
    }
}

/// Review 8, defect 4: a copy of the repository used to resume its runs with the original's
/// absolute paths — driving the original's worktree and writing refs into the original's
/// `.git`. It is refused, naming both repositories, and the original is untouched.
#[test]
fn a_copied_repository_does_not_drive_the_originals_run() {
    let repo = RunRepo::new();
    let (run_id, worktree) = waiting_run(&repo);
    let original = repo.path().canonicalize().unwrap();
    let place = tempfile::tempdir().unwrap();
    let copy = place.path().join("copy");
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(repo.path())
        .arg(&copy)
        .status()
        .unwrap();
    assert!(copied.success());
    let refs_before = repo.repo.git(&["for-each-ref"]);
    let worktree_before = snapshot(&worktree);
    let events_before = repo.events(&run_id).len();

    let original_text = original.display().to_string();
    let texts = [
        original_text.as_str(),
        "copied",
        "nothing was changed",
        "--repo",
    ];
    refused_in(&copy, &["resume", &run_id], &texts);
    refused_in(
        &copy,
        &["gate", "approve", &run_id, "--as", "lead", "--resume"],
        &texts,
    );
    // `rollback` already refused it (`workspace::runs::load_run`).
    refused_in(
        &copy,
        &["rollback", &run_id, "--target", "pre_run"],
        &[original_text.as_str(), "is not this repository"],
    );

    assert_eq!(repo.repo.git(&["for-each-ref"]), refs_before);
    assert_eq!(snapshot(&worktree), worktree_before);
    assert_eq!(repo.events(&run_id).len(), events_before);
    // The original still continues where it started.
    repo.conductor_exits(&["gate", "approve", &run_id, "--as", "lead", "--resume"], 0);
}

/// A moved repository: its runs' recorded paths lead nowhere; refused, naming where the run
/// started and how to go on, instead of failing half-way with a default configuration.
#[test]
fn a_moved_repository_refuses_its_runs_naming_where_they_started() {
    let repo = RunRepo::new();
    let (run_id, _) = waiting_run(&repo);
    let original = repo.path().canonicalize().unwrap();
    let place = tempfile::tempdir().unwrap();
    let moved = place.path().join("moved");
    std::fs::rename(repo.path(), &moved).unwrap();

    let original_text = original.display().to_string();
    let texts = [original_text.as_str(), "moved", "move the repository back"];
    refused_in(&moved, &["resume", &run_id], &texts);
    refused_in(
        &moved,
        &["gate", "approve", &run_id, "--as", "lead", "--resume"],
        &texts,
    );
    // Put back, it continues.
    std::fs::rename(&moved, repo.path()).unwrap();
    repo.conductor_exits(&["gate", "approve", &run_id, "--as", "lead", "--resume"], 0);
}
