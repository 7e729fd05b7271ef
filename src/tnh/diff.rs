//! `tnh diff`: the changes against the run's base, key hunks first, truncated with a marker.

use std::fmt::Write as _;

use clap::Args;

use super::{TnhError, TnhResult, git, print};
use crate::exit::ExitStatus;

/// `tnh diff [--stat|--name-only|--patch] [--against REF] [--max-lines N] [PATH…]`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  tnh diff --stat\n  tnh diff --patch --max-lines 200 src/\n  tnh diff --name-only 'src/*.rs' | head\n  tnh diff --against main --stat\n\n\
The base is TNH_BASE_SHA inside a run, else the merge-base with origin/HEAD, main or master, else HEAD \
(the empty tree while there is no commit yet: every file is new). \
With --against REF the base is the merge-base of REF and HEAD instead: the change of a branch since it left REF, \
plus what is not committed yet (a review run started with --base feature-branch reads the branch's change with \
--against main). \
Untracked files are included as new: --stat and --name-only list them, --patch shows them as `new file mode` \
diffs (binary files of every kind as `GIT binary patch`, after every other file), so that its output applies with \
`git apply` (unless truncated); the checkout's index is not changed. Paths print as they are, except that one holding a `\"`, a `\\` or a control \
character (a tab) is C-quoted as git does (`\"quo\\\"te.txt\"`), alike in every mode. PATHs are git pathspecs relative to the repository root, matched the same way \
for tracked and untracked files in every mode: `src` is the folder src (not srcgen/), `src/*.rs` a glob. \
--patch shows source files first (with them every file that is neither a test nor a doc: build files, configuration), \
then tests (a test/ or tests/ folder, or a file named test_*, *_test.*, *.test.*, \
test.* or tests.*), then docs (*.md, or under docs/ or doc/), each group in git's order; output longer than --max-lines ends with a line \
saying how much was left out (--patch reads at most 32 MiB of git's patch, whole files, and says so); \
with nothing changed every mode prints `no changes`.\n\n\
Exit codes: 0 printed (also when nothing changed); 2 bad usage, a PATH git refuses, an --against REF git cannot find, or outside a repository."
)]
pub struct DiffArgs {
    /// A diffstat (the default).
    #[arg(long, conflicts_with_all = ["name_only", "patch"])]
    pub stat: bool,
    /// Only the changed paths, with A/M/D/R/? status.
    #[arg(long, conflicts_with = "patch")]
    pub name_only: bool,
    /// The patch.
    #[arg(long)]
    pub patch: bool,
    /// Compare with the merge-base of this ref (branch, tag or commit) and HEAD instead of the
    /// run's base.
    #[arg(long, value_name = "REF")]
    pub against: Option<String>,
    /// Show at most this many lines.
    #[arg(long, value_name = "N", default_value_t = 400)]
    pub max_lines: usize,
    /// Limit to these paths (git pathspecs: folders, files or globs).
    pub paths: Vec<String>,
}

/// Prints the diff.
pub fn run(args: &DiffArgs) -> TnhResult {
    let mut place = git::place()?;
    if let Some(against) = &args.against {
        place.base = git::merge_base(&place.root, against)?;
        place.base_source = format!("merge-base with {against}");
    }
    if args.patch {
        let (text, cut) = patch(&place, &args.paths)?;
        let mut shown = truncate(
            if text.is_empty() && !cut {
                "no changes\n"
            } else {
                &text
            },
            args.max_lines,
        );
        if cut {
            let _ = writeln!(
                shown,
                "… truncated: the patch is longer than {} MiB; the files after it were not read (narrow with PATH…)",
                MAX_PATCH_BYTES >> 20
            );
        }
        print(&shown);
        return Ok(ExitStatus::Success);
    }
    let mut text = if args.name_only {
        git::changes(&place, &args.paths)?
            .iter()
            .map(|(status, path)| format!("{status}\t{}\n", git::quoted(path)))
            .collect()
    } else {
        let tracked = git::with_paths(
            // Wide enough that git never shortens a path to `.../` (the agent must be able
            // to use every path it is shown); the bars keep git's usual width.
            &[
                "diff",
                "-M",
                "--no-color",
                "--stat=1000000",
                "--stat-graph-width=40",
                &place.base,
            ],
            &args.paths,
        );
        let (mut text, untracked) = git::git_pair(
            &place.root,
            &git::as_strs(&tracked),
            &git::as_strs(&git::untracked_args(&args.paths)),
        )?;
        for path in git::split_nul(&untracked) {
            let _ = writeln!(text, " {} (new, untracked)", git::quoted(path));
        }
        text
    };
    if text.is_empty() {
        text = "no changes\n".into();
    }
    print(&truncate(&text, args.max_lines));
    Ok(ExitStatus::Success)
}

