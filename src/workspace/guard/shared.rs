//! Shared git files changed while other runs were driven. Every guard records the watched
//! files (`.git/config`, hooks, `info/exclude`, the operator's global configuration, …) at its
//! own step's start and puts back what changed by its step's end. With runs side by side, the
//! run whose step ended first put back — and was charged with — what another run's agent did,
//! and the guard of the run whose agent did it then found the file as it had recorded it and
//! ended clean. Who changed a file all runs share cannot be told, so:
//!
//! - A guard that puts a shared file back while another run was driven during its step (or had
//!   a step whose process died still to be checked) first writes a notice
//!   (`<git-common-dir>/tnh-shared-changes/<time>-<run>-….json`, readable by its owner only:
//!   it holds the file's contents): which file, what it found and what it put back, when, by
//!   which run, and the runs driven during its step. Its own report names those runs
//!   (`other_runs_driven`), so its violation says "possibly by run X".
//! - At the end of its step every guard reads, after the files themselves, the notices other
//!   runs wrote during its step: one that found a file otherwise than this run had it (as
//!   recorded at its step's start, or as an earlier notice put it back) tells of a change
//!   during this step, so this run is charged too ([`SharedChange`],
//!   `git_config_put_back_by_other_runs`), naming the run whose guard put it back and the
//!   runs driven during that run's step. The guilty run never ends clean; every run whose
//!   step overlapped the change answers for it, each record naming the others.
//! - A change one run's agent made before another run's step started is in what that step's
//!   guard recorded. When the first run's guard puts it back during the second run's step,
//!   the second run's guard would write its record — the change — back: the last notice of a
//!   run driven meanwhile that found the file as recorded and put back what it holds now makes
//!   it keep the file as it is instead, and charge this run too (its agent worked with it).
//! - Otherwise notices only add findings. An agent runs as the operator and can write them
//!   like any file of the repository, so what a guard finds itself never depends on them; a
//!   forged notice can charge runs, or (naming a run driven meanwhile) keep a change this
//!   run's guard would have undone — still charged —, and a deleted one hides a change from
//!   the runs that did not see it themselves (docs/workspace.md, Limitations).
//! - A notice outlives its writer (a crash: the killed run's `resume` checks its step with
//!   the notices written since it started), and is removed by a later check (the last of
//!   the runs it names, usually) once no run it names is driven or has a step still to be
//!   checked.
//!
//! Order makes it safe without a lock: a writer writes its notice before it puts the file
//! back, and a reader reads the files before the notices, so a reader that finds the file put
//! back always finds the notice too.

use std::cell::OnceCell;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Bytes, Listing, RefGuard, WATCHED_FILE_LIMIT};
use crate::workspace::error::WorkspaceError;
use crate::workspace::runs::runs_dir;

/// The folder of notices, in the repository's common git folder.
pub const SHARED_CHANGES_DIR: &str = "tnh-shared-changes";

/// Version of a notice.
const NOTICE_SCHEMA_VERSION: u32 = 1;

/// A change to a shared git file during the step that another run's guard found and put back
/// before this run's guard looked: this run's agent may have made it as well as any other run
/// driven meanwhile, so this run answers for it too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SharedChange {
    /// The file, named as in `git_config_changed` (`config`, `hooks/post-checkout`, a full
    /// path outside the repository).
    pub path: String,
    /// The run whose guard found it changed and put it back.
    pub put_back_by: String,
    /// When that guard did.
    pub at: String,
    /// The other runs whose agents may have made it: the run that put it back and the runs
    /// driven during its step (this run left out).
    pub possibly_by: Vec<String>,
}

/// What a guard that put a shared file back leaves for the guards of other runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Notice {
    schema_version: u32,
    /// When it was written (nanoseconds since the Unix epoch), before the file was put back.
    written_at_ns: u64,
    /// The same, for a reader.
    written_at: String,
    /// The run whose guard put the file back.
    by: String,
    /// The file's full path.
    path: Bytes,
    /// The file as reports name it.
    name: String,
    /// What the guard found (`null`: no file).
    found: Option<Bytes>,
    /// What it put back (`null`: removed).
    restored: Option<Bytes>,
    /// The other runs driven during its step, or with a step still to be checked.
    runs: Vec<String>,
    /// The file had been made a link it was not (or pointed elsewhere), and was put back as
    /// the link or file it was.
    #[serde(default)]
    link: bool,
}

