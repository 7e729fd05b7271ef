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
        quoted_path: None,
        quoted_old_path: None,
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

/// A symlink change at `path` pointing at `target`.
fn link(path: &str, target: &str) -> ChangedFile {
    let mut link = file(path, ChangeKind::Symlink);
    link.symlink_target = Some(target.to_owned());
    link
}

/// The (class, path, rule) triples of checking `files` against `policy`.
fn findings(policy: &Policy, files: Vec<ChangedFile>) -> Vec<(ViolationClass, String, String)> {
    policy
        .check(&status(files), &GuardReport::default(), None)
        .into_iter()
        .map(|violation| {
            (
                violation.class,
                violation.path.unwrap_or_default(),
                violation.rule,
            )
        })
        .collect()
}

#[test]
fn chained_symlinks_are_resolved_through_each_other() {
    let everything = policy(&["**"], &[], &[]);
    let escape = |path: &str| {
        (
            ViolationClass::PathEscape,
            path.to_owned(),
            "symlink_target".to_owned(),
        )
    };
    // Each link of the security review's chain is inside on its own; followed through the
    // others, `w`, `t` and `op` climb above the worktree root.
    let chain = vec![
        link("d/b", ".."),
        link("op", "t/worktrees/run/t/.."),
        link("t", "w/run/w/.."),
        link("w", "d/b/.."),
    ];
    assert_eq!(
        findings(&everything, chain),
        vec![escape("op"), escape("t"), escape("w")]
    );
    type Case = (Vec<ChangedFile>, Vec<&'static str>);
    let cases: Vec<Case> = vec![
        // Inside, through another link.
        (vec![link("d/b", ".."), link("x", "d/b/src/lib.rs")], vec![]),
        (
            vec![link("s", "src"), link("docs/l", "../s/../README.md")],
            vec![],
        ),
        // A link that lands on the root, then `..`.
        (vec![link("here", "."), link("l", "here/..")], vec!["l"]),
        // An absolute link on the way.
        (
            vec![link("etc", "/etc"), link("l", "etc/passwd")],
            vec!["etc", "l"],
        ),
        // Loops.
        (vec![link("a", "b"), link("b", "a")], vec!["a", "b"]),
        (vec![link("self", "self/..")], vec!["self"]),
    ];
    for (files, escaping) in cases {
        let shown = format!("{files:?}");
        let expected: Vec<_> = escaping.into_iter().map(escape).collect();
        assert_eq!(findings(&everything, files), expected, "{shown}");
    }
}

/// A nested repository with a commit, as a capture lists it: one gitlink entry.
fn gitlink(path: &str) -> ChangedFile {
    let mut entry = file(path, ChangeKind::Add);
    entry.new_mode = Some("160000".to_owned());
    entry
}

#[test]
fn a_nested_repository_is_checked_as_the_folder_it_is() {
    let forbidden = |rule: &str| (ViolationClass::ForbiddenPath, rule.to_owned());
    let outside = || {
        (
            ViolationClass::OutsideAllowedPaths,
            "allowed_paths".to_owned(),
        )
    };
    let cases: Vec<GlobCase> = vec![
        // A forbidden glob that could match a file in the folder matches the folder.
        (&[], &["secret/**"], "secret", vec![forbidden("secret/**")]),
        (&[], &["secret/"], "secret", vec![forbidden("secret/**")]),
        (
            &[],
            &["secret/*.txt"],
            "secret",
            vec![forbidden("secret/*.txt")],
        ),
        (
            &[],
            &["**/*.pem"],
            "vendor/lib",
            vec![forbidden("**/*.pem")],
        ),
        (
            &[],
            &[".github/**"],
            ".github/actions",
            vec![forbidden(".github/**")],
        ),
        (
            &[],
            &["{docs,secret}/**"],
            "secret",
            vec![forbidden("{docs,secret}/**")],
        ),
        (&[], &["secret"], "secret", vec![forbidden("secret")]),
        (&[], &["other/**", "*.pem"], "secret", vec![]),
        (&[], &["secret/**"], "secretive", vec![]),
        // Allowed globs must cover everything in the folder.
        (&["**"], &[], "secret", vec![]),
        (&["src/**"], &[], "src/vendor/lib", vec![]),
        (&["src/"], &[], "src/vendor", vec![]),
        (&["src/**"], &[], "secret", vec![outside()]),
        (&["secret"], &[], "secret", vec![outside()]),
        (&["secret/*.rs"], &[], "secret", vec![outside()]),
        (
            &["src/**"],
            &["secret/**"],
            "secret",
            vec![forbidden("secret/**"), outside()],
        ),
    ];
    for (allowed, forbidden_globs, path, expected) in cases {
        let compiled = policy(allowed, forbidden_globs, &[]);
        assert_eq!(
            verdicts(&compiled, vec![gitlink(path)]),
            expected,
            "allowed {allowed:?} forbidden {forbidden_globs:?} gitlink {path}"
        );
        // A removed nested repository is a folder as well.
        let removed = {
            let mut entry = gitlink(path);
            entry.old_mode = Some("160000".to_owned());
            entry.new_mode = None;
            entry.kind = ChangeKind::Delete;
            entry
        };
        assert_eq!(
            verdicts(&compiled, vec![removed]),
            expected,
            "removed gitlink {path}"
        );
    }
    // `modify_ci` sees a nested repository under a CI folder.
    assert_eq!(
        verdicts(
            &policy(&[], &[], &["modify_ci"]),
            vec![gitlink(".github/actions")]
        ),
        one(ViolationClass::ForbiddenOperation, "modify_ci")
    );
    // A file (not a gitlink) named like the folder is matched as a file.
    assert_eq!(
        verdicts(
            &policy(&[], &["secret/**"], &[]),
            vec![file("secret", ChangeKind::Add)]
        ),
        vec![]
    );
}

/// Runs `unsafe.yaml` with the step policy `policy` (YAML flow map) and an agent running the
/// shell `script` in the worktree, in a repository prepared by `prepare`; returns the exit
/// code and the step's `policy_summary.json` findings as (class, path, rule), and the summary.
pub(crate) fn run_with_agent(
    prepare: impl FnOnce(&crate::support::TempRepo),
    policy: &str,
    script: &str,
) -> (
    Option<i32>,
    Vec<(String, String, String)>,
    serde_json::Value,
) {
    let repo = crate::kernel_support::RunRepo::new();
    prepare(&repo.repo);
    repo.repo.write(
        ".tnh/config.yaml",
        &format!("agents:\n  agent:\n    kind: command\n    argv: [sh, -c, {script:?}]\n"),
    );
    let text = std::fs::read_to_string(crate::support::fixture("runs/unsafe.yaml"))
        .unwrap()
        .replace("agent: scripted", "agent: agent")
        .replace(
            "  policy:\n    forbidden_paths: [\".github/**\"]",
            &format!("  policy: {policy}"),
        );
    assert!(text.contains(policy), "{text}");
    let workflow = repo.workflow_text("policy.yaml", &text);
    let home = tempfile::tempdir().unwrap();
    let output = crate::support::conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["--color", "never", "run", "--json"])
        .arg(&workflow)
        .env("HOME", home.path())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("GIT_CONFIG_GLOBAL")
        .output()
        .unwrap();
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
        panic!("no result: {}", crate::support::stderr_text(&output));
    });
    let summary = repo.json(
        result["run_id"].as_str().unwrap(),
        "artifacts/implement/1/policy_summary.json",
    );
    let text = |value: &serde_json::Value| value.as_str().unwrap_or_default().to_owned();
    let found = summary["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|violation| {
            (
                text(&violation["class"]),
                text(&violation["path"]),
                text(&violation["rule"]),
            )
        })
        .collect();
    (output.status.code(), found, summary)
}

