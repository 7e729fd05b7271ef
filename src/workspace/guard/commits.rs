//! What a step committed on the work branch, read from git's objects: the capture compares
//! the worktree's files with the step's snapshot, so a change committed and then put back in
//! the worktree (or committed and reverted) never shows there, yet the work branch — what an
//! operator merges or pushes — carries it. [`Workspace::committed_changes`] lists the paths
//! the step's commits changed, each as a [`ChangedFile`] against the worktree the step started
//! from, for the policy to judge like the capture's.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::workspace::capture::{ChangeKind, ChangedFile};
use crate::workspace::error::WorkspaceError;
use crate::workspace::worktree::Workspace;

/// The work branch's tip before and after a step that moved it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BranchMove {
    /// The commit the branch (and the worktree's HEAD) was at when the step started.
    pub before: String,
    /// The commit it is at after the step.
    pub after: String,
}

/// One path a step's commits changed to content the worktree did not hold when the step
/// started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedChange {
    /// The commit that made the change: one of the step's commits, or the branch's new tip
    /// for what only the move of the branch (a reset, a merge) brought.
    pub commit: String,
    /// The change, against the worktree the step started from (`old_mode`: the path's mode
    /// there, `None` when it did not exist). Line counts, `binary` and a symlink's target are
    /// not read from the blobs: 0, `false`, `None`.
    pub file: ChangedFile,
}

/// The all-zero object id git writes for the missing side of a change.
fn is_null(id: &str) -> bool {
    !id.is_empty() && id.bytes().all(|byte| byte == b'0')
}

/// One raw record of `git diff-tree -z --raw`: the new side's mode and blob, its status, the
/// path.
struct Raw {
    new_mode: String,
    new_id: String,
    path: Vec<u8>,
}

impl Workspace {
    /// The paths the commits of `moved` changed (`git log --no-merges before..after`, each
    /// commit against its parent, plus `before`'s tree against `after`'s for what a merge or a
    /// reset brought), each once (the first commit that changed it, oldest first), leaving out
    /// those whose committed content (mode and blob) is what `baseline_tree` (the tree of the
    /// worktree the step started from) already held: committing what an earlier step left
    /// uncommitted is not a new change. Read from git's objects only; nothing is written.
    pub fn committed_changes(
        &self,
        moved: &BranchMove,
        baseline_tree: &str,
    ) -> Result<Vec<CommittedChange>, WorkspaceError> {
        let range = format!("{}..{}", moved.before, moved.after);
        let log = self.repo_git.bytes([
            "log",
            "--no-merges",
            "--reverse",
            "--root",
            "--no-show-signature",
            "--no-relative",
            "--no-ext-diff",
            "--format=%H",
            "-r",
            "-z",
            "--no-renames",
            "--no-abbrev",
            "--raw",
            range.as_str(),
            "--",
        ])?;
        let mut records = parse_raw(&log, true)?;
        let net = self.repo_git.bytes([
            "diff-tree",
            "--no-relative",
            "--no-ext-diff",
            "-r",
            "-z",
            "--no-renames",
            "--no-abbrev",
            "--raw",
            moved.before.as_str(),
            moved.after.as_str(),
        ])?;
        records.extend(
            parse_raw(&net, false)?
                .into_iter()
                .map(|(_, raw)| (moved.after.clone(), raw)),
        );
        if records.is_empty() {
            return Ok(Vec::new());
        }
        let baseline = self.tree_entries(baseline_tree)?;
        let mut seen = BTreeSet::new();
        let mut changes = Vec::new();
        for (commit, raw) in records {
            let deleted = is_null(&raw.new_id);
            let before = baseline.get(&raw.path);
            let unchanged = match before {
                Some((mode, id)) => !deleted && *mode == raw.new_mode && *id == raw.new_id,
                None => deleted,
            };
            if unchanged || !seen.insert(raw.path.clone()) {
                continue;
            }
            changes.push(CommittedChange {
                commit,
                file: changed_file(&raw, before.map(|(mode, id)| (mode.as_str(), id.as_str()))),
            });
        }
        Ok(changes)
    }

    /// Every entry of `tree`, recursively: path → (mode, object id).
    fn tree_entries(
        &self,
        tree: &str,
    ) -> Result<HashMap<Vec<u8>, (String, String)>, WorkspaceError> {
        let output = self
            .repo_git
            .bytes(["ls-tree", "-r", "-z", "--full-tree", tree])?;
        let mut entries = HashMap::new();
        for record in output.split(|byte| *byte == 0).filter(|r| !r.is_empty()) {
            // `<mode> SP <type> SP <id> TAB <path>`
            let tab = record.iter().position(|byte| *byte == b'\t');
            let Some(tab) = tab else {
                return Err(parse_error("ls-tree -r -z", record));
            };
            let meta = String::from_utf8_lossy(&record[..tab]);
            let fields: Vec<&str> = meta.split(' ').collect();
            let [mode, _kind, id] = fields.as_slice() else {
                return Err(parse_error("ls-tree -r -z", record));
            };
            entries.insert(
                record[tab + 1..].to_vec(),
                ((*mode).to_owned(), (*id).to_owned()),
            );
        }
        Ok(entries)
    }
}

