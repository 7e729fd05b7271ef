//! The worktree of a run killed while it was being created, made again from scratch.

use std::path::Path;

use super::run_error::RunError;
use crate::artifacts::{ArtifactsError, RunMetadata};
use crate::ids::WorkflowId;
use crate::workspace::{Workspace, WorkspaceError};

/// The worktree of a run killed while it was being created, made again from scratch: what git
/// had made of it (a folder checked out halfway, the work branch) is removed first, unless the
/// branch is there, which is checked out again (nothing ran on it yet: it is the base commit).
pub(super) fn create_again(
    record: &crate::workspace::WorkspaceRecord,
    metadata: &RunMetadata,
) -> Result<Workspace, RunError> {
    stop_leftover_git(&record.worktree_path);
    if Workspace::remove_worktree(record).is_err() {
        // `git worktree remove` refuses a folder whose checkout git never finished; no step
        // ran in it, so nothing in it is anyone's work.
        if record.worktree_path.exists() {
            std::fs::remove_dir_all(&record.worktree_path)
                .map_err(ArtifactsError::io("remove", &record.worktree_path))?;
        }
        Workspace::remove_worktree(record)?;
    }
    let workspace = match Workspace::open_or_recreate(record) {
        Ok((workspace, _)) => workspace,
        // Killed before git made the branch: made as `run` would have, from the base commit
        // when it was known.
        Err(WorkspaceError::Missing { .. }) => {
            let base = if metadata.base_sha.is_empty() {
                metadata.base_ref.as_str()
            } else {
                metadata.base_sha.as_str()
            };
            let workspace = Workspace::create(
                &record.repo_root,
                &record.run_id,
                &WorkflowId::new(metadata.workflow_id.as_str()),
                Some(base),
            )?;
            let created = crate::workspace::WorkspaceRecord {
                base_ref: metadata.base_ref.clone(),
                ..workspace.record().clone()
            };
            return Ok(Workspace::open(&created)?);
        }
        Err(error) => return Err(error.into()),
    };
    // `git worktree add -b` made the branch at the base commit, and nothing ran on it since.
    let branch = format!("refs/heads/{}", record.branch);
    let base_sha = workspace
        .repo_git
        .text(["rev-parse", "--verify", branch.as_str()])?;
    let pre_run = format!("{}/pre_run", crate::workspace::refs_prefix(&record.run_id));
    workspace
        .repo_git
        .run(["update-ref", pre_run.as_str(), base_sha.as_str()])?;
    let created = crate::workspace::WorkspaceRecord {
        base_sha,
        ..record.clone()
    };
    Ok(Workspace::open(&created)?)
}

/// The `git` processes that a SIGKILLed `run` or `resume` left creating a worktree: `git
/// worktree add` (which names the folder) and the checkout it runs in the folder. They are
/// killed, and waited for, before the half-made folder is removed: removing it while they
/// still write into it fails (`Directory not empty`), or leaves their files in the new
/// checkout. Only `git` processes are looked at; one that cannot be inspected is skipped.
fn stop_leftover_git(worktree: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let own = std::process::id();
    let mut killed = Vec::new();
    for pid in crate::proc::pids() {
        let Some(pid) = u32::try_from(pid).ok().filter(|pid| *pid != own) else {
            continue;
        };
        let is_git = crate::proc::command_name(pid).is_some_and(|comm| comm == "git");
        if !is_git {
            continue;
        }
        let works_in =
            crate::proc::working_directory(pid).is_some_and(|cwd| cwd.starts_with(worktree));
        let names = crate::proc::command_line(pid).is_some_and(|command| {
            command
                .split(|byte| *byte == 0)
                .any(|arg| Path::new(std::ffi::OsStr::from_bytes(arg)).starts_with(worktree))
        });
        let Ok(raw) = i32::try_from(pid) else {
            continue;
        };
        if (works_in || names)
            && nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(raw),
                nix::sys::signal::Signal::SIGKILL,
            )
            .is_ok()
        {
            killed.push(raw);
        }
    }
    // Gone, or a zombie its new parent has not reaped yet: either way it writes nothing more.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while killed
        .iter()
        .any(|pid| crate::runner::process::read_stat(*pid).is_some_and(|stat| stat.is_live()))
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}
