//! Run directories as the workspace sees them: finding a run's workspace record in
//! `<repo>/.tnh/run/<run_id>/metadata.json` (for `rollback` and `runs clean`), and removing
//! finished runs' worktrees (with `--all`, their directories, after the journal's record of
//! each is kept in `.tnh/history/`). Only the fields this module needs are read; the kernel owns the
//! rest of the file.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;

use super::error::WorkspaceError;
use super::git::Git;
use super::snapshot::refs_prefix;
use super::worktree::{Workspace, WorkspaceRecord};
use crate::ids::RunId;

/// The fields of `metadata.json` the workspace needs.
#[derive(Debug, Clone, Deserialize)]
struct MetadataView {
    run_id: String,
    workflow_id: String,
    repo_root: PathBuf,
    worktree_path: PathBuf,
    branch: String,
    base_ref: String,
    base_sha: String,
    #[serde(default)]
    ended_at: Option<String>,
}

/// A run found on disk.
#[derive(Debug, Clone)]
pub struct RunEntry {
    /// The run directory.
    pub dir: PathBuf,
    /// Its workspace record.
    pub record: WorkspaceRecord,
    /// When it ended; `None` while it runs (or waits).
    pub ended_at: Option<SystemTime>,
}

/// `<repo_root>/.tnh/run`.
pub fn runs_dir(repo_root: &Path) -> PathBuf {
    repo_root.join(".tnh").join("run")
}

/// The root every command works in for the repository containing `start`: its main working
/// tree (canonical), whichever checkout `start` is in — the main one, a linked worktree made
/// with `git worktree add`, a run's worktree, or a folder inside any of them. Branches and
/// refs are shared by all checkouts, so run directories, run worktrees and `.tnh/config.yaml`
/// live in one place: `<main working tree>/.tnh/`.
pub fn find_repo_root(start: &Path) -> Result<PathBuf, WorkspaceError> {
    let repository = super::error::discover(start)?;
    main_working_tree(&repository)
}

/// The main working tree of `repository`: where git checks out the repository's own `HEAD`.
/// From the main checkout that is the repository's working directory as git defines it
/// (`core.worktree`, as a submodule's git folder sets it; the folder whose `.git` file points
/// at the git folder, as `git init --separate-git-dir` makes it; else the folder holding
/// `.git`). From a linked worktree it is read from the common git folder: its `core.worktree`,
/// else the folder holding it when it is a `.git`. A bare repository has none.
pub(crate) fn main_working_tree(repository: &git2::Repository) -> Result<PathBuf, WorkspaceError> {
    let common_dir = repository.commondir();
    if repository.is_bare() {
        return Err(WorkspaceError::BareRepository(common_dir.to_owned()));
    }
    let root = if repository.is_worktree() {
        linked_worktrees_main(common_dir)?
    } else {
        repository
            .workdir()
            .ok_or_else(|| WorkspaceError::BareRepository(common_dir.to_owned()))?
            .to_owned()
    };
    root.canonicalize()
        .map_err(|source| WorkspaceError::io("resolve", &root, source))
}

/// The main working tree of the repository whose common git folder is `common_dir`, seen from
/// one of its linked worktrees.
fn linked_worktrees_main(common_dir: &Path) -> Result<PathBuf, WorkspaceError> {
    let main = git2::Repository::open_ext(
        common_dir,
        git2::RepositoryOpenFlags::NO_SEARCH,
        std::iter::empty::<&std::ffi::OsStr>(),
    )
    .map_err(|error| super::error::open_error(common_dir, error))?;
    if main.is_bare() {
        return Err(WorkspaceError::BareRepository(common_dir.to_owned()));
    }
    // libgit2 resolves `core.worktree` (relative to the git folder) when it is set, and
    // otherwise takes the git folder's parent, which is right only for a `.git` folder.
    let worktree_set = main
        .config()
        .and_then(|config| config.open_level(git2::ConfigLevel::Local))
        .is_ok_and(|local| local.get_entry("core.worktree").is_ok());
    let named_dot_git = common_dir.file_name().is_some_and(|name| name == ".git");
    match main.workdir() {
        Some(workdir) if worktree_set || named_dot_git => Ok(workdir.to_owned()),
        _ => Err(WorkspaceError::NoMainWorkingTree(common_dir.to_owned())),
    }
}

