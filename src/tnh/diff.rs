//! `tnh diff`: the changes against the run's base, key hunks first, truncated with a marker.

use std::fmt::Write as _;

use clap::Args;

use super::{TnhResult, git, print};
use crate::error::ExitStatus;

/// `tnh diff [--stat|--name-only|--patch] [--max-lines N] [PATH…]`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  tnh diff --stat\n  tnh diff --patch --max-lines 200 src/\n  tnh diff --name-only 'src/*.rs' | head\n\n\
The base is TNH_BASE_SHA inside a run, else the merge-base with origin/HEAD, main or master. \
Untracked files are listed as new. PATHs are git pathspecs relative to the repository root, matched the same way \
for tracked and untracked files in every mode: `src` is the folder src (not srcgen/), `src/*.rs` a glob. \
--patch shows source files first, then tests, then docs and others; \
output longer than --max-lines ends with a line saying how much was left out; with nothing changed every mode \
prints `no changes`."
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
    /// Limit to these paths (git pathspecs: folders, files or globs).
    pub paths: Vec<String>,
}

/// Prints the diff.
pub fn run(args: &DiffArgs) -> TnhResult {
    let place = git::place()?;
    let mut text = if args.name_only {
        git::changes(&place, &args.paths)?
            .iter()
            .map(|(status, path)| format!("{status}\t{path}\n"))
            .collect()
    } else {
        let shape = if args.patch { "--patch" } else { "--stat" };
        let tracked = git::with_paths(
            &["diff", "-M", "--no-color", shape, &place.base],
            &args.paths,
        );
        let (tracked, untracked) = git::git_pair(
            &place.root,
            &git::as_strs(&tracked),
            &git::as_strs(&git::untracked_args(&args.paths)),
        )?;
        let untracked = git::split_nul(&untracked);
        if args.patch {
            let mut text = key_hunks_first(&tracked);
            for path in untracked {
                let _ = writeln!(text, "new untracked file: {path}");
            }
            text
        } else {
            let mut text = tracked;
            for path in untracked {
                let _ = writeln!(text, " {path} (new, untracked)");
            }
            text
        }
    };
    if text.is_empty() {
        text = "no changes\n".into();
    }
    print(&truncate(&text, args.max_lines));
    Ok(ExitStatus::Success)
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
