//! The agent-facing `tnh` commands, inside and outside a run, with bad input.

use crate::kernel_support::{RunRepo, first_event};
use crate::support::{TempRepo, run_tnh, stderr_text, stdout_text, tnh};

fn changed_repo() -> TempRepo {
    let repo = TempRepo::new();
    repo.write("src/lib.rs", "pub fn one() {}\n");
    repo.write("tests/lib_test.rs", "#[test] fn t() {}\n");
    repo.commit_all("base");
    repo.write(
        "src/lib.rs",
        "pub fn one() {}\npub fn two() {}\npub fn three() {}\n",
    );
    repo.write(
        "tests/lib_test.rs",
        "#[test] fn t() {}\n#[test] fn u() {}\n",
    );
    repo.write("docs/notes.md", "untracked notes\n");
    repo
}

#[test]
fn outside_a_repository_every_command_says_so() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["context"][..],
        &["diff"][..],
        &["test"][..],
        &["adr", "list"][..],
    ] {
        let output = run_tnh(dir.path(), args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(
            stderr_text(&output).contains("not inside a git repository"),
            "{args:?}: {}",
            stderr_text(&output)
        );
    }
}

#[test]
fn context_shows_where_the_agent_is() {
    let repo = changed_repo();
    let output = run_tnh(repo.path(), &["context"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr_text(&output));
    let text = stdout_text(&output);
    assert!(
        text.contains("branch: main")
            && text.contains("M src/lib.rs")
            && text.contains("? docs/notes.md"),
        "{text}"
    );
    assert!(text.contains("commands: tnh context"), "{text}");
    let inside = tnh()
        .current_dir(repo.path())
        .args(["context", "--json"])
        .env("TNH_RUN_ID", "20260101T000000Z-abcdef")
        .env("TNH_STEP_ID", "implement")
        .env("TNH_BASE_SHA", repo.git(&["rev-parse", "HEAD"]))
        .output()
        .unwrap();
    let value: serde_json::Value = serde_json::from_slice(&inside.stdout).unwrap();
    assert_eq!(
        (value["run_id"].as_str(), value["step_id"].as_str()),
        (Some("20260101T000000Z-abcdef"), Some("implement"))
    );
    assert_eq!(value["base_source"], "TNH_BASE_SHA (the run's base)");
}

#[test]
fn diff_in_three_shapes_with_paths_and_truncation() {
    let repo = changed_repo();
    let stat = stdout_text(&run_tnh(repo.path(), &["diff", "--stat"]));
    assert!(
        stat.contains("src/lib.rs") && stat.contains("docs/notes.md (new, untracked)"),
        "{stat}"
    );
    let names = stdout_text(&run_tnh(repo.path(), &["diff", "--name-only", "src/"]));
    assert_eq!(names, "M\tsrc/lib.rs\n");
    let patch = stdout_text(&run_tnh(repo.path(), &["diff", "--patch"]));
    let source = patch.find("diff --git a/src/lib.rs").unwrap();
    let tests = patch.find("diff --git a/tests/lib_test.rs").unwrap();
    assert!(source < tests, "source hunks come first:\n{patch}");
    let short = stdout_text(&run_tnh(
        repo.path(),
        &["diff", "--patch", "--max-lines", "3"],
    ));
    assert_eq!(short.lines().count(), 4, "{short}");
    assert!(
        short.lines().last().unwrap().starts_with("… truncated:"),
        "{short}"
    );
}

/// `--against REF` compares with where HEAD's branch left REF, whatever the run's base is: a
/// review started on a feature branch sees the branch's change (its commits, and what is not
/// committed yet).
#[test]
fn diff_against_a_ref_shows_a_branchs_change_since_it_left_that_ref() {
    let repo = TempRepo::new();
    repo.git(&["checkout", "-q", "-b", "feature"]);
    repo.write("src/feature.rs", "pub fn feature() {}\n");
    repo.commit_all("the feature");
    repo.write("src/wip.rs", "pub fn wip() {}\n");
    let head = repo.git(&["rev-parse", "HEAD"]);
    let against = |args: &[&str]| {
        tnh()
            .current_dir(repo.path())
            .args(args)
            .env("TNH_BASE_SHA", head.trim())
            .env_remove("TNH_STEP_DIR")
            .env_remove("TNH_RUN_ID")
            .output()
            .unwrap()
    };
    // The run's base is the branch itself: nothing committed has changed since.
    let names = stdout_text(&against(&["diff", "--name-only"]));
    assert_eq!(names, "?\tsrc/wip.rs\n");
    let names = stdout_text(&against(&["diff", "--name-only", "--against", "main"]));
    assert_eq!(names, "A\tsrc/feature.rs\n?\tsrc/wip.rs\n");
    let stat = stdout_text(&against(&["diff", "--against", "main", "--stat"]));
    assert!(
        stat.contains("src/feature.rs") && stat.contains("1 file changed"),
        "{stat}"
    );
    let unknown = against(&["diff", "--against", "no-such-branch"]);
    assert_eq!(unknown.status.code(), Some(2));
    let stderr = stderr_text(&unknown);
    assert!(
        stderr.contains("cannot compare with `no-such-branch`") && stderr.contains("hint:"),
        "{stderr}"
    );
}

#[test]
fn checks_run_the_configured_validator_and_exit_with_its_code() {
    let repo = changed_repo();
    repo.write(".tnh/config.yaml", "validators:\n  tests: {argv: [sh, -c, \"echo running; exit 0\"]}\n  lint: {argv: [sh, -c, \"echo 'error: unused variable x'; exit 1\"]}\n");
    let passed = run_tnh(repo.path(), &["test"]);
    assert_eq!(passed.status.code(), Some(0));
    assert!(
        stdout_text(&passed).starts_with("tests: passed (exit 0"),
        "{}",
        stdout_text(&passed)
    );
    let failed = run_tnh(repo.path(), &["lint"]);
    assert_eq!(failed.status.code(), Some(1));
    assert!(
        stdout_text(&failed).contains("first errors:\n  error: unused variable x"),
        "{}",
        stdout_text(&failed)
    );
    let json: serde_json::Value =
        serde_json::from_slice(&run_tnh(repo.path(), &["lint", "--json"]).stdout).unwrap();
    assert_eq!(json["exit_code"], 1);
    let missing = run_tnh(repo.path(), &["typecheck"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        stderr_text(&missing).contains("is not configured and cannot be detected"),
        "{}",
        stderr_text(&missing)
    );
    // Inside a run the full output is kept in the step folder.
    let step_dir = tempfile::tempdir().unwrap();
    let inside = tnh()
        .current_dir(repo.path())
        .arg("lint")
        .env("TNH_STEP_DIR", step_dir.path())
        .output()
        .unwrap();
    assert!(stdout_text(&inside).contains("full output:"));
    assert!(
        std::fs::read_to_string(step_dir.path().join("tnh-lint.log"))
            .unwrap()
            .contains("unused variable")
    );
}

#[test]
fn adrs_are_listed_filtered_and_opened() {
    let repo = TempRepo::new();
    repo.write(
        "docs/adr/adr-0001-use-rust.md",
        "---\ntitle: Use Rust\nstatus: accepted\n---\n# ADR-0001\nBecause.\n",
    );
    repo.write(
        "docs/arch/adr/adr-oa04-workflow-schema.md",
        "# ADR-OA04: Workflow Schema\n\n- **Status**: WIP\n",
    );
    let list = stdout_text(&run_tnh(repo.path(), &["adr", "list"]));
    assert_eq!(
        list,
        "0001\taccepted\tUse Rust\nOA04\twip\tADR-OA04: Workflow Schema\n"
    );
    assert_eq!(
        stdout_text(&run_tnh(repo.path(), &["adr", "list", "--status", "WIP"])),
        "OA04\twip\tADR-OA04: Workflow Schema\n"
    );
    assert!(
        stdout_text(&run_tnh(repo.path(), &["adr", "open", "adr-oa04"]))
            .contains("**Status**: WIP")
    );
    let unknown = run_tnh(repo.path(), &["adr", "open", "0099"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        stderr_text(&unknown).contains("known ids: 0001, OA04"),
        "{}",
        stderr_text(&unknown)
    );
}

#[test]
fn runlog_entries_become_events_of_the_run() {
    let outside = run_tnh(
        &std::env::temp_dir(),
        &["runlog", "append", "--kind", "note", "--message", "x"],
    );
    assert_eq!(outside.status.code(), Some(2));
    assert!(stderr_text(&outside).contains("not inside a tnh-conductor run"));
    let repo = RunRepo::new();
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    // A documented entry, then what an agent could write by hand: a line that is not UTF-8
    // and one without the tool.
    let agent = repo.path().join(".tnh/runlog-agent.sh");
    std::fs::write(
        &agent,
        format!(
            "{} runlog append --kind decision --message 'kept the old API' --ref src/api.rs\nprintf '\\377 not json\\n{{\"kind\":\"note\",\"timestamp\":7}}\\n' >> \"$TNH_STEP_DIR/runlog.ndjson\"\n",
            env!("CARGO_BIN_EXE_tnh")
        ),
    )
    .unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "{config}  logger:\n    kind: command\n    argv: [sh, \"{}\"]\n",
            agent.display()
        ),
    );
    let workflow = repo.workflow_text("log.yaml", "workflow_id: log\nversion: 1\ndescription: d\nentry_step: work\nsteps:\n  - id: work\n    opcode: RUN_AGENT\n    agent: logger\n    prompt: Record a decision.\n    routes:\n      \"*\": STOP\n");
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(0), "{result}{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap();
    let entry = first_event(&repo.events(run_id), "agent_runlog").clone();
    assert_eq!(
        (
            entry["kind"].as_str(),
            entry["message"].as_str(),
            entry["ref"].as_str()
        ),
        (
            Some("decision"),
            Some("kept the old API"),
            Some("src/api.rs")
        )
    );
    crate::kernel_support::assert_contiguous(&repo.events(run_id));
    // The event log stays readable by the conductor itself (no field written twice), the
    // agent's own timestamp is kept apart from the event's, and the bad line is counted.
    repo.conductor_exits(&["runs", "events", run_id], 0);
    assert!(entry["logged_at"].is_string(), "{entry}");
    let runlog: Vec<serde_json::Value> = repo
        .events(run_id)
        .into_iter()
        .filter(|event| event["event_type"] == "agent_runlog")
        .collect();
    assert_eq!(runlog.len(), 3, "{runlog:?}");
    assert_eq!(
        (runlog[1]["kind"].as_str(), runlog[1]["logged_at"].as_str()),
        (Some("note"), Some("7"))
    );
    assert_eq!(runlog[2]["kind"], "unreadable", "{runlog:?}");
    // In the run's worktree (a linked worktree: `.git` is a file), context finds the work branch.
    let worktree = std::path::PathBuf::from(result["worktree"].as_str().unwrap());
    let context = stdout_text(&run_tnh(&worktree, &["context"]));
    assert!(
        context.contains(&format!("branch: tnh/log/{run_id}")),
        "{context}"
    );
    assert!(context.contains("merge-base with main"), "{context}");
}

#[test]
fn a_closed_pipe_is_not_an_error() {
    let repo = changed_repo();
    let output = std::process::Command::new("bash")
        .current_dir(repo.path())
        .args([
            "-c",
            &format!(
                "{} diff --patch | head -1 >/dev/null; echo ${{PIPESTATUS[0]}}",
                env!("CARGO_BIN_EXE_tnh")
            ),
        ])
        .output()
        .unwrap();
    assert_eq!(stdout_text(&output).trim(), "0");
}

#[test]
fn help_tells_an_agent_what_it_needs() {
    let help = stdout_text(&tnh().arg("--help").output().unwrap());
    for word in [
        "context",
        "diff",
        "test",
        "lint",
        "typecheck",
        "adr",
        "runlog",
        "Exit codes",
    ] {
        assert!(
            help.contains(word),
            "{word} missing from tnh --help:\n{help}"
        );
    }
    let diff_help = stdout_text(&tnh().args(["diff", "--help"]).output().unwrap());
    assert!(
        diff_help.contains("Examples:") && diff_help.contains("--max-lines"),
        "{diff_help}"
    );
    // docs/tnh.md: every command's --help explains its exit codes.
    for command in [
        &["context"][..],
        &["diff"][..],
        &["test"][..],
        &["lint"][..],
        &["typecheck"][..],
        &["adr", "list"][..],
        &["adr", "open"][..],
        &["runlog", "append"][..],
    ] {
        let help = stdout_text(&tnh().args(command).arg("--help").output().unwrap());
        assert!(
            help.contains("Exit codes:"),
            "{command:?} --help does not explain its exit codes:\n{help}"
        );
    }
    // Each of test, lint and typecheck shows its own examples, not another's.
    for name in ["test", "lint", "typecheck"] {
        let help = stdout_text(&tnh().args([name, "--help"]).output().unwrap());
        let examples: Vec<&str> = help
            .lines()
            .skip_while(|line| *line != "Examples:")
            .skip(1)
            .take_while(|line| !line.is_empty())
            .collect();
        assert!(
            !examples.is_empty()
                && examples
                    .iter()
                    .all(|line| line.starts_with(&format!("  tnh {name}"))),
            "tnh {name} --help:\n{help}"
        );
    }
}

/// Runs a one-step workflow whose command agent is the shell `script`; returns the repository,
/// the run id and the run's `agent_runlog` events.
fn run_logging_agent(script: &str) -> (RunRepo, String, Vec<serde_json::Value>) {
    let repo = RunRepo::new();
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    let agent = repo.path().join(".tnh/runlog-agent.sh");
    std::fs::write(&agent, script).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "{config}  logger:\n    kind: command\n    argv: [sh, \"{}\"]\n",
            agent.display()
        ),
    );
    let workflow = repo.workflow_text("log.yaml", "workflow_id: log\nversion: 1\ndescription: d\nentry_step: work\nsteps:\n  - id: work\n    opcode: RUN_AGENT\n    agent: logger\n    prompt: Log.\n    routes:\n      \"*\": STOP\n");
    let (code, result, output) = repo.run(&workflow, &[]);
    assert_eq!(code, Some(0), "{result}{}", stderr_text(&output));
    let run_id = result["run_id"].as_str().unwrap().to_owned();
    let runlog = repo
        .events(&run_id)
        .into_iter()
        .filter(|event| event["event_type"] == "agent_runlog")
        .collect();
    (repo, run_id, runlog)
}

