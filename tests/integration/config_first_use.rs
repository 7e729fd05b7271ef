//! Review 10 (first use): configuration mistakes are refused where they are written, relative
//! program paths resolve against the repository root, and `init` / `runs clean` say what
//! happened.

use crate::kernel_support::RunRepo;
use crate::support::stderr_text;

/// `.tnh/config.yaml` replaced by `text`, then `validate` on the linear workflow.
fn validate_with_config(text: &str) -> (Option<i32>, String) {
    let repo = RunRepo::new();
    repo.repo.write(".tnh/config.yaml", text);
    let workflow = repo.workflow("linear.yaml");
    let output = repo.conductor(&["validate", workflow.to_str().unwrap()]);
    (output.status.code(), stderr_text(&output))
}

/// Review 10, defect 4: a codex profile's `disallowed_tools`, a claude profile's `sandbox`,
/// an http planner's `argv` were accepted and dropped; the operator believed a restriction
/// applied that did not.
#[test]
fn a_profile_key_its_kind_would_ignore_is_refused_at_its_position() {
    for (text, expected) in [
        (
            "agents:\n  cx: {kind: codex, permission_mode: plan}\n",
            ".tnh/config.yaml:2:21: agent profile `cx` is invalid: `permission_mode` does not apply to `kind: codex` (its adapter would ignore it); only `kind: claude` takes it",
        ),
        (
            "agents:\n  cx:\n    kind: codex\n    disallowed_tools: [Bash]\n",
            ".tnh/config.yaml:4:5: agent profile `cx` is invalid: `disallowed_tools` does not apply to `kind: codex`",
        ),
        (
            "agents:\n  cl: {kind: claude, sandbox: read-only}\n",
            ".tnh/config.yaml:2:22: agent profile `cl` is invalid: `sandbox` does not apply to `kind: claude` (its adapter would ignore it); only `kind: codex` takes it",
        ),
        (
            "agents:\n  cmd: {kind: command, argv: [sh], sandbox: read-only}\n",
            ".tnh/config.yaml:2:36: agent profile `cmd` is invalid: `sandbox` does not apply to `kind: command`",
        ),
        (
            "planners:\n  h: {kind: http, url: \"http://127.0.0.1:9/v1\", model: m, argv: [x]}\n",
            ".tnh/config.yaml:2:59: planner `h` is `kind: http`, which would ignore `argv`; only `kind: command` takes it",
        ),
    ] {
        let (code, stderr) = validate_with_config(text);
        assert_eq!(code, Some(2), "{text}: {stderr}");
        assert!(stderr.contains(expected), "{text}: {stderr}");
    }
}

/// Review 10, defect 7: `permision_mode:` at 5:5 was reported at the profile's line 3, with a
/// list of every field and no nearest key; planners said "did you mean".
#[test]
fn an_agent_profile_typo_is_reported_at_the_key_with_the_nearest_one() {
    let (code, stderr) = validate_with_config(
        "agents:\n  scripted: {kind: command, argv: [python3, x.py]}\n  claude-code:\n    kind: claude\n    permision_mode: plan\n",
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(
            ".tnh/config.yaml:5:5: agent profile `claude-code` is invalid: unknown key `permision_mode`; did you mean `permission_mode`?"
        ),
        "{stderr}"
    );
    let (code, stderr) = validate_with_config(
        "agents:\n  scripted: {kind: command, argv: [python3, x.py]}\n  c:\n    kind: claude\n    pass_env: HOME\n",
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(
            ".tnh/config.yaml:5:15: agent profile `c` is invalid: `pass_env`: invalid type"
        ),
        "{stderr}"
    );
}
