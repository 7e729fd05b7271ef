//! Cost of the scripting host on the kernel's hot paths.
//!
//! Goals (issue 9): calling a compiled helper costs under 5 µs; a 100-step workflow with an
//! expression on every step adds under 1 ms of evaluation in total. Run with
//! `cargo bench --bench script`; it prints the median of several rounds for each figure:
//! a helper called from a cached expression, the same helper through the hook path
//! (`call_function`), and the 100-step workflow evaluated cold (every expression compiled on
//! first use, as in a run's first pass) and warm.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use tnh_conductor::script::{Context, HostOptions, Limits, ScriptHost};
use tnh_conductor::workflow::diagnostic::Diagnostics;
use tnh_conductor::workflow::load::check_bytes;
use tnh_conductor::workflow::model::{At, Inputs, StepBody, Workflow};
use tnh_conductor::workflow::validate::KnownNames;
use tnh_conductor::workflow::yaml::Pos;

const STEPS: usize = 100;

/// A valid workflow of `steps` RUN_AGENT steps, each with a computed input.
fn generate(steps: usize) -> String {
    let mut text = String::from(
        "workflow_id: generated\nversion: 1\ndescription: benchmark\nentry_step: s0\n\
         params:\n  count: {type: int, default: 3}\n  modules: {type: list, default: [a, b]}\n\
         script: |\n  fn twice(x) { x * 2 }\n  fn targets(modules) { modules.map(|m| m + \"/README.md\") }\nsteps:\n",
    );
    for index in 0..steps {
        let next = if index + 1 == steps {
            "STOP".to_owned()
        } else {
            format!("s{}", index + 1)
        };
        let expression = if index % 2 == 0 {
            format!("twice(params.count) + {index}")
        } else {
            "targets(params.modules)".to_owned()
        };
        let _ = write!(
            text,
            "  - id: s{index}\n    opcode: RUN_AGENT\n    agent: claude-code\n    prompt: task.implement_adr.v1\n\
             \x20   inputs:\n      plan: \"${{{{ {expression} }}}}\"\n      adr_id: \"step {index} of run ${{run_id}}\"\n    routes:\n      \"*\": {next}\n"
        );
    }
    text
}

fn host(source: &str, workflow: &Workflow) -> ScriptHost {
    let options = HostOptions {
        file: "bench.yaml".to_owned(),
        source: source.to_owned(),
        root: None,
        limits: Limits::STANDARD,
    };
    ScriptHost::for_workflow(options, workflow).expect("the benchmark script loads")
}

fn context() -> Context {
    Context::new(serde_json::json!({
        "run": {"id": "20260101T000000Z-abcdef", "dir": ".tnh/run/x"},
        "step": {"id": "s0", "visit": 1},
        "params": {"count": 3, "modules": ["a", "b"]},
    }))
    .expect("a JSON object")
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Median time of one call, over `rounds` rounds of `calls` calls.
fn per_call(rounds: usize, calls: u32, mut body: impl FnMut()) -> Duration {
    let samples = (0..rounds)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..calls {
                body();
            }
            started.elapsed() / calls
        })
        .collect();
    median(samples)
}

fn main() {
    let source = generate(STEPS);
    let mut diagnostics = Diagnostics::new("bench.yaml");
    let workflow = check_bytes(source.as_bytes(), &KnownNames::default(), &mut diagnostics)
        .expect("the generated workflow decodes");
    let problems: Vec<String> = diagnostics
        .into_sorted()
        .iter()
        .take(3)
        .map(|diagnostic| diagnostic.render(false))
        .collect();
    assert!(
        problems.is_empty(),
        "the generated workflow is invalid: {problems:?}"
    );
    let ctx = context();

    let warm = host(&source, &workflow);
    let helper = per_call(7, 20_000, || {
        let value = warm.evaluate_code("twice(21)", Pos::new(1, 1), &ctx);
        assert!(value.is_ok());
    });
    let name = At::new("twice".to_owned(), Pos::new(1, 1));
    let argument = [serde_json::json!(21)];
    let hook = per_call(7, 20_000, || {
        let value = warm.call_function(&name, &argument, &ctx);
        assert!(value.is_ok());
    });

    let nodes: Vec<_> = workflow
        .steps
        .iter()
        .filter_map(|step| match &step.body {
            StepBody::RunAgent(agent) => match &agent.inputs {
                Inputs::Values(values) => Some(values[0].1.clone()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(nodes.len(), STEPS);
    let evaluate_all = |host: &ScriptHost| {
        for node in &nodes {
            let value = host.evaluate_node(node, &ctx);
            assert!(value.is_ok());
        }
    };
    let cold = median(
        (0..7)
            .map(|_| {
                let fresh = host(&source, &workflow);
                let started = Instant::now();
                evaluate_all(&fresh);
                started.elapsed()
            })
            .collect(),
    );
    evaluate_all(&warm);
    let warm_pass = per_call(7, 50, || evaluate_all(&warm));
    let setup = median(
        (0..7)
            .map(|_| {
                let started = Instant::now();
                let _ = host(&source, &workflow);
                started.elapsed()
            })
            .collect(),
    );

    println!("scripting host benchmark (median of 7 rounds)");
    println!(
        "  helper call via a cached expression : {:>9.2} µs (goal < 5 µs)",
        micros(helper)
    );
    println!(
        "  helper call via call_function       : {:>9.2} µs (goal < 5 µs)",
        micros(hook)
    );
    println!(
        "  {STEPS}-step workflow, cold (compile+eval): {:>7.3} ms (goal < 1 ms)",
        millis(cold)
    );
    println!(
        "  {STEPS}-step workflow, warm (eval only)   : {:>7.3} ms (goal < 1 ms)",
        millis(warm_pass)
    );
    println!(
        "  host creation + script load (once/run): {:>7.3} ms",
        millis(setup)
    );
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}
