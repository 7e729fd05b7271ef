//! `tnh diff`: the changes against the run's base, key hunks first, truncated with a marker.

use std::fmt::Write as _;

use clap::Args;

use super::{TnhResult, git, print};
use crate::error::ExitStatus;

/// `tnh diff [--stat|--name-only|--patch] [--max-lines N] [PATH…]`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  tnh diff --stat\n  tnh diff --patch --max-lines 200 src/\n  tnh diff --name-only | head\n\n\
The base is TNH_BASE_SHA inside a run, else the merge-base with origin/HEAD, main or master. \
Untracked files are listed as new. --patch shows source files first, then tests, then docs and others; \
output longer than --max-lines ends with a line saying how much was left out."
)]
pub struct DiffArgs {
    /// A diffstat (the default).
    #[arg(long, conflicts_with_all = ["name_only", "patch"])]
    pub stat: bool,
    /// Only the changed paths, with A/M/D/R/? status.
    #[arg(long, conflicts_with = "patch")]
    pub name_only: bool,
    /// The patch.
    #[arg(long)]
    pub patch: bool,
    /// Show at most this many lines.
    #[arg(long, value_name = "N", default_value_t = 400)]
    pub max_lines: usize,
    /// Limit to these paths.
    pub paths: Vec<String>,
}

/// Prints the diff.
pub fn run(args: &DiffArgs) -> TnhResult {
    let place = git::place()?;
    let mut arguments: Vec<String> = vec!["diff".into(), "-M".into(), "--no-color".into()];
    let untracked = || -> Result<Vec<String>, super::TnhError> {
        Ok(git::git(
            &place.root,
            &["ls-files", "--others", "--exclude-standard", "--"],
        )?
        .lines()
        .filter(|path| in_scope(path, &args.paths))
        .map(str::to_owned)
        .collect())
    };
    let text = if args.name_only {
        let changes = git::changes(&place)?;
        changes
            .iter()
            .filter(|(_, path)| in_scope(path, &args.paths))
            .map(|(status, path)| format!("{status}\t{path}\n"))
            .collect()
    } else if args.patch {
        arguments.push(place.base.clone());
        arguments.push("--".into());
        arguments.extend(args.paths.iter().cloned());
        let patch = git::git(
            &place.root,
            &arguments.iter().map(String::as_str).collect::<Vec<_>>(),
        )?;
        let mut text = key_hunks_first(&patch);
        for path in untracked()? {
            let _ = writeln!(text, "new untracked file: {path}");
        }
        text
    } else {
        arguments.extend(["--stat".into(), place.base.clone(), "--".into()]);
        arguments.extend(args.paths.iter().cloned());
        let listed: Vec<&str> = arguments.iter().map(String::as_str).collect();
        let (mut text, untracked) = git::git_pair(
            &place.root,
            &listed,
            &["ls-files", "--others", "--exclude-standard", "--"],
        )?;
        for path in untracked.lines().filter(|path| in_scope(path, &args.paths)) {
            let _ = writeln!(text, " {path} (new, untracked)");
        }
        if text.is_empty() {
            text = "no changes\n".into();
        }
        text
    };
    print(&truncate(&text, args.max_lines));
    Ok(ExitStatus::Success)
}

fn in_scope(path: &str, scopes: &[String]) -> bool {
    scopes.is_empty()
        || scopes
            .iter()
            .any(|scope| path.starts_with(scope.trim_end_matches('/')))
}

/// Files of the patch reordered: source first, then tests, then docs and others.
fn key_hunks_first(patch: &str) -> String {
    let mut files: Vec<&str> = Vec::new();
    let mut start = None;
    for (index, _) in patch.match_indices("diff --git ") {
        if index == 0 || patch.as_bytes()[index - 1] == b'\n' {
            if let Some(from) = start {
                files.push(&patch[from..index]);
            }
            start = Some(index);
        }
    }
    if let Some(from) = start {
        files.push(&patch[from..]);
    }
    let rank = |file: &str| {
        let header = file.lines().next().unwrap_or_default();
        if header.contains("test") {
            1
        } else if header.contains(".md") || header.contains("docs/") {
            2
        } else {
            0
        }
    };
    files.sort_by_key(|file| rank(file));
    files.concat()
}

/// At most `max` lines, then a marker saying what was left out.
pub fn truncate(text: &str, max: usize) -> String {
    let total = text.lines().count();
    if total <= max {
        return text.to_owned();
    }
    let mut kept: String = text
        .lines()
        .take(max)
        .map(|line| format!("{line}\n"))
        .collect();
    let _ = writeln!(
        kept,
        "… truncated: {} more lines not shown (raise --max-lines or narrow with PATH…)",
        total - max
    );
    kept
}
