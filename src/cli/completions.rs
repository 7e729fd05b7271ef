//! `completions SHELL`: shell completions for the operator's command tree.
//!
//! Two things clap_complete (4.6) gets wrong for this program are worked around here:
//!
//! - Bash completed only the first word. With a hyphenated program name the generated script
//!   walks the words into states such as `tnh__conductor__subcmd__gate` but spells its case
//!   arms `tnh__subcmd__conductor__subcmd__gate` (clap-rs/clap#6421), so nothing after the
//!   subcommand (`gate <TAB>`, `run --<TAB>`) matched. The script is generated for the name
//!   `tnh_conductor`, which has no hyphen (every state and arm agree), and then registered
//!   for the real command, `tnh-conductor`.
//! - Hidden subcommands were offered (`demo-agent`, which the demo's own configuration runs,
//!   not people). They are left out of the tree the scripts are generated from.

use clap::{Args, Command, CommandFactory};
use clap_complete::Shell;

use super::Output;
use crate::error::{ExitStatus, Result};

/// The program completed.
const BIN: &str = "tnh-conductor";
/// The name the Bash script is generated for: [`BIN`] without its hyphen.
const BASH_BIN: &str = "tnh_conductor";

/// `completions SHELL`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  tnh-conductor completions bash > ~/.local/share/bash-completion/completions/tnh-conductor\n  tnh-conductor completions zsh > \"${fpath[1]}/_tnh-conductor\"\n  tnh-conductor completions fish > ~/.config/fish/completions/tnh-conductor.fish"
)]
pub struct CompletionsArgs {
    /// The shell to generate completions for.
    pub shell: Shell,
}

/// Prints shell completions for the whole command tree (hidden commands left out).
pub fn cmd_completions(args: &CompletionsArgs, output: &mut Output) -> Result<ExitStatus> {
    output.print(&script(args.shell));
    Ok(ExitStatus::Success)
}

/// The completion script for `shell`.
fn script(shell: Shell) -> String {
    let mut command = offered(super::Cli::command());
    let mut buffer = Vec::new();
    if shell != Shell::Bash {
        clap_complete::generate(shell, &mut command, BIN, &mut buffer);
        return String::from_utf8_lossy(&buffer).into_owned();
    }
    clap_complete::generate(shell, &mut command, BASH_BIN, &mut buffer);
    let generated = String::from_utf8_lossy(&buffer);
    // The script's function (`_tnh_conductor`) is registered for the real command; nothing
    // else in it names the program (it matches the first word as `$1`, whatever it is).
    let suffix = format!(" {BASH_BIN}");
    generated
        .lines()
        .map(|line| match line.strip_suffix(&suffix) {
            Some(start) if line.trim_start().starts_with("complete ") => {
                format!("{start} {BIN}\n")
            }
            _ => format!("{line}\n"),
        })
        .collect()
}

/// The command tree people complete: `full` without its hidden subcommands. clap cannot remove
/// a subcommand, so the top level is rebuilt from the same arguments and the visible
/// subcommands (completion reads nothing else of it).
fn offered(full: Command) -> Command {
    Command::new(BIN)
        .version(env!("CARGO_PKG_VERSION"))
        .args(full.get_arguments().cloned())
        .subcommands(
            full.get_subcommands()
                .filter(|subcommand| !subcommand.is_hide_set())
                .cloned(),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every visible subcommand and every global option is still offered; no hidden one is.
    #[test]
    fn the_offered_tree_is_the_visible_tree() {
        let full = super::super::Cli::command();
        let offered = offered(full.clone());
        let names = |command: &Command, hidden: bool| -> Vec<String> {
            command
                .get_subcommands()
                .filter(|subcommand| subcommand.is_hide_set() == hidden)
                .map(|subcommand| subcommand.get_name().to_owned())
                .collect()
        };
        assert_eq!(names(&offered, false), names(&full, false));
        assert!(names(&offered, true).is_empty());
        assert_eq!(names(&full, true), ["demo-agent"]);
        let arguments = |command: &Command| -> Vec<String> {
            command
                .get_arguments()
                .map(|argument| argument.get_id().to_string())
                .collect()
        };
        assert_eq!(arguments(&offered), arguments(&full));
        for shell in [
            Shell::Bash,
            Shell::Zsh,
            Shell::Fish,
            Shell::Elvish,
            Shell::PowerShell,
        ] {
            let text = script(shell);
            assert!(
                text.contains("gate") && !text.contains("demo-agent"),
                "{shell}"
            );
        }
        assert!(script(Shell::Bash).contains(
            "complete -F _tnh_conductor -o nosort -o bashdefault -o default tnh-conductor\n"
        ));
    }
}
