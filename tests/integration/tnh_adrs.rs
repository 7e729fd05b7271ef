//! `tnh adr list|open` and the ADRs of `tnh context`: ids, and only the checkout's files.

use crate::support::{TempRepo, conductor, run_tnh, stderr_text, stdout_text};

/// `tnh adr open Adr-1` failed (only `ADR-` and `adr-` were stripped),
/// and an ADR whose front matter said `id: adr-7` got the id `ADR-7`, which `tnh adr open
/// adr-7` could not find. The id is case-insensitive and its `ADR-` prefix optional, in any
/// case, both where it is asked for and where it is written.
#[test]
fn an_adr_id_is_found_whatever_the_case_of_its_prefix() {
    let repo = TempRepo::new();
    repo.write("docs/adr/adr-1-first.md", "# First\n**Status**: accepted\n");
    repo.write(
        "docs/adr/seventh.md",
        "---\nid: adr-7\ntitle: Seventh\nstatus: proposed\n---\nbody\n",
    );
    assert_eq!(
        stdout_text(&run_tnh(repo.path(), &["adr", "list"])),
        "1\taccepted\tFirst\n7\tproposed\tSeventh\n"
    );
    for id in ["1", "ADR-1", "adr-1", "Adr-1", "aDr-1"] {
        let output = run_tnh(repo.path(), &["adr", "open", id]);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{id}: {}",
            stderr_text(&output)
        );
        assert!(stdout_text(&output).starts_with("# First"), "{id}");
    }
    for id in ["7", "adr-7", "ADR-7", "Adr-7"] {
        let output = run_tnh(repo.path(), &["adr", "open", id]);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{id}: {}",
            stderr_text(&output)
        );
        assert!(stdout_text(&output).contains("title: Seventh"), "{id}");
    }
}

/// With `docs` a symbolic link to a folder outside the checkout, `tnh adr
/// list|open` and `tnh context` listed and printed the ADRs found there (and `docs -> /` made
/// `tnh context` walk the whole file system). The walk follows no link now — not on a
/// pattern's prefix, not a folder or an ADR file met below it — and a pattern leaving the
/// checkout is refused; each is named on stderr.
#[test]
fn adrs_are_read_only_from_the_checkouts_own_files() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(outside.path().join("adr")).unwrap();
    std::fs::write(
        outside.path().join("adr/adr-9-secret.md"),
        "# Secret outside ADR\n**Status**: accepted\nCONTENT FROM OUTSIDE\n",
    )
    .unwrap();
    let repo = TempRepo::new();
    std::os::unix::fs::symlink(outside.path(), repo.path().join("docs")).unwrap();
    let list = run_tnh(repo.path(), &["adr", "list"]);
    assert_eq!(list.status.code(), Some(0));
    assert!(
        !stdout_text(&list).contains("Secret"),
        "{}",
        stdout_text(&list)
    );
    assert!(
        stderr_text(&list).contains("not following `docs`: it is a symbolic link"),
        "{}",
        stderr_text(&list)
    );
    let open = run_tnh(repo.path(), &["adr", "open", "9"]);
    assert_eq!(open.status.code(), Some(2));
    assert!(!stdout_text(&open).contains("CONTENT FROM OUTSIDE"));
    for args in [&["context"][..], &["context", "--json"][..]] {
        let context = run_tnh(repo.path(), args);
        assert_eq!(context.status.code(), Some(0), "{}", stderr_text(&context));
        assert!(!stdout_text(&context).contains("Secret"), "{args:?}");
        assert!(
            stderr_text(&context).contains("not following `docs`"),
            "{args:?}: {}",
            stderr_text(&context)
        );
    }
    // `docs -> /`: refused at the prefix, nothing below it is read.
    std::fs::remove_file(repo.path().join("docs")).unwrap();
    std::os::unix::fs::symlink("/", repo.path().join("docs")).unwrap();
    let root_link = run_tnh(repo.path(), &["adr", "list"]);
    assert!(
        stderr_text(&root_link).contains("not following `docs`: it is a symbolic link (to /)"),
        "{}",
        stderr_text(&root_link)
    );
    // Links met on the walk: a linked `adr` folder and a linked ADR file.
    std::fs::remove_file(repo.path().join("docs")).unwrap();
    repo.write(
        "docs/arch/adr/adr-1-own.md",
        "# Own\n**Status**: accepted\n",
    );
    std::os::unix::fs::symlink(outside.path().join("adr"), repo.path().join("docs/linked"))
        .unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("adr/adr-9-secret.md"),
        repo.path().join("docs/arch/adr/adr-9-secret.md"),
    )
    .unwrap();
    let walked = run_tnh(repo.path(), &["adr", "list"]);
    assert_eq!(stdout_text(&walked), "1\taccepted\tOwn\n");
    let notes = stderr_text(&walked);
    assert!(notes.contains("not following `docs/linked`"), "{notes}");
    assert!(
        notes.contains("not following `docs/arch/adr/adr-9-secret.md`"),
        "{notes}"
    );
    // A pattern that leaves the checkout is refused.
    repo.write(
        ".tnh/config.yaml",
        &format!(
            "adr_paths: [\"../{}/adr/*.md\"]\n",
            outside.path().file_name().unwrap().to_string_lossy()
        ),
    );
    let escaping = run_tnh(repo.path(), &["adr", "list"]);
    assert!(
        !stdout_text(&escaping).contains("Secret"),
        "{}",
        stdout_text(&escaping)
    );
    assert!(
        stderr_text(&escaping).contains("it is outside the checkout"),
        "{}",
        stderr_text(&escaping)
    );
}

