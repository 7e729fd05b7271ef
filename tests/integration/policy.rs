//! Policy table tests: every rule, every operation id and every normalisation case, on
//! hand-made changes (the real-repository side is in `workspace_guard`).

use tnh_conductor::policy::{
    Operation, PathEscape, Policy, PolicyError, PolicySpec, PolicySummary, Verdict, ViolationClass,
    normalize_path, policy_summary_schema, symlink_escapes,
};
use tnh_conductor::workspace::{ChangeKind, ChangedFile, DiffStat, GuardReport, WorkspaceStatus};

fn file(path: &str, kind: ChangeKind) -> ChangedFile {
    let (old_mode, new_mode) = match kind {
        ChangeKind::Add | ChangeKind::Binary => (None, Some("100644")),
        ChangeKind::Delete => (Some("100644"), None),
        ChangeKind::Mode => (Some("100644"), Some("100755")),
        ChangeKind::Symlink => (None, Some("120000")),
        _ => (Some("100644"), Some("100644")),
    };
    ChangedFile {
        path: path.to_owned(),
        old_path: None,
        kind,
        old_mode: old_mode.map(str::to_owned),
        new_mode: new_mode.map(str::to_owned),
        binary: kind == ChangeKind::Binary,
        symlink_target: None,
        lines_added: 1,
        lines_removed: 0,
    }
}

fn status(files: Vec<ChangedFile>) -> WorkspaceStatus {
    WorkspaceStatus {
        schema_version: 1,
        since: "refs/tnh/runs/r/pre_run".to_owned(),
        since_tree: String::new(),
        files,
        new_top_level_dirs: Vec::new(),
        diffstat: DiffStat::default(),
        access_restored: Vec::new(),
    }
}

fn policy(allowed: &[&str], forbidden: &[&str], operations: &[&str]) -> Policy {
    let strings = |items: &[&str]| items.iter().map(|item| (*item).to_owned()).collect();
    Policy::compile(&PolicySpec {
        allowed_paths: strings(allowed),
        forbidden_paths: strings(forbidden),
        forbidden_operations: strings(operations),
        check: None,
    })
    .unwrap()
}

/// The (class, rule) pairs of checking `files` against `policy`.
fn verdicts(policy: &Policy, files: Vec<ChangedFile>) -> Vec<(ViolationClass, String)> {
    policy
        .check(&status(files), &GuardReport::default(), None)
        .into_iter()
        .map(|violation| (violation.class, violation.rule))
        .collect()
}

/// One table row: allowed globs, forbidden globs, the changed path, the expected verdicts.
type GlobCase = (
    &'static [&'static str],
    &'static [&'static str],
    &'static str,
    Vec<(ViolationClass, String)>,
);

fn one(class: ViolationClass, rule: &str) -> Vec<(ViolationClass, String)> {
    vec![(class, rule.to_owned())]
}

#[test]
fn path_globs_single_star_stays_in_one_folder_and_double_star_crosses() {
    use ViolationClass::{ForbiddenPath, OutsideAllowedPaths};
    let cases: &[GlobCase] = &[
        (&[], &["*.lock"], "Cargo.lock", one(ForbiddenPath, "*.lock")),
        (&[], &["*.lock"], "sub/Cargo.lock", vec![]),
        (
            &[],
            &["**/*.lock"],
            "sub/deep/Cargo.lock",
            one(ForbiddenPath, "**/*.lock"),
        ),
        (
            &[],
            &["**/*.lock"],
            "Cargo.lock",
            one(ForbiddenPath, "**/*.lock"),
        ),
        (
            &[],
            &[".github/**"],
            ".github/workflows/ci.yml",
            one(ForbiddenPath, ".github/**"),
        ),
        (
            &[],
            &["*.env*"],
            "prod.env.local",
            one(ForbiddenPath, "*.env*"),
        ),
        (&["src/*"], &[], "src/lib.rs", vec![]),
        (
            &["src/*"],
            &[],
            "src/nested/lib.rs",
            one(OutsideAllowedPaths, "allowed_paths"),
        ),
        (&["src/**"], &[], "src/nested/deep/lib.rs", vec![]),
        (
            &["src/**"],
            &[],
            "tests/a.rs",
            one(OutsideAllowedPaths, "allowed_paths"),
        ),
        (&["docs/"], &[], "docs/a/b.md", vec![]),
        (&["./tests/**"], &[], "tests/x.rs", vec![]),
        (
            &["src/*.rs"],
            &[],
            "src/main.py",
            one(OutsideAllowedPaths, "allowed_paths"),
        ),
        (
            &["src/**"],
            &["src/secret/**"],
            "src/secret/key.pem",
            one(ForbiddenPath, "src/secret/**"),
        ),
        (&["docs/**"], &[], "docs/naïve café/ünïcode file.md", vec![]),
        (&["文档/**"], &[], "文档/说明 文件.md", vec![]),
        (&["docs/*.md"], &[], "docs/with space.md", vec![]),
        (
            &["docs/**"],
            &[],
            "docs2/x.md",
            one(OutsideAllowedPaths, "allowed_paths"),
        ),
    ];
    for (allowed, forbidden, path, expected) in cases {
        let got = verdicts(
            &policy(allowed, forbidden, &[]),
            vec![file(path, ChangeKind::Modify)],
        );
        assert_eq!(
            &got, expected,
            "allowed {allowed:?} forbidden {forbidden:?} path {path}"
        );
    }
}

