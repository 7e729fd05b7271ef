//! `tnh test|lint|typecheck` run the validator as RUN_VALIDATION does: they end when the tool
//! ends, kill what it left behind, time out, and keep memory bounded whatever it prints.

use std::path::Path;

use crate::runner_support::is_alive;
use crate::support::{TempRepo, run_tnh, stderr_text, stdout_text, tnh};

/// A repository whose `tests` validator is `sh -c SCRIPT`.
fn repo_with_tests(script: &str) -> TempRepo {
    let repo = TempRepo::new();
    let quoted = serde_json::to_string(script).unwrap();
    repo.write(
        ".tnh/config.yaml",
        &format!("validators:\n  tests: {{argv: [sh, -c, {quoted}]}}\n"),
    );
    repo
}

/// Whether `pid` is alive and still runs `command` (a dead process's pid may be reused).
fn runs(pid: i32, command: &str) -> bool {
    let line = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let line = String::from_utf8_lossy(&line)
        .trim_end_matches('\0')
        .replace('\0', " ");
    is_alive(pid) && line == command
}

fn read_pid(path: &Path) -> i32 {
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// `tnh test` waited (with `Command::output`) until every process that
/// inherited the tool's output exited — a `sleep 15 &` made it take 15 s, a server left
/// running hung it — and killed nothing the tool left behind. Now it ends with the tool's own
/// process, as RUN_VALIDATION does: a process still holding the output is killed after the
/// leak timeout, one left elsewhere by the final sweep, and both are named.
#[test]
fn a_check_returns_when_the_tool_exits_and_kills_what_it_left_behind() {
    let repo = repo_with_tests(
        "(sleep 20; echo late > late.txt) & \
         sleep 1002 >/dev/null 2>&1 </dev/null & echo $! > detached.pid; \
         echo 'tests passed'; exit 0",
    );
    let output = run_tnh(repo.path(), &["test"]);
    let text = stdout_text(&output);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{text}{}",
        stderr_text(&output)
    );
    assert!(text.starts_with("tests: passed (exit 0, "), "{text}");
    assert!(
        text.contains("process(es) the tool left running:") && text.contains("sleep 20"),
        "{text}"
    );
    // The process holding the output was killed (it never wrote), and so was the one that
    // held nothing of the tool's.
    assert!(!repo.path().join("late.txt").exists(), "{text}");
    let detached = read_pid(&repo.path().join("detached.pid"));
    assert!(!runs(detached, "sleep 1002"), "{text}");
}

/// `tnh test` had no time limit. Now `--timeout` (default 1 hour, as for
/// RUN_VALIDATION) kills the tool and everything it started, and the summary says TIMED OUT,
/// never passed, with exit code 1.
#[test]
fn a_check_that_runs_past_its_timeout_is_killed_and_reported_as_timed_out() {
    let repo = repo_with_tests("echo $$ > tool.pid; echo 'error: still going'; exec sleep 1003");
    // The limit counts from the spawn: 1 s is far more than the shell takes to write the pid
    // and the error line it is judged by, however loaded the machine.
    let output = run_tnh(repo.path(), &["test", "--timeout", "1s"]);
    let text = stdout_text(&output);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{text}{}",
        stderr_text(&output)
    );
    assert!(
        text.starts_with("tests: TIMED OUT (timeout: wall-clock limit of 1s reached"),
        "{text}"
    );
    assert!(
        text.contains("first errors:\n  error: still going"),
        "{text}"
    );
    assert!(!runs(read_pid(&repo.path().join("tool.pid")), "sleep 1003"));
    let json = run_tnh(repo.path(), &["test", "--timeout", "1s", "--json"]);
    assert_eq!(json.status.code(), Some(1));
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(value["outcome"], "killed_timeout");
    assert_eq!(value["timed_out"], true);
    assert_eq!(value["timeout_ms"], 1000);
    assert_eq!(value["exit_code"], serde_json::Value::Null);
    let refused = run_tnh(repo.path(), &["test", "--timeout", "soon"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        stderr_text(&refused).contains("`soon` is not a duration"),
        "{}",
        stderr_text(&refused)
    );
}