/// The most of git's patch read: a longer one (a huge new file) is cut there, between files.
const MAX_PATCH_BYTES: usize = 32 << 20;

/// `--patch`: the change against the base as one patch `git apply` takes — new (untracked)
/// files as `new file mode` diffs, binary files as `GIT binary patch` — in [`key_hunks_first`]
/// order, and whether it was cut at [`MAX_PATCH_BYTES`] (only whole files are kept then).
///
/// git shows an untracked file in a diff only when the index has it (as intent-to-add), and
/// `tnh diff` changes nothing of the checkout: the untracked files are added with `git add
/// --intent-to-add` to a copy of the index in a temporary folder, which the diff then reads
/// (`GIT_INDEX_FILE`). The checkout's index, files and objects are untouched.
fn patch(place: &git::Place, paths: &[String]) -> Result<(String, bool), TnhError> {
    let untracked = git::git(&place.root, &git::as_strs(&git::untracked_args(paths)))?;
    let untracked = git::split_nul(&untracked);
    let diff = git::with_paths(
        &[
            "diff",
            "-M",
            "--no-color",
            "--binary",
            "--patch",
            &place.base,
        ],
        paths,
    );
    let diff = git::as_strs(&diff);
    if untracked.is_empty() {
        let (text, cut) = git::git_capped(&place.root, &diff, None, MAX_PATCH_BYTES)?;
        return Ok((key_hunks_first(&whole_files(&text, cut)), cut));
    }
    match intent_to_add_index(&place.root, &untracked) {
        Ok(scratch) => {
            let index = scratch.path().join("index");
            let (text, cut) = git::git_capped(&place.root, &diff, Some(&index), MAX_PATCH_BYTES)?;
            Ok((key_hunks_first(&whole_files(&text, cut)), cut))
        }
        // Should git refuse the scratch index, the new files are still named, as before.
        Err(error) => {
            super::note(&format!(
                "warning: new files are listed, not shown: {error}"
            ));
            let (text, cut) = git::git_capped(&place.root, &diff, None, MAX_PATCH_BYTES)?;
            let mut text = key_hunks_first(&whole_files(&text, cut));
            for path in untracked {
                let _ = writeln!(text, "new untracked file: {}", git::quoted(path));
            }
            Ok((text, cut))
        }
    }
}

/// A temporary folder holding `index`: a copy of the checkout's index with `untracked` added
/// as intent-to-add.
fn intent_to_add_index(
    root: &std::path::Path,
    untracked: &[&str],
) -> Result<tempfile::TempDir, String> {
    let scratch = tempfile::Builder::new()
        .prefix("tnh-diff-")
        .tempdir()
        .map_err(|error| format!("cannot create a temporary folder: {error}"))?;
    let index = scratch.path().join("index");
    let source = git::index_file(root);
    if source.is_file() {
        std::fs::copy(&source, &index)
            .map_err(|error| format!("cannot copy {}: {error}", source.display()))?;
    }
    let list = scratch.path().join("untracked");
    let mut names = Vec::new();
    for path in untracked {
        names.extend_from_slice(path.as_bytes());
        names.push(0);
    }
    std::fs::write(&list, names)
        .map_err(|error| format!("cannot write {}: {error}", list.display()))?;
    let list_argument = format!("--pathspec-from-file={}", list.display());
    // The names are the files' own (`--literal-pathspecs`: a `*` in one is no glob); a split
    // index would write a shared index file into the repository's git folder.
    git::git_capped(
        root,
        &[
            "-c",
            "core.splitIndex=false",
            "--literal-pathspecs",
            "add",
            "--intent-to-add",
            &list_argument,
            "--pathspec-file-nul",
        ],
        Some(&index),
        1 << 20,
    )
    .map_err(|error| error.message)?;
    Ok(scratch)
}

