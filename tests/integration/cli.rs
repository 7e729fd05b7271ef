//! The command tree: every operator command is in `--help`; bad invocations exit 2; `graph`
//! draws workflows.

use crate::support::{conductor, stderr_text, stdout_text};

#[test]
fn help_lists_the_whole_command_tree() {
    let output = conductor().arg("--help").output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    let help = stdout_text(&output);
    for command in [
        "init",
        "validate",
        "run",
        "resume",
        "status",
        "gate",
        "runs",
        "rollback",
        "graph",
        "journal",
        "prompts",
        "planner",
        "schema",
        "completions",
    ] {
        assert!(
            help.lines()
                .any(|line| line.trim_start().starts_with(&format!("{command} "))),
            "`{command}` missing from --help"
        );
    }
    let gate = stdout_text(&conductor().args(["gate", "--help"]).output().unwrap());
    for subcommand in ["list", "show", "approve", "reject"] {
        assert!(gate.contains(subcommand), "gate {subcommand} missing");
    }
}

#[test]
fn an_unknown_command_or_flag_exits_2() {
    assert_eq!(
        conductor()
            .arg("frobnicate")
            .output()
            .unwrap()
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        conductor()
            .args(["validate", "--frobnicate", "x"])
            .output()
            .unwrap()
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn graph_draws_pattern_a_as_mermaid_and_dot() {
    let file = "tests/fixtures/workflows/valid/pattern_a_generative_eval.yaml";
    for format in ["mermaid", "dot"] {
        let output = conductor()
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["graph", "--format", format, file])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", stderr_text(&output));
        insta::assert_snapshot!(format!("graph_{format}"), stdout_text(&output));
    }
}

#[test]
fn graph_refuses_an_invalid_workflow_with_its_diagnostics() {
    let output = conductor()
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "--color",
            "never",
            "graph",
            "tests/fixtures/workflows/invalid/unknown-target.yaml",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr_text(&output)
            .contains("unknown-target.yaml:11:18: error: route target `valdate` is not a step")
    );
    assert!(output.stdout.is_empty());
}

/// Drawing routes does not depend on which agents this configuration defines: a workflow whose
/// only problem is an agent profile defined in another configuration is drawn, with a note.
#[test]
fn graph_draws_a_workflow_whose_agent_is_defined_elsewhere() {
    let repo = crate::support::TempRepo::new();
    let workflow = repo.write(
        "wf.yaml",
        "workflow_id: w\nversion: 1\ndescription: d\nentry_step: work\nsteps:\n  - id: work\n    opcode: RUN_AGENT\n    agent: scripted\n    prompt: Do it.\n    routes: {\"*\": STOP}\n",
    );
    let output = conductor()
        .arg("--repo")
        .arg(repo.path())
        .arg("graph")
        .arg(&workflow)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr_text(&output));
    assert!(
        stdout_text(&output).contains("s_work -->|*| s_STOP"),
        "{}",
        stdout_text(&output)
    );
    assert!(
        stderr_text(&output).contains("agent profile `scripted` is not defined"),
        "{}",
        stderr_text(&output)
    );
}

#[test]
fn completions_are_generated_for_bash() {
    let output = conductor().args(["completions", "bash"]).output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert!(stdout_text(&output).contains("tnh-conductor"));
}

/// The Bash completions completed only the first word (`gate <TAB>`,
/// `schema <TAB>` and `run --<TAB>` gave nothing: clap_complete's states and case arms
/// disagree for a hyphenated program name, clap-rs/clap#6421), and offered the hidden
/// `demo-agent`. The script is loaded into a real bash and asked as bash's programmable
/// completion asks it: the function `complete -p tnh-conductor` names, with COMP_WORDS and
/// COMP_CWORD set.
#[test]
fn bash_completes_subcommands_and_flags_at_every_level() {
    let output = conductor().args(["completions", "bash"]).output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("tnh-conductor.bash");
    std::fs::write(&script, &output.stdout).unwrap();
    let complete = |words: &[&str]| -> Vec<String> {
        let driver = r#"
source "$1"; shift
spec=$(complete -p tnh-conductor) || exit 3
function=${spec#*-F }; function=${function%% *}
COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMPREPLY=()
"$function" tnh-conductor "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"
"#;
        let output = std::process::Command::new("bash")
            .args(["--norc", "--noprofile", "-c", driver, "driver"])
            .arg(&script)
            .args(words)
            .output()
            .unwrap();
        assert_eq!(
            output.status.code(),
            Some(0),
            "{words:?}: {}",
            stderr_text(&output)
        );
        stdout_text(&output).lines().map(str::to_owned).collect()
    };
    let has = |words: &[&str], wanted: &[&str]| {
        let offered = complete(words);
        for word in wanted {
            assert!(
                offered.iter().any(|offered| offered == word),
                "{words:?}: no {word} in {offered:?}"
            );
        }
        offered
    };
    assert_eq!(complete(&["tnh-conductor", "ru"]), ["run", "runs"]);
    let top = has(
        &["tnh-conductor", ""],
        &["gate", "run", "--repo", "completions"],
    );
    assert!(!top.iter().any(|word| word == "demo-agent"), "{top:?}");
    has(
        &["tnh-conductor", "gate", ""],
        &["list", "show", "approve", "reject"],
    );
    has(
        &["tnh-conductor", "schema", ""],
        &["workflow", "harness-report", "tnh-check"],
    );
    has(
        &["tnh-conductor", "run", "--"],
        &["--base", "--wait", "--param", "--planner"],
    );
    has(
        &["tnh-conductor", "--repo", "/tmp", "gate", "approve", "--"],
        &["--comment", "--as", "--resume"],
    );
    assert_eq!(complete(&["tnh-conductor", "runs", "l"]), ["list"]);
    let help = has(&["tnh-conductor", "help", ""], &["gate", "run"]);
    assert!(!help.iter().any(|word| word == "demo-agent"), "{help:?}");
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let output = conductor().args(["completions", shell]).output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{shell}");
        assert!(!stdout_text(&output).contains("demo-agent"), "{shell}");
    }
}

