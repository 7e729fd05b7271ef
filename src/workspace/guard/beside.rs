//! Shared refs that a run working beside this one changed during the step. Every guard records
//! the repository-wide refs at its own step's start, so without this the run whose step ended
//! first was charged with (and undid) what another run's agent did meanwhile:
//!
//! - a protected branch, tag or branch of the operator's moved to a commit of another run — a
//!   commit reachable from that run's work branch or worktree HEAD but not from its `pre_run`
//!   (its own work), nor from this run's work branch or HEAD — while that run was driven, or
//!   moved away from such a commit (that run's guard putting it back): left for that run's
//!   guard, which compares with its own start and puts it back, charged to that run
//!   ([`LeftForRun`], `left_for_other_runs`);
//! - a stash entry another driven run made (`On tnh/<workflow>/<run>: …` or `WIP on …` in its
//!   message, its first parent in that run's history): left in place for that run to pop,
//!   listed in `other_runs_refs_changed`. The operator's entries, recorded before the step,
//!   are still always put back; this run's own entries are removed as before.

use std::cell::OnceCell;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{
    GuardReport, Head, Listing, RefChange, RefClass, RefGuard, STASH, SYMREF, read_optional,
};
use crate::workspace::error::WorkspaceError;
use crate::workspace::snapshot::refs_prefix;

/// A change to a shared ref this run's guard left for the guard of the run it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LeftForRun {
    /// The ref (`refs/heads/main`, `refs/tags/v1`).
    pub refname: String,
    /// The run whose commit it was moved to (or away from), driven during the step.
    pub run_id: String,
    /// Value before the step (`null`: did not exist).
    pub before: Option<String>,
    /// Value after the step (`null`: deleted).
    pub after: Option<String>,
}

/// What another run driven during the step holds now.
#[derive(Debug)]
struct OtherRun {
    /// Its work branch (`refs/heads/tnh/<workflow>/<run>`).
    branch: String,
    /// Its work branch's commit and its worktree's HEAD commit.
    tips: Vec<String>,
    /// Its `pre_run` commit, when it has one: what it started from is not its own work.
    base: Option<String>,
}

/// The other runs driven during the step and this run's own commits, worked out on first use
/// (most steps change no shared ref).
pub(super) struct Beside<'a> {
    guard: &'a RefGuard,
    listing: &'a Listing,
    runs: OnceCell<BTreeMap<String, OtherRun>>,
    own: OnceCell<Vec<String>>,
}

impl<'a> Beside<'a> {
    pub(super) fn new(guard: &'a RefGuard, listing: &'a Listing) -> Self {
        Self {
            guard,
            listing,
            runs: OnceCell::new(),
            own: OnceCell::new(),
        }
    }

    fn runs(&self) -> &BTreeMap<String, OtherRun> {
        self.runs.get_or_init(|| {
            let guard = self.guard;
            let mut runs = BTreeMap::new();
            let table = OnceCell::new();
            for (name, commit) in &self.listing.resolved {
                if !name.starts_with("refs/heads/tnh/")
                    || self
                        .listing
                        .values
                        .get(name)
                        .is_some_and(|value| value.starts_with(SYMREF))
                {
                    continue;
                }
                let Some(run) = guard.other_run(name).filter(|run| !run.is_empty()) else {
                    continue;
                };
                if !guard.driven_during_step(&run, &table) {
                    continue;
                }
                let mut tips = vec![commit.clone()];
                tips.extend(self.worktree_head(&run));
                let pre_run = format!("{}/pre_run", refs_prefix(&crate::ids::RunId::new(&run)));
                let base = self.listing.resolved.get(&pre_run).cloned();
                runs.insert(
                    run,
                    OtherRun {
                        branch: name.clone(),
                        tips,
                        base,
                    },
                );
            }
            runs
        })
    }

    /// The commit the worktree of run `run` has checked out, from its `HEAD` file in the
    /// repository (`.git/worktrees/<run>/HEAD`); git is not run in another run's worktree.
    fn worktree_head(&self, run: &str) -> Option<String> {
        let file = self
            .guard
            .workspace
            .common_dir
            .join("worktrees")
            .join(run)
            .join("HEAD");
        // Read without blocking: the other run's agent may have left a FIFO there.
        let (bytes, _) = crate::artifacts::safe_files::read_regular(&file, 4096).ok()?;
        match Head::parse(&String::from_utf8_lossy(&bytes)) {
            Head::Attached(name) => self.listing.resolved.get(&name).cloned(),
            Head::Detached(commit) => Some(commit),
            Head::Unknown => None,
        }
    }

