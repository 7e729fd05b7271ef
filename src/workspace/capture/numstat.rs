//! Reading `git diff-index -z --raw --numstat`: each changed path's modes, kind and line
//! counts, and the quoting of paths that are not UTF-8.

use super::*;

/// Parses `git diff-index -z --raw --numstat` output: raw records (`:old new sha sha status`
/// then one or two paths) followed by numstat records (`added\tremoved\tpath`, or an empty
/// path followed by the old and new path for a rename).
pub(super) fn parse_raw_numstat(output: &[u8]) -> Result<Vec<ChangedFile>, WorkspaceError> {
    let mut tokens = output
        .split(|byte| *byte == 0)
        .filter(|token| !token.is_empty())
        .peekable();
    let mut files = Vec::new();
    // Keyed by the path's bytes: two names that differ only in bytes that are not UTF-8 are
    // one lossy `path`, not one count.
    let mut counts: HashMap<Vec<u8>, (Option<u64>, Option<u64>)> = HashMap::new();
    while let Some(token) = tokens.next() {
        if token.starts_with(b":") {
            let record = RawRecord::parse(token, || tokens.next().map(<[u8]>::to_vec))
                .map_err(|token| parse_error(&token))?;
            files.push((record.path.clone(), record.change()));
        } else {
            let unreadable = || parse_error(&String::from_utf8_lossy(token));
            let mut parts = token.splitn(3, |byte| *byte == b'\t');
            let number = |part: Option<&[u8]>| {
                part.map(|digits| std::str::from_utf8(digits).ok()?.parse::<u64>().ok())
            };
            let added = number(parts.next()).ok_or_else(unreadable)?;
            let removed = number(parts.next()).ok_or_else(unreadable)?;
            let mut path = parts.next().unwrap_or_default().to_vec();
            if path.is_empty() {
                // A rename: the old and the new path follow as separate records.
                let _old = tokens.next();
                path = tokens.next().ok_or_else(unreadable)?.to_vec();
            }
            counts.insert(path, (added, removed));
        }
    }
    Ok(files
        .into_iter()
        .map(|(path, mut file)| {
            if let Some((added, removed)) = counts.get(&path) {
                file.binary = added.is_none() && removed.is_none();
                file.lines_added = added.unwrap_or(0);
                file.lines_removed = removed.unwrap_or(0);
            }
            file.kind = classify(&file, file.kind);
            file
        })
        .collect())
}

/// One raw record of `git diff-index -z --raw`, its paths as git wrote them.
pub(super) struct RawRecord {
    pub(super) old_mode: String,
    pub(super) new_mode: String,
    pub(super) status: String,
    pub(super) old_path: Option<Vec<u8>>,
    pub(super) path: Vec<u8>,
}

impl RawRecord {
    /// Parses the record `token` (`:old new sha sha status`), taking its one or two paths from
    /// `next_path`. The error is the text of the record that could not be read.
    pub(super) fn parse(
        token: &[u8],
        mut next_path: impl FnMut() -> Option<Vec<u8>>,
    ) -> Result<Self, String> {
        let text = String::from_utf8_lossy(token);
        let fields: Vec<&str> = text.trim_start_matches(':').split(' ').collect();
        let [old_mode, new_mode, _, _, status] = fields[..] else {
            return Err(text.into_owned());
        };
        let renamed = status.starts_with('R') || status.starts_with('C');
        let first = next_path().ok_or_else(|| text.to_string())?;
        let (old_path, path) = if renamed {
            (Some(first), next_path().ok_or_else(|| text.to_string())?)
        } else {
            (None, first)
        };
        Ok(Self {
            old_mode: old_mode.to_owned(),
            new_mode: new_mode.to_owned(),
            status: status.to_owned(),
            old_path,
            path,
        })
    }

    /// The change, not yet counted or classified.
    pub(super) fn change(&self) -> ChangedFile {
        let lossy = |path: &[u8]| String::from_utf8_lossy(path).into_owned();
        let mode = |value: &str| (value != "000000").then(|| value.to_owned());
        let kind = match self.status.chars().next() {
            Some('A') => ChangeKind::Add,
            Some('D') => ChangeKind::Delete,
            Some('R' | 'C') => ChangeKind::Rename,
            _ => ChangeKind::Modify,
        };
        ChangedFile {
            path: lossy(&self.path),
            old_path: self.old_path.as_deref().map(lossy),
            kind,
            old_mode: mode(&self.old_mode),
            new_mode: mode(&self.new_mode),
            binary: false,
            symlink_target: None,
            lines_added: 0,
            lines_removed: 0,
            quoted_path: quoted_unless_utf8(&self.path),
            quoted_old_path: self.old_path.as_deref().and_then(quoted_unless_utf8),
        }
    }

