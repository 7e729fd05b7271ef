//! `tnh-conductor planner check VECTORS_DIR [--planner NAME]`: decision vectors (OA06 §8)
//! against a planner backend, through the guard, as EVALUATE would call it.

use super::stub::PlannerCommand;
use super::{Cli, Output, load_config};
use crate::error::{Error, ExitStatus, Result};
use crate::planner::backend::Backend;
use crate::planner::vectors::run_vectors;

/// Runs `planner check`: one line per vector, exit 1 when any fails.
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
            message,
            "define the planner under `planners:` in the configuration, or use `--planner rules`",
        )
    })?;
    let results = run_vectors(vectors_dir, &backend).map_err(|message| {
        Error::usage(
            message,
            "pass a folder of decision-vector JSON files (see docs/planner.md)",
        )
    })?;
    if results.is_empty() {
        return Err(Error::usage(
            format!(
                "`{}` holds no decision vectors (*.json)",
                vectors_dir.display()
            ),
            "pass a folder of decision-vector JSON files (see docs/planner.md)",
        ));
    }
    let width = results
        .iter()
        .map(|result| result.name.len())
        .max()
        .unwrap_or(0)
        .max("vector".len());
    output.print(&format!(
        "{:<6}  {:<width$}  {:<12}  {:<12}  missing risk flags\n",
        "result", "vector", "expected", "actual"
    ));
    let mut failed = 0;
    for result in &results {
        let verdict = if result.passed() {
            "pass"
        } else {
            failed += 1;
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
    }
    output.print(&format!(
        "{} vectors: {} pass, {failed} drift (planner `{}`)\n",
        results.len(),
        results.len() - failed,
        backend.name()
    ));
    Ok(if failed == 0 {
        ExitStatus::Success
    } else {
        ExitStatus::Failure
    })
}