/// A FIFO at `$TNH_STEP_DIR/runlog.ndjson` hung the conductor forever in
/// `open()` (SIGTERM could not end it), and nothing of the step was captured. Now the run log
/// is read only if it is a regular file; a FIFO is reported in an `agent_runlog` event of kind
/// `unreadable`, and the step is captured and checked as any other.
#[test]
fn a_fifo_in_place_of_the_run_log_is_reported_not_waited_on() {
    let (repo, run_id, runlog) =
        run_logging_agent("cat > /dev/null\nmkfifo \"$TNH_STEP_DIR/runlog.ndjson\"\n");
    assert_eq!(runlog.len(), 1, "{runlog:?}");
    assert_eq!(runlog[0]["kind"], "unreadable");
    let message = runlog[0]["message"].as_str().unwrap();
    assert!(
        message.starts_with("runlog.ndjson was not read: ") && message.contains("a FIFO"),
        "{message}"
    );
    let visit = repo.run_dir(&run_id).join("artifacts/work/1");
    assert!(visit.join("policy_summary.json").is_file());
    // Not listed as the step's run log: the manifest names files, not FIFOs.
    let manifest = repo.json(&run_id, "artifacts/work/1/manifest.json");
    assert!(
        !manifest.to_string().contains("runlog.ndjson"),
        "{manifest}"
    );
}

