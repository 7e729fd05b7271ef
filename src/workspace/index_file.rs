//! Reading the entries of a git index file in-process: each path with its mode and the two
//! flags that make git leave a file alone (assume-unchanged, skip-worktree).
//!
//! A capture, a snapshot and a rollback each ask what the index holds (its nested
//! repositories, its regular files, its flagged entries) on a worktree of any size. libgit2
//! reads an index of 20,000 entries in about 11 ms, most of it verifying the file's checksum
//! and copying every entry; `git ls-files` costs a process and a listing. What is asked here
//! needs neither, so the fixed part of each entry and its path are read where they lie
//! (format: git's `Documentation/gitformat-index.txt`, versions 2, 3 and 4).
//!
//! The file may have been written by anyone who can write the repository, an agent too: a
//! file that does not read as an index of SHA-1 entries (truncated, another version, a name
//! whose length disagrees with its entry, padding that is not zero) gives `None`, never a
//! guess, and the callers ask git instead.

use std::path::Path;

use super::error::WorkspaceError;
use super::git::Git;

/// One entry of an index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    /// The path, relative to the worktree, `/`-separated, as git stores it.
    pub(crate) path: Vec<u8>,
    /// The git mode (`0o100644`, `0o100755`, `0o120000`, `0o160000`, …).
    pub(crate) mode: u32,
    /// Flagged assume-unchanged (`git update-index --assume-unchanged`).
    pub(crate) assume_unchanged: bool,
    /// Flagged skip-worktree (`git update-index --skip-worktree`, sparse checkout).
    pub(crate) skip_worktree: bool,
}

impl IndexEntry {
    /// A nested repository (a gitlink).
    pub(crate) fn is_gitlink(&self) -> bool {
        self.mode == 0o160_000
    }

    /// A regular file, executable or not.
    pub(crate) fn is_regular_file(&self) -> bool {
        self.mode & 0o170_000 == 0o100_000
    }

    /// Flagged so that git leaves the file alone.
    pub(crate) fn is_flagged(&self) -> bool {
        self.assume_unchanged || self.skip_worktree
    }
}

/// The length of a SHA-1 object id.
const OID_BYTES: usize = 20;
/// The fixed part of an entry before its flags: ten 32-bit fields and the object id.
const FIXED_BYTES: usize = 40 + OID_BYTES;
/// The length field of the flags saturates here; longer names are found by their NUL.
const NAME_MASK: u16 = 0x0fff;
const FLAG_ASSUME_VALID: u16 = 0x8000;
const FLAG_EXTENDED: u16 = 0x4000;
const EXTENDED_SKIP_WORKTREE: u16 = 0x4000;

/// The entries of the index file at `path`, in the index's order; `None` when it cannot be
/// read or does not read as an index this reader knows.
pub(crate) fn read_entries(path: &Path) -> Option<Vec<IndexEntry>> {
    parse(&std::fs::read(path).ok()?)
}

/// The entries of the index `git` is bound to, read in-process, or listed by git when this
/// reader does not know the file (a SHA-256 repository, a later index version).
pub(crate) fn entries(git: &Git) -> Result<Vec<IndexEntry>, WorkspaceError> {
    if let Some(entries) = git.index_path().as_deref().and_then(read_entries) {
        return Ok(entries);
    }
    let tags = git.bytes(["ls-files", "-v", "-z"])?;
    let stages = git.bytes(["ls-files", "--stage", "-z"])?;
    let records = |bytes: &[u8]| -> Vec<Vec<u8>> {
        bytes
            .split(|byte| *byte == 0)
            .filter(|record| !record.is_empty())
            .map(<[u8]>::to_vec)
            .collect()
    };
    let (tags, stages) = (records(&tags), records(&stages));
    let unreadable = |detail: &[u8]| WorkspaceError::Parse {
        command: "ls-files",
        detail: String::from_utf8_lossy(detail).into_owned(),
    };
    if tags.len() != stages.len() {
        return Err(unreadable(b"`-v` and `--stage` list different entries"));
    }
    tags.iter()
        .zip(&stages)
        .map(|(tagged, staged)| {
            // `<tag> <path>` and `<mode> <object> <stage>\t<path>`.
            let (Some(&tag), Some(path)) = (tagged.first(), tagged.get(2..)) else {
                return Err(unreadable(tagged));
            };
            let mode = std::str::from_utf8(staged.get(..6).unwrap_or_default())
                .ok()
                .and_then(|mode| u32::from_str_radix(mode, 8).ok())
                .ok_or_else(|| unreadable(staged))?;
            Ok(IndexEntry {
                path: path.to_vec(),
                mode,
                assume_unchanged: tag.is_ascii_lowercase(),
                skip_worktree: tag.eq_ignore_ascii_case(&b'S'),
            })
        })
        .collect()
}

