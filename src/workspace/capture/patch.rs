//! The binary-safe patch of a step's change, with each file's lines counted from its hunks.

use std::io::{BufRead, Write};

use super::numstat::{RawRecord, classify, parse_error};
use super::*;

/// `git` reading an index that does not exist, with the folder that would hold it (kept
/// while `git` is used). Where an index says a worktree file matches a blob being diffed,
/// git reads the file instead of the blob; with no index, it reads blobs only.
pub(super) fn blobs_only(git: &Git) -> Result<(tempfile::TempDir, Git), WorkspaceError> {
    let folder = tempfile::tempdir()
        .map_err(|source| WorkspaceError::io("create a folder in", std::env::temp_dir(), source))?;
    let git = git.with_index(&folder.path().join("index"));
    Ok((folder, git))
}

/// Writes the binary-safe patch from `since` to the scratch index into `patch_file`, and
/// returns the changed files with the lines each adds and removes as counted in the patch's
/// hunks (`None` when the sections do not line up with git's records).
pub(super) fn write_patch(
    git: &Git,
    since: &Snapshot,
    tree: &str,
    patch_file: &Path,
) -> Result<Option<Vec<ChangedFile>>, WorkspaceError> {
    // A new file, never one the agent left under this name in its step folder (a link to a
    // git hook would receive the patch's lines).
    let file = crate::artifacts::safe_files::create_new(patch_file, 0o666)
        .map_err(|source| WorkspaceError::io("create", patch_file, source))?;
    // Two equal trees differ in nothing: the patch is empty, and no git is asked.
    if since.tree == tree {
        return Ok(Some(Vec::new()));
    }
    let mut sink = std::io::BufWriter::new(file);
    let args = [
        // The headers are quoted the way `RawRecord::header` expects, whatever the
        // operator's configuration says.
        "-c",
        "core.quotePath=true",
        "diff-tree",
        "-r",
        "-z",
        "--raw",
        "-p",
        "--binary",
        "-M",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        since.tree.as_str(),
        tree,
    ];
    let (_no_index, git) = blobs_only(git)?;
    let counted = git.stream(args, |output| {
        read_raw_and_patch(output, &mut sink).map_err(|broken| match broken {
            Broken::Read(source) => {
                WorkspaceError::io("read git diff-tree output for", patch_file, source)
            }
            Broken::Write(source) => WorkspaceError::io("write", patch_file, source),
            Broken::Record(token) => parse_error(&token),
        })
    })?;
    sink.flush()
        .map_err(|source| WorkspaceError::io("write", patch_file, source))?;
    Ok(counted)
}

/// Why reading `diff-index --raw -p` output stopped.
#[derive(Debug)]
enum Broken {
    Read(std::io::Error),
    Write(std::io::Error),
    Record(String),
}

/// One `diff --git` section of a patch, counted.
#[derive(Debug, Default)]
struct Section {
    header: Vec<u8>,
    added: u64,
    removed: u64,
    binary: bool,
}

/// Reads `git diff-index -z --raw -p` output: the raw records, an empty record, then the patch,
/// which is copied to `patch` while the lines of each section's hunks are counted.
fn read_raw_and_patch(
    output: &mut dyn BufRead,
    patch: &mut dyn Write,
) -> Result<Option<Vec<ChangedFile>>, Broken> {
    // The raw records are few and short: read them whole, up to the empty record.
    let mut raw = Vec::new();
    loop {
        let mut token = Vec::new();
        output.read_until(0, &mut token).map_err(Broken::Read)?;
        if token.last() == Some(&0) {
            token.pop();
        }
        if token.is_empty() {
            break;
        }
        raw.push(token);
    }
    let mut tokens = raw.into_iter();
    let mut records = Vec::new();
    while let Some(token) = tokens.next() {
        records.push(RawRecord::parse(&token, || tokens.next()).map_err(Broken::Record)?);
    }
    let sections = copy_counting(output, patch)?;
    Ok(count_records(&records, sections))
}

/// Copies a patch from `output` to `patch`, counting the lines each section adds and removes.
fn copy_counting(output: &mut dyn BufRead, patch: &mut dyn Write) -> Result<Vec<Section>, Broken> {
    let mut sections: Vec<Section> = Vec::new();
    let mut in_hunk = false;
    let mut line = Vec::new();
    loop {
        line.clear();
        if output.read_until(b'\n', &mut line).map_err(Broken::Read)? == 0 {
            return Ok(sections);
        }
        patch.write_all(&line).map_err(Broken::Write)?;
        if line.starts_with(b"diff --git ") {
            sections.push(Section {
                header: line.strip_suffix(b"\n").unwrap_or(&line).to_vec(),
                ..Section::default()
            });
            in_hunk = false;
            continue;
        }
        let Some(section) = sections.last_mut() else {
            continue;
        };
        // Hunk lines start with ` `, `+`, `-` or `\`; before the first hunk, `---` and
        // `+++` are the file headers.
        match line.first() {
            Some(b'@') if line.starts_with(b"@@ ") => in_hunk = true,
            Some(b'+') if in_hunk => section.added += 1,
            Some(b'-') if in_hunk => section.removed += 1,
            _ if !in_hunk && line == b"GIT binary patch\n" => section.binary = true,
            _ => {}
        }
    }
}

/// Gives each raw record the counts of its sections, in order; `None` when they do not line
/// up (a header that is not the record's, or a different number of sections).
fn count_records(records: &[RawRecord], sections: Vec<Section>) -> Option<Vec<ChangedFile>> {
    let mut sections = sections.into_iter();
    let mut files = Vec::with_capacity(records.len());
    for record in records {
        let header = record.header();
        let mut file = record.change();
        for _ in 0..record.sections() {
            let section = sections.next()?;
            if section.header != header {
                return None;
            }
            file.binary |= section.binary;
            file.lines_added += section.added;
            file.lines_removed += section.removed;
        }
        if file.binary {
            // As `--numstat` reports a binary change: no line counts.
            file.lines_added = 0;
            file.lines_removed = 0;
        }
        file.kind = classify(&file, file.kind);
        files.push(file);
    }
    sections.next().is_none().then_some(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(status: &str, path: &[u8]) -> RawRecord {
        RawRecord {
            old_mode: "100644".to_owned(),
            new_mode: "100644".to_owned(),
            status: status.to_owned(),
            old_path: None,
            path: path.to_vec(),
        }
    }

    fn section(header: &[u8], added: u64) -> Section {
        Section {
            header: header.to_vec(),
            added,
            ..Section::default()
        }
    }

    #[test]
    fn sections_that_do_not_line_up_leave_the_counting_to_git() {
        let records = [record("M", b"a.txt"), record("T", b"b.txt")];
        let a = b"diff --git a/a.txt b/a.txt".as_slice();
        let b = b"diff --git a/b.txt b/b.txt".as_slice();
        let counted =
            count_records(&records, vec![section(a, 1), section(b, 2), section(b, 3)]).unwrap();
        assert_eq!(
            counted
                .iter()
                .map(|file| file.lines_added)
                .collect::<Vec<_>>(),
            [1, 5],
            "a type change's two sections are summed"
        );
        for sections in [
            vec![section(a, 1), section(b, 2)],
            vec![section(a, 1), section(b, 2), section(b, 3), section(b, 4)],
            vec![section(b, 1), section(a, 2), section(a, 3)],
        ] {
            assert_eq!(count_records(&records, sections), None);
        }
    }
}
