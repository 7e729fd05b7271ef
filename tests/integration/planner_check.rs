//! `planner check DIR`: every vector file is checked before the planner is asked anything,
//! and a planner that gives no usable answer (it cannot run, its answers are invalid) is shown
//! as such, with its reason — never as drift, never as a pass the guard derived alone.

use std::path::{Path, PathBuf};

use crate::support::{conductor, fixture, stderr_text, stdout_text};

/// A folder holding the shipped vectors whose file names start with `prefix`.
fn shipped_vectors(dir: &Path, prefix: &str) -> PathBuf {
    let folder = dir.join("vectors");
    std::fs::create_dir_all(&folder).unwrap();
    for entry in std::fs::read_dir(fixture("planner_vectors"))
        .unwrap()
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(prefix) {
            std::fs::copy(entry.path(), folder.join(name)).unwrap();
        }
    }
    folder
}

/// A configuration with a command planner `judge` that logs each call, then runs `body`.
fn judge_config(dir: &Path, body: &str) -> PathBuf {
    let script = dir.join("judge.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncat > /dev/null\necho call >> \"{}\"\n{body}\n",
            dir.join("judge.calls").display()
        ),
    )
    .unwrap();
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "planners:\n  judge: {{kind: command, argv: [sh, \"{}\"], attempts: 1}}\n  dead: {{kind: command, argv: [/nonexistent/planner], attempts: 1}}\n",
            script.display()
        ),
    )
    .unwrap();
    config
}

fn calls(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("judge.calls"))
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

fn check(config: &Path, folder: &Path, planner: &str) -> std::process::Output {
    conductor()
        .arg("--config")
        .arg(config)
        .args(["planner", "check"])
        .arg(folder)
        .args(["--planner", planner])
        .output()
        .unwrap()
}

/// Malformed files — sorted before and after good ones — are all reported together with exit
/// 2, and the planner is never called: no paid answer is thrown away.
#[test]
fn malformed_vector_files_are_all_reported_before_any_planner_call() {
    let dir = tempfile::tempdir().unwrap();
    let config = judge_config(
        dir.path(),
        r#"echo '{"status": "success", "next_step": null, "blockers": [], "risk_flags": []}'"#,
    );
    let folder = shipped_vectors(dir.path(), "0");
    std::fs::write(folder.join("00_broken.json"), "{ not json").unwrap();
    std::fs::write(
        folder.join("99_typo.json"),
        r#"{"name": "typo", "envelope": {"run_id": "x"}, "expect": {"status": "success"}}"#,
    )
    .unwrap();

    let output = check(&config, &folder, "judge");

    let stderr = stderr_text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("2 of the 11 vector file(s)") && stderr.contains("no vector was run"),
        "{stderr}"
    );
    assert!(stderr.contains("00_broken.json` is not JSON"), "{stderr}");
    assert!(
        stderr.contains(
            "99_typo.json` is not a decision vector: `envelope` is not valid planner input"
        ),
        "{stderr}"
    );
    assert_eq!(calls(dir.path()), 0, "the planner was never asked");
    assert_eq!(stdout_text(&output), "", "no table");
}

/// A planner that cannot run gives one `error` row per vector with the spawn failure — not
/// `drift`, and not the `pass` the guard would derive alone from the envelope — and exit 4.
#[test]
fn a_planner_that_cannot_run_is_a_planner_failure_with_its_reason_on_every_row() {
    let dir = tempfile::tempdir().unwrap();
    let config = judge_config(dir.path(), "exit 1");
    let folder = fixture("planner_vectors");
    let count = std::fs::read_dir(&folder).unwrap().count();

    let output = check(&config, &folder, "dead");

    let stdout = stdout_text(&output);
    assert_eq!(
        output.status.code(),
        Some(4),
        "{stdout}{}",
        stderr_text(&output)
    );
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|line| {
            line.split_whitespace()
                .nth(1)
                .is_some_and(|word| word.starts_with("vector_"))
        })
        .collect();
    assert_eq!(rows.len(), count, "{stdout}");
    assert!(
        rows.iter().all(|row| row.starts_with("error ")),
        "every vector is a planner failure: {stdout}"
    );
    let reasons: Vec<&str> = stdout
        .lines()
        .filter(|line| line.trim_start().starts_with("planner failed: "))
        .collect();
    assert_eq!(reasons.len(), count, "{stdout}");
    assert!(
        reasons
            .iter()
            .all(|reason| reason.contains("planner `dead` failed 1 time(s)")
                && reason.contains("/nonexistent/planner")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "{count} vectors: 0 pass, 0 drift, {count} planner failure(s) (planner `dead`)"
        )),
        "{stdout}"
    );
    assert!(
        stderr_text(&output).contains(&format!(
            "planner `dead` gave no usable answer for {count} of {count} vectors"
        )),
        "{}",
        stderr_text(&output)
    );
}

/// A planner that runs but answers what is no decision is a failure naming why, beside the
/// vectors it did answer: one bad answer does not hide the others.
#[test]
fn invalid_answers_are_planner_failures_beside_the_answers_that_matched() {
    let dir = tempfile::tempdir().unwrap();
    // Answers `success` on the first call, prose afterwards.
    let config = judge_config(
        dir.path(),
        &format!(
            "if [ \"$(wc -l < \"{}\")\" -le 1 ]; then echo '{{\"status\": \"success\"}}'; else echo 'I think it is fine'; fi",
            dir.path().join("judge.calls").display()
        ),
    );
    let folder = shipped_vectors(dir.path(), "0");
    for entry in std::fs::read_dir(&folder).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !(name.starts_with("01_") || name.starts_with("02_")) {
            std::fs::remove_file(entry.path()).unwrap();
        }
    }

    let output = check(&config, &folder, "judge");

    let stdout = stdout_text(&output);
    assert_eq!(output.status.code(), Some(4), "{stdout}");
    assert!(
        stdout.lines().any(|line| line
            .split_whitespace()
            .take(2)
            .eq(["pass", "vector_success_clean"])),
        "{stdout}"
    );
    assert!(
        stdout.lines().any(|line| line
            .split_whitespace()
            .take(2)
            .eq(["error", "vector_partial_fixable"])),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "planner failed: planner `judge` failed 1 time(s); last: the answer is not JSON"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("2 vectors: 1 pass, 0 drift, 1 planner failure(s)"),
        "{stdout}"
    );
    assert_eq!(calls(dir.path()), 2);
}
