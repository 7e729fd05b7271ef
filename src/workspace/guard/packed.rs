//! Runs' refs as the guard sees them without listing every kept run at each step.
//!
//! A repository keeps its finished runs, and each keeps its snapshot refs and work branch. A
//! finished run's refs are packed into `packed-refs` (`Workspace::pack_run_refs`); the runs
//! still going keep theirs loose, one file each. So the guard reads the runs' refs in two
//! parts: the loose ones (`refs/tnh/…` and `refs/heads/tnh/…` files, as many as runs going
//! on) at every check, and the packed ones only when `packed-refs` is another file than
//! before (its identity: size, times, inode), parsed once per version of the file and kept
//! for the process. A step then costs the same with 10 or 10,000 kept runs: an unchanged
//! `packed-refs` cannot have moved a packed ref, and a loose ref written over a packed one is
//! a new loose file.
//!
//! When the file did change during a step (another run finished and packed its refs, the
//! operator's `git gc`, an agent's `git update-ref -d` of a packed ref), both versions are
//! compared. The version recorded before the step is kept in memory and, for a step whose
//! process dies, as a hard link beside `packed-refs` (git replaces the file by renaming a
//! new one over it, so the link keeps the old contents).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use super::SYMREF;
use crate::workspace::error::WorkspaceError;
use crate::workspace::operator_checkout::FileIdentity;

/// The ref namespaces that hold runs' refs.
pub(super) const RUN_NAMESPACES: [&str; 2] = ["refs/tnh/", "refs/heads/tnh/"];

/// Whether `name` is in a runs' namespace.
pub(super) fn is_run_ref(name: &str) -> bool {
    RUN_NAMESPACES.iter().any(|prefix| name.starts_with(prefix))
}

/// The runs' refs of one version of `packed-refs`.
#[derive(Debug, Default)]
pub(super) struct PackedRuns {
    /// The file's identity when read (`None`: there was none).
    pub(super) identity: Option<FileIdentity>,
    /// Name → commit.
    pub(super) refs: BTreeMap<String, String>,
}

impl PackedRuns {
    /// The packed refs whose names start with `prefix`.
    pub(super) fn under<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = (&'a String, &'a String)> + 'a {
        self.refs
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(move |(name, _)| name.starts_with(prefix))
    }
}

/// Whether two identities of `packed-refs` name the same contents. The change time is left
/// out: the hard link the guard keeps beside the file moves it. Git replaces the file by
/// renaming a new one over it (a new inode), so what git writes is always seen; only an edit
/// in place that also set the modification time back to the nanosecond would not be.
pub(super) fn same_file(left: Option<&FileIdentity>, right: Option<&FileIdentity>) -> bool {
    match (left, right) {
        (Some(left), Some(right)) => left.same_contents_as(right),
        (None, None) => true,
        _ => false,
    }
}

/// The repository's `packed-refs`.
pub(super) fn packed_refs_file(common_dir: &Path) -> PathBuf {
    common_dir.join("packed-refs")
}

/// The runs' refs of the current `packed-refs`: read again only when the file is another
/// than the one last read in this process.
pub(super) fn current(common_dir: &Path) -> Result<Arc<PackedRuns>, WorkspaceError> {
    static CACHE: OnceLock<Mutex<BTreeMap<PathBuf, Arc<PackedRuns>>>> = OnceLock::new();
    let file = packed_refs_file(common_dir);
    let identity = FileIdentity::of(&file);
    let cache = CACHE.get_or_init(Default::default);
    if let Some(known) = cache
        .lock()
        .ok()
        .and_then(|cache| cache.get(&file).cloned())
        .filter(|known| same_file(known.identity.as_ref(), identity.as_ref()))
    {
        return Ok(known);
    }
    let read = Arc::new(read(&file)?);
    if let Ok(mut cache) = cache.lock() {
        cache.insert(file, Arc::clone(&read));
    }
    Ok(read)
}

/// Reads `file`, making sure the identity recorded is that of the contents read (git may
/// replace the file meanwhile).
pub(super) fn read(file: &Path) -> Result<PackedRuns, WorkspaceError> {
    for _ in 0..5 {
        let identity = FileIdentity::of(file);
        let contents = match read_plain(file)? {
            Some(contents) => contents,
            None if identity.is_none() => return Ok(PackedRuns::default()),
            None => continue,
        };
        if same_file(FileIdentity::of(file).as_ref(), identity.as_ref()) {
            return Ok(PackedRuns {
                identity,
                refs: parse(&contents),
            });
        }
    }
    Err(WorkspaceError::Io {
        action: "read",
        path: file.to_owned(),
        source: std::io::Error::other("it kept changing while read"),
    })
}

/// The contents of a regular file (never waiting on a FIFO an agent put there); `None` when
/// there is none.
fn read_plain(file: &Path) -> Result<Option<Vec<u8>>, WorkspaceError> {
    match std::fs::symlink_metadata(file) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(WorkspaceError::io("read", file, source)),
        Ok(metadata) if !metadata.is_file() => Ok(Some(Vec::new())),
        Ok(_) => match std::fs::read(file) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(WorkspaceError::io("read", file, source)),
            Ok(contents) => Ok(Some(contents)),
        },
    }
}

