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
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use serde::{Deserialize, Serialize};

use super::access::restore_root_access;
use super::error::WorkspaceError;
use super::git_config;
use super::operator_checkout::{self, CheckoutState, FileIdentity};
use super::snapshot::refs_prefix;
use super::worktree::Workspace;

mod beside;
mod commits;
mod foreign;
mod packed;
mod scope;
mod shared;
pub use beside::LeftForRun;
pub use commits::{BranchMove, CommittedChange};
pub use foreign::RunActivity;
pub use scope::Scope;
pub use shared::{SHARED_CHANGES_DIR, SharedChange};

/// How `git_config_changed` names the worktree's `.git` file.
pub const GIT_LINK: &str = ".git (the worktree's link to its repository)";

/// How the conductor's scratch index is named in a guard report when the step touched it.
pub const SCRATCH_INDEX: &str = "worktree/tnh-scratch-index (the conductor's, rebuilt)";

/// Branch names protected whatever the configuration says.
pub const ALWAYS_PROTECTED: [&str; 2] = ["main", "master"];

/// What kind of ref an agent changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RefClass {
    /// A protected branch (`refs/heads/…`).
    ProtectedBranch,
    /// A tag: created, moved or deleted.
    Tag,
    /// The HEAD of the operator's checkout (`refs/heads/…` it names, or a detached commit);
    /// reported but not put back, since the checkout's files moved with it.
    OperatorHead,
    /// One of the run's own snapshot refs (`refs/tnh/runs/<run_id>/…`): an agent that moved
    /// `pre_run` to a commit holding its change would have a rollback keep that change.
    Snapshot,
    /// A replace ref (`refs/replace/…`, made by `git replace`): it makes every git command
    /// read another object in place of the one named, `main`'s commit included.
    Replace,
    /// A notes ref (`refs/notes/…`, made by `git notes`): notes are shown beside commits by
    /// `git log` and travel with a push of the notes ref, so an agent could attach "reviewed
    /// and approved" to `main`'s commit. Put back.
    Notes,
    /// `refs/stash`, which every worktree shares with the operator's checkout: an agent's
    /// `git stash drop` or `clear` would lose the operator's stashed work.
    Stash,
    /// A ref made a symbolic ref (or pointed elsewhere as one), such as the work branch made
    /// to name `refs/heads/main`: git writes through it, so the next update of that ref (a
    /// commit, a rollback's reset) would move the ref it names. Put back as a plain ref.
    SymbolicRef,
    /// A branch of the operator's that is not protected, moved or deleted (a new one is the
    /// agent's own): the operator's refs are never moved. Put back.
    OperatorBranch,
    /// A ref of another run — its snapshot refs (`refs/tnh/runs/<other>/…`) or its work
    /// branch (`refs/heads/tnh/<workflow>/<other>`) — moved, created or deleted while that
    /// run was not being driven: a later `rollback` or gate decision of that run would land
    /// on what the agent put there. Put back.
    OtherRun,
}

/// A protected ref that changed during a step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RefChange {
    /// The full ref name (`refs/heads/main`, `refs/tags/v1`, `HEAD`).
    pub refname: String,
    /// Which kind of ref.
    pub class: RefClass,
    /// Value before the step (`null`: did not exist).
    pub before: Option<String>,
    /// Value after the step (`null`: deleted).
    pub after: Option<String>,
    /// Whether it was put back to `before`.
    pub restored: bool,
}

