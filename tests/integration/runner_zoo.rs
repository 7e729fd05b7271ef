//! The zoo: command agents that misbehave in every way we know, each classified right and
//! none leaving a process behind (checked by `Step::run`).

use std::time::Duration;

use tnh_conductor::outcome::Outcome;
use tnh_conductor::runner::{LINE_CAP, Stream};

use crate::runner_support::{KillMarked, Step, limits, still_running, zoo};

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

#[tokio::test]
async fn well_behaved_command_gets_the_prompt_on_a_closed_stdin_and_completes() {
    let step = Step::command(&["sh", &zoo("echo-prompt.sh")]);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::Completed, "{}", run.cause);
    assert_eq!(run.cause, "exit code 0");
    assert!(
        step.read("stdout.txt")
            .starts_with("Write hello to out.txt.\n")
    );
    assert_eq!(step.read("prompt.md"), "Write hello to out.txt.\n");
    assert!(step.read("final_response.md").contains("Write hello"));
}

#[tokio::test]
async fn silent_hang_is_killed_idle() {
    let mut step = Step::command(&["sh", &zoo("silent-hang.sh")]);
    step.request.limits = limits(Duration::from_secs(30), Some(ms(300)));
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::KilledIdle);
    assert_eq!(run.cause, "idle_timeout: no progress for 300ms");
    assert!(run.supervised.termination.sigterm_after_ms.is_some());
}

#[tokio::test]
async fn endless_output_without_newlines_is_bounded_and_killed_by_the_wall_clock() {
    let mut step = Step::command(&["sh", &zoo("no-newlines-forever.sh")]);
    step.request.limits = limits(ms(1500), Some(ms(1000)));
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::KilledTimeout, "{}", run.cause);
    assert_eq!(run.cause, "timeout: wall-clock limit of 1.5s reached");
    let written = std::fs::metadata(step.file("stdout.txt")).unwrap().len();
    assert_eq!(
        written, run.supervised.stdout_bytes,
        "every byte reached the file"
    );
    assert!(
        written > LINE_CAP as u64,
        "the line outgrew the cap ({written} bytes)"
    );
    let last = &run.supervised.tail.last().unwrap().text;
    assert!(
        last.len() < 8192 && last.contains("more bytes]"),
        "the tail holds a cut line"
    );
}

#[tokio::test]
async fn unanswered_question_is_killed_by_policy() {
    let mut step = Step::command(&["sh", &zoo("asks-continue.sh")]);
    step.request.limits = limits(Duration::from_secs(30), Some(Duration::from_secs(20)));
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::KilledPolicy);
    assert_eq!(run.cause, r#"interactive_prompt: "Continue? [y/N]""#);
    let tail: Vec<&str> = run
        .supervised
        .tail
        .iter()
        .map(|line| line.text.as_str())
        .collect();
    assert_eq!(tail, ["Checking out files... done", "Continue? [y/N] "]);
}

#[tokio::test]
async fn large_output_is_streamed_to_disk_exactly() {
    let size: u64 = 64 * 1024 * 1024;
    let mut step = Step::command(&["sh", &zoo("big-output.sh")]);
    step.set("TNH_ZOO_BYTES", &size.to_string());
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::Completed, "{}", run.cause);
    assert_eq!(run.supervised.stdout_bytes, size);
    assert_eq!(
        std::fs::metadata(step.file("stdout.txt")).unwrap().len(),
        size
    );
    let line_length = "the quick brown fox jumps over the lazy dog 0123456789\n".len() as u64;
    assert_eq!(run.supervised.stdout_lines, size.div_ceil(line_length));
    assert_eq!(run.supervised.tail.len(), 50);
}

#[tokio::test]
async fn grandchild_holding_stdout_after_the_leader_exits_is_killed_and_reported() {
    let step = Step::command(&["sh", &zoo("grandchild-holds-stdout.sh")]);
    let run = step.run().await;
    assert_eq!(
        run.outcome,
        Outcome::Completed,
        "the leader itself succeeded"
    );
    assert!(run.supervised.termination.pipes_held_after_exit);
    let leaked = &run.supervised.leaked;
    assert_eq!(leaked.len(), 1, "{leaked:?}");
    assert!(leaked[0].command.contains("sleep 300"));
    assert!(!leaked[0].left_group);
    assert_eq!(run.metadata.leaked_processes, *leaked);
}

#[tokio::test]
async fn sigterm_ignored_means_sigkill_after_the_grace_period() {
    let mut step = Step::command(&["sh", &zoo("ignores-sigterm.sh")]);
    // The wall clock starts at the spawn, and SIGTERM must find the trap installed: 1 s
    // is far more than `sh` takes to reach it. (The timer rules themselves are checked
    // with a controlled clock in `runner::state`.)
    step.request.limits = limits(ms(1000), None);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::KilledTimeout);
    let termination = &run.supervised.termination;
    let (term, kill) = (
        termination.sigterm_after_ms.unwrap(),
        termination.sigkill_after_ms.unwrap(),
    );
    assert!(
        kill >= term + 300,
        "SIGKILL came only after the grace period ({term} → {kill})"
    );
    assert_eq!(run.supervised.signal, Some(9));
    assert!(!step.read("stdout.txt").contains("still here"));
}

#[tokio::test]
async fn setsid_escapee_holding_stdout_is_found_by_its_token_and_killed() {
    let step = Step::command(&["sh", &zoo("setsid-escape.sh")]);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::Completed);
    let escaped: Vec<_> = run
        .supervised
        .leaked
        .iter()
        .filter(|stray| stray.left_group)
        .collect();
    assert_eq!(escaped.len(), 1, "{:?}", run.supervised.leaked);
    assert!(!still_running(escaped[0]));
}

