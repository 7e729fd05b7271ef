//! What a run pins when it starts, so that continuing it later does not quietly change what
//! judges it: the repository modules its script loaded (their text, kept in the run
//! directory, which `resume` loads instead of the worktree's) and the digests of the
//! repository's prompt files (compared when the run continues; a change is recorded).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::recorder::Recorder;
use super::run::RunError;
use crate::artifacts::{ArtifactsError, RunDir, sha256_hex, write_atomic};
use crate::artifacts::{EventPayload, event_payload::PromptsChanged};

/// Where repository modules live in the repository (as the script resolver names them).
const REPOSITORY_MODULES: &str = ".tnh/scripts/";

/// Where the run directory keeps the pinned copy of a repository module (`.tnh/scripts/x.rhai`
/// → `scripts/x.rhai`).
fn pinned_path(run_dir: &RunDir, file: &str) -> PathBuf {
    let name = file.strip_prefix(REPOSITORY_MODULES).unwrap_or(file);
    run_dir.scripts_dir().join(name)
}

/// Pins the repository modules a run's script loaded: each text is written under `scripts/`
/// in the run directory and its SHA-256 kept in `metadata.json` (`script_modules`), before
/// any agent runs.
pub fn pin_script_modules(
    recorder: &mut Recorder,
    modules: &BTreeMap<String, String>,
) -> Result<(), RunError> {
    let run_dir = recorder.run_dir().clone();
    let mut digests = BTreeMap::new();
    for (file, text) in modules {
        write_atomic(&pinned_path(&run_dir, file), text.as_bytes())?;
        digests.insert(file.clone(), sha256_hex(text.as_bytes()));
    }
    recorder.update_metadata(|metadata| metadata.script_modules = Some(digests))?;
    Ok(())
}

/// The repository modules a run pinned when it started (file → text), each checked against
/// the digest `metadata.json` keeps; `None` when the run has not pinned any yet (it had not
/// loaded its script, or was started by a release that did not pin them).
pub fn pinned_script_modules(
    recorder: &Recorder,
) -> Result<Option<BTreeMap<String, String>>, RunError> {
    let Some(digests) = recorder.metadata().script_modules.clone() else {
        return Ok(None);
    };
    let run_dir = recorder.run_dir();
    let mut modules = BTreeMap::new();
    for (file, digest) in digests {
        let path = pinned_path(run_dir, &file);
        let damaged = |problem: String| RunError::PinnedModule {
            run_id: recorder.metadata().run_id.clone(),
            file: file.clone(),
            path: path.clone(),
            problem,
        };
        // The run directory is writable by agents: only a regular file is read.
        let text = crate::artifacts::safe_files::read_regular_text(&path)
            .map_err(|error| damaged(format!("it cannot be read: {error}")))?;
        let found = sha256_hex(text.as_bytes());
        if found != digest {
            return Err(damaged(format!(
                "its SHA-256 is {found}, but the run pinned {digest}"
            )));
        }
        modules.insert(file, text);
    }
    Ok(Some(modules))
}

/// The repository's prompt files (`<repo>/.tnh/prompts/**/*.md`, as the prompt catalog reads
/// them), by path relative to the repository root, each with the SHA-256 of its bytes. A file
/// that cannot be read is recorded as `unreadable`, so it still shows as a change.
pub fn prompt_digests(repo: &Path) -> BTreeMap<String, String> {
    let folder = repo.join(".tnh").join("prompts");
    let mut digests = BTreeMap::new();
    for entry in walkdir::WalkDir::new(folder).into_iter().flatten() {
        let path = entry.path();
        if entry.file_type().is_file()
            && path.extension().is_some_and(|extension| extension == "md")
        {
            let relative = path
                .strip_prefix(repo)
                .unwrap_or(path)
                .display()
                .to_string();
            // Links are not followed; opened without blocking (a FIFO swapped in meanwhile
            // is refused, not waited on).
            let digest = crate::artifacts::safe_files::read_regular(path, u64::MAX)
                .map(|(bytes, _)| sha256_hex(&bytes))
                .unwrap_or_else(|_| "unreadable".to_owned());
            digests.insert(relative, digest);
        }
    }
    digests
}

/// A run continues with the repository's prompts as they are now (`found`): when they differ
/// from those it started (or last continued) with, a `prompts_changed` event lists the files
/// edited, added or removed, and the new digests are kept. An agent runs as the operator and
/// can edit them (the guard reports that as a change of the operator's checkout), and an
/// operator may edit them while the run is stopped: either way the change is on the record.
/// Runs recorded without digests are left alone.
pub fn record_prompts_change(
    recorder: &mut Recorder,
    found: BTreeMap<String, String>,
) -> Result<(), ArtifactsError> {
    let Some(recorded) = recorder.metadata().prompts_sha256.clone() else {
        return Ok(());
    };
    if recorded == found {
        return Ok(());
    }
    let changed: Vec<String> = recorded
        .keys()
        .chain(found.keys())
        .filter(|file| recorded.get(*file) != found.get(*file))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .cloned()
        .collect();
    let fields = PromptsChanged {
        path: ".tnh/prompts".to_owned(),
        changed,
    };
    recorder.event(None, EventPayload::PromptsChanged(fields))?;
    recorder.update_metadata(|metadata| metadata.prompts_sha256 = Some(found))
}
