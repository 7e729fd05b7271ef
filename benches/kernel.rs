//! Kernel overhead per agent step (`cargo bench --bench kernel`): total time per step of a
//! loop workflow whose agent is `true`, minus the agent's run and the git capture work, each
//! measured side by side in the same process.
//!
//! - **kernel**: `start_run` of a workflow whose one RUN_AGENT step routes back to itself until
//!   `max_transitions`; its steady-state time per step is read from its own events (first
//!   `step_started` to the last event), so the one-time worktree creation is left out.
//! - **agent + git capture**: the same library calls RUN_AGENT makes for the agent and the
//!   worktree, with nothing around them — pre-step snapshot, protected-ref guard, the agent
//!   (`true`) under `supervise` with its stdout and stderr captured to files, guard check, and
//!   the capture (patch, status and tree) — in a loop on a worktree of its own.
//!
//! Within each kernel run the overhead is also measured directly, visit by visit: the time from
//! a visit's `step_started` event to the next one's, minus the agent and workspace times its
//! manifest records (`timings_ms`), which is exactly the issue's "total minus agent and git
//! capture time" and, being measured inside one run, immune to the machine's drift between runs.
//!
//! The difference is what the kernel adds: routing, events, the prompt and the runner's other
//! artifacts, the policy check, manifests, `state.json` and `status.json`. The two sides run in
//! alternating rounds (and alternate which goes first) and the median round is reported, since
//! this machine's file system drifts in speed.
//!
//! Sizes: `TNH_BENCH_TRANSITIONS` (default 1,000), `TNH_BENCH_ROUNDS` (10),
//! `TNH_BENCH_FILES` (20; try 20000 for a 200 MB repository).

use std::path::Path;
use std::time::{Duration, Instant};

use tnh_conductor::config::Config;
use tnh_conductor::ids::{RunId, StepId, WorkflowId};
use tnh_conductor::kernel::run::{RunRequest, start_run};
use tnh_conductor::runner::{Cancellation, CaptureFormat, Limits, ProcessSpec, supervise};
use tnh_conductor::workspace::Workspace;

mod support;
use support::{env_number, git};

/// A repository of `files` text files of 300 lines, committed, with the `noop` agent
/// configured, and the loop workflow of `steps` transitions beside it.
fn generate(root: &Path, files: usize, steps: usize) -> std::path::PathBuf {
    let repo = root.join("repo");
    std::fs::create_dir_all(&repo).expect("mkdir");
    git(&repo, &["init", "-q", "-b", "main"]);
    for index in 0..files {
        let folder = repo.join(format!("src/d{:03}", index / 1000));
        std::fs::create_dir_all(&folder).expect("mkdir");
        let line = format!("line {index} of a generated file\n");
        std::fs::write(folder.join(format!("f{index:05}.txt")), line.repeat(300)).expect("write");
    }
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "base"]);
    std::fs::create_dir_all(repo.join(".tnh")).expect("mkdir");
    std::fs::write(
        repo.join(".tnh/config.yaml"),
        "agents:\n  noop: {kind: command, argv: [\"true\"]}\n",
    )
    .expect("config");
    let workflow = root.join("loop.yaml");
    std::fs::write(
        &workflow,
        format!(
            "workflow_id: bench_loop\nversion: 1\ndescription: a loop of agent steps that do nothing\n\
             entry_step: work\ndefaults:\n  limits: {{max_visits: {}, max_transitions: {steps}}}\n\
             steps:\n  - id: work\n    opcode: RUN_AGENT\n    agent: noop\n    prompt: Do nothing.\n\
             \x20   routes:\n      completed: work\n      \"*\": STOP\n",
            steps + 1
        ),
    )
    .expect("workflow");
    workflow
}

/// Seconds since the epoch of an event's RFC 3339 timestamp.
fn timestamp(event: &serde_json::Value) -> f64 {
    let text = event["timestamp"].as_str().expect("timestamp");
    let instant: jiff::Timestamp = text.parse().expect("RFC 3339");
    instant.as_duration().as_secs_f64()
}

/// What one kernel round measured.
struct KernelRound {
    /// Steady-state time per step.
    per_step: Duration,
    /// Each visit's own overhead in milliseconds: its time from `step_started` to the next
    /// visit's, minus the agent and workspace times its manifest records.
    overheads: Vec<f64>,
}

/// Runs the loop through the kernel.
fn kernel_round(repo: &Path, workflow: &Path) -> KernelRound {
    let request = RunRequest {
        repo: repo.to_path_buf(),
        workflow_path: workflow.to_path_buf(),
        params: Vec::new(),
        base: "HEAD".to_owned(),
        config: Config::load(Some(repo), None).expect("config"),
        observer: None,
    };
    // The loop ends at max_transitions, which is a runtime error by design.
    let summary = start_run(request).expect("the run starts");
    let events: Vec<serde_json::Value> =
        std::fs::read_to_string(summary.run_dir.join("events.ndjson"))
            .expect("events")
            .lines()
            .map(|line| serde_json::from_str(line).expect("event"))
            .collect();
    let steps = events
        .iter()
        .filter(|event| event["event_type"] == "step_completed")
        .count();
    let first = events
        .iter()
        .find(|event| event["event_type"] == "step_started")
        .expect("a step started");
    let steady = timestamp(events.last().expect("events")) - timestamp(first);
    let starts: Vec<(u64, f64)> = events
        .iter()
        .filter(|event| event["event_type"] == "step_started")
        .map(|event| (event["visit"].as_u64().expect("visit"), timestamp(event)))
        .collect();
    let overheads = starts
        .windows(2)
        .map(|pair| {
            let (visit, started) = pair[0];
            let manifest: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(
                    summary
                        .run_dir
                        .join(format!("artifacts/work/{visit}/manifest.json")),
                )
                .expect("manifest"),
            )
            .expect("manifest JSON");
            let timings = &manifest["timings_ms"];
            (pair[1].1 - started) * 1000.0
                - timings["agent"].as_f64().expect("agent time")
                - timings["workspace"].as_f64().expect("workspace time")
        })
        .collect();
    KernelRound {
        per_step: Duration::from_secs_f64(steady / steps as f64),
        overheads,
    }
}

