//! The read-only worktree API: `read_file`, `file_exists`, `glob`, `changed_files`,
//! `diff_stat` and `path_matches`.
//!
//! Everything a script may touch is captured in the `HostState` given to `create_module`: the
//! sandboxed worktree root and the context of the evaluation in progress (which carries the
//! changes). Errors name the function and the path, and never reveal more of the file system
//! than the script already named.

use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use rhai::{Array, Dynamic, EvalAltResult, ImmutableString, Map, Module, Position};
use walkdir::WalkDir;

use super::context::{ChangedFile, saturating_int};
use super::host::HostState;
use super::sandbox::{Sandbox, normalise};

/// A host-function failure, located by Rhai at the call site.
pub(crate) fn refuse(function: &str, message: &str) -> Box<EvalAltResult> {
    EvalAltResult::ErrorRuntime(format!("{function}: {message}").into(), Position::NONE).into()
}

/// A result larger than the sandbox allows, refused before it is built; Rhai reports it as it
/// reports its own data-size limits (`what` is Rhai's wording, e.g. `Size of array`).
pub(crate) fn too_large(what: &str) -> Box<EvalAltResult> {
    EvalAltResult::ErrorDataTooLarge(what.to_owned(), Position::NONE).into()
}

/// The worktree functions, bound to one host.
pub(crate) fn create_module(state: Arc<HostState>) -> Module {
    let mut module = Module::new();
    let reader = Arc::clone(&state);
    module.set_native_fn("read_file", move |path: ImmutableString| {
        reader.check_deadline()?;
        let sandbox = reader
            .sandbox()
            .map_err(|error| refuse("read_file", &error))?;
        sandbox
            .read_text(&path, reader.limits.max_read_bytes)
            .map_err(|error| refuse("read_file", &error))
    });
    let checker = Arc::clone(&state);
    module.set_native_fn("file_exists", move |path: ImmutableString| {
        let sandbox = checker
            .sandbox()
            .map_err(|error| refuse("file_exists", &error))?;
        let found = sandbox
            .existing(&path)
            .map_err(|error| refuse("file_exists", &error))?;
        Ok(found.is_some_and(|path| path.is_file()))
    });
    let globber = Arc::clone(&state);
    module.set_native_fn("glob", move |pattern: ImmutableString| {
        globber.check_deadline()?;
        glob(&globber, &[pattern.to_string()])
    });
    let globber = Arc::clone(&state);
    module.set_native_fn("glob", move |patterns: Array| {
        globber.check_deadline()?;
        glob(&globber, &strings("glob", &patterns)?)
    });
    add_change_functions(&mut module, &state);
    add_match_functions(&mut module, &state);
    module
}

/// The script values of one set of changes, built on first use.
#[derive(Debug, Default)]
struct Built {
    files: Option<Array>,
    stat: Option<Map>,
}

/// The values `changed_files()` and `diff_stat()` built from the changes loaded last, kept
/// while the evaluations see the same changes (the same `Arc`: one step visit, or the
/// capture a policy `check` judges file by file).
#[derive(Debug, Default)]
pub(crate) struct ChangeValues {
    kept: Mutex<Option<(Arc<[ChangedFile]>, Built)>>,
}

impl ChangeValues {
    /// The value `pick` selects for `changes`, built by `build` the first time.
    fn get<T: Clone>(
        &self,
        changes: &Arc<[ChangedFile]>,
        pick: impl Fn(&mut Built) -> &mut Option<T>,
        build: impl FnOnce(&[ChangedFile]) -> T,
    ) -> T {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if !kept
            .as_ref()
            .is_some_and(|(known, _)| Arc::ptr_eq(known, changes))
        {
            *kept = Some((Arc::clone(changes), Built::default()));
        }
        let Some((_, built)) = kept.as_mut() else {
            unreachable!("set above")
        };
        pick(built).get_or_insert_with(|| build(changes)).clone()
    }
}

