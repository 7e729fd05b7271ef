//! Snapshots: the exact content of the worktree (tracked, modified, deleted and
//! untracked-not-ignored files) recorded as a commit object, without moving HEAD or touching
//! the worktree's index, and kept alive by a ref so `git gc` never prunes it.
//!
//! Ref naming, all under `refs/tnh/runs/<run_id>/`:
//! - `pre_run` — the base commit the run started from;
//! - `pre_step/<step_id>/<visit>` — the worktree just before visit `<visit>` of a mutable step,
//!   a commit whose tree is the worktree and whose parent is the work branch's HEAD then;
//! - `latest_pre_step` — the most recent `pre_step/…` snapshot (target of `pre_step` rollback).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::access::{
    TooLong, access_denied, restore_owner_access, restore_root_access, too_long_paths,
};
use super::error::WorkspaceError;
use super::git::Git;
use super::index_file::{self, IndexEntry};
use super::worktree::Workspace;
use crate::ids::{RunId, StepId};

/// The scratch index used to build trees of the worktree, inside the worktree's git dir.
const SCRATCH_INDEX: &str = "tnh-scratch-index";

/// The identity snapshot commits are written with.
const SNAPSHOT_NAME: &str = "tnh-conductor";
const SNAPSHOT_EMAIL: &str = "tnh-conductor@localhost";

/// The scratch index brought up to date with the worktree.
pub(crate) struct Scratch {
    /// git bound to the scratch index.
    pub(crate) git: Git,
    /// Paths whose owner had lost access and was given it back first, relative to the
    /// worktree, sorted; empty normally.
    pub(crate) access_restored: Vec<String>,
    /// What git cannot record, sorted by path: repositories created inside the worktree
    /// with no commit (`git init`), names git refuses to index, paths too long for git, the
    /// folders of submodules never checked out that hold files.
    pub(crate) unrecorded: Vec<Unrecorded>,
}

/// A path of the worktree git cannot record; the capture lists it as a new path so the policy
/// checks it, and a rollback removes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unrecorded {
    /// Relative to the worktree, without a trailing `/`.
    pub(crate) path: String,
    /// The git mode it is reported with: `160000` for a folder, which then stands for
    /// everything in it (as a nested repository does), else a file's or a symlink's.
    pub(crate) mode: &'static str,
}

/// A folder that stands for everything in it.
const MODE_GITLINK: &str = "160000";

/// How the scratch index is brought up to date with the worktree.
const ADD_ALL: [&str; 3] = ["add", "--all", "--ignore-errors"];

/// git's warning for a folder it skips.
const COULD_NOT_OPEN: &str = "warning: could not open directory '";

/// `git add --all --ignore-errors` into the index `git` is bound to, leaving out the paths
/// `too_long` (git dies on a file it cannot stat); the lines it tolerates are those about
/// paths it cannot record, which the caller lists, and folders it could not open, which the
/// caller judges.
fn add_all(git: &Git, too_long: &[TooLong]) -> Result<String, WorkspaceError> {
    let tolerated = |line: &str| {
        nested_without_commit(line).is_some()
            || refused_path(line).is_some()
            || (line.starts_with("error: unable to add '") && line.ends_with("' to index"))
            || line.starts_with(COULD_NOT_OPEN)
    };
    if too_long.is_empty() {
        return git.run_tolerating(ADD_ALL, tolerated);
    }
    let mut pathspecs = b".\0".to_vec();
    for entry in too_long {
        pathspecs.extend_from_slice(b":(exclude,literal)");
        pathspecs.extend_from_slice(&entry.path);
        pathspecs.push(0);
    }
    let mut args = ADD_ALL.to_vec();
    args.extend(["--pathspec-from-file=-", "--pathspec-file-nul"]);
    git.run_tolerating_with_input(args, Some(&pathspecs), tolerated)
}

/// The folder of `error: '<folder>' does not have a commit checked out`: a repository an
/// agent created with `git init` and no commit, which cannot be recorded (and which `git
/// clean -ff` removes on rollback).
fn nested_without_commit(line: &str) -> Option<&str> {
    line.strip_prefix("error: '")?
        .strip_suffix("' does not have a commit checked out")
}