/// What a step did to refs and repository configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GuardReport {
    /// Protected branches and tags that changed (restored) and the operator's HEAD (reported).
    pub ref_changes: Vec<RefChange>,
    /// Commits the step created (on the work branch or wherever it moved HEAD).
    pub commits: u64,
    /// The work branch's tip before and after the step, when the step moved it (a commit, a
    /// reset, a merge): what the branch carries out of the run changed, so the paths those
    /// commits changed are judged by the policy too
    /// ([`Workspace::committed_changes`]). Absent when the branch did not move.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_branch_moved: Option<BranchMove>,
    /// The worktree's HEAD had left the work branch (or the branch was deleted) and was
    /// re-attached (the branch recreated where it was before the step).
    pub worktree_head_restored: bool,
    /// The agent had taken the owner's access to the worktree folder itself away
    /// (`chmod 000 .`); it was given back so the step could be checked.
    #[serde(default)]
    pub worktree_access_restored: bool,
    /// The worktree folder was gone after the step (`rm -rf` of it): the work branch was
    /// checked out there again, so the step could be checked; what it held uncommitted is
    /// lost.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub worktree_recreated: bool,
    /// Lock files an agent killed inside a git command left in the worktree's git folder or
    /// on the work branch, removed so that git works in the next step.
    #[serde(default)]
    pub stale_locks_removed: Vec<String>,
    /// Remote-tracking refs that moved: evidence of a push or fetch.
    pub remote_refs_changed: Vec<String>,
    /// Refs of other runs that changed while those runs were driven (their lock held, or
    /// taken, during the step): their own work, so not put back, but listed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_runs_refs_changed: Vec<String>,
    /// Protected branches, tags and branches of the operator's moved during the step to a
    /// commit of another run driven meanwhile (or away from one): that run's agent moved them,
    /// so they are left for that run's guard, which puts them back and charges that run. Not
    /// put back here, not a violation of this run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_for_other_runs: Vec<LeftForRun>,
    /// Git configuration files that changed and were restored: under `.git` (`config`,
    /// `hooks/pre-commit`, …), the worktree's `.git` file, and the operator's global and
    /// system configuration with the files it names (full paths, e.g. `/home/me/.gitconfig`).
    pub git_config_changed: Vec<String>,
    /// Git configuration files (as `git_config_changed` names them) that changed during the
    /// step and that the guard of another run, whose step ended first, found and put back
    /// before this run's guard looked: this run's agent may have changed them as well as any
    /// other run driven meanwhile, so this run answers for them too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub git_config_put_back_by_other_runs: Vec<SharedChange>,
    /// The other runs driven while the step ran (their lock held, or taken, meanwhile): their
    /// agents could have made the changes this report lists of what runs share (git
    /// configuration, the operator's checkout), and written into this run's worktree, where
    /// it looks like this run's work. Not a finding by itself.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_runs_driven: Vec<String>,
    /// Files of the operator's checkout (relative to the repository root) that were changed,
    /// created or deleted while the step ran: the agent wrote outside its worktree, or the
    /// operator edited the checkout meanwhile. Not put back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operator_checkout_changed: Vec<String>,
}

impl GuardReport {
    /// Records that the change of `refname` was left for run `run_id`.
    fn left_for(
        &mut self,
        refname: &str,
        run_id: String,
        before: Option<&String>,
        after: Option<&String>,
    ) {
        self.left_for_other_runs.push(LeftForRun {
            refname: refname.to_owned(),
            run_id,
            before: before.cloned(),
            after: after.cloned(),
        });
    }

    /// True when the step touched nothing guarded (the runs driven beside it are no
    /// finding).
    pub fn is_clean(&self) -> bool {
        GuardReport {
            other_runs_driven: Vec::new(),
            ..self.clone()
        } == GuardReport::default()
    }
}

/// What [`RefGuard::check`] found: the report, and the worktree's HEAD commit afterwards
/// (attached to the work branch again), which a checkpoint taken before anything else runs
/// reuses as its fingerprint's head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// What the step did to refs and repository configuration.
    pub report: GuardReport,
    /// The worktree's HEAD commit once the check put it back on the work branch.
    pub head: String,
}

/// Where the worktree's HEAD points, as its `HEAD` file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Head {
    /// `ref: <name>`.
    Attached(String),
    /// A commit id.
    Detached(String),
    /// Not readable as a file (a reftable repository, or something unexpected): ask git.
    Unknown,
}

impl Head {
    /// What a `HEAD` file of the files ref backend says: `ref: NAME`, a commit id, or
    /// something else (`Unknown`).
    pub(super) fn parse(text: &str) -> Head {
        let text = text.trim();
        if let Some(name) = text.strip_prefix(SYMREF) {
            return Head::Attached(name.to_owned());
        }
        let is_commit_id =
            matches!(text.len(), 40 | 64) && text.bytes().all(|byte| byte.is_ascii_hexdigit());
        if is_commit_id {
            Head::Detached(text.to_owned())
        } else {
            Head::Unknown
        }
    }
}

/// Version of `guard_state.json`.
pub const GUARD_STATE_SCHEMA_VERSION: u32 = 1;

