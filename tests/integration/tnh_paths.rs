//! Paths in `tnh diff` and `tnh context`: printed as they are (non-ASCII included), C-quoted as
//! git does only when they hold a `"`, a `\` or a control character, and filtered with git's pathspecs the same way for tracked and untracked files in every mode.

use crate::support::{TempRepo, stderr_text, stdout_text, tnh};

fn run_tnh(repo: &TempRepo, args: &[&str]) -> String {
    let output = tnh()
        .current_dir(repo.path())
        .args(args)
        .env_remove("TNH_BASE_SHA")
        .env_remove("TNH_STEP_DIR")
        .env_remove("TNH_RUN_DIR")
        .env_remove("TNH_RUN_ID")
        .env_remove("TNH_WORKTREE")
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{args:?}: {}",
        stderr_text(&output)
    );
    stdout_text(&output)
}

/// `src/` and its look-alike `srcgen/`, each with a tracked change and an untracked file; a
/// staged non-ASCII file under `src/` and an untracked one under `docs/`; on a work branch.
fn scoped_repo() -> TempRepo {
    let repo = TempRepo::new();
    repo.write("src/a.rs", "a\n");
    repo.write("srcgen/b.rs", "b\n");
    repo.commit_all("base");
    repo.git(&["checkout", "-q", "-b", "work"]);
    repo.write("src/a.rs", "a\na2\n");
    repo.write("srcgen/b.rs", "b\nb2\n");
    repo.write("src/new.rs", "n\n");
    repo.write("srcgen/new.rs", "n\n");
    repo.write("docs/ünï.md", "x\n");
    repo.write("src/naïve.rs", "y\n");
    repo.git(&["add", "src/naïve.rs"]);
    repo
}

