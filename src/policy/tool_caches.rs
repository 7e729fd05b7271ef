//! Files that test runners, linters and coverage tools write beside the code they check:
//! caches and data files, never part of a change anyone means to make. What a RUN_VALIDATION's
//! validators write there is removed after them (so it is charged to no step and never
//! reaches the run's commit), and a violation on such a path says to ignore it in
//! `.gitignore`.

/// Folders that hold only a tool's cache or output, wherever they are.
const CACHE_FOLDERS: [&str; 10] = [
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".hypothesis",
    ".tox",
    ".nox",
    "htmlcov",
    ".nyc_output",
    ".eslintcache",
];

/// The cache entry `path` lies in or is, as `.gitignore` would name it (`__pycache__/`,
/// `*.pyc`, `.coverage`), or `None` for an ordinary path. `path` is relative to the worktree,
/// `/`-separated.
pub fn cache_entry(path: &str) -> Option<&'static str> {
    let mut components = path.split('/').peekable();
    while let Some(component) = components.next() {
        let last = components.peek().is_none();
        if let Some(folder) = CACHE_FOLDERS.iter().find(|folder| **folder == component) {
            return Some(match *folder {
                "__pycache__" => "__pycache__/",
                ".pytest_cache" => ".pytest_cache/",
                ".mypy_cache" => ".mypy_cache/",
                ".ruff_cache" => ".ruff_cache/",
                ".hypothesis" => ".hypothesis/",
                ".tox" => ".tox/",
                ".nox" => ".nox/",
                "htmlcov" => "htmlcov/",
                ".nyc_output" => ".nyc_output/",
                _ => ".eslintcache",
            });
        }
        if last {
            if component.ends_with(".pyc") {
                return Some("*.pyc");
            }
            if component.ends_with(".pyo") {
                return Some("*.pyo");
            }
            if component == ".coverage" || component.starts_with(".coverage.") {
                return Some(".coverage*");
            }
        }
    }
    None
}

/// The sentence a violation on a cache path ends with.
pub fn ignore_hint(entry: &str) -> String {
    format!("a tool's cache: add `{entry}` to .gitignore so that no change includes it")
}

#[cfg(test)]
mod tests {
    use super::cache_entry;

    #[test]
    fn caches_are_found_at_any_depth_and_ordinary_paths_are_not() {
        let cases = [
            ("__pycache__/calc.cpython-311.pyc", Some("__pycache__/")),
            ("src/pkg/__pycache__/x.pyc", Some("__pycache__/")),
            (".pytest_cache/v/cache/lastfailed", Some(".pytest_cache/")),
            ("tests/.mypy_cache/3.11/x.json", Some(".mypy_cache/")),
            ("old.pyc", Some("*.pyc")),
            (".coverage", Some(".coverage*")),
            (".coverage.host.123", Some(".coverage*")),
            ("htmlcov/index.html", Some("htmlcov/")),
            ("src/calc.py", None),
            ("docs/pycache.md", None),
            ("src/coverage.rs", None),
            (".pyc/readme", None),
            ("my__pycache__/x", None),
        ];
        for (path, expected) in cases {
            assert_eq!(cache_entry(path), expected, "{path}");
        }
    }
}
