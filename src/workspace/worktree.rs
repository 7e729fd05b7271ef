//! The managed worktree of a run: creating it from a base ref on its own branch, the record the
//! kernel keeps in `metadata.json`/`state.json`, and reopening it from that record on resume.
//!
//! The operator's checkout is never written: creation only adds `.git/worktrees/<run_id>/`,
//! the work branch, the `pre_run` ref and one line in `.git/info/exclude`.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::WorkspaceError;
use super::git::Git;
use super::snapshot::refs_prefix;
use crate::ids::{RunId, WorkflowId};

/// Where a run's workspace is, as stored in the run's metadata: enough to reopen it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WorkspaceRecord {
    /// The run this workspace belongs to.
    #[schemars(with = "String")]
    pub run_id: RunId,
    /// The operator's repository (its main working directory).
    pub repo_root: PathBuf,
    /// `<repo_root>/.tnh/worktrees/<run_id>`.
    pub worktree_path: PathBuf,
    /// The work branch, `tnh/<workflow_id>/<run_id>` (without `refs/heads/`).
    pub branch: String,
    /// The base ref as the operator gave it (`HEAD` by default).
    pub base_ref: String,
    /// The commit the base ref resolved to when the run started.
    pub base_sha: String,
}

/// A run's managed git worktree.
#[derive(Debug, Clone)]
pub struct Workspace {
    record: WorkspaceRecord,
    /// git in the worktree.
    pub(crate) git: Git,
    /// git in the operator's repository root (for refs only; it never touches files there).
    pub(crate) repo_git: Git,
    /// The worktree's private git dir (`.git/worktrees/<name>`), where the scratch index lives.
    pub(crate) worktree_git_dir: PathBuf,
    /// The repository's shared git dir (`.git`).
    pub(crate) common_dir: PathBuf,
    /// The `pre_run` snapshot once read (it never changes during a run).
    pub(crate) pre_run: std::sync::OnceLock<super::Snapshot>,
    /// What the last step read at its end, for the next step's start.
    pub(crate) remembered: super::remembered::Remembered,
    /// The git configuration last listed in the worktree, while its files stay the same.
    pub(crate) config_cache: super::git_config::ConfigCache,
}

/// The branch a run works on.
pub fn work_branch_name(workflow_id: &WorkflowId, run_id: &RunId) -> String {
    format!("tnh/{workflow_id}/{run_id}")
}

impl Workspace {
    /// Creates the worktree of `run_id` from `base_ref` (default `HEAD`) in the repository that
    /// contains `repo`, on a new branch `tnh/<workflow_id>/<run_id>`, and records `pre_run`.
    pub fn create(
        repo: &Path,
        run_id: &RunId,
        workflow_id: &WorkflowId,
        base_ref: Option<&str>,
    ) -> Result<Self, WorkspaceError> {
        let base_ref = base_ref.unwrap_or("HEAD");
        let branch = work_branch_name(workflow_id, run_id);
        check_ref_name(&format!("refs/heads/{branch}"), &branch)?;
        check_ref_name(&format!("{}/pre_run", refs_prefix(run_id)), run_id.as_str())?;
        let located = locate_repository(repo)?;
        let base_sha = resolve_base(&located, base_ref)?;
        let repo_git = Git::new(&located.root);
        let branch_ref = format!("refs/heads/{branch}");
        if repo_git.succeeds(["show-ref", "--verify", "--quiet", branch_ref.as_str()])? {
            return Err(WorkspaceError::BranchExists(branch));
        }
        let worktree_path = located
            .root
            .join(".tnh")
            .join("worktrees")
            .join(run_id.as_str());
        if worktree_path.exists() {
            return Err(WorkspaceError::WorktreeExists(worktree_path));
        }
        // Runs started at the same time in one repository take turns here: `git worktree add`
        // reads the other worktrees' half-created entries, and the exclude file is rewritten.
        let _turn = lock_worktrees(&located.common_dir)?;
        ensure_excluded(&located.common_dir)?;
        let path_arg = worktree_path.as_os_str().to_owned();
        repo_git.run([
            "worktree".as_ref(),
            "add".as_ref(),
            "--quiet".as_ref(),
            "--no-track".as_ref(),
            "-b".as_ref(),
            branch.as_ref(),
            path_arg.as_os_str(),
            base_sha.as_ref(),
        ])?;
        let record = WorkspaceRecord {
            run_id: run_id.clone(),
            repo_root: located.root,
            worktree_path,
            branch,
            base_ref: base_ref.to_owned(),
            base_sha,
        };
        let workspace = Self::open(&record)?;
        let pre_run = format!("{}/pre_run", refs_prefix(run_id));
        workspace
            .repo_git
            .run(["update-ref", pre_run.as_str(), record.base_sha.as_str()])?;
        Ok(workspace)
    }

