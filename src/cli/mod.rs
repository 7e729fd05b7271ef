//! The operator's command line (`tnh-conductor`): argument parsing and one file per subcommand.
//! Only this layer and `tnh` print.

mod completions;
mod demo;
mod doctor;
mod gate;
mod graph;
mod journal;
mod land;
mod output;
mod planner;
mod progress;
mod prompts;
mod rollback;
mod run;
mod runs;
mod runs_abandon;
mod runs_clean;
mod runs_list;
mod schema;
mod serve;
use crate::kernel::step_lines;
mod stub;
mod validate;
mod wait;

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand, ValueEnum};

use crate::error::{Error, ExitStatus, Result};
use crate::workspace::WorkspaceError;
pub use output::{Output, one_line};

/// Run AI coding-agent workflows safely in isolated git worktrees.
#[derive(Debug, Parser)]
#[command(name = "tnh-conductor", version, about, long_about = None)]
pub struct Cli {
    /// Repository to work in (default: the current directory's repository); `serve` takes
    /// it more than once.
    #[arg(long, global = true, value_name = "DIR", action = clap::ArgAction::Append)]
    pub repo: Vec<PathBuf>,
    /// Configuration file (default: `<repo>/.tnh/config.yaml`).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// More detail on stderr (repeat for more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only errors on stderr.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// When to use colour.
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
    #[command(subcommand)]
    pub command: Command,
}

/// When to colour the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    /// Colour when writing to a terminal.
    Auto,
    /// Always colour.
    Always,
    /// Never colour.
    Never,
}

/// Every operator command.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Try it: a throwaway repository, the builder loop run offline, and where to look.
    Demo(demo::DemoArgs),
    /// The demo's scripted agent (directives on stdin).
    #[command(hide = true)]
    DemoAgent,
    /// Write `.tnh/config.yaml` (with `--config FILE`: FILE) with commented defaults.
    Init(stub::InitArgs),
    /// Check workflow files statically; nothing runs.
    Validate(validate::ValidateArgs),
    /// Start a run of a workflow.
    Run(run::RunArgs),
    /// Continue an interrupted or waiting run.
    Resume(run::ResumeArgs),
    /// Show a run's status.
    Status(runs::StatusArgs),
    /// List, show and decide gates.
    #[command(subcommand)]
    Gate(gate::GateCommand),
    /// List and inspect runs.
    #[command(subcommand)]
    Runs(stub::RunsCommand),
    /// Roll a run's worktree back to a snapshot.
    Rollback(rollback::RollbackArgs),
    /// Bring a successful run's commit into a branch, or push it for a pull request.
    Land(land::LandArgs),
    /// Draw a workflow's steps and routes.
    Graph(graph::GraphArgs),
    /// Print the review journal (Markdown).
    Journal(journal::JournalArgs),
    /// List, show and render prompts.
    #[command(subcommand)]
    Prompts(prompts::PromptsCommand),
    /// Planner tools.
    #[command(subcommand)]
    Planner(stub::PlannerCommand),
    /// Print a JSON Schema of a document or artifact format.
    Schema(schema::SchemaArgs),
    /// Check what a run here needs: git, agent and planner CLIs and their versions, the
    /// environment keys they pass, validators, the configuration, `.tnh/`, free disk.
    Doctor(doctor::DoctorArgs),
    /// Print shell completions.
    Completions(completions::CompletionsArgs),
    /// Serve the run viewer: runs, a run live, visits, gates, the journal, in a browser.
    Serve(serve::ServeArgs),
    /// Write a run as one self-contained HTML file.
    Report(serve::ReportArgs),
}

