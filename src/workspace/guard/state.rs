//! What a guard recorded before a step, saved in the visit's folder (`guard_state.json`)
//! and loaded again, so that a step whose driving process died is still checked.

use std::collections::BTreeMap;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::super::error::WorkspaceError;
use super::super::operator_checkout::FileIdentity;
use super::super::worktree::Workspace;
use super::{RefGuard, RunActivity, Scope, compile_branch_globs, packed, read_optional};

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
