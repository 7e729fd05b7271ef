//! Rollback: make the worktree's files equal a snapshot exactly (untracked files included) and
//! put the work branch's HEAD back at the snapshot's base, then report what was undone.
//!
//! Order matters: the worktree is first reset hard to the snapshot commit (so files the
//! snapshot recorded as untracked are checked out), then `git clean` removes every file the
//! snapshot does not contain, and finally a mixed reset moves the branch and index back to the
//! snapshot's base without touching files. Only the work branch is ever written.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::access::{
    access_denied, empty_folder, remove_file_beneath, restore_owner_access, too_long_paths,
};
use super::capture::DiffStat;
use super::error::WorkspaceError;
use super::git::Git;
use super::index_file;
use super::snapshot::{Scratch, Snapshot, Unrecorded};
use super::worktree::Workspace;
use crate::ids::RunId;

/// Version of the rollback record format.
pub const ROLLBACK_RECORD_SCHEMA_VERSION: u32 = 1;

/// Which snapshot to return to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RollbackTarget {
    /// The base the run started from. Also removes ignored files, which a fresh worktree had
    /// none of.
    PreRun,
    /// The snapshot before the most recent mutable step. Ignored files (build output) stay:
    /// snapshots do not record them.
    PreStep,
}

impl RollbackTarget {
    /// `pre_run` or `pre_step`.
    pub fn as_str(self) -> &'static str {
        match self {
            RollbackTarget::PreRun => "pre_run",
            RollbackTarget::PreStep => "pre_step",
        }
    }
}

impl fmt::Display for RollbackTarget {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

impl FromStr for RollbackTarget {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "pre_run" => Ok(RollbackTarget::PreRun),
            "pre_step" => Ok(RollbackTarget::PreStep),
            other if other.starts_with("checkpoint:") => Err(format!(
                "`{other}`: named checkpoints are reserved and not implemented"
            )),
            other => Err(format!(
                "unknown rollback target `{other}` (expected pre_run or pre_step)"
            )),
        }
    }
}

/// The payload of a `rollback_completed` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RollbackRecord {
    /// Format version.
    pub schema_version: u32,
    /// The run rolled back.
    #[schemars(with = "String")]
    pub run_id: RunId,
    /// The requested target.
    pub target: RollbackTarget,
    /// The snapshot restored.
    pub snapshot: Snapshot,
    /// The worktree's HEAD commit before the rollback.
    pub head_before: String,
    /// The work branch's HEAD commit afterwards (the snapshot's base).
    pub head_after: String,
    /// The changes undone: worktree against the snapshot before rolling back.
    pub before: DiffStat,
    /// Worktree against the snapshot afterwards; empty when the rollback is exact.
    pub after: DiffStat,
    /// Paths the owner had lost access to (a file without read permission, a folder without
    /// read, write or search permission), given back so that git could read, rewrite or
    /// remove what they hold. Absent when there were none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access_restored: Vec<String>,
    /// Files the rollback kept whose inode had other links (a hard link to a file outside the
    /// worktree, the operator's checkout say, has the same bytes, so git sees no change): each
    /// was removed before the reset and written afresh, so no later write to the worktree's
    /// file reaches the other. Absent when there were none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hard_links_replaced: Vec<String>,
    /// An earlier rollback of the run by the operator that started (its `rollback_started`
    /// event is recorded) but never completed — killed, possibly after it had reset the
    /// worktree, so that `before` and `head_before` here may show less than was undone.
    /// Absent when there was none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted_attempt: Option<InterruptedRollback>,
}

/// What a rollback is about to undo, before it resets anything.
#[derive(Debug, Clone, Copy)]
pub struct RollbackStart<'a> {
    /// The snapshot it goes back to.
    pub snapshot: &'a Snapshot,
    /// The worktree's HEAD commit (empty: HEAD named no commit).
    pub head_before: &'a str,
    /// The tree of the worktree's files, written to git's objects (`None`: it could not be).
    pub tree_before: Option<&'a str>,
}

