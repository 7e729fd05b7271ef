//! Validation time of generated workflows of 100, 1,000 and 10,000 steps.
//!
//! Goal (issue: foundation): the 10,000-step workflow validates in under 100 ms in release,
//! and time grows linearly with the number of steps. Run with
//! `cargo bench --bench validate`; it prints the median time of each size, the time per step,
//! and the growth ratio between sizes (10× the steps should cost about 10× the time).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use tnh_conductor::workflow::diagnostic::Diagnostics;
use tnh_conductor::workflow::load::check_bytes;
use tnh_conductor::workflow::validate::KnownNames;

/// A valid workflow of `steps` steps mixing every opcode, with an expression on each agent step.
fn generate(steps: usize) -> String {
    let mut text = String::from(
        "workflow_id: generated\nversion: 1\ndescription: generated for the benchmark\nentry_step: s0\n\
         params:\n  count: {type: int, default: 3}\nscript: |\n  fn twice(x) { x * 2 }\nsteps:\n",
    );
    for index in 0..steps - 1 {
        let next = format!("s{}", index + 1);
        let id = format!("s{index}");
        match index % 5 {
            0 | 1 => {
                let _ = write!(
                    text,
                    "  - id: {id}\n    opcode: RUN_AGENT\n    agent: claude-code\n    prompt: task.implement_adr.v1\n\
                     \x20   inputs:\n      plan: \"${{{{ twice(params.count) + {index} }}}}\"\n      adr_id: \"${{run_dir}}/{id}\"\n\
                     \x20   limits: {{timeout: 10m, idle_timeout: 90s}}\n    routes:\n      completed: {next}\n      \"*\": STOP\n"
                );
            }
            2 => {
                let _ = write!(
                    text,
                    "  - id: {id}\n    opcode: RUN_VALIDATION\n    run: [tests, lint]\n    routes:\n      \"*\": {next}\n"
                );
            }
            3 => {
                let _ = write!(
                    text,
                    "  - id: {id}\n    opcode: EVALUATE\n    prompt: planner.evaluate_step.v1\n    allowed_next_steps: [{next}, gate_{index}]\n\
                     \x20   routes:\n      success: {next}\n      partial: {next}\n      blocked: STOP\n      unsafe: STOP\n      needs_human: gate_{index}\n\
                     \x20 - id: gate_{index}\n    opcode: GATE\n    gate: requires_approval\n    routes:\n      gate_approved: {next}\n      gate_rejected: STOP\n"
                );
            }
            _ => {
                let _ = write!(
                    text,
                    "  - id: {id}\n    opcode: ROLLBACK\n    target: pre_step\n    routes:\n      completed: {next}\n      error: STOP\n"
                );
            }
        }
    }
    let _ = writeln!(text, "  - id: s{}\n    opcode: STOP", steps - 1);
    text
}

fn median_time(text: &str, known: &KnownNames, iterations: usize) -> Duration {
    let mut times: Vec<Duration> = (0..iterations)
        .map(|_| {
            let mut diagnostics = Diagnostics::new("generated.yaml");
            let started = Instant::now();
            let workflow = check_bytes(text.as_bytes(), known, &mut diagnostics);
            let elapsed = started.elapsed();
            assert!(
                workflow.is_some() && !diagnostics.has_errors(),
                "{:?}",
                diagnostics.into_sorted().first()
            );
            elapsed
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

fn main() {
    let known = KnownNames::default();
    let mut previous: Option<(usize, Duration)> = None;
    println!(
        "{:>8} {:>10} {:>12} {:>12} {:>16}",
        "steps", "bytes", "median", "per step", "growth vs prev"
    );
    for (steps, iterations) in [(100, 200), (1_000, 40), (10_000, 10)] {
        let text = generate(steps);
        let median = median_time(&text, &known, iterations);
        let per_step = median / steps as u32;
        let growth = previous.map_or_else(
            || "-".to_owned(),
            |(previous_steps, previous_time)| {
                format!(
                    "{:.2}x time / {}x steps",
                    median.as_secs_f64() / previous_time.as_secs_f64(),
                    steps / previous_steps
                )
            },
        );
        println!(
            "{steps:>8} {:>10} {:>12.3?} {:>12.3?} {growth:>16}",
            text.len(),
            median,
            per_step
        );
        previous = Some((steps, median));
    }
    if let Some((_, ten_thousand)) = previous {
        let verdict = if ten_thousand < Duration::from_millis(100) {
            "meets"
        } else {
            "MISSES"
        };
        println!(
            "10,000 steps: {ten_thousand:.1?} ({verdict} the 100 ms goal; {:.2}x of it)",
            ten_thousand.as_secs_f64() / 0.1
        );
    }
}