/// The run log was read whole into memory, however large (a link to
/// `/dev/zero` never ends), and every line became an event. Now at most its first 4 MiB are
/// read and at most 1000 entries recorded; what was left is said in one `unreadable` event.
#[test]
fn an_oversized_run_log_is_read_up_to_its_bounds_and_the_rest_reported() {
    // 200,000 entries of 40 bytes: 8 MB, past both bounds.
    let (_repo, _run_id, runlog) = run_logging_agent(
        "cat > /dev/null\nyes '{\"kind\":\"note\",\"message\":\"again and again\"}' | head -n 200000 > \"$TNH_STEP_DIR/runlog.ndjson\"\n",
    );
    assert_eq!(runlog.len(), 1001, "{:?}", runlog.last());
    assert!(runlog[..1000].iter().all(|event| event["kind"] == "note"));
    assert_eq!(runlog[1000]["kind"], "unreadable");
    let message = runlog[1000]["message"].as_str().unwrap();
    assert!(
        message.contains("past the first 1000 were not recorded")
            && message.contains("larger than 4 MiB"),
        "{message}"
    );
    // A link to an endless device is not followed at all.
    let (_repo, _run_id, runlog) =
        run_logging_agent("cat > /dev/null\nln -s /dev/zero \"$TNH_STEP_DIR/runlog.ndjson\"\n");
    assert_eq!(runlog.len(), 1, "{runlog:?}");
    assert!(
        runlog[0]["message"]
            .as_str()
            .unwrap()
            .contains("symbolic link"),
        "{runlog:?}"
    );
}

