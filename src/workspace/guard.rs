//! Protected refs and repository configuration, checked around each mutable step.
//!
//! Before a step, [`Workspace::guard`] records protected branches (`main`, `master`, the
//! configured names and globs, the operator's current branch), every tag, remote-tracking
//! refs, the operator's and the worktree's HEAD, the work branch tip, the files that change
//! what git does — under `.git` (`config`, `config.worktree`, `info/exclude`,
//! `info/attributes`, `hooks/*`) and the operator's git configuration with the files it names
//! (`git_config.rs`) — and the operator's checkout (`operator_checkout.rs`). After the step,
//! [`RefGuard::verify`] compares: a moved, created or deleted protected branch or tag is put
//! back and reported; the worktree's HEAD is re-attached to the work branch; changed git
//! configuration is restored and reported; a moved operator HEAD, new commits, moved
//! remote-tracking refs and changed files of the operator's checkout are reported so policy
//! can classify them. Writing a protected ref or a git configuration file back is the only
//! write this module makes outside the work branch, and it only ever undoes a change made
//! during the step. What the guard recorded ([`GuardState`]) can be saved and loaded, so a
//! step whose process died is still checked. With runs side by side, what the repository's
//! runs share is settled with the other runs' guards ([`shared`]: a change to a shared git
//! file one guard put back is charged to every run whose step saw it), and the report names
//! the other runs driven during the step (`other_runs_driven`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use globset::GlobSet;

use super::access::restore_root_access;
use super::error::WorkspaceError;
use super::operator_checkout::{self, CheckoutState, FileIdentity};
use super::worktree::Workspace;

mod beside;
mod commits;
mod files;
mod foreign;
mod head;
mod packed;
mod refs;
mod report;
mod scope;
mod shared;
mod state;
pub use beside::LeftForRun;
pub use commits::{BranchMove, CommittedChange};
pub use foreign::RunActivity;
pub use report::{Checked, GuardReport, RefChange, RefClass};
pub use scope::Scope;
pub use shared::{SHARED_CHANGES_DIR, SharedChange};
pub use state::{
    Bytes, CheckoutEntry, GUARD_STATE_FILE, GUARD_STATE_SCHEMA_VERSION, GuardState, GuardedFile,
};

use super::snapshot::refs_prefix;
use files::{WATCHED_FILE_LIMIT, module_git_dirs, read_optional};
use head::{Head, head_commit};
use refs::{Listing, STASH, SYMREF, compile_branch_globs};

/// How `git_config_changed` names the worktree's `.git` file.
pub const GIT_LINK: &str = ".git (the worktree's link to its repository)";

/// How the conductor's scratch index is named in a guard report when the step touched it.
pub const SCRATCH_INDEX: &str = "worktree/tnh-scratch-index (the conductor's, rebuilt)";

/// Branch names protected whatever the configuration says.
pub const ALWAYS_PROTECTED: [&str; 2] = ["main", "master"];

/// The guarded state recorded before a step.
#[derive(Debug, Clone)]
pub struct RefGuard {
    workspace: Workspace,
    /// The protected branch names and globs `protected` was compiled from.
    names: Vec<String>,
    protected: GlobSet,
    refs: BTreeMap<String, String>,
    /// The refs listed that are not guarded (other branches, the work branch among them) or
    /// guarded by [`foreign`] (the operator's other branches, other runs' refs).
    others: BTreeMap<String, String>,
    /// Other runs with loose refs (runs going on), and whether each was being driven before
    /// the step.
    other_runs: BTreeMap<String, RunActivity>,
    /// The runs' refs packed in `packed-refs` before the step ([`packed`]).
    packed: Arc<packed::PackedRuns>,
    operator_head: Option<Vec<u8>>,
    worktree_head: String,
    files: BTreeMap<PathBuf, Option<Vec<u8>>>,
    /// The guarded paths that were symlinks, and where they pointed (`~/.gitconfig` kept in
    /// a dotfiles folder): put back as links, never written through a link the agent made.
    links: BTreeMap<PathBuf, PathBuf>,
    /// Folders of hooks the configuration names (`core.hooksPath`), besides `.git/hooks`.
    hook_dirs: BTreeSet<PathBuf>,
    /// The submodules' repositories that existed before the step: their configuration and
    /// hooks run in the operator's next `git submodule update`. (One the agent adds is its
    /// own business.)
    module_dirs: Vec<PathBuf>,
    /// The operator's checkout before the step.
    checkout: CheckoutState,
    /// The scratch index as the conductor left it before the step.
    scratch: Option<FileIdentity>,
    /// What a check compares and writes back ([`Scope`]).
    scope: Scope,
    /// When the guard started recording, in nanoseconds since the Unix epoch (`None`: a state
    /// saved before this was recorded).
    started_ns: Option<u64>,
}