/// `changed_files`, `changed_paths` and `diff_stat`, from the changes of the evaluation's
/// context.
fn add_change_functions(module: &mut Module, state: &Arc<HostState>) {
    let changes = Arc::clone(state);
    module.set_native_fn("changed_files", move || {
        changes.check_deadline()?;
        let files = changes
            .changes()
            .map_err(|error| refuse("changed_files", &error))?;
        if files.len() > changes.limits.max_array_items {
            return Err(refuse(
                "changed_files",
                &format!(
                    "{} files changed, more than the {} items one value may hold; count them with `diff_stat().files`",
                    files.len(),
                    changes.limits.max_array_items
                ),
            ));
        }
        Ok(changes.change_values.get(
            &files,
            |built| &mut built.files,
            |files| files.iter().map(ChangedFile::to_dynamic).collect::<Array>(),
        ))
    });
    let first = Arc::clone(state);
    module.set_native_fn("changed_files", move |max: rhai::INT| {
        first.check_deadline()?;
        let Ok(max) = usize::try_from(max) else {
            return Err(refuse(
                "changed_files",
                &format!("the number of changes to give is negative ({max})"),
            ));
        };
        let files = first
            .changes()
            .map_err(|error| refuse("changed_files", &error))?;
        let count = max.min(files.len());
        if count > first.limits.max_array_items {
            return Err(refuse(
                "changed_files",
                &format!(
                    "{count} changes asked for, more than the {} items one value may hold",
                    first.limits.max_array_items
                ),
            ));
        }
        Ok(files[..count]
            .iter()
            .map(ChangedFile::to_dynamic)
            .collect::<Array>())
    });
    let paths = Arc::clone(state);
    module.set_native_fn("changed_paths", move |patterns: Dynamic, kinds: Dynamic| {
        paths.check_deadline()?;
        changed_paths(&paths, patterns, kinds)
    });
    let stats = Arc::clone(state);
    module.set_native_fn("diff_stat", move || {
        stats.check_deadline()?;
        let files = stats
            .changes()
            .map_err(|error| refuse("diff_stat", &error))?;
        Ok(stats
            .change_values
            .get(&files, |built| &mut built.stat, diff_stat))
    });
}

/// `changed_paths(patterns, kinds)`: the paths of the changes of one of `kinds` whose path
/// matches one of `patterns`, in change order. Built here rather than by a script loop, which
/// Rhai makes quadratic (it measures the whole array after each `push`).
fn changed_paths(
    state: &HostState,
    patterns: Dynamic,
    kinds: Dynamic,
) -> Result<Array, Box<EvalAltResult>> {
    const FUNCTION: &str = "changed_paths";
    let patterns = one_or_many(FUNCTION, patterns)?;
    let kinds = one_or_many(FUNCTION, kinds)?;
    if let Some(unknown) = kinds
        .iter()
        .find(|kind| !["added", "modified", "deleted", "renamed"].contains(&kind.as_str()))
    {
        return Err(refuse(
            FUNCTION,
            &format!("`{unknown}` is not a kind of change (added, modified, deleted, renamed)"),
        ));
    }
    let set = state.globs.get(FUNCTION, &patterns)?;
    let files = state.changes().map_err(|error| refuse(FUNCTION, &error))?;
    let mut found = Array::new();
    for change in files.iter() {
        if kinds.iter().any(|kind| kind == change.kind.name()) && set.is_match(&change.path) {
            if found.len() == state.limits.max_array_items {
                return Err(too_large("Size of array"));
            }
            found.push(Dynamic::from(change.path.clone()));
        }
    }
    Ok(found)
}

/// A string or an array of strings, as a list.
fn one_or_many(function: &str, value: Dynamic) -> Result<Vec<String>, Box<EvalAltResult>> {
    let type_name = value.type_name();
    if value.is_array() {
        let items = value.into_array().unwrap_or_default();
        return strings(function, &items);
    }
    value.into_string().map(|text| vec![text]).map_err(|_| {
        refuse(
            function,
            &format!("expected a string or an array of strings, found {type_name}"),
        )
    })
}