/// `patch` without its last file when git's output was cut inside it.
fn whole_files(patch: &str, cut: bool) -> String {
    if !cut {
        return patch.to_owned();
    }
    match patch.rfind("\ndiff --git ") {
        Some(end) => patch[..=end].to_owned(),
        None => String::new(),
    }
}

/// Files of the patch reordered: sources (and every file that is neither a test nor a doc:
/// a build file or a configuration change is as much the change as code) first, then tests,
/// then docs; git's order within each group.
fn key_hunks_first(patch: &str) -> String {
    let mut files: Vec<&str> = Vec::new();
    let mut start = None;
    for (index, _) in patch.match_indices("diff --git ") {
        if index == 0 || patch.as_bytes()[index - 1] == b'\n' {
            if let Some(from) = start {
                files.push(&patch[from..index]);
            }
            start = Some(index);
        }
    }
    if let Some(from) = start {
        files.push(&patch[from..]);
    }
    files.sort_by_cached_key(|file| {
        // A binary file's patch (base85 lines nobody reads) comes after everything else.
        let binary = file.contains("\nGIT binary patch\n");
        (binary, rank(&patch_path(file)))
    });
    files.concat()
}

/// Where a changed file goes in `--patch`: tests 1, docs 2, anything else (sources, build
/// files, configuration) 0.
fn rank(path: &str) -> u8 {
    if is_test_path(path) {
        1
    } else if is_doc_path(path) {
        2
    } else {
        0
    }
}

/// The path one file's patch is about: its new name, else its old one (a deletion), else the
/// header's (a mode change or a binary file). git C-quotes a name with a `"`, a `\` or a
/// control character (`+++ "b/quo\"te.txt"`); the path is read back from that form too.
fn patch_path(file: &str) -> String {
    let mut lines = file.lines();
    let header = lines.next().unwrap_or_default();
    let mut old = None;
    for line in lines.take_while(|line| !line.starts_with("@@")) {
        let new = line
            .strip_prefix("+++ ")
            .and_then(|name| side(name, "b/"))
            .or_else(|| {
                line.strip_prefix("rename to ")
                    .or_else(|| line.strip_prefix("copy to "))
                    .map(|name| git::unquoted(name).into_owned())
            });
        if let Some(path) = new {
            return path;
        }
        if let Some(path) = line.strip_prefix("--- ").and_then(|name| side(name, "a/")) {
            old = Some(path);
        }
    }
    let from_header = if header.ends_with('"') {
        header
            .rfind(" \"b/")
            .and_then(|at| side(&header[at + 1..], "b/"))
    } else {
        header.rsplit_once(" b/").map(|(_, path)| path.to_owned())
    };
    old.or(from_header).unwrap_or_else(|| header.to_owned())
}

/// The path of a `--- a/…` or `+++ b/…` name (git ends a name holding a space with a tab),
/// without its `prefix`; `None` for `/dev/null`.
fn side(name: &str, prefix: &str) -> Option<String> {
    git::unquoted(name.trim_end_matches('\t'))
        .strip_prefix(prefix)
        .map(str::to_owned)
}

/// A test file: under a `test`, `tests` or `__tests__` folder, or named `test_*`, `*_test.*`,
/// `*.test.*`, `test.*` or `tests.*` — not any path that merely contains "test"
/// (`src/attestation.rs`, `src/contest.rs`).
pub(crate) fn is_test_path(path: &str) -> bool {
    let mut components: Vec<&str> = path.split('/').collect();
    let name = components.pop().unwrap_or_default();
    if components
        .iter()
        .any(|folder| matches!(*folder, "test" | "tests" | "__tests__"))
    {
        return true;
    }
    let stem = name.split('.').next().unwrap_or(name);
    matches!(stem, "test" | "tests")
        || name.starts_with("test_")
        || name.contains("_test.")
        || name.contains(".test.")
}