/// A misspelt `adr_paths` (`adr_path:`), one of the wrong type (a string,
/// a number) or a glob that does not compile was silently ignored: `tnh adr list` listed the
/// ADRs of the default folder, which the agent was then told to implement. Each is refused,
/// by `tnh adr`, `tnh context` and `tnh-conductor` alike, naming the file, line and column,
/// with a hint.
#[test]
fn a_misspelt_or_mistyped_adr_paths_is_refused_where_it_is_written() {
    let repo = TempRepo::new();
    repo.write(
        "docs/adr/adr-1-old.md",
        "---\nstatus: accepted\ntitle: Old place\n---\n",
    );
    repo.write(
        "decisions/adr-2-new.md",
        "---\nstatus: accepted\ntitle: New place\n---\n",
    );
    repo.write(
        "wf.yaml",
        "workflow_id: w\nversion: 1\ndescription: d\nentry_step: done\nsteps:\n  - {id: done, opcode: STOP}\n",
    );
    repo.commit_all("adrs");
    repo.write(".tnh/config.yaml", "adr_paths: [\"decisions/*.md\"]\n");
    assert_eq!(
        stdout_text(&run_tnh(repo.path(), &["adr", "list"])),
        "2\taccepted\tNew place\n"
    );
    let config = repo.path().join(".tnh/config.yaml");
    for (text, expected) in [
        (
            "adr_path: [\"decisions/*.md\"]\n",
            ":1:1: unknown key `adr_path`: did you mean `adr_paths`?",
        ),
        (
            "Adr_paths: [\"decisions/*.md\"]\n",
            ":1:1: unknown key `Adr_paths`: did you mean `adr_paths`?",
        ),
        (
            "adr_paths: \"decisions/*.md\"\n",
            ":1:12: `adr_paths` must be a list of globs relative to the repository root",
        ),
        (
            "adr_paths: 5\n",
            ":1:12: `adr_paths` must be a list of globs relative to the repository root",
        ),
        (
            "adr_paths:\n  - \"[bad\"\n",
            ":2:5: invalid ADR pattern `[bad`: unclosed character class",
        ),
    ] {
        repo.write(".tnh/config.yaml", text);
        let expected = format!("error: {}{expected}", config.display());
        for args in [&["adr", "list"][..], &["adr", "open", "1"], &["context"]] {
            let output = run_tnh(repo.path(), args);
            assert_eq!(output.status.code(), Some(2), "{text} {args:?}");
            let stderr = stderr_text(&output);
            assert!(
                stderr.starts_with(&expected) && stderr.contains("  hint: "),
                "{text} {args:?}: {stderr}"
            );
            assert!(!stdout_text(&output).contains("Old place"), "{text}");
        }
        let validate = conductor()
            .current_dir(repo.path())
            .args(["validate", "wf.yaml"])
            .output()
            .unwrap();
        assert_ne!(validate.status.code(), Some(0), "{text}");
        assert!(
            stderr_text(&validate).contains(&expected[7..]),
            "{text}: {}",
            stderr_text(&validate)
        );
    }
    // With nothing found, the message names the patterns searched.
    repo.write(".tnh/config.yaml", "adr_paths: [\"nowhere/*.md\"]\n");
    assert_eq!(
        stdout_text(&run_tnh(repo.path(), &["adr", "list"])),
        "no ADRs found (adr_paths of .tnh/config.yaml: nowhere/*.md)\n"
    );
}

/// The adr-tools layout (`docs/adr/0012-use-foo.md`, a `## Status`
/// section) gave the id `0012`, which `tnh adr open ADR-12` — what `implement_adr` tells the
/// agent to run for `-p adr_id=ADR-12` — and `tnh adr open 12` did not find, and the status
/// `unknown`. A number's leading zeros do not count, and the common ways of writing the status
/// are read.
#[test]
fn adr_tools_ids_and_status_sections_are_understood() {
    let repo = TempRepo::new();
    repo.write(
        "docs/adr/0012-use-foo.md",
        "# 12. Use foo\n\nDate: 2024-01-01\n\n## Status\n\nAccepted\n\n## Context\n",
    );
    repo.write(
        "docs/adr/0003-plain-line.md",
        "# 3. Plain line\n\nStatus: Superseded\n",
    );
    repo.write(
        "docs/adr/0004-bold-colon-inside.md",
        "# 4. Bold\n\n* **Status:** Proposed\n",
    );
    repo.write(
        "docs/adr/0005-front-matter.md",
        "---\nStatus: deprecated\n---\n# 5. Front matter\n\n## Status\n\nAccepted\n",
    );
    repo.write(
        "docs/adr/0006-none.md",
        "# 6. None\n\n## Status\n\n## Context\n",
    );
    repo.commit_all("adrs");
    assert_eq!(
        stdout_text(&run_tnh(repo.path(), &["adr", "list"])),
        "0003\tsuperseded\t3. Plain line\n\
         0004\tproposed\t4. Bold\n\
         0005\tdeprecated\t5. Front matter\n\
         0006\tunknown\t6. None\n\
         0012\taccepted\t12. Use foo\n"
    );
    for id in ["ADR-12", "12", "0012", "ADR-0012", "adr-012"] {
        let output = run_tnh(repo.path(), &["adr", "open", id]);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{id}: {}",
            stderr_text(&output)
        );
        assert!(stdout_text(&output).starts_with("# 12. Use foo"), "{id}");
    }
    let missing = run_tnh(repo.path(), &["adr", "open", "120"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        stderr_text(&missing).contains("known ids: 0003, 0004, 0005, 0006, 0012"),
        "{}",
        stderr_text(&missing)
    );
    assert!(
        stdout_text(&run_tnh(
            repo.path(),
            &["adr", "list", "--status", "Accepted"]
        )) == "0012\taccepted\t12. Use foo\n"
    );
}