/// A step ended by the conductor (SIGTERM to the agent's group) while
/// `tnh test` ran left the tool running in a group of its own. Now SIGTERM to `tnh` ends the
/// tool and everything it started, and the summary says it was stopped.
#[test]
fn a_signal_to_tnh_ends_the_tool_and_everything_it_started() {
    let repo = repo_with_tests(
        "sleep 1004 & echo $! > child.pid; echo started; echo ready > ready.fifo; wait",
    );
    nix::unistd::mkfifo(
        &repo.path().join("ready.fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let child = tnh()
        .current_dir(repo.path())
        .arg("test")
        .env_remove("TNH_STEP_DIR")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Opening the FIFO waits for the tool to open it: then its child is running.
    let ready = std::fs::read_to_string(repo.path().join("ready.fifo")).unwrap();
    assert_eq!(ready, "ready\n");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let output = child.wait_with_output().unwrap();
    let text = stdout_text(&output);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{text}{}",
        stderr_text(&output)
    );
    assert!(
        text.starts_with("tests: STOPPED (cancelled: tnh received SIGTERM"),
        "{text}"
    );
    assert!(!runs(
        read_pid(&repo.path().join("child.pid")),
        "sleep 1004"
    ));
}

/// `tnh lint` kept the tool's whole output in memory, twice (400 MB of
/// output took 800 MB), to print 35 lines. Now the output is streamed to a file (inside a
/// run, the step folder's `tnh-<name>.log`, which gets all of it) and only the printed lines
/// are kept: printing 200 MB costs tnh far less than 200 MB.
#[test]
fn a_check_printing_hundreds_of_megabytes_keeps_memory_bounded() {
    // 2,000,000 lines of 99 x and a newline: 200 MB.
    let lines: u64 = 2_000_000;
    let xs = "x".repeat(99);
    let repo = TempRepo::new();
    repo.write(
        ".tnh/config.yaml",
        &format!(
            "validators:\n  lint: {{argv: [sh, -c, \"yes {xs} | head -n {lines}; echo 'error: the last line'; exit 1\"]}}\n"
        ),
    );
    let step_dir = tempfile::tempdir().unwrap();
    // python3 reports the peak resident size of its child (tnh), as the validate tests do.
    let script = "import resource, subprocess, sys\n\
                  result = subprocess.run(sys.argv[1:], capture_output=True)\n\
                  sys.stdout.write(result.stdout.decode('utf-8', 'replace'))\n\
                  sys.stderr.write('%d %d' % (result.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n";
    let output = std::process::Command::new("python3")
        .args(["-c", script, env!("CARGO_BIN_EXE_tnh"), "lint"])
        .current_dir(repo.path())
        .env("TNH_STEP_DIR", step_dir.path())
        .output()
        .expect("python3 is needed by the test suite (see README)");
    let figures = stderr_text(&output);
    let mut parts = figures.split_whitespace().map(|part| part.parse::<u64>());
    let code = parts.next().unwrap().unwrap();
    let peak_kib = parts.next().unwrap().unwrap();
    let text = stdout_text(&output);
    assert_eq!(code, 1, "{text}{figures}");
    assert!(
        peak_kib < 64 * 1024,
        "tnh lint peaked at {peak_kib} KiB for {} bytes of output",
        lines * 100
    );
    assert!(text.starts_with("lint: FAILED (exit 1, "), "{text}");
    assert!(
        text.contains("first errors:\n  error: the last line\ntail:\n"),
        "{text}"
    );
    let tail: Vec<&str> = text
        .split("tail:\n")
        .nth(1)
        .unwrap()
        .lines()
        .take_while(|line| line.starts_with("  "))
        .collect();
    assert_eq!(tail.len(), 20, "{text}");
    assert_eq!(tail[19], "  error: the last line");
    assert_eq!(tail[0], format!("  {}", "x".repeat(99)));
    // The log has every byte.
    let log = step_dir.path().join("tnh-lint.log");
    assert_eq!(
        std::fs::metadata(&log).unwrap().len(),
        lines * 100 + "error: the last line\n".len() as u64
    );
    assert!(
        text.contains(&format!("full output: {}", log.display())),
        "{text}"
    );
}

/// The docs said `tnh test` exits with the tool's exit code; codes above 4
/// became 1, and a tool's own 2 read as tnh's 2 ("not configured", bad usage). The contract is
/// now one an agent can act on: 0 the tool passed, 1 it ran and did not pass (its own code is
/// printed and in `--json`), 2 it was not run.
#[test]
fn tnh_check_exits_0_passed_1_failed_2_not_run() {
    for code in [0, 1, 2, 3, 4, 5, 42, 127, 255] {
        let repo = repo_with_tests(&format!("echo ran; exit {code}"));
        let text = run_tnh(repo.path(), &["test"]);
        let expected = if code == 0 { 0 } else { 1 };
        assert_eq!(
            text.status.code(),
            Some(expected),
            "tool exit {code}: {}",
            stdout_text(&text)
        );
        let verdict = if code == 0 {
            "tests: passed (exit 0,".to_owned()
        } else {
            format!("tests: FAILED (exit {code},")
        };
        assert!(
            stdout_text(&text).starts_with(&verdict),
            "{code}: {}",
            stdout_text(&text)
        );
        let json = run_tnh(repo.path(), &["test", "--json"]);
        assert_eq!(json.status.code(), Some(expected), "{code}");
        let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
        assert_eq!(report["exit_code"], code, "{report}");
    }
    // Not run: nothing configured or detected, a program that does not exist, a bad option.
    let bare = TempRepo::new();
    assert_eq!(run_tnh(bare.path(), &["test"]).status.code(), Some(2));
    let missing = TempRepo::new();
    missing.write(
        ".tnh/config.yaml",
        "validators:\n  tests: {argv: [/nonexistent/tool]}\n",
    );
    let output = run_tnh(missing.path(), &["test"]);
    assert_eq!(output.status.code(), Some(2), "{}", stdout_text(&output));
    assert_eq!(
        run_tnh(missing.path(), &["test", "--no-such-option"])
            .status
            .code(),
        Some(2)
    );
}