#[test]
fn escaping_paths_are_violations_and_never_matched() {
    // `**` allows everything inside the worktree; escapes must still be caught.
    let everything = policy(&["**"], &[], &[]);
    for path in [
        "../x",
        "/etc/passwd",
        "a/../../x",
        "..",
        "C:/Windows/system32",
        "",
    ] {
        let got = verdicts(&everything, vec![file(path, ChangeKind::Add)]);
        assert_eq!(
            got,
            one(ViolationClass::PathEscape, "path_normalisation"),
            "{path:?}"
        );
    }
    // `a/./b/../c` normalises to `a/c` and is matched as such.
    let only_a = policy(&["a/*"], &[], &[]);
    assert_eq!(
        verdicts(&only_a, vec![file("a/./b/../c", ChangeKind::Add)]),
        vec![]
    );
    let mut renamed = file("inside.txt", ChangeKind::Rename);
    renamed.old_path = Some("../outside.txt".to_owned());
    assert_eq!(
        verdicts(&everything, vec![renamed]),
        one(ViolationClass::PathEscape, "path_normalisation")
    );
}

#[test]
fn normalisation_table() {
    assert_eq!(normalize_path("src/./lib.rs"), Ok("src/lib.rs".to_owned()));
    assert_eq!(
        normalize_path("src//x/../lib.rs"),
        Ok("src/lib.rs".to_owned())
    );
    assert_eq!(
        normalize_path("with space/ünï.rs"),
        Ok("with space/ünï.rs".to_owned())
    );
    assert_eq!(normalize_path("../x"), Err(PathEscape::ParentTraversal));
    assert_eq!(normalize_path("/etc/passwd"), Err(PathEscape::Absolute));
    assert_eq!(normalize_path("a\0b"), Err(PathEscape::Malformed));
    assert_eq!(normalize_path("./"), Err(PathEscape::Malformed));
    assert!(symlink_escapes("docs/link", "/etc"));
    assert!(symlink_escapes("docs/link", "../../etc/passwd"));
    assert!(symlink_escapes("link", ".."));
    assert!(!symlink_escapes("docs/link", "../README.md"));
    assert!(!symlink_escapes("docs/a/link", "../../src/lib.rs"));
}

#[test]
fn symlinks_pointing_outside_the_worktree_are_path_escapes() {
    let everything = policy(&["**"], &[], &[]);
    for (target, escapes) in [
        ("/etc", true),
        ("/etc/passwd", true),
        ("../../../etc", true),
        ("../README.md", false),
    ] {
        let mut link = file("docs/link", ChangeKind::Symlink);
        link.symlink_target = Some(target.to_owned());
        let expected = if escapes {
            one(ViolationClass::PathEscape, "symlink_target")
        } else {
            vec![]
        };
        assert_eq!(verdicts(&everything, vec![link]), expected, "{target}");
    }
}

