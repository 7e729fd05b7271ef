//! Per-step capture: what changed in the worktree since a snapshot, as a unified binary-safe
//! patch (`workspace_diff`), a structured list (`workspace_status`) and a compact diffstat for
//! evidence summaries. The snapshot's tree is compared with a scratch index holding every
//! file of the worktree, so untracked files count and the worktree's own index is never
//! consulted or changed.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::error::WorkspaceError;
use super::git::Git;
use super::snapshot::Snapshot;
use super::worktree::Workspace;

/// Version of the `workspace_status` format.
pub const WORKSPACE_STATUS_SCHEMA_VERSION: u32 = 1;

const MODE_SYMLINK: &str = "120000";

/// What happened to a path. One kind per path, the first that applies in this order:
/// `delete`, `rename`, `symlink` (either side is a symlink), `binary`, `add`, `mode` (only the
/// executable bit changed), `modify`. `old_mode` tells an added symlink or binary file
/// (`null`) from a changed one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// A new file.
    Add,
    /// Content changed.
    Modify,
    /// The file is gone.
    Delete,
    /// Moved (possibly with edits); `old_path` says from where.
    Rename,
    /// Only the mode changed.
    Mode,
    /// A symlink was added, changed, or replaced a file (or the reverse).
    Symlink,
    /// A binary file was added or changed.
    Binary,
}

/// One changed path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ChangedFile {
    /// Path relative to the worktree root, `/`-separated.
    pub path: String,
    /// The previous path of a rename.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_path: Option<String>,
    /// What happened.
    pub kind: ChangeKind,
    /// Git mode before (`100644`, `100755`, `120000`); `null` for a new path.
    pub old_mode: Option<String>,
    /// Git mode after; `null` for a deleted path.
    pub new_mode: Option<String>,
    /// Git could not count lines (binary content).
    pub binary: bool,
    /// Where a symlink on the new side points, as written in the link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symlink_target: Option<String>,
    /// Lines added (0 for binary files).
    pub lines_added: u64,
    /// Lines removed (0 for binary files).
    pub lines_removed: u64,
}

impl ChangedFile {
    /// True when the path did not exist before.
    pub fn is_new(&self) -> bool {
        self.old_mode.is_none()
    }

    /// True when the new side is a symlink.
    pub fn is_symlink(&self) -> bool {
        self.new_mode.as_deref() == Some(MODE_SYMLINK)
    }
}

/// Totals of a change, for evidence summaries.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct DiffStat {
    /// Paths changed.
    pub files_changed: u64,
    /// Lines added.
    pub insertions: u64,
    /// Lines removed.
    pub deletions: u64,
    /// Binary files among the changed paths.
    pub binary_files: u64,
}

impl DiffStat {
    /// True when nothing changed.
    pub fn is_empty(&self) -> bool {
        self.files_changed == 0
    }
}

impl fmt::Display for DiffStat {
    /// One line: `3 files changed, +10 -2 (1 binary)`, or `no changes`.
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return formatter.write_str("no changes");
        }
        let plural = if self.files_changed == 1 { "" } else { "s" };
        write!(
            formatter,
            "{} file{plural} changed, +{} -{}",
            self.files_changed, self.insertions, self.deletions
        )?;
        if self.binary_files > 0 {
            write!(formatter, " ({} binary)", self.binary_files)?;
        }
        Ok(())
    }
}

/// The `workspace_status` artifact: every path changed since a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WorkspaceStatus {
    /// Format version.
    pub schema_version: u32,
    /// The snapshot compared against (its ref).
    pub since: String,
    /// The snapshot's tree.
    pub since_tree: String,
    /// Changed paths, sorted by path.
    pub files: Vec<ChangedFile>,
    /// Top-level directories that did not exist in the snapshot.
    pub new_top_level_dirs: Vec<String>,
    /// Totals.
    pub diffstat: DiffStat,
}

/// What a capture found: the change, and the tree of the worktree it was taken of (which a
/// checkpoint taken before anything else runs reuses as its fingerprint).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capture {
    /// The `workspace_status` of the change.
    pub status: WorkspaceStatus,
    /// The worktree's tree at the capture.
    pub tree: String,
}

