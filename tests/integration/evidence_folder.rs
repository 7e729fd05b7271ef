//! The step folder is the agent's `$TNH_STEP_DIR`, and the agent knows the whole run directory:
//! the conductor's evidence must never be written through what an agent left there.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::kernel_support::{RunRepo, first_event};
use crate::support::stderr_text;

/// Every file the conductor writes in a RUN_AGENT visit folder, before or after the agent.
const CONDUCTOR_NAMES: [&str; 12] = [
    "prompt.md",
    "inputs.json",
    "guard_state.json",
    "stdout.txt",
    "stderr.txt",
    "final_response.md",
    "transcript.md",
    "runner_metadata.json",
    "workspace.diff",
    "workspace_status.json",
    "policy_summary.json",
    "manifest.json",
];

/// The conductor opened the files it writes after the agent ends with
/// create+truncate, following what the agent had planted in `$TNH_STEP_DIR`:
/// `policy_summary.json -> .git/config` replaced the operator's git configuration with JSON,
/// `workspace.diff -> .git/hooks/pre-commit` wrote the agent's patch lines (valid shell) into
/// an executable hook, all after the guard had checked them, and nothing reported it. Now each
/// file is a new one (a link, hard link, FIFO or folder under its name is removed, never
/// written through), the targets are untouched, and an `evidence_tampered` event names what
/// the agent left. A link an earlier step put in the place of a later visit's folder is
/// replaced by a real folder too.
#[test]
fn evidence_is_never_written_through_what_the_agent_planted_in_its_step_folder() {
    let repo = RunRepo::new();
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("notes.txt");
    std::fs::write(&victim, "the operator's notes\n").unwrap();
    let elsewhere = outside.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let hook = repo.path().join(".git/hooks/pre-commit");
    std::fs::write(&hook, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let git_config = repo.path().join(".git/config");
    let targets = [&victim, &hook, &git_config].map(|path| {
        let bytes = std::fs::read(path).unwrap();
        (
            path.to_path_buf(),
            bytes,
            std::fs::metadata(path).unwrap().mode(),
        )
    });
    let (victim, hook, git_config) = (victim.display(), hook.display(), git_config.display());
    let planting = format!(
        r#"cat > /dev/null
mkdir -p src
echo ';echo PWNED-by-agent-patch #' > src/lib.rs
echo done
step="$TNH_STEP_DIR"
for name in prompt.md inputs.json guard_state.json stdout.txt stderr.txt; do rm -f "$step/$name"; done
ln -s '{victim}' "$step/prompt.md"
ln -s '{hook}' "$step/inputs.json"
ln -s '{git_config}' "$step/guard_state.json"
ln -s '{hook}' "$step/stdout.txt"
ln -s /dev/zero "$step/stderr.txt"
ln -s '{victim}' "$step/final_response.md"
mkfifo "$step/transcript.md"
ln '{victim}' "$step/runner_metadata.json"
ln -s '{hook}' "$step/workspace.diff"
mkdir "$step/workspace_status.json" && echo agent > "$step/workspace_status.json/inside"
ln -s '{git_config}' "$step/policy_summary.json"
ln -s '{hook}' "$step/manifest.json"
ln -s '{elsewhere}' "$TNH_RUN_DIR/artifacts/second"
"#,
        elsewhere = elsewhere.display(),
    );
    let script = outside.path().join("plant.sh");
    std::fs::write(&script, planting).unwrap();
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "{config}  planter:\n    kind: command\n    argv: [sh, \"{}\"]\n  quiet:\n    kind: command\n    argv: [sh, -c, \"cat > /dev/null; echo fine\"]\n",
            script.display()
        ),
    );
    let workflow = repo.workflow_text(
        "plant.yaml",
        "workflow_id: plant\nversion: 1\ndescription: d\nentry_step: work\nsteps:\n  - id: work\n    opcode: RUN_AGENT\n    agent: planter\n    prompt: Change src.\n    routes:\n      \"*\": second\n  - id: second\n    opcode: RUN_AGENT\n    agent: quiet\n    prompt: Nothing.\n    routes:\n      \"*\": STOP\n",
    );
    let (_, result, output) = repo.run(&workflow, &[]);
    let run_id = result["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{result}{}", stderr_text(&output)));

    // The operator's files and the folder outside are as they were.
    for (path, bytes, mode) in &targets {
        assert_eq!(&std::fs::read(path).unwrap(), bytes, "{}", path.display());
        assert_eq!(
            std::fs::metadata(path).unwrap().mode(),
            *mode,
            "{}",
            path.display()
        );
    }
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);

    // What the conductor wrote after the agent is there, each a regular file of one name.
    let visit = repo.run_dir(run_id).join("artifacts/work/1");
    let latest_manifest = std::fs::metadata(visit.with_file_name("manifest.json")).unwrap();
    let regular = |name: &str| {
        let metadata = std::fs::symlink_metadata(visit.join(name)).unwrap();
        // The visit's manifest has one more name: the step's latest manifest.
        let names = if name == "manifest.json" {
            assert_eq!(metadata.ino(), latest_manifest.ino());
            2
        } else {
            1
        };
        assert!(
            metadata.file_type().is_file() && metadata.nlink() == names,
            "{name}: {metadata:?}"
        );
        std::fs::read_to_string(visit.join(name)).unwrap()
    };
    let json = |name: &str| serde_json::from_str::<serde_json::Value>(&regular(name)).unwrap();
    assert!(regular("workspace.diff").contains("+;echo PWNED-by-agent-patch #"));
    assert!(json("workspace_status.json")["files"].is_array());
    assert!(json("policy_summary.json")["verdict"].is_string());
    assert_eq!(json("manifest.json")["step_id"], "work");
    assert_eq!(json("runner_metadata.json")["agent"], "planter");
    assert!(regular("transcript.md").starts_with("# Agent transcript"));
    assert_eq!(regular("prompt.md"), "Change src.");
    assert_eq!(json("inputs.json")["step_id"], "work");
    // Nothing in the folder is a link, a FIFO or a folder any more: the captures the agent
    // replaced are gone (and reported), not pointing elsewhere.
    for entry in std::fs::read_dir(&visit).unwrap() {
        let entry = entry.unwrap();
        let metadata = std::fs::symlink_metadata(entry.path()).unwrap();
        assert!(metadata.file_type().is_file(), "{:?}", entry.file_name());
    }

    // The tampering is reported, name by name.
    let events = repo.events(run_id);
    let tampered = first_event(&events, "evidence_tampered");
    assert_eq!(tampered["step_id"], "work");
    let entries: Vec<&str> = tampered["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry.as_str().unwrap())
        .collect();
    for name in CONDUCTOR_NAMES {
        assert!(
            entries
                .iter()
                .any(|entry| entry.starts_with(&format!("`{name}` is "))),
            "{name} not reported: {entries:#?}"
        );
    }
    assert!(
        entries
            .iter()
            .any(|entry| entry.starts_with("`manifest.json` is a symbolic link to `")),
        "{entries:#?}"
    );
    // The agent's output capture was replaced: what it said is unknown, and the outcome says so.
    let completed = events
        .iter()
        .find(|event| event["event_type"] == "runner_completed" && event["step_id"] == "work")
        .unwrap();
    assert!(
        completed["cause"]
            .as_str()
            .unwrap()
            .starts_with("evidence_tampered: "),
        "{completed}"
    );

    // The next step's folder is a real folder of the run directory, not the agent's link.
    let second = repo.run_dir(run_id).join("artifacts/second");
    assert!(std::fs::symlink_metadata(&second).unwrap().is_dir());
    assert!(Path::new(&second.join("1/manifest.json")).is_file());
}