impl Workspace {
    /// Records the guarded state before a step. `configured` are branch names or globs
    /// (`release/*`; `*` does not cross `/`) protected in addition to `main`, `master` and the
    /// operator's current branch.
    pub fn guard(&self, configured: &[String]) -> Result<RefGuard, WorkspaceError> {
        // Before anything is read: a notice written after this covers every file read below.
        let started_ns = shared::now_ns();
        let operator_head_path = self.common_dir.join("HEAD");
        let operator_head = read_optional(&operator_head_path)?;
        let mut names: Vec<String> = ALWAYS_PROTECTED
            .iter()
            .map(|name| (*name).to_owned())
            .collect();
        names.extend(configured.iter().cloned());
        if let Some(branch) = operator_head
            .as_deref()
            .and_then(|bytes| std::str::from_utf8(bytes).ok())
            .and_then(|text| text.trim().strip_prefix("ref: refs/heads/"))
        {
            names.push(globset::escape(branch));
        }
        let protected = compile_branch_globs(&names)?;
        let mut guard = RefGuard {
            workspace: self.clone(),
            names,
            protected,
            refs: BTreeMap::new(),
            others: BTreeMap::new(),
            other_runs: BTreeMap::new(),
            packed: Arc::default(),
            operator_head,
            worktree_head: String::new(),
            files: BTreeMap::new(),
            links: BTreeMap::new(),
            hook_dirs: BTreeSet::new(),
            module_dirs: module_git_dirs(&self.common_dir),
            checkout: match self.take_remembered_checkout() {
                Some(checkout) => checkout,
                None => operator_checkout::state(
                    &self.repo_git,
                    &self.record().repo_root,
                    &self.common_dir,
                )?,
            },
            scratch: FileIdentity::of(&self.scratch_index()),
            scope: Scope::Everything,
            started_ns: Some(started_ns),
        };
        let (listing, packed) = guard.list_refs()?;
        packed::keep_before(
            &self.common_dir,
            self.run_id().as_str(),
            packed.identity.as_ref(),
        );
        guard.packed = packed;
        guard.worktree_head = match head_commit(&guard.workspace.read_head(), &listing.resolved) {
            Some(commit) => commit,
            None => self.git.text(["rev-parse", "--verify", "HEAD^{commit}"])?,
        };
        (guard.refs, guard.others) = guard.split(listing.values);
        guard.other_runs = guard.run_activity();
        // Files the configuration names are recorded now and only now: a name the agent adds
        // is undone with the configuration that holds it, and must not make the guard
        // "restore" (remove) a file it never recorded.
        let configured = self.configured()?;
        guard.hook_dirs = configured.hook_dirs;
        for path in configured.files {
            // A name that is not a readable file (a folder, no permission) is git's problem,
            // not something to restore.
            if let Ok(contents) = read_optional(&path) {
                guard.files.insert(path, contents);
            }
        }
        for path in guard.guarded_files()? {
            let contents = read_optional(&path)?;
            guard.files.insert(path, contents);
        }
        guard.links = guard
            .files
            .keys()
            .filter_map(|path| Some((path.clone(), std::fs::read_link(path).ok()?)))
            .collect();
        Ok(guard)
    }
}

impl RefGuard {
    /// Compares with the state recorded before the step, puts protected refs, the worktree's
    /// HEAD and git configuration back, and reports what the step did.
    pub fn verify(&self) -> Result<GuardReport, WorkspaceError> {
        self.check().map(|checked| checked.report)
    }