    /// Reopens a workspace from its record (on resume, rollback or cleanup), checking that the
    /// worktree still exists. The worktree's repository is found from the operator's
    /// repository (the worktree entry whose `gitdir` names this folder), never from the
    /// worktree's `.git` file, which an agent can rewrite.
    pub fn open(record: &WorkspaceRecord) -> Result<Self, WorkspaceError> {
        let missing = |reason: &str| WorkspaceError::Missing {
            path: record.worktree_path.clone(),
            reason: reason.to_owned(),
        };
        if displaced(&record.worktree_path)? {
            return Err(missing(
                "something other than a folder stands at the worktree's path (a symlink?)",
            ));
        }
        if !record.worktree_path.is_dir() {
            return Err(missing("the worktree folder is gone"));
        }
        let repo_git = Git::new(&record.repo_root);
        let common_dir = common_dir_of(&repo_git, &record.repo_root)?;
        let Some(worktree_git_dir) = find_worktree_git_dir(&common_dir, &record.worktree_path)?
        else {
            return Err(missing(
                "the repository has no worktree entry for it any more (`git worktree prune`?)",
            ));
        };
        // A missing work branch is not checked here: `rollback` and the ref guard recreate it.
        Ok(Self {
            record: record.clone(),
            git: Git::in_worktree(
                &record.worktree_path,
                &worktree_git_dir,
                &common_dir,
                &record.base_sha,
            ),
            repo_git,
            worktree_git_dir,
            common_dir,
            pre_run: std::sync::OnceLock::new(),
            remembered: super::remembered::Remembered::default(),
            config_cache: super::git_config::ConfigCache::default(),
        })
    }

    /// [`open`](Self::open), but when the worktree folder is gone (an agent or a person
    /// deleted it) while its work branch is still there, the branch is checked out again at
    /// the same path first. Returns whether it had to: the files are then the branch's commit,
    /// not what the folder held (uncommitted work is lost; the run directory keeps each step's
    /// patch).
    pub fn open_or_recreate(record: &WorkspaceRecord) -> Result<(Self, bool), WorkspaceError> {
        if displaced(&record.worktree_path)? {
            // A symlink (or a file) where the folder was — an agent that replaced its worktree
            // by a link to the operator's checkout: removed, never followed, and the folder is
            // checked out again below.
            std::fs::remove_file(&record.worktree_path)
                .map_err(|source| WorkspaceError::io("remove", &record.worktree_path, source))?;
        }
        if record.worktree_path.exists() {
            return Self::open(record).map(|workspace| (workspace, false));
        }
        let repo_git = Git::new(&record.repo_root);
        let branch_ref = format!("refs/heads/{}", record.branch);
        if !repo_git.succeeds(["show-ref", "--verify", "--quiet", branch_ref.as_str()])? {
            return Err(WorkspaceError::Missing {
                path: record.worktree_path.clone(),
                reason: format!(
                    "the worktree folder and its branch `{}` are both gone",
                    record.branch
                ),
            });
        }
        let common_dir = common_dir_of(&repo_git, &record.repo_root)?;
        let _turn = lock_worktrees(&common_dir)?;
        // Git still records the deleted worktree, and refuses to check its branch out again
        // until the record is dropped.
        repo_git.run(["worktree", "prune"])?;
        let path = record.worktree_path.as_os_str().to_owned();
        repo_git.run([
            "worktree".as_ref(),
            "add".as_ref(),
            "--quiet".as_ref(),
            path.as_os_str(),
            record.branch.as_ref(),
        ])?;
        Self::open(record).map(|workspace| (workspace, true))
    }

    /// Whether the worktree folder is gone or stands displaced by something else (a symlink,
    /// a file): the guard then checks it out again before it touches anything there.
    pub(crate) fn worktree_displaced_or_gone(&self) -> Result<bool, WorkspaceError> {
        Ok(!self.path().exists() || displaced(self.path())?)
    }