/// The runs' refs of `packed-refs` contents: `<sha> <name>` lines; `#` headers and `^<sha>`
/// peeled lines are skipped.
fn parse(contents: &[u8]) -> BTreeMap<String, String> {
    let mut refs = BTreeMap::new();
    for line in contents.split(|byte| *byte == b'\n') {
        let Ok(line) = std::str::from_utf8(line) else {
            continue;
        };
        let Some((sha, name)) = line.split_once(' ') else {
            continue;
        };
        if sha.starts_with(['#', '^']) || !is_run_ref(name) {
            continue;
        }
        refs.insert(name.to_owned(), sha.to_owned());
    }
    refs
}

/// The loose refs under the runs' namespaces, name → commit or `ref: NAME` (a symbolic
/// ref); anything else a file holds is kept as it is, so that it differs from what was there.
pub(super) fn loose(common_dir: &Path) -> Result<BTreeMap<String, String>, WorkspaceError> {
    let mut refs = BTreeMap::new();
    for namespace in RUN_NAMESPACES {
        let namespace = namespace.trim_end_matches('/');
        let dir = common_dir.join(namespace);
        for entry in walkdir::WalkDir::new(&dir).min_depth(1) {
            let entry = match entry {
                Ok(entry) => entry,
                // No such namespace (yet): no loose refs in it.
                Err(error) if error.depth() == 0 => break,
                // A folder that went while it was listed: git removes a run's folders as it
                // packs its refs (into `packed-refs`, read after the loose refs).
                Err(error) if vanished(&error) => continue,
                Err(error) => {
                    let path = error.path().unwrap_or(&dir).to_path_buf();
                    return Err(WorkspaceError::io("list", &path, error.into()));
                }
            };
            let kind = entry.file_type();
            let Ok(relative) = entry.path().strip_prefix(&dir) else {
                continue;
            };
            let Some(relative) = relative.to_str() else {
                continue;
            };
            if kind.is_dir() || relative.ends_with(".lock") {
                continue;
            }
            if let Some(value) = loose_value(entry.path(), kind) {
                refs.insert(format!("{namespace}/{relative}"), value);
            }
        }
    }
    Ok(refs)
}

/// Whether a walk's error is only a folder that went between its listing and its opening.
fn vanished(error: &walkdir::Error) -> bool {
    error
        .io_error()
        .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound)
}

/// What a loose ref file says, as [`super::Listing`] keeps values.
/// `None` when the file went between its listing and its reading: git removes the loose refs
/// it packs (after writing `packed-refs`, which is read after the loose refs).
fn loose_value(path: &Path, kind: std::fs::FileType) -> Option<String> {
    let gone = |error: &std::io::Error| error.kind() == std::io::ErrorKind::NotFound;
    if kind.is_symlink() {
        // Git reads a link under `refs/` as a symbolic ref to the ref it names.
        return match std::fs::read_link(path) {
            Ok(target) => Some(format!("{SYMREF}{}", target.display())),
            Err(error) if gone(&error) => None,
            Err(_) => Some("(unreadable link)".to_owned()),
        };
    }
    let bytes = match crate::artifacts::safe_files::read_regular(path, 4096) {
        Ok((bytes, _)) => bytes,
        Err(error) if gone(&error) => return None,
        Err(_) => return Some("(not a ref file)".to_owned()),
    };
    let text = String::from_utf8_lossy(&bytes);
    let text = text.trim_end();
    Some(match text.strip_prefix("ref:") {
        Some(target) => format!("{SYMREF}{}", target.trim_start()),
        None => text.to_owned(),
    })
}

/// Whether a loose value names a commit (as opposed to a symbolic ref or junk).
pub(super) fn is_object_name(value: &str) -> bool {
    matches!(value.len(), 40 | 64) && value.bytes().all(|byte| byte.is_ascii_hexdigit())
}

/// Where the `packed-refs` a run's guard recorded is kept for a step whose process dies.
pub(super) fn before_link(common_dir: &Path, run_id: &str) -> PathBuf {
    common_dir.join(format!("tnh-packed-refs-before-{run_id}"))
}

/// Keeps the current `packed-refs` (if it is still the one `identity` names) as the version
/// before run `run_id`'s step, replacing what an earlier step kept.
pub(super) fn keep_before(common_dir: &Path, run_id: &str, identity: Option<&FileIdentity>) {
    let link = before_link(common_dir, run_id);
    let _ = std::fs::remove_file(&link);
    if identity.is_some() {
        let _ = std::fs::hard_link(packed_refs_file(common_dir), &link);
    }
}

/// The version of `packed-refs` kept before the step, if it is still the one recorded
/// (`identity`, without the change time, which a new link to the file moves).
pub(super) fn kept_before(
    common_dir: &Path,
    run_id: &str,
    identity: Option<&FileIdentity>,
) -> Option<PackedRuns> {
    let Some(identity) = identity else {
        return Some(PackedRuns::default());
    };
    let link = before_link(common_dir, run_id);
    let kept = FileIdentity::of(&link)?;
    if !kept.same_contents_as(identity) {
        return None;
    }
    let read = read(&link).ok()?;
    Some(PackedRuns {
        identity: Some(*identity),
        refs: read.refs,
    })
}