#[test]
fn every_integration_test_file_is_wired_into_main() {
    let directory = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/integration");
    let main = std::fs::read_to_string(format!("{directory}/main.rs")).unwrap();
    for entry in std::fs::read_dir(directory).unwrap() {
        let path = entry.unwrap().path();
        let Some(stem) = path.file_stem().and_then(|stem| stem.to_str()) else {
            continue;
        };
        if path.extension().is_some_and(|extension| extension == "rs") && stem != "main" {
            assert!(
                main.contains(&format!("mod {stem};")),
                "tests/integration/{stem}.rs is not declared in main.rs"
            );
        }
    }
}

/// Two first-day mistakes get a message that says what to do: a run parameter without `-p`,
/// and a workflow path that does not exist (once reported as an invalid workflow at 1:1).
#[test]
fn common_run_mistakes_get_a_hint() {
    let repo = crate::support::TempRepo::new();
    let workflow = repo.write(
        "wf.yaml",
        "workflow_id: w\nversion: 1\ndescription: d\nentry_step: done\nsteps:\n  - id: done\n    opcode: STOP\n",
    );
    let forgot = conductor()
        .arg("--repo")
        .arg(repo.path())
        .arg("run")
        .arg(&workflow)
        .arg("adr_id=ADR-12")
        .output()
        .unwrap();
    assert_eq!(forgot.status.code(), Some(2));
    assert!(
        stderr_text(&forgot).contains("hint: run parameters are given with -p: `-p adr_id=ADR-12`"),
        "{}",
        stderr_text(&forgot)
    );
    let missing = conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["run", "workflow/no-such.yaml"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    let text = stderr_text(&missing);
    assert!(
        text.contains("no workflow file `workflow/no-such.yaml`")
            && !text.contains("is invalid")
            && text.contains("hint:"),
        "{text}"
    );
    // Nothing was started.
    assert!(!repo.path().join(".tnh/run").exists());
}

/// `-v` traces each step as it starts, `-vv` also every git command and child process with
/// how long it took; on stderr, and nothing of it without the flag.
#[test]
fn verbose_flags_trace_steps_then_git_commands_and_processes_on_stderr() {
    let repo = crate::support::TempRepo::new();
    repo.write(
        ".tnh/config.yaml",
        "agents:\n  noop: {kind: command, argv: [\"true\"]}\n",
    );
    repo.write(
        "one.yaml",
        "workflow_id: traced\nversion: 1\ndescription: one step\nentry_step: work\n\
         steps:\n  - id: work\n    opcode: RUN_AGENT\n    agent: noop\n    prompt: Do nothing.\n\
         \x20   routes:\n      \"*\": STOP\n",
    );
    repo.commit_all("workflow");
    let traced = |flags: &[&str]| {
        let output = conductor()
            .args(["--repo"])
            .arg(repo.path())
            .args(flags)
            .args(["--color", "never", "run"])
            .arg(repo.path().join("one.yaml"))
            .output()
            .unwrap();
        stderr_text(&output)
    };
    let quiet = traced(&[]);
    assert!(
        !quiet.contains("step{") && !quiet.contains("git{"),
        "{quiet}"
    );
    let steps = traced(&["-v"]);
    assert!(
        steps.contains("step{step=work visit=1 opcode=\"RUN_AGENT\"}: started"),
        "{steps}"
    );
    assert!(!steps.contains("git{"), "{steps}");
    let detail = traced(&["-vv"]);
    assert!(detail.contains("git{command=for-each-ref"), "{detail}");
    assert!(detail.contains("process started program=true"), "{detail}");
    assert!(detail.contains("elapsed_ms="), "{detail}");
    assert!(
        !detail.contains('\u{1b}'),
        "no colour when asked for none: {detail}"
    );
}