/// The working tree of the checkout containing `start` (a linked worktree's own folder, not
/// the main working tree), if `start` is in a non-bare repository.
pub fn checkout_root(start: &Path) -> Option<PathBuf> {
    let repository = super::error::discover(start).ok()?;
    repository.workdir()?.canonicalize().ok()
}

/// How much of a configuration file [`ignored_checkout_config`] compares.
const CONFIG_READ_LIMIT: u64 = 16 * 1024 * 1024;

/// What to tell someone working in `checkout` whose own `.tnh/config.yaml` is not read: every
/// checkout uses the file of the main working tree `root` (unless a file is named explicitly),
/// so a linked worktree's (or a run's worktree's) own file that differs from it is ignored.
/// `None` when `checkout` is the main working tree, has no such file, or has the same one.
/// The text names both files; the caller says how to pick another.
pub fn ignored_checkout_config(checkout: &Path, root: &Path) -> Option<String> {
    let checkout = checkout.canonicalize().ok()?;
    let root = root.canonicalize().unwrap_or_else(|_| root.to_owned());
    let ignored = checkout.join(".tnh/config.yaml");
    let used = root.join(".tnh/config.yaml");
    if checkout == root || !ignored.is_file() {
        return None;
    }
    // Read as the configuration is: only a regular file (a link to one followed), without
    // blocking, so a FIFO an agent leaves in either place cannot hang the command.
    let read = |path: &Path| {
        crate::artifacts::safe_files::read_regular_following(path, CONFIG_READ_LIMIT).ok()
    };
    if read(&ignored) == read(&used) {
        return None;
    }
    Some(format!(
        "ignoring `{}`: every checkout of this repository uses `{}`",
        ignored.display(),
        used.display()
    ))
}

/// Loads the run `run_id` of the repository at `repo_root`.
pub fn load_run(repo_root: &Path, run_id: &str) -> Result<RunEntry, WorkspaceError> {
    let run_error = |reason: String| WorkspaceError::Run {
        run_id: run_id.to_owned(),
        reason,
    };
    let plain = !run_id.is_empty()
        && run_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !run_id.starts_with('.');
    if !plain {
        return Err(run_error("not a run id".to_owned()));
    }
    let dir = runs_dir(repo_root).join(run_id);
    let metadata_path = crate::artifacts::RunDir::at(&dir).metadata();
    // Only a regular file, read without blocking and bounded: an agent knows the run folder.
    let text = match crate::artifacts::safe_files::read_regular(&metadata_path, 16 * 1024 * 1024)
        .and_then(|(bytes, _)| {
            String::from_utf8(bytes)
                .map_err(|error| std::io::Error::new(std::io::ErrorKind::InvalidData, error))
        }) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(run_error(format!(
                "no such run in `{}`",
                runs_dir(repo_root).display()
            )));
        }
        Err(source) => return Err(WorkspaceError::io("read", metadata_path, source)),
    };
    let view: MetadataView = serde_json::from_str(&text).map_err(|error| {
        run_error(format!(
            "`{}` is not valid run metadata: {error}",
            metadata_path.display()
        ))
    })?;
    if let Err(problem) = owned_by_the_run(repo_root, run_id, &view) {
        return Err(run_error(format!(
            "`{}` is not valid run metadata: {problem}; nothing of it is touched",
            metadata_path.display()
        )));
    }
    let ended_at = match view.ended_at.as_deref() {
        None => None,
        Some(text) => Some(parse_timestamp(text).ok_or_else(|| {
            run_error(format!("`ended_at` is not an RFC 3339 UTC time: `{text}`"))
        })?),
    };
    Ok(RunEntry {
        dir,
        record: WorkspaceRecord {
            run_id: RunId::new(run_id),
            repo_root: view.repo_root,
            worktree_path: view.worktree_path,
            branch: view.branch,
            base_ref: view.base_ref,
            base_sha: view.base_sha,
        },
        ended_at,
    })
}