#[tokio::test]
async fn setsid_daemon_with_closed_pipes_is_found_by_the_final_sweep() {
    let step = Step::command(&["sh", &zoo("setsid-escape-silent.sh")]);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::Completed);
    assert!(!run.supervised.termination.pipes_held_after_exit);
    let daemon_pid: i32 = step
        .read("stdout.txt")
        .trim()
        .trim_start_matches("daemon ")
        .parse()
        .unwrap();
    let stray = run
        .supervised
        .leaked
        .iter()
        .find(|stray| stray.pid == daemon_pid);
    assert!(
        stray.is_some_and(|stray| stray.left_group),
        "{:?}",
        run.supervised.leaked
    );
    assert!(!stray.is_some_and(still_running));
}

#[tokio::test]
async fn exit_137_is_an_error_that_names_sigkill() {
    let step = Step::command(&["sh", &zoo("exits-137.sh")]);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::Error);
    assert_eq!(run.supervised.exit_code, Some(137));
    assert!(
        run.cause.starts_with("exit code 137 (128+9"),
        "{}",
        run.cause
    );
    assert!(run.cause.contains("SIGKILL"));
}

#[tokio::test]
async fn closing_stdout_early_is_not_the_end_of_the_process() {
    let mut step = Step::command(&["sh", &zoo("closes-stdout-early.sh")]);
    step.request.limits = limits(Duration::from_secs(30), Some(ms(400)));
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::KilledIdle, "{}", run.cause);
    assert_eq!(step.read("stdout.txt"), "closing my output\n");
}

#[tokio::test]
async fn invalid_utf8_is_kept_raw_on_disk_and_replaced_in_the_tail() {
    let step = Step::command(&["sh", &zoo("invalid-utf8.sh")]);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::Completed);
    let raw = std::fs::read(step.file("stdout.txt")).unwrap();
    assert!(
        raw.windows(2).any(|pair| pair == b"\xff\xfe"),
        "raw bytes preserved"
    );
    let tail = &run.supervised.tail;
    assert!(
        tail.iter()
            .any(|line| line.stream == Stream::Stdout && line.text.contains('\u{fffd}'))
    );
    assert!(
        tail.iter()
            .any(|line| line.stream == Stream::Stderr && line.text.starts_with("partial"))
    );
    let metadata: serde_json::Value =
        serde_json::from_str(&step.read("runner_metadata.json")).unwrap();
    assert_eq!(metadata["outcome"], "completed");
}

#[tokio::test]
async fn a_timeout_is_never_success_even_when_the_agent_exits_0_on_sigterm() {
    let mut step = Step::command(&["sh", &zoo("exits-0-on-sigterm.sh")]);
    // The wall clock starts at the spawn, and SIGTERM must find the trap installed: 1 s
    // is far more than `sh` takes to reach it. (The timer rules themselves are checked
    // with a controlled clock in `runner::state`.)
    step.request.limits = limits(ms(1000), None);
    step.request.limits.grace = Duration::from_secs(30);
    let run = step.run().await;
    assert_eq!(run.outcome, Outcome::KilledTimeout);
    assert_eq!(
        run.supervised.exit_code,
        Some(0),
        "the agent itself exited 0"
    );
    assert_eq!(
        run.supervised.termination.sigkill_after_ms, None,
        "no SIGKILL was needed"
    );
    assert_eq!(
        step.read("stdout.txt"),
        "working\ncleaned up\n",
        "output drained during grace"
    );
    // What a stopped program was printing is not its answer (it was: "working\ncleaned up").
    assert!(!step.file("final_response.md").exists());
    assert!(!run.metadata.final_response_present);
}

/// A fork chain (each generation forks the next and exits) started by an agent that then
/// exits 0 used to outlive the step: the final sweep looked once, saw only dying generations
/// and sent nothing, and the run recorded no leak. Now the sweep freezes and kills in passes
/// until one finds nothing. The old sweep missed the chain in about half the steps, so each
/// test runs three.
async fn fork_chain_is_stopped_killed_and_reported(mode: &str) {
    for _ in 0..3 {
        let mark = KillMarked::new("TNH_ZOO_MARK");
        let mut step = Step::command(&["bash", &zoo("fork-chain.sh"), mode]);
        step.set(mark.name, &mark.value);
        let run = step.run().await;
        assert_eq!(run.outcome, Outcome::Completed, "{}", run.cause);
        // One look at /proc can miss a live chain (a generation lives a millisecond), so
        // look thirty times, and check that the chain wrote nothing meanwhile.
        let log = step.request.worktree.join("chain.log");
        let generations = std::fs::read_to_string(&log).unwrap().lines().count();
        for _ in 0..30 {
            let survivors = mark.alive();
            assert!(
                survivors.is_empty(),
                "processes of the step outlived it: {survivors:?} (leaked: {:?})",
                run.supervised.leaked
            );
        }
        assert_eq!(
            std::fs::read_to_string(&log).unwrap().lines().count(),
            generations,
            "the chain went on after the step"
        );
        // (A command line read while the process forks can come back cut short.)
        assert!(
            run.supervised
                .leaked
                .iter()
                .any(|stray| stray.command.starts_with("bash -c f()")
                    && stray.left_group == (mode == "setsid")),
            "the chain is recorded as leaked: {:?}",
            run.supervised.leaked
        );
        assert_eq!(run.metadata.leaked_processes, run.supervised.leaked);
        assert!(run.supervised.termination.survivors.is_empty());
    }
}

#[tokio::test]
async fn fork_chain_in_the_steps_group_does_not_outlive_the_step() {
    fork_chain_is_stopped_killed_and_reported("in-group").await;
}

#[tokio::test]
async fn fork_chain_escaped_with_setsid_does_not_outlive_the_step() {
    fork_chain_is_stopped_killed_and_reported("setsid").await;
}