    /// Puts the worktree's `.git` file back when an agent rewrote it (to point at another
    /// repository), replaced it (`rm -rf .git && git init`) or removed it. The workspace's own
    /// git commands name the repository explicitly and are not misled, but the agent's next
    /// step and the operator's tools read that file. Returns whether it had to.
    pub(crate) fn repair_git_link(&self) -> Result<bool, WorkspaceError> {
        let link = self.path().join(".git");
        let io = |action, source| WorkspaceError::io(action, &link, source);
        match std::fs::symlink_metadata(&link) {
            Ok(metadata) if metadata.is_file() => {
                let bytes = std::fs::read(&link).unwrap_or_default();
                // A relative path (`worktree.useRelativePaths`) is relative to the worktree.
                let named = bytes
                    .strip_prefix(b"gitdir: ")
                    .map(|named| self.path().join(path_from_line(named)));
                let same = |path: &Path| std::fs::canonicalize(path).ok();
                if named.is_some_and(|named| {
                    same(&named).is_some() && same(&named) == same(&self.worktree_git_dir)
                }) {
                    return Ok(false);
                }
            }
            Ok(metadata) if metadata.is_dir() => {
                std::fs::remove_dir_all(&link).map_err(|source| io("remove", source))?;
            }
            Ok(_) => std::fs::remove_file(&link).map_err(|source| io("remove", source))?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(io("inspect", source)),
        }
        let mut text = b"gitdir: ".to_vec();
        text.extend_from_slice(self.worktree_git_dir.as_os_str().as_bytes());
        text.push(b'\n');
        std::fs::write(&link, text).map_err(|source| io("write", source))?;
        Ok(true)
    }

    /// The record to store in the run's metadata.
    pub fn record(&self) -> &WorkspaceRecord {
        &self.record
    }

    /// The worktree root, where agents and validators run.
    pub fn path(&self) -> &Path {
        &self.record.worktree_path
    }

    /// The run this workspace belongs to.
    pub fn run_id(&self) -> &RunId {
        &self.record.run_id
    }

    /// `refs/heads/<branch>`.
    pub fn branch_ref(&self) -> String {
        format!("refs/heads/{}", self.record.branch)
    }

    /// Removes the worktree directory and git's administrative entry for it. The work branch
    /// and the snapshot refs stay.
    pub fn remove_worktree(record: &WorkspaceRecord) -> Result<(), WorkspaceError> {
        let repo_git = Git::new(&record.repo_root);
        // `prune` must not see another run's worktree while `git worktree add` creates it.
        let _turn = lock_worktrees(&common_dir_of(&repo_git, &record.repo_root)?)?;
        if displaced(&record.worktree_path)? {
            // A link (or a file) where the folder was: removed, never followed — git would
            // resolve a link and remove the worktree it leads to, the operator's own linked
            // worktree say, uncommitted files and all.
            std::fs::remove_file(&record.worktree_path)
                .map_err(|source| WorkspaceError::io("remove", &record.worktree_path, source))?;
        }
        if record.worktree_path.exists() {
            let path = record.worktree_path.as_os_str().to_owned();
            let remove = [
                "worktree".as_ref(),
                "remove".as_ref(),
                "--force".as_ref(),
                "--force".as_ref(),
                path.as_os_str(),
            ];
            match repo_git.run(remove) {
                // A folder an agent made unreadable or read-only cannot be emptied. Git stops
                // halfway (the worktree's `.git` file may be gone already): the owner's access
                // is given back and the removal finished here; `prune` drops git's record.
                Err(error) if error.is_access_denied() => {
                    let path = &record.worktree_path;
                    super::access::restore_owner_access(path)?;
                    std::fs::remove_dir_all(path)
                        .map_err(|source| WorkspaceError::io("remove", path, source))?;
                }
                other => other?,
            }
        }
        repo_git.run(["worktree", "prune"])
    }
}

/// A path written on one line of a file by git, as bytes (a path need not be UTF-8).
fn path_from_line(line: &[u8]) -> &Path {
    let end = line
        .iter()
        .rposition(|byte| !byte.is_ascii_whitespace())
        .map_or(0, |last| last + 1);
    Path::new(std::ffi::OsStr::from_bytes(&line[..end]))
}

