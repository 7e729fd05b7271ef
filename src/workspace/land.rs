//! Bringing a run's result commit into one of the operator's branches (`land`), and pushing
//! the run's branch. Everything is worked out first — the branch's tip, the checkout that has
//! it checked out and whether its tracked files are clean, the merge computed in memory
//! (`git merge-tree --write-tree`, no index or file touched) — and only then are the files and
//! index of that checkout (`git read-tree -m -u`, as `git merge` updates them) and the branch
//! written, so a refusal changes nothing.

use std::path::{Path, PathBuf};

use super::error::WorkspaceError;
use super::git::Git;
use super::result_commit::CommitIdentity;

/// How the result is brought into the branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LandMode {
    /// A fast-forward when the branch has not moved since the run started, else a merge
    /// commit (as `git merge` does).
    Auto,
    /// A fast-forward, or a refusal.
    FfOnly,
    /// Always a merge commit.
    Merge,
    /// One new commit on the branch with the run's message.
    Squash,
}

/// What a landing did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Landed {
    /// The branch (without `refs/heads/`).
    pub branch: String,
    /// `fast-forward`, `merge` or `squash`.
    pub mode: &'static str,
    /// The branch's tip before.
    pub before: String,
    /// Its tip now.
    pub after: String,
    /// The checkout whose files and index were brought along, when the branch is checked out.
    pub checkout: Option<PathBuf>,
}

/// Why a landing was refused; nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The branch does not exist.
    NoBranch,
    /// The checkout that has the branch checked out has uncommitted changes to tracked files.
    Dirty {
        /// That checkout.
        checkout: PathBuf,
        /// The changed files.
        files: Vec<String>,
    },
    /// The run's change conflicts with what the branch gained since the run started.
    Conflict {
        /// The conflicting files.
        files: Vec<String>,
    },
    /// `--ff-only`, and the branch moved since the run started.
    NotFastForward,
    /// The branch already holds the run's commit.
    AlreadyContained,
    /// Files the landing would write stand untracked in the checkout.
    InTheWay {
        /// That checkout.
        checkout: PathBuf,
        /// What git said.
        detail: String,
    },
}

/// What to land where.
#[derive(Debug, Clone, Copy)]
pub struct LandRequest<'a> {
    /// The operator's repository.
    pub repo_root: &'a Path,
    /// The branch to land into (without `refs/heads/`).
    pub branch: &'a str,
    /// The run's result commit.
    pub result: &'a str,
    /// The run (its commits' `Tnh-Run:` trailer).
    pub run_id: &'a str,
    /// How.
    pub mode: LandMode,
    /// The message of a squash commit (the run's own).
    pub squash_message: &'a str,
    /// The message of a merge commit.
    pub merge_message: &'a str,
}

/// Lands `request.result` into `request.branch`, or says why not (having changed nothing).
pub fn land(request: &LandRequest<'_>) -> Result<Result<Landed, Refusal>, WorkspaceError> {
    let git = Git::new(request.repo_root);
    let branch_ref = format!("refs/heads/{}", request.branch);
    let verify = format!("{branch_ref}^{{commit}}");
    if !git.succeeds(["rev-parse", "--verify", "--quiet", verify.as_str()])? {
        return Ok(Err(Refusal::NoBranch));
    }
    let tip = git.text(["rev-parse", verify.as_str()])?;
    if is_ancestor(&git, request.result, &tip)? || names_run(&git, request, &tip)? {
        return Ok(Err(Refusal::AlreadyContained));
    }
    let checkout = checkout_of(&git, &branch_ref)?;
    if let Some(checkout) = &checkout {
        let files = uncommitted_tracked(checkout)?;
        if !files.is_empty() {
            return Ok(Err(Refusal::Dirty {
                checkout: checkout.clone(),
                files,
            }));
        }
    }
    let fast_forward = is_ancestor(&git, &tip, request.result)?;
    let (mode, after) = match (request.mode, fast_forward) {
        (LandMode::Auto | LandMode::FfOnly, true) => ("fast-forward", request.result.to_owned()),
        (LandMode::FfOnly, false) => return Ok(Err(Refusal::NotFastForward)),
        (LandMode::Auto | LandMode::Merge, _) => {
            let tree = match merged_tree(&git, &tip, request.result)? {
                Ok(tree) => tree,
                Err(files) => return Ok(Err(Refusal::Conflict { files })),
            };
            let parents = [tip.as_str(), request.result];
            let commit = write_commit(request, &tree, &parents, request.merge_message)?;
            ("merge", commit)
        }
        (LandMode::Squash, _) => {
            let tree = match merged_tree(&git, &tip, request.result)? {
                Ok(tree) => tree,
                Err(files) => return Ok(Err(Refusal::Conflict { files })),
            };
            let commit = write_commit(request, &tree, &[tip.as_str()], request.squash_message)?;
            ("squash", commit)
        }
    };
    if let Some(checkout) = &checkout {
        // `read-tree -m -u` checks everything before it writes anything: a file in the way
        // leaves the index and the files as they were.
        let checkout_git = Git::new(checkout);
        let updated =
            checkout_git.output(["read-tree", "-m", "-u", tip.as_str(), after.as_str()])?;
        if !updated.status.success() {
            return Ok(Err(Refusal::InTheWay {
                checkout: checkout.clone(),
                detail: String::from_utf8_lossy(&updated.stderr).trim().to_owned(),
            }));
        }
    }
    let reason = format!("tnh land: {mode}");
    git.run([
        "update-ref",
        "-m",
        reason.as_str(),
        branch_ref.as_str(),
        after.as_str(),
        tip.as_str(),
    ])?;
    Ok(Ok(Landed {
        branch: request.branch.to_owned(),
        mode,
        before: tip,
        after,
        checkout,
    }))
}