/// Nanoseconds since the Unix epoch.
pub(super) fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
        })
}

/// What a check knows of the runs beside it and of the notices they wrote.
pub(super) struct Shared<'a> {
    guard: &'a RefGuard,
    /// Other runs with refs, before the step or now.
    candidates: BTreeSet<String>,
    /// The other runs driven during the step.
    driven: Vec<String>,
    /// The other runs not driven whose step (a process that died) is still to be checked.
    waiting: OnceCell<Vec<String>>,
    /// The notices of other runs written during the step, oldest first.
    notices: Vec<Notice>,
    /// Whether this is a step's check (notices read, runs driven worked out), not a
    /// comparison.
    charge: bool,
    /// The kernel's table of locks, read once on first need.
    table: OnceCell<crate::artifacts::lock::LockTable>,
}

impl<'a> Shared<'a> {
    /// The runs beside the step, from those that had refs before it; `charge`: a step's
    /// check (the runs driven during it are worked out and notices charge this run), else a
    /// comparison. Before any git command runs (the guard first clears what would hang git).
    pub(super) fn new(guard: &'a RefGuard, charge: bool) -> Self {
        let mut shared = Self {
            guard,
            candidates: BTreeSet::new(),
            driven: Vec::new(),
            waiting: OnceCell::new(),
            notices: Vec::new(),
            charge,
            table: OnceCell::new(),
        };
        shared.add(guard.other_runs.keys().cloned());
        shared
    }

    /// Adds the runs that have refs in `listing` now (a run started during the step).
    pub(super) fn add_listing(&mut self, listing: &Listing) {
        let guard = self.guard;
        let runs: Vec<String> = listing
            .values
            .keys()
            .filter_map(|name| guard.other_run(name))
            .collect();
        self.add(runs);
    }

    fn add(&mut self, runs: impl IntoIterator<Item = String>) {
        let guard = self.guard;
        for run in runs {
            if run.is_empty()
                || run == guard.workspace.run_id().as_str()
                || !self.candidates.insert(run.clone())
            {
                continue;
            }
            if self.charge && guard.driven_during_step(&run, &self.table) {
                self.driven.push(run);
            }
        }
        self.driven.sort();
        self.waiting = OnceCell::new();
    }

    /// The other runs driven during the step (for the report).
    pub(super) fn driven(&self) -> &[String] {
        &self.driven
    }

    /// Reads the notices other runs wrote during the step: called once the watched files have
    /// been read, so that a file found put back always comes with its notice.
    pub(super) fn load(&mut self) {
        let (Some(started), true) = (self.guard.started_ns, self.charge) else {
            return;
        };
        let own = self.guard.workspace.run_id().as_str();
        let mut notices: Vec<(String, Notice)> = read_notices(&self.guard.notices_dir())
            .into_iter()
            .filter(|(_, notice)| notice.by != own && notice.written_at_ns >= started)
            .collect();
        notices.sort_by(|left, right| {
            (left.1.written_at_ns, &left.0).cmp(&(right.1.written_at_ns, &right.0))
        });
        self.notices = notices.into_iter().map(|(_, notice)| notice).collect();
    }

    /// The changes other runs' guards put back during the step, as this run answers for
    /// them: for each file they name, the notices are followed from what this run recorded
    /// (`recorded`; a file not recorded did not exist for it), and one that found the file
    /// otherwise than it was then (as recorded, or as the previous notice put it back) tells
    /// of a change during this step. One that found the file as this run recorded it undid a
    /// change made before this step started, which is not this run's (unless the guard
    /// kept the file as put back: [`Self::put_back_before`]).
    ///
    /// Notices add findings: an agent can write them as it can any file of the repository, so
    /// what this guard finds itself never depends on them.
    pub(super) fn charges(
        &self,
        recorded: &std::collections::BTreeMap<PathBuf, Option<Vec<u8>>>,
    ) -> Vec<SharedChange> {
        let (Some(started), true) = (self.guard.started_ns, self.charge) else {
            return Vec::new();
        };
        let mut previous: std::collections::BTreeMap<PathBuf, Option<Vec<u8>>> =
            std::collections::BTreeMap::new();
        let mut charged: Vec<SharedChange> = Vec::new();
        for notice in &self.notices {
            let path = notice.path_buf();
            if path.starts_with(&self.guard.workspace.worktree_git_dir) {
                continue;
            }
            let had = previous
                .entry(path.clone())
                .or_insert_with(|| recorded.get(&path).cloned().flatten());
            let found = notice.found.clone().map(Vec::from);
            if (found != *had || notice.link) && notice.written_at_ns >= started {
                let change = self.change_of(notice);
                if !charged.contains(&change) {
                    charged.push(change);
                }
            }
            *had = notice.restored.clone().map(Vec::from);
        }
        charged
    }