    /// [`verify`](Self::verify), also returning the worktree's HEAD commit afterwards.
    ///
    /// The refs are listed by one `git for-each-ref` and the worktree's HEAD is read from its
    /// `HEAD` file, so a clean step costs one git process; git is asked directly only where
    /// the file says something else than a branch or a commit.
    pub fn check(&self) -> Result<Checked, WorkspaceError> {
        // Locks a killed git command left would make the ref updates below fail.
        let mut report = GuardReport {
            stale_locks_removed: self.workspace.remove_stale_locks()?,
            ..GuardReport::default()
        };
        // Git reads its configuration in every command: a FIFO (or a link to one, or to a
        // device) the agent left in the place of a watched file would hang the first one.
        let watched = self.watched_paths()?;
        let mut shared = shared::Shared::new(self, true);
        self.clear_special_files(&watched, &mut report, &shared)?;
        // What lives in the repository first, with git run there: that does not depend on
        // the state the agent left its worktree in (deleted, its HEAD garbled).
        let (listing, packed_now) = self.list_refs()?;
        shared.add_listing(&listing);
        report.other_runs_driven = shared.driven().to_vec();
        let (mut guarded, others) = self.split(listing.values.clone());
        let (others_before, others) = self.settle(others, &packed_now);
        let beside = beside::Beside::new(self, &listing);
        // Stash entries other runs made stay; the stash is then settled here.
        let stash_log = self.compare_stash(&guarded, &beside, &mut report)?;
        if stash_log.is_some() {
            match self.refs.get(STASH) {
                Some(before) => guarded.insert(STASH.to_owned(), before.clone()),
                None => guarded.remove(STASH),
            };
        }
        self.compare_refs(&guarded, &beside, &mut report)?;
        self.compare_other_refs(&others_before, &others, &mut report)?;
        self.compare_branches_and_other_runs(&others_before, &others, &beside, &mut report)?;
        self.check_operator_head(&mut report)?;
        let stash_log = stash_log.map(|contents| (self.stash_log(), contents));
        self.restore_files(&watched, &mut report, stash_log, &mut shared)?;
        self.clean_notices();
        let checkout = operator_checkout::state(
            &self.workspace.repo_git,
            &self.workspace.record().repo_root,
            &self.workspace.common_dir,
        )?;
        report.operator_checkout_changed = operator_checkout::changed(&self.checkout, &checkout);
        // The next step's guard starts from it when nothing runs in between.
        self.workspace.remember_checkout(checkout);
        self.forget_checkout_changes_left_for_other_runs(&mut report)?;
        self.restore_worktree(&mut report)?;
        let head = self.workspace.read_head();
        let branch_ref = self.workspace.branch_ref();
        // A work branch made a symbolic ref was put back where it was.
        let branch_now = match others.get(&branch_ref) {
            Some(value) if value.starts_with(SYMREF) => self.others.get(&branch_ref).cloned(),
            _ => listing.resolved.get(&branch_ref).cloned(),
        };
        let head_now = head_commit(&head, &listing.resolved).or_else(|| {
            self.workspace
                .git
                .text(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])
                .ok()
        });
        let attached = self.workspace.head_on_work_branch(&head);
        report.commits = self.count_new_commits(head_now, &listing, &report.left_for_other_runs)?;
        self.reattach_worktree_head(attached, branch_now.is_some(), &mut report)?;
        report.work_branch_moved = branch_now
            .as_ref()
            .filter(|after| **after != self.worktree_head)
            .map(|after| BranchMove {
                before: self.worktree_head.clone(),
                after: after.clone(),
            });
        packed::forget_before(&self.workspace.common_dir, self.workspace.run_id().as_str());
        Ok(Checked {
            report,
            // Re-attached to the work branch, which was recreated at the old HEAD if it was gone.
            head: branch_now.unwrap_or_else(|| self.worktree_head.clone()),
        })
    }

    /// Then the worktree: checked out again when it is gone or displaced, its folder's access
    /// given back, its git folder and `.git` link made whole, and the conductor's scratch
    /// index rebuilt when the step touched it.
    fn restore_worktree(&self, report: &mut GuardReport) -> Result<(), WorkspaceError> {
        if self.workspace.worktree_displaced_or_gone()? {
            Workspace::open_or_recreate(self.workspace.record())?;
            report.worktree_recreated = true;
        }
        report.worktree_access_restored = restore_root_access(self.workspace.path())?;
        // The worktree's folder in the repository (`.git/worktrees/<run_id>`) deleted: its
        // `commondir` and `gitdir` are back (restored above); HEAD and an index make it a
        // worktree git works in again.
        let admin = &self.workspace.worktree_git_dir;
        if !admin.join("HEAD").exists() {
            std::fs::create_dir_all(admin)
                .map_err(|source| WorkspaceError::io("restore", admin, source))?;
            self.workspace.attach_head()?;
            if !admin.join("index").exists() {
                self.workspace
                    .git
                    .run(["read-tree", self.worktree_head.as_str()])?;
            }
            report.worktree_recreated = true;
        }
        if self.workspace.repair_git_link()? {
            report.git_config_changed.push(GIT_LINK.to_owned());
        }
        // The scratch index is the conductor's: touched during the step, its stat data (or
        // its flags) may hide a change, so it is rebuilt from the files themselves.
        if FileIdentity::of(&self.workspace.scratch_index()) != self.scratch {
            self.workspace.rebuild_scratch_index(&self.worktree_head)?;
            report.git_config_changed.push(SCRATCH_INDEX.to_owned());
        }
        Ok(())
    }
}