/// The agent and git capture work of `steps` agent steps, without the kernel.
fn plain_round(repo: &Path, round: usize, steps: usize, scratch: &Path) -> Duration {
    let workspace = Workspace::create(
        repo,
        &RunId::new(format!("plain-{round}")),
        &WorkflowId::new("bench_loop"),
        None,
    )
    .expect("worktree");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let protected = Config::load(Some(repo), None)
        .expect("config")
        .protected_branches;
    let step = StepId::new("work");
    let started = Instant::now();
    for visit in 1..=steps as u32 {
        let folder = scratch.join(format!("plain-{round}/{visit}"));
        std::fs::create_dir_all(&folder).expect("visit folder");
        let snapshot = workspace.snapshot_pre_step(&step, visit).expect("snapshot");
        let guard = workspace.guard(&protected).expect("guard");
        let spec = ProcessSpec {
            kind: tnh_conductor::runner::ProcessKind::Agent,
            agent: "noop".to_owned(),
            program: "true".to_owned(),
            args: Vec::new(),
            cwd: workspace.path().to_path_buf(),
            env: vec![("PATH".to_owned(), std::env::var("PATH").unwrap_or_default())],
            stdin: Vec::new(),
            stdout_path: folder.join("stdout.txt"),
            stderr_path: folder.join("stderr.txt"),
            format: CaptureFormat::Text,
            limits: Limits::default(),
            remaining_budget_usd: None,
        };
        let supervised = runtime
            .block_on(async {
                tokio::spawn(supervise(spec, Cancellation::never()))
                    .await
                    .expect("task")
            })
            .expect("supervise");
        assert_eq!(supervised.exit_code, Some(0));
        guard.verify().expect("verify");
        workspace
            .capture_since(&snapshot, &folder.join("workspace.diff"))
            .expect("capture");
    }
    started.elapsed() / steps as u32
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    // `cargo test --all-targets` runs this binary without `--bench`; it must not run for minutes.
    if !std::env::args().any(|arg| arg == "--bench") {
        return;
    }
    let transitions = env_number("TNH_BENCH_TRANSITIONS", 1000);
    let rounds = env_number("TNH_BENCH_ROUNDS", 10).max(1);
    let files = env_number("TNH_BENCH_FILES", 20);
    let per_round = (transitions / rounds).max(1);
    let scratch = tempfile::tempdir().expect("scratch");
    let workflow = generate(scratch.path(), files, per_round);
    let repo = scratch.path().join("repo");
    println!(
        "repository: {files} files; {rounds} rounds of {per_round} agent steps, kernel and plain loop alternating"
    );
    println!("round  kernel  agent+git  overhead  (ms per step)");
    let mut overheads = Vec::new();
    let mut kernels = Vec::new();
    let mut plains = Vec::new();
    let mut visit_overheads = Vec::new();
    for round in 1..=rounds {
        // Which side goes first alternates, so neither always follows the other's writes.
        let (measured, plain) = if round % 2 == 1 {
            let measured = kernel_round(&repo, &workflow);
            (
                measured,
                plain_round(&repo, round, per_round, scratch.path()),
            )
        } else {
            let plain = plain_round(&repo, round, per_round, scratch.path());
            (kernel_round(&repo, &workflow), plain)
        };
        let kernel = measured.per_step;
        visit_overheads.extend(measured.overheads);
        let overhead = millis(kernel) - millis(plain);
        println!(
            "{round:5}  {:6.2}  {:9.2}  {overhead:8.2}",
            millis(kernel),
            millis(plain)
        );
        overheads.push(overhead);
        kernels.push(millis(kernel));
        plains.push(millis(plain));
    }
    let (low, high) = overheads
        .iter()
        .fold((f64::MAX, f64::MIN), |(low, high), value| {
            (low.min(*value), high.max(*value))
        });
    println!(
        "median: kernel {:.2} ms per step, agent + git capture {:.2} ms",
        median(kernels),
        median(plains)
    );
    println!(
        "kernel minus the plain loop: {:.2} ms per step (median round; range {low:.2}..{high:.2})",
        median(overheads)
    );
    visit_overheads.sort_by(f64::total_cmp);
    let mean = visit_overheads.iter().sum::<f64>() / visit_overheads.len() as f64;
    let percentile =
        |share: f64| visit_overheads[((visit_overheads.len() - 1) as f64 * share).round() as usize];
    println!(
        "kernel overhead within the run (visit time minus its agent and workspace times, {} visits): \
         median {:.2} ms, mean {mean:.2} ms, p90 {:.2} ms; goal < 5 ms",
        visit_overheads.len(),
        percentile(0.5),
        percentile(0.9),
    );
}