    /// The change to `path` another run's guard put back during the step from what this run
    /// recorded (`recorded`) to what the file holds `now`, when the last notice about it says
    /// so and that run was driven during the step: the state this run recorded was a change
    /// made in that run's step before this one started, which that run's guard has undone.
    /// Writing the record back would bring the change back, so the file is kept as it is, and
    /// the change is this run's finding too (its agent worked with it).
    ///
    /// The one case where a notice decides what is put back; it only ever leaves the file as
    /// it is, and only for a notice of a run driven meanwhile, so a forged notice cannot keep
    /// a change of a run working alone.
    pub(super) fn put_back_before(
        &self,
        path: &Path,
        recorded: Option<&[u8]>,
        now: &Option<Vec<u8>>,
    ) -> Option<SharedChange> {
        let notice = self
            .notices
            .iter()
            .rev()
            .find(|notice| notice.path_buf() == path)?;
        let found = notice.found.clone().map(Vec::from);
        let restored = notice.restored.clone().map(Vec::from);
        let agrees = !notice.link
            && self.driven.contains(&notice.by)
            && found.as_deref() == recorded
            && restored == *now;
        agrees.then(|| self.change_of(notice))
    }

    /// The finding a notice is for this run.
    fn change_of(&self, notice: &Notice) -> SharedChange {
        let own = self.guard.workspace.run_id().as_str();
        let mut possibly_by: Vec<String> = std::iter::once(notice.by.clone())
            .chain(notice.runs.iter().cloned())
            .filter(|run| run != own)
            .collect();
        possibly_by.sort();
        possibly_by.dedup();
        SharedChange {
            path: notice.name.clone(),
            put_back_by: notice.by.clone(),
            at: notice.written_at.clone(),
            possibly_by,
        }
    }

    /// Leaves a notice that this run's guard puts `path` (named `name`) back from `found` to
    /// `restored`, written before the file is: when another run is driven, or has a step
    /// still to be checked, that step may have seen the change too.
    pub(super) fn notify(
        &self,
        path: &Path,
        name: &str,
        (found, restored): (Option<&[u8]>, Option<&[u8]>),
        link: bool,
    ) -> Result<(), WorkspaceError> {
        let mut runs: Vec<String> = self.driven.clone();
        runs.extend(self.waiting().iter().cloned());
        if runs.is_empty() {
            return Ok(());
        }
        runs.sort();
        runs.dedup();
        let guard = self.guard;
        let written_at_ns = now_ns();
        let notice = Notice {
            schema_version: NOTICE_SCHEMA_VERSION,
            written_at_ns,
            written_at: jiff::Timestamp::now().to_string(),
            by: guard.workspace.run_id().as_str().to_owned(),
            path: Bytes::from(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()).to_vec()),
            name: name.to_owned(),
            found: found.map(|bytes| Bytes::from(bytes.to_vec())),
            restored: restored.map(|bytes| Bytes::from(bytes.to_vec())),
            runs,
            link,
        };
        let folder = guard.notices_dir();
        real_folder(&folder)?;
        let unique = format!(
            "{written_at_ns:020}-{}-{}-{}",
            notice.by,
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let temporary = folder.join(format!(".{unique}.tmp"));
        let file = folder.join(format!("{unique}.json"));
        let bytes = serde_json::to_vec(&notice).map_err(|error| {
            WorkspaceError::io("write", &file, std::io::Error::other(error.to_string()))
        })?;
        let write = |source| WorkspaceError::io("write", &temporary, source);
        let mut created =
            crate::artifacts::safe_files::create_new(&temporary, 0o600).map_err(write)?;
        std::io::Write::write_all(&mut created, &bytes).map_err(write)?;
        created.sync_data().map_err(write)?;
        drop(created);
        std::fs::rename(&temporary, &file)
            .map_err(|source| WorkspaceError::io("write", &file, source))
    }