/// The path of `error: invalid path '<path>'`: a name git refuses to index (with
/// `core.protectNTFS`, on by default: `GIT~1`, `.git.`, anything under a `.Git` folder; a
/// `.gitmodules` symlink).
fn refused_path(line: &str) -> Option<&str> {
    line.strip_prefix("error: invalid path '")?
        .strip_suffix('\'')
}

/// True when git's messages say it skipped a folder or died on a file, not for a refused
/// access: a path too long for it may be why (its message is cut at 4 KiB, the reason with it).
fn skipped_too_long(messages: &str) -> bool {
    messages.lines().any(|line| {
        (line.starts_with(COULD_NOT_OPEN) || line.contains("fatal: unable to stat '"))
            && !access_denied(line)
    })
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX)
        })
}

/// `refs/tnh/runs/<run_id>`.
pub fn refs_prefix(run_id: &RunId) -> String {
    format!("refs/tnh/runs/{run_id}")
}

/// A recorded state of the worktree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Snapshot {
    /// The full ref that keeps it, e.g. `refs/tnh/runs/<run_id>/pre_step/implement/1`.
    pub reference: String,
    /// The commit the ref points at.
    pub commit: String,
    /// The tree of the worktree's files.
    pub tree: String,
    /// Where the work branch's HEAD was: rollback puts HEAD back here.
    pub base: String,
}

impl Workspace {
    /// The `pre_run` snapshot: the base commit.
    pub fn pre_run(&self) -> Result<Snapshot, WorkspaceError> {
        if let Some(snapshot) = self.pre_run.get() {
            return Ok(snapshot.clone());
        }
        let reference = format!("{}/pre_run", refs_prefix(self.run_id()));
        let snapshot =
            self.load_snapshot(&reference, false)?
                .ok_or_else(|| WorkspaceError::NoSnapshot {
                    run_id: self.run_id().to_string(),
                    target: "pre_run".to_owned(),
                })?;
        // `pre_run` is the base commit itself. Refs are writable by anyone who can write the
        // repository (an agent of another run, while this one waits at a gate or has ended):
        // a `pre_run` moved elsewhere would have a rollback land on what it names now.
        if snapshot.commit != self.record().base_sha {
            return Err(WorkspaceError::SnapshotMoved {
                run_id: self.run_id().to_string(),
                reference,
                found: snapshot.commit,
                expected: self.record().base_sha.clone(),
            });
        }
        Ok(self.pre_run.get_or_init(|| snapshot).clone())
    }

    /// The most recent pre-step snapshot, if any step took one.
    pub fn latest_pre_step(&self) -> Result<Option<Snapshot>, WorkspaceError> {
        let latest = format!("{}/latest_pre_step", refs_prefix(self.run_id()));
        let Some(mut snapshot) = self.load_snapshot(&latest, true)? else {
            return Ok(None);
        };
        let prefix = format!("{}/pre_step/", refs_prefix(self.run_id()));
        let named = self.repo_git.text([
            "for-each-ref",
            "--format=%(refname)",
            "--points-at",
            snapshot.commit.as_str(),
            prefix.as_str(),
        ])?;
        if let Some(reference) = named.lines().next() {
            snapshot.reference = reference.to_owned();
        }
        Ok(Some(snapshot))
    }

    /// Records the worktree before visit `visit` of `step` as
    /// `refs/tnh/runs/<run_id>/pre_step/<step>/<visit>` and makes it the latest pre-step snapshot.
    pub fn snapshot_pre_step(&self, step: &StepId, visit: u32) -> Result<Snapshot, WorkspaceError> {
        let prefix = refs_prefix(self.run_id());
        let reference = format!("{prefix}/pre_step/{step}/{visit}");
        if !git2::Reference::is_valid_name(&reference) {
            return Err(WorkspaceError::InvalidRefName(step.to_string()));
        }
        let latest = format!("{prefix}/latest_pre_step");
        let message = format!(
            "tnh snapshot: before step {step} visit {visit}\n\nrun: {}\n",
            self.run_id()
        );
        // The tree the previous agent step's capture wrote, when nothing ran since.
        let tree = match self.take_remembered_tree() {
            Some(tree) => tree,
            None => self.worktree_tree()?,
        };
        self.snapshot_as(reference, &tree, &[&latest], &message)
    }

