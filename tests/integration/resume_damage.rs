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

/// A copy of the repository used to resume its runs with the original's
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

/// An agent step, then a validation: both save a guard state while their process runs.
const GUARDED: &str = "workflow_id: guarded\nversion: 1\ndescription: an agent step, then a validation\nentry_step: work\nsteps:\n  - id: work\n    opcode: RUN_AGENT\n    agent: scripted\n    prompt: |\n      WRITE feature.txt: the feature\n    routes:\n      \"*\": check\n  - id: check\n    opcode: RUN_VALIDATION\n    run: [tests]\n    routes:\n      completed: STOP\n      \"*\": failed\n  - id: failed\n    opcode: STOP\n    outcome: failure\n";

/// A repository with the `tests` validator of [`GUARDED`] configured.
fn guarded_repo() -> RunRepo {
    let repo = RunRepo::new();
    let config = repo.path().join(".tnh/config.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("{text}validators:\n  tests: {{argv: [sh, -c, \"test -f feature.txt\"]}}\n"),
    )
    .unwrap();
    repo
}

/// A run of [`GUARDED`] with the conductor killed right after the `runner_started` event of
/// `step` (its guard state saved, its process about to start); returns the repository, the
/// run id and the visit's `guard_state.json`, which is there.
fn killed_in_guarded_step(step: &str) -> (RunRepo, String, PathBuf) {
    let reference = guarded_repo();
    let (code, result, output) =
        reference.run(&reference.workflow_text("guarded.yaml", GUARDED), &[]);
    assert_eq!(code, Some(0), "{result}\n{}", stderr_text(&output));
    let events = reference.events(result["run_id"].as_str().unwrap());
    let seq = events
        .iter()
        .find(|event| event["event_type"] == "runner_started" && event["step_id"] == step)
        .unwrap()["seq"]
        .as_u64()
        .unwrap();
    let repo = guarded_repo();
    repo.run_killed_at(&repo.workflow_text("guarded.yaml", GUARDED), seq);
    let run_id = repo.only_run_id();
    let saved = repo
        .run_dir(&run_id)
        .join(format!("artifacts/{step}/1/guard_state.json"));
    assert!(saved.is_file(), "killed while {step} runs");
    (repo, run_id, saved)
}

/// What the step's process did before it was killed: `main` moved to a commit of its own
/// (under the operator's checkout) and the repository's git configuration edited. Returns the
/// commit `main` is at now.
fn move_main_and_edit_git_config(repo: &RunRepo) -> String {
    let commit = repo.repo.git(&[
        "commit-tree",
        "HEAD^{tree}",
        "-p",
        "HEAD",
        "-m",
        "the agent's commit on main",
    ]);
    repo.repo.git(&["update-ref", "refs/heads/main", &commit]);
    repo.repo.git(&["config", "agent.was", "here"]);
    commit
}

/// `resume` of a run whose interrupted visit cannot be checked: refused with exit 2 whatever
/// the repository options, naming the file, what cannot be checked and the way on, with
/// nothing written or put back.
fn refused_for_its_guard_state(
    repo: &RunRepo,
    run_id: &str,
    saved: &Path,
    main: &str,
    problem: &str,
) {
    let bytes = std::fs::read(saved).ok();
    let events = repo.events(run_id).len();
    for extra in [None, Some("--accept-drift"), Some("--put-back")] {
        let mut args = vec!["resume", run_id];
        args.extend(extra);
        let output = repo.conductor_exits(&args, 2);
        let stderr = stderr_text(&output);
        for text in [
            &saved.display().to_string(),
            problem,
            "cannot be checked",
            "refs",
            "git configuration",
            "the operator's checkout",
            "nothing was changed",
            &format!("tnh-conductor resume {run_id} --skip-guard-check"),
        ] {
            assert!(
                stderr.contains(text),
                "{args:?}: {text:?} not in:\n{stderr}"
            );
        }
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert_eq!(
            repo.events(run_id).len(),
            events,
            "{args:?} recorded events"
        );
        assert_eq!(
            std::fs::read(saved).ok(),
            bytes,
            "{args:?} touched the file"
        );
        assert_eq!(
            repo.repo.git(&["rev-parse", "main"]),
            main,
            "{args:?} put main back"
        );
        assert_eq!(repo.repo.git(&["config", "agent.was"]), "here");
    }
}

/// `resume --skip-guard-check` goes on without the check: a `guard_check_skipped` event of
/// the interrupted visit says why, resume says so, nothing is charged to the visit or put
/// back, and the run completes.
fn skipped(repo: &RunRepo, run_id: &str, step: &str, saved: &Path, main: &str, reason: &str) {
    let output = repo.conductor_exits(&["resume", run_id, "--skip-guard-check"], 0);
    let stderr = stderr_text(&output);
    assert!(
        stderr.contains(&format!(
            "{step} #1: NOT CHECKED (--skip-guard-check) — the guard state {reason}"
        )),
        "{stderr}"
    );
    let events = repo.events(run_id);
    assert_contiguous(&events);
    let skip = crate::kernel_support::first_event(&events, "guard_check_skipped");
    assert_eq!(
        (&skip["step_id"], &skip["visit"]),
        (&step.into(), &1.into()),
        "{skip}"
    );
    assert_eq!(skip["guard_state"], saved.display().to_string(), "{skip}");
    assert_eq!(skip["by"], "operator", "{skip}");
    assert!(skip["reason"].as_str().unwrap().contains(reason), "{skip}");
    let interrupted = crate::kernel_support::first_event(&events, "step_interrupted");
    assert_eq!(interrupted["step_id"], step, "{interrupted}");
    assert!(interrupted["seq"].as_u64() > skip["seq"].as_u64());
    assert!(interrupted.get("guard_report").is_none(), "{interrupted}");
    assert!(
        !events
            .iter()
            .any(|event| event["event_type"] == "policy_violation"),
        "nothing is charged to the unchecked visit"
    );
    assert!(!saved.exists(), "the spent guard state is removed");
    assert_eq!(
        repo.repo.git(&["rev-parse", "main"]),
        main,
        "main left as it is"
    );
    assert_eq!(repo.repo.git(&["config", "agent.was"]), "here");
    assert_eq!(
        std::fs::read_to_string(repo.run_dir(run_id).join("final-state.txt")).unwrap(),
        "completed success check\n"
    );
}

/// A `guard_state.json` cut short (or not JSON) made `resume` fail with
/// exit 4 and a hint about disk space, and no way on. It is refused (exit 2), naming the file
/// and what cannot be checked, until it is put back or the check is skipped.
#[test]
fn a_damaged_guard_state_is_refused_until_put_back_or_skipped() {
    let (repo, run_id, saved) = killed_in_guarded_step("work");
    let good = std::fs::read(&saved).unwrap();
    std::fs::write(&saved, &good[..good.len() / 2]).unwrap();
    let main = move_main_and_edit_git_config(&repo);

    refused_for_its_guard_state(&repo, &run_id, &saved, &main, "is damaged (");

    // Not JSON at all: the same.
    std::fs::write(&saved, "garbage").unwrap();
    refused_for_its_guard_state(&repo, &run_id, &saved, &main, "is damaged (");
    skipped(&repo, &run_id, "work", &saved, &main, "is damaged (");
}

/// A `guard_state.json` deleted after the step's process started (an
/// agent that deletes it, moves `main` and kills the conductor) made `resume` skip the check
/// silently. The events show the process started and the visit never ended: refused, for an
/// agent step and for a validation, until the check is skipped.
#[test]
fn a_guard_state_deleted_after_its_process_started_is_refused_until_skipped() {
    for (step, process) in [("work", "agent"), ("check", "validators")] {
        let (repo, run_id, saved) = killed_in_guarded_step(step);
        std::fs::remove_file(&saved).unwrap();
        let main = move_main_and_edit_git_config(&repo);
        let problem = format!("is missing, although the events show that the {process} started");

        refused_for_its_guard_state(&repo, &run_id, &saved, &main, &problem);
        skipped(&repo, &run_id, step, &saved, &main, "is missing");
    }
}

/// A readable guard state is checked even with `--skip-guard-check`: the flag only goes on
/// without a check that cannot be made.
#[test]
fn skip_guard_check_does_not_skip_a_check_that_can_be_made() {
    let (repo, run_id, saved) = killed_in_guarded_step("work");
    let before = repo.repo.git(&["rev-parse", "main"]);
    move_main_and_edit_git_config(&repo);

    let output = repo.conductor_exits(&["resume", &run_id, "--skip-guard-check"], 2);
    assert!(
        stderr_text(&output).contains("--put-back"),
        "{}",
        stderr_text(&output)
    );
    repo.conductor_exits(&["resume", &run_id, "--skip-guard-check", "--put-back"], 0);
    let events = repo.events(&run_id);
    assert!(
        !events
            .iter()
            .any(|event| event["event_type"] == "guard_check_skipped")
    );
    assert_eq!(
        repo.repo.git(&["rev-parse", "main"]),
        before,
        "main put back"
    );
    assert!(!saved.exists());
}

/// A `metadata.json` cut short (a crash or a full disk while it was
/// written, an edit) made `resume`, `runs show` and the gate commands fail with exit 4 and a
/// hint to "inspect it". They refuse the run (exit 2) naming the file and saying the run
/// directory is damaged, with nothing changed; `runs list` lists it as damaged beside the
/// other runs.
#[test]
fn a_metadata_file_cut_short_is_refused_as_a_damaged_run_directory() {
    let repo = RunRepo::new();
    let (sound, _) = waiting_run(&repo);
    let (run_id, worktree) = waiting_run(&repo);
    let metadata = repo.run_dir(&run_id).join("metadata.json");
    let text = std::fs::read_to_string(&metadata).unwrap();
    std::fs::write(&metadata, &text[..text.len() / 2]).unwrap();
    let run_dir = repo.run_dir(&run_id);
    let record = |dir: &Path| {
        snapshot(dir)
            .into_iter()
            .filter(|(path, _)| !path.ends_with("status.json") && !path.ends_with("lock"))
            .collect::<Vec<_>>()
    };
    let before = (record(&run_dir), snapshot(&worktree));

    for args in [
        vec!["resume", &run_id],
        vec!["gate", "approve", &run_id, "--as", "lead", "--resume"],
        vec!["gate", "reject", &run_id, "--as", "lead"],
        vec!["gate", "show", &run_id],
        vec!["runs", "show", &run_id],
    ] {
        let output = repo.conductor_exits(&args, 2);
        let stderr = stderr_text(&output);
        for expected in [
            &format!("`{}` is not a valid run metadata", metadata.display()),
            "the run directory is damaged",
            "nothing was changed",
            "put it back",
        ] {
            assert!(
                stderr.contains(expected),
                "{args:?}: {expected:?} not in:\n{stderr}"
            );
        }
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert_eq!(
            (record(&run_dir), snapshot(&worktree)),
            before,
            "{args:?} changed the run directory or the worktree"
        );
    }

    let listed = repo.conductor_exits(&["runs", "list"], 0);
    let text = stdout_text(&listed);
    assert!(
        text.contains(&format!("{sound}  waiting    gated")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "{run_id}  waiting    gated                review (damaged)"
        )),
        "{text}"
    );
    assert!(
        stderr_text(&listed).contains(&format!("run {run_id} is damaged")),
        "{}",
        stderr_text(&listed)
    );
    // The sound run is not held up by the damaged one.
    repo.conductor_exits(&["gate", "approve", &sound, "--as", "lead", "--resume"], 0);
}

/// `runs events` of a run whose log ends before its checkpoint (the log
/// `resume` refuses) printed the short log as if it were complete. It still prints it, with a
/// warning naming the missing events; so does `runs show`.
#[test]
fn runs_events_warns_of_a_log_that_ends_before_the_checkpoint() {
    let repo = RunRepo::new();
    let (run_id, _) = waiting_run(&repo);
    let intact = repo.conductor_exits(&["runs", "events", &run_id], 0);
    assert!(
        !stderr_text(&intact).contains("warning"),
        "{}",
        stderr_text(&intact)
    );

    let checkpoint = checkpoint(&repo, &run_id);
    let log = repo.run_dir(&run_id).join("events.ndjson");
    let text = std::fs::read_to_string(&log).unwrap();
    let kept: String = text
        .lines()
        .take(checkpoint as usize - 3)
        .map(|line| format!("{line}\n"))
        .collect();
    std::fs::write(&log, &kept).unwrap();
    let last = checkpoint - 3;
    let missing = format!("events {}–{checkpoint} are missing or damaged", last + 1);

    let events = repo.conductor_exits(&["runs", "events", &run_id], 0);
    assert_eq!(stdout_text(&events), kept);
    let stderr = stderr_text(&events);
    assert!(
        stderr.contains(&format!(
            "warning: the event log of run {run_id} is incomplete"
        )) && stderr.contains(&format!("its last good line is line {last} (event {last})"))
            && stderr.contains(&missing),
        "{stderr}"
    );
    let shown = repo.conductor_exits(&["runs", "show", &run_id], 0);
    assert!(
        stdout_text(&shown).contains(&missing),
        "{}",
        stdout_text(&shown)
    );
    assert!(
        stderr_text(&shown).contains(&missing),
        "{}",
        stderr_text(&shown)
    );

    std::fs::remove_file(&log).unwrap();
    let events = repo.conductor_exits(&["runs", "events", &run_id], 0);
    assert!(
        stderr_text(&events).contains(&format!(
            "`{}` is missing, but the run's checkpoint",
            log.display()
        )),
        "{}",
        stderr_text(&events)
    );
    assert_eq!(
        std::fs::read_to_string(&log).ok(),
        None,
        "nothing is written"
    );
}
