//! The first-use demo: a throwaway git repository with a small shell project, configured so
//! that the shipped `implement_adr` builder loop runs offline — the agent profiles point at
//! the built-in scripted agent ([`agent`]), the task prompts are overridden with scripted
//! directives, the validators are shell commands, and the planner is `rules`.
//!
//! The implementation the scripted agent writes first has a bug, so validation fails, the
//! planner answers `partial` with fix instructions, the fix agent repairs it, validation
//! passes, the change is queued for review, and the final gate waits for `lead`.

pub mod agent;

use std::path::{Path, PathBuf};

/// The ADR the demo implements.
pub const ADR_ID: &str = "ADR-1";

/// The approver of the demo's final gate.
pub const APPROVER: &str = "lead";

/// The shipped builder loop, copied into the demo repository.
const WORKFLOW: &str = include_str!("../../workflows/implement_adr.yaml");

/// Why the demo repository could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The folder exists and is not empty.
    #[error("`{0}` already exists and is not empty")]
    NotEmpty(PathBuf),
    /// A file could not be written.
    #[error("cannot write `{path}`: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// git failed.
    #[error("git {args} failed in `{dir}`: {message}")]
    Git {
        /// The arguments.
        args: String,
        /// Where.
        dir: PathBuf,
        /// stderr, or the spawn error.
        message: String,
    },
}

impl DemoError {
    /// What to do about it.
    pub fn hint(&self) -> Option<String> {
        Some(match self {
            DemoError::NotEmpty(_) => "pass an empty or new folder with --dir".into(),
            DemoError::Write { .. } => {
                "check that the folder is writable and the disk not full".into()
            }
            DemoError::Git { .. } => "the demo needs `git` on PATH".into(),
        })
    }
}

/// The demo repository.
#[derive(Debug, Clone)]
pub struct DemoRepo {
    /// Its root.
    pub root: PathBuf,
    /// The workflow to run (inside the repository).
    pub workflow: PathBuf,
}

/// The project's files before the run: a calculator without `mul`, and the ADR's acceptance
/// test, which fails until `mul` works.
const PROJECT: &[(&str, &str)] = &[
    (
        "README.md",
        "# calc\n\nA tiny calculator in POSIX shell: `sh calc.sh add 2 3`.\n\nADR-1 (docs/adr/adr-1-mul.md): calc.sh gains a `mul` command.\n",
    ),
    (
        // Where `tnh adr list` and `tnh adr open ADR-1` (the plan prompt's first command)
        // find it: the default `adr_paths` is docs/**/adr/*.md.
        "docs/adr/adr-1-mul.md",
        "---\nstatus: accepted\n---\n# ADR-1: calc.sh gains a `mul` command\n\n## Context\n\ncalc.sh only adds. Users want to multiply too.\n\n## Decision\n\n`sh calc.sh mul A B` prints the product of A and B, like `add` prints their sum.\n\n## Acceptance\n\n`sh tests/test_calc.sh` passes: `mul 2 3` is 6 and `mul 4 5` is 20, and `add` still works.\n",
    ),
    (
        "calc.sh",
        "#!/bin/sh\n# calc.sh OP A B\ncase \"$1\" in\n  add) echo $(($2 + $3)) ;;\n  *) echo \"unknown operation: $1\" >&2; exit 2 ;;\nesac\n",
    ),
    (
        "tests/test_calc.sh",
        "#!/bin/sh\n# The acceptance tests of ADR-1.\nfail=0\ncheck() {\n  got=$(sh calc.sh \"$1\" \"$2\" \"$3\" 2>&1)\n  if [ \"$got\" = \"$4\" ]; then echo \"ok   $1 $2 $3 = $4\"; else echo \"FAIL $1 $2 $3: expected $4, got $got\"; fail=1; fi\n}\ncheck add 2 3 5\ncheck mul 2 3 6\ncheck mul 4 5 20\nexit $fail\n",
    ),
    (".gitignore", ".tnh/run/\n.tnh/worktrees/\n"),
];