/// A documentation file: Markdown, or anything under a `docs` or `doc` folder.
fn is_doc_path(path: &str) -> bool {
    let mut components: Vec<&str> = path.split('/').collect();
    let name = components.pop().unwrap_or_default();
    name.ends_with(".md")
        || components
            .iter()
            .any(|folder| matches!(*folder, "docs" | "doc"))
}

/// At most `max` lines, then a marker saying what was left out.
pub fn truncate(text: &str, max: usize) -> String {
    let total = text.lines().count();
    if total <= max {
        return text.to_owned();
    }
    let mut kept: String = text
        .lines()
        .take(max)
        .map(|line| format!("{line}\n"))
        .collect();
    let _ = writeln!(
        kept,
        "… truncated: {} more lines not shown (raise --max-lines or narrow with PATH…)",
        total - max
    );
    kept
}

#[cfg(test)]
mod tests {
    use super::{is_test_path, patch_path, rank};
    use crate::tnh::git::{quoted, unquoted};

    /// A quoted path was read back only by `--patch`'s ranking, which saw
    /// the raw header; every path git may quote reads back to itself.
    #[test]
    fn quoted_paths_read_back_as_they_are() {
        for path in [
            "plain/naïve file.rs",
            "quo\"te.txt",
            "back\\slash.txt",
            "tab\there\nnew\rline\x07\x08\x0b\x0c\x01\x7f.md",
        ] {
            assert_eq!(unquoted(&quoted(path)), path);
        }
        assert_eq!(quoted("plain/naïve file.rs"), "plain/naïve file.rs");
        assert_eq!(quoted("a\"b\\c\td\x01"), "\"a\\\"b\\\\c\\td\\001\"");
        let file = "diff --git \"a/tests/quo\\\"te.rs\" \"b/tests/quo\\\"te.rs\"\nindex 1..2 100644\n--- \"a/tests/quo\\\"te.rs\"\n+++ \"b/tests/quo\\\"te.rs\"\n@@ -1 +1 @@\n";
        assert_eq!(patch_path(file), "tests/quo\"te.rs");
        let mode_change = "diff --git \"a/docs/back\\\\slash\" \"b/docs/back\\\\slash\"\nold mode 100644\nnew mode 100755\n";
        assert_eq!(patch_path(mode_change), "docs/back\\slash");
        let deleted = "diff --git a/src/gone.rs b/src/gone.rs\ndeleted file mode 100644\n--- a/src/gone.rs\n+++ /dev/null\n";
        assert_eq!(patch_path(deleted), "src/gone.rs");
    }

    #[test]
    fn test_paths_are_matched_by_folder_or_file_name_pattern() {
        for path in [
            "tests/lib.rs",
            "crates/core/tests/it.rs",
            "src/test/java/AppTest.java",
            "web/__tests__/app.js",
            "pkg/server_test.go",
            "web/app.test.ts",
            "python/test_api.py",
            "src/foo/tests.rs",
        ] {
            assert!(is_test_path(path), "{path} is a test");
        }
        for path in [
            "src/attestation.rs",
            "src/contest.rs",
            "src/testing_helpers.rs",
            "latest/notes.rs",
            "src/protest/main.rs",
        ] {
            assert!(!is_test_path(path), "{path} is not a test");
        }
    }

    #[test]
    fn docs_rank_after_tests_and_sources_first() {
        assert_eq!(rank("src/attestation.rs"), 0);
        assert_eq!(rank("tests/a.rs"), 1);
        assert_eq!(rank("docs/guide.txt"), 2);
        assert_eq!(rank("README.md"), 2);
        assert_eq!(rank("mydocs/tool.rs"), 0);
    }
}