/// Checks that the record names only what the run `run_id` (its folder's name) can own in the
/// repository at `repo_root`: `runs clean` removes its worktree and, with `--all`, its work
/// branch, and `rollback` resets them. Anyone who can write `<repo>/.tnh/run/` — an agent runs
/// as the operator — could otherwise have `runs clean --all` delete `main` (`branch: main`) or
/// force-remove the operator's linked worktree (`worktree_path` naming it). So the record must
/// be this repository's (`repo_root`, compared resolved), its worktree exactly
/// `<repo_root>/.tnh/worktrees/<run_id>` with no symlink on the way, and its branch
/// `tnh/<workflow_id>/<run_id>`.
fn owned_by_the_run(repo_root: &Path, run_id: &str, view: &MetadataView) -> Result<(), String> {
    if view.run_id != run_id {
        return Err(format!(
            "it names run `{}`, not the run of its folder",
            view.run_id
        ));
    }
    let resolve = |path: &Path| path.canonicalize().ok();
    let root = resolve(repo_root).unwrap_or_else(|| repo_root.to_owned());
    if resolve(&view.repo_root).as_ref() != Some(&root) {
        return Err(format!(
            "its repo_root `{}` is not this repository, `{}`",
            view.repo_root.display(),
            root.display()
        ));
    }
    let worktrees = root.join(".tnh").join("worktrees");
    let expected = worktrees.join(run_id);
    // The folders above the worktree are the repository's own, not links an agent put there
    // to lead `.tnh/worktrees/<run_id>` somewhere else (the worktree itself may be gone, or
    // displaced by a link that is then removed, never followed).
    let parent_is_real = match std::fs::symlink_metadata(&worktrees) {
        Ok(_) => resolve(&worktrees).as_ref() == Some(&worktrees),
        Err(_) => true,
    };
    if view.worktree_path != expected || !parent_is_real {
        return Err(format!(
            "its worktree_path `{}` is not `{}`",
            view.worktree_path.display(),
            expected.display()
        ));
    }
    let branch = super::worktree::work_branch_name(
        &crate::ids::WorkflowId::new(&view.workflow_id),
        &RunId::new(run_id),
    );
    let valid_ref = git2::Reference::is_valid_name(&format!("refs/heads/{branch}"))
        && !view.workflow_id.contains("..");
    if view.branch != branch || !valid_ref {
        return Err(format!(
            "its branch `{}` is not the run's work branch `{branch}`",
            view.branch
        ));
    }
    Ok(())
}

/// What `runs clean` should remove.
#[derive(Debug, Clone, Copy)]
pub struct CleanOptions {
    /// Only runs that ended at least this long ago.
    pub older_than: Option<Duration>,
    /// Remove run directories, snapshot refs and work branches too.
    pub all: bool,
    /// The time to measure age from.
    pub now: SystemTime,
    /// How many of the most recently finished runs are kept whatever their age.
    pub keep: usize,
    /// Keeps a run's journal record (repository, run directory, run id) before `all` removes
    /// the run: the kernel's, which sits above the workspace. A clean that cannot keep it
    /// removes nothing of that run.
    pub keep_history: KeepHistory,
}

/// See [`CleanOptions::keep_history`].
pub type KeepHistory = fn(&Path, &crate::artifacts::RunDir, &str) -> Result<(), String>;

/// For a clean that removes no run directory (`all` unset): nothing to keep.
fn keep_nothing(_: &Path, _: &crate::artifacts::RunDir, _: &str) -> Result<(), String> {
    Ok(())
}