/// The entries of an index held in `bytes` (see [`read_entries`]).
pub(crate) fn parse(bytes: &[u8]) -> Option<Vec<IndexEntry>> {
    let mut reader = Reader { bytes, at: 0 };
    if reader.take(4)? != b"DIRC" {
        return None;
    }
    let version = reader.u32()?;
    if !(2..=4).contains(&version) {
        return None;
    }
    let count = usize::try_from(reader.u32()?).ok()?;
    // Each entry takes at least as many bytes as its fixed part: a count the file cannot
    // hold is refused before anything is reserved for it.
    if count > bytes.len() / FIXED_BYTES {
        return None;
    }
    let mut entries = Vec::with_capacity(count);
    let mut previous: Vec<u8> = Vec::new();
    for _ in 0..count {
        let start = reader.at;
        reader.take(24)?; // ctime, mtime, dev, ino
        let mode = reader.u32()?;
        reader.take(12 + OID_BYTES)?; // uid, gid, size, object id
        let flags = reader.u16()?;
        let extended = if flags & FLAG_EXTENDED != 0 {
            if version < 3 {
                return None;
            }
            reader.u16()?
        } else {
            0
        };
        let path = if version == 4 {
            let strip = usize::try_from(reader.varint()?).ok()?;
            let kept = previous.len().checked_sub(strip)?;
            let mut path = previous[..kept].to_vec();
            path.extend_from_slice(reader.until_nul()?);
            path
        } else {
            let path = reader.until_nul()?.to_vec();
            // Padded with NULs to a multiple of eight bytes from the entry's start (the NUL
            // that ends the name is the first of them).
            let length = reader.at - start;
            let padded = length.div_ceil(8) * 8;
            if reader.take(padded - length)?.iter().any(|byte| *byte != 0) {
                return None;
            }
            path
        };
        let name_length = flags & NAME_MASK;
        let consistent = if name_length < NAME_MASK {
            path.len() == usize::from(name_length)
        } else {
            path.len() >= usize::from(NAME_MASK)
        };
        if !consistent || path.is_empty() {
            return None;
        }
        entries.push(IndexEntry {
            mode,
            assume_unchanged: flags & FLAG_ASSUME_VALID != 0,
            skip_worktree: extended & EXTENDED_SKIP_WORKTREE != 0,
            path: path.clone(),
        });
        previous = path;
    }
    // The extensions and the checksum follow; at least the checksum must.
    (bytes.len() - reader.at >= OID_BYTES).then_some(entries)
}

