//! `tnh-conductor doctor [--json]`: one table of what a run here needs (see `crate::doctor`).

use clap::Args;

use super::{Output, optional_repo_root};
use crate::doctor::{Check, CheckStatus, DoctorReport, examine};
use crate::error::{ExitStatus, Result};
use crate::runner::HostEnv;

/// `doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print the report as JSON (`tnh-conductor schema doctor`).
    #[arg(long)]
    pub json: bool,
}

/// Exit 0 when everything a run needs is there (warnings allowed), 1 when something is missing.
pub fn cmd_doctor(cli: &super::Cli, args: &DoctorArgs, output: &mut Output) -> Result<ExitStatus> {
    let repo = optional_repo_root(cli)?;
    let report = examine(
        repo.as_deref(),
        cli.config.as_deref(),
        &HostEnv::from_process(),
    );
    if args.json {
        output.print(&serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        output.print(&table(&report));
    }
    Ok(if report.ok {
        ExitStatus::Success
    } else {
        ExitStatus::Failure
    })
}

fn table(report: &DoctorReport) -> String {
    let rows: Vec<[String; 4]> = report
        .checks
        .iter()
        .map(|check| {
            [
                format!("{:?}", check.area).to_lowercase(),
                check.name.clone(),
                status_word(check.status).to_owned(),
                detail(check),
            ]
        })
        .collect();
    let width = |column: usize| {
        rows.iter()
            .map(|row| row[column].chars().count())
            .max()
            .unwrap_or(0)
    };
    let (area, name, status) = (width(0).max(4), width(1).max(4), width(2).max(6));
    let mut text = format!(
        "{:area$}  {:name$}  {:status$}  DETAIL\n",
        "AREA", "NAME", "STATUS"
    );
    for row in &rows {
        text.push_str(&format!(
            "{:area$}  {:name$}  {:status$}  {}\n",
            row[0], row[1], row[2], row[3]
        ));
    }
    let missing = report
        .checks
        .iter()
        .filter(|check| check.status == CheckStatus::Missing)
        .count();
    text.push_str(&match missing {
        0 => "\nready: nothing a run needs is missing\n".to_owned(),
        count => format!("\nnot ready: {count} thing(s) a run would need are missing\n"),
    });
    text
}

fn status_word(status: CheckStatus) -> &'static str {
    match status {
        CheckStatus::Ok => "ok",
        CheckStatus::Warning => "warning",
        CheckStatus::Missing => "MISSING",
    }
}

fn detail(check: &Check) -> String {
    let mut parts = vec![check.detail.clone()];
    if let Some(path) = &check.path {
        parts.push(format!("at {path}"));
    }
    match (&check.version, &check.tested_version) {
        (Some(version), Some(tested)) => parts.push(format!("version {version} (tested {tested})")),
        (Some(version), None) => parts.push(format!("version {version}")),
        _ => {}
    }
    if !check.env.is_empty() {
        let keys: Vec<String> = check
            .env
            .iter()
            .map(|key| format!("{} {}", key.name, if key.set { "set" } else { "unset" }))
            .collect();
        parts.push(format!("env: {}", keys.join(", ")));
    }
    parts.join("; ")
}
