//! The git configuration files outside the worktree that change what git reports in it: the
//! operator's global and system configuration, and every file the configuration names
//! (`core.excludesFile`, `core.attributesFile`, `include.path`, `includeIf.*.path`, the hooks
//! of `core.hooksPath`).
//!
//! An agent runs as the operator, so it can write all of them: a `*` in the operator's
//! `core.excludesFile` hides every new file from the capture, a filter defined in an included
//! file rewrites what the capture hashes, a hook in `core.hooksPath` runs code in the
//! operator's next git command. The guard records them before a step and puts them back after
//! it (see `guard.rs`).
//!
//! Listing the configuration costs a git process in every step, yet it changes only when one
//! of the files it was read from changes: the listing is kept ([`ConfigCache`]) with the
//! identity and contents of each of those files, and of the places git would read a file
//! that was absent, and listed again as soon as any of them differs.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use super::error::WorkspaceError;
use super::git::Git;
use super::operator_checkout::FileIdentity;
use super::worktree::Workspace;

/// What the configuration read in a worktree names: files, and folders of hooks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Configured {
    /// Configuration files read (every scope, includes followed) and files named by
    /// `core.excludesFile`, `core.attributesFile` and `include.path` / `includeIf.*.path`
    /// (also those that do not exist yet: an agent could create them).
    pub files: BTreeSet<PathBuf>,
    /// Folders named by `core.hooksPath`.
    pub hook_dirs: BTreeSet<PathBuf>,
}

/// The operator's own git configuration at its standard places, which every git command of
/// the workspace reads: the global configuration (`GIT_CONFIG_GLOBAL`, or `~/.gitconfig` and
/// `$XDG_CONFIG_HOME/git/config`), the default global ignore and attributes files, and the
/// system configuration.
pub(super) fn standard_files() -> Vec<PathBuf> {
    let home = home();
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|xdg| !xdg.is_empty())
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|home| home.join(".config")));
    let mut paths = Vec::new();
    match std::env::var_os("GIT_CONFIG_GLOBAL") {
        Some(global) => paths.push(PathBuf::from(global)),
        None => {
            paths.extend(home.map(|home| home.join(".gitconfig")));
            paths.extend(xdg.as_ref().map(|xdg| xdg.join("git").join("config")));
        }
    }
    for name in ["ignore", "attributes"] {
        paths.extend(xdg.as_ref().map(|xdg| xdg.join("git").join(name)));
    }
    paths.extend(system_file());
    paths
}

/// The system configuration file git reads, unless `GIT_CONFIG_NOSYSTEM` turns it off:
/// `GIT_CONFIG_SYSTEM`, or where this git was built to look (`git var GIT_CONFIG_SYSTEM`,
/// asked once per process; unknown to git before 2.42, which then leaves it out).
fn system_file() -> Option<PathBuf> {
    if std::env::var_os("GIT_CONFIG_NOSYSTEM").is_some_and(|value| is_true(&value)) {
        return None;
    }
    if let Some(path) = std::env::var_os("GIT_CONFIG_SYSTEM") {
        return Some(PathBuf::from(path)).filter(|path| !path.as_os_str().is_empty());
    }
    static BUILT_IN: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT_IN
        .get_or_init(|| {
            let dir = std::env::temp_dir();
            Git::new(&dir)
                .text(["var", "GIT_CONFIG_SYSTEM"])
                .ok()
                .filter(|path| !path.is_empty())
                .map(PathBuf::from)
        })
        .clone()
}

/// git's spelling of a true boolean.
fn is_true(value: &OsStr) -> bool {
    matches!(
        value.to_string_lossy().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    )
}

/// The arguments of the listing: every entry with the file it came from.
const LIST: [&str; 5] = ["config", "--list", "--show-origin", "--includes", "-z"];

/// What a listing was read from: the files git read and the places it would read.
type Sources = BTreeMap<PathBuf, Source>;

/// One file a listing depends on, as it was: its identity and contents (`None`: absent or
/// unreadable). Contents as well as identity: an edit within one tick of the file system's
/// clock may leave size and times as they were.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Source {
    identity: Option<FileIdentity>,
    contents: Option<Vec<u8>>,
}

/// How much of a configuration file is compared; a larger one is listed again every time.
const SOURCE_LIMIT: u64 = 1024 * 1024;

impl Source {
    /// `path` as it is now; `None` when it cannot be compared (a FIFO, a file too large).
    fn of(path: &Path) -> Option<Source> {
        let identity = FileIdentity::of(path);
        let contents =
            match crate::artifacts::safe_files::read_regular_following(path, SOURCE_LIMIT) {
                Ok((_, true)) => return None,
                Ok((bytes, false)) => Some(bytes),
                Err(error) if error.kind() == std::io::ErrorKind::InvalidInput => return None,
                Err(_) => None,
            };
        Some(Source { identity, contents })
    }
}

/// Each of `paths` as it is now; `None` when one cannot be compared.
fn sources_of<'a>(paths: impl IntoIterator<Item = &'a PathBuf>) -> Option<Sources> {
    paths
        .into_iter()
        .map(|path| Some((path.clone(), Source::of(path)?)))
        .collect()
}