/// `path_matches`, with the host's cache of compiled patterns.
fn add_match_functions(module: &mut Module, state: &Arc<HostState>) {
    let matcher = Arc::clone(state);
    module.set_native_fn(
        "path_matches",
        move |path: ImmutableString, pattern: ImmutableString| {
            path_matches(&matcher, &path, &[pattern.to_string()])
        },
    );
    let matcher = Arc::clone(state);
    module.set_native_fn(
        "path_matches",
        move |path: ImmutableString, patterns: Array| {
            path_matches(&matcher, &path, &strings("path_matches", &patterns)?)
        },
    );
}

fn strings(function: &str, items: &Array) -> Result<Vec<String>, Box<EvalAltResult>> {
    items
        .iter()
        .map(|item| {
            item.clone()
                .into_string()
                .map_err(|kind| refuse(function, &format!("expected strings, found {kind}")))
        })
        .collect()
}

/// A glob set where `*` stays within one directory and `**` crosses directories.
fn glob_set(function: &str, patterns: &[String]) -> Result<GlobSet, Box<EvalAltResult>> {
    let mut builder = GlobSetBuilder::new();
    for pattern in patterns {
        let normalised = normalise(pattern).map_err(|error| refuse(function, &error))?;
        let glob = GlobBuilder::new(&normalised)
            .literal_separator(true)
            .build()
            .map_err(|error| refuse(function, &format!("`{pattern}` is not a glob: {error}")))?;
        builder.add(glob);
    }
    builder
        .build()
        .map_err(|error| refuse(function, &error.to_string()))
}

/// How many compiled pattern lists a host keeps for `path_matches`.
const MAX_CACHED_GLOB_SETS: usize = 64;

/// The glob sets `path_matches` compiled, by pattern list: a helper that tests every changed
/// file against the same patterns compiles them once, not once per file.
#[derive(Debug, Default)]
pub(crate) struct GlobCache {
    sets: Mutex<HashMap<Vec<String>, Arc<GlobSet>>>,
}

impl GlobCache {
    fn get(&self, function: &str, patterns: &[String]) -> Result<Arc<GlobSet>, Box<EvalAltResult>> {
        let mut sets = self.sets.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(set) = sets.get(patterns) {
            return Ok(Arc::clone(set));
        }
        let set = Arc::new(glob_set(function, patterns)?);
        if sets.len() >= MAX_CACHED_GLOB_SETS {
            sets.clear();
        }
        sets.insert(patterns.to_vec(), Arc::clone(&set));
        Ok(set)
    }
}

fn path_matches(
    state: &HostState,
    path: &str,
    patterns: &[String],
) -> Result<bool, Box<EvalAltResult>> {
    let path = normalise(path).map_err(|error| refuse("path_matches", &error))?;
    Ok(state.globs.get("path_matches", patterns)?.is_match(path))
}

/// The worktree files matching any pattern, sorted. `.git` is never entered, symlinked
/// directories are not followed, and symlinked files are listed only when they stay inside.
/// Only the folders a pattern can match something in are entered (`src/*.txt` lists the root
/// and `src/`, never a `build/` of 100,000 files), so the bound on the entries visited is a
/// bound on what the patterns reach.
fn glob(state: &HostState, patterns: &[String]) -> Result<Array, Box<EvalAltResult>> {
    let sandbox = state.sandbox().map_err(|error| refuse("glob", &error))?;
    let set = glob_set("glob", patterns)?;
    let folders = Folders::new(patterns);
    let root = sandbox.root();
    let mut found = Vec::new();
    let mut walker = WalkDir::new(root).min_depth(1).into_iter();
    let mut visited = 0usize;
    state.check_deadline()?;
    while let Some(next) = walker.next() {
        let entry = next.map_err(|error| {
            let folder = error
                .path()
                .map_or_else(String::new, |path| folder_of(root, path));
            let reason = error
                .io_error()
                .map_or_else(|| error.to_string(), ToString::to_string);
            refuse("glob", &format!("cannot list `{folder}`: {reason}"))
        })?;
        visited += 1;
        if visited > state.limits.max_glob_entries {
            let parent = entry.path().parent().unwrap_or(root);
            let folder = folder_of(root, parent);
            let shown = if folder.is_empty() {
                "the worktree's root"
            } else {
                &folder
            };
            return Err(refuse(
                "glob",
                &format!(
                    "more than {} entries to search (the folders the patterns reach hold more; the limit was reached listing `{shown}`): start the pattern with the folder to search (`src/**/*.rs`) rather than `**`, or keep large generated folders out of what it reaches",
                    state.limits.max_glob_entries
                ),
            ));
        }
        let kind = entry.file_type();
        let relative = entry.path().strip_prefix(root).ok().and_then(Path::to_str);
        let Some(relative) = relative else {
            // A name that is not UTF-8 is passed over, and a folder so named not entered.
            if kind.is_dir() {
                walker.skip_current_dir();
            }
            continue;
        };
        if kind.is_dir() {
            if entry.file_name() == ".git" || !folders.may_hold_matches(relative) {
                walker.skip_current_dir();
            } else {
                state.check_deadline()?;
            }
        } else if (kind.is_file() || is_inside_file(sandbox, relative, kind))
            && set.is_match(relative)
        {
            found.push(relative.to_owned());
        }
    }
    found.sort();
    Ok(found.into_iter().map(Dynamic::from).collect())
}