/// The change of `raw` against the baseline's entry for its path (`(mode, id)`), as the
/// capture would classify it, without reading blobs.
fn changed_file(raw: &Raw, before: Option<(&str, &str)>) -> ChangedFile {
    const SYMLINK: &str = "120000";
    let deleted = is_null(&raw.new_id);
    let new_mode = (!deleted).then(|| raw.new_mode.clone());
    let old_mode = before.map(|(mode, _)| mode.to_owned());
    let kind = if deleted {
        ChangeKind::Delete
    } else if old_mode.as_deref() == Some(SYMLINK) || raw.new_mode == SYMLINK {
        ChangeKind::Symlink
    } else {
        match before {
            None => ChangeKind::Add,
            Some((mode, id)) if id == raw.new_id && mode != raw.new_mode => ChangeKind::Mode,
            Some(_) => ChangeKind::Modify,
        }
    };
    ChangedFile {
        path: String::from_utf8_lossy(&raw.path).into_owned(),
        old_path: None,
        kind,
        old_mode,
        new_mode,
        binary: false,
        symlink_target: None,
        lines_added: 0,
        lines_removed: 0,
        quoted_path: crate::workspace::capture::quoted_unless_utf8(&raw.path),
        quoted_old_path: None,
    }
}

fn parse_error(command: &'static str, record: &[u8]) -> WorkspaceError {
    WorkspaceError::Parse {
        command,
        detail: String::from_utf8_lossy(record).into_owned(),
    }
}

/// Parses `git log --format=%H -z --raw` output (`commits`): each commit's id as a record of
/// its own before that commit's changes, or `git diff-tree -z --raw` output; then records `:<old mode> <new mode>
/// <old id> <new id> <status>` each followed by its path. Returns (commit, record) pairs (the
/// commit empty for `diff-tree`).
fn parse_raw(output: &[u8], commits: bool) -> Result<Vec<(String, Raw)>, WorkspaceError> {
    const COMMAND: &str = "log/diff-tree -z --raw";
    let mut tokens = output.split(|byte| *byte == 0);
    let mut commit = String::new();
    let mut records = Vec::new();
    while let Some(token) = tokens.next() {
        // `log` puts a newline between a commit's id and its first record.
        let token = token.strip_prefix(b"\n").unwrap_or(token);
        if token.is_empty() {
            continue;
        }
        let Some(meta) = token.strip_prefix(b":") else {
            if commits && token.iter().all(u8::is_ascii_hexdigit) {
                commit = String::from_utf8_lossy(token).into_owned();
                continue;
            }
            return Err(parse_error(COMMAND, token));
        };
        let meta = String::from_utf8_lossy(meta);
        let fields: Vec<&str> = meta.split(' ').collect();
        let [_old_mode, new_mode, _old_id, new_id, _status] = fields.as_slice() else {
            return Err(parse_error(COMMAND, token));
        };
        let Some(path) = tokens.next() else {
            return Err(parse_error(COMMAND, token));
        };
        records.push((
            commit.clone(),
            Raw {
                new_mode: (*new_mode).to_owned(),
                new_id: (*new_id).to_owned(),
                path: path.to_vec(),
            },
        ));
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_records_are_read_with_their_commits_and_paths_with_newlines() {
        let zero = "0".repeat(40);
        let blob = "a".repeat(40);
        let commit = "c".repeat(40);
        let output = format!(
            "{commit}\0\n:000000 100644 {zero} {blob} A\0x\ny\0:100644 000000 {blob} {zero} D\0b\0"
        );
        let records = parse_raw(output.as_bytes(), true).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].0, commit);
        assert_eq!(records[0].1.path, b"x\ny");
        assert_eq!(records[0].1.new_mode, "100644");
        assert!(is_null(&records[1].1.new_id));
        assert!(parse_raw(b"garbage\0", false).is_err());
    }

    #[test]
    fn a_committed_change_is_classified_against_the_baseline() {
        let raw = |mode: &str, id: &str| Raw {
            new_mode: mode.to_owned(),
            new_id: id.to_owned(),
            path: b"p".to_vec(),
        };
        let zero = "0".repeat(40);
        let kind = |raw: &Raw, before| changed_file(raw, before).kind;
        assert_eq!(kind(&raw("100644", "b"), None), ChangeKind::Add);
        assert_eq!(
            kind(&raw("100755", "b"), Some(("100644", "b"))),
            ChangeKind::Mode
        );
        assert_eq!(
            kind(&raw("100644", "c"), Some(("100644", "b"))),
            ChangeKind::Modify
        );
        assert_eq!(
            kind(&raw("120000", "c"), Some(("100644", "b"))),
            ChangeKind::Symlink
        );
        let deleted = changed_file(&raw("000000", &zero), Some(("100644", "b")));
        assert_eq!(deleted.kind, ChangeKind::Delete);
        assert_eq!(deleted.new_mode, None);
    }
}