/// The last listing of a workspace, shared by its clones.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConfigCache(Arc<Mutex<Option<Listed>>>);

/// A listing and what it was read from.
#[derive(Debug)]
struct Listed {
    configured: Configured,
    /// The files it depends on, as they were when it was made.
    sources: BTreeSet<PathBuf>,
    /// Those files' state, when it can vouch for the listing: unchanged while git read them,
    /// every include followed. `None`: list again (the paths are still known).
    state: Option<Sources>,
}

impl Listed {
    /// The listing, when every file it depends on is as it was.
    fn current(&self) -> Option<&Configured> {
        let state = self.state.as_ref()?;
        let now = sources_of(state.keys())?;
        (now == *state).then_some(&self.configured)
    }
}

impl Workspace {
    /// Reads the whole configuration as git sees it in the worktree (one `git config --list`,
    /// unless every file it was read from last time is unchanged), and returns the files and
    /// folders it reads or names outside the worktree (those inside are the agent's own
    /// files, captured as changes).
    pub(super) fn configured(&self) -> Result<Configured, WorkspaceError> {
        // Where git reads configuration, besides the operator's standard places: present or
        // not, and the worktree's HEAD (an `includeIf.onbranch:` include) and links to its
        // repository.
        let fixed = [
            self.common_dir.join("config"),
            self.common_dir.join("config.worktree"),
            self.worktree_git_dir.join("config.worktree"),
            self.worktree_git_dir.join("HEAD"),
            self.worktree_git_dir.join("commondir"),
            self.path().join(".git"),
        ];
        let mut cache = self
            .config_cache
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(configured) = cache.as_ref().and_then(Listed::current) {
            return Ok(configured.clone());
        }
        let mut candidates: BTreeSet<PathBuf> = fixed.into_iter().collect();
        candidates.extend(standard_files());
        if let Some(listed) = cache.as_ref() {
            candidates.extend(listed.sources.iter().cloned());
        }
        // Read before and after git: a file that changed meanwhile may have been read either way.
        let before = sources_of(&candidates);
        let listing = self.git.bytes(LIST)?;
        let parsed = parse_listing(&listing, self.path(), home().as_deref());
        let after = sources_of(&candidates);
        let vouched = parsed.complete && parsed.sources.is_subset(&candidates) && before == after;
        candidates.extend(parsed.sources);
        *cache = Some(Listed {
            configured: parsed.configured.clone(),
            sources: candidates,
            state: after.filter(|_| vouched),
        });
        Ok(parsed.configured)
    }
}

/// What a listing says.
#[derive(Debug)]
struct Parsed {
    /// The files and folders outside the worktree.
    configured: Configured,
    /// Every file it was read from, the worktree's own too.
    sources: BTreeSet<PathBuf>,
    /// False when git read a file not known here (an include this does not expand).
    complete: bool,
}

/// Parses `git config --list --show-origin -z`: `origin NUL key LF value NUL`, repeated.
fn parse_listing(listing: &[u8], worktree: &Path, home: Option<&Path>) -> Parsed {
    let mut configured = Configured::default();
    let mut sources = BTreeSet::new();
    let mut complete = true;
    let mut tokens = listing.split(|byte| *byte == 0);
    while let (Some(origin), Some(entry)) = (tokens.next(), tokens.next()) {
        // Only files have a place; `command line:`, `blob:` and `standard input:` do not.
        let origin = origin
            .strip_prefix(b"file:")
            .map(|path| worktree.join(OsStr::from_bytes(path)));
        if let Some(origin) = &origin {
            configured.files.insert(origin.clone());
            sources.insert(origin.clone());
        }
        let (key, value) = match entry.iter().position(|byte| *byte == b'\n') {
            Some(split) => (&entry[..split], &entry[split + 1..]),
            None => (entry, &b""[..]),
        };
        let key = String::from_utf8_lossy(key).to_ascii_lowercase();
        let is_include =
            key == "include.path" || (key.starts_with("includeif.") && key.ends_with(".path"));
        // Relative paths: an include is relative to the file that includes it; the others to
        // the worktree, where git runs.
        let base = if is_include {
            origin.as_deref().and_then(Path::parent)
        } else {
            Some(worktree)
        };
        let Some(path) = base.and_then(|base| expand(value, base, home)) else {
            complete &= !is_include;
            continue;
        };
        if is_include {
            sources.insert(path.clone());
        }
        if is_include || key == "core.excludesfile" || key == "core.attributesfile" {
            configured.files.insert(path);
        } else if key == "core.hookspath" {
            configured.hook_dirs.insert(path);
        }
    }
    configured.files.retain(|path| !path.starts_with(worktree));
    configured
        .hook_dirs
        .retain(|path| !path.starts_with(worktree));
    Parsed {
        configured,
        sources,
        complete,
    }
}