/// An entry appended without `--ref` (`"ref": null` in the file) became an
/// event with `"ref": "null"`, a reference to a file named `null`. A null or absent field is
/// left out of the event.
#[test]
fn a_runlog_entry_without_a_reference_has_no_ref_field() {
    let (_repo, _run_id, runlog) = run_logging_agent(&format!(
        "cat > /dev/null\n{} runlog append --kind note --message 'no file to point at'\nprintf '{{\"kind\":null,\"message\":\"by hand\",\"ref\":null}}\\n' >> \"$TNH_STEP_DIR/runlog.ndjson\"\n",
        env!("CARGO_BIN_EXE_tnh")
    ));
    assert_eq!(runlog.len(), 2, "{runlog:?}");
    assert_eq!(runlog[0]["message"], "no file to point at");
    assert_eq!(runlog[0]["kind"], "note");
    for event in &runlog {
        assert!(event.get("ref").is_none(), "{event}");
    }
    assert!(runlog[1].get("kind").is_none(), "{}", runlog[1]);
}

/// In a repository without a commit yet, `tnh context` and `tnh diff` failed
/// with git's "bad revision 'HEAD'" (exit 2); with no commit, everything is new: the base is
/// the empty tree, staged files are added and the others untracked.
#[test]
fn without_a_commit_yet_every_file_is_new() {
    let dir = tempfile::tempdir().unwrap();
    crate::support::git_in(dir.path(), &["init", "-q", "-b", "main"]);
    std::fs::write(dir.path().join("staged.rs"), "fn staged() {}\n").unwrap();
    std::fs::write(dir.path().join("new.txt"), "new\n").unwrap();
    crate::support::git_in(dir.path(), &["add", "staged.rs"]);

    let context = run_tnh(dir.path(), &["context"]);
    assert_eq!(context.status.code(), Some(0), "{}", stderr_text(&context));
    let text = stdout_text(&context);
    assert!(
        text.contains("branch: main")
            && text.contains("(empty tree: no commit yet)")
            && text.contains("changed (2):\n  A staged.rs\n  ? new.txt\n"),
        "{text}"
    );
    let names = run_tnh(dir.path(), &["diff", "--name-only"]);
    assert_eq!(names.status.code(), Some(0), "{}", stderr_text(&names));
    assert_eq!(stdout_text(&names), "A\tstaged.rs\n?\tnew.txt\n");
    let stat = stdout_text(&run_tnh(dir.path(), &["diff", "--stat"]));
    assert!(
        stat.contains("staged.rs | 1 +") && stat.contains("new.txt (new, untracked)"),
        "{stat}"
    );
    let patch = stdout_text(&run_tnh(dir.path(), &["diff", "--patch"]));
    assert!(
        patch.contains("+++ b/staged.rs\n@@ -0,0 +1 @@\n+fn staged() {}")
            && patch.contains("diff --git a/new.txt b/new.txt\nnew file mode 100644\n")
            && patch.contains("+++ b/new.txt\n@@ -0,0 +1 @@\n+new\n"),
        "{patch}"
    );
}

