//! Errors of the workspace module: each says what failed and where, with a hint for the operator.

use std::path::{Path, PathBuf};

/// A workspace operation failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// The `git` executable could not be found.
    #[error("failed to run git: `git` is not installed or not on PATH")]
    GitNotInstalled,
    /// A git command exited non-zero.
    #[error("git {command} failed in `{dir}`: {stderr}")]
    Git {
        /// The arguments after `git`.
        command: String,
        /// Where git ran.
        dir: PathBuf,
        /// What git said.
        stderr: String,
    },
    /// A git command ran past the limit (`TNH_GIT_TIMEOUT`) and was killed.
    #[error(
        "git {command} did not finish within {limit} in `{dir}` and was killed (with every process it started)"
    )]
    GitTimedOut {
        /// The arguments after `git`.
        command: String,
        /// Where git ran.
        dir: PathBuf,
        /// The limit, as the operator would write it.
        limit: String,
    },
    /// `TNH_GIT_TIMEOUT` is not a duration.
    #[error("TNH_GIT_TIMEOUT: {0}")]
    InvalidGitTimeout(crate::workflow::duration::DurationError),
    /// A file operation failed.
    #[error("failed to {action} `{path}`: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path concerned.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The repository is in a format libgit2 cannot read (a reftable repository, a newer
    /// repository version).
    #[error("`{path}`: this repository's format is not supported ({detail})")]
    UnsupportedRepository {
        /// Where the repository was looked for.
        path: PathBuf,
        /// What libgit2 said.
        detail: String,
    },
    /// The directory is not inside a git repository.
    #[error("`{0}` is not inside a git repository")]
    NotARepository(PathBuf),
    /// Worktrees need a working directory to start from.
    #[error("`{0}` is a bare repository")]
    BareRepository(PathBuf),
    /// A linked worktree of a repository whose git folder is kept apart from its main working
    /// tree (`git init --separate-git-dir`) without `core.worktree` naming that tree.
    #[error(
        "the main working tree of the repository in `{0}` is unknown: that git folder is kept apart from its checkout and sets no `core.worktree`"
    )]
    NoMainWorkingTree(PathBuf),
    /// There is no commit to branch from.
    #[error("repository `{0}` has no commits")]
    NoCommits(PathBuf),
    /// The base ref names no commit.
    #[error("base ref `{base_ref}` does not resolve to a commit in `{repo}`")]
    UnresolvableBase {
        /// The ref as given.
        base_ref: String,
        /// The repository.
        repo: PathBuf,
    },
    /// The work branch of this run exists already.
    #[error("work branch `{0}` already exists")]
    BranchExists(String),
    /// The worktree directory exists already.
    #[error("worktree directory `{0}` already exists")]
    WorktreeExists(PathBuf),
    /// A recorded workspace is gone or no longer matches its record.
    #[error("workspace at `{path}` cannot be reopened: {reason}")]
    Missing {
        /// The worktree path from the record.
        path: PathBuf,
        /// What is missing.
        reason: String,
    },
    /// An id would make an invalid git ref name.
    #[error("`{0}` cannot be used in a git ref name")]
    InvalidRefName(String),
    /// The requested snapshot does not exist.
    #[error("run `{run_id}` has no `{target}` snapshot")]
    NoSnapshot {
        /// The run.
        run_id: String,
        /// `pre_run` or `pre_step`.
        target: String,
    },
    /// Git printed something this module could not parse.
    #[error("unexpected output from git {command}: {detail}")]
    Parse {
        /// The git command.
        command: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// A configured protected-branch name is not a valid glob.
    #[error("invalid protected branch pattern `{pattern}`: {reason}")]
    InvalidProtectedBranch {
        /// The pattern.
        pattern: String,
        /// Why it is invalid.
        reason: String,
    },
    /// A saved guard state in a format this release does not know.
    #[error("guard_state.json has schema_version {version}, which this release cannot read")]
    UnknownGuardState {
        /// The version found.
        version: u32,
    },
    /// The run's work branch is gone (deleted while the run was stopped): the run cannot
    /// continue until it is restored.
    #[error(
        "the work branch `{branch}` of run `{run_id}` is gone (deleted), so the run cannot continue"
    )]
    BranchGone {
        /// The run.
        run_id: String,
        /// The work branch.
        branch: String,
        /// The operator's repository.
        repo: PathBuf,
        /// The last commit the worktree's HEAD log recorded, if it has one.
        last_head: Option<String>,
    },
    /// A run's `pre_run` ref no longer names the commit the run started from: rolling back to
    /// it would land on whatever was put there.
    #[error(
        "run `{run_id}`: its `pre_run` snapshot `{reference}` names commit {found}, not the base {expected} the run started from"
    )]
    SnapshotMoved {
        /// The run.
        run_id: String,
        /// The full ref.
        reference: String,
        /// The commit it names now.
        found: String,
        /// The run's recorded base (`base_sha`).
        expected: String,
    },
    /// Something else than a regular file stands where the repository's worktree lock
    /// (`.git/tnh-worktrees.lock`) should be (a FIFO, a link or a folder an agent put there):
    /// it is never opened through nor waited on.
    #[error(
        "the worktree lock `{path}` is {what}, not a regular file: the conductor does not open it"
    )]
    WorktreeLockNotAFile {
        /// The lock file.
        path: PathBuf,
        /// What stands there.
        what: String,
    },
    /// The repository's worktree lock is held by a process that is not a `tnh-conductor`
    /// (a conductor holds it only while git adds or removes a worktree).
    #[error("the worktree lock `{path}` is held by process {pid}{}", held_by(program.as_deref()))]
    WorktreeLockHeld {
        /// The lock file.
        path: PathBuf,
        /// The process the kernel's table of locks names.
        pid: u32,
        /// Its program; `None` when it has ended (a process it started inherited the file).
        program: Option<String>,
    },
    /// The operator stopped the command (Ctrl-C, SIGTERM) while it waited for the
    /// repository's worktree lock.
    #[error(
        "stopped ({cause}) while waiting for the worktree lock `{path}`{}",
        pid.map(|pid| format!(", held by process {pid}")).unwrap_or_default()
    )]
    WorktreeLockInterrupted {
        /// The lock file.
        path: PathBuf,
        /// What stopped it.
        cause: String,
        /// The holder the kernel's table of locks named, when it did.
        pid: Option<u32>,
    },
    /// A run directory or its metadata is missing or malformed.
    #[error("run `{run_id}`: {reason}")]
    Run {
        /// The run.
        run_id: String,
        /// What is wrong.
        reason: String,
    },
}

