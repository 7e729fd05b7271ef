//! Runner benchmark (`cargo bench --bench runner`): the figures in docs/runners.md.
//!
//! 1. Capture throughput: 1 GiB of short lines through the supervisor to a file, against the
//!    same producer piped to `cat > file`, measured side by side; the ratio must be ≥ 0.8.
//! 2. Peak memory of the supervising process during that capture (VmHWM of a child process
//!    that does nothing else), which must stay under 64 MiB.
//! 3. Timer precision: idle and wall timeouts must fire within 250 ms of their deadline.
//! 4. Termination: a group that ignores SIGTERM must be dead within grace + 250 ms.
//! 5. Search for a step's processes: supervising `true` with the descendant walk against the
//!    whole-`/proc` scan (`TNH_SUPERVISION_SCAN_ALL`), on the host as it is and with
//!    `TNH_BENCH_LOAD` (default 1,000) more idle processes that are not ours, side by side.
//!
//! Set `TNH_BENCH_BYTES` to capture less than 1 GiB (e.g. for a quick debug run); set
//! `TNH_BENCH_ONLY=search` to run only part 5.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use tnh_conductor::runner::{
    Cancellation, CaptureFormat, Limits, ProcessSpec, Supervised, process, supervise,
};

const GIB: u64 = 1024 * 1024 * 1024;
const ROUNDS: usize = 5;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--capture-child") {
        capture_child(&args[2], Path::new(&args[3]));
        return;
    }
    if args.get(1).map(String::as_str) == Some("--search-child") {
        search_child(&args[2], Path::new(&args[3]));
        return;
    }
    if std::env::var("TNH_BENCH_ONLY").as_deref() == Ok("search") {
        let scratch = tempfile::tempdir().expect("scratch dir");
        search(scratch.path());
        return;
    }
    let bytes = std::env::var("TNH_BENCH_BYTES")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(GIB);
    let scratch = tempfile::tempdir().expect("scratch dir");
    throughput(bytes, scratch.path());
    timers(scratch.path());
    termination(scratch.path());
    search(scratch.path());
}

fn zoo(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/agents/zoo")
        .join(name)
        .display()
        .to_string()
}