    /// This run's commits: its work branch now, its worktree's HEAD now and before the step
    /// (read once per check).
    fn own_tips(&self) -> &[String] {
        self.own.get_or_init(|| self.read_own_tips())
    }

    fn read_own_tips(&self) -> Vec<String> {
        let guard = self.guard;
        let mut tips = vec![guard.worktree_head.clone()];
        tips.extend(
            self.listing
                .resolved
                .get(&guard.workspace.branch_ref())
                .cloned(),
        );
        tips.extend(super::head_commit(
            &guard.workspace.read_head(),
            &self.listing.resolved,
        ));
        tips
    }

    /// Whether `commit` (a commit, or a tag naming one) is `tip` or one of its ancestors.
    fn reaches(&self, commit: &str, tip: &str) -> Result<bool, WorkspaceError> {
        if commit == tip {
            return Ok(true);
        }
        let commit = format!("{commit}^{{commit}}");
        self.guard.workspace.repo_git.succeeds([
            "merge-base",
            "--is-ancestor",
            commit.as_str(),
            tip,
        ])
    }

    fn reached_by(&self, commit: &str, tips: &[String]) -> Result<bool, WorkspaceError> {
        for tip in tips {
            if self.reaches(commit, tip)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The run driven during the step whose own work `commit` is: reachable from its work
    /// branch or worktree HEAD, not from its `pre_run`, nor from this run's commits.
    fn owner_of(&self, commit: &str) -> Result<Option<String>, WorkspaceError> {
        for (run, other) in self.runs() {
            if !self.reached_by(commit, &other.tips)? {
                continue;
            }
            if let Some(base) = &other.base
                && self.reaches(commit, base)?
            {
                continue;
            }
            if self.reached_by(commit, self.own_tips())? {
                return Ok(None);
            }
            return Ok(Some(run.clone()));
        }
        Ok(None)
    }

    /// The run a shared ref's change during the step is left for: moved to a commit of
    /// another run driven meanwhile (its agent moved it), or away from one (its guard put it
    /// back, or its agent moved it again). `None`: this run's to answer for.
    pub(super) fn attribute(
        &self,
        before: Option<&String>,
        now: Option<&String>,
    ) -> Result<Option<String>, WorkspaceError> {
        if self.runs().is_empty() {
            return Ok(None);
        }
        for value in [now, before].into_iter().flatten() {
            if value.starts_with(SYMREF) {
                continue;
            }
            if let Some(run) = self.owner_of(value)? {
                return Ok(Some(run));
            }
        }
        Ok(None)
    }

    /// The driven run a stash entry (a line of the stash's reflog) was made in: its message
    /// names that run's work branch (`On tnh/<workflow>/<run>: …`, `WIP on …: …`) and the
    /// stash commit's first parent is in that run's history.
    fn stash_owner(&self, line: &[u8]) -> Result<Option<String>, WorkspaceError> {
        let Ok(line) = std::str::from_utf8(line) else {
            return Ok(None);
        };
        let Some((head, message)) = line.split_once('\t') else {
            return Ok(None);
        };
        let Some(commit) = head.split(' ').nth(1) else {
            return Ok(None);
        };
        let Some((branch, _)) = message
            .strip_prefix("WIP on ")
            .or_else(|| message.strip_prefix("On "))
            .and_then(|rest| rest.split_once(": "))
        else {
            return Ok(None);
        };
        let branch = format!("refs/heads/{branch}");
        let Some((run, other)) = self.runs().iter().find(|(_, run)| run.branch == branch) else {
            return Ok(None);
        };
        let parent = format!("{commit}^1");
        let Ok(parent) = self.guard.workspace.repo_git.text([
            "rev-parse",
            "--verify",
            "--quiet",
            parent.as_str(),
        ]) else {
            return Ok(None);
        };
        Ok(self.reached_by(&parent, &other.tips)?.then(|| run.clone()))
    }
}

/// The lines of a reflog.
fn lines(contents: Option<&[u8]>) -> Vec<&[u8]> {
    contents
        .unwrap_or_default()
        .split(|byte| *byte == b'\n')
        .filter(|line| !line.is_empty())
        .collect()
}

impl RefGuard {
    /// Whether run `run` was being driven during the step: its lock held before or after it,
    /// or taken in between — or it had no refs before (a run started meanwhile).
    /// The kernel's table of locks is read once into `table`, on first need.
    pub(super) fn driven_during_step(
        &self,
        run: &str,
        table: &OnceCell<crate::artifacts::lock::LockTable>,
    ) -> bool {
        let Some(recorded) = self.other_runs.get(run) else {
            return true;
        };
        if recorded.driven {
            return true;
        }
        // The lock file's identity first: it costs one `stat`, the lock table a read of it.
        let lock = crate::artifacts::RunDir::at(
            crate::workspace::runs::runs_dir(&self.workspace.record().repo_root).join(run),
        )
        .lock();
        crate::workspace::operator_checkout::FileIdentity::of(&lock) != recorded.lock
            || table
                .get_or_init(crate::artifacts::lock::LockTable::read)
                .is_held(&lock)
    }

    /// The stash changed during the step: entries other runs driven meanwhile made are theirs
    /// and stay; the operator's entries recorded before are put back and this run's own
    /// removed, as for any guarded ref. Returns what the stash's reflog must hold once the
    /// guard is done (for [`restore_files`](RefGuard::restore_files)), or `None` when no
    /// entry is another run's and the stash is put back as it was.
    pub(super) fn compare_stash(
        &self,
        after: &BTreeMap<String, String>,
        beside: &Beside<'_>,
        report: &mut GuardReport,
    ) -> Result<Option<Vec<u8>>, WorkspaceError> {
        let before = self.refs.get(STASH);
        let now = after.get(STASH);
        if before == now || now.is_some_and(|value| value.starts_with(SYMREF)) {
            return Ok(None);
        }
        // The stash is the repository's, never the run's own.
        let Some(restore) = self.scope.of_ref(false) else {
            return Ok(None);
        };
        let log = self.stash_log();
        let Some(recorded) = self.files.get(&log) else {
            return Ok(None);
        };
        let Some(current) = read_optional(&log)? else {
            return Ok(None);
        };
        let before_lines = lines(recorded.as_deref());
        let current_lines = lines(Some(&current));
        let mut kept = before_lines.clone();
        let (mut theirs, mut own) = (false, false);
        for line in &current_lines {
            if before_lines.contains(line) {
                continue;
            }
            if beside.stash_owner(line)?.is_some() {
                kept.push(line);
                theirs = true;
            } else {
                own = true;
            }
        }
        if !theirs {
            return Ok(None);
        }
        report.other_runs_refs_changed.push(STASH.to_owned());
        let operators_dropped = before_lines
            .iter()
            .any(|line| !current_lines.contains(line));
        if !own && !operators_dropped {
            // Only other runs' entries were added: nothing to put back.
            return Ok(Some(current));
        }
        let mut contents: Vec<u8> = kept.join(&b'\n');
        contents.push(b'\n');
        // The operator's entries back, this run's gone, the other runs' kept on top.
        let top = kept
            .last()
            .and_then(|line| std::str::from_utf8(line).ok())
            .and_then(|line| line.split(' ').nth(1))
            .map(str::to_owned);
        if restore {
            self.restore_ref(STASH, top.as_ref())?;
        }
        report.ref_changes.push(RefChange {
            refname: STASH.to_owned(),
            class: RefClass::Stash,
            before: before.cloned(),
            after: now.cloned(),
            restored: restore,
        });
        Ok(Some(contents))
    }
}

impl RefGuard {
    /// The operator's checkout looks changed when the branch it has checked out moves under
    /// it: the files that differ between the branch's two commits are not this step's doing
    /// when that move was left for another run (that run's guard puts the branch back, and the
    /// checkout with it). Drops them from `operator_checkout_changed`.
    pub(super) fn forget_checkout_changes_left_for_other_runs(
        &self,
        report: &mut GuardReport,
    ) -> Result<(), WorkspaceError> {
        if report.left_for_other_runs.is_empty() || report.operator_checkout_changed.is_empty() {
            return Ok(());
        }
        let now = read_optional(&self.workspace.common_dir.join("HEAD"))?;
        let checked_out: Vec<String> = [self.operator_head.as_ref(), now.as_ref()]
            .into_iter()
            .flatten()
            .filter_map(|bytes| {
                let text = std::str::from_utf8(bytes).ok()?;
                text.trim().strip_prefix(SYMREF).map(str::to_owned)
            })
            .collect();
        for change in &report.left_for_other_runs.clone() {
            let (Some(before), Some(after)) = (&change.before, &change.after) else {
                continue;
            };
            if !checked_out.contains(&change.refname) {
                continue;
            }
            let names = self.workspace.repo_git.bytes([
                "diff",
                "--name-only",
                "--no-renames",
                "-z",
                before.as_str(),
                after.as_str(),
            ])?;
            let moved: Vec<String> = names
                .split(|byte| *byte == 0)
                .filter(|name| !name.is_empty())
                .map(|name| String::from_utf8_lossy(name).into_owned())
                .collect();
            report
                .operator_checkout_changed
                .retain(|path| !moved.contains(path));
        }
        Ok(())
    }
}