/// Forgets the version kept before run `run_id`'s step.
pub(super) fn forget_before(common_dir: &Path, run_id: &str) {
    let _ = std::fs::remove_file(before_link(common_dir, run_id));
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_folder_gone_when_the_walk_opens_it_is_passed_over_and_others_are_not() {
        // walkdir opens a folder as it reaches it; a run's folder that git removed (its refs
        // packed) since its parent was listed fails to open with NotFound, as a missing root
        // does.
        let root = tempfile::tempdir().unwrap();
        let gone = walkdir::WalkDir::new(root.path().join("r1"))
            .into_iter()
            .next()
            .unwrap()
            .unwrap_err();
        assert!(super::vanished(&gone), "{gone}");
        // A loop of links is an error of another kind: it is reported, not passed over.
        std::os::unix::fs::symlink(root.path(), root.path().join("loop")).unwrap();
        let looped = walkdir::WalkDir::new(root.path())
            .follow_links(true)
            .into_iter()
            .find_map(Result::err)
            .unwrap();
        assert!(!super::vanished(&looped), "{looped}");
    }

    use super::*;

    #[test]
    fn only_runs_refs_are_read_from_packed_refs() {
        let contents = b"# pack-refs with: peeled fully-peeled sorted \n\
            1111111111111111111111111111111111111111 refs/heads/main\n\
            2222222222222222222222222222222222222222 refs/heads/tnh/wf/r1\n\
            3333333333333333333333333333333333333333 refs/tags/v1\n\
            ^4444444444444444444444444444444444444444\n\
            5555555555555555555555555555555555555555 refs/tnh/runs/r1/pre_run\n";
        let refs = parse(contents);
        assert_eq!(
            refs.keys().collect::<Vec<_>>(),
            ["refs/heads/tnh/wf/r1", "refs/tnh/runs/r1/pre_run"]
        );
        let packed = PackedRuns {
            identity: None,
            refs,
        };
        assert_eq!(packed.under("refs/tnh/runs/r1/").count(), 1);
        assert_eq!(packed.under("refs/tnh/runs/r").count(), 1);
        assert_eq!(packed.under("refs/tnh/runs/r2/").count(), 0);
    }

    #[test]
    fn loose_refs_are_read_as_commits_symbolic_refs_or_what_they_hold() {
        let dir = tempfile::tempdir().unwrap();
        let runs = dir.path().join("refs/tnh/runs/r1");
        std::fs::create_dir_all(&runs).unwrap();
        let sha = "a".repeat(40);
        std::fs::write(runs.join("pre_run"), format!("{sha}\n")).unwrap();
        std::fs::write(runs.join("odd"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(runs.join("junk"), "not a ref\n").unwrap();
        std::fs::write(runs.join("held.lock"), "x").unwrap();
        let branches = dir.path().join("refs/heads/tnh/wf");
        std::fs::create_dir_all(&branches).unwrap();
        std::fs::write(branches.join("r1"), format!("{sha}\n")).unwrap();
        let refs = loose(dir.path()).unwrap();
        assert_eq!(refs["refs/tnh/runs/r1/pre_run"], sha);
        assert_eq!(refs["refs/heads/tnh/wf/r1"], sha);
        assert_eq!(
            refs["refs/tnh/runs/r1/odd"],
            format!("{SYMREF}refs/heads/main")
        );
        assert_eq!(refs["refs/tnh/runs/r1/junk"], "not a ref");
        assert!(!refs.contains_key("refs/tnh/runs/r1/held.lock"));
        assert!(is_object_name(&sha) && !is_object_name("not a ref"));
    }

    #[test]
    fn a_version_kept_by_a_link_survives_the_file_being_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let file = packed_refs_file(dir.path());
        let line = |sha: char| format!("{} refs/tnh/runs/r1/pre_run\n", sha.to_string().repeat(40));
        std::fs::write(&file, line('1')).unwrap();
        let before = current(dir.path()).unwrap();
        keep_before(dir.path(), "own", before.identity.as_ref());
        // As git does it: a new file renamed over the old one.
        let new = dir.path().join("packed-refs.new");
        std::fs::write(&new, line('2')).unwrap();
        std::fs::rename(&new, &file).unwrap();
        let now = current(dir.path()).unwrap();
        assert_ne!(now.identity, before.identity);
        assert_eq!(now.refs["refs/tnh/runs/r1/pre_run"], "2".repeat(40));
        let kept = kept_before(dir.path(), "own", before.identity.as_ref()).unwrap();
        assert_eq!(kept.refs["refs/tnh/runs/r1/pre_run"], "1".repeat(40));
        // Written in place instead, the kept version is known to be lost.
        keep_before(dir.path(), "own", now.identity.as_ref());
        std::fs::write(&file, line('3')).unwrap();
        assert!(kept_before(dir.path(), "own", now.identity.as_ref()).is_none());
        forget_before(dir.path(), "own");
        assert!(!before_link(dir.path(), "own").exists());
    }
}