/// What holds the worktree lock, after its pid.
fn held_by(program: Option<&str>) -> String {
    match program {
        Some(program) => format!(" (`{program}`), which is not a tnh-conductor"),
        None => ", which has ended: a process it started still has the file open".to_owned(),
    }
}

impl WorkspaceError {
    /// True when git failed because it was refused access to a path in the worktree.
    pub(crate) fn is_access_denied(&self) -> bool {
        matches!(self, WorkspaceError::Git { stderr, .. } if super::access::access_denied(stderr))
    }

    /// The exit status a command ends with: 2 when the request itself cannot be met (no
    /// repository, unknown run or snapshot), 4 when git or the file system failed.
    pub fn exit_status(&self) -> crate::exit::ExitStatus {
        use crate::exit::ExitStatus;
        match self {
            WorkspaceError::NotARepository(_)
            | WorkspaceError::UnsupportedRepository { .. }
            | WorkspaceError::BareRepository(_)
            | WorkspaceError::NoMainWorkingTree(_)
            | WorkspaceError::NoCommits(_)
            | WorkspaceError::UnresolvableBase { .. }
            | WorkspaceError::BranchExists(_)
            | WorkspaceError::WorktreeExists(_)
            | WorkspaceError::InvalidRefName(_)
            | WorkspaceError::NoSnapshot { .. }
            | WorkspaceError::InvalidProtectedBranch { .. }
            | WorkspaceError::BranchGone { .. }
            | WorkspaceError::SnapshotMoved { .. }
            | WorkspaceError::WorktreeLockNotAFile { .. }
            | WorkspaceError::WorktreeLockHeld { .. }
            | WorkspaceError::Run { .. } => ExitStatus::Usage,
            WorkspaceError::WorktreeLockInterrupted { .. } => ExitStatus::Interrupted,
            WorkspaceError::InvalidGitTimeout(_) => ExitStatus::Usage,
            WorkspaceError::GitNotInstalled
            | WorkspaceError::Git { .. }
            | WorkspaceError::GitTimedOut { .. }
            | WorkspaceError::Io { .. }
            | WorkspaceError::Missing { .. }
            | WorkspaceError::UnknownGuardState { .. }
            | WorkspaceError::Parse { .. } => ExitStatus::Runtime,
        }
    }