fn finding(class: &str, path: &str, rule: &str) -> (String, String, String) {
    (class.to_owned(), path.to_owned(), rule.to_owned())
}

#[test]
fn an_agent_chaining_relative_symlinks_out_of_the_worktree_is_a_path_escape() {
    // The security review's chain: each link is inside on its own, `op` lands in the
    // operator's checkout.
    let script = "cat >/dev/null; RUN=$(basename \"$PWD\"); mkdir d && ln -s .. d/b \
                  && ln -s d/b/.. w && ln -s \"w/$RUN/w/..\" t \
                  && ln -s \"t/worktrees/$RUN/t/..\" op && test -f op/.tnh/config.yaml";
    let (code, found, summary) = run_with_agent(|_| {}, r#"{allowed_paths: ["**"]}"#, script);
    assert_ne!(code, Some(0), "{summary}");
    assert_eq!(summary["verdict"], "violation", "{summary}");
    assert_eq!(
        found,
        vec![
            finding("path_escape", "op", "symlink_target"),
            finding("path_escape", "t", "symlink_target"),
            finding("path_escape", "w", "symlink_target"),
        ],
        "{summary}"
    );
}

#[test]
fn a_new_symlink_through_an_existing_one_is_resolved_on_disk() {
    // `d/b -> ..` is in the base commit, so the step's change does not list it: only the
    // worktree on disk tells that `w -> d/b/..` climbs out, while `ok -> d/b/src` stays in.
    let prepare = |repo: &crate::support::TempRepo| {
        std::fs::create_dir_all(repo.path().join("d")).unwrap();
        std::os::unix::fs::symlink("..", repo.path().join("d/b")).unwrap();
        repo.write("src/lib.rs", "pub fn a() {}\n");
        repo.git(&["add", "d", "src"]);
        repo.git(&["commit", "-q", "-m", "a link to the root"]);
    };
    let script = "cat >/dev/null; ln -s d/b/.. w && ln -s d/b/src ok";
    let (code, found, summary) = run_with_agent(prepare, r#"{allowed_paths: ["**"]}"#, script);
    assert_ne!(code, Some(0), "{summary}");
    assert_eq!(
        found,
        vec![finding("path_escape", "w", "symlink_target")],
        "{summary}"
    );
}

#[test]
fn a_nested_repository_in_a_forbidden_or_unallowed_folder_is_a_violation() {
    let commit = |dir: &str| {
        format!(
            "git init -q {dir} && echo token > {dir}/data.txt && git -C {dir} add -A \
             && git -C {dir} -c user.name=a -c user.email=a@b commit -qm x"
        )
    };
    let script = format!(
        "cat >/dev/null; {} && {} && {}",
        commit("secret"),
        commit("src/vendored"),
        commit("other")
    );
    let (code, found, summary) = run_with_agent(
        |_| {},
        r#"{forbidden_paths: ["secret/**"], allowed_paths: ["src/**", "secret/*.md"]}"#,
        &script,
    );
    assert_ne!(code, Some(0), "{summary}");
    assert_eq!(
        found,
        vec![
            finding("outside_allowed_paths", "other", "allowed_paths"),
            finding("forbidden_path", "secret", "secret/**"),
            finding("outside_allowed_paths", "secret", "allowed_paths"),
        ],
        "{summary}"
    );
}

/// A new binary file that git paired with a deleted text file (a rename
/// with `binary: true`) was not counted as an added binary file, so `add_binary_files` let it
/// in. A rename is a new path: with binary content it is one; a text rename is not.
#[test]
fn a_binary_file_git_pairs_with_a_deleted_text_file_is_an_added_binary_file() {
    let mut binary_by_rename = file("src/payload.bin", ChangeKind::Rename);
    binary_by_rename.old_path = Some("src/data.txt".to_owned());
    binary_by_rename.binary = true;
    let mut text_renamed = file("src/new.rs", ChangeKind::Rename);
    text_renamed.old_path = Some("src/old.rs".to_owned());
    let forbidding = policy(&[], &[], &["add_binary_files"]);
    assert_eq!(
        verdicts(&forbidding, vec![binary_by_rename]),
        one(ViolationClass::ForbiddenOperation, "add_binary_files")
    );
    assert_eq!(verdicts(&forbidding, vec![text_renamed]), vec![]);
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