    /// Records `tree` (the worktree's) as a commit on its HEAD, named by `reference` and
    /// `also`. The commit object and its refs are written in-process with libgit2: four git
    /// processes fewer per snapshot, and no dependence on the operator's identity or signing
    /// configuration.
    fn snapshot_as(
        &self,
        reference: String,
        tree: &str,
        also: &[&str],
        message: &str,
    ) -> Result<Snapshot, WorkspaceError> {
        let mut references = vec![reference.as_str()];
        references.extend_from_slice(also);
        let (commit, base) = self
            .write_snapshot_commit(tree, message, &references)
            .map_err(|error| WorkspaceError::Git {
                command: "snapshot commit (libgit2)".to_owned(),
                dir: self.path().to_owned(),
                stderr: error.message().to_owned(),
            })?;
        Ok(Snapshot {
            reference,
            commit,
            tree: tree.to_owned(),
            base,
        })
    }

    /// Records the worktree as it is now as `refs/tnh/runs/<run_id>/final`, before `runs
    /// clean` removes it: an agent's work is usually left uncommitted in the worktree, and the
    /// work branch still names the base, so this ref is then the only copy of the run's end.
    pub fn snapshot_final(&self) -> Result<Snapshot, WorkspaceError> {
        let reference = format!("{}/final", refs_prefix(self.run_id()));
        let message = format!(
            "tnh snapshot: the worktree as runs clean removed it\n\nrun: {}\n",
            self.run_id()
        );
        let tree = self.worktree_tree()?;
        self.snapshot_as(reference, &tree, &[], &message)
    }

    /// Packs the run's refs (its snapshot refs and work branch) into `packed-refs`, for a run
    /// that has finished: git then reads them with that one file, not one file each, so a
    /// repository keeping many finished runs does not make every later git command read them
    /// all. Only this run's refs are packed (`--include`; a symbolic ref never is); the
    /// others stay as they are. Git before 2.42 has no `--include`: the refs then stay loose.
    pub fn pack_run_refs(&self) -> Result<(), WorkspaceError> {
        let own = format!("--include={}/*", refs_prefix(self.run_id()));
        let branch = format!("--include={}", self.branch_ref());
        self.repo_git
            .run(["pack-refs", own.as_str(), branch.as_str()])
    }

    /// Writes a commit of `tree` whose parent is the worktree's HEAD and points `references`
    /// at it; returns the commit and the parent.
    fn write_snapshot_commit(
        &self,
        tree: &str,
        message: &str,
        references: &[&str],
    ) -> Result<(String, String), git2::Error> {
        super::repositories::with_repository(self.path(), |repository| {
            let parent = repository.head()?.peel_to_commit()?;
            let tree = repository.find_tree(git2::Oid::from_str(tree)?)?;
            let time = git2::Time::new(unix_now(), 0);
            let signature = git2::Signature::new(SNAPSHOT_NAME, SNAPSHOT_EMAIL, &time)?;
            let commit =
                repository.commit(None, &signature, &signature, message, &tree, &[&parent])?;
            for reference in references {
                repository.reference(reference, commit, true, "tnh: snapshot")?;
            }
            Ok((commit.to_string(), parent.id().to_string()))
        })
    }

    /// A tree object of the worktree as it is now, built in a scratch index so the worktree's
    /// own index stays untouched. Ignored files are left out, as `git status` leaves them out.
    pub(crate) fn worktree_tree(&self) -> Result<String, WorkspaceError> {
        let scratch = self.refresh_scratch_index()?;
        self.write_scratch_tree(&scratch.git)
    }