/// Runs a parsed command line and returns how the process should exit.
pub fn run(cli: Cli, output: &mut Output) -> Result<ExitStatus> {
    note_ignored_checkout_config(&cli, output);
    if cli.repo.len() > 1 && !matches!(cli.command, Command::Serve(_)) {
        return Err(Error::usage(
            "--repo is given more than once",
            "only `serve` shows several repositories; give one --repo DIR",
        ));
    }
    match &cli.command {
        Command::Serve(args) => serve::cmd_serve(&cli, args, output),
        Command::Report(args) => serve::cmd_report(&cli, args, output),
        Command::Validate(args) => validate::cmd_validate(&cli, args, output),
        Command::Schema(args) => schema::cmd_schema(args, output),
        Command::Doctor(args) => doctor::cmd_doctor(&cli, args, output),
        Command::Graph(args) => graph::cmd_graph(&cli, args, output),
        Command::Completions(args) => completions::cmd_completions(args, output),
        Command::Init(args) => demo::cmd_init(&cli, args.force, output),
        Command::Demo(args) => demo::cmd_demo(&cli, args, output),
        Command::DemoAgent => demo::cmd_demo_agent(output),
        Command::Run(args) => run::cmd_run(&cli, args, output),
        Command::Resume(args) => run::cmd_resume(&cli, args, output),
        Command::Status(args) => runs::cmd_status(&cli, args, output),
        Command::Gate(command) => gate::cmd_gate(&cli, command, output),
        Command::Runs(stub::RunsCommand::Clean {
            older_than,
            all,
            keep,
        }) => runs_clean::cmd_runs_clean(
            &repo_root(&cli)?,
            older_than.as_deref(),
            *all,
            *keep,
            output,
        ),
        Command::Runs(stub::RunsCommand::List { json, limit }) => {
            runs_list::cmd_runs_list(&cli, *json, *limit, output)
        }
        Command::Runs(stub::RunsCommand::Abandon { run_id, reason, by }) => {
            runs_abandon::cmd_runs_abandon(
                &repo_root(&cli)?,
                run_id,
                reason.as_deref(),
                by.as_deref(),
                output,
            )
        }
        Command::Runs(stub::RunsCommand::Show { run_id }) => {
            runs::cmd_runs_show(&cli, run_id, output)
        }
        Command::Runs(stub::RunsCommand::Events { run_id, follow }) => {
            runs::cmd_runs_events(&cli, run_id, *follow, output)
        }
        Command::Rollback(args) => rollback::cmd_rollback(&repo_root(&cli)?, args, output),
        Command::Land(args) => land::cmd_land(&repo_root(&cli)?, args, output),
        Command::Journal(args) => journal::cmd_journal(&cli, args, output),
        Command::Prompts(command) => prompts::cmd_prompts(&cli, command, output),
        Command::Planner(command) => planner::cmd_planner(&cli, command, output),
    }
}

/// The repository the command works in: the one containing `--repo`, else the current
/// directory's. Either may be any folder of any checkout of the repository (a linked worktree,
/// a run's worktree, `.tnh/`): every command resolves it to the main working tree, where
/// `.tnh/` (configuration, run directories, run worktrees) lives.
pub(crate) fn repo_root(cli: &Cli) -> Result<PathBuf> {
    let (root, start) = resolve_repo(cli)?;
    root.ok_or_else(|| {
        Error::usage(
            format!("`{}` is not inside a git repository", start.display()),
            "run from a folder of a git repository (any checkout of it), or pass --repo DIR",
        )
    })
}

/// Every repository `--repo` names (each resolved as `repo_root` does), else the current
/// directory's: the repositories `serve` shows.
pub(crate) fn repo_roots(cli: &Cli) -> Result<Vec<PathBuf>> {
    if cli.repo.is_empty() {
        return Ok(vec![repo_root(cli)?]);
    }
    cli.repo
        .iter()
        .map(|dir| {
            resolve_repo_at(Some(dir))?.0.ok_or_else(|| {
                Error::usage(
                    format!("`{}` is not inside a git repository", dir.display()),
                    "pass the folder of a git repository (or any folder inside it)",
                )
            })
        })
        .collect()
}

/// Like `repo_root`, for commands that also work outside a repository (`validate`, `graph`,
/// `prompts`, `planner check`): `None` when the current directory is in none. A `--repo` that
/// names no repository is still an error.
pub(crate) fn optional_repo_root(cli: &Cli) -> Result<Option<PathBuf>> {
    Ok(resolve_repo(cli)?.0)
}

/// The repository root, if the start folder is in one, and the start folder.
fn resolve_repo(cli: &Cli) -> Result<(Option<PathBuf>, PathBuf)> {
    resolve_repo_at(cli.repo.first())
}

/// [`resolve_repo`] for one `--repo` (or none).
fn resolve_repo_at(given: Option<&PathBuf>) -> Result<(Option<PathBuf>, PathBuf)> {
    let start = match given {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().map_err(|source| Error::Io {
            action: "read the current directory",
            path: PathBuf::from("."),
            source,
        })?,
    };
    if given.is_some() && !start.is_dir() {
        let what = if start.exists() {
            "is not a directory"
        } else {
            "does not exist"
        };
        return Err(Error::usage(
            format!("--repo `{}` {what}", start.display()),
            "pass the folder of a git repository (or any folder inside it)",
        ));
    }
    match crate::workspace::runs::find_repo_root(&start) {
        Ok(root) => Ok((Some(root), start)),
        Err(WorkspaceError::NotARepository(_)) if given.is_some() => Err(Error::usage(
            format!(
                "--repo `{}` is not inside a git repository",
                start.display()
            ),
            "pass the folder of a git repository (or any folder inside it)",
        )),
        Err(WorkspaceError::NotARepository(_)) => Ok((None, start)),
        Err(error) => Err(error.into()),
    }
}

