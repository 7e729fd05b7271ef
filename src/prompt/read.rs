//! Reading a repository's prompt file: bounded in size, and UTF-8 text or a clear reason why not.

use std::io::Read as _;
use std::path::Path;

use super::PromptError;

/// The largest prompt file read (a prompt is instructions, not data).
pub const MAX_PROMPT_FILE_BYTES: u64 = 1024 * 1024;

/// The file's text, or why it is not a prompt's text.
pub(crate) fn read_prompt_file(path: &Path, shown: &str) -> Result<String, PromptError> {
    let read_error = |source| PromptError::Read {
        path: path.to_path_buf(),
        source,
    };
    // A link is followed (a shared prompt library may be linked in), but only a regular file
    // is read, opened without blocking: a FIFO left in `.tnh/prompts/` would otherwise hang
    // every command that loads the catalog.
    let file = crate::artifacts::safe_files::open_regular_following(path).map_err(read_error)?;
    let mut bytes = Vec::new();
    file.take(MAX_PROMPT_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    let not_text = |message: String, hint: &str| PromptError::NotText {
        file: shown.to_owned(),
        message,
        hint: hint.to_owned(),
    };
    if bytes.len() as u64 > MAX_PROMPT_FILE_BYTES {
        return Err(not_text(
            format!(
                "the file is larger than {MAX_PROMPT_FILE_BYTES} bytes, the limit for a prompt"
            ),
            "keep prompts short; pass large material as inputs or files the agent reads",
        ));
    }
    if bytes.starts_with(&[0xFF, 0xFE]) || bytes.starts_with(&[0xFE, 0xFF]) {
        return Err(not_text(
            "the file is UTF-16 text (it starts with a UTF-16 byte order mark); prompts are UTF-8"
                .to_owned(),
            "save the file as UTF-8 (in most editors: \"Save with encoding\" → UTF-8)",
        ));
    }
    let bytes = bytes.strip_prefix(&[0xEF, 0xBB, 0xBF]).unwrap_or(&bytes);
    if bytes.contains(&0) {
        return Err(not_text(
            "the file is binary (it contains a NUL byte), not prompt text".to_owned(),
            "prompts are Markdown text files; check the file is the one you meant",
        ));
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => Ok(text.to_owned()),
        Err(error) => {
            let before = &bytes[..error.valid_up_to()];
            let line = before.iter().filter(|byte| **byte == b'\n').count() + 1;
            let column = before.len()
                - before
                    .iter()
                    .rposition(|byte| *byte == b'\n')
                    .map_or(0, |at| at + 1)
                + 1;
            Err(not_text(
                format!(
                    "the file is not valid UTF-8 (the first invalid byte is at line {line}, column {column})"
                ),
                "save the file as UTF-8 (it is probably Latin-1 or Windows-1252)",
            ))
        }
    }
}
