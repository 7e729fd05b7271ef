//! The refs the guard watches besides the protected ones: the operator's other branches and
//! other runs' refs. An agent could move or delete them unreported: rewind a branch of the
//! operator's (its tip lost), or point another run's snapshot refs and work branch at a commit
//! of its own, so that the operator's later `rollback <other run> --target pre_run` (or a gate
//! decision of that run) landed on the agent's files.
//!
//! - A branch of the operator's that existed before the step and was moved or deleted is put
//!   back ([`RefClass::OperatorBranch`]). A new branch is the agent's own: left alone (its
//!   commits count in `commits`).
//! - Another run's refs (`refs/tnh/runs/<id>/…`, `refs/heads/tnh/<workflow>/<id>`) that
//!   changed are put back ([`RefClass::OtherRun`]) — unless that run was being driven
//!   meanwhile: its lock (`<repo>/.tnh/run/<id>/lock`) held before or after the step, or
//!   taken in between (taking it rewrites the file). A run working beside this one moves its
//!   own refs; those changes are listed in `other_runs_refs_changed`, not put back. A run
//!   that appears during the step (no refs before) is new, and listed the same way. Anything
//!   else under `refs/tnh/` belongs to no run and is always put back.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{GuardReport, RefClass, RefGuard, SYMREF};
use crate::workspace::error::WorkspaceError;
use crate::workspace::operator_checkout::FileIdentity;
use crate::workspace::runs::runs_dir;

/// Whether another run was being driven, as far as its lock file tells.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunActivity {
    /// The identity of the run's lock file (`null`: none). Taking the lock rewrites the file
    /// (the driver writes its pid), so a changed identity means it was taken meanwhile.
    pub lock: Option<FileIdentity>,
    /// Whether a process held the lock.
    pub driven: bool,
}

impl RunActivity {
    pub(super) fn of(
        repo_root: &std::path::Path,
        run_id: &str,
        table: &crate::artifacts::lock::LockTable,
    ) -> Self {
        if run_id.is_empty() {
            // Refs under `refs/tnh/` of no run: nobody drives them.
            return Self {
                lock: None,
                driven: false,
            };
        }
        let lock = crate::artifacts::RunDir::at(runs_dir(repo_root).join(run_id)).lock();
        Self {
            lock: FileIdentity::of(&lock),
            driven: table.is_held(&lock),
        }
    }
}

impl RefGuard {
    /// The run a ref belongs to when it is another run's: `<id>` of `refs/tnh/runs/<id>/…`
    /// or of `refs/heads/tnh/…/<id>`; `""` for anything else under `refs/tnh/`; `None` for
    /// the operator's refs and this run's.
    pub(super) fn other_run(&self, name: &str) -> Option<String> {
        if *name == self.workspace.branch_ref() {
            return None;
        }
        if let Some(branch) = name.strip_prefix("refs/heads/tnh/") {
            return branch.rsplit('/').next().map(str::to_owned);
        }
        let under = name.strip_prefix("refs/tnh/")?;
        match under
            .strip_prefix("runs/")
            .and_then(|rest| rest.split_once('/'))
        {
            Some((run, _)) if run == self.workspace.run_id().as_str() => None,
            Some((run, _)) => Some(run.to_owned()),
            None => Some(String::new()),
        }
    }

    /// Whether `run`, which had no loose ref before the step, had packed ones (it had
    /// finished; `name` is the ref that changed): unlike a run started during the step.
    fn settled(&self, run: &str, name: &str) -> bool {
        self.packed.refs.contains_key(name)
            || self
                .packed
                .under(&format!("refs/tnh/runs/{run}/"))
                .next()
                .is_some()
    }

    /// Whether a finished run, whose lock the guard did not record, was left alone during the
    /// step: its lock not held now, nor taken since the step started (taking it rewrites the
    /// file, which moves its change time; a margin covers the coarse clock file times are
    /// stamped with).
    fn left_alone_since_start(&self, current: &RunActivity) -> bool {
        const MARGIN_NS: i128 = 100_000_000;
        let Some(started) = self.started_ns else {
            return false;
        };
        !current.driven
            && current
                .lock
                .is_none_or(|lock| lock.changed_at_ns() < i128::from(started) - MARGIN_NS)
    }

    /// Whether the other runs that have refs now are being driven, and their lock files.
    pub(super) fn run_activity(&self) -> BTreeMap<String, RunActivity> {
        let runs: BTreeSet<String> = self
            .others
            .keys()
            .filter_map(|name| self.other_run(name))
            .collect();
        let root = &self.workspace.record().repo_root;
        let table = crate::artifacts::lock::LockTable::read();
        runs.into_iter()
            .map(|run| {
                let activity = RunActivity::of(root, &run, &table);
                (run, activity)
            })
            .collect()
    }

    /// Puts back the operator's branches the step moved or deleted, and other runs' refs it
    /// changed while those runs were not driven; reports both. (A ref made a symbolic ref is
    /// put back by `compare_other_refs`.)
    pub(super) fn compare_branches_and_other_runs(
        &self,
        before_step: &BTreeMap<String, String>,
        after: &BTreeMap<String, String>,
        beside: &super::beside::Beside<'_>,
        report: &mut GuardReport,
    ) -> Result<(), WorkspaceError> {
        let work_branch = self.workspace.branch_ref();
        let root = &self.workspace.record().repo_root;
        let names: BTreeSet<&String> = before_step.keys().chain(after.keys()).collect();
        let mut activity_now: BTreeMap<String, RunActivity> = BTreeMap::new();
        let table = std::cell::OnceCell::new();
        for name in names {
            let before = before_step.get(name);
            let now = after.get(name);
            let made_symbolic = now.is_some_and(|value| value.starts_with(SYMREF));
            if *name == work_branch || before == now || made_symbolic {
                continue;
            }
            let class = match self.other_run(name) {
                Some(run) => {
                    let current = activity_now.entry(run.clone()).or_insert_with(|| {
                        let table = table.get_or_init(crate::artifacts::lock::LockTable::read);
                        RunActivity::of(root, &run, table)
                    });
                    let left_alone = match self.other_runs.get(&run) {
                        Some(recorded) => {
                            !recorded.driven && !current.driven && recorded.lock == current.lock
                        }
                        None => self.settled(&run, name) && self.left_alone_since_start(current),
                    };
                    if !left_alone {
                        report.other_runs_refs_changed.push(name.clone());
                        continue;
                    }
                    RefClass::OtherRun
                }
                // A new branch: the agent's own.
                None if before.is_none() => continue,
                None => {
                    if let Some(run) = beside.attribute(before, now)? {
                        report.left_for(name, run, before, now);
                        continue;
                    }
                    RefClass::OperatorBranch
                }
            };
            self.put_back(report, name, class, before, now)?;
        }
        Ok(())
    }
}