/// The JSON Schema of `workspace_status`.
pub fn workspace_status_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(WorkspaceStatus)).unwrap_or_default()
}

impl Workspace {
    /// What changed in the worktree since `since`.
    pub fn status_since(&self, since: &Snapshot) -> Result<WorkspaceStatus, WorkspaceError> {
        let scratch = self.refresh_scratch_index()?;
        self.status_against(&scratch, since)
    }

    /// Writes the unified, binary-safe patch from `since` to the worktree into `patch_file`
    /// and returns the status of the same change and the worktree's tree (the worktree is
    /// read once).
    pub fn capture_since(
        &self,
        since: &Snapshot,
        patch_file: &Path,
    ) -> Result<Capture, WorkspaceError> {
        let scratch = self.refresh_scratch_index()?;
        scratch.to_file(
            [
                "diff-index",
                "--cached",
                "-p",
                "--binary",
                "-M",
                "--no-color",
                "--no-ext-diff",
                "--no-textconv",
                since.tree.as_str(),
            ],
            patch_file,
        )?;
        Ok(Capture {
            status: self.status_against(&scratch, since)?,
            // Written once here, the trees of the changed folders are found by the next
            // snapshot.
            tree: scratch.text(["write-tree"])?,
        })
    }

    /// Compares `since` with the scratch index (which `refresh_scratch_index` made equal to
    /// the worktree) without writing a tree.
    fn status_against(
        &self,
        scratch: &Git,
        since: &Snapshot,
    ) -> Result<WorkspaceStatus, WorkspaceError> {
        let mut files = changes_against(scratch, since)?;
        for file in &mut files {
            if file.is_symlink() {
                let link = self.path().join(&file.path);
                file.symlink_target = std::fs::read_link(&link)
                    .ok()
                    .map(|target| target.to_string_lossy().into_owned());
            }
        }
        files.sort_by(|left, right| left.path.cmp(&right.path));
        let new_top_level_dirs = self.new_top_level_dirs(since, &files)?;
        let diffstat = diffstat_of(&files);
        Ok(WorkspaceStatus {
            schema_version: WORKSPACE_STATUS_SCHEMA_VERSION,
            since: since.reference.clone(),
            since_tree: since.tree.clone(),
            files,
            new_top_level_dirs,
            diffstat,
        })
    }

    fn new_top_level_dirs(
        &self,
        since: &Snapshot,
        files: &[ChangedFile],
    ) -> Result<Vec<String>, WorkspaceError> {
        let candidates: BTreeSet<&str> = files
            .iter()
            .filter(|file| file.kind != ChangeKind::Delete)
            .filter_map(|file| file.path.split_once('/').map(|(top, _)| top))
            .collect();
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let listing = self
            .git
            .bytes(["ls-tree", "-z", "--name-only", since.tree.as_str()])?;
        let existing: BTreeSet<&[u8]> = listing.split(|byte| *byte == 0).collect();
        Ok(candidates
            .into_iter()
            .filter(|top| !existing.contains(top.as_bytes()))
            .map(str::to_owned)
            .collect())
    }
}

/// The changed paths between `since` and the scratch index, read from git's objects alone
/// (the worktree is not looked at, so it may change meanwhile).
fn changes_against(scratch: &Git, since: &Snapshot) -> Result<Vec<ChangedFile>, WorkspaceError> {
    let raw = scratch.bytes([
        "diff-index",
        "--cached",
        "-z",
        "-M",
        "--raw",
        "--numstat",
        "--no-textconv",
        since.tree.as_str(),
    ])?;
    parse_raw_numstat(&raw)
}

/// The totals of the change between `since` and the scratch index, from git's objects alone.
pub(crate) fn diffstat_against(
    scratch: &Git,
    since: &Snapshot,
) -> Result<DiffStat, WorkspaceError> {
    changes_against(scratch, since).map(|files| diffstat_of(&files))
}

