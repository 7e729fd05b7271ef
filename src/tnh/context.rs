//! `tnh context`: everything an agent needs to orient itself, in a few lines.

use std::fmt::Write as _;
use std::path::Path;

use clap::Args;

use super::{TnhResult, git, print};
use crate::exit::ExitStatus;

/// `tnh context [--json]`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  tnh context\n  tnh context --json | jq .changed\n\nPrints the repository root, branch, base commit, files changed since the base, the run and step \
(inside a tnh-conductor run), the step's inputs (the values its prompt was given, from TNH_STEP_DIR/inputs.json when present), \
ADRs, and the tnh commands available. Paths are printed as they are (non-ASCII too), except that a path holding \
a `\"`, a `\\` or a control character (a tab) is C-quoted as git does (`\"quo\\\"te.txt\"`); --json gives every path as it is.\n\n\
Exit codes: 0 printed; 2 outside a repository, a git query failed, or .tnh/config.yaml is invalid (its file, line and column named)."
)]
pub struct ContextArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// What `tnh context --json` prints (`tnh-conductor schema tnh-context`).
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct ContextReport {
    /// The format's version.
    schema_version: u32,
    /// The worktree or repository root.
    root: String,
    /// The branch checked out (empty when HEAD is detached).
    branch: String,
    /// The base commit changes are counted from.
    base: String,
    /// Where the base came from (`TNH_BASE_SHA`, `merge-base with main`, …).
    base_source: String,
    /// Each file changed since the base: its status letter, a space, its path.
    changed: Vec<String>,
    /// The run (`TNH_RUN_ID`), inside a run.
    run_id: Option<String>,
    /// The step (`TNH_STEP_ID`), inside a run.
    step_id: Option<String>,
    /// The step folder (`TNH_STEP_DIR`), inside a run.
    step_dir: Option<String>,
    /// The values the step's prompt was given (`inputs` of `$TNH_STEP_DIR/inputs.json`).
    inputs: Option<serde_json::Value>,
    /// Each ADR: `ID TITLE (STATUS)`.
    adrs: Vec<String>,
    /// The tnh commands available.
    commands: Vec<String>,
}

/// Prints the context.
pub fn run(args: &ContextArgs) -> TnhResult {
    let place = git::place()?;
    let branch = git::branch(&place.root).unwrap_or_default();
    let changed = git::changes(&place, &[])?;
    let variable = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
    let inputs = variable("TNH_STEP_DIR").and_then(|dir| step_inputs(Path::new(&dir)));
    let config = super::config::load(&place.root)?;
    let found = super::adr::find(&place.root, &config.config.adr_paths);
    for line in &found.skipped {
        super::note(line);
    }
    let adrs = found
        .adrs
        .into_iter()
        .map(|adr| format!("{} {} ({})", adr.id, adr.title, adr.status))
        .collect::<Vec<_>>();
    let commands = [
        "tnh context",
        "tnh diff [--stat|--name-only|--patch]",
        "tnh test",
        "tnh lint",
        "tnh typecheck",
        "tnh adr list|open ID",
        "tnh runlog append",
    ];
    let report = ContextReport {
        schema_version: crate::artifacts::SCHEMA_VERSION,
        root: place.root.display().to_string(),
        branch: branch.clone(),
        base: place.base.clone(),
        base_source: place.base_source.clone(),
        changed: changed
            .iter()
            .map(|(status, path)| format!("{status} {path}"))
            .collect(),
        run_id: variable("TNH_RUN_ID"),
        step_id: variable("TNH_STEP_ID"),
        step_dir: variable("TNH_STEP_DIR"),
        inputs,
        adrs: adrs.clone(),
        commands: commands
            .iter()
            .map(|command| (*command).to_owned())
            .collect(),
    };
    if args.json {
        print(&format!(
            "{}\n",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        ));
        return Ok(ExitStatus::Success);
    }
    let mut text = format!(
        "repo: {}\nbranch: {}\nbase: {} ({})\n",
        place.root.display(),
        if branch.is_empty() {
            "(detached)"
        } else {
            &branch
        },
        short(&place.base),
        place.base_source
    );
    if let (Some(run), Some(step)) = (variable("TNH_RUN_ID"), variable("TNH_STEP_ID")) {
        let _ = writeln!(text, "run: {run} step: {step}");
    }
    let _ = writeln!(text, "changed ({}):", changed.len());
    for (status, path) in changed.iter().take(50) {
        let _ = writeln!(text, "  {status} {}", git::quoted(path));
    }
    if changed.len() > 50 {
        let _ = writeln!(
            text,
            "  … {} more (tnh diff --name-only)",
            changed.len() - 50
        );
    }
    if let Some(inputs) = report.inputs.as_ref().and_then(|inputs| inputs.as_object()) {
        write_inputs(&mut text, inputs);
    }
    if !adrs.is_empty() {
        let _ = writeln!(
            text,
            "adrs ({}): {}",
            adrs.len(),
            adrs.iter().take(10).cloned().collect::<Vec<_>>().join("; ")
        );
    }
    let _ = writeln!(text, "commands: {}", commands.join(", "));
    print(&text);
    Ok(ExitStatus::Success)
}

/// The inputs the step's prompt was given, from `inputs.json` in the step folder (written by
/// RUN_AGENT before the agent starts): the `inputs` map of that file.
fn step_inputs(step_dir: &Path) -> Option<serde_json::Value> {
    let text =
        std::fs::read_to_string(step_dir.join(crate::artifacts::VisitDir::PROMPT_INPUTS)).ok()?;
    let recorded = serde_json::from_str::<crate::artifacts::PromptInputs>(&text).ok()?;
    Some(serde_json::Value::Object(recorded.inputs))
}

/// One line an input: its name and the start of its value (`inputs.json` has them in full).
fn write_inputs(text: &mut String, inputs: &serde_json::Map<String, serde_json::Value>) {
    if inputs.is_empty() {
        text.push_str("inputs: none\n");
        return;
    }
    let _ = writeln!(
        text,
        "inputs ({}, in full in $TNH_STEP_DIR/inputs.json):",
        inputs.len()
    );
    for (name, value) in inputs {
        let shown = match value {
            serde_json::Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        let first_line = shown.lines().next().unwrap_or_default();
        let mut line: String = first_line.chars().take(100).collect();
        if line.len() < shown.len() {
            line.push_str(" …");
        }
        let _ = writeln!(text, "  {name}: {line}");
    }
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}
