//! The source text: decoding, positions, and the scanner's errors in our terms.

use saphyr_parser::ScanError;

use super::*;

pub(super) fn decode_text(bytes: &[u8]) -> Result<&str, ParseError> {
    // UTF-16 text is full of NUL bytes: say what it is rather than calling it binary.
    if bytes.starts_with(&[0xFF, 0xFE]) || bytes.starts_with(&[0xFE, 0xFF]) {
        return Err(ParseError::new(
            Pos::new(1, 1),
            "not-text",
            "the file is UTF-16 text (it starts with a UTF-16 byte order mark); workflows are UTF-8",
            "save the workflow as UTF-8 (in most editors: \"Save with encoding\" → UTF-8)",
        ));
    }
    if let Some(offset) = bytes.iter().position(|byte| *byte == 0) {
        return Err(ParseError::new(
            position_of_offset(bytes, offset),
            "not-text",
            "the file is binary (it contains a NUL byte), not YAML text",
            "pass the workflow's .yaml file",
        ));
    }
    std::str::from_utf8(bytes).map_err(|error| {
        ParseError::new(
            position_of_offset(bytes, error.valid_up_to()),
            "not-text",
            "the file is not valid UTF-8 text",
            "save the workflow as UTF-8",
        )
    })
}

pub(super) fn position_of_offset(bytes: &[u8], offset: usize) -> Pos {
    let before = &bytes[..offset.min(bytes.len())];
    let line = before.iter().filter(|byte| **byte == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|byte| *byte == b'\n')
        .map_or(0, |index| index + 1);
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count()
        + 1;
    Pos::new(saturate(line as u64), saturate(column as u64))
}

pub(super) fn saturate(value: u64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

pub(super) fn scan_error(error: &ScanError, text: &str) -> ParseError {
    let marker = error.marker();
    let pos = within_text(
        text,
        Pos::new(
            saturate(marker.line() as u64).max(1),
            saturate(marker.col() as u64 + 1),
        ),
    );
    let message = error.info();
    if message.contains("recursion limit") || message.contains("nesting") {
        return ParseError::limit(pos, "nesting depth");
    }
    // The scanner reports a tab where the token before it started, or the token after it:
    // point at the tab itself.
    let at_tab = if message.contains("tab") {
        tab_before(text, pos).or_else(|| tab_after(text, pos))
    } else {
        let before = Pos::new(pos.line, pos.column.saturating_sub(1).max(1));
        tab_after(text, before).filter(|tab| *tab == before)
    };
    let pos = at_tab.unwrap_or(pos);
    let hint = if at_tab.is_some() || line_has_tab_indent(text, pos.line) {
        "YAML indentation and separation must use spaces, not tabs: replace the tab with spaces"
    } else {
        "fix the YAML syntax at this position"
    };
    ParseError::new(pos, "yaml-syntax", message, hint)
}

/// The parser reports an unexpected end of input on the line after the last one; the
/// position is moved to the end of the last line, so it names a place in the file.
pub(super) fn within_text(text: &str, pos: Pos) -> Pos {
    let Some(last) = text.lines().last() else {
        return Pos::new(1, 1);
    };
    let lines = saturate(text.lines().count() as u64);
    if pos.line <= lines {
        return pos;
    }
    Pos::new(lines, saturate(last.chars().count() as u64 + 1))
}

/// The last tab of `pos`'s line at or before it.
fn tab_before(text: &str, pos: Pos) -> Option<Pos> {
    let content = text.lines().nth(pos.line.checked_sub(1)? as usize)?;
    let column = content
        .chars()
        .take(pos.column as usize)
        .enumerate()
        .filter(|(_, c)| *c == '\t')
        .last()?
        .0;
    Some(Pos::new(pos.line, saturate(column as u64 + 1)))
}

/// The first tab at or after `pos`, within that line and the next two.
fn tab_after(text: &str, pos: Pos) -> Option<Pos> {
    let first = pos.line.saturating_sub(1) as usize;
    text.lines()
        .enumerate()
        .skip(first)
        .take(3)
        .find_map(|(index, content)| {
            let skip = if index == first {
                pos.column.saturating_sub(1) as usize
            } else {
                0
            };
            let column = content.chars().skip(skip).position(|c| c == '\t')? + skip;
            Some(Pos::new(
                saturate(index as u64 + 1),
                saturate(column as u64 + 1),
            ))
        })
}

fn line_has_tab_indent(text: &str, line: u32) -> bool {
    let index = line.saturating_sub(1) as usize;
    let nearby = index.saturating_sub(1)..=index;
    text.lines()
        .enumerate()
        .filter(|(number, _)| nearby.contains(number))
        .any(|(_, content)| content.trim_start_matches(' ').starts_with('\t'))
}