    /// Brings the scratch index up to date with the worktree (every file, untracked ones
    /// included, ignored ones excluded) and returns git bound to it. When git is refused
    /// access to a path, the owner's access is given back (`access`) and git runs again; a
    /// path still refused then is an error, never a change left out. What git cannot record
    /// is listed in `unrecorded` instead of failing the whole refresh: a repository with no
    /// commit, a name git refuses to index (`GIT~1`, `.git.`, a `.gitmodules` symlink), a path
    /// too long for git to reach, files in a submodule folder never checked out. Any other
    /// folder git says it could not open is an error.
    pub(crate) fn refresh_scratch_index(&self) -> Result<Scratch, WorkspaceError> {
        let mut access_restored = Vec::new();
        if restore_root_access(self.path())? {
            access_restored.push(".".to_owned());
        }
        let scratch = self.scratch_index();
        if !scratch.exists() {
            self.reseed_scratch_index()?;
            // Flags an agent set on the worktree's index must not hide files from captures
            // (rollback clears them before it reseeds).
            clear_index_flags(&self.git.with_index(&scratch))?;
        }
        let git = self.git.with_index(&scratch);
        let mut unpopulated = self.forget_nested_repositories(&git)?;
        // Paths too long for git, looked for only once git has complained (a whole walk).
        let mut too_long: Option<Vec<TooLong>> = None;
        let mut access_given_back = false;
        let warnings = loop {
            let outcome = add_all(&git, too_long.as_deref().unwrap_or_default());
            // An unreadable folder is only a warning to git, and its files would be left out.
            let denied = match &outcome {
                Ok(warnings) => access_denied(warnings),
                Err(error) => error.is_access_denied(),
            };
            if denied && !access_given_back {
                access_given_back = true;
                access_restored.extend(restore_owner_access(self.path())?);
                // A nested repository git could not see into before may show its `.git` now.
                unpopulated = self.forget_nested_repositories(&git)?;
                continue;
            }
            match outcome {
                Ok(warnings) if denied => {
                    return Err(WorkspaceError::Git {
                        command: ADD_ALL.join(" "),
                        dir: self.path().to_owned(),
                        stderr: warnings.trim().to_owned(),
                    });
                }
                // git dies on a file whose path is too long to stat, and skips a folder too
                // long to open with a warning: both are found and left out of the next add.
                Err(error) if too_long.is_none() && skipped_too_long(&error.to_string()) => {
                    too_long = Some(too_long_paths(self.path(), false)?);
                }
                Ok(warnings) if too_long.is_none() && skipped_too_long(&warnings) => {
                    too_long = Some(too_long_paths(self.path(), false)?);
                }
                Ok(warnings) => break warnings,
                Err(error) => return Err(error),
            }
        };
        let mut unrecorded = Vec::new();
        for line in warnings.lines() {
            if let Some(path) = nested_without_commit(line) {
                unrecorded.push(Unrecorded {
                    path: path.trim_end_matches('/').to_owned(),
                    mode: MODE_GITLINK,
                });
            } else if let Some(path) = refused_path(line) {
                unrecorded.push(Unrecorded {
                    path: path.to_owned(),
                    mode: self.mode_of(path),
                });
            } else if line.starts_with(COULD_NOT_OPEN) {
                // Not a path too long (those were left out), not a refused access: a folder
                // whose files would be left out unseen.
                return Err(WorkspaceError::Git {
                    command: ADD_ALL.join(" "),
                    dir: self.path().to_owned(),
                    stderr: line.to_owned(),
                });
            }
        }
        for entry in too_long.unwrap_or_default() {
            unrecorded.push(Unrecorded {
                path: String::from_utf8_lossy(&entry.path).into_owned(),
                mode: if entry.folder { MODE_GITLINK } else { "100644" },
            });
        }
        // git never looks into a gitlink's folder: files there are listed by the folder.
        for path in unpopulated {
            if self.folder_holds_anything(&path) {
                unrecorded.push(Unrecorded {
                    path: String::from_utf8_lossy(&path).into_owned(),
                    mode: MODE_GITLINK,
                });
            }
        }
        unrecorded.sort_by(|left, right| left.path.cmp(&right.path));
        unrecorded.dedup_by(|left, right| left.path == right.path);
        Ok(Scratch {
            git,
            access_restored,
            unrecorded,
        })
    }

