//! Per-step capture: what changed in the worktree since a snapshot, as a unified binary-safe
//! patch (`workspace_diff`), a structured list (`workspace_status`) and a compact diffstat for
//! evidence summaries. The snapshot's tree is compared with a scratch index holding every
//! file of the worktree, so untracked files count and the worktree's own index is never
//! consulted or changed.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use serde::{Deserialize, Serialize};

pub use crate::artifacts::DiffStat;

use super::error::WorkspaceError;
use super::git::Git;
use super::snapshot::{Scratch, Snapshot, Unrecorded};
use super::worktree::Workspace;

mod numstat;
mod patch;

use numstat::parse_raw_numstat;
pub(crate) use numstat::quoted_unless_utf8;
use patch::{blobs_only, write_patch};

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
    /// `path` exactly, as git quotes a name (in double quotes, with C escapes and octal for
    /// every byte that is not printable ASCII), present only when the name is not valid
    /// UTF-8: `path` then shows each invalid byte as U+FFFD, and two names that differ only
    /// there are told apart here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quoted_path: Option<String>,
    /// `old_path` exactly, in the same way, present only when it is not valid UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quoted_old_path: Option<String>,
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
    /// Paths the owner had lost access to (a file without read permission, a folder without
    /// read, write or search permission), given back so that git could read them: the agent
    /// took the access away. Absent when there were none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access_restored: Vec<String>,
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
        let mut files = changes_against(&scratch.git, since)?;
        files.extend(scratch.unrecorded.iter().map(unrecorded));
        self.status_of(since, files, scratch.access_restored)
    }

    /// Writes the unified, binary-safe patch from `since` to the worktree into `patch_file`
    /// and returns the status of the same change and the worktree's tree (the worktree is
    /// read once, and the change is diffed once: each file's line counts are read from the
    /// patch's hunks as it is written).
    pub fn capture_since(
        &self,
        since: &Snapshot,
        patch_file: &Path,
    ) -> Result<Capture, WorkspaceError> {
        let Scratch {
            git: scratch,
            access_restored,
            unrecorded: folders,
        } = self.refresh_scratch_index()?;
        // Written once here; the next agent step's snapshot takes it when nothing ran between.
        let tree = self.write_scratch_tree(&scratch)?;
        // The patch is the change between the two trees, from their blobs alone: it shows
        // what the tree records even if a process the agent left behind still writes.
        let mut files = match write_patch(&self.git, since, &tree, patch_file)? {
            Some(files) => files,
            // The patch's sections did not line up with git's records, which this reader does
            // not expect: git counts the lines itself.
            None => self.changes_between(&since.tree, &tree)?,
        };
        files.extend(folders.iter().map(unrecorded));
        Ok(Capture {
            status: self.status_of(since, files, access_restored)?,
            tree,
        })
    }

    /// The whole change from `base` (the run's `pre_run`, say) to the worktree, right after
    /// `capture` was made since `since`: known without git when `since` is `base` or the worktree
    /// is back at `base`, else counted from the scratch index the capture just refreshed.
    pub fn diffstat_since_base(
        &self,
        capture: &Capture,
        since: &Snapshot,
        base: &Snapshot,
    ) -> Result<DiffStat, WorkspaceError> {
        if since.tree == base.tree {
            return Ok(capture.status.diffstat);
        }
        if capture.tree == base.tree {
            return Ok(DiffStat::default());
        }
        diffstat_against(&self.git.with_index(&self.scratch_index()), base)
    }

    /// The changed paths between two trees of the worktree (say `pre_run`'s and the tree a
    /// checkpoint recorded), sorted by path, read from git's objects alone: neither the worktree
    /// nor the scratch index is touched, so a step's guard never sees the read, and the
    /// worktree may change meanwhile (a rollback counts what it undoes while it resets).
    pub fn changes_between(
        &self,
        from_tree: &str,
        to_tree: &str,
    ) -> Result<Vec<ChangedFile>, WorkspaceError> {
        if from_tree == to_tree {
            return Ok(Vec::new());
        }
        let (_no_index, git) = blobs_only(&self.git)?;
        let raw = git.bytes([
            "diff-tree",
            "-r",
            "-z",
            "-M",
            "--raw",
            "--numstat",
            "--no-textconv",
            from_tree,
            to_tree,
        ])?;
        let mut files = parse_raw_numstat(&raw)?;
        sort_by_path(&mut files);
        Ok(files)
    }

    /// The `workspace_status` of the changed files `files`.
    fn status_of(
        &self,
        since: &Snapshot,
        mut files: Vec<ChangedFile>,
        access_restored: Vec<String>,
    ) -> Result<WorkspaceStatus, WorkspaceError> {
        for file in &mut files {
            if file.is_symlink() {
                let link = self.path().join(&file.path);
                file.symlink_target = std::fs::read_link(&link)
                    .ok()
                    .map(|target| target.to_string_lossy().into_owned());
            }
        }
        sort_by_path(&mut files);
        let new_top_level_dirs = self.new_top_level_dirs(since, &files)?;
        let diffstat = diffstat_of(&files);
        Ok(WorkspaceStatus {
            schema_version: WORKSPACE_STATUS_SCHEMA_VERSION,
            since: since.reference.clone(),
            since_tree: since.tree.clone(),
            files,
            new_top_level_dirs,
            diffstat,
            access_restored,
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
        let listing = match self.top_level_names(&since.tree) {
            Some(names) => names,
            None => self
                .git
                .bytes(["ls-tree", "-z", "--name-only", since.tree.as_str()])?,
        };
        let existing: BTreeSet<&[u8]> = listing.split(|byte| *byte == 0).collect();
        Ok(candidates
            .into_iter()
            .filter(|top| !existing.contains(top.as_bytes()))
            .map(str::to_owned)
            .collect())
    }
}

impl Workspace {
    /// The names at the top of `tree`, NUL-terminated as `git ls-tree -z --name-only` lists
    /// them, read in-process (one object, no git process); `None` when libgit2 cannot.
    fn top_level_names(&self, tree: &str) -> Option<Vec<u8>> {
        let tree = git2::Oid::from_str(tree).ok()?;
        super::repositories::with_repository(&self.common_dir, |repository| {
            let mut names = Vec::new();
            for entry in &repository.find_tree(tree)? {
                names.extend_from_slice(entry.name_bytes());
                names.push(0);
            }
            Ok(names)
        })
        .ok()
    }
}

/// A path git cannot record as a change: a new path, a folder (mode `160000`: a repository
/// created with no commit, a folder too deep for git, a submodule's folder never checked
/// out that holds files) standing for everything in it, which the policy checks as such.
fn unrecorded(entry: &Unrecorded) -> ChangedFile {
    ChangedFile {
        path: entry.path.clone(),
        old_path: None,
        kind: if entry.mode == MODE_SYMLINK {
            ChangeKind::Symlink
        } else {
            ChangeKind::Add
        },
        old_mode: None,
        new_mode: Some(entry.mode.to_owned()),
        binary: false,
        symlink_target: None,
        lines_added: 0,
        lines_removed: 0,
        quoted_path: None,
        quoted_old_path: None,
    }
}

/// The changed paths between `since` and the scratch index. Not from git's objects alone:
/// where the scratch index says a file matches its object, git reads the worktree's file
/// instead, so the worktree must not change meanwhile (`changes_between` two trees may).
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

/// The totals of the change between `since` and the scratch index (see `changes_against`).
pub(crate) fn diffstat_against(
    scratch: &Git,
    since: &Snapshot,
) -> Result<DiffStat, WorkspaceError> {
    changes_against(scratch, since).map(|files| diffstat_of(&files))
}

/// Sorts changes by path, names that read the same lossily by their exact names.
fn sort_by_path(files: &mut [ChangedFile]) {
    files.sort_by(|left, right| {
        (&left.path, &left.quoted_path).cmp(&(&right.path, &right.quoted_path))
    });
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

/// How scripts see a changed file.
impl From<&ChangedFile> for crate::script::ChangedFile {
    /// The workspace's kinds folded into the four scripts see: a mode, symlink or binary
    /// change is `added` when the path is new and `modified` otherwise.
    fn from(change: &ChangedFile) -> Self {
        use crate::script::ChangeKind as Script;
        use ChangeKind as Workspace;
        let kind = match change.kind {
            Workspace::Add => Script::Added,
            Workspace::Delete => Script::Deleted,
            Workspace::Rename => Script::Renamed,
            Workspace::Modify => Script::Modified,
            Workspace::Mode | Workspace::Symlink | Workspace::Binary if change.is_new() => {
                Script::Added
            }
            Workspace::Mode | Workspace::Symlink | Workspace::Binary => Script::Modified,
        };
        Self {
            path: change.path.clone(),
            kind,
            added: change.lines_added,
            removed: change.lines_removed,
            old_path: change.old_path.clone(),
            binary: change.binary,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{PermissionsExt, symlink};
    use std::path::Path;

    use super::*;
    use crate::ids::StepId;
    use crate::workspace::test_support::{committed_workspace, git, put};

    /// A workspace whose worktree holds every kind of change since its `pre_step` snapshot,
    /// including names git quotes and contents that look like patch headers.
    fn changed_workspace(root: &Path) -> (Workspace, Snapshot) {
        let stable = b"a stable line\n".repeat(20);
        let files: [(&str, &[u8]); 7] = [
            ("edit.txt", b"one\n-- two\n++ three\nfour\n"),
            ("gone.txt", b"bye\n"),
            ("old/name.txt", &stable),
            ("mode.sh", b"echo\n"),
            ("becomes-link.txt", b"x\ny\n"),
            ("tab\there.txt", b"t\n"),
            ("no-newline.txt", b"last"),
        ];
        let workspace = committed_workspace(root, &files, "capture");
        let snapshot = workspace
            .snapshot_pre_step(&StepId::new("step"), 1)
            .unwrap();
        let dir = workspace.path();
        put(
            dir,
            "edit.txt",
            b"one\n--- two\ndiff --git a/edit.txt b/edit.txt\n+++ three\n@@ -1 +1 @@\n",
        );
        std::fs::remove_file(dir.join("gone.txt")).unwrap();
        std::fs::remove_file(dir.join("old/name.txt")).unwrap();
        let mut moved = b"a stable line\n".repeat(20);
        moved.extend_from_slice(b"one more\n");
        put(dir, "new/name.txt", &moved);
        std::fs::set_permissions(dir.join("mode.sh"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        std::fs::remove_file(dir.join("becomes-link.txt")).unwrap();
        symlink("edit.txt", dir.join("becomes-link.txt")).unwrap();
        symlink("../outside", dir.join("link")).unwrap();
        put(dir, "image.bin", &[0, 159, 146, 150, 0, 1]);
        put(dir, "ünïcode name.txt", b"u\n");
        put(dir, "quote\"and\\back.txt", b"q\n");
        put(dir, "tab\there.txt", b"t\nt2\n");
        put(dir, "new\nline.txt", b"n\n");
        put(dir, "no-newline.txt", b"last\nnow");
        put(dir, "empty.txt", b"");
        (workspace, snapshot)
    }

    #[test]
    fn counts_read_from_the_patch_equal_git_numstat() {
        let scratch_dir = tempfile::tempdir().unwrap();
        let (workspace, snapshot) = changed_workspace(scratch_dir.path());
        let scratch = workspace.refresh_scratch_index().unwrap().git;
        let tree = scratch.text(["write-tree"]).unwrap();
        let patch = scratch_dir.path().join("change.patch");

        let from_patch = write_patch(&workspace.git, &snapshot, &tree, &patch)
            .unwrap()
            .expect("every section lines up with its record");
        let from_numstat = changes_against(&scratch, &snapshot).unwrap();

        assert_eq!(from_patch.len(), 13, "{from_patch:#?}");
        assert_eq!(from_patch, from_numstat);
        let kinds: BTreeSet<String> = from_patch
            .iter()
            .map(|file| format!("{:?}", file.kind))
            .collect();
        assert_eq!(
            kinds.into_iter().collect::<Vec<_>>(),
            [
                "Add", "Binary", "Delete", "Mode", "Modify", "Rename", "Symlink"
            ]
        );
        // The patch is git's own, byte for byte.
        let plain = scratch
            .bytes([
                "-c",
                "core.quotePath=true",
                "diff-index",
                "--cached",
                "-p",
                "--binary",
                "-M",
                "--no-color",
                "--no-ext-diff",
                "--no-textconv",
                snapshot.tree.as_str(),
            ])
            .unwrap();
        let written = std::fs::read(&patch).unwrap();
        assert_eq!(written, plain);
        assert!(
            String::from_utf8_lossy(&written).contains("\"b/quote\\\"and\\\\back.txt\""),
            "quoted header"
        );
    }

    /// git reads a file from the worktree instead of its blob where an index says the two
    /// match; the changes between two trees are read from the blobs alone, so a worktree a
    /// rollback is rewriting meanwhile cannot change them.
    #[test]
    fn changes_between_two_trees_never_read_the_worktree() {
        let root = tempfile::tempdir().unwrap();
        let (workspace, from) = workspace_trusting_stat(root.path());
        let dir = workspace.path();
        rewrite_keeping_stat(dir, b"b\nb\n");
        git(dir, &["add", "f.txt"]);
        let to = String::from_utf8(git(dir, &["write-tree"])).unwrap();
        let to = to.trim();
        rewrite_keeping_stat(dir, b"cccc");
        let read_through_index = git(dir, &["diff-tree", "-r", "--numstat", &from.tree, to]);
        assert_eq!(
            String::from_utf8_lossy(&read_through_index),
            "1\t1\tf.txt\n",
            "git read the rewritten file, not the blob: the case this guards against"
        );

        let files = workspace.changes_between(&from.tree, to).unwrap();

        assert_eq!(files.len(), 1, "{files:?}");
        assert_eq!((files[0].lines_added, files[0].lines_removed), (2, 1));
    }

    /// A capture's patch is the change to the tree it records, even where a file was
    /// rewritten after git hashed it (a process the agent left behind).
    #[test]
    fn a_captures_patch_shows_what_its_tree_records() {
        let root = tempfile::tempdir().unwrap();
        let (workspace, since) = workspace_trusting_stat(root.path());
        let dir = workspace.path();
        rewrite_keeping_stat(dir, b"b\nb\n");
        workspace.refresh_scratch_index().unwrap();
        rewrite_keeping_stat(dir, b"cccc");
        let patch = root.path().join("change.patch");

        let capture = workspace.capture_since(&since, &patch).unwrap();

        let recorded = git(dir, &["cat-file", "-p", &format!("{}:f.txt", capture.tree)]);
        assert_eq!(recorded, b"b\nb\n", "git kept the hash it trusted");
        let patch = std::fs::read_to_string(&patch).unwrap();
        assert!(patch.contains("\n+b\n+b\n"), "{patch}");
        assert!(!patch.contains("cccc"), "{patch}");
        let file = &capture.status.files[0];
        assert_eq!((file.lines_added, file.lines_removed), (2, 1));
    }

    /// A workspace on one commit holding `f.txt`, whose git trusts a file's size and
    /// whole-second time alone (as configuration may ask), and its `pre_run` snapshot.
    fn workspace_trusting_stat(root: &Path) -> (Workspace, Snapshot) {
        let workspace = committed_workspace(root, &[("f.txt", b"aaaa\n")], "objects");
        let dir = workspace.path();
        git(dir, &["config", "core.checkStat", "minimal"]);
        git(dir, &["config", "core.trustctime", "false"]);
        let pre_run = workspace.pre_run().unwrap();
        (workspace, pre_run)
    }

    /// Rewrites `f.txt` in place with `contents` (the same size each time) and one fixed
    /// time long ago: to such a git, the file passes for what it hashed before.
    fn rewrite_keeping_stat(dir: &Path, contents: &[u8]) {
        put(dir, "f.txt", contents);
        let file = std::fs::File::options()
            .write(true)
            .open(dir.join("f.txt"))
            .unwrap();
        let long_ago = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1 << 30);
        file.set_modified(long_ago).unwrap();
    }

    /// A patch that cannot be written (a full disk) is an error naming the file, and git,
    /// left writing into a closed pipe, does not hang the capture.
    #[test]
    fn a_patch_that_cannot_be_written_is_an_error_naming_the_file() {
        let scratch_dir = tempfile::tempdir().unwrap();
        let (workspace, snapshot) = changed_workspace(scratch_dir.path());
        // Enough change that git is still writing when the first write fails.
        put(
            workspace.path(),
            "large.txt",
            &b"a line of text\n".repeat(100_000),
        );
        let full = Path::new("/dev/full");
        let error = workspace.capture_since(&snapshot, full).unwrap_err();
        assert!(
            matches!(&error, WorkspaceError::Io { action: "write", path, .. } if path == full),
            "{error}"
        );
        assert!(error.to_string().contains("/dev/full"), "{error}");
    }
}
