//! `tnh test|lint|typecheck`: run the validator of that name — the same registry and detection
//! as RUN_VALIDATION — and print a short summary; the full output is saved in the step folder
//! inside a run.

use std::fmt::Write as _;
use std::time::Instant;

use clap::Args;

use super::{TnhError, TnhResult, git, print};
use crate::error::ExitStatus;

/// The help after `tnh NAME --help`'s options: its examples, then what all three share.
macro_rules! check_help {
    ($examples:literal) => {
        concat!(
            "Examples:\n",
            $examples,
            "\n\nThe command comes from `validators:` in .tnh/config.yaml of the repository's main working tree \
(the file the run uses, never a run worktree's own .tnh/), else is detected (Cargo: cargo test / clippy / check; \
npm scripts; Python: pytest / ruff / mypy). Prints the exit code, duration, failing tests or first errors, and \
the tail.\n\nExit codes: 0 the tool passed; else the tool's exit code (codes above 4 become 1); 2 also when no command is configured or detected, \
the tool cannot be started, or outside a repository."
        )
    };
}
pub(crate) use check_help;

/// `tnh test|lint|typecheck [--json] [-- EXTRA…]`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Print the structured result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Extra arguments passed to the tool.
    #[arg(last = true)]
    pub extra: Vec<String>,
}

/// Runs the validator `name`.
pub fn run(name: &str, args: &CheckArgs) -> TnhResult {
    let root = git::root()?;
    let loaded = super::config::load(&root)?;
    if let Some(note) = &loaded.note {
        super::note(note);
    }
    let command =
        crate::opcode::validators::registered(name, &loaded.config, &root).map_err(|reason| {
            TnhError::new(
                reason,
                format!(
                    "add `validators: {{{name}: {{argv: [...]}}}}` to {}",
                    loaded.path.display()
                ),
            )
        })?;
    let mut argv = command.argv.clone();
    argv.extend(args.extra.iter().cloned());
    let started = Instant::now();
    let output = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .current_dir(&root)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|error| {
            TnhError::new(
                format!("cannot run `{}`: {error}", argv[0]),
                "install the tool or configure the validator",
            )
        })?;
    let duration = started.elapsed();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let code = output.status.code().unwrap_or(1);
    let combined = format!("{stdout}{stderr}");
    let failures: Vec<&str> = combined
        .lines()
        .filter(|line| {
            let lower = line.to_lowercase();
            (lower.contains("error") || lower.contains("failed") || lower.contains("panicked"))
                && !lower.contains("0 failed")
        })
        .take(15)
        .collect();
    let tail: Vec<&str> = combined
        .lines()
        .rev()
        .take(20)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let saved = std::env::var("TNH_STEP_DIR")
        .ok()
        .filter(|dir| !dir.is_empty())
        .map(|dir| {
            let path = std::path::Path::new(&dir).join(log_name(name));
            let _ = std::fs::create_dir_all(&dir);
            let _ = std::fs::write(&path, combined.as_bytes());
            path.display().to_string()
        });
    if args.json {
        let value = serde_json::json!({
            "validator": name,
            "argv": argv,
            "detected": command.detected,
            "exit_code": code,
            "duration_ms": duration.as_millis() as u64,
            "failures": failures,
            "tail": tail,
            "log": saved,
        });
        print(&format!(
            "{}\n",
            serde_json::to_string_pretty(&value).unwrap_or_default()
        ));
    } else {
        let verdict = if code == 0 { "passed" } else { "FAILED" };
        let mut text = format!(
            "{name}: {verdict} (exit {code}, {:.1}s) — {}\n",
            duration.as_secs_f64(),
            argv.join(" ")
        );
        if code != 0 && !failures.is_empty() {
            text.push_str("first errors:\n");
            for line in &failures {
                let _ = writeln!(text, "  {line}");
            }
        }
        if code != 0 {
            text.push_str("tail:\n");
            for line in &tail {
                let _ = writeln!(text, "  {line}");
            }
        }
        if let Some(path) = &saved {
            let _ = writeln!(text, "full output: {path}");
        }
        print(&text);
    }
    Ok(if code == 0 {
        ExitStatus::Success
    } else {
        exit_code(code)
    })
}

/// The tool's own exit code.
fn exit_code(code: i32) -> ExitStatus {
    match code {
        0 => ExitStatus::Success,
        2 => ExitStatus::Usage,
        3 => ExitStatus::Waiting,
        4 => ExitStatus::Runtime,
        _ => ExitStatus::Failure,
    }
}

/// The file in the step folder that keeps the whole output of `tnh NAME`.
fn log_name(name: &str) -> String {
    format!("{LOG_PREFIX}{name}{LOG_SUFFIX}")
}

const LOG_PREFIX: &str = "tnh-";
const LOG_SUFFIX: &str = ".log";

/// The `tnh test|lint|typecheck` logs in a step folder (regular files named `tnh-<name>.log`),
/// sorted, for the visit's manifest.
pub fn tool_logs(visit_dir: &std::path::Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(visit_dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_file()))
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| {
            name.len() > LOG_PREFIX.len() + LOG_SUFFIX.len()
                && name.starts_with(LOG_PREFIX)
                && name.ends_with(LOG_SUFFIX)
        })
        .collect();
    names.sort();
    names
}