/// A cursor over the file's bytes; every read is bounds-checked.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, length: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(length)?;
        let taken = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(taken)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }

    /// The bytes up to the next NUL, which is consumed.
    fn until_nul(&mut self) -> Option<&'a [u8]> {
        let rest = self.bytes.get(self.at..)?;
        let length = memchr::memchr(0, rest)?;
        self.at += length + 1;
        Some(&rest[..length])
    }

    /// git's offset varint (`varint.c`): seven bits a byte, high bit set on all but the
    /// last, each continuation adding one before the shift.
    fn varint(&mut self) -> Option<u64> {
        let mut byte = self.take(1)?[0];
        let mut value = u64::from(byte & 0x7f);
        while byte & 0x80 != 0 {
            value = value.checked_add(1)?;
            if value >> 57 != 0 {
                return None;
            }
            byte = self.take(1)?[0];
            value = (value << 7) | u64::from(byte & 0x7f);
        }
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::test_support::{git, put};

    /// What git lists of the index in `dir` (`git ls-files -v` and `--stage`): the answer
    /// of [`entries`] when it cannot read the file itself.
    fn listed_by_git(dir: &Path) -> Vec<IndexEntry> {
        entries(&Git::new(dir)).unwrap()
    }

    /// An index of every kind of entry, in versions 2, 3 and 4, reads as git lists it: a
    /// symlink, an executable, a nested repository, a name of over 4,095 bytes, names with
    /// spaces, newlines and non-UTF-8 bytes, both flags.
    #[test]
    fn every_index_version_reads_as_git_lists_it() {
        use std::os::unix::ffi::OsStrExt;
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path();
        git(dir, &["init", "-q", "-b", "main"]);
        put(dir, "a.txt", b"a\n");
        put(dir, "dir with space/new\nline.txt", b"b\n");
        put(dir, "run.sh", b"#!/bin/sh\n");
        let odd = std::ffi::OsStr::from_bytes(b"caf\xe9.txt");
        std::fs::write(dir.join(odd), "latin-1\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.join("run.sh"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        std::os::unix::fs::symlink("a.txt", dir.join("link")).unwrap();
        git(dir, &["add", "-A"]);
        git(dir, &["commit", "-q", "-m", "base"]);
        // A name longer than the flags can count, recorded without a file (no system call
        // takes a path that long).
        let blob = git(dir, &["hash-object", "-w", "a.txt"]);
        let blob = String::from_utf8(blob).unwrap();
        let long = format!("{}/file.txt", vec!["d".repeat(250); 17].join("/"));
        let info = format!("100644,{},{long}", blob.trim());
        git(dir, &["update-index", "--add", "--cacheinfo", &info]);
        git(dir, &["init", "-q", "nested"]);
        git(
            dir,
            &["-C", "nested", "commit", "-q", "--allow-empty", "-m", "n"],
        );
        git(dir, &["add", "nested"]);
        let index = dir.join(".git/index");

        let version2 = read_entries(&index).unwrap();
        assert_eq!(version2, listed_by_git(dir));
        assert!(version2.iter().any(|entry| entry.path.len() > 4095));
        assert!(version2.iter().any(IndexEntry::is_gitlink));

        git(dir, &["update-index", "--skip-worktree", "a.txt"]);
        git(
            dir,
            &["update-index", "--assume-unchanged", "run.sh", "link"],
        );
        git(dir, &["update-index", "--skip-worktree", "link"]);
        let version3 = read_entries(&index).unwrap();
        assert_eq!(version3, listed_by_git(dir));
        assert_eq!(
            version3.iter().filter(|entry| entry.is_flagged()).count(),
            3
        );

        git(dir, &["update-index", "--index-version", "4"]);
        let version4 = read_entries(&index).unwrap();
        assert_eq!(version4, version3);
    }

    /// An index of SHA-256 entries is not one this reader knows: it gives `None`, and
    /// [`entries`] answers from git's listing, flags and modes included.
    #[test]
    fn an_index_the_reader_does_not_know_is_listed_by_git() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path();
        git(dir, &["init", "-q", "-b", "main", "--object-format=sha256"]);
        put(dir, "a.txt", b"a\n");
        put(dir, "b/run.sh", b"#!/bin/sh\n");
        git(dir, &["add", "-A"]);
        git(dir, &["update-index", "--chmod=+x", "b/run.sh"]);
        git(dir, &["update-index", "--skip-worktree", "a.txt"]);
        let index = dir.join(".git/index");
        let bound = Git::new(dir).with_index(&index);

        assert_eq!(read_entries(&index), None);
        let listed: Vec<(Vec<u8>, u32, bool)> = entries(&bound)
            .unwrap()
            .into_iter()
            .map(|entry| (entry.path, entry.mode, entry.skip_worktree))
            .collect();
        assert_eq!(
            listed,
            [
                (b"a.txt".to_vec(), 0o100_644, true),
                (b"b/run.sh".to_vec(), 0o100_755, false),
            ]
        );
    }

    /// Bytes that are not an index of this format give `None`: a wrong signature or
    /// version, every truncation of a real index, a name length that disagrees, padding that
    /// is not zero, an entry count the file cannot hold.
    #[test]
    fn what_does_not_read_as_an_index_is_refused() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path();
        git(dir, &["init", "-q", "-b", "main"]);
        put(dir, "one.txt", b"1\n");
        put(dir, "two/three.txt", b"3\n");
        git(dir, &["add", "-A"]);
        let bytes = std::fs::read(dir.join(".git/index")).unwrap();
        assert_eq!(parse(&bytes).unwrap().len(), 2);

        for cut in 0..bytes.len() - OID_BYTES {
            assert_eq!(parse(&bytes[..cut]), None, "cut at {cut}");
        }
        let mut changed = bytes.clone();
        changed[0] = b'X';
        assert_eq!(parse(&changed), None, "signature");
        let mut changed = bytes.clone();
        changed[7] = 5;
        assert_eq!(parse(&changed), None, "version");
        let mut changed = bytes.clone();
        changed[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(parse(&changed), None, "count");
        // The first entry's name length (low bits of its flags) and its first pad byte.
        let mut changed = bytes.clone();
        changed[12 + FIXED_BYTES + 1] += 1;
        assert_eq!(parse(&changed), None, "name length");
        let mut changed = bytes.clone();
        changed[12 + FIXED_BYTES + 2 + "one.txt".len() + 1] = b'x';
        assert_eq!(parse(&changed), None, "padding");
        // Whatever a byte is changed to, the reader answers without panicking.
        for at in 0..bytes.len() {
            for value in [0, 0x7f, 0x80, 0xff] {
                let mut changed = bytes.clone();
                changed[at] = value;
                let _ = parse(&changed);
            }
        }
    }
}