/// A folder below the worktree's root as the glob's messages name it: `src/`, or empty for
/// the root itself.
fn folder_of(root: &Path, folder: &Path) -> String {
    match folder.strip_prefix(root) {
        Ok(relative) if relative.as_os_str().is_empty() => String::new(),
        Ok(relative) => format!("{}/", relative.to_string_lossy()),
        Err(_) => folder.to_string_lossy().into_owned(),
    }
}

/// One `/`-separated part of a glob pattern.
#[derive(Debug)]
enum Part {
    /// `**` (or a part holding it): any number of folders.
    AnyDepth,
    /// A part matched against one folder name.
    Name(globset::GlobMatcher),
}

/// Which folders can hold a file that one of the patterns matches: a folder is entered only
/// when the start of some pattern matches its path part by part. A pattern whose parts cannot
/// be told apart (a `{…}` or `[…]` holding a `/`, an escape) makes every folder a candidate.
#[derive(Debug)]
struct Folders {
    /// The patterns' parts; `None` when every folder must be entered.
    patterns: Option<Vec<Vec<Part>>>,
}

impl Folders {
    fn new(patterns: &[String]) -> Self {
        let parts = patterns
            .iter()
            .map(|pattern| Self::parts(&normalise(pattern).ok()?))
            .collect::<Option<Vec<_>>>();
        Folders { patterns: parts }
    }

    fn parts(pattern: &str) -> Option<Vec<Part>> {
        if pattern.contains('\\') {
            return None;
        }
        pattern
            .split('/')
            .map(|part| {
                let balanced = part.matches('{').count() == part.matches('}').count()
                    && part.matches('[').count() == part.matches(']').count();
                if !balanced {
                    return None;
                }
                if part.contains("**") {
                    return Some(Part::AnyDepth);
                }
                GlobBuilder::new(part)
                    .literal_separator(true)
                    .build()
                    .ok()
                    .map(|glob| Part::Name(glob.compile_matcher()))
            })
            .collect()
    }

    /// Whether the folder at `relative` (`/`-separated, from the root) may hold a match.
    fn may_hold_matches(&self, relative: &str) -> bool {
        let Some(patterns) = &self.patterns else {
            return true;
        };
        let folder: Vec<&str> = relative.split('/').collect();
        patterns.iter().any(|parts| Self::reaches(parts, &folder))
    }

    fn reaches(parts: &[Part], folder: &[&str]) -> bool {
        match (parts.first(), folder.first()) {
            (Some(Part::AnyDepth), _) => true,
            // The folder's whole path matched the start of the pattern, and parts are left
            // for what it holds.
            (Some(Part::Name(_)), None) => true,
            (Some(Part::Name(matcher)), Some(name)) => {
                matcher.is_match(name) && Self::reaches(&parts[1..], &folder[1..])
            }
            // The pattern names this folder itself (or less deep): nothing inside matches.
            (None, _) => false,
        }
    }
}