    /// How many `diff --git` sections the patch has for this record: a type change (a file
    /// replaced by a symlink, or the reverse) is shown as a deletion and a creation.
    pub(super) fn sections(&self) -> usize {
        if self.status.starts_with('T') { 2 } else { 1 }
    }

    /// The header line git writes for this record's sections (quoted as `core.quotePath`
    /// quotes, without the newline).
    pub(super) fn header(&self) -> Vec<u8> {
        let old = self.old_path.as_deref().unwrap_or(&self.path);
        let mut header = b"diff --git ".to_vec();
        quote_path(b"a/", old, &mut header);
        header.push(b' ');
        quote_path(b"b/", &self.path, &mut header);
        header
    }
}

/// `path` quoted as git quotes it (see [`quote_path`]) when it is not valid UTF-8.
pub(crate) fn quoted_unless_utf8(path: &[u8]) -> Option<String> {
    std::str::from_utf8(path).is_err().then(|| {
        let mut quoted = Vec::new();
        quote_path(b"", path, &mut quoted);
        String::from_utf8_lossy(&quoted).into_owned()
    })
}

/// Appends `prefix` + `path` to `out` as git's `quote_c_style` writes it with
/// `core.quotePath=true`: unchanged unless a byte needs quoting, otherwise in double quotes
/// with C escapes and octal for control characters and bytes above 0x7f.
fn quote_path(prefix: &[u8], path: &[u8], out: &mut Vec<u8>) {
    let needs_quote = |byte: u8| !(0x20..0x7f).contains(&byte) || byte == b'"' || byte == b'\\';
    if !prefix.iter().chain(path).copied().any(needs_quote) {
        out.extend_from_slice(prefix);
        out.extend_from_slice(path);
        return;
    }
    out.push(b'"');
    for &byte in prefix.iter().chain(path) {
        let letter = match byte {
            0x07 => Some(b'a'),
            0x08 => Some(b'b'),
            b'\t' => Some(b't'),
            b'\n' => Some(b'n'),
            0x0b => Some(b'v'),
            0x0c => Some(b'f'),
            b'\r' => Some(b'r'),
            b'"' => Some(b'"'),
            b'\\' => Some(b'\\'),
            _ => None,
        };
        match letter {
            Some(letter) => out.extend_from_slice(&[b'\\', letter]),
            None if needs_quote(byte) => out.extend_from_slice(format!("\\{byte:03o}").as_bytes()),
            None => out.push(byte),
        }
    }
    out.push(b'"');
}

pub(super) fn parse_error(token: &str) -> WorkspaceError {
    WorkspaceError::Parse {
        command: "diff-index --raw --numstat",
        detail: format!("unexpected record `{token}`"),
    }
}

/// Applies the documented precedence to a change whose git status is `base`.
pub(super) fn classify(file: &ChangedFile, base: ChangeKind) -> ChangeKind {
    let symlink = file.old_mode.as_deref() == Some(MODE_SYMLINK) || file.is_symlink();
    match base {
        ChangeKind::Delete | ChangeKind::Rename => base,
        _ if symlink => ChangeKind::Symlink,
        _ if file.binary => ChangeKind::Binary,
        ChangeKind::Add => ChangeKind::Add,
        _ if file.old_mode != file.new_mode && file.lines_added == 0 && file.lines_removed == 0 => {
            ChangeKind::Mode
        }
        _ => ChangeKind::Modify,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_quoted_as_git_quotes_them() {
        let quoted = |path: &[u8]| {
            let mut out = Vec::new();
            quote_path(b"a/", path, &mut out);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(quoted(b"plain name.txt"), "a/plain name.txt");
        assert_eq!(quoted("é".as_bytes()), "\"a/\\303\\251\"");
        assert_eq!(quoted(b"t\tn\nq\"b\\"), "\"a/t\\tn\\nq\\\"b\\\\\"");
        assert_eq!(quoted(b"\x01\x7f"), "\"a/\\001\\177\"");
    }
}