/// What the guard recorded before an agent step (`guard_state.json` in the visit's folder,
/// written before the agent starts): what `resume` checks a step against when the process
/// that drove it died before it could. Paths and file contents are bytes, exactly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GuardState {
    /// The format's version.
    pub schema_version: u32,
    /// Protected branch names and globs.
    pub protected: Vec<String>,
    /// Protected branches, tags, remote-tracking refs and the run's snapshot refs: name →
    /// commit (`ref: NAME` for a symbolic ref).
    pub refs: BTreeMap<String, String>,
    /// The other branches (the work branch among them) and other runs' refs, the same way: a
    /// symbolic ref made of one is put back, a moved or deleted one of the operator's or of a
    /// run not driven meanwhile too.
    #[serde(default)]
    pub other_refs: BTreeMap<String, String>,
    /// The other runs that had refs, and whether each was being driven before the step.
    #[serde(default)]
    pub other_runs: BTreeMap<String, RunActivity>,
    /// The operator's `.git/HEAD` file.
    pub operator_head: Option<Bytes>,
    /// The worktree's HEAD commit.
    pub worktree_head: String,
    /// The guarded git configuration files and their contents (`null`: did not exist).
    pub files: Vec<GuardedFile>,
    /// The guarded paths that were symlinks: path and target.
    #[serde(default)]
    pub links: Vec<(Bytes, Bytes)>,
    /// Folders of hooks the configuration names.
    pub hook_dirs: Vec<Bytes>,
    /// The submodules' repositories.
    #[serde(default)]
    pub module_dirs: Vec<Bytes>,
    /// The operator's checkout: its changed and untracked files.
    pub checkout: Vec<CheckoutEntry>,
    /// The identity of the conductor's scratch index before the step.
    #[serde(default)]
    pub scratch_index: Option<FileIdentity>,
    /// When the guard started recording (nanoseconds since the Unix epoch): the notices other
    /// runs' guards write from then on tell of changes to shared files during the step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at_ns: Option<u64>,
    /// Which `packed-refs` the runs' packed refs were read from before the step (a version
    /// kept beside it by a hard link is compared with the one after).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packed_refs: Option<PackedRefsState>,
}

/// The `packed-refs` a guard recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PackedRefsState {
    /// Its identity (`null`: there was none).
    pub identity: Option<FileIdentity>,
}

/// Bytes kept exactly: as a string when they are UTF-8 (paths, configuration files almost
/// always are), else as an array of numbers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Bytes {
    /// UTF-8 text.
    Text(String),
    /// Anything else.
    Raw(Vec<u8>),
}

impl From<Vec<u8>> for Bytes {
    fn from(bytes: Vec<u8>) -> Self {
        match String::from_utf8(bytes) {
            Ok(text) => Bytes::Text(text),
            Err(error) => Bytes::Raw(error.into_bytes()),
        }
    }
}

impl From<Bytes> for Vec<u8> {
    fn from(bytes: Bytes) -> Self {
        match bytes {
            Bytes::Text(text) => text.into_bytes(),
            Bytes::Raw(raw) => raw,
        }
    }
}

/// A guarded file and its contents before the step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GuardedFile {
    /// Its path.
    pub path: Bytes,
    /// Its contents (`null`: it did not exist).
    pub contents: Option<Bytes>,
}

