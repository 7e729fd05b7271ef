//! `tnh-conductor planner check VECTORS_DIR [--planner NAME]`: decision vectors
//! against a planner backend, through the guard, as EVALUATE would call it.

use super::stub::PlannerCommand;
use super::{Cli, Output, load_config};
use crate::error::{Error, ExitStatus, Result};
use crate::planner::backend::Backend;
use crate::planner::vectors::{load_vectors, run_vector};

/// Runs `planner check`: one line per vector; exit 1 on drift, 4 when the planner gave no
/// usable answer for some vector (each such row says why).
pub fn cmd_planner(cli: &Cli, command: &PlannerCommand, output: &mut Output) -> Result<ExitStatus> {
    let PlannerCommand::Check {
        vectors_dir,
        planner,
    } = command;
    let config = load_config(cli)?;
    let name = planner
        .as_deref()
        .unwrap_or_else(|| crate::planner::backend::default_planner_name(&config));
    let backend = Backend::from_config(name, &config).map_err(|message| {
        Error::usage(
            message.to_string(),
            "define the planner under `planners:` in the configuration, or use `--planner rules`",
        )
    })?;
    // Every file is checked before the planner is asked anything: a bad one costs no call.
    let vectors = load_vectors(vectors_dir).map_err(|error| {
        Error::usage(
            error.to_string(),
            "fix or remove the files named; a vector is {\"name\", \"envelope\", \"expect\": {\"status\", \"risk_flags\"}} (see docs/planner.md)",
        )
    })?;
    if vectors.is_empty() {
        return Err(Error::usage(
            format!(
                "`{}` holds no decision vectors (*.json)",
                vectors_dir.display()
            ),
            "pass a folder of decision-vector JSON files (see docs/planner.md)",
        ));
    }
    let width = vectors
        .iter()
        .map(|vector| vector.name.len())
        .max()
        .unwrap_or(0)
        .max("vector".len());
    output.print(&format!(
        "{:<6}  {:<width$}  {:<12}  {:<12}  missing risk flags\n",
        "result", "vector", "expected", "actual"
    ));
    // Each row is printed as soon as its vector is decided (a model call can take minutes).
    let (mut passed, mut drifted, mut failed) = (0, 0, 0);
    for vector in &vectors {
        let result = run_vector(vector, &backend);
        let verdict = if result.planner_failure.is_some() {
            failed += 1;
            "error"
        } else if result.passed() {
            passed += 1;
            "pass"
        } else {
            drifted += 1;
            "drift"
        };
        let line = format!(
            "{verdict:<6}  {:<width$}  {:<12}  {:<12}  {}",
            result.name,
            result.expected,
            result.actual,
            result.missing_flags.join(", ")
        );
        output.print(&format!("{}\n", line.trim_end()));
        if let Some(failure) = &result.planner_failure {
            output.print(&format!("        planner failed: {failure}\n"));
        }
    }
    output.print(&format!(
        "{} vectors: {passed} pass, {drifted} drift, {failed} planner failure(s) (planner `{}`)\n",
        vectors.len(),
        backend.name()
    ));
    if failed > 0 {
        output.diagnostic(&format!(
            "error: planner `{}` gave no usable answer for {failed} of {} vectors; those rows say why\n",
            backend.name(),
            vectors.len()
        ));
    }
    Ok(if failed > 0 {
        ExitStatus::Runtime
    } else if drifted > 0 {
        ExitStatus::Failure
    } else {
        ExitStatus::Success
    })
}
