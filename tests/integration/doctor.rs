//! `tnh-conductor doctor`: what a run needs, on a PATH the test controls.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::kernel_support::real_git;
use crate::support::{TempRepo, conductor, stderr_text, stdout_text};

/// A folder for PATH holding `git` and the given fake programs (`name`, shell body).
fn path_with(repo: &TempRepo, programs: &[(&str, &str)]) -> PathBuf {
    let bin = repo.path().join(".git/doctor-bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(real_git(), bin.join("git")).unwrap();
    for (name, body) in programs {
        let path = bin.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    bin
}

fn doctor(repo: &TempRepo, path: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = conductor();
    command
        .arg("--repo")
        .arg(repo.path())
        .arg("doctor")
        .args(args)
        .env("PATH", path);
    for name in [
        "TNH_CLAUDE_BIN",
        "TNH_CODEX_BIN",
        "TNH_GEMINI_BIN",
        "ANTHROPIC_API_KEY",
    ] {
        command.env_remove(name);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().unwrap()
}

fn report(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("{}{}", stdout_text(output), stderr_text(output)))
}

fn row<'a>(report: &'a serde_json::Value, area: &str, name: &str) -> &'a serde_json::Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|check| check["area"] == area && check["name"] == name)
        .unwrap_or_else(|| panic!("no {area} {name}: {report:#}"))
}

const THREE_AGENTS: &str = "agents:\n  c: {kind: claude, pass_env: [DOCTOR_SET_KEY, DOCTOR_UNSET_KEY]}\n  x: {kind: codex}\n  g: {kind: gemini}\n";

#[test]
fn each_configured_cli_missing_from_path_is_reported_and_exits_1() {
    let repo = TempRepo::new();
    repo.write(".tnh/config.yaml", THREE_AGENTS);
    let path = path_with(&repo, &[]);
    let output = doctor(&repo, &path, &["--json"], &[]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr_text(&output));
    let report = report(&output);
    assert_eq!(report["ok"], false);
    for name in ["c", "x", "g"] {
        assert_eq!(
            row(&report, "agent", name)["status"],
            "missing",
            "{report:#}"
        );
    }
    assert_eq!(row(&report, "git", "git")["status"], "ok");
    // The built-in profiles are needed only when a workflow names them: a warning.
    assert_eq!(row(&report, "agent", "claude-code")["status"], "warning");
    // The table says the same.
    let table = doctor(&repo, &path, &[], &[]);
    assert_eq!(table.status.code(), Some(1));
    let text = stdout_text(&table);
    assert!(text.contains("not ready"), "{text}");
    assert!(text.contains("`gemini` not found"), "{text}");
}

#[test]
fn a_cli_newer_than_the_tested_version_is_a_warning_and_keys_are_named_never_valued() {
    let repo = TempRepo::new();
    repo.write(".tnh/config.yaml", THREE_AGENTS);
    let path = path_with(
        &repo,
        &[
            ("claude", "echo '999.0.0 (Claude Code)'"),
            ("codex", "echo 'codex-cli 0.0.1'"),
            ("gemini", "echo 'not a version'"),
        ],
    );
    let secret = "sk-do-not-print-me";
    let output = doctor(&repo, &path, &["--json"], &[("DOCTOR_SET_KEY", secret)]);
    // Warnings only: a run can go ahead.
    assert_eq!(output.status.code(), Some(0), "{}", stderr_text(&output));
    let report = report(&output);
    let claude = row(&report, "agent", "c");
    assert_eq!(claude["status"], "warning", "{claude:#}");
    assert_eq!(claude["version"], "999.0.0");
    let tested =
        tnh_conductor::runner::versions::tested_version(tnh_conductor::runner::AgentKind::Claude)
            .unwrap();
    assert_eq!(claude["tested_version"], tested.version.to_string());
    assert!(
        claude["detail"]
            .as_str()
            .unwrap()
            .contains("newer than the tested")
    );
    assert_eq!(
        claude["env"],
        serde_json::json!([{"name": "DOCTOR_SET_KEY", "set": true}, {"name": "DOCTOR_UNSET_KEY", "set": false}])
    );
    let codex = row(&report, "agent", "x");
    assert!(
        codex["detail"]
            .as_str()
            .unwrap()
            .contains("older than the tested"),
        "{codex:#}"
    );
    let gemini = row(&report, "agent", "g");
    assert_eq!(gemini["status"], "warning");
    assert!(
        gemini["detail"]
            .as_str()
            .unwrap()
            .contains("printed no version"),
        "{gemini:#}"
    );
    for args in [&["--json"][..], &[]] {
        let printed = stdout_text(&doctor(&repo, &path, args, &[("DOCTOR_SET_KEY", secret)]));
        assert!(!printed.contains(secret), "a value was printed: {printed}");
    }
}

#[test]
fn an_invalid_configuration_is_missing_with_its_position() {
    let repo = TempRepo::new();
    repo.write(
        ".tnh/config.yaml",
        "agents:\n  c: {kind: claude, sandbox: read-only}\n",
    );
    let path = path_with(&repo, &[]);
    let output = doctor(&repo, &path, &["--json"], &[]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr_text(&output));
    let report = report(&output);
    let configuration = row(&report, "configuration", "configuration");
    assert_eq!(configuration["status"], "missing");
    let detail = configuration["detail"].as_str().unwrap();
    assert!(detail.contains("config.yaml:2:"), "{detail}");
}

#[test]
fn the_json_report_matches_its_schema_and_a_bad_invocation_exits_2() {
    let repo = TempRepo::new();
    repo.write(
        ".tnh/config.yaml",
        "validators:\n  unit: {argv: [no-such-test-runner]}\nplanners:\n  judge: {kind: claude}\n",
    );
    let path = path_with(&repo, &[("claude", "echo 1.0.0")]);
    let output = doctor(&repo, &path, &["--json"], &[]);
    let report = report(&output);
    let schema = conductor().args(["schema", "doctor"]).output().unwrap();
    let schema: serde_json::Value = serde_json::from_slice(&schema.stdout).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&report)
        .map(|error| error.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:#?}\n{report:#}");
    assert_eq!(row(&report, "validator", "unit")["status"], "missing");
    assert_eq!(row(&report, "planner", "judge")["version"], "1.0.0");
    assert_eq!(output.status.code(), Some(1));
    let bad = doctor(&repo, &path, &["--no-such-flag"], &[]);
    assert_eq!(bad.status.code(), Some(2), "{}", stderr_text(&bad));
}