/// Sums a list of changes.
pub fn diffstat_of(files: &[ChangedFile]) -> DiffStat {
    files.iter().fold(DiffStat::default(), |mut stat, file| {
        stat.files_changed += 1;
        stat.insertions += file.lines_added;
        stat.deletions += file.lines_removed;
        stat.binary_files += u64::from(file.binary);
        stat
    })
}

/// Parses `git diff-index -z --raw --numstat` output: raw records (`:old new sha sha status`
/// then one or two paths) followed by numstat records (`added\tremoved\tpath`, or an empty
/// path followed by the old and new path for a rename).
fn parse_raw_numstat(output: &[u8]) -> Result<Vec<ChangedFile>, WorkspaceError> {
    let text = String::from_utf8_lossy(output);
    let mut tokens = text
        .split('\0')
        .filter(|token| !token.is_empty())
        .peekable();
    let mut files = Vec::new();
    let mut counts: HashMap<String, (Option<u64>, Option<u64>)> = HashMap::new();
    while let Some(token) = tokens.next() {
        if let Some(raw) = token.strip_prefix(':') {
            let fields: Vec<&str> = raw.split(' ').collect();
            let [old_mode, new_mode, _, _, status] = fields[..] else {
                return Err(parse_error(token));
            };
            let renamed = status.starts_with('R') || status.starts_with('C');
            let first = tokens.next().ok_or_else(|| parse_error(token))?;
            let (old_path, path) = if renamed {
                let second = tokens.next().ok_or_else(|| parse_error(token))?;
                (Some(first.to_owned()), second.to_owned())
            } else {
                (None, first.to_owned())
            };
            files.push(raw_change(old_mode, new_mode, status, old_path, path));
        } else {
            let mut parts = token.splitn(3, '\t');
            let added = parts.next().ok_or_else(|| parse_error(token))?;
            let removed = parts.next().ok_or_else(|| parse_error(token))?;
            let mut path = parts.next().unwrap_or_default().to_owned();
            if path.is_empty() {
                // A rename: the old and the new path follow as separate records.
                let _old = tokens.next();
                path = tokens.next().ok_or_else(|| parse_error(token))?.to_owned();
            }
            counts.insert(path, (added.parse().ok(), removed.parse().ok()));
        }
    }
    for file in &mut files {
        if let Some((added, removed)) = counts.get(&file.path) {
            file.binary = added.is_none() && removed.is_none();
            file.lines_added = added.unwrap_or(0);
            file.lines_removed = removed.unwrap_or(0);
        }
        file.kind = classify(file, file.kind);
    }
    Ok(files)
}

fn raw_change(
    old_mode: &str,
    new_mode: &str,
    status: &str,
    old_path: Option<String>,
    path: String,
) -> ChangedFile {
    let mode = |value: &str| (value != "000000").then(|| value.to_owned());
    let kind = match status.chars().next() {
        Some('A') => ChangeKind::Add,
        Some('D') => ChangeKind::Delete,
        Some('R' | 'C') => ChangeKind::Rename,
        _ => ChangeKind::Modify,
    };
    ChangedFile {
        path,
        old_path,
        kind,
        old_mode: mode(old_mode),
        new_mode: mode(new_mode),
        binary: false,
        symlink_target: None,
        lines_added: 0,
        lines_removed: 0,
    }
}

/// Applies the documented precedence to a change whose git status is `base`.
fn classify(file: &ChangedFile, base: ChangeKind) -> ChangeKind {
    let symlink = file.old_mode.as_deref() == Some(MODE_SYMLINK) || file.is_symlink();
    match base {
        ChangeKind::Delete | ChangeKind::Rename => base,
        _ if symlink => ChangeKind::Symlink,
        _ if file.binary => ChangeKind::Binary,
        ChangeKind::Add => ChangeKind::Add,
        _ if file.old_mode != file.new_mode && file.lines_added == 0 && file.lines_removed == 0 => {
            ChangeKind::Mode
        }
        _ => ChangeKind::Modify,
    }
}

fn parse_error(token: &str) -> WorkspaceError {
    WorkspaceError::Parse {
        command: "diff-index --raw --numstat",
        detail: format!("unexpected record `{token}`"),
    }
}