    /// The git mode a path git refused to index would have: `120000` for a symlink (so the
    /// policy checks where it points), `100644` otherwise.
    fn mode_of(&self, path: &str) -> &'static str {
        match std::fs::symlink_metadata(self.path().join(path)) {
            Ok(metadata) if metadata.file_type().is_symlink() => "120000",
            _ => "100644",
        }
    }

    /// True when the folder `path` of the worktree (not through a symlink) holds any entry.
    fn folder_holds_anything(&self, path: &[u8]) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let folder = self.path().join(std::ffi::OsStr::from_bytes(path));
        std::fs::symlink_metadata(&folder).is_ok_and(|metadata| metadata.is_dir())
            && std::fs::read_dir(&folder).is_ok_and(|mut entries| entries.next().is_some())
    }

    /// Drops from the scratch index (bound to `git`) every nested repository (gitlink) whose
    /// folder holds a `.git`, so that `git add --all` finds it as a new one and records the
    /// commit its HEAD names, read from its refs. Left in the index, `add` would ask whether
    /// it is dirty by running `git status` inside it, and that runs what its own
    /// configuration names (a `core.fsmonitor` hook, a clean filter) — the configuration of a
    /// repository the agent may have created and written. A gitlink with no `.git` in its
    /// folder (a submodule never checked out in the worktree) stays: git asks nothing there,
    /// and `add` would otherwise drop it as deleted; those are returned, since git never
    /// looks at what their folders hold. Nested repositories' contents are never recorded, so
    /// whether they are dirty does not matter to a snapshot.
    fn forget_nested_repositories(&self, git: &Git) -> Result<Vec<Vec<u8>>, WorkspaceError> {
        use std::os::unix::ffi::OsStrExt;
        let mut nested = Vec::new();
        let mut unpopulated = Vec::new();
        for path in gitlinks(git)? {
            let dot_git = self
                .path()
                .join(std::ffi::OsStr::from_bytes(&path))
                .join(".git");
            if std::fs::symlink_metadata(dot_git).is_ok() {
                nested.extend_from_slice(&path);
                nested.push(0);
            } else {
                unpopulated.push(path);
            }
        }
        if !nested.is_empty() {
            git.run_with_input(["update-index", "--force-remove", "-z", "--stdin"], &nested)?;
        }
        Ok(unpopulated)
    }

    /// Starts the scratch index from the worktree's real index, reusing its stat cache so only
    /// files changed since are hashed.
    pub(crate) fn reseed_scratch_index(&self) -> Result<(), WorkspaceError> {
        let index = self.worktree_git_dir.join("index");
        let scratch = self.scratch_index();
        if index.exists() {
            std::fs::copy(&index, &scratch)
                .map_err(|source| WorkspaceError::io("copy", &index, source))?;
        }
        Ok(())
    }

    pub(crate) fn scratch_index(&self) -> PathBuf {
        self.worktree_git_dir.join(SCRATCH_INDEX)
    }

    /// Rebuilds the scratch index from the commit `seed` without stat data, so the next
    /// refresh hashes every file of the worktree instead of trusting stat data someone else
    /// wrote (an agent can forge an index entry with fresh stat data and the old blob, or flag
    /// a path skip-worktree, to hide a change). Seeded from a commit, not empty: a tracked file
    /// under an ignored folder stays recorded.
    pub(crate) fn rebuild_scratch_index(&self, seed: &str) -> Result<(), WorkspaceError> {
        let scratch = self.scratch_index();
        match std::fs::remove_file(&scratch) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(WorkspaceError::io("remove", &scratch, source)),
        }
        self.git.with_index(&scratch).run(["read-tree", seed])
    }

    /// Makes the worktree's own index a copy of the scratch index (just brought up to date
    /// with the worktree by this process), so a reset reads stat data the conductor wrote,
    /// not an index the agent could forge.
    pub(crate) fn index_from_scratch(&self) -> Result<(), WorkspaceError> {
        let scratch = self.scratch_index();
        let index = self.worktree_git_dir.join("index");
        std::fs::copy(&scratch, &index)
            .map(|_| ())
            .map_err(|source| WorkspaceError::io("copy", &scratch, source))
    }

    fn load_snapshot(
        &self,
        reference: &str,
        base_is_parent: bool,
    ) -> Result<Option<Snapshot>, WorkspaceError> {
        let commit_spec = format!("{reference}^{{commit}}");
        let tree_spec = format!("{reference}^{{tree}}");
        let base_spec = if base_is_parent {
            format!("{reference}^1")
        } else {
            commit_spec.clone()
        };
        let args = ["rev-parse", "--verify", "--quiet", commit_spec.as_str()];
        if !self.repo_git.succeeds(args)? {
            return Ok(None);
        }
        let resolved = self.repo_git.text([
            "rev-parse",
            commit_spec.as_str(),
            tree_spec.as_str(),
            base_spec.as_str(),
        ])?;
        let lines: Vec<&str> = resolved.lines().collect();
        let [commit, tree, base] = lines[..] else {
            return Err(WorkspaceError::Parse {
                command: "rev-parse",
                detail: resolved.clone(),
            });
        };
        Ok(Some(Snapshot {
            reference: reference.to_owned(),
            commit: commit.to_owned(),
            tree: tree.to_owned(),
            base: base.to_owned(),
        }))
    }
}