/// What `runs clean` did.
#[derive(Debug, Default)]
pub struct CleanReport {
    /// Runs whose worktree was removed.
    pub cleaned: Vec<String>,
    /// Of those, the runs whose worktree's last state was kept first, with the ref that
    /// holds it (`refs/tnh/runs/<run_id>/final`); not with `--all`, which removes the refs.
    pub kept: Vec<(String, String)>,
    /// Runs whose worktree an earlier `runs clean` (or the operator) had already removed:
    /// nothing was removed now (git's record of it, if any, was pruned).
    pub already_clean: Vec<String>,
    /// Runs kept because they have not ended.
    pub running: Vec<String>,
    /// Runs kept because they ended too recently.
    pub recent: Vec<String>,
    /// Runs kept because they are among the most recently finished (`--keep`).
    pub newest: Vec<String>,
    /// Runs skipped because another process holds their lock (a `resume`, a gate decision,
    /// a `rollback` or another `runs clean`), with what the lock says of its holder.
    pub busy: Vec<(String, String)>,
    /// Runs that were gone by the time they were reached: removed by another `runs clean`.
    pub gone: Vec<String>,
    /// Run directories an interrupted `runs clean --all` had set aside
    /// (`.tnh/run/.removing-<id>`) and that this one finished removing: their run ids.
    pub finished: Vec<String>,
    /// Run directories that could not be read, with the reason.
    pub unreadable: Vec<(String, String)>,
    /// Runs whose removal failed, with the reason; the others were still cleaned.
    pub failed: Vec<(String, WorkspaceError)>,
}

/// The name a run directory is renamed to (`.tnh/run/.removing-<id>`) by `runs clean --all`
/// before it is deleted: the rename is atomic, so a run directory is either whole or set
/// aside, never half deleted. No listing takes it for a run (a run id never starts with a
/// dot), and the next `runs clean` finishes removing it.
pub const REMOVING_PREFIX: &str = ".removing-";

/// What became of one run.
enum Cleaned {
    /// Removed (its worktree, or everything with `--all`); the ref its last state was kept at.
    Removed(Option<String>),
    /// Without `--all`: its worktree was already gone.
    AlreadyClean,
    NotEnded,
    Recent,
    /// Its lock is held by another process: what the lock says.
    Busy(String),
    /// Already gone.
    Gone,
    /// Its directory cannot be read as a run's: why.
    Unreadable(String),
}

/// Removes the worktrees of finished runs (and, with `all`, everything else they left).
///
/// Each run is cleaned holding its lock (`<run dir>/lock`, the lock `resume`, gate decisions
/// and `rollback` take): a run whose lock another process holds is skipped, and a run guard
/// watching other runs' refs (`RunActivity`) sees the run was worked on, so the `final` ref
/// written here, or the refs removed, are left as they are. A run already gone (another
/// `runs clean` removed it) is reported as such, never an error.
pub fn clean_runs(repo_root: &Path, options: CleanOptions) -> Result<CleanReport, WorkspaceError> {
    let mut report = CleanReport::default();
    let (run_ids, leftovers) = list_run_ids(repo_root)?;
    // What an interrupted `runs clean --all` set aside first.
    for name in leftovers {
        let trash = runs_dir(repo_root).join(&name);
        let run_id = name[REMOVING_PREFIX.len()..].to_owned();
        match remove_tree(&trash) {
            Ok(()) => report.finished.push(run_id),
            Err(error) => report.failed.push((run_id, error)),
        }
    }
    let newest = newest_finished(repo_root, &run_ids, options.keep);
    for run_id in run_ids {
        if newest.contains(&run_id) {
            report.newest.push(run_id);
            continue;
        }
        match clean_run(repo_root, &run_id, options) {
            Ok(Cleaned::Removed(kept)) => {
                if let Some(reference) = kept {
                    report.kept.push((run_id.clone(), reference));
                }
                report.cleaned.push(run_id);
            }
            Ok(Cleaned::AlreadyClean) => report.already_clean.push(run_id),
            Ok(Cleaned::NotEnded) => report.running.push(run_id),
            Ok(Cleaned::Recent) => report.recent.push(run_id),
            Ok(Cleaned::Busy(holder)) => report.busy.push((run_id, holder)),
            Ok(Cleaned::Gone) => report.gone.push(run_id),
            Ok(Cleaned::Unreadable(reason)) => report.unreadable.push((run_id, reason)),
            Err(error) => report.failed.push((run_id, error)),
        }
    }
    Ok(report)
}

