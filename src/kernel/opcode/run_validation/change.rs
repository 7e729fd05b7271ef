//! What the validators changed in the worktree: the baseline it is compared with, the capture
//! of the change, and the tool caches the validators left, removed before it is charged.

use std::path::Path;

use crate::workspace::{
    Capture, DiffStat, Snapshot, WORKSPACE_STATUS_SCHEMA_VERSION, Workspace, WorkspaceStatus,
};

use super::super::{OpcodeError, StepContext};

/// (the kernel checkpoints after every step that may change the worktree, and `resume` refuses
/// a worktree that drifted from it), read afresh only before a run's first checkpoint. No git
/// process for it then; and a visit run again after its process died is compared with the
/// worktree from before the interrupted visit, so what that visit changed is checked too.
/// The snapshot is not kept by any ref: it is never a rollback target.
pub(super) fn baseline(context: &StepContext<'_>) -> Result<Snapshot, OpcodeError> {
    let tree = match &context.state.fingerprint {
        Some(fingerprint) => fingerprint.tree.clone(),
        None => context.workspace.worktree_tree()?,
    };
    Ok(Snapshot {
        reference: format!(
            "the worktree before step {} visit {}",
            context.step_id(),
            context.visit
        ),
        commit: String::new(),
        tree,
        base: String::new(),
    })
}

/// The change since `baseline`, written to `patch_file`. What the validators left in tool
/// caches (`__pycache__/`, `.pytest_cache/`) is removed, and the worktree captured again: it
/// is no one's change, and would otherwise reach the next agent's diff, the policy check and
/// the run's commit. Returns the capture and the cache entries removed.
pub(super) fn capture_change(
    workspace: &Workspace,
    baseline: &Snapshot,
    patch_file: &Path,
) -> Result<(Capture, Vec<String>), OpcodeError> {
    let captured = capture(workspace, baseline, patch_file)?;
    let caches_removed = remove_tool_caches(workspace.path(), &captured.status);
    if caches_removed.is_empty() {
        return Ok((captured, caches_removed));
    }
    std::fs::remove_file(patch_file)
        .map_err(crate::artifacts::ArtifactsError::io("remove", patch_file))?;
    Ok((capture(workspace, baseline, patch_file)?, caches_removed))
}

/// The change since `baseline`, as [`Workspace::capture_since`] records it. When the worktree's
/// tree is still the baseline's (the common case: validators that leave only ignored files)
/// the empty patch and status are written without diffing: one git process (`add`; the tree
/// of a small index is written in-process) instead of three.
fn capture(
    workspace: &Workspace,
    baseline: &Snapshot,
    patch_file: &Path,
) -> Result<Capture, OpcodeError> {
    let scratch = workspace.refresh_scratch_index()?;
    let tree = workspace.write_scratch_tree(&scratch.git)?;
    if tree != baseline.tree {
        let mut capture = workspace.capture_since(baseline, patch_file)?;
        if !scratch.access_restored.is_empty() {
            let restored = &mut capture.status.access_restored;
            restored.extend(scratch.access_restored);
            restored.sort();
            restored.dedup();
        }
        return Ok(capture);
    }
    crate::artifacts::safe_files::write_new(patch_file, b"")
        .map_err(crate::artifacts::ArtifactsError::io("write", patch_file))?;
    Ok(Capture {
        status: WorkspaceStatus {
            schema_version: WORKSPACE_STATUS_SCHEMA_VERSION,
            since: baseline.reference.clone(),
            since_tree: baseline.tree.clone(),
            files: Vec::new(),
            new_top_level_dirs: Vec::new(),
            diffstat: DiffStat::default(),
            access_restored: scratch.access_restored,
        },
        tree,
    })
}

/// Removes the files the visit added in tool caches (see [`crate::policy::tool_caches`]) and
/// the cache folders left empty; returns the cache entries removed (`__pycache__/`), each once.
/// A file whose folder is reached through a symbolic link is left alone (and charged).
fn remove_tool_caches(worktree: &Path, status: &WorkspaceStatus) -> Vec<String> {
    let mut entries: Vec<String> = Vec::new();
    for file in &status.files {
        let added = file.kind == crate::workspace::ChangeKind::Add && file.old_mode.is_none();
        let Some(entry) = crate::policy::tool_caches::cache_entry(&file.path) else {
            continue;
        };
        if !added || file.quoted_path.is_some() || !real_folders_up_to(worktree, &file.path) {
            continue;
        }
        if std::fs::remove_file(worktree.join(&file.path)).is_err() {
            continue;
        }
        // Cache folders emptied by the removal go too.
        let mut folder = file.path.rsplit_once('/').map(|(dir, _)| dir);
        while let Some(dir) = folder {
            let in_cache = crate::policy::tool_caches::cache_entry(dir).is_some();
            if !in_cache || std::fs::remove_dir(worktree.join(dir)).is_err() {
                break;
            }
            folder = dir.rsplit_once('/').map(|(parent, _)| parent);
        }
        if !entries.iter().any(|known| known == entry) {
            entries.push(entry.to_owned());
        }
    }
    entries
}

/// Whether every folder on the way from `worktree` to `relative` is a real folder (no link).
fn real_folders_up_to(worktree: &Path, relative: &str) -> bool {
    let mut path = worktree.to_path_buf();
    let Some((folders, _)) = relative.rsplit_once('/') else {
        return true;
    };
    folders.split('/').all(|component| {
        path.push(component);
        std::fs::symlink_metadata(&path).is_ok_and(|metadata| metadata.is_dir())
    })
}