#[test]
fn every_operation_id_is_enforced() {
    use ViolationClass::ForbiddenOperation;
    let mut renamed = file("b.rs", ChangeKind::Rename);
    renamed.old_path = Some("a.rs".to_owned());
    let mut turned_into_link = file("was-file", ChangeKind::Symlink);
    turned_into_link.old_mode = Some("100644".to_owned());
    turned_into_link.symlink_target = Some("target".to_owned());
    let mut changed_binary = file("img.png", ChangeKind::Binary);
    changed_binary.old_mode = Some("100644".to_owned());
    let cases: Vec<(&str, ChangedFile, bool)> = vec![
        ("delete_files", file("gone.rs", ChangeKind::Delete), true),
        ("delete_files", file("edited.rs", ChangeKind::Modify), false),
        ("rename_files", renamed, true),
        ("add_symlinks", file("link", ChangeKind::Symlink), true),
        ("add_symlinks", turned_into_link, true),
        (
            "add_binary_files",
            file("new.bin", ChangeKind::Binary),
            true,
        ),
        ("add_binary_files", changed_binary, false),
        ("change_file_mode", file("run.sh", ChangeKind::Mode), true),
        (
            "modify_lockfiles",
            file("Cargo.lock", ChangeKind::Modify),
            true,
        ),
        (
            "modify_lockfiles",
            file("web/package-lock.json", ChangeKind::Modify),
            true,
        ),
        (
            "modify_lockfiles",
            file("src/lock.rs", ChangeKind::Modify),
            false,
        ),
        (
            "modify_ci",
            file(".github/workflows/ci.yml", ChangeKind::Modify),
            true,
        ),
        ("modify_ci", file(".gitlab-ci.yml", ChangeKind::Add), true),
        (
            "modify_ci",
            file(".github/CODEOWNERS", ChangeKind::Modify),
            false,
        ),
    ];
    for (id, change, violates) in cases {
        let path = change.path.clone();
        let got = verdicts(&policy(&[], &[], &[id]), vec![change]);
        let expected = if violates {
            one(ForbiddenOperation, id)
        } else {
            vec![]
        };
        assert_eq!(got, expected, "{id} on {path}");
    }
    let mut top = status(vec![file("newdir/x.rs", ChangeKind::Add)]);
    top.new_top_level_dirs = vec!["newdir".to_owned()];
    let strict = policy(&[], &[], &["create_top_level_dirs"]);
    let got = strict.check(&top, &GuardReport::default(), None);
    assert_eq!(
        (got.len(), got[0].rule.as_str(), got[0].path.as_deref()),
        (1, "create_top_level_dirs", Some("newdir"))
    );
}

#[test]
fn repository_operations_come_from_the_guard_report() {
    let report = GuardReport {
        commits: 2,
        remote_refs_changed: vec!["refs/remotes/origin/x".to_owned()],
        git_config_changed: vec!["config".to_owned()],
        ..GuardReport::default()
    };
    let strict = policy(&[], &[], &["commit", "push", "modify_git_config"]);
    let rules: Vec<String> = strict
        .check(&status(vec![]), &report, None)
        .into_iter()
        .map(|v| v.rule)
        .collect();
    assert_eq!(rules, vec!["commit", "push", "modify_git_config"]);
    assert!(
        policy(&[], &[], &[])
            .check(&status(vec![]), &report, None)
            .is_empty()
    );
}

#[test]
fn free_text_operations_are_advisory_and_ids_are_exact() {
    let mixed = policy(
        &[],
        &[],
        &[
            "delete_files",
            "Creating new top-level directories",
            "Delete_Files",
            "push",
        ],
    );
    assert_eq!(
        mixed.enforced_operations().collect::<Vec<_>>(),
        vec![Operation::DeleteFiles, Operation::Push]
    );
    assert_eq!(
        mixed.advisory(),
        ["Creating new top-level directories", "Delete_Files"]
    );
    assert_eq!(Operation::ALL.len(), 11);
    for operation in Operation::ALL {
        assert_eq!(operation.id().parse::<Operation>(), Ok(operation));
    }
}

#[test]
fn the_check_hook_can_reject_a_file() {
    let open = policy(&[], &[], &[]);
    let hook = |change: &ChangedFile| {
        change
            .path
            .ends_with(".tmp")
            .then(|| "no temporary files".to_owned())
    };
    let violations = open.check(
        &status(vec![
            file("a.tmp", ChangeKind::Add),
            file("b.rs", ChangeKind::Add),
        ]),
        &GuardReport::default(),
        Some(&hook),
    );
    assert_eq!(violations.len(), 1);
    assert_eq!(
        (violations[0].class, violations[0].detail.as_str()),
        (ViolationClass::CheckFailed, "no temporary files")
    );
}