fn is_inside_file(sandbox: &Sandbox, relative: &str, kind: fs::FileType) -> bool {
    kind.is_symlink() && matches!(sandbox.existing(relative), Ok(Some(target)) if target.is_file())
}

fn diff_stat(changes: &[ChangedFile]) -> Map {
    let mut stat = Map::new();
    let mut by_kind = Map::new();
    for kind in ["added", "modified", "deleted", "renamed"] {
        let count = changes
            .iter()
            .filter(|change| change.kind.name() == kind)
            .count();
        by_kind.insert(kind.into(), Dynamic::from_int(saturating_int(count as u64)));
    }
    let added: u64 = changes.iter().map(|change| change.added).sum();
    let removed: u64 = changes.iter().map(|change| change.removed).sum();
    let binary = changes.iter().filter(|change| change.binary).count();
    stat.insert(
        "files".into(),
        Dynamic::from_int(saturating_int(changes.len() as u64)),
    );
    stat.insert("added".into(), Dynamic::from_int(saturating_int(added)));
    stat.insert("removed".into(), Dynamic::from_int(saturating_int(removed)));
    stat.insert(
        "binary".into(),
        Dynamic::from_int(saturating_int(binary as u64)),
    );
    stat.insert("by_kind".into(), Dynamic::from_map(by_kind));
    stat
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::ChangeKind;

    fn changes(paths: &[&str]) -> Arc<[ChangedFile]> {
        paths
            .iter()
            .map(|path| ChangedFile {
                path: (*path).to_owned(),
                kind: ChangeKind::Added,
                added: 1,
                removed: 0,
                old_path: None,
                binary: false,
            })
            .collect()
    }

    fn folders(patterns: &[&str]) -> Folders {
        Folders::new(&patterns.iter().map(|p| (*p).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn glob_enters_only_the_folders_a_pattern_can_match_in() {
        let only_src = folders(&["src/*.txt"]);
        assert!(only_src.may_hold_matches("src"));
        assert!(!only_src.may_hold_matches("build"));
        assert!(!only_src.may_hold_matches("src/deeper"));
        let deep = folders(&["./src/**/*.rs", "docs/*/index.md"]);
        assert!(deep.may_hold_matches("src/a/b/c"));
        assert!(deep.may_hold_matches("docs/guide"));
        assert!(!deep.may_hold_matches("docs/guide/images"));
        assert!(!deep.may_hold_matches("target"));
        let anywhere = folders(&["**/*.md"]);
        assert!(anywhere.may_hold_matches("build/x"));
        let alternatives = folders(&["{src,tests}/*.rs"]);
        assert!(alternatives.may_hold_matches("tests"));
        assert!(!alternatives.may_hold_matches("build"));
        // Parts that a `/` inside braces would cut apart: every folder is entered.
        let unsplittable = folders(&["{src/a,b}/*.rs"]);
        assert!(unsplittable.may_hold_matches("build"));
    }

    /// A policy `check` runs once per changed file, and each call rebuilt the whole
    /// change list. The values are now built once per set of changes and handed out as copies.
    #[test]
    fn change_values_are_built_once_per_set_of_changes() {
        let values = ChangeValues::default();
        let builds = std::cell::Cell::new(0);
        let build = |files: &[ChangedFile]| {
            builds.set(builds.get() + 1);
            files.iter().map(ChangedFile::to_dynamic).collect::<Array>()
        };
        let first = changes(&["a", "b"]);
        for _ in 0..3 {
            let files = values.get(&first, |built| &mut built.files, build);
            assert_eq!(files.len(), 2);
        }
        assert_eq!(builds.get(), 1);
        // The statistics of the same changes are kept beside the list.
        let stat = values.get(&first, |built| &mut built.stat, diff_stat);
        assert_eq!(stat["files"].as_int().unwrap(), 2);
        assert_eq!(values.get(&first, |built| &mut built.files, build).len(), 2);
        assert_eq!(builds.get(), 1);
        // Other changes (even equal ones) are another set.
        let second = changes(&["a", "b"]);
        values.get(&second, |built| &mut built.files, build);
        assert_eq!(builds.get(), 2);
    }
}