fn spec(argv: &[&str], env: Vec<(String, String)>, dir: &Path, limits: Limits) -> ProcessSpec {
    let mut env = env;
    env.push(("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()));
    ProcessSpec {
        kind: tnh_conductor::runner::ProcessKind::Agent,
        agent: "bench".to_owned(),
        program: argv[0].to_owned(),
        args: argv[1..].iter().map(|arg| (*arg).to_owned()).collect(),
        cwd: dir.to_path_buf(),
        env,
        stdin: Vec::new(),
        stdout_path: dir.join("stdout"),
        stderr_path: dir.join("stderr"),
        format: CaptureFormat::Text,
        limits,
        remaining_budget_usd: None,
    }
}

fn run(spec: ProcessSpec) -> Supervised {
    // Default: the supervising future runs on the thread that drives I/O. With
    // `TNH_BENCH_RUNTIME=multi-thread` it is spawned as a task on a two-worker runtime, as a
    // kernel under `#[tokio::main]` would do with `tokio::spawn`.
    if std::env::var("TNH_BENCH_RUNTIME").as_deref() == Ok("multi-thread") {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let task = runtime.spawn(supervise(spec, Cancellation::never()));
        return runtime.block_on(task).expect("task").expect("supervise");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime
        .block_on(supervise(spec, Cancellation::never()))
        .expect("supervise")
}

/// Child mode: capture `bytes` through the supervisor, then report the peak RSS.
fn capture_child(bytes: &str, dir: &Path) {
    let env = vec![("TNH_ZOO_BYTES".to_owned(), bytes.to_owned())];
    let limits = Limits {
        timeout: Duration::from_secs(3600),
        idle_timeout: None,
        ..Limits::default()
    };
    let result = run(spec(&["sh", &zoo("big-output.sh")], env, dir, limits));
    assert_eq!(
        result.stdout_bytes.to_string(),
        bytes,
        "every byte captured"
    );
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let peak = status
        .lines()
        .find(|line| line.starts_with("VmHWM:"))
        .unwrap_or("VmHWM: 0 kB");
    println!("{}", peak.trim_start_matches("VmHWM:").trim());
}

fn throughput(bytes: u64, scratch: &Path) {
    let mut best_cat = Duration::MAX;
    let mut best_runner = Duration::MAX;
    let mut peak_kib = 0u64;
    for _ in 0..ROUNDS {
        let target = scratch.join("cat-output");
        let script = format!(
            "sh '{}' | cat > '{}'",
            zoo("big-output.sh"),
            target.display()
        );
        let started = Instant::now();
        let status = Command::new("sh")
            .arg("-c")
            .arg(&script)
            .env("TNH_ZOO_BYTES", bytes.to_string())
            .status();
        assert!(status.expect("cat baseline").success());
        best_cat = best_cat.min(started.elapsed());
        assert_eq!(std::fs::metadata(&target).expect("cat output").len(), bytes);
        std::fs::remove_file(&target).ok();

        let dir = scratch.join("runner-output");
        std::fs::create_dir_all(&dir).expect("dir");
        let started = Instant::now();
        let output = Command::new(std::env::current_exe().expect("self"))
            .args([
                "--capture-child",
                &bytes.to_string(),
                &dir.display().to_string(),
            ])
            .output()
            .expect("capture child");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        best_runner = best_runner.min(started.elapsed());
        let text = String::from_utf8_lossy(&output.stdout);
        let kib: u64 = text
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .unwrap_or(0);
        peak_kib = peak_kib.max(kib);
        std::fs::remove_dir_all(&dir).ok();
    }
    let mib = bytes as f64 / (1024.0 * 1024.0);
    let cat_rate = mib / best_cat.as_secs_f64();
    let runner_rate = mib / best_runner.as_secs_f64();
    println!("capture of {mib:.0} MiB (best of {ROUNDS}):");
    println!(
        "  cat > file        {:>8.3} s  {cat_rate:>8.1} MiB/s",
        best_cat.as_secs_f64()
    );
    println!(
        "  runner            {:>8.3} s  {runner_rate:>8.1} MiB/s",
        best_runner.as_secs_f64()
    );
    println!(
        "  throughput ratio  {:.3} (target >= 0.8)",
        runner_rate / cat_rate
    );
    println!(
        "  peak RSS          {:.1} MiB (target < 64 MiB)",
        peak_kib as f64 / 1024.0
    );
}

fn timers(scratch: &Path) {
    let mut idle_late = Vec::new();
    let mut wall_late = Vec::new();
    for round in 0..5 {
        let deadline = Duration::from_millis(500 + 100 * round);
        let idle = Limits {
            timeout: Duration::from_secs(60),
            idle_timeout: Some(deadline),
            ..quick()
        };
        let result = run(spec(
            &["sh", &zoo("silent-hang.sh")],
            Vec::new(),
            scratch,
            idle,
        ));
        idle_late.push(lateness(&result, deadline));
        let wall = Limits {
            timeout: deadline,
            idle_timeout: None,
            ..quick()
        };
        let result = run(spec(
            &["sh", &zoo("silent-hang.sh")],
            Vec::new(),
            scratch,
            wall,
        ));
        wall_late.push(lateness(&result, deadline));
    }
    println!("timers (5 runs each, lateness of SIGTERM after the deadline):");
    println!(
        "  idle_timeout  max {} ms  (target <= 250 ms)  {idle_late:?}",
        idle_late.iter().max().unwrap_or(&0)
    );
    println!(
        "  timeout       max {} ms  (target <= 250 ms)  {wall_late:?}",
        wall_late.iter().max().unwrap_or(&0)
    );
}

fn lateness(result: &Supervised, deadline: Duration) -> u64 {
    let fired = result
        .termination
        .sigterm_after_ms
        .expect("the timer fired");
    fired.saturating_sub(deadline.as_millis() as u64)
}

fn quick() -> Limits {
    Limits {
        timeout: Duration::from_secs(60),
        idle_timeout: None,
        grace: Duration::from_millis(500),
        prompt_settle: Duration::from_secs(2),
        leak_timeout: Duration::from_millis(200),
        max_stdout_bytes: None,
        max_stderr_bytes: None,
    }
}

fn termination(scratch: &Path) {
    let grace = Duration::from_millis(1000);
    let mut overshoot = Vec::new();
    for _ in 0..5 {
        let limits = Limits {
            timeout: Duration::from_millis(300),
            grace,
            ..quick()
        };
        let started = Instant::now();
        let result = run(spec(
            &["sh", &zoo("ignores-sigterm.sh")],
            Vec::new(),
            scratch,
            limits,
        ));
        let finished = started.elapsed();
        assert!(
            process::live_group_members(result.pid).is_empty(),
            "group dead"
        );
        let sigterm =
            Duration::from_millis(result.termination.sigterm_after_ms.expect("SIGTERM sent"));
        let dead_after = finished.saturating_sub(sigterm);
        overshoot.push(dead_after.saturating_sub(grace).as_millis() as u64);
    }
    println!(
        "termination (SIGTERM ignored, grace {} ms, 5 runs):",
        grace.as_millis()
    );
    println!(
        "  group dead at most grace + {} ms after SIGTERM  (target <= 250 ms)  {overshoot:?}",
        overshoot.iter().max().unwrap_or(&0)
    );
}

/// Steps per measurement of part 5.
const SEARCH_STEPS: usize = 200;

/// Child mode: supervises `true` `steps` times and prints the mean time per step in
/// microseconds. A process of its own, so the search mode (an environment variable read at
/// each step start) and the subreaper setting belong to it alone.
fn search_child(steps: &str, dir: &Path) {
    let steps: usize = steps.parse().expect("steps");
    let started = Instant::now();
    for _ in 0..steps {
        let result = run(spec(&["true"], Vec::new(), dir, quick()));
        assert_eq!(result.exit_code, Some(0));
    }
    println!("{}", started.elapsed().as_micros() / steps as u128);
}

/// Median microseconds per supervised step with the walk and with the scan, alternating.
fn search_round(dir: &Path) -> (u128, u128) {
    let measure = |scan_all: bool| -> u128 {
        let mut command = Command::new(std::env::current_exe().expect("self"));
        command.args([
            "--search-child",
            &SEARCH_STEPS.to_string(),
            &dir.display().to_string(),
        ]);
        if scan_all {
            command.env(process::SCAN_ALL_VARIABLE, "1");
        } else {
            command.env_remove(process::SCAN_ALL_VARIABLE);
        }
        let output = command.output().expect("search child");
        assert!(output.status.success(), "search child failed");
        String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse()
            .expect("microseconds")
    };
    let mut walk = Vec::new();
    let mut scan = Vec::new();
    for _ in 0..ROUNDS {
        walk.push(measure(false));
        scan.push(measure(true));
    }
    walk.sort_unstable();
    scan.sort_unstable();
    (walk[ROUNDS / 2], scan[ROUNDS / 2])
}

fn host_processes() -> usize {
    std::fs::read_dir("/proc").map_or(0, |entries| {
        entries
            .flatten()
            .filter(|entry| {
                entry
                    .file_name()
                    .to_str()
                    .is_some_and(|name| name.parse::<u32>().is_ok())
            })
            .count()
    })
}

fn search(scratch: &Path) {
    let load: usize = std::env::var("TNH_BENCH_LOAD")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(1000);
    println!(
        "search for a step's processes (supervising `true`, median of {ROUNDS} rounds of {SEARCH_STEPS} steps):"
    );
    let report = |label: &str, (walk, scan): (u128, u128)| {
        println!(
            "  {label:<32} descendant walk {walk:>5} us/step   whole-/proc scan {scan:>5} us/step   saved {:>5} us ({:.2}x)",
            scan.saturating_sub(walk),
            walk as f64 / scan as f64
        );
    };
    report(
        &format!("host as it is ({} processes)", host_processes()),
        search_round(scratch),
    );
    // Idle processes that are not the bench children's descendants: children of this process,
    // which never becomes a subreaper itself.
    let mut idle: Vec<std::process::Child> = (0..load)
        .map(|_| {
            Command::new("sleep")
                .arg("600")
                .stdin(std::process::Stdio::null())
                .spawn()
                .expect("idle process")
        })
        .collect();
    report(
        &format!("with {load} more ({} processes)", host_processes()),
        search_round(scratch),
    );
    for child in &mut idle {
        let _ = child.kill();
        let _ = child.wait();
    }
}
