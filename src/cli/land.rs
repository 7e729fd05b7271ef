//! `tnh-conductor land RUN_ID [--into BRANCH] [--ff-only|--merge|--squash] [--push REMOTE
//! [--pr]]`: brings a successful run's commit into a branch, or pushes the run's branch and
//! opens a pull request. Exit 0 landed, 1 refused (nothing changed), 2 bad invocation, 4 git
//! or the run directory failed.

use std::path::Path;

use clap::Args;

use super::Output;
use crate::error::{ExitStatus, Result};
use crate::kernel::land::{LandOptions, LandReport, PullRequest, land};
use crate::workspace::land::LandMode;

/// `land RUN_ID`.
#[derive(Debug, Args)]
pub struct LandArgs {
    /// The run whose commit to land.
    pub run_id: String,
    /// The branch to land into (default: the branch the run started from).
    #[arg(long, value_name = "BRANCH")]
    pub into: Option<String>,
    /// Refuse unless the branch can simply move forward to the run's commit.
    #[arg(long, conflicts_with_all = ["merge", "squash"])]
    pub ff_only: bool,
    /// Always make a merge commit.
    #[arg(long, conflicts_with = "squash")]
    pub merge: bool,
    /// Make one commit on the branch with the run's message.
    #[arg(long)]
    pub squash: bool,
    /// Push the run's branch to REMOTE (local branches are left alone unless --into is given).
    #[arg(long, value_name = "REMOTE")]
    pub push: Option<String>,
    /// After the push, open a pull request with `gh pr create` (or print the command).
    #[arg(long, requires = "push")]
    pub pr: bool,
}

/// Lands a run and says what happened.
pub fn cmd_land(repo_root: &Path, args: &LandArgs, output: &mut Output) -> Result<ExitStatus> {
    let mode = if args.ff_only {
        LandMode::FfOnly
    } else if args.merge {
        LandMode::Merge
    } else if args.squash {
        LandMode::Squash
    } else {
        LandMode::Auto
    };
    let options = LandOptions {
        into: args.into.clone(),
        mode,
        push: args.push.clone(),
        pull_request: args.pr,
    };
    let report = land(repo_root, &args.run_id, &options)?;
    print_report(&report, output);
    Ok(ExitStatus::Success)
}

fn print_report(report: &LandReport, output: &mut Output) {
    if let Some(landed) = &report.landed {
        let checkout = landed
            .checkout
            .as_ref()
            .map(|path| format!(" (checkout `{}` updated)", path.display()))
            .unwrap_or_default();
        output.print(&format!(
            "landed run {} into {} ({}): {} -> {}{checkout}\n",
            report.run_id,
            landed.branch,
            landed.mode,
            short(&landed.before),
            short(&landed.after),
        ));
    }
    if let Some((remote, branch)) = &report.pushed {
        output.print(&format!(
            "pushed {} to {remote} as {branch}\n",
            short(&report.result_commit)
        ));
    }
    match &report.pull_request {
        Some(PullRequest::Opened(url)) => output.print(&format!("pull request: {url}\n")),
        Some(PullRequest::Command(argv)) => {
            output.note("`gh` is not on PATH; to open the pull request, run:");
            output.print(&format!("{}\n", shell_words(argv)));
        }
        None => {}
    }
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

/// `argv` as one line a POSIX shell reads back as the same words.
fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|word| {
            let plain = !word.is_empty()
                && word
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c));
            if plain {
                word.clone()
            } else {
                format!("'{}'", word.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_a_shell_reads_back() {
        let argv = ["gh", "pr", "--title", "wf: it's done", "--body", "a\nb"].map(String::from);
        assert_eq!(
            shell_words(&argv),
            r"gh pr --title 'wf: it'\''s done' --body 'a
b'"
        );
    }
}