/// Whether a commit the branch gained since the run's base names the run (`Tnh-Run:`): a
/// squash or merge of it, made by a `land` that died before recording it.
fn names_run(git: &Git, request: &LandRequest<'_>, tip: &str) -> Result<bool, WorkspaceError> {
    let range = format!("{}^..{tip}", request.result);
    let grep = format!(
        "--grep=^{}$",
        super::result_commit::run_trailer(request.run_id)
    );
    let found = git.text(["rev-list", "-1", grep.as_str(), range.as_str()])?;
    Ok(!found.is_empty())
}

/// Whether `ancestor` is an ancestor of (or the same commit as) `descendant`.
fn is_ancestor(git: &Git, ancestor: &str, descendant: &str) -> Result<bool, WorkspaceError> {
    let output = git.output(["merge-base", "--is-ancestor", ancestor, descendant])?;
    match output.status.code() {
        Some(0) => Ok(true),
        Some(1) => Ok(false),
        _ => Err(WorkspaceError::Git {
            command: format!("merge-base --is-ancestor {ancestor} {descendant}"),
            dir: PathBuf::new(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        }),
    }
}

/// The tree of `ours` merged with `theirs`, computed without touching any index or file, or
/// the files that conflict.
fn merged_tree(
    git: &Git,
    ours: &str,
    theirs: &str,
) -> Result<Result<String, Vec<String>>, WorkspaceError> {
    let args = [
        "merge-tree",
        "--write-tree",
        "--name-only",
        "--no-messages",
        ours,
        theirs,
    ];
    let output = git.output(args)?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let mut lines = text.lines();
    let tree = lines.next().unwrap_or_default().trim().to_owned();
    match output.status.code() {
        Some(0) => Ok(Ok(tree)),
        Some(1) => {
            let mut files: Vec<String> = lines
                .take_while(|line| !line.is_empty())
                .map(str::to_owned)
                .collect();
            files.dedup();
            Ok(Err(files))
        }
        _ => Err(WorkspaceError::Git {
            command: args.join(" "),
            dir: PathBuf::new(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        }),
    }
}

/// Writes a commit of `tree` with `parents` by the operator's identity (or the fallback one).
fn write_commit(
    request: &LandRequest<'_>,
    tree: &str,
    parents: &[&str],
    message: &str,
) -> Result<String, WorkspaceError> {
    let git_error = |error: git2::Error| WorkspaceError::Git {
        command: "land commit (libgit2)".to_owned(),
        dir: request.repo_root.to_owned(),
        stderr: error.message().to_owned(),
    };
    let repository = git2::Repository::open(request.repo_root).map_err(git_error)?;
    let author = CommitIdentity::of(request.repo_root, "GIT_AUTHOR_IDENT");
    let committer = CommitIdentity::of(request.repo_root, "GIT_COMMITTER_IDENT");
    let tree = repository
        .find_tree(git2::Oid::from_str(tree).map_err(git_error)?)
        .map_err(git_error)?;
    let mut commits = Vec::new();
    for parent in parents {
        let oid = git2::Oid::from_str(parent).map_err(git_error)?;
        commits.push(repository.find_commit(oid).map_err(git_error)?);
    }
    let parents: Vec<&git2::Commit<'_>> = commits.iter().collect();
    let commit = repository
        .commit(
            None,
            &author.signature().map_err(git_error)?,
            &committer.signature().map_err(git_error)?,
            message,
            &tree,
            &parents,
        )
        .map_err(git_error)?;
    Ok(commit.to_string())
}

/// The checkout (the main one or a linked worktree) that has `branch_ref` checked out.
fn checkout_of(git: &Git, branch_ref: &str) -> Result<Option<PathBuf>, WorkspaceError> {
    let listing = git.bytes(["worktree", "list", "--porcelain", "-z"])?;
    let mut path: Option<PathBuf> = None;
    for field in listing.split(|byte| *byte == 0) {
        let field = String::from_utf8_lossy(field);
        if let Some(worktree) = field.strip_prefix("worktree ") {
            path = Some(PathBuf::from(worktree));
        } else if field.strip_prefix("branch ") == Some(branch_ref) {
            return Ok(path);
        }
    }
    Ok(None)
}

/// Tracked files of `checkout` that differ from its HEAD (staged or not).
fn uncommitted_tracked(checkout: &Path) -> Result<Vec<String>, WorkspaceError> {
    let git = Git::new(checkout);
    // `--no-optional-locks`: a status that refreshed the index would write it.
    let status = git.bytes([
        "--no-optional-locks",
        "status",
        "--porcelain=v1",
        "-z",
        "--untracked-files=no",
        "--ignore-submodules=dirty",
    ])?;
    let mut files = Vec::new();
    let mut entries = status
        .split(|byte| *byte == 0)
        .filter(|entry| !entry.is_empty());
    while let Some(entry) = entries.next() {
        let text = String::from_utf8_lossy(entry);
        if let Some(path) = text.get(3..) {
            files.push(path.to_owned());
        }
        // A rename or copy is followed by its source path.
        if matches!(entry.first(), Some(b'R' | b'C')) {
            entries.next();
        }
    }
    Ok(files)
}

/// `git push REMOTE COMMIT:refs/heads/BRANCH`: the run's commit as its branch on the remote.
pub fn push(
    repo_root: &Path,
    remote: &str,
    commit: &str,
    branch: &str,
) -> Result<(), WorkspaceError> {
    let refspec = format!("{commit}:refs/heads/{branch}");
    Git::new(repo_root).run(["push", "--quiet", remote, refspec.as_str()])
}