/// In a linked worktree, `tnh test` read the main working tree's
/// `.tnh/config.yaml` (as documented) but said nothing about the checkout's own, different
/// file, which `tnh-conductor` names as ignored; now every `tnh` command that reads the
/// configuration names it on stderr the same way, and stays quiet when the files agree.
#[test]
fn a_linked_worktrees_own_config_is_named_as_ignored() {
    let repo = TempRepo::new();
    let main_config = "validators:\n  tests: {argv: [sh, -c, \"echo MAIN config\"]}\n";
    repo.write(".tnh/config.yaml", main_config);
    let outside = tempfile::tempdir().unwrap();
    let linked = outside.path().join("linked");
    repo.git(&[
        "worktree",
        "add",
        "-q",
        "--detach",
        linked.to_str().unwrap(),
    ]);
    let linked = linked.canonicalize().unwrap();
    std::fs::create_dir_all(linked.join(".tnh")).unwrap();
    std::fs::write(
        linked.join(".tnh/config.yaml"),
        "validators:\n  tests: {argv: [sh, -c, \"echo LINKED config\"]}\n",
    )
    .unwrap();
    let warning = format!(
        "warning: ignoring `{}`: every checkout of this repository uses `{}`\n",
        linked.join(".tnh/config.yaml").display(),
        repo.path()
            .canonicalize()
            .unwrap()
            .join(".tnh/config.yaml")
            .display()
    );
    let tested = run_tnh(&linked, &["test"]);
    assert_eq!(tested.status.code(), Some(0), "{}", stderr_text(&tested));
    assert!(stdout_text(&tested).contains("MAIN config"));
    assert_eq!(stderr_text(&tested), warning);
    for args in [&["context"][..], &["adr", "list"][..]] {
        let output = run_tnh(&linked, args);
        assert_eq!(output.status.code(), Some(0), "{args:?}");
        assert_eq!(stderr_text(&output), warning, "{args:?}");
    }
    // The main checkout, and a linked worktree whose file is the same, hear nothing.
    assert_eq!(stderr_text(&run_tnh(repo.path(), &["test"])), "");
    std::fs::write(linked.join(".tnh/config.yaml"), main_config).unwrap();
    assert_eq!(stderr_text(&run_tnh(&linked, &["test"])), "");
}

