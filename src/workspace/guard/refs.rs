//! The refs a guard compares: one listing of the repository's refs (with this run's packed
//! ones), split into the guarded refs and the others, compared with what was recorded before
//! the step and put back; and the commits the step made.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use super::super::error::WorkspaceError;
use super::super::snapshot::refs_prefix;
use super::{GuardReport, LeftForRun, RefChange, RefClass, RefGuard, beside, packed};

/// How a symbolic ref's value is written in a listing: `ref: refs/heads/main`.
pub(super) const SYMREF: &str = "ref: ";

/// The stash, shared by every worktree of the repository.
pub(super) const STASH: &str = "refs/stash";

/// Refs as `git for-each-ref` lists them.
#[derive(Debug, Default)]
pub(super) struct Listing {
    /// Name → commit, or `ref: NAME` for a symbolic ref.
    pub(super) values: BTreeMap<String, String>,
    /// Name → the commit it resolves to (symbolic refs followed).
    pub(super) resolved: BTreeMap<String, String>,
}

pub(super) fn compile_branch_globs(names: &[String]) -> Result<GlobSet, WorkspaceError> {
    let mut builder = GlobSetBuilder::new();
    for name in names {
        let glob = GlobBuilder::new(name)
            .literal_separator(true)
            .build()
            .map_err(|error| WorkspaceError::InvalidProtectedBranch {
                pattern: name.clone(),
                reason: error.kind().to_string(),
            })?;
        builder.add(glob);
    }
    builder
        .build()
        .map_err(|error| WorkspaceError::InvalidProtectedBranch {
            pattern: names.join(", "),
            reason: error.to_string(),
        })
}

impl RefGuard {
    /// Every branch, tag, remote-tracking, replace and notes ref, the stash, this run's refs
    /// and the loose refs of the other runs ([`packed`]: the runs going on), with the runs'
    /// packed refs as they were read after the loose ones: git writes `packed-refs` before it
    /// removes the loose refs it packed, so a run packing its refs meanwhile never makes one
    /// look deleted.
    pub(super) fn list_refs(
        &self,
    ) -> Result<(Listing, std::sync::Arc<packed::PackedRuns>), WorkspaceError> {
        let mut args = vec![
            "for-each-ref",
            "--format=%(objectname) %(refname) %(symref)",
        ];
        let exclude = super::super::git::supports_ref_exclude();
        if exclude {
            args.push("--exclude=refs/heads/tnh/");
        }
        args.extend([
            "refs/heads/",
            "refs/tags/",
            "refs/remotes/",
            "refs/replace/",
            "refs/notes/",
            "refs/stash",
        ]);
        let listing = self.workspace.repo_git.text(&args)?;
        let mut result = Listing::default();
        for line in listing.lines() {
            let mut fields = line.splitn(3, ' ');
            let (Some(sha), Some(name)) = (fields.next(), fields.next()) else {
                continue;
            };
            if !exclude && packed::is_run_ref(name) {
                continue;
            }
            let target = fields.next().unwrap_or_default();
            let value = if target.is_empty() {
                sha.to_owned()
            } else {
                format!("{SYMREF}{target}")
            };
            result.values.insert(name.to_owned(), value);
            if !sha.is_empty() {
                result.resolved.insert(name.to_owned(), sha.to_owned());
            }
        }
        let loose = packed::loose(&self.workspace.common_dir)?;
        let packed = packed::current(&self.workspace.common_dir)?;
        let own = format!("{}/", refs_prefix(self.workspace.run_id()));
        let branch = self.workspace.branch_ref();
        let own_packed = packed
            .under(&own)
            .chain(packed.refs.get_key_value(&branch))
            .filter(|(name, _)| !loose.contains_key(*name));
        let runs: Vec<(String, String)> = loose
            .iter()
            .chain(own_packed)
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        for (name, value) in runs {
            let resolved = match value.strip_prefix(SYMREF) {
                Some(target) => result
                    .resolved
                    .get(target)
                    .or_else(|| loose.get(target).filter(|sha| packed::is_object_name(sha)))
                    .or_else(|| packed.refs.get(target))
                    .cloned(),
                None => Some(value.clone()).filter(|sha| packed::is_object_name(sha)),
            };
            if let Some(sha) = resolved {
                result.resolved.insert(name.clone(), sha);
            }
            result.values.insert(name, value);
        }
        Ok((result, packed))
    }