/// The administrative folder (`<common>/worktrees/<name>`) of the worktree at
/// `worktree_path`: the one whose `gitdir` file names `<worktree_path>/.git`.
fn find_worktree_git_dir(
    common_dir: &Path,
    worktree_path: &Path,
) -> Result<Option<PathBuf>, WorkspaceError> {
    let worktrees = common_dir.join("worktrees");
    let entries = match std::fs::read_dir(&worktrees) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(WorkspaceError::io("list", &worktrees, source)),
    };
    let wanted = std::fs::canonicalize(worktree_path)
        .map_err(|source| WorkspaceError::io("resolve", worktree_path, source))?;
    for entry in entries {
        let entry = entry.map_err(|source| WorkspaceError::io("list", &worktrees, source))?;
        let Ok((gitdir, _)) =
            crate::artifacts::safe_files::read_regular(&entry.path().join("gitdir"), 64 * 1024)
        else {
            continue;
        };
        // A relative path (`worktree.useRelativePaths`) is relative to the entry's folder.
        let gitdir = entry.path().join(path_from_line(&gitdir));
        let names_it = gitdir.file_name() == Some(std::ffi::OsStr::new(".git"))
            && gitdir
                .parent()
                .and_then(|parent| std::fs::canonicalize(parent).ok())
                .is_some_and(|parent| parent == wanted);
        if names_it {
            return Ok(Some(entry.path()));
        }
    }
    Ok(None)
}

/// The repository a path belongs to.
struct LocatedRepository {
    root: PathBuf,
    common_dir: PathBuf,
}

fn locate_repository(path: &Path) -> Result<LocatedRepository, WorkspaceError> {
    let repository = super::error::discover(path)?;
    // The main working directory, also when `path` is inside a linked worktree.
    let root = super::runs::main_working_tree(&repository)?;
    let has_refs = repository
        .references()
        .is_ok_and(|mut references| references.next().is_some());
    if repository.head().is_err() && !has_refs {
        return Err(WorkspaceError::NoCommits(root));
    }
    Ok(LocatedRepository {
        // Not `root/.git`: a submodule's or a `--separate-git-dir` checkout's `.git` is a file
        // naming the git folder.
        common_dir: repository.commondir().to_owned(),
        root,
    })
}

/// The common git folder of the repository whose main working tree is `repo_root`, as git
/// names it from there.
fn common_dir_of(repo_git: &Git, repo_root: &Path) -> Result<PathBuf, WorkspaceError> {
    Ok(repo_root.join(repo_git.text(["rev-parse", "--git-common-dir"])?))
}

fn resolve_base(located: &LocatedRepository, base_ref: &str) -> Result<String, WorkspaceError> {
    let unresolvable = || WorkspaceError::UnresolvableBase {
        base_ref: base_ref.to_owned(),
        repo: located.root.clone(),
    };
    if base_ref.starts_with('-') {
        return Err(unresolvable());
    }
    let peeled = format!("{base_ref}^{{commit}}");
    let output =
        Git::new(&located.root).text(["rev-parse", "--verify", "--quiet", peeled.as_str()]);
    match output {
        Ok(sha) if !sha.is_empty() => Ok(sha),
        Ok(_) | Err(WorkspaceError::Git { .. }) => Err(unresolvable()),
        Err(other) => Err(other),
    }
}

fn check_ref_name(full_name: &str, shown: &str) -> Result<(), WorkspaceError> {
    if git2::Reference::is_valid_name(full_name) && !shown.contains("..") {
        Ok(())
    } else {
        Err(WorkspaceError::InvalidRefName(shown.to_owned()))
    }
}

/// The repository-wide lock under which worktrees are added and removed, in the common git
/// folder.
pub(crate) const WORKTREES_LOCK: &str = "tnh-worktrees.lock";