#[test]
fn an_invalid_glob_is_an_error_not_ignored() {
    let spec = PolicySpec {
        forbidden_paths: vec!["src/[".to_owned()],
        ..PolicySpec::default()
    };
    let error = Policy::compile(&spec).unwrap_err();
    assert!(
        matches!(
            error,
            PolicyError::InvalidGlob {
                field: "forbidden_paths",
                ..
            }
        ),
        "{error}"
    );
    assert!(error.to_string().contains("`src/[`"));
    assert!(error.hint().is_some());
}

#[test]
fn the_policy_summary_shows_requested_effective_advisory_and_violations() {
    let spec: PolicySpec = serde_json::from_value(serde_json::json!({
        "allowed_paths": ["src/", "tests/**"],
        "forbidden_paths": ["*.lock"],
        "forbidden_operations": ["delete_files", "Modifying CI/CD configuration"],
    }))
    .unwrap();
    let compiled = Policy::compile(&spec).unwrap();
    let files = vec![
        file("src/a.rs", ChangeKind::Delete),
        file("README.md", ChangeKind::Modify),
    ];
    let violations = compiled.check(&status(files), &GuardReport::default(), None);
    let summary = PolicySummary::new(&compiled, 2, false, violations);
    assert_eq!(summary.verdict, Verdict::Violation);
    let json = serde_json::to_value(&summary).unwrap();
    assert_eq!(json["schema_version"], 1);
    assert_eq!(json["requested"]["allowed_paths"][0], "src/");
    assert_eq!(json["effective"]["allowed_paths"][0], "src/**");
    assert_eq!(
        json["effective"]["enforced_operations"],
        serde_json::json!(["delete_files"])
    );
    assert_eq!(
        json["advisory"],
        serde_json::json!(["Modifying CI/CD configuration"])
    );
    let classes: Vec<&str> = json["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["class"].as_str().unwrap())
        .collect();
    assert_eq!(
        classes,
        vec!["forbidden_operation", "outside_allowed_paths"]
    );
    let schema = policy_summary_schema();
    assert!(schema["properties"]["violations"].is_object(), "{schema}");
    let unknown = serde_json::from_value::<PolicySpec>(serde_json::json!({"allowed_path": []}));
    assert!(unknown.is_err(), "unknown policy keys are refused");
    let clean = PolicySummary::new(&compiled, 0, false, vec![]);
    assert_eq!(clean.verdict, Verdict::Clean);
}

#[test]
fn a_real_step_is_checked_end_to_end() {
    use crate::support::TempRepo;
    use crate::workspace::{create, put};
    let repo = TempRepo::new();
    let workspace = create(&repo, "policy-e2e");
    let dir = workspace.path();
    let guard = workspace.guard(&[]).unwrap();
    std::os::unix::fs::symlink("/etc", dir.join("etc-link")).unwrap();
    put(dir, "src/ünï code.rs", "fn main() {}\n");
    put(dir, "Cargo.lock", "# lock\n");
    let report = guard.verify().unwrap();
    let status = workspace
        .status_since(&workspace.pre_run().unwrap())
        .unwrap();
    let compiled = policy(
        &["src/**", "etc-link"],
        &["*.lock"],
        &["add_symlinks", "create_top_level_dirs"],
    );
    let got: Vec<(ViolationClass, Option<String>, String)> = compiled
        .check(&status, &report, None)
        .into_iter()
        .map(|v| (v.class, v.path, v.rule))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                ViolationClass::ForbiddenPath,
                Some("Cargo.lock".into()),
                "*.lock".into()
            ),
            (
                ViolationClass::OutsideAllowedPaths,
                Some("Cargo.lock".into()),
                "allowed_paths".into()
            ),
            (
                ViolationClass::PathEscape,
                Some("etc-link".into()),
                "symlink_target".into()
            ),
            (
                ViolationClass::ForbiddenOperation,
                Some("etc-link".into()),
                "add_symlinks".into()
            ),
            (
                ViolationClass::ForbiddenOperation,
                Some("src".into()),
                "create_top_level_dirs".into()
            ),
        ]
    );
}