/// A rollback that was recorded as started (`rollback_started`) and never completed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct InterruptedRollback {
    /// The sequence number of its `rollback_started` event.
    pub started_seq: u64,
    /// When it started (RFC 3339 UTC).
    pub started_at: String,
    /// Its target.
    pub target: RollbackTarget,
    /// The worktree's HEAD commit when it started (empty: HEAD named no commit).
    pub head_before: String,
    /// The tree of the worktree's files when it started (`null`: it could not be computed):
    /// `git -C WORKTREE checkout TREE -- .` gets them back while git keeps the object.
    pub tree_before: Option<String>,
}

/// What a rollback finds before it resets anything.
struct Scanned {
    /// git bound to the scratch index, just brought up to date with the worktree.
    scratch: Git,
    /// Paths whose owner's access was given back while scanning.
    access_restored: Vec<String>,
    /// What git cannot record, which the rollback removes.
    unrecorded: Vec<Unrecorded>,
    /// The worktree's HEAD commit (empty: HEAD named no commit).
    head_before: String,
    /// The tree of the worktree's files, when it could be written.
    tree_before: Option<String>,
    /// The files whose inode has other links.
    hard_linked: Vec<Vec<u8>>,
}

impl Workspace {
    /// Rolls the worktree back to `target`.
    pub fn rollback(&self, target: RollbackTarget) -> Result<RollbackRecord, WorkspaceError> {
        let snapshot = self.rollback_snapshot(target)?;
        type Silent = fn(&RollbackStart<'_>) -> Result<(), WorkspaceError>;
        self.rollback_to(target, snapshot, None::<Silent>)
    }

    /// [`rollback`](Self::rollback), calling `announce` with what it is about to undo once it
    /// has scanned the worktree and before it resets anything: an error from it stops the
    /// rollback with nothing reset.
    pub fn rollback_announced<E: From<WorkspaceError>>(
        &self,
        target: RollbackTarget,
        announce: impl FnOnce(&RollbackStart<'_>) -> Result<(), E>,
    ) -> Result<RollbackRecord, E> {
        let snapshot = self.rollback_snapshot(target)?;
        self.rollback_to(target, snapshot, Some(announce))
    }

    /// The snapshot a rollback to `target` goes back to.
    pub fn rollback_snapshot(&self, target: RollbackTarget) -> Result<Snapshot, WorkspaceError> {
        Ok(match target {
            RollbackTarget::PreRun => self.pre_run()?,
            RollbackTarget::PreStep => {
                self.latest_pre_step()?
                    .ok_or_else(|| WorkspaceError::NoSnapshot {
                        run_id: self.run_id().to_string(),
                        target: target.as_str().to_owned(),
                    })?
            }
        })
    }

    /// The worktree's HEAD commit; empty when HEAD names none (an agent may have left it on a
    /// deleted branch, which a rollback repairs).
    pub fn head_commit(&self) -> String {
        self.git
            .text(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])
            .unwrap_or_default()
    }

    fn rollback_to<E: From<WorkspaceError>>(
        &self,
        target: RollbackTarget,
        snapshot: Snapshot,
        announce: Option<impl FnOnce(&RollbackStart<'_>) -> Result<(), E>>,
    ) -> Result<RollbackRecord, E> {
        let Scanned {
            scratch,
            mut access_restored,
            unrecorded,
            head_before,
            tree_before,
            hard_linked,
        } = self.scan_before_rollback()?;
        if let Some(announce) = announce {
            announce(&RollbackStart {
                snapshot: &snapshot,
                head_before: &head_before,
                tree_before: tree_before.as_deref(),
            })?;
        }
        let hard_links_replaced = self.remove_hard_linked(hard_linked)?;
        let (before, reset) =
            self.reset_counting(target, &snapshot, tree_before.as_deref(), &scratch);
        access_restored.extend(reset?);
        access_restored.sort();
        access_restored.dedup();
        let mut before = before?;
        let after = self.settle_after_reset(&snapshot, &unrecorded, &mut before)?;
        Ok(RollbackRecord {
            schema_version: ROLLBACK_RECORD_SCHEMA_VERSION,
            run_id: self.run_id().clone(),
            target,
            head_after: snapshot.base.clone(),
            snapshot,
            head_before,
            before,
            after,
            access_restored,
            hard_links_replaced,
            interrupted_attempt: None,
        })
    }

    /// The worktree as it is, before anything is reset: its files hashed into git's objects
    /// (what the rollback undoes), its HEAD and the files that share their inode.
    fn scan_before_rollback(&self) -> Result<Scanned, WorkspaceError> {
        // (Git is told where the repository is, so a rewritten `.git` file is put back after.)
        let Scratch {
            git: scratch,
            access_restored,
            unrecorded,
        } = self.refresh_scratch_index()?;
        self.repair_git_link()?;
        // An agent may have left HEAD on a deleted branch; that is what rollback repairs.
        let head_before = self.head_commit();
        // The files as they are, as a tree in git's objects (one `write-tree` of the index
        // just refreshed), while the files with other links are looked for beside it.
        let (tree_before, hard_linked) = std::thread::scope(|scope| {
            let looking = scope.spawn(|| self.hard_linked_files(&scratch));
            let tree = scratch.text(["write-tree"]).ok();
            (tree, looking.join())
        });
        let hard_linked = hard_linked.unwrap_or_else(|_| {
            Err(WorkspaceError::Parse {
                command: "lstat",
                detail: "looking for hard-linked files failed".to_owned(),
            })
        })?;
        Ok(Scanned {
            scratch,
            access_restored,
            unrecorded,
            head_before,
            tree_before,
            hard_linked,
        })
    }

    /// Removes the files with other links, returning their paths: a file with other links
    /// keeps sharing its inode through a reset that finds its content unchanged; removed
    /// now, the reset writes it afresh.
    fn remove_hard_linked(&self, hard_linked: Vec<Vec<u8>>) -> Result<Vec<String>, WorkspaceError> {
        let mut hard_links_replaced = Vec::new();
        for path in hard_linked {
            remove_file_beneath(self.path(), &path)?;
            hard_links_replaced.push(String::from_utf8_lossy(&path).into_owned());
        }
        Ok(hard_links_replaced)
    }

    /// Resets the worktree to `snapshot` while counting the lines it undoes: the counts, and
    /// the paths whose access the reset gave back.
    fn reset_counting(
        &self,
        target: RollbackTarget,
        snapshot: &Snapshot,
        tree_before: Option<&str>,
        scratch: &Git,
    ) -> (
        Result<DiffStat, WorkspaceError>,
        Result<Vec<String>, WorkspaceError>,
    ) {
        // The line counts of that tree against the snapshot's come from git's objects alone,
        // so they are counted while git resets the worktree. They are counted between the two
        // trees, not against the scratch index: `diff-index --cached` reads a file from the
        // worktree instead of its object when the index says the two match, and the reset
        // may remove or rewrite it in between, which counted a removed new file as empty.
        match tree_before {
            Some(tree) => std::thread::scope(|scope| {
                let counting = scope.spawn(|| {
                    self.changes_between(&snapshot.tree, tree)
                        .map(|files| super::capture::diffstat_of(&files))
                });
                let reset = self.reset_hard_with_access(target, snapshot);
                let before = counting.join().unwrap_or_else(|_| {
                    Err(WorkspaceError::Parse {
                        command: "diff-tree --numstat",
                        detail: "counting the lines to undo failed".to_owned(),
                    })
                });
                (before, reset)
            }),
            // No tree could be written: counted from the scratch index before the reset.
            None => {
                let before = super::capture::diffstat_against(scratch, snapshot);
                (before, self.reset_hard_with_access(target, snapshot))
            }
        }
    }

    /// After the hard reset: removes what git could not record (counted in `before`), puts
    /// the branch back at the snapshot's base and returns what still differs from it.
    fn settle_after_reset(
        &self,
        snapshot: &Snapshot,
        unrecorded: &[Unrecorded],
        before: &mut DiffStat,
    ) -> Result<DiffStat, WorkspaceError> {
        // What git cannot record is not in the tree, but the rollback removes it: the clean
        // removes repositories with no commit, names git refuses and paths too long for it
        // (see `clean`); git never looks into a submodule's folder never checked out.
        before.files_changed += unrecorded.len() as u64;
        for entry in unrecorded.iter().filter(|entry| entry.mode == "160000") {
            let folder = self.path().join(&entry.path);
            if std::fs::symlink_metadata(folder.join(".git")).is_err() {
                empty_folder(self.path(), entry.path.as_bytes())?;
            }
        }
        // HEAD and the index are at the snapshot's commit now: a clean status proves the files
        // equal it, untracked ones included, in one stat pass.
        let exact = self.matches_head_exactly()?;
        // The real index now matches the snapshot with fresh stat data (the status wrote
        // it): seeding the scratch index from it spares the next snapshot re-hashing every
        // file the reset rewrote.
        self.reseed_scratch_index()?;
        if snapshot.base != snapshot.commit {
            self.git.run([
                "-c",
                "core.sparseCheckout=false",
                "reset",
                "--quiet",
                "--mixed",
                snapshot.base.as_str(),
            ])?;
        }
        Ok(if exact {
            DiffStat::default()
        } else {
            self.status_since(snapshot)?.diffstat
        })
    }

    /// True when `git status` finds nothing: the index and every file, untracked ones
    /// included (ignored ones excluded), equal HEAD. Options that configuration could change
    /// are given explicitly. A folder git cannot read proves nothing: not exact.
    ///
    /// A nested repository counts as what a snapshot records of it: the commit its HEAD
    /// names (`--ignore-submodules=dirty` still reports a gitlink whose HEAD moved, and an
    /// untracked nested repository). Whether its own files are dirty is not asked: git would
    /// ask by running `git status` inside it, which runs what that repository's own
    /// configuration names (a `core.fsmonitor` hook, a clean filter), and the agent may
    /// have written that configuration. A snapshot never records those files either.
    pub(crate) fn matches_head_exactly(&self) -> Result<bool, WorkspaceError> {
        let (status, warnings) = self.git.bytes_and_warnings([
            "status",
            "--porcelain",
            "-z",
            "--untracked-files=all",
            "--ignore-submodules=dirty",
            "--no-renames",
        ])?;
        Ok(status.is_empty() && !access_denied(&warnings) && !warnings.contains("could not "))
    }

    /// The regular files of the index `scratch` is bound to (just brought up to date with the
    /// worktree) whose inode has other links. One `lstat` per file, only in a rollback.
    fn hard_linked_files(&self, scratch: &Git) -> Result<Vec<Vec<u8>>, WorkspaceError> {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::MetadataExt;
        Ok(index_file::entries(scratch)?
            .into_iter()
            .filter(|entry| {
                let path = self.path().join(std::ffi::OsStr::from_bytes(&entry.path));
                entry.is_regular_file()
                    && std::fs::symlink_metadata(&path)
                        .is_ok_and(|metadata| metadata.is_file() && metadata.nlink() > 1)
            })
            .map(|entry| entry.path)
            .collect())
    }

    /// `reset_hard`; when git is refused access to a path (a file to rewrite or remove in a
    /// read-only folder), the owner's access is given back and it runs once more. Returns
    /// the paths whose access was given back.
    fn reset_hard_with_access(
        &self,
        target: RollbackTarget,
        snapshot: &Snapshot,
    ) -> Result<Vec<String>, WorkspaceError> {
        match self.reset_hard(target, snapshot) {
            Err(error) if error.is_access_denied() => {
                let restored = restore_owner_access(self.path())?;
                self.reset_hard(target, snapshot)?;
                Ok(restored)
            }
            other => other.map(|()| Vec::new()),
        }
    }

    /// Puts the work branch's HEAD, index and files at the snapshot's commit and removes what
    /// it does not contain.
    fn reset_hard(
        &self,
        target: RollbackTarget,
        snapshot: &Snapshot,
    ) -> Result<(), WorkspaceError> {
        self.remove_stale_locks()?;
        self.abandon_operations_in_progress()?;
        // An agent may have checked out another branch or detached HEAD: re-attach it to the
        // work branch first, so the resets below move only the work branch.
        if !self.head_on_work_branch(&self.read_head()) {
            self.attach_head()?;
        }
        // The reset below moves the work branch: never through a symbolic ref.
        self.unlink_work_branch(&snapshot.commit)?;
        // The reset reads the index's stat data to tell which files to rewrite: it reads
        // the conductor's, not one the agent could have forged to keep a file as it left it.
        self.index_from_scratch()?;
        super::snapshot::clear_index_flags(&self.git)?;
        // With sparse checkout on, the reset would mark files outside its patterns
        // skip-worktree again and leave them out.
        self.git.run([
            "-c",
            "core.sparseCheckout=false",
            "reset",
            "--quiet",
            "--hard",
            snapshot.commit.as_str(),
        ])?;
        let clean_flags = match target {
            RollbackTarget::PreRun => "-ffdxq",
            RollbackTarget::PreStep => "-ffdq",
        };
        match self.git.run(["clean", clean_flags]) {
            // A path too long for git (`could not lstat`): removed here, relative to each
            // open folder, then the clean runs again.
            Err(WorkspaceError::Git { stderr, .. })
                if stderr.contains("could not lstat") || stderr.contains("could not open") =>
            {
                too_long_paths(self.path(), true)?;
                self.git.run(["clean", clean_flags])
            }
            other => other,
        }
    }

    /// An agent killed in the middle of a git command (a timeout during `git commit`) leaves
    /// its lock files behind, and every later git command that writes the index, HEAD or the
    /// work branch would refuse ("Another git process seems to be running"). Only the run's
    /// own processes work in this worktree and on its branch, and they are gone after a step
    /// and when a rollback runs, so these locks are stale. Returns the locks removed.
    pub(crate) fn remove_stale_locks(&self) -> Result<Vec<String>, WorkspaceError> {
        let branch_lock = self.common_dir.join(format!("{}.lock", self.branch_ref()));
        let locks = [
            self.worktree_git_dir.join("index.lock"),
            self.worktree_git_dir.join("HEAD.lock"),
            branch_lock,
        ];
        let mut removed = Vec::new();
        for lock in locks {
            match std::fs::remove_file(&lock) {
                Ok(()) => removed.push(lock.display().to_string()),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => {
                    return Err(WorkspaceError::io("remove the stale lock", &lock, error));
                }
            }
        }
        Ok(removed)
    }

    /// A rebase or `git am` the agent left half-done keeps state that `reset --hard` does not
    /// clear; merges, cherry-picks and reverts are cleared by the reset itself.
    fn abandon_operations_in_progress(&self) -> Result<(), WorkspaceError> {
        let rebase = ["rebase-merge", "rebase-apply"]
            .iter()
            .any(|name| self.worktree_git_dir.join(name).exists());
        if rebase {
            self.git.run(["rebase", "--quit"])?;
        }
        Ok(())
    }
}

/// The JSON Schema of the rollback record (`rollback_completed` payload).
pub fn rollback_record_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(RollbackRecord)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::test_support::{committed_workspace, git};

    /// The exactness check after the reset sees a changed, an untracked and a staged file, a
    /// mode change and an untracked nested repository, but not an ignored file, whatever the
    /// configuration says about showing untracked files.
    #[test]
    fn the_exactness_check_sees_every_difference_from_head() {
        let scratch = tempfile::tempdir().unwrap();
        let files: [(&str, &[u8]); 2] = [("a.txt", b"a\n"), (".gitignore", b"*.log\n")];
        let workspace = committed_workspace(scratch.path(), &files, "exact");
        git(
            scratch.path(),
            &["config", "status.showUntrackedFiles", "no"],
        );
        let dir = workspace.path().to_owned();
        assert!(workspace.matches_head_exactly().unwrap());
        std::fs::write(dir.join("build.log"), "ignored\n").unwrap();
        assert!(workspace.matches_head_exactly().unwrap(), "ignored files");

        let differences: [&dyn Fn(); 5] = [
            &|| std::fs::write(dir.join("a.txt"), "b\n").unwrap(),
            &|| std::fs::write(dir.join("deep/new.txt"), "new\n").unwrap(),
            &|| {
                std::fs::write(dir.join("a.txt"), "staged\n").unwrap();
                git(&dir, &["add", "a.txt"]);
            },
            &|| {
                use std::os::unix::fs::PermissionsExt;
                let executable = std::fs::Permissions::from_mode(0o755);
                std::fs::set_permissions(dir.join("a.txt"), executable).unwrap();
            },
            &|| drop(git(&dir, &["init", "-q", "nested"])),
        ];
        for (index, make) in differences.iter().enumerate() {
            std::fs::create_dir_all(dir.join("deep")).unwrap();
            make();
            assert!(
                !workspace.matches_head_exactly().unwrap(),
                "difference {index}"
            );
            let record = workspace.rollback(RollbackTarget::PreRun).unwrap();
            assert!(record.after.is_empty(), "{index}: {:?}", record.after);
            assert!(workspace.matches_head_exactly().unwrap(), "{index} undone");
        }
    }
}