/// The `count` most recently finished of `run_ids`.
fn newest_finished(
    repo_root: &Path,
    run_ids: &[String],
    count: usize,
) -> std::collections::BTreeSet<String> {
    if count == 0 {
        return std::collections::BTreeSet::new();
    }
    let mut finished: Vec<(SystemTime, &String)> = run_ids
        .iter()
        .filter_map(|run_id| Some((load_run(repo_root, run_id).ok()?.ended_at?, run_id)))
        .collect();
    finished.sort_by(|left, right| right.cmp(left));
    finished
        .into_iter()
        .take(count)
        .map(|(_, run_id)| run_id.clone())
        .collect()
}

/// Cleans run `run_id` if it has ended (long enough ago), holding its lock.
fn clean_run(
    repo_root: &Path,
    run_id: &str,
    options: CleanOptions,
) -> Result<Cleaned, WorkspaceError> {
    let dir = runs_dir(repo_root).join(run_id);
    let gone = || {
        std::fs::symlink_metadata(&dir)
            .is_err_and(|error| error.kind() == std::io::ErrorKind::NotFound)
    };
    // Read once without the lock: a run that has not ended (or ended too recently) is not
    // touched at all, its lock file included.
    let entry = match load_run(repo_root, run_id) {
        Ok(entry) => entry,
        Err(_) if gone() => return Ok(Cleaned::Gone),
        Err(error) => return Ok(Cleaned::Unreadable(error.to_string())),
    };
    let Some(ended_at) = entry.ended_at else {
        return Ok(Cleaned::NotEnded);
    };
    let age = options.now.duration_since(ended_at).unwrap_or_default();
    if options.older_than.is_some_and(|minimum| age < minimum) {
        return Ok(Cleaned::Recent);
    }
    let lock_path = crate::artifacts::RunDir::at(&dir).lock();
    let _lock = match crate::artifacts::lock::RunLock::acquire(&lock_path) {
        Ok(lock) => lock,
        Err(held @ crate::artifacts::lock::LockError::Held { .. }) => {
            return Ok(Cleaned::Busy(held.to_string()));
        }
        Err(_) if gone() => return Ok(Cleaned::Gone),
        Err(error) => {
            return Err(WorkspaceError::io(
                "lock",
                &lock_path,
                std::io::Error::other(error.to_string()),
            ));
        }
    };
    // Read again under the lock: another `runs clean` may have removed the run meanwhile
    // (the lock taken is then that of a folder set aside).
    let entry = match load_run(repo_root, run_id) {
        Ok(entry) => entry,
        Err(_) if gone() => return Ok(Cleaned::Gone),
        Err(error) => return Ok(Cleaned::Unreadable(error.to_string())),
    };
    // The agents' work is usually uncommitted in the worktree: its last state is kept
    // under the run's refs before the folder goes (unless the refs go too).
    let found = std::fs::symlink_metadata(&entry.record.worktree_path);
    let real_folder = found.as_ref().is_ok_and(|metadata| metadata.is_dir());
    // Nothing there: an earlier `runs clean` removed it (git's record, if left, is pruned).
    let already_clean = !options.all
        && found
            .as_ref()
            .is_err_and(|error| error.kind() == std::io::ErrorKind::NotFound);
    let mut kept = None;
    if !options.all && real_folder {
        let workspace = Workspace::open(&entry.record)?;
        kept = Some(workspace.snapshot_final()?.reference);
    }
    if options.all {
        // The journal's view of the run is kept before anything of it goes: a clean that
        // cannot keep it removes nothing.
        let run_dir = crate::artifacts::RunDir::at(&entry.dir);
        (options.keep_history)(repo_root, &run_dir, run_id).map_err(|error| {
            WorkspaceError::io(
                "keep the journal's record of",
                &entry.dir,
                std::io::Error::other(error),
            )
        })?;
    }
    Workspace::remove_worktree(&entry.record)?;
    if options.all {
        remove_run_refs(&entry.record)?;
        // Set aside in one rename, then deleted: killed halfway, the folder left is trash
        // the next `runs clean` finishes, not a run without its metadata.
        let trash = runs_dir(repo_root).join(format!("{REMOVING_PREFIX}{run_id}"));
        remove_tree(&trash)?;
        match std::fs::rename(&entry.dir, &trash) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Cleaned::Gone);
            }
            Err(source) => return Err(WorkspaceError::io("set aside", &entry.dir, source)),
        }
        remove_tree(&trash)?;
    }
    if already_clean {
        return Ok(Cleaned::AlreadyClean);
    }
    Ok(Cleaned::Removed(kept))
}