/// A `TNH_BASE_SHA` starting with `-` reached git as an option
/// (`--output=FILE` made git write that file and `tnh diff` print "no changes"), and an empty
/// `TNH_WORKTREE` was blamed on a missing git. Both are refused, naming the variable.
#[test]
fn strange_tnh_variables_are_refused_naming_the_variable() {
    let repo = changed_repo();
    let written = repo.path().join("written-by-git.txt");
    let option = format!("--output={}", written.display());
    for args in [
        &["diff"][..],
        &["diff", "--name-only"][..],
        &["context"][..],
    ] {
        let output = tnh()
            .current_dir(repo.path())
            .args(args)
            .env("TNH_BASE_SHA", &option)
            .env_remove("TNH_WORKTREE")
            .env_remove("TNH_RUN_DIR")
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = stderr_text(&output);
        assert!(
            stderr.contains(&format!("error: TNH_BASE_SHA `{option}` is not a commit"))
                && stderr.contains("hint:"),
            "{args:?}: {stderr}"
        );
        assert!(output.stdout.is_empty(), "{args:?}");
        assert!(
            !written.exists(),
            "{args:?}: git wrote {}",
            written.display()
        );
    }
    for args in [&["diff"][..], &["context"][..], &["test"][..]] {
        let output = tnh()
            .current_dir(repo.path())
            .args(args)
            .env("TNH_WORKTREE", "")
            .env_remove("TNH_BASE_SHA")
            .env_remove("TNH_RUN_DIR")
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = stderr_text(&output);
        assert!(
            stderr.contains("error: TNH_WORKTREE is set but empty")
                && stderr.contains("unset TNH_WORKTREE")
                && !stderr.contains("install git"),
            "{args:?}: {stderr}"
        );
    }
}