    /// The other runs, not driven, whose step is still to be checked (its driving process
    /// died), worked out on first use: their `resume` checks a step that saw the change.
    fn waiting(&self) -> &[String] {
        self.waiting.get_or_init(|| {
            let root = &self.guard.workspace.record().repo_root;
            self.candidates
                .iter()
                .filter(|run| !self.driven.contains(run))
                .filter(|run| {
                    has_unchecked_step(&crate::artifacts::RunDir::at(runs_dir(root).join(run)))
                })
                .cloned()
                .collect()
        })
    }
}

/// Makes notice file names unique within a process.
static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Notice {
    fn path_buf(&self) -> PathBuf {
        use std::os::unix::ffi::OsStringExt;
        PathBuf::from(std::ffi::OsString::from_vec(self.path.clone().into()))
    }
}

impl RefGuard {
    /// The folder of notices.
    fn notices_dir(&self) -> PathBuf {
        self.workspace.common_dir.join(SHARED_CHANGES_DIR)
    }

    /// Removes the notices no run needs any more: each run they name (other than this one,
    /// whose step is checked now) neither driven nor with a step still to be checked — a run
    /// whose step was under way when a notice was written is one of them. Errors are
    /// ignored: a notice left is read again and skipped.
    pub(super) fn clean_notices(&self) {
        let folder = self.notices_dir();
        let notices = read_notices(&folder);
        if notices.is_empty() {
            return;
        }
        let own = self.workspace.run_id().as_str();
        let root = &self.workspace.record().repo_root;
        for (file, notice) in notices {
            let needed = notice.runs.iter().filter(|run| *run != own).any(|run| {
                let run_dir = crate::artifacts::RunDir::at(runs_dir(root).join(run));
                crate::artifacts::lock::is_held(&run_dir.lock()) || has_unchecked_step(&run_dir)
            });
            if !needed {
                let _ = std::fs::remove_file(folder.join(file));
            }
        }
    }
}

/// The notices in `folder` by file name; nothing when it is not a real folder. Entries that
/// are not notices (an agent's, a notice being written) are skipped.
fn read_notices(folder: &Path) -> Vec<(String, Notice)> {
    let is_folder = std::fs::symlink_metadata(folder).is_ok_and(|metadata| metadata.is_dir());
    if !is_folder {
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            if name.starts_with('.') || !name.ends_with(".json") {
                return None;
            }
            let (bytes, truncated) =
                crate::artifacts::safe_files::read_regular(&entry.path(), NOTICE_LIMIT).ok()?;
            if truncated {
                return None;
            }
            let notice: Notice = serde_json::from_slice(&bytes).ok()?;
            (notice.schema_version == NOTICE_SCHEMA_VERSION).then_some((name, notice))
        })
        .collect()
}

/// The most of a notice read: two copies of a watched file, escaped.
const NOTICE_LIMIT: u64 = 8 * WATCHED_FILE_LIMIT;

/// Makes `folder` a real folder (what an agent put in its place is removed).
fn real_folder(folder: &Path) -> Result<(), WorkspaceError> {
    match std::fs::symlink_metadata(folder) {
        Ok(metadata) if metadata.is_dir() => return Ok(()),
        Ok(_) => crate::artifacts::safe_files::remove_entry(folder)
            .map_err(|source| WorkspaceError::io("remove", folder, source))?,
        Err(_) => {}
    }
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(folder) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(WorkspaceError::io("create", folder, source)),
    }
}

/// Whether the run in `run_dir` has a visit whose guard state is still saved: its step's
/// process died before the guard checked it, and `resume` will.
fn has_unchecked_step(run_dir: &crate::artifacts::RunDir) -> bool {
    let Ok(steps) = std::fs::read_dir(run_dir.artifacts_dir()) else {
        return false;
    };
    steps.flatten().any(|step| {
        std::fs::read_dir(step.path()).is_ok_and(|visits| {
            visits.flatten().any(|visit| {
                std::fs::symlink_metadata(visit.path().join(super::GUARD_STATE_FILE)).is_ok()
            })
        })
    })
}