/// The scripted task prompts (overrides of the library's `task.*` prompts in
/// `.tnh/prompts/`): the directives the scripted agent carries out.
const PROMPTS: &[(&str, &str)] = &[
    (
        "plan_adr.v1.md",
        "---\nprompt_id: task.plan_adr\nversion: 1\nrole: task\nsummary: demo — the plan\ninputs:\n  - {name: adr_id, type: string, required: true}\n---\nSAY Plan for {{ adr_id }}: add a `mul` branch to calc.sh; tests/test_calc.sh already checks it.\n",
    ),
    (
        "implement_adr.v1.md",
        "---\nprompt_id: task.implement_adr\nversion: 1\nrole: task\nsummary: demo — a first implementation with a bug\ninputs:\n  - {name: adr_id, type: string, required: true}\n  - {name: plan, type: any, required: false}\n---\nWRITE calc.sh: #!/bin/sh\\n# calc.sh OP A B\\ncase \"$1\" in\\n  add) echo $(($2 + $3)) ;;\\n  mul) echo $(($2 + $3)) ;;\\n  *) echo \"unknown operation: $1\" >&2; exit 2 ;;\\nesac\nSAY Implemented {{ adr_id }}: calc.sh has a mul command.{% if plan %} Followed the approved plan: {{ plan | trim }}{% endif %}\n",
    ),
    (
        "fix_from_logs.v2.md",
        "---\nprompt_id: task.fix_from_logs\nversion: 2\nrole: task\nsummary: demo — the fix\ninputs:\n  - {name: fix_instructions, type: map, required: false}\n  - {name: validation_report, type: map, required: false}\n---\nWRITE calc.sh: #!/bin/sh\\n# calc.sh OP A B\\ncase \"$1\" in\\n  add) echo $(($2 + $3)) ;;\\n  mul) echo $(($2 * $3)) ;;\\n  *) echo \"unknown operation: $1\" >&2; exit 2 ;;\\nesac\nSAY Fixed mul (it added instead of multiplying). Objective: {{ fix_instructions.objective if fix_instructions else 'make validation pass' }}.\n",
    ),
];

/// Creates the demo repository in `dir` (new or empty); `agent_argv` runs the scripted agent.
pub fn create(dir: &Path, agent_argv: &[String]) -> Result<DemoRepo, DemoError> {
    if dir.exists()
        && std::fs::read_dir(dir)
            .map(|mut entries| entries.next().is_some())
            .unwrap_or(true)
    {
        return Err(DemoError::NotEmpty(dir.to_path_buf()));
    }
    for (path, text) in PROJECT {
        write(&dir.join(path), text)?;
    }
    write(&dir.join("workflows/implement_adr.yaml"), WORKFLOW)?;
    for (name, text) in PROMPTS {
        write(&dir.join(".tnh/prompts/task").join(name), text)?;
    }
    let argv = agent_argv
        .iter()
        .map(|arg| serde_json::Value::String(arg.clone()).to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let config = format!(
        "# The demo's configuration: both agent profiles run the built-in scripted agent.\n\
         agents:\n  claude-code: {{kind: command, argv: [{argv}]}}\n  codex: {{kind: command, argv: [{argv}]}}\n\
         validators:\n  tests: {{argv: [sh, tests/test_calc.sh]}}\n  lint: {{argv: [sh, -n, calc.sh]}}\n  typecheck: {{argv: [sh, -n, tests/test_calc.sh]}}\n\
         planners:\n  default: {{kind: rules}}\n"
    );
    write(&dir.join(".tnh/config.yaml"), &config)?;
    git(dir, &["init", "-q", "-b", "main"])?;
    git(dir, &["add", "-A"])?;
    git(
        dir,
        &[
            "-c",
            "user.name=tnh demo",
            "-c",
            "user.email=demo@tnh.invalid",
            "commit",
            "-q",
            "-m",
            "calc: add, and the acceptance tests of ADR-1",
        ],
    )?;
    Ok(DemoRepo {
        root: dir.to_path_buf(),
        workflow: dir.join("workflows/implement_adr.yaml"),
    })
}

fn write(path: &Path, text: &str) -> Result<(), DemoError> {
    let error = |source| DemoError::Write {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(error)?;
    }
    std::fs::write(path, text).map_err(error)
}

fn git(dir: &Path, args: &[&str]) -> Result<(), DemoError> {
    let failed = |message: String| DemoError::Git {
        args: args.join(" "),
        dir: dir.to_path_buf(),
        message,
    };
    let output = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .map_err(|error| failed(error.to_string()))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(failed(
            String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        ))
    }
}