/// `tnh diff --patch` showed a new (untracked) file only as a trailing
/// `new untracked file: PATH` line, so `git apply` of the output dropped every new file. New
/// files are `new file mode` diffs now (a binary one a `GIT binary patch`, ranked after every
/// other file; an executable keeps its mode, a symbolic link its target), in the sources /
/// tests / docs order, and the output applied in a clean clone gives the checkout's files. The
/// checkout's index and status are left as they were.
#[test]
fn patch_shows_new_files_and_applies_in_a_clean_clone() {
    use std::os::unix::fs::PermissionsExt as _;
    let repo = TempRepo::new();
    repo.write("src/a.rs", "a\n");
    repo.write("src/old.rs", "gone\n");
    repo.write("docs/x.md", "d\n");
    repo.commit_all("base");
    repo.write("src/a.rs", "a\nb\n");
    std::fs::remove_file(repo.path().join("src/old.rs")).unwrap();
    repo.write("src/new.rs", "pub fn new_api() {}\n");
    repo.write("tests/new_test.rs", "#[test] fn t() {}\n");
    repo.write("docs/new guide.md", "# Guide\n");
    repo.write("src/quo\"te.rs", "quoted\n");
    repo.write("src/staged.rs", "staged\n");
    repo.git(&["add", "src/staged.rs"]);
    let binary: Vec<u8> = (0..=255u8).chain([0, 0xff, 0xfe, 0]).collect();
    std::fs::create_dir_all(repo.path().join("assets")).unwrap();
    std::fs::write(repo.path().join("assets/logo.png"), &binary).unwrap();
    let script = repo.write("run.sh", "#!/bin/sh\necho hi\n");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("src/a.rs", repo.path().join("link")).unwrap();
    let status = || repo.git(&["status", "--porcelain", "--untracked-files=all"]);
    let index = || std::fs::read(repo.path().join(".git/index")).unwrap();
    let (status_before, index_before) = (status(), index());

    let output = run_tnh(repo.path(), &["diff", "--patch", "--max-lines", "100000"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr_text(&output));
    assert_eq!(stderr_text(&output), "");
    let patch = stdout_text(&output);
    assert!(!patch.contains("new untracked file"), "{patch}");
    for (path, mode) in [
        ("src/new.rs", "100644"),
        ("tests/new_test.rs", "100644"),
        ("run.sh", "100755"),
        ("link", "120000"),
        ("assets/logo.png", "100644"),
    ] {
        assert!(
            patch.contains(&format!(
                "diff --git a/{path} b/{path}\nnew file mode {mode}\n"
            )),
            "{path}: {patch}"
        );
    }
    assert!(
        patch.contains("+++ b/src/new.rs\n@@ -0,0 +1 @@\n+pub fn new_api() {}\n"),
        "{patch}"
    );
    assert!(patch.contains("\nGIT binary patch\n"), "{patch}");
    let at = |needle: &str| {
        patch
            .find(needle)
            .unwrap_or_else(|| panic!("no {needle} in {patch}"))
    };
    let (source, test, doc, binary_at) = (
        at("diff --git a/src/new.rs"),
        at("diff --git a/tests/new_test.rs"),
        at("diff --git a/docs/new guide.md b/docs/new guide.md\nnew file mode 100644\n"),
        at("diff --git a/assets/logo.png"),
    );
    assert!(source < test && test < doc && doc < binary_at, "{patch}");
    assert_eq!(status(), status_before);
    assert_eq!(index(), index_before, "the checkout's index changed");

    let clone = tempfile::tempdir().unwrap();
    crate::support::git_in(
        clone.path(),
        &["clone", "-q", repo.path().to_str().unwrap(), "."],
    );
    let patch_file = clone.path().join(".git/tnh.patch");
    std::fs::write(&patch_file, &patch).unwrap();
    crate::support::git_in(clone.path(), &["apply", patch_file.to_str().unwrap()]);
    for path in [
        "src/a.rs",
        "src/new.rs",
        "src/staged.rs",
        "src/quo\"te.rs",
        "tests/new_test.rs",
        "docs/new guide.md",
        "assets/logo.png",
        "run.sh",
    ] {
        assert_eq!(
            std::fs::read(clone.path().join(path)).unwrap(),
            std::fs::read(repo.path().join(path)).unwrap(),
            "{path}"
        );
    }
    let mode = std::fs::metadata(clone.path().join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0o111, "run.sh is not executable");
    assert_eq!(
        std::fs::read_link(clone.path().join("link")).unwrap(),
        std::path::Path::new("src/a.rs")
    );
    assert!(!clone.path().join("src/old.rs").exists());
}

/// The patch `--patch` reads is bounded (a huge new file, say a log nobody ignored): git's
/// output past 32 MiB is not read, the file cut there is left out whole, and the output says so.
#[test]
fn a_patch_past_its_bound_is_cut_between_files_and_says_so() {
    let repo = TempRepo::new();
    repo.write("a.rs", "small\n");
    let line = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\n";
    repo.write("big/huge.log", &line.repeat((33 << 20) / line.len()));
    let output = run_tnh(repo.path(), &["diff", "--patch"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr_text(&output));
    let patch = stdout_text(&output);
    assert!(
        patch.starts_with("diff --git a/a.rs b/a.rs\nnew file mode 100644\n")
            && !patch.contains("big/huge.log")
            && patch.ends_with(
                "… truncated: the patch is longer than 32 MiB; the files after it were not read (narrow with PATH…)\n"
            ),
        "{}",
        &patch[..patch.len().min(2000)]
    );
}

/// A long path is printed whole in the diffstat (git shortens it to `.../` at 80 columns):
/// the agent must be able to use every path it is shown.
#[test]
fn the_diffstat_prints_long_paths_whole() {
    let repo = TempRepo::new();
    let long = "src/a/folder/path/that/goes/on/and/on/and/on/module_with_a_long_name/implementation_file.rs";
    repo.write(long, "one\n");
    repo.commit_all("base");
    repo.write(long, "one\ntwo\n");
    for args in [&["diff"][..], &["diff", "--stat"][..]] {
        let text = stdout_text(&run_tnh(repo.path(), args));
        assert!(text.contains(&format!(" {long} ")), "{args:?}: {text}");
        assert!(!text.contains(".../"), "{args:?}: {text}");
        assert!(
            text.contains("| 1 +\n"),
            "{args:?}: the bars stay short: {text}"
        );
    }
}

/// Each `tnh test` of a step keeps its own log: a later call never erases the output of a
/// failing one the agent was pointed to, and the manifest lists them in the order of the calls.
#[test]
fn every_check_of_a_step_keeps_its_own_log() {
    let repo = changed_repo();
    repo.write(
        ".tnh/config.yaml",
        "validators:\n  tests: {argv: [sh, -c, \"if [ -e .passes ]; then echo call-passed; else : > .passes; echo call-failed; exit 1; fi\"]}\n",
    );
    let step_dir = tempfile::tempdir().unwrap();
    let check = || {
        let output = tnh()
            .current_dir(repo.path())
            .args(["test", "--json"])
            .env("TNH_STEP_DIR", step_dir.path())
            .env_remove("TNH_BASE_SHA")
            .output()
            .unwrap();
        let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        report["log"].as_str().unwrap().to_owned()
    };
    let first = check();
    let second = check();
    let third = check();

    assert_ne!(first, second);
    assert!(first.ends_with("/tnh-tests.log"), "{first}");
    assert!(second.ends_with("/tnh-tests.2.log"), "{second}");
    assert!(
        std::fs::read_to_string(&first)
            .unwrap()
            .contains("call-failed")
    );
    assert!(
        std::fs::read_to_string(&second)
            .unwrap()
            .contains("call-passed")
    );
    assert!(
        std::fs::read_to_string(&third)
            .unwrap()
            .contains("call-passed")
    );
    let names: Vec<String> = (2..=11)
        .map(|call| format!("tnh-tests.{call}.log"))
        .collect();
    for name in &names[2..] {
        std::fs::write(step_dir.path().join(name), "").unwrap();
    }
    let mut listed = vec!["tnh-tests.log".to_owned()];
    listed.extend(names);
    assert_eq!(tnh_conductor::artifacts::tool_logs(step_dir.path()), listed);
}

/// A summary counting 10 (or 20…) failures is a failure line, as 9 is; `0 failed` is not.
#[test]
fn failure_counts_ending_in_zero_are_failures() {
    let repo = changed_repo();
    repo.write(
        ".tnh/config.yaml",
        "validators:\n  tests: {argv: [sh, -c, \"echo 'test result: ok. 3 passed; 0 failed'; echo 'test result: FAILED. 5 passed; 10 failed'; exit 1\"]}\n",
    );
    let output = run_tnh(repo.path(), &["test", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        report["failures"],
        serde_json::json!(["test result: FAILED. 5 passed; 10 failed"])
    );
}

/// git's refusals an agent causes are named: a `TNH_BASE_SHA` that is no commit of the
/// repository, and a PATH given relative to a subfolder.
#[test]
fn a_base_that_is_no_commit_and_a_path_outside_the_root_are_named() {
    let repo = changed_repo();
    let output = tnh()
        .current_dir(repo.path())
        .arg("context")
        .env("TNH_BASE_SHA", "deadbeef")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let error = stderr_text(&output);
    assert!(
        error.contains("TNH_BASE_SHA `deadbeef` is not a commit of this repository"),
        "{error}"
    );
    assert!(error.contains("unset TNH_BASE_SHA"), "{error}");
    let output = run_tnh(&repo.path().join("src"), &["diff", "../README.md"]);
    assert_eq!(output.status.code(), Some(2));
    let error = stderr_text(&output);
    assert!(
        error.contains("PATHs are relative to the repository root"),
        "{error}"
    );
}