/// A changed or untracked file of the operator's checkout before the step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CheckoutEntry {
    /// Its path relative to the repository root.
    pub path: Bytes,
    /// What `git status --porcelain=v2` said of it, without the path.
    pub status: Bytes,
    /// Its file's identity (`null`: deleted).
    pub identity: Option<FileIdentity>,
}

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
        let packed = packed::current(&self.common_dir)?;
        packed::keep_before(
            &self.common_dir,
            self.run_id().as_str(),
            packed.identity.as_ref(),
        );
        let mut guard = RefGuard {
            workspace: self.clone(),
            names,
            protected,
            refs: BTreeMap::new(),
            others: BTreeMap::new(),
            other_runs: BTreeMap::new(),
            packed,
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
        let listing = guard.list_refs(&guard.packed)?;
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

impl Workspace {
    /// The guard recorded before a step, from the [`GuardState`] it saved: a step whose
    /// driving process died (a crash, or an agent that killed it) is checked on resume all the
    /// same.
    pub fn guard_from_state(&self, state: GuardState) -> Result<RefGuard, WorkspaceError> {
        if state.schema_version != GUARD_STATE_SCHEMA_VERSION {
            return Err(WorkspaceError::UnknownGuardState {
                version: state.schema_version,
            });
        }
        let path = |bytes: Bytes| PathBuf::from(std::ffi::OsString::from_vec(bytes.into()));
        // The packed refs as they were before the step, if the version kept is still there
        // (else, or for a state saved without it, those now: no packed ref is compared).
        let packed = match state.packed_refs.as_ref().and_then(|recorded| {
            packed::kept_before(
                &self.common_dir,
                self.run_id().as_str(),
                recorded.identity.as_ref(),
            )
        }) {
            Some(kept) => Arc::new(kept),
            None => packed::current(&self.common_dir)?,
        };
        Ok(RefGuard {
            packed,
            workspace: self.clone(),
            protected: compile_branch_globs(&state.protected)?,
            names: state.protected,
            refs: state.refs,
            others: state.other_refs,
            other_runs: state.other_runs,
            operator_head: state.operator_head.map(Vec::from),
            worktree_head: state.worktree_head,
            files: state
                .files
                .into_iter()
                .map(|file| (path(file.path), file.contents.map(Vec::from)))
                .collect(),
            links: state
                .links
                .into_iter()
                .map(|(link, target)| (path(link), path(target)))
                .collect(),
            hook_dirs: state.hook_dirs.into_iter().map(path).collect(),
            module_dirs: state.module_dirs.into_iter().map(path).collect(),
            checkout: state
                .checkout
                .into_iter()
                .map(|entry| (entry.path.into(), (entry.status.into(), entry.identity)))
                .collect(),
            scratch: state.scratch_index,
            scope: Scope::Everything,
            started_ns: state.started_at_ns,
        })
    }
}

pub use crate::artifacts::GUARD_STATE_FILE;

impl Workspace {
    /// The guard whose [`RefGuard::state`] was saved as JSON in `path`; `None` when there is
    /// no such file.
    pub fn load_guard(&self, path: &Path) -> Result<Option<RefGuard>, WorkspaceError> {
        let Some(bytes) = read_optional(path)? else {
            return Ok(None);
        };
        let state: GuardState =
            serde_json::from_slice(&bytes).map_err(|error| WorkspaceError::Io {
                action: "parse",
                path: path.to_owned(),
                source: std::io::Error::other(error.to_string()),
            })?;
        self.guard_from_state(state).map(Some)
    }
}

impl RefGuard {
    /// What the guard recorded, to be saved before the agent runs (readable by its owner
    /// only: it holds copies of the operator's git configuration), so that the step can be
    /// checked by [`Workspace::load_guard`] if the process driving it dies.
    pub fn state(&self) -> GuardState {
        let bytes = |path: &PathBuf| Bytes::from(path.as_os_str().as_bytes().to_vec());
        GuardState {
            schema_version: GUARD_STATE_SCHEMA_VERSION,
            protected: self.names.clone(),
            refs: self.refs.clone(),
            other_refs: self.others.clone(),
            other_runs: self.other_runs.clone(),
            operator_head: self.operator_head.clone().map(Bytes::from),
            worktree_head: self.worktree_head.clone(),
            files: self
                .files
                .iter()
                .map(|(path, contents)| GuardedFile {
                    path: bytes(path),
                    contents: contents.clone().map(Bytes::from),
                })
                .collect(),
            links: self
                .links
                .iter()
                .map(|(link, target)| (bytes(link), bytes(target)))
                .collect(),
            hook_dirs: self.hook_dirs.iter().map(bytes).collect(),
            module_dirs: self.module_dirs.iter().map(bytes).collect(),
            checkout: self
                .checkout
                .iter()
                .map(|(path, (status, identity))| CheckoutEntry {
                    path: path.clone().into(),
                    status: status.clone().into(),
                    identity: *identity,
                })
                .collect(),
            scratch_index: self.scratch,
            started_at_ns: self.started_ns,
            packed_refs: Some(PackedRefsState {
                identity: self.packed.identity,
            }),
        }
    }

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
        let packed_now = packed::current(&self.workspace.common_dir)?;
        let listing = self.list_refs(&packed_now)?;
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
        // Then the worktree.
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

    /// Refs outside the guarded ones that became symbolic refs (or name another ref now) are
    /// put back as they were: a plain ref, or none.
    fn compare_other_refs(
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

    fn compare_refs(
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

    /// Puts ref `name` back to `before` and reports the change (`class`, from `before` to
    /// `now`) as restored.
    fn put_back(
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
    fn restore_ref(&self, name: &str, value: Option<&String>) -> Result<(), WorkspaceError> {
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

    fn check_operator_head(&self, report: &mut GuardReport) -> Result<(), WorkspaceError> {
        let path = self.workspace.common_dir.join("HEAD");
        let now = read_optional(&path)?;
        if now == self.operator_head {
            return Ok(());
        }
        let text = |value: &Option<Vec<u8>>| {
            value
                .as_deref()
                .map(|bytes| String::from_utf8_lossy(bytes).trim().to_owned())
        };
        // Reported, not restored: whoever moved it also changed the checkout's files, and
        // putting HEAD back under them would leave the operator's checkout inconsistent.
        report.ref_changes.push(RefChange {
            refname: "HEAD".to_owned(),
            class: RefClass::OperatorHead,
            before: text(&self.operator_head),
            after: text(&now),
            restored: false,
        });
        Ok(())
    }

    /// Commits reachable from the worktree's HEAD or any branch now that were not reachable
    /// from a listed ref before the step: commits on the work branch, on a protected branch
    /// (although it was put back) or on any other branch, new or not.
    fn count_new_commits(
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

    fn reattach_worktree_head(
        &self,
        attached: bool,
        branch_exists: bool,
        report: &mut GuardReport,
    ) -> Result<(), WorkspaceError> {
        let branch_ref = self.workspace.branch_ref();
        if !branch_exists {
            // Without its branch the run could be neither resumed nor rolled back: recreate it
            // where HEAD was before the step.
            self.workspace.repo_git.run([
                "update-ref",
                "--no-deref",
                branch_ref.as_str(),
                self.worktree_head.as_str(),
            ])?;
            report.worktree_head_restored = true;
        }
        if !attached {
            self.workspace.attach_head()?;
            report.worktree_head_restored = true;
        }
        Ok(())
    }

    /// Every file the guard watches: those it recorded and those its configuration names now
    /// (a hook the agent added). Listed once per check, for [`Self::clear_special_files`] and
    /// [`Self::restore_files`].
    fn watched_paths(&self) -> Result<BTreeSet<PathBuf>, WorkspaceError> {
        let mut paths: BTreeSet<PathBuf> = self.files.keys().cloned().collect();
        paths.extend(self.guarded_files()?);
        Ok(paths)
    }

    /// Before any git command: each watched file that is now a link it was not, or neither a
    /// regular file nor a link (a FIFO, a socket, a device, a folder), is put back to a link
    /// as it was or removed (its contents are written back by [`Self::restore_files`]), and
    /// reported. A file that was already such an entry before the step is left alone.
    fn clear_special_files(
        &self,
        paths: &BTreeSet<PathBuf>,
        report: &mut GuardReport,
        shared: &shared::Shared<'_>,
    ) -> Result<(), WorkspaceError> {
        let stash_log = self.stash_log();
        for path in paths {
            let recorded_special = self
                .files
                .get(path)
                .is_some_and(|before| before.as_deref() == Some(NOT_A_REGULAR_FILE));
            let own = path.starts_with(&self.workspace.worktree_git_dir);
            let Some(restore) = self.scope.of_ref(own) else {
                continue;
            };
            if recorded_special {
                continue;
            }
            // A check that only compares (`resume` asking the operator first) still removes
            // what would hang git, and nothing else. A link of a file the runs share put back
            // is announced to them first.
            if restore
                && !own
                && *path != stash_log
                && std::fs::read_link(path).ok().as_ref() != self.links.get(path)
            {
                let found = read_optional(path)?;
                let recorded = self.files.get(path).cloned().flatten();
                let contents = (found.as_deref(), recorded.as_deref());
                shared.notify(path, &self.display_name(path), contents, true)?;
            }
            let mut changed = restore && self.restore_link(path)?;
            if let Ok(metadata) = path.symlink_metadata() {
                let kind = metadata.file_type();
                if kind.is_dir() && restore {
                    std::fs::remove_dir_all(path)
                        .map_err(|source| WorkspaceError::io("remove", path, source))?;
                    changed = true;
                } else if !kind.is_file() && !kind.is_symlink() {
                    std::fs::remove_file(path)
                        .map_err(|source| WorkspaceError::io("remove", path, source))?;
                    changed = true;
                }
            }
            if changed {
                report.git_config_changed.push(self.display_name(path));
            }
        }
        Ok(())
    }

    /// Puts the watched files back as they were; `settled` is a file and the contents it
    /// must have instead (the stash's reflog when it keeps other runs' entries). What this
    /// guard puts back of the files the repository's runs share is announced to the other
    /// runs first, and a change one of their guards put back during the step is this run's
    /// too ([`shared`]).
    fn restore_files(
        &self,
        paths: &BTreeSet<PathBuf>,
        report: &mut GuardReport,
        settled: Option<(PathBuf, Vec<u8>)>,
        shared: &mut shared::Shared<'_>,
    ) -> Result<(), WorkspaceError> {
        // The files first, then the notices: a file found put back comes with its notice
        // (written before the file was).
        let mut found = Vec::new();
        for path in paths.iter().cloned() {
            let own = path.starts_with(&self.workspace.worktree_git_dir);
            let Some(restore) = self.scope.of_ref(own) else {
                continue;
            };
            // The link first (a file the agent replaced by a symlink to another of the
            // operator's files must not be written through), then the contents.
            let link_changed = if restore {
                self.restore_link(&path)?
            } else {
                std::fs::read_link(&path).ok().as_ref() != self.links.get(&path)
            };
            let now = read_optional(&path)?;
            found.push((path, own, restore, link_changed, now));
        }
        shared.load();
        let stash_log = self.stash_log();
        let mut charged = Vec::new();
        for (path, own, restore, link_changed, now) in found {
            let name = self.display_name(&path);
            let before = match &settled {
                Some((settled, contents)) if *settled == path => Some(contents.clone()),
                _ => self.files.get(&path).cloned().flatten(),
            };
            let contents_changed = now != before;
            let is_shared = !own && path != stash_log;
            if contents_changed && restore && is_shared && !link_changed {
                // What this run recorded was a change another run's agent had made before
                // this step started, and that run's guard put it back since: writing the
                // record would bring the change back. Kept as put back, and charged.
                if let Some(change) = shared.put_back_before(&path, before.as_deref(), &now) {
                    charged.push(change);
                    continue;
                }
            }
            if contents_changed && restore {
                if is_shared {
                    let contents = (now.as_deref(), before.as_deref());
                    shared.notify(&path, &name, contents, false)?;
                }
                write_optional(&path, before.as_deref())?;
            }
            if (link_changed || contents_changed) && !report.git_config_changed.contains(&name) {
                report.git_config_changed.push(name);
            }
        }
        charged.extend(shared.charges(&self.files));
        for change in charged {
            if !report.git_config_changed.contains(&change.path) {
                report.git_config_put_back_by_other_runs.push(change);
            }
        }
        Ok(())
    }

    /// Puts back what `path` was as a link: the symlink it was (to the same target), or no
    /// symlink at all. True when it had changed.
    fn restore_link(&self, path: &Path) -> Result<bool, WorkspaceError> {
        let before = self.links.get(path);
        let now = std::fs::read_link(path).ok();
        if now.as_ref() == before {
            return Ok(false);
        }
        let is_entry = path
            .symlink_metadata()
            .is_ok_and(|metadata| !metadata.is_dir());
        if is_entry {
            std::fs::remove_file(path)
                .map_err(|source| WorkspaceError::io("remove", path, source))?;
        }
        if let Some(target) = before {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|source| WorkspaceError::io("restore", parent, source))?;
            }
            std::os::unix::fs::symlink(target, path)
                .map_err(|source| WorkspaceError::io("restore the link", path, source))?;
        }
        Ok(true)
    }

    fn display_name(&self, path: &Path) -> String {
        let common = &self.workspace.common_dir;
        let worktree = &self.workspace.worktree_git_dir;
        if let Ok(relative) = path.strip_prefix(worktree) {
            format!("worktree/{}", relative.display())
        } else if let Ok(relative) = path.strip_prefix(common) {
            relative.display().to_string()
        } else {
            path.display().to_string()
        }
    }

    /// Every branch, tag, remote-tracking, replace and notes ref, the stash, this run's refs
    /// and the loose refs of the other runs ([`packed`]: the runs going on); `packed` gives
    /// this run's refs that are packed.
    fn list_refs(&self, packed: &packed::PackedRuns) -> Result<Listing, WorkspaceError> {
        let mut args = vec![
            "for-each-ref",
            "--format=%(objectname) %(refname) %(symref)",
        ];
        let exclude = super::git::supports_ref_exclude();
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
        Ok(result)
    }

    /// The other refs before and after the step (`after` as listed now, `now` the runs'
    /// packed refs now): where another run's loose ref came or went, the packed value it
    /// stood over or left is what it was or is; and when `packed-refs` changed, each packed
    /// ref of another run that changed with it.
    fn settle(
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
        if !packed::same_file(now.identity.as_ref(), self.packed.identity.as_ref()) {
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

    /// A listing split into the guarded refs (protected branches, tags, remote-tracking,
    /// replace and the run's snapshot refs, the stash) and the others (other branches, other
    /// runs' refs: see [`foreign`]).
    fn split(
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

    /// The stash's reflog, which holds every entry below the top one.
    fn stash_log(&self) -> PathBuf {
        self.workspace.common_dir.join("logs").join(STASH)
    }

    fn guarded_files(&self) -> Result<Vec<PathBuf>, WorkspaceError> {
        let common = &self.workspace.common_dir;
        let mut paths = vec![
            common.join("config"),
            common.join("config.worktree"),
            common.join("info").join("exclude"),
            common.join("info").join("attributes"),
            // History as git reads it: grafted or cut parents, borrowed object stores.
            common.join("info").join("grafts"),
            common.join("shallow"),
            common.join("objects").join("info").join("alternates"),
            // The operator's stash entries below the top one live only in its reflog.
            self.stash_log(),
            // What the operator's next checkout materialises.
            common.join("info").join("sparse-checkout"),
            self.workspace.worktree_git_dir.join("config.worktree"),
            // Where git finds the repository of the worktree and the worktree itself:
            // rewritten, they would make the conductor's own git commands read another
            // repository (with its configuration and hooks) or lose the worktree.
            self.workspace.worktree_git_dir.join("commondir"),
            self.workspace.worktree_git_dir.join("gitdir"),
            // The lock every run takes to add or remove a worktree: a FIFO there hung them all.
            common.join(super::worktree::WORKTREES_LOCK),
        ];
        paths.extend(git_config::standard_files());
        let mut hook_dirs = vec![common.join("hooks")];
        hook_dirs.extend(self.hook_dirs.iter().cloned());
        for module in &self.module_dirs {
            paths.push(module.join("config"));
            hook_dirs.push(module.join("hooks"));
        }
        for hooks in &hook_dirs {
            list_hooks(hooks, &mut paths)?;
        }
        Ok(paths)
    }
}

impl Workspace {
    /// Attaches the worktree's HEAD to the work branch. Written directly where git keeps it as
    /// a file: a HEAD the agent garbled makes git refuse to run in the worktree at all.
    pub(super) fn attach_head(&self) -> Result<(), WorkspaceError> {
        let branch_ref = self.branch_ref();
        if self.common_dir.join("reftable").exists() {
            return self.git.run(["symbolic-ref", "HEAD", branch_ref.as_str()]);
        }
        // Replaced in one rename, as git does: a git command reading HEAD meanwhile (the line
        // count a rollback runs beside its reset) must never find it empty.
        let head = self.worktree_git_dir.join("HEAD");
        let temporary = self.worktree_git_dir.join("HEAD.tnh-new");
        std::fs::write(&temporary, format!("ref: {branch_ref}\n"))
            .map_err(|source| WorkspaceError::io("write", &temporary, source))?;
        std::fs::rename(&temporary, &head)
            .map_err(|source| WorkspaceError::io("replace", &head, source))
    }

    /// Makes the work branch a plain ref again if the agent made it a symbolic ref (naming
    /// `main`, say), pointing at `commit`: a reset on the work branch would otherwise move
    /// the ref it names. True when it had to.
    pub(super) fn unlink_work_branch(&self, commit: &str) -> Result<bool, WorkspaceError> {
        let branch_ref = self.branch_ref();
        let symbolic = if self.common_dir.join("reftable").exists() {
            self.repo_git
                .succeeds(["symbolic-ref", "--quiet", branch_ref.as_str()])?
        } else {
            read_optional(&self.common_dir.join(&branch_ref))?
                .is_some_and(|bytes| bytes.starts_with(SYMREF.as_bytes()))
        };
        if symbolic {
            self.repo_git
                .run(["update-ref", "--no-deref", branch_ref.as_str(), commit])?;
        }
        Ok(symbolic)
    }

    /// The worktree's `HEAD` file, as git writes it for the files ref backend. A repository
    /// with another backend (reftable) keeps a placeholder there, so its HEAD is `Unknown`.
    pub(super) fn read_head(&self) -> Head {
        if self.common_dir.join("reftable").exists() {
            return Head::Unknown;
        }
        let path = self.worktree_git_dir.join("HEAD");
        let text = match crate::artifacts::safe_files::read_regular(&path, 4096) {
            Ok((bytes, _)) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(error) => {
                // A FIFO (or a link, a folder) an agent put there would hang every git
                // command in the worktree: it goes, and the worktree's HEAD is found missing
                // and attached to the work branch again.
                if error.kind() == std::io::ErrorKind::InvalidInput {
                    let _ = std::fs::remove_file(&path);
                }
                return Head::Unknown;
            }
        };
        Head::parse(&text)
    }

    /// True when the worktree's HEAD is attached to the work branch.
    pub(super) fn head_on_work_branch(&self, head: &Head) -> bool {
        let branch_ref = self.branch_ref();
        match head {
            Head::Unknown => self
                .git
                .text(["symbolic-ref", "--quiet", "HEAD"])
                .is_ok_and(|current| current == branch_ref),
            Head::Attached(name) => *name == branch_ref,
            Head::Detached(_) => false,
        }
    }
}

/// The commit `head` points at, from a listing of refs; `None` when only git can say (or the
/// branch it names does not exist).
/// How a symbolic ref's value is written in a listing: `ref: refs/heads/main`.
const SYMREF: &str = "ref: ";

/// The stash, shared by every worktree of the repository.
const STASH: &str = "refs/stash";

/// Refs as `git for-each-ref` lists them.
#[derive(Debug, Default)]
struct Listing {
    /// Name → commit, or `ref: NAME` for a symbolic ref.
    values: BTreeMap<String, String>,
    /// Name → the commit it resolves to (symbolic refs followed).
    resolved: BTreeMap<String, String>,
}

fn head_commit(head: &Head, listing: &BTreeMap<String, String>) -> Option<String> {
    match head {
        // A branch's listed object is its commit; anything else may need peeling.
        Head::Attached(name) if name.starts_with("refs/heads/") => listing.get(name).cloned(),
        Head::Detached(commit) => Some(commit.clone()),
        Head::Attached(_) | Head::Unknown => None,
    }
}

fn compile_branch_globs(names: &[String]) -> Result<GlobSet, WorkspaceError> {
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

/// The repositories of the submodules under `common` (`.git/modules/<name>`, a name with
/// slashes as folders, nested submodules in their own `modules`).
fn module_git_dirs(common: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut folders = vec![common.join("modules")];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.flatten() {
            if !entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                continue;
            }
            let dir = entry.path();
            if dir.join("HEAD").is_file() {
                folders.push(dir.join("modules"));
                found.push(dir);
            } else {
                folders.push(dir);
            }
        }
    }
    found.sort();
    found
}

/// The hooks in a folder of hooks (none when it does not exist).
fn list_hooks(hooks: &Path, paths: &mut Vec<PathBuf>) -> Result<(), WorkspaceError> {
    match std::fs::read_dir(hooks) {
        Ok(entries) => {
            for entry in entries {
                let entry = entry.map_err(|source| WorkspaceError::io("list", hooks, source))?;
                // git runs a hook through a symlink too; it never runs the `.sample` files.
                let runnable = entry
                    .file_type()
                    .is_ok_and(|kind| kind.is_file() || kind.is_symlink());
                let sample = entry.file_name().as_bytes().ends_with(b".sample");
                if runnable && !sample {
                    paths.push(entry.path());
                }
            }
            Ok(())
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(WorkspaceError::io("list", hooks, source)),
    }
}

/// What [`read_optional`] gives for an entry that is there but cannot be read as a regular
/// file (a FIFO, a device, a folder, a file over [`WATCHED_FILE_LIMIT`]): never equal to a
/// regular file's contents, so such an entry in the place of one reads as a change.
const NOT_A_REGULAR_FILE: &[u8] = b"\0tnh-conductor: not a regular file\0";

/// How much of a watched file is read: git's configuration and ref files are small.
const WATCHED_FILE_LIMIT: u64 = 64 * 1024 * 1024;

/// The contents of the watched file `path` (a link followed), `None` when there is none. Read
/// without blocking: a FIFO in its place is [`NOT_A_REGULAR_FILE`], never a hang.
fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, WorkspaceError> {
    match crate::artifacts::safe_files::read_regular_following(path, WATCHED_FILE_LIMIT) {
        Ok((_, true)) => Ok(Some(NOT_A_REGULAR_FILE.to_vec())),
        Ok((bytes, false)) => Ok(Some(bytes)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) if error.kind() == std::io::ErrorKind::InvalidInput => {
            Ok(Some(NOT_A_REGULAR_FILE.to_vec()))
        }
        Err(source) => Err(WorkspaceError::io("read", path, source)),
    }
}

fn write_optional(path: &Path, contents: Option<&[u8]>) -> Result<(), WorkspaceError> {
    match contents {
        Some(bytes) => {
            // The agent may have removed the folder too (`~/.config/git/`).
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|source| WorkspaceError::io("restore", parent, source))?;
            }
            // What was not a regular file before the step cannot be written back.
            if bytes == NOT_A_REGULAR_FILE {
                return Ok(());
            }
            // Opened without blocking, and written only if it is a regular file: a link (kept
            // as it was) may lead to a FIFO now.
            use std::os::unix::fs::OpenOptionsExt;
            let restore = |source| WorkspaceError::io("restore", path, source);
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
                .open(path)
                .map_err(restore)?;
            if !file.metadata().map_err(restore)?.file_type().is_file() {
                return Err(restore(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "it is not a regular file",
                )));
            }
            file.set_len(0).map_err(restore)?;
            std::io::Write::write_all(&mut file, bytes).map_err(restore)
        }
        None => match std::fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(WorkspaceError::io("remove", path, source)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_survive_json_exactly_as_text_or_as_numbers() {
        for raw in [
            b"[core]\n\tbare = false\n".to_vec(),
            vec![b'a', 0xff, 0xfe, b'\n'],
        ] {
            let json = serde_json::to_string(&Bytes::from(raw.clone())).unwrap();
            let back: Bytes = serde_json::from_str(&json).unwrap();
            assert_eq!(Vec::<u8>::from(back), raw, "{json}");
        }
        assert_eq!(
            serde_json::to_string(&Bytes::from(b"ref: refs/heads/main\n".to_vec())).unwrap(),
            "\"ref: refs/heads/main\\n\""
        );
        assert_eq!(
            serde_json::to_string(&Bytes::from(vec![0xff])).unwrap(),
            "[255]"
        );
    }
}