    /// A listing split into the guarded refs (protected branches, tags, remote-tracking,
    /// replace and the run's snapshot refs, the stash) and the others (other branches, other
    /// runs' refs: see [`foreign`](super::foreign)).
    pub(super) fn split(
        &self,
        mut listing: BTreeMap<String, String>,
    ) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
        let work_branch = self.workspace.branch_ref();
        let own = format!("{}/", refs_prefix(self.workspace.run_id()));
        let others = listing
            .extract_if(.., |name, _| {
                *name == work_branch
                    || name
                        .strip_prefix("refs/heads/")
                        .is_some_and(|branch| !self.protected.is_match(branch))
                    || (name.starts_with("refs/tnh/") && !name.starts_with(&own))
            })
            .collect();
        (listing, others)
    }

    /// The other refs before and after the step (`after` as listed now, `now` the runs'
    /// packed refs now): where another run's loose ref came or went, the packed value it
    /// stood over or left is what it was or is; and when `packed-refs` changed, each packed
    /// ref of another run that changed with it.
    pub(super) fn settle(
        &self,
        mut after: BTreeMap<String, String>,
        now: &packed::PackedRuns,
    ) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
        let mut before = self.others.clone();
        let came: Vec<String> = after
            .keys()
            .filter(|name| packed::is_run_ref(name) && !before.contains_key(*name))
            .cloned()
            .collect();
        for name in came {
            if let Some(value) = self.packed.refs.get(&name) {
                before.insert(name, value.clone());
            }
        }
        let went: Vec<String> = before
            .keys()
            .filter(|name| packed::is_run_ref(name) && !after.contains_key(*name))
            .cloned()
            .collect();
        for name in went {
            if let Some(value) = now.refs.get(&name) {
                after.insert(name, value.clone());
            }
        }
        if !super::packed::same_file(now.identity.as_ref(), self.packed.identity.as_ref()) {
            let names: BTreeSet<&String> = self.packed.refs.keys().chain(now.refs.keys()).collect();
            for name in names {
                let (was, is) = (self.packed.refs.get(name), now.refs.get(name));
                if was == is
                    || before.contains_key(name)
                    || after.contains_key(name)
                    || self.is_own_ref(name)
                {
                    continue;
                }
                if let Some(value) = was {
                    before.insert(name.clone(), value.clone());
                }
                if let Some(value) = is {
                    after.insert(name.clone(), value.clone());
                }
            }
        }
        (before, after)
    }

    pub(super) fn compare_refs(
        &self,
        after: &BTreeMap<String, String>,
        beside: &beside::Beside<'_>,
        report: &mut GuardReport,
    ) -> Result<(), WorkspaceError> {
        let names: BTreeSet<&String> = self.refs.keys().chain(after.keys()).collect();
        for name in names {
            let before = self.refs.get(name);
            let now = after.get(name);
            if before == now {
                continue;
            }
            let class = if now.is_some_and(|value| value.starts_with(SYMREF)) {
                RefClass::SymbolicRef
            } else if name.starts_with("refs/tags/") {
                RefClass::Tag
            } else if name.starts_with("refs/tnh/") {
                RefClass::Snapshot
            } else if name.starts_with("refs/replace/") {
                RefClass::Replace
            } else if name.starts_with("refs/notes/") {
                RefClass::Notes
            } else if name == "refs/stash" {
                RefClass::Stash
            } else if name.starts_with("refs/remotes/") {
                report.remote_refs_changed.push(name.clone());
                continue;
            } else {
                RefClass::ProtectedBranch
            };
            if matches!(class, RefClass::ProtectedBranch | RefClass::Tag)
                && let Some(run) = beside.attribute(before, now)?
            {
                report.left_for(name, run, before, now);
                continue;
            }
            self.put_back(report, name, class, before, now)?;
        }
        Ok(())
    }

    /// Refs outside the guarded ones that became symbolic refs (or name another ref now) are
    /// put back as they were: a plain ref, or none.
    pub(super) fn compare_other_refs(
        &self,
        before: &BTreeMap<String, String>,
        after: &BTreeMap<String, String>,
        report: &mut GuardReport,
    ) -> Result<(), WorkspaceError> {
        for (name, now) in after {
            let before = before.get(name);
            if !now.starts_with(SYMREF) || before == Some(now) {
                continue;
            }
            self.put_back(report, name, RefClass::SymbolicRef, before, Some(now))?;
        }
        Ok(())
    }

    /// Puts ref `name` back to `before` and reports the change (`class`, from `before` to
    /// `now`) as restored.
    pub(super) fn put_back(
        &self,
        report: &mut GuardReport,
        name: &str,
        class: RefClass,
        before: Option<&String>,
        now: Option<&String>,
    ) -> Result<(), WorkspaceError> {
        let Some(restore) = self.scope.of_ref(self.is_own_ref(name)) else {
            return Ok(());
        };
        // A loose ref file that held no ref before the step (garbled) cannot be written back:
        // the change is reported, not put back.
        let restore = restore
            && before
                .is_none_or(|value| value.starts_with(SYMREF) || packed::is_object_name(value));
        if restore {
            self.restore_ref(name, before)?;
        }
        report.ref_changes.push(RefChange {
            refname: name.to_owned(),
            class,
            before: before.cloned(),
            after: now.cloned(),
            restored: restore,
        });
        Ok(())
    }

    /// Puts a ref back as it was, never writing through it (it may be a symbolic ref the
    /// agent made to name another ref, `main`).
    pub(super) fn restore_ref(
        &self,
        name: &str,
        value: Option<&String>,
    ) -> Result<(), WorkspaceError> {
        let git = &self.workspace.repo_git;
        let message = "tnh: restore protected ref";
        match value {
            Some(value) => match value.strip_prefix(SYMREF) {
                Some(target) => git.run(["symbolic-ref", "-m", message, name, target]),
                None => git.run(["update-ref", "--no-deref", "-m", message, name, value]),
            },
            None => git.run(["update-ref", "--no-deref", "-d", name]),
        }
    }

    /// The stash's reflog, which holds every entry below the top one.
    pub(super) fn stash_log(&self) -> PathBuf {
        self.workspace.common_dir.join("logs").join(STASH)
    }

    /// Commits reachable from the worktree's HEAD or any branch now that were not reachable
    /// from a listed ref before the step: commits on the work branch, on a protected branch
    /// (although it was put back) or on any other branch, new or not.
    pub(super) fn count_new_commits(
        &self,
        head_now: Option<String>,
        listing: &Listing,
        left: &[LeftForRun],
    ) -> Result<u64, WorkspaceError> {
        let mut tips: BTreeSet<String> = head_now.into_iter().collect();
        // Other runs' work branches are theirs: a run working beside this one commits there;
        // so are the branches moved to their commits, left for their guards.
        let work_branch = self.workspace.branch_ref();
        tips.extend(
            listing
                .resolved
                .iter()
                .filter(|(name, _)| {
                    name.starts_with("refs/heads/")
                        && (!name.starts_with("refs/heads/tnh/") || **name == work_branch)
                        && !left.iter().any(|change| change.refname == **name)
                })
                .map(|(_, sha)| sha.clone()),
        );
        let known: BTreeSet<&String> = self
            .refs
            .values()
            .chain(self.others.values())
            .chain(self.packed.refs.values())
            .filter(|value| !value.starts_with(SYMREF))
            .chain(std::iter::once(&self.worktree_head))
            .collect();
        tips.retain(|tip| !tip.is_empty() && !known.contains(tip));
        if tips.is_empty() {
            return Ok(0);
        }
        // On stdin: a repository keeping thousands of runs knows too many commits for a
        // command line.
        let mut revisions = String::new();
        for tip in &tips {
            revisions.push_str(tip);
            revisions.push('\n');
        }
        for sha in &known {
            revisions.push('^');
            revisions.push_str(sha);
            revisions.push('\n');
        }
        let count = self
            .workspace
            .repo_git
            .text_with_input(["rev-list", "--count", "--stdin"], revisions.as_bytes())?;
        count.parse().map_err(|_| WorkspaceError::Parse {
            command: "rev-list --count",
            detail: count.clone(),
        })
    }
}
