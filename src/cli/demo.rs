//! `tnh-conductor demo`: the first-use path. It makes a throwaway repository, runs the shipped
//! `implement_adr` builder loop on it offline (the built-in scripted agent, the `rules`
//! planner), approves the final gate as the demo's lead, and prints where to look.
//! `tnh-conductor demo-agent` (hidden) is that scripted agent. `tnh-conductor init` writes a
//! commented `.tnh/config.yaml`.

use std::io::Read;
use std::path::PathBuf;

use clap::Args;

use super::{Cli, Output};
use crate::demo::{self, ADR_ID, APPROVER};
use crate::error::{Error, ExitStatus, Result};
use crate::kernel::driver::RunEnd;
use crate::kernel::gate::{Decision, DecisionRequest, decide};
use crate::kernel::run::{ResumeRequest, RunRequest, RunSummary, resume_run, start_run};

/// `demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Where to create the demo repository (new or empty; default: a new temporary folder,
    /// kept for you to explore).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

fn run_error(error: crate::kernel::run::RunError) -> Error {
    Error::Run(Box::new(error))
}

/// Runs the demo: 0 when the run completed, the run's own exit status otherwise.
pub fn cmd_demo(cli: &Cli, args: &DemoArgs, output: &mut Output) -> Result<ExitStatus> {
    let dir = match &args.dir {
        Some(dir) => std::path::absolute(dir).unwrap_or(dir.clone()),
        None => {
            let stamp = jiff::Timestamp::now().strftime("%Y%m%dT%H%M%S").to_string();
            std::env::temp_dir().join(format!("tnh-demo-{stamp}-{}", std::process::id()))
        }
    };
    let exe = std::env::current_exe().map_err(|source| Error::Io {
        action: "locate",
        path: PathBuf::from("the tnh-conductor binary"),
        source,
    })?;
    let repo = demo::create(&dir, &[exe.display().to_string(), "demo-agent".into()])?;
    output.note(&format!(
        "demo repository: {} (a shell calculator; {ADR_ID} asks for a `mul` command)",
        repo.root.display()
    ));
    output
        .note("running workflows/implement_adr.yaml with the scripted agent and the rules planner");
    let config = crate::config::Config::load(Some(&repo.root), None)?;
    let observer = || super::progress::observer(!cli.quiet);
    let request = RunRequest {
        repo: repo.root.clone(),
        workflow_path: repo.workflow.clone(),
        params: vec![format!("adr_id={ADR_ID}")],
        base: "HEAD".into(),
        config: config.clone(),
        observer: observer(),
    };
    let mut summary = start_run(request).map_err(run_error)?;
    // Gates the demo decides itself: the final review, approved as the lead.
    for _ in 0..3 {
        let RunEnd::Waiting { step_id } = &summary.end else {
            break;
        };
        output.note(&format!(
            "gate `{step_id}` waits; the demo approves it as `{APPROVER}` (you would run `tnh-conductor gate approve {} --as {APPROVER} --resume`)",
            summary.run_id
        ));
        decide(&DecisionRequest {
            repo: &repo.root,
            run_id: summary.run_id.as_str(),
            decision: Decision::Approve,
            reviewer: APPROVER,
            comment: Some("approved by the demo"),
            accept_drift: false,
            answered_at: None,
        })
        .map_err(run_error)?;
        summary = resume_run(ResumeRequest {
            observer: observer(),
            ..ResumeRequest::new(&repo.root, summary.run_id.clone(), config.clone())
        })
        .map_err(run_error)?;
    }
    let end = super::run::EndLine::of(&summary.end, &summary.run_dir);
    report(&repo.root, &summary, &end, output);
    Ok(end.status)
}

fn report(
    root: &std::path::Path,
    summary: &RunSummary,
    end: &super::run::EndLine,
    output: &mut Output,
) {
    let repo = root.display();
    let run_id = &summary.run_id;
    let line = end.line(run_id.as_str());
    output.print(&format!(
        "\n{line}\n\n\
         run directory  {}\n\
         worktree       {}\n\n\
         what happened  tnh-conductor --repo {repo} runs show {run_id}\n\
         events         tnh-conductor --repo {repo} runs events {run_id}\n\
         the diff       git -C {} diff main\n\
         the journal    tnh-conductor --repo {repo} journal\n\
         the planner    {}/artifacts/evaluate_results/1/planner_decision.json\n",
        summary.run_dir.display(),
        summary.worktree.display(),
        summary.worktree.display(),
        summary.run_dir.display(),
    ));
    let succeeded = matches!(
        summary.end,
        RunEnd::Finished {
            end: crate::kernel::End::Success,
            ..
        }
    );
    let metadata = crate::artifacts::RunDir::at(summary.run_dir.clone()).read_metadata();
    if let (true, Ok(metadata)) = (succeeded, metadata) {
        output.print(&format!(
            "the commit     git -C {repo} show {}\n\
             land it        tnh-conductor --repo {repo} land {run_id}\n",
            metadata.branch
        ));
    }
}

/// The hidden `demo-agent` command: the scripted agent (prompt on stdin, directives carried
/// out in the current directory).
pub fn cmd_demo_agent(output: &mut Output) -> Result<ExitStatus> {
    let mut prompt = String::new();
    std::io::stdin()
        .read_to_string(&mut prompt)
        .map_err(|source| Error::Io {
            action: "read",
            path: PathBuf::from("stdin"),
            source,
        })?;
    let cwd = std::env::current_dir().map_err(|source| Error::Io {
        action: "read",
        path: PathBuf::from("."),
        source,
    })?;
    let step_dir = std::env::var("TNH_STEP_DIR").ok();
    let visit = demo::agent::visit_from_step_dir(step_dir.as_deref());
    let performed = demo::agent::perform(&prompt, visit, &cwd);
    for line in performed.progress.iter().chain(&performed.said) {
        output.print(&format!("{line}\n"));
    }
    if let Some(failure) = &performed.failure {
        output.diagnostic(failure);
    }
    Ok(match performed.status {
        0 => ExitStatus::Success,
        _ => ExitStatus::Failure,
    })
}

