//! `tnh adr list|open` and the ADRs of `tnh context`: ids, and only the checkout's files.

use std::path::Path;
use std::process::Output;

use crate::support::{TempRepo, stderr_text, stdout_text, tnh};

fn run_tnh(dir: &Path, args: &[&str]) -> Output {
    tnh()
        .current_dir(dir)
        .args(args)
        .env_remove("TNH_BASE_SHA")
        .env_remove("TNH_STEP_DIR")
        .env_remove("TNH_RUN_ID")
        .output()
        .unwrap()
}

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