/// Regression: non-ASCII paths came out as `"src/na\303\257ve.rs"`, in text and in JSON.
#[test]
fn non_ascii_paths_are_printed_as_they_are_not_quoted() {
    let repo = scoped_repo();
    let context = run_tnh(&repo, &["context"]);
    assert!(
        context.contains("  A src/naïve.rs\n") && context.contains("  ? docs/ünï.md\n"),
        "{context}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&run_tnh(&repo, &["context", "--json"])).unwrap();
    let changed: Vec<&str> = json["changed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry.as_str().unwrap())
        .collect();
    assert!(
        changed.contains(&"A src/naïve.rs") && changed.contains(&"? docs/ünï.md"),
        "{changed:?}"
    );
    let names = run_tnh(&repo, &["diff", "--name-only"]);
    assert!(names.contains("A\tsrc/naïve.rs\n"), "{names}");
    let stat = run_tnh(&repo, &["diff", "--stat"]);
    assert!(
        stat.contains(" src/naïve.rs ") && stat.contains(" docs/ünï.md (new, untracked)"),
        "{stat}"
    );
    let patch = run_tnh(&repo, &["diff", "--patch"]);
    assert!(
        patch.contains("diff --git a/src/naïve.rs b/src/naïve.rs")
            && patch.contains("diff --git a/docs/ünï.md b/docs/ünï.md\nnew file mode 100644\n"),
        "{patch}"
    );
    for output in [&context, &names, &stat, &patch] {
        assert!(!output.contains("\\303"), "quoted path in:\n{output}");
    }
}

/// Regression: `--name-only docs` printed nothing (the untracked path was compared in its
/// quoted form), and `--name-only src` listed `srcgen/` files (a string prefix).
#[test]
fn name_only_filters_by_folder_not_by_string_prefix() {
    let repo = scoped_repo();
    assert_eq!(
        run_tnh(&repo, &["diff", "--name-only", "docs"]),
        "?\tdocs/ünï.md\n"
    );
    let expected = "M\tsrc/a.rs\nA\tsrc/naïve.rs\n?\tsrc/new.rs\n";
    assert_eq!(run_tnh(&repo, &["diff", "--name-only", "src"]), expected);
    assert_eq!(run_tnh(&repo, &["diff", "--name-only", "src/"]), expected);
    assert_eq!(
        run_tnh(&repo, &["diff", "--name-only", "srcgen"]),
        "M\tsrcgen/b.rs\n?\tsrcgen/new.rs\n"
    );
}

/// Regression: `--stat src` listed the untracked `srcgen/new.rs` (string prefix) but not the
/// tracked `srcgen/b.rs` (git's pathspec): tracked and untracked files disagreed.
#[test]
fn stat_filters_tracked_and_untracked_files_alike() {
    let repo = scoped_repo();
    let src = run_tnh(&repo, &["diff", "--stat", "src"]);
    assert!(
        src.contains(" src/a.rs ") && src.contains(" src/new.rs (new, untracked)"),
        "{src}"
    );
    assert!(!src.contains("srcgen"), "{src}");
    let srcgen = run_tnh(&repo, &["diff", "--stat", "srcgen"]);
    assert!(
        srcgen.contains(" srcgen/b.rs ") && srcgen.contains(" srcgen/new.rs (new, untracked)"),
        "{srcgen}"
    );
    assert!(!srcgen.contains(" src/"), "{srcgen}");
}

/// Regression: `'src/*.rs'` matched tracked files under `--stat` but nothing under
/// `--name-only` (and no untracked file anywhere).
#[test]
fn globs_match_in_every_mode() {
    let repo = scoped_repo();
    assert_eq!(
        run_tnh(&repo, &["diff", "--name-only", "src/*.rs"]),
        "M\tsrc/a.rs\nA\tsrc/naïve.rs\n?\tsrc/new.rs\n"
    );
    let stat = run_tnh(&repo, &["diff", "--stat", "src/*.rs"]);
    assert!(
        stat.contains(" src/a.rs ") && stat.contains(" src/new.rs (new, untracked)"),
        "{stat}"
    );
    assert!(!stat.contains("srcgen"), "{stat}");
    let patch = run_tnh(&repo, &["diff", "--patch", "src/*.rs"]);
    assert!(
        patch.contains("diff --git a/src/a.rs")
            && patch.contains("diff --git a/src/new.rs b/src/new.rs\nnew file mode 100644\n"),
        "{patch}"
    );
    assert!(!patch.contains("srcgen"), "{patch}");
}

/// Regression: an empty `--name-only` (and `--patch`) printed nothing at all, while `--stat`
/// said `no changes`.
#[test]
fn every_mode_says_when_nothing_changed() {
    let repo = scoped_repo();
    for mode in ["--stat", "--name-only", "--patch"] {
        assert_eq!(
            run_tnh(&repo, &["diff", mode, "nothing-here"]),
            "no changes\n",
            "{mode}"
        );
    }
    let clean = TempRepo::new();
    for mode in ["--stat", "--name-only", "--patch"] {
        assert_eq!(run_tnh(&clean, &["diff", mode]), "no changes\n", "{mode}");
    }
}

/// Regression: `--patch` ranked any file whose header contained "test" as a test, so a source
/// file such as `src/attestation.rs` went after the tests.
#[test]
fn patch_puts_sources_first_even_when_their_name_contains_test() {
    let repo = TempRepo::new();
    repo.write("app/tests/check.rs", "a\n");
    repo.write("src/attestation.rs", "a\n");
    repo.write("docs/guide.md", "a\n");
    repo.commit_all("base");
    for path in ["app/tests/check.rs", "src/attestation.rs", "docs/guide.md"] {
        repo.write(path, "a\nb\n");
    }
    let patch = run_tnh(&repo, &["diff", "--patch"]);
    let source = patch.find("diff --git a/src/attestation.rs").unwrap();
    let tests = patch.find("diff --git a/app/tests/check.rs").unwrap();
    let docs = patch.find("diff --git a/docs/guide.md").unwrap();
    assert!(source < tests && tests < docs, "{patch}");
}

/// `--name-only` (and `tnh context`) printed a path holding a `"`, a `\` or a
/// tab as it is, while `--stat` and `--patch` C-quoted it, so one file had two spellings and a
/// tab in a name broke the `STATUS<TAB>PATH` lines. Every text mode now spells such a path as
/// git does (`"quo\"te.txt"`), JSON carries it as it is, the patch still applies, and
/// `--patch` ranks a quoted path by its real name.
#[test]
fn paths_git_quotes_are_quoted_alike_in_every_text_mode() {
    let repo = TempRepo::new();
    repo.write("src/quo\"te.rs", "a\n");
    repo.write("tests/back\\slash.rs", "a\n");
    repo.write("docs/tab\there.md", "a\n");
    repo.commit_all("base");
    for path in [
        "src/quo\"te.rs",
        "tests/back\\slash.rs",
        "docs/tab\there.md",
    ] {
        repo.write(path, "a\nb\n");
    }
    let patch = run_tnh(&repo, &["diff", "--patch"]);
    let source = patch.find("+++ \"b/src/quo\\\"te.rs\"").unwrap();
    let tests = patch.find("+++ \"b/tests/back\\\\slash.rs\"").unwrap();
    let docs = patch.find("+++ \"b/docs/tab\\there.md\"").unwrap();
    assert!(source < tests && tests < docs, "{patch}");
    let scratch = tempfile::tempdir().unwrap();
    let patch_file = scratch.path().join("reverse.patch");
    std::fs::write(&patch_file, &patch).unwrap();
    repo.git(&["apply", "-R", patch_file.to_str().unwrap()]);
    assert_eq!(repo.git(&["status", "--porcelain"]), "");

    for path in [
        "src/quo\"te.rs",
        "tests/back\\slash.rs",
        "docs/tab\there.md",
    ] {
        repo.write(path, "a\nb\n");
    }
    repo.write("new\"file.txt", "n\n");
    assert_eq!(
        run_tnh(&repo, &["diff", "--name-only"]),
        "M\t\"docs/tab\\there.md\"\nM\t\"src/quo\\\"te.rs\"\nM\t\"tests/back\\\\slash.rs\"\n?\t\"new\\\"file.txt\"\n"
    );
    let stat = run_tnh(&repo, &["diff", "--stat"]);
    assert!(
        stat.contains(" \"src/quo\\\"te.rs\" ")
            && stat.contains(" \"tests/back\\\\slash.rs\" ")
            && stat.contains(" \"new\\\"file.txt\" (new, untracked)"),
        "{stat}"
    );
    let patch = run_tnh(&repo, &["diff", "--patch"]);
    assert!(
        patch.contains(
            "diff --git \"a/new\\\"file.txt\" \"b/new\\\"file.txt\"\nnew file mode 100644\n"
        ),
        "{patch}"
    );
    let context = run_tnh(&repo, &["context"]);
    assert!(
        context.contains("  M \"docs/tab\\there.md\"\n")
            && context.contains("  ? \"new\\\"file.txt\"\n"),
        "{context}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&run_tnh(&repo, &["context", "--json"])).unwrap();
    assert_eq!(
        json["changed"],
        serde_json::json!([
            "M docs/tab\there.md",
            "M src/quo\"te.rs",
            "M tests/back\\slash.rs",
            "? new\"file.txt"
        ])
    );
}

/// `tnh diff --help` said `--patch` puts "others" after the docs, but a
/// file that is neither a test nor a doc (a build file, a configuration) comes first, with the
/// sources; the help now says what the command does.
#[test]
fn patch_puts_files_that_are_neither_tests_nor_docs_with_the_sources() {
    let repo = TempRepo::new();
    for path in [
        "Makefile",
        "config.json",
        "src/z.rs",
        "tests/t.rs",
        "docs/a.md",
    ] {
        repo.write(path, "a\n");
    }
    repo.commit_all("base");
    for path in [
        "Makefile",
        "config.json",
        "src/z.rs",
        "tests/t.rs",
        "docs/a.md",
    ] {
        repo.write(path, "a\nb\n");
    }
    let patch = run_tnh(&repo, &["diff", "--patch"]);
    let headers: Vec<&str> = patch
        .lines()
        .filter(|line| line.starts_with("diff --git "))
        .collect();
    assert_eq!(
        headers,
        [
            "diff --git a/Makefile b/Makefile",
            "diff --git a/config.json b/config.json",
            "diff --git a/src/z.rs b/src/z.rs",
            "diff --git a/tests/t.rs b/tests/t.rs",
            "diff --git a/docs/a.md b/docs/a.md",
        ]
    );
    // Read as words: clap wraps the help wherever the text before puts the line ends.
    let help = run_tnh(&repo, &["diff", "--help"])
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        help.contains("with them every file that is neither a test nor a doc")
            && !help.contains("and others"),
        "{help}"
    );
}