/// Takes (waiting for it) the repository-wide lock under which worktrees are added and removed;
/// it is released when the returned lock is dropped or the process ends.
///
/// The file is opened as the run lock is (never through a link, never waiting on a FIFO, a
/// regular file only): an agent can write `.git`, and a FIFO there hung every later `run`.
/// The wait is a try-lock repeated on a growing interval (at most [`LOCK_POLL_MAX`]) that ends
/// when the command is cancelled (Ctrl-C, SIGTERM: [`crate::runner::interrupts::listening`]).
/// A conductor holds the lock only while git adds or removes a worktree; a holder the
/// kernel's table of locks names that is another program is refused at once.
fn lock_worktrees(common_dir: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, WorkspaceError> {
    use crate::artifacts::lock::{LockFileError, open_lock_file};
    let path = common_dir.join(WORKTREES_LOCK);
    let open = || {
        open_lock_file(&path).map_err(|error| match error {
            LockFileError::NotAFile(what) => WorkspaceError::WorktreeLockNotAFile {
                path: path.clone(),
                what: what.to_owned(),
            },
            LockFileError::Io(source) => WorkspaceError::io("open", &path, source),
        })
    };
    let mut file = open()?;
    let cancellation = crate::runner::interrupts::listening();
    let mut pause = LOCK_POLL_MIN;
    loop {
        match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(lock),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {}
            Err((_, errno)) => return Err(WorkspaceError::io("lock", &path, errno.into())),
        }
        let holder = crate::artifacts::lock::exclusive_holder(&path);
        if let Some(pid) = holder
            .filter(|pid| *pid != std::process::id() && !crate::artifacts::lock::is_conductor(*pid))
        {
            return Err(WorkspaceError::WorktreeLockHeld {
                program: program_of(pid),
                path,
                pid,
            });
        }
        if let Some(cancellation) = cancellation.as_ref().filter(|c| c.is_cancelled()) {
            return Err(WorkspaceError::WorktreeLockInterrupted {
                cause: cancellation.cause().unwrap_or_else(|| "Ctrl-C".to_owned()),
                path,
                pid: holder,
            });
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(LOCK_POLL_MAX);
        // Opened again: the file may have been replaced meanwhile.
        file = open()?;
    }
}

/// The first interval between two tries of the worktree lock.
const LOCK_POLL_MIN: std::time::Duration = std::time::Duration::from_millis(2);

/// The longest interval between two tries of the worktree lock: how long a Ctrl-C may wait to
/// be noticed, and how late a freed lock may be taken.
const LOCK_POLL_MAX: std::time::Duration = std::time::Duration::from_millis(100);

/// The program process `pid` runs (its first argument), when it still runs.
fn program_of(pid: u32) -> Option<String> {
    let cmdline = crate::proc::command_line(pid)?;
    let program = cmdline.split(|byte| *byte == 0).next()?;
    Some(String::from_utf8_lossy(program).into_owned()).filter(|program| !program.is_empty())
}

/// The exclude line the conductor writes: anchored to the repository's root, so only
/// `<repo>/.tnh/` (run directories, managed worktrees) is ignored, never a `.tnh` folder deeper
/// down, which an agent could otherwise fill unseen.
const EXCLUDE_LINE: &str = "/.tnh/";

/// Adds `/.tnh/` to `.git/info/exclude` once, so run directories and worktrees never show up
/// in the operator's `git status`. An unanchored `.tnh/` or `.tnh` line (written by an earlier
/// version, which hid a `.tnh` folder at any depth) is rewritten in place as `/.tnh/`; every
/// other line stays byte for byte.
fn ensure_excluded(common_dir: &Path) -> Result<(), WorkspaceError> {
    let info = common_dir.join("info");
    let exclude = info.join("exclude");
    let existing = match std::fs::read_to_string(&exclude) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(source) => return Err(WorkspaceError::io("read", &exclude, source)),
    };
    let (mut text, anchored, upgraded) = anchor_exclude_lines(&existing);
    if anchored && !upgraded {
        return Ok(());
    }
    if !anchored {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str("# tnh-conductor: run directories and managed worktrees\n");
        text.push_str(EXCLUDE_LINE);
        text.push('\n');
    }
    std::fs::create_dir_all(&info).map_err(|source| WorkspaceError::io("create", &info, source))?;
    std::fs::write(&exclude, text).map_err(|source| WorkspaceError::io("write", &exclude, source))
}

/// `text` with every unanchored `.tnh/` / `.tnh` line replaced by `/.tnh/`, whether a line
/// then excludes the root `.tnh` folder, and whether any line was replaced. Git ignores
/// trailing spaces in a pattern, not leading ones, so only the end is trimmed.
fn anchor_exclude_lines(text: &str) -> (String, bool, bool) {
    let mut out = String::with_capacity(text.len() + EXCLUDE_LINE.len());
    let (mut anchored, mut upgraded) = (false, false);
    for line in text.split_inclusive('\n') {
        let body = line.trim_end();
        match body {
            ".tnh/" | ".tnh" => {
                out.push_str(EXCLUDE_LINE);
                out.push_str(&line[body.len()..]);
                anchored = true;
                upgraded = true;
            }
            "/.tnh/" | "/.tnh" => {
                out.push_str(line);
                anchored = true;
            }
            _ => out.push_str(line),
        }
    }
    (out, anchored, upgraded)
}

/// Whether something other than a folder (a symlink, even to a folder, or a file) stands at
/// `path`.
fn displaced(path: &Path) -> Result<bool, WorkspaceError> {
    match std::fs::symlink_metadata(path) {
        Ok(metadata) => Ok(!metadata.is_dir()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(WorkspaceError::io("inspect", path, source)),
    }
}