/// A configured path as git expands it (`~/` is the home folder; relative to `base`), or
/// `None` for what this does not follow (`~user/`, `%(prefix)/`, an empty value).
fn expand(value: &[u8], base: &Path, home: Option<&Path>) -> Option<PathBuf> {
    if value.is_empty() || value.starts_with(b"%(prefix)/") {
        return None;
    }
    let path = if let Some(rest) = value.strip_prefix(b"~/") {
        home?.join(OsStr::from_bytes(rest))
    } else if value.starts_with(b"~") {
        return None;
    } else {
        base.join(OsStr::from_bytes(value))
    };
    Some(path)
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|home| !home.is_empty())
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(entries: &[(&str, &str)]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for (origin, entry) in entries {
            bytes.extend_from_slice(origin.as_bytes());
            bytes.push(0);
            bytes.extend_from_slice(entry.as_bytes());
            bytes.push(0);
        }
        bytes
    }

    fn paths(set: &BTreeSet<PathBuf>) -> Vec<&str> {
        set.iter().map(|path| path.to_str().unwrap()).collect()
    }

    #[test]
    fn origins_and_named_files_are_found_and_resolved_as_git_does() {
        let bytes = listing(&[
            ("file:/home/op/.gitconfig", "user.name\nOp"),
            (
                "file:/home/op/.gitconfig",
                "core.excludesfile\n~/.gitignore_global",
            ),
            ("file:/home/op/.gitconfig", "include.path\nconf/extra.inc"),
            (
                "file:/home/op/.gitconfig",
                "includeif.gitdir:~/work/.path\nwork.inc",
            ),
            (
                "file:/home/op/conf/extra.inc",
                "core.attributesFile\n/etc/attrs",
            ),
            ("file:/home/op/conf/extra.inc", "core.hooksPath\n~/hooks"),
            ("file:/repo/.git/config", "core.bare\nfalse"),
            // Relative to the worktree, where git runs: the agent's own file.
            ("file:.git/config", "core.bare\nfalse"),
            ("command line:", "core.excludesfile\n%(prefix)/etc/ignore"),
            (
                "file:/home/op/.gitconfig",
                "core.attributesfile\n~other/attrs",
            ),
        ]);

        let configured = parse_listing(
            &bytes,
            Path::new("/repo/.tnh/worktrees/r"),
            Some(Path::new("/home/op")),
        )
        .configured;

        assert_eq!(
            paths(&configured.files),
            [
                "/etc/attrs",
                "/home/op/.gitconfig",
                "/home/op/.gitignore_global",
                "/home/op/conf/extra.inc",
                "/home/op/work.inc",
                "/repo/.git/config",
            ]
        );
        assert_eq!(paths(&configured.hook_dirs), ["/home/op/hooks"]);
    }

    #[test]
    fn files_inside_the_worktree_are_the_agents_own_and_left_to_the_capture() {
        let bytes = listing(&[
            ("file:/repo/.git/config", "core.hookspath\n.husky"),
            ("file:/repo/.git/config", "core.excludesfile\nignore-me"),
        ]);

        let configured =
            parse_listing(&bytes, Path::new("/repo/.tnh/worktrees/r"), None).configured;

        assert_eq!(paths(&configured.files), ["/repo/.git/config"]);
        assert!(configured.hook_dirs.is_empty());
    }

    #[test]
    fn without_a_home_folder_tilde_paths_are_not_followed() {
        let bytes = listing(&[("file:/etc/gitconfig", "core.excludesfile\n~/ignore")]);

        let configured = parse_listing(&bytes, Path::new("/w"), None).configured;

        assert_eq!(paths(&configured.files), ["/etc/gitconfig"]);
    }

    #[test]
    fn a_listing_is_kept_until_a_file_it_read_changes_even_to_the_same_size() {
        use super::super::test_support::{committed_workspace, git};
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("repo");
        std::fs::create_dir(&root).unwrap();
        let workspace = committed_workspace(&root, &[("a", b"a\n")], "r1");
        let first = workspace.configured().unwrap();
        let vouched = |workspace: &Workspace| {
            let cache = workspace.config_cache.0.lock().unwrap();
            cache
                .as_ref()
                .and_then(|listed| listed.state.clone())
                .is_some()
        };
        assert!(vouched(&workspace));
        assert_eq!(workspace.configured().unwrap(), first);

        // A new include, of a file that does not exist yet: named, and watched.
        let include = dir.path().join("extra.inc");
        let include_text = include.to_str().unwrap();
        git(workspace.path(), &["config", "include.path", include_text]);
        assert!(workspace.configured().unwrap().files.contains(&include));
        std::fs::write(&include, "[core]\n\thooksPath = /hooks-a\n").unwrap();
        let hooks = |workspace: &Workspace| {
            let dirs = workspace.configured().unwrap().hook_dirs;
            dirs.into_iter().collect::<Vec<_>>()
        };
        assert_eq!(hooks(&workspace), [PathBuf::from("/hooks-a")]);
        // Rewritten in place to the same size: the contents tell.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&include)
            .unwrap();
        std::os::unix::fs::FileExt::write_at(&file, b"[core]\n\thooksPath = /hooks-b\n", 0)
            .unwrap();
        assert_eq!(hooks(&workspace), [PathBuf::from("/hooks-b")]);
        assert!(vouched(&workspace));
    }
}