/// Says so when the command runs in a linked worktree whose own `.tnh/config.yaml` differs
/// from the main working tree's: only the main working tree's is read, so that every checkout
/// runs with the same configuration as the runs it lists and resumes.
fn note_ignored_checkout_config(cli: &Cli, output: &mut Output) {
    if cli.config.is_some() {
        return;
    }
    let start = cli
        .repo
        .first()
        .cloned()
        .or_else(|| std::env::current_dir().ok());
    let Some(start) = start else { return };
    let checkout = crate::workspace::runs::checkout_root(&start);
    let root = crate::workspace::runs::find_repo_root(&start).ok();
    let (Some(checkout), Some(root)) = (checkout, root) else {
        return;
    };
    if let Some(ignored) = crate::workspace::runs::ignored_checkout_config(&checkout, &root) {
        output.note(&format!(
            "warning: {ignored} (pass --config FILE to use another)"
        ));
    }
}

/// The configuration for this invocation (`--config`, else the repository's, else defaults).
fn load_config(cli: &Cli) -> Result<crate::config::Config> {
    Ok(crate::config::Config::load(
        optional_repo_root(cli)?.as_deref(),
        cli.config.as_deref(),
    )?)
}

/// The configuration to continue run `run_id` with: `--config` when given, else the file the
/// run was started with (its own `--config`, recorded in `metadata.json`), else the
/// repository's.
fn config_for_run(cli: &Cli, repo: &Path, run_id: &str) -> Result<crate::config::Config> {
    if cli.config.is_some() {
        return load_config(cli);
    }
    let metadata = crate::kernel::run::find_run_dir(repo, run_id).and_then(|run_dir| {
        Ok(
            crate::artifacts::read_json::<crate::artifacts::RunMetadata>(
                &run_dir.metadata(),
                "run metadata",
            )?,
        )
    });
    match metadata {
        Ok(metadata) => Ok(crate::kernel::run::recorded_config(&metadata)?),
        // `resume` reports the missing or damaged run itself.
        Err(_) => load_config(cli),
    }
}

/// Every name a workflow may use here: built-ins, configured profiles, and the prompt library
/// including the repository's `.tnh/prompts/`.
fn known_names(cli: &Cli) -> Result<crate::workflow::validate::KnownNames> {
    let mut known = load_config(cli)?.known_names();
    known.prompts = crate::prompt::Catalog::load(optional_repo_root(cli)?.as_deref())?;
    Ok(known)
}

/// A hint for a usage mistake clap cannot know about: a run parameter given without `-p`.
fn usage_hint(error: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if error.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(argument)) = error.get(ContextKind::InvalidArg) else {
        return None;
    };
    let (name, _) = argument.split_once('=')?;
    let is_name = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !name.starts_with('-');
    is_name.then(|| format!("run parameters are given with -p: `-p {argument}`"))
}

/// `-v` shows the run's steps as they start and end, `-vv` also every git command and child
/// process with how long it took, `-vvv` everything traced; on stderr, off by default.
fn trace_to_stderr(verbose: u8, color: ColorChoice) {
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let level = match verbose {
        0 => return,
        1 => tracing::Level::INFO,
        2 => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    };
    let ansi = match color {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => std::io::stderr().is_terminal(),
    };
    // This crate's own spans only: the libraries' debug output is not the operator's concern.
    let filter = tracing_subscriber::filter::Targets::new().with_target("tnh_conductor", level);
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false)
        .without_time()
        .with_ansi(ansi);
    let _ = tracing_subscriber::registry()
        .with(layer)
        .with(filter)
        .try_init();
}

/// The entry point of the `tnh-conductor` binary: parse, run, report, exit.
pub fn main() -> std::process::ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let usage_error = error.use_stderr();
            // clap prints help and version itself; those are successes.
            let _ = error.print();
            if let Some(hint) = usage_hint(&error) {
                eprintln!("  hint: {hint}");
            }
            return if usage_error {
                ExitStatus::Usage.into()
            } else {
                ExitStatus::Success.into()
            };
        }
    };
    trace_to_stderr(cli.verbose, cli.color);
    let mut output = Output::new(cli.color, cli.quiet);
    let status = match run(cli, &mut output) {
        Ok(status) => status,
        Err(error) => {
            output.error(&error);
            error.exit_status()
        }
    };
    status.into()
}