/// Removes the checkout of finished run `run_id` as `runs clean` does (its last state kept
/// under its `final` ref, then packed with its other refs), holding its lock. Whether it was
/// removed: `false` for a run that has not finished, is busy, or had none.
pub(crate) fn remove_finished_checkout(
    repo_root: &Path,
    run_id: &str,
) -> Result<bool, WorkspaceError> {
    let options = CleanOptions {
        older_than: None,
        all: false,
        now: SystemTime::now(),
        keep: 0,
        keep_history: keep_nothing,
    };
    let removed = matches!(clean_run(repo_root, run_id, options)?, Cleaned::Removed(_));
    if removed {
        let own = format!("--include={}/*", refs_prefix(&RunId::new(run_id)));
        // Refs left loose are read the same: packing is an optimisation only.
        let _ = Git::new(repo_root).run(["pack-refs", own.as_str()]);
    }
    Ok(removed)
}

/// Removes a folder and everything in it; one already gone (or emptied by another process
/// meanwhile) is no error.
fn remove_tree(path: &Path) -> Result<(), WorkspaceError> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(_) if std::fs::symlink_metadata(path).is_err() => Ok(()),
        Err(source) => Err(WorkspaceError::io("remove", path, source)),
    }
}

/// The run directories' names, and apart the folders an interrupted `runs clean --all` set
/// aside ([`REMOVING_PREFIX`]).
fn list_run_ids(repo_root: &Path) -> Result<(Vec<String>, Vec<String>), WorkspaceError> {
    let dir = runs_dir(repo_root);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok((Vec::new(), Vec::new()));
        }
        Err(source) => return Err(WorkspaceError::io("list", dir, source)),
    };
    let (mut ids, mut leftovers) = (Vec::new(), Vec::new());
    for entry in entries {
        let entry = entry.map_err(|source| WorkspaceError::io("list", &dir, source))?;
        if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(REMOVING_PREFIX) && name.len() > REMOVING_PREFIX.len() {
                leftovers.push(name);
            } else {
                ids.push(name);
            }
        }
    }
    ids.sort();
    leftovers.sort();
    Ok((ids, leftovers))
}

fn remove_run_refs(record: &WorkspaceRecord) -> Result<(), WorkspaceError> {
    let git = Git::new(&record.repo_root);
    let prefix = format!("{}/", refs_prefix(&record.run_id));
    let branch = format!("refs/heads/{}", record.branch);
    let listing = git.text([
        "for-each-ref",
        "--format=%(refname)",
        prefix.as_str(),
        branch.as_str(),
    ])?;
    for name in listing.lines() {
        // Never through a symbolic ref: the work branch made one naming `main` must not
        // take `main` with it.
        git.run(["update-ref", "--no-deref", "-d", name])?;
    }
    Ok(())
}