/// The commented configuration `init` writes.
const INIT_CONFIG: &str = r#"# tnh-conductor configuration (docs/reference/configuration.md). Every key is
# optional; uncomment a section's key and the entries you want.
#
# Agent profiles: `claude-code`/`claude` and `codex` exist without configuration.
# agents:
#   claude-code:
#     kind: claude
#     model: claude-sonnet-4-5
#     permission_mode: acceptEdits
#     allowed_tools: [Read, Edit, Write, Bash]
#     pass_env: [ANTHROPIC_API_KEY]
#   codex:
#     kind: codex
#     model: gpt-5
#     sandbox: workspace-write
#     pass_env: [CODEX_API_KEY]
#   gemini:
#     kind: gemini
#     model: gemini-2.5-pro
#     approval_mode: auto_edit  # the Gemini CLI reads its auth type from ~/.gemini/settings.json
#     pass_env: [GEMINI_API_KEY]
#   scripted:
#     kind: command            # the prompt arrives on stdin
#     argv: ["./my-agent.sh"]  # a relative program path is this repository's (committed or not)

# Validators, by name, for RUN_VALIDATION and `tnh test|lint|typecheck`; without them the
# validators are detected (Cargo, npm, Python).
# validators:
#   tests: { argv: ["cargo", "test"] }
#   lint: { argv: ["cargo", "clippy", "--", "-D", "warnings"] }

# Planner profiles for EVALUATE: rules | command | claude | codex | http.
planners:
  default: { kind: rules }
  # judge: { kind: command, argv: ["./judge.sh"], timeout: 2m, attempts: 2 }
  # local: { kind: http, url: "http://127.0.0.1:8080/v1/chat/completions", model: "m" }

# Refs no run may move (main and master are always protected).
protected_branches: [main, master]

# A file of this checkout changed while an agent step ran (the agent wrote outside its
# worktree, or you edited the checkout meanwhile): `forbid` makes it a policy violation,
# `report` only records it.
operator_checkout: forbid

# Where script validators may live besides the run directory.
script_allowlist: []

# Where `tnh adr` and `tnh context` look for ADRs (globs relative to the repository root;
# default docs/**/adr/*.md).
# adr_paths: ["docs/**/adr/*.md", "decisions/*.md"]

# How many of the most recently finished runs keep their checkout (.tnh/worktrees/<run>);
# an older one's is removed when a new run starts (its branch, snapshots and run directory
# stay). Runs that have not finished always keep theirs.
retention:
  finished_checkouts: 5
"#;

/// `init`: writes `.tnh/config.yaml` of the repository, or the file `--config FILE` names
/// (refuses to overwrite either without `--force`).
pub fn cmd_init(cli: &Cli, force: bool, output: &mut Output) -> Result<ExitStatus> {
    let path = match &cli.config {
        // The file every later command given the same `--config FILE` reads: no repository
        // is needed to write it.
        Some(file) => file.clone(),
        None => super::repo_root(cli)?.join(".tnh/config.yaml"),
    };
    if path.is_dir() {
        return Err(Error::usage(
            format!("`{}` is a folder", path.display()),
            "name the configuration file to write, e.g. --config ci/tnh.yaml",
        ));
    }
    if path.exists() && !force {
        return Err(Error::usage(
            format!("`{}` already exists", path.display()),
            "pass --force to overwrite it",
        ));
    }
    let io = |source| Error::Io {
        action: "write",
        path: path.clone(),
        source,
    };
    crate::config::Config::parse(INIT_CONFIG.as_bytes(), &path)?;
    if let Some(parent) = path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
    {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    std::fs::write(&path, INIT_CONFIG).map_err(io)?;
    output.note(&format!("wrote {}", path.display()));
    if cli.config.is_some() {
        output.note(&format!(
            "pass --config {} to the commands that should read it (a run started with it records it; `resume`, gate decisions and the agents' `tnh` commands keep reading it)",
            path.display()
        ));
    }
    Ok(ExitStatus::Success)
}

#[cfg(test)]
mod tests {
    use super::INIT_CONFIG;

    /// The template's commented sections become valid configuration once uncommented, as its
    /// header says they do.
    #[test]
    fn the_init_template_parses_as_written_and_uncommented() {
        let path = std::path::Path::new("config.yaml");
        crate::config::Config::parse(INIT_CONFIG.as_bytes(), path).unwrap();
        let uncommented: String = INIT_CONFIG
            .lines()
            .map(|line| match line.strip_prefix("# ") {
                Some(rest)
                    if rest.starts_with("agents:")
                        || rest.starts_with("validators:")
                        || rest.starts_with("adr_paths:")
                        || rest.starts_with("  ") =>
                {
                    format!("{rest}\n")
                }
                _ => format!("{line}\n"),
            })
            .collect();
        let config = crate::config::Config::parse(uncommented.as_bytes(), path)
            .unwrap_or_else(|error| panic!("{error}\n{uncommented}"));
        assert_eq!(
            config.agents.keys().collect::<Vec<_>>(),
            ["claude-code", "codex", "gemini", "scripted"]
        );
        assert_eq!(
            config.validators.keys().collect::<Vec<_>>(),
            ["lint", "tests"]
        );
        assert_eq!(config.adr_paths, ["docs/**/adr/*.md", "decisions/*.md"]);
    }
}