/// Clears `assume-unchanged` and `skip-worktree` (set with `git update-index` or by
/// `git sparse-checkout`) in the index `git` is bound to: git leaves such a file alone, so
/// `reset --hard` would not restore it, `status` would not report it, and a scratch index
/// seeded from that index would hide its later changes from the capture. The flags are read
/// from the index in-process; `update-index` runs only when one is set.
pub(crate) fn clear_index_flags(git: &Git) -> Result<(), WorkspaceError> {
    let mut assumed = Vec::new();
    let mut skipped = Vec::new();
    for entry in index_file::entries(git)? {
        for (flagged, list) in [
            (entry.assume_unchanged, &mut assumed),
            (entry.skip_worktree, &mut skipped),
        ] {
            if flagged {
                list.extend_from_slice(&entry.path);
                list.push(0);
            }
        }
    }
    // `update-index` applies only the first of these options to each path: one run each.
    for (option, paths) in [
        ("--no-assume-unchanged", assumed),
        ("--no-skip-worktree", skipped),
    ] {
        if !paths.is_empty() {
            git.run_with_input(["update-index", option, "-z", "--stdin"], &paths)?;
        }
    }
    Ok(())
}

/// What the worktree holds and where its HEAD is, recorded at each checkpoint so that resume
/// can tell whether someone changed the worktree by hand in between.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Fingerprint {
    /// The tree of the worktree's files (untracked included, ignored excluded).
    pub tree: String,
    /// The commit the worktree's HEAD points at.
    pub head: String,
}

impl Workspace {
    /// The worktree's current fingerprint.
    pub fn fingerprint(&self) -> Result<Fingerprint, WorkspaceError> {
        let head = match self.git.text(["rev-parse", "--verify", "HEAD^{commit}"]) {
            Ok(head) => head,
            Err(error) => return Err(self.branch_gone().unwrap_or(error)),
        };
        Ok(Fingerprint {
            tree: self.worktree_tree()?,
            head,
        })
    }

    /// [`WorkspaceError::BranchGone`] when the worktree's HEAD names the work branch and the
    /// branch no longer exists (someone deleted it while the run was stopped), with the last
    /// commit the worktree's HEAD log recorded.
    fn branch_gone(&self) -> Option<WorkspaceError> {
        let on_branch = self.head_on_work_branch(&self.read_head());
        let branch_ref = self.branch_ref();
        let exists = self
            .repo_git
            .succeeds(["show-ref", "--verify", "--quiet", branch_ref.as_str()])
            .unwrap_or(true);
        if !on_branch || exists {
            return None;
        }
        // Read without blocking: the agent can put a FIFO there.
        let log = crate::artifacts::safe_files::read_regular(
            &self.worktree_git_dir.join("logs/HEAD"),
            64 * 1024 * 1024,
        )
        .map(|(bytes, _)| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default();
        let last_head = log
            .lines()
            .rev()
            .find_map(|line| line.split_whitespace().nth(1))
            .filter(|sha| sha.bytes().any(|byte| byte != b'0'))
            .map(str::to_owned);
        Some(WorkspaceError::BranchGone {
            run_id: self.record().run_id.to_string(),
            branch: self.record().branch.clone(),
            repo: self.record().repo_root.clone(),
            last_head,
        })
    }
}

/// The paths of the gitlinks (nested repositories) of the index `git` is bound to, read
/// in-process (a step's snapshot and capture each look, so no process is spawned for it).
fn gitlinks(git: &Git) -> Result<Vec<Vec<u8>>, WorkspaceError> {
    Ok(index_file::entries(git)?
        .into_iter()
        .filter(IndexEntry::is_gitlink)
        .map(|entry| entry.path)
        .collect())
}