/// A validator is the project's own code, which the agent may have written: before, what it
/// left in its step folder was removed or replaced silently by the conductor's writes, and a
/// validator that swapped its own output for a link (hiding what the tests printed) still
/// counted as passed. Now the same check as for an agent runs after the validators: each
/// planted entry is removed and named in an `evidence_tampered` event, and a validator whose
/// capture is lost ends `error` (`evidence_tampered: …`), whatever its exit code.
#[test]
fn what_a_validator_plants_in_its_step_folder_is_removed_and_reported() {
    let repo = RunRepo::new();
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("notes.txt");
    std::fs::write(&victim, "the operator's notes\n").unwrap();
    let planting = format!(
        r#"echo "3 tests failed"
step="$TNH_STEP_DIR"
rm -f "$step/validators/tests/stdout.txt"
ln -s '{victim}' "$step/validators/tests/stdout.txt"
ln -s '{victim}' "$step/validation_report.json"
mkfifo "$step/workspace_status.json"
exit 0
"#,
        victim = victim.display()
    );
    let script = outside.path().join("plant.sh");
    std::fs::write(&script, planting).unwrap();
    let config = std::fs::read_to_string(repo.path().join(".tnh/config.yaml")).unwrap();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "{config}validators:\n  tests: {{argv: [sh, \"{}\"]}}\n",
            script.display()
        ),
    );
    let workflow = repo.workflow_text(
        "plant.yaml",
        "workflow_id: plant\nversion: 1\ndescription: d\nentry_step: check\nsteps:\n  - id: check\n    opcode: RUN_VALIDATION\n    run: [tests]\n    routes:\n      completed: STOP\n      \"*\": STOP\n",
    );
    let (_, result, output) = repo.run(&workflow, &[]);
    let run_id = result["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{result}{}", stderr_text(&output)));

    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "the operator's notes\n"
    );
    let visit = repo.run_dir(run_id).join("artifacts/check/1");
    for name in [
        "validation_report.json",
        "workspace_status.json",
        "validators/tests/stderr.txt",
    ] {
        let metadata = std::fs::symlink_metadata(visit.join(name)).unwrap();
        assert!(
            metadata.file_type().is_file() && metadata.nlink() == 1,
            "{name}"
        );
    }
    // The replaced capture is gone, not left pointing at the operator's file.
    assert!(std::fs::symlink_metadata(visit.join("validators/tests/stdout.txt")).is_err());

    let events = repo.events(run_id);
    let tampered = first_event(&events, "evidence_tampered");
    assert_eq!(tampered["step_id"], "check");
    let entries: Vec<&str> = tampered["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry.as_str().unwrap())
        .collect();
    for expected in [
        "`validators/tests/stdout.txt` is a symbolic link to `",
        "`validation_report.json` is a symbolic link to `",
        "`workspace_status.json` is a FIFO",
    ] {
        assert!(
            entries.iter().any(|entry| entry.starts_with(expected)),
            "{expected}: {entries:#?}"
        );
    }
    // Its exit code said 0; what it printed is lost, so it is not a pass.
    let report = repo.json(run_id, "artifacts/check/1/validation_report.json");
    let record = &report["validators"]["tests"];
    assert_eq!(record["exit_code"], 0, "{report}");
    assert_eq!(record["outcome"], "error", "{report}");
    assert!(
        record["cause"]
            .as_str()
            .unwrap()
            .starts_with("evidence_tampered: `validators/tests/stdout.txt`"),
        "{report}"
    );
    assert_eq!(report["outcome"], "error", "{report}");
}