/// Parses an RFC 3339 time (`2026-04-05T10:00:00Z`, fractional seconds and offsets allowed).
pub fn parse_timestamp(text: &str) -> Option<SystemTime> {
    let bytes = text.as_bytes();
    if bytes.len() < 20
        || bytes[4] != b'-'
        || bytes[7] != b'-'
        || !matches!(bytes[10], b'T' | b't' | b' ')
    {
        return None;
    }
    let number = |range: std::ops::Range<usize>| text.get(range)?.parse::<i64>().ok();
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut rest = &text[19..];
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(fraction.len());
        rest = &fraction[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && matches!(&rest[..1], "+" | "-") && &rest[3..4] == ":" => {
            let minutes = rest[1..3].parse::<i64>().ok()? * 60 + rest[4..6].parse::<i64>().ok()?;
            if &rest[..1] == "-" {
                -minutes * 60
            } else {
                minutes * 60
            }
        }
        _ => return None,
    };
    let seconds =
        days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset;
    u64::try_from(seconds)
        .ok()
        .map(|seconds| UNIX_EPOCH + Duration::from_secs(seconds))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Of two `runs clean --all` at once, the one that reached a run the
    /// other had just removed failed with exit 4 ("failed to remove …: No such file or
    /// directory"). A run gone by the time it is reached is reported as gone, no error.
    #[test]
    fn a_run_removed_by_another_clean_meanwhile_counts_as_gone() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(runs_dir(root.path())).unwrap();
        let options = CleanOptions {
            older_than: None,
            all: true,
            now: SystemTime::now(),
            keep: 0,
            keep_history: |_, _, _| Ok(()),
        };
        let cleaned = clean_run(root.path(), "20260101T000000Z-abc123", options).unwrap();
        assert!(matches!(cleaned, Cleaned::Gone));
        // Its folder already set aside and emptied by the other one.
        remove_tree(&runs_dir(root.path()).join(".removing-x")).unwrap();
    }

    /// A FIFO an agent left as a run's `metadata.json` (it knows the run folder) hung every
    /// command that lists or cleans runs.
    #[test]
    fn a_fifo_as_a_runs_metadata_is_an_error_not_a_hang() {
        let root = tempfile::tempdir().unwrap();
        let run = root.path().join(".tnh/run/20261122T051437Z-94cea2");
        std::fs::create_dir_all(&run).unwrap();
        nix::unistd::mkfifo(&run.join("metadata.json"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let error = load_run(root.path(), "20261122T051437Z-94cea2").unwrap_err();
        assert!(error.to_string().contains("not a regular file"), "{error}");
    }

    /// A FIFO in the place of either configuration file made the comparison block forever
    /// (a plain read); every `tnh` command an agent runs in its worktree makes it.
    #[test]
    fn a_fifo_in_the_place_of_a_configuration_never_blocks_the_comparison() {
        let root = tempfile::tempdir().unwrap();
        let checkout = tempfile::tempdir().unwrap();
        for folder in [root.path(), checkout.path()] {
            std::fs::create_dir(folder.join(".tnh")).unwrap();
        }
        nix::unistd::mkfifo(
            &root.path().join(".tnh/config.yaml"),
            nix::sys::stat::Mode::S_IRWXU,
        )
        .unwrap();
        std::fs::write(checkout.path().join(".tnh/config.yaml"), "agents: {}\n").unwrap();
        let note = ignored_checkout_config(checkout.path(), root.path()).unwrap();
        assert!(note.starts_with("ignoring `"), "{note}");
    }

    #[test]
    fn timestamps_parse_to_unix_seconds() {
        let at = |text| {
            parse_timestamp(text).map(|time| time.duration_since(UNIX_EPOCH).unwrap().as_secs())
        };
        assert_eq!(at("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(at("2026-04-05T10:00:00Z"), Some(1_775_383_200));
        assert_eq!(at("2026-04-05T12:00:00.123+02:00"), Some(1_775_383_200));
        assert_eq!(at("2026-04-05"), None);
        assert_eq!(at("2026-13-05T10:00:00Z"), None);
    }
}
