//! `tnh adr list|open` and the ADRs of `tnh context`: ids, and only the checkout's files.

use crate::support::{TempRepo, run_tnh, stderr_text, stdout_text};

/// Review 2, defect 8: `tnh adr open Adr-1` failed (only `ADR-` and `adr-` were stripped),
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

/// Review 2, defect 4: with `docs` a symbolic link to a folder outside the checkout, `tnh adr
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