    /// What the operator can do about the error.
    pub fn hint(&self) -> Option<String> {
        if let WorkspaceError::BranchGone {
            run_id,
            branch,
            repo,
            last_head,
        } = self
        {
            let at = last_head.as_deref().unwrap_or("COMMIT");
            let which = if last_head.is_some() {
                "the last commit the worktree's HEAD log recorded; the run's state.json has the checkpoint's as `fingerprint.head`"
            } else {
                "COMMIT: the `fingerprint.head` in the run's state.json"
            };
            return Some(format!(
                "nothing was changed; restore the branch where the run left it: `git -C {} branch {branch} {at}` ({which}), then decide or resume again; the run's snapshots stay under `refs/tnh/runs/{run_id}/` (`pre_run`, `pre_step/…`), and `tnh-conductor rollback {run_id} --target pre_step` recreates the branch at the last one instead (the last agent step's work goes)",
                repo.display()
            ));
        }
        if let WorkspaceError::SnapshotMoved {
            reference,
            found,
            expected,
            ..
        } = self
        {
            return Some(format!(
                "nothing was changed; the ref was moved after the run started (an agent of another run can write it): look at `git log -1 {found}`, and if the base is right put the ref back with `git update-ref {reference} {expected}`, then roll back again"
            ));
        }
        match self {
            WorkspaceError::WorktreeLockNotAFile { path, what } => {
                return Some(format!(
                    "nothing was changed; something replaced the lock under which runs add and remove their worktrees (an agent runs as you and can write `.git`): once no tnh-conductor is creating or removing a worktree, remove it (`rm {}{}`) and try again; the next command creates it afresh",
                    if what == "a folder" { "-r " } else { "" },
                    path.display()
                ));
            }
            WorkspaceError::WorktreeLockHeld { path, pid, program } => {
                let stop = if program.is_some() {
                    format!(
                        "stop it (`kill {pid}`; `fuser -v {}` lists every process that has the file open)",
                        path.display()
                    )
                } else {
                    format!(
                        "stop the process that has the file open (`fuser -v {}` lists them)",
                        path.display()
                    )
                };
                return Some(format!(
                    "nothing was changed; a process holding that lock (an agent's leftover, say) keeps every run from adding or removing a worktree: {stop} and try again"
                ));
            }
            WorkspaceError::WorktreeLockInterrupted { .. } => {
                return Some(
                    "nothing was changed in the repository; try again once the other run has created or removed its worktree (`tnh-conductor runs list`)".to_owned(),
                );
            }
            _ => {}
        }
        let hint = match self {
            WorkspaceError::GitNotInstalled => {
                "install git (2.30 or later) and make sure it is on PATH"
            }
            WorkspaceError::Git { .. } => {
                "run the same git command by hand in that directory to see the problem"
            }
            WorkspaceError::GitTimedOut { .. } => {
                "git was most likely waiting on a FIFO or a hung network file system named in its configuration (`git config --show-origin --list` in that directory shows which files it reads, `~/.gitconfig` and `core.excludesFile` included); fix that and resume the run, or raise the limit with TNH_GIT_TIMEOUT (say `30m`) for a very large repository"
            }
            WorkspaceError::InvalidGitTimeout(_) => {
                "set TNH_GIT_TIMEOUT to a duration such as `90s`, `20m` or `1h`, or unset it for the default of 10 minutes"
            }
            WorkspaceError::Io { .. } => "check that the path exists and is writable",
            WorkspaceError::NotARepository(_) => "run inside a git repository or pass `--repo DIR`",
            WorkspaceError::UnsupportedRepository { .. } => {
                "tnh-conductor reads repositories with libgit2, which does not know this format; \
                 clone a reftable repository into the files format \
                 (`git clone --ref-format=files SRC DEST`) and run there"
            }
            WorkspaceError::BareRepository(_) => {
                "a bare repository has no working tree for `.tnh/` and the runs' worktrees; use a clone with a working directory"
            }
            WorkspaceError::NoMainWorkingTree(_) => {
                "run from the repository's main checkout (where `HEAD` of that git folder is checked out)"
            }
            WorkspaceError::NoCommits(_) => {
                "commit something first: the run's branch starts from a commit"
            }
            WorkspaceError::UnresolvableBase { .. } => {
                "pass `--base` a branch, tag or commit that exists (`git rev-parse REF`)"
            }
            WorkspaceError::BranchExists(_) => {
                "a run with this id already exists; start a new run or delete the branch"
            }
            WorkspaceError::WorktreeExists(_) => "remove the stale directory or start a new run",
            WorkspaceError::Missing { .. } => {
                "the worktree may have been removed (`runs clean`) or deleted; `resume` and `rollback` check its work branch out there again while the branch exists"
            }
            WorkspaceError::InvalidRefName(_) => {
                "use ids made of letters, digits, `-`, `_` and `.`"
            }
            WorkspaceError::NoSnapshot { .. } => "roll back to `pre_run`, which every run has",
            WorkspaceError::Parse { .. } => "report this as a bug together with `git --version`",
            WorkspaceError::InvalidProtectedBranch { .. } => {
                "fix `protected_branches` in `.tnh/config.yaml`"
            }
            WorkspaceError::Run { .. } => "list runs with `tnh-conductor runs list`",
            WorkspaceError::UnknownGuardState { .. } => {
                "resume the run with the release that started it"
            }
            WorkspaceError::BranchGone { .. }
            | WorkspaceError::SnapshotMoved { .. }
            | WorkspaceError::WorktreeLockNotAFile { .. }
            | WorkspaceError::WorktreeLockHeld { .. }
            | WorkspaceError::WorktreeLockInterrupted { .. } => {
                return None;
            }
        };
        Some(hint.to_owned())
    }

    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        WorkspaceError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}

/// The repository containing `start`, opened with libgit2. A directory outside any repository
/// and a repository libgit2 cannot read are told apart.
///
/// Opened where it is found, not through the git folder found: a checkout whose `.git` is a
/// file naming its git folder (`git init --separate-git-dir`) keeps that checkout as its
/// working directory; `git2::Repository::discover` would open the git folder and take its
/// parent folder for the working directory.
pub(crate) fn discover(start: &Path) -> Result<git2::Repository, WorkspaceError> {
    git2::Repository::open_ext(
        start,
        git2::RepositoryOpenFlags::CROSS_FS,
        std::iter::empty::<&std::ffi::OsStr>(),
    )
    .map_err(|error| open_error(start, error))
}

/// What libgit2 failing to open a repository at (or above) `path` means: a format it cannot
/// read, else no repository there.
pub(crate) fn open_error(path: &Path, error: git2::Error) -> WorkspaceError {
    let unsupported =
        error.class() == git2::ErrorClass::Repository && error.message().contains("unsupported");
    if unsupported {
        WorkspaceError::UnsupportedRepository {
            path: path.to_owned(),
            detail: error.message().to_owned(),
        }
    } else {
        WorkspaceError::NotARepository(path.to_owned())
    }
}
