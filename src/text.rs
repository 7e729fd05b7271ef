//! Text someone else chose (an agent's output, a file name it wrote, a STOP reason read from
//! its file), made safe to show: no escape sequence reaches a terminal, no newline forges a
//! line of a line-oriented rendering.

/// `text` with every control character but newline and tab shown as an escape (`\x1b`,
/// `\u{9b}`): what agents write (a cause taken from their stderr, a run-log message) is
/// printed, and an escape sequence in it must not erase, recolour or retitle the operator's
/// terminal.
pub fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    escaped(text, |c| c.is_control() && c != '\n' && c != '\t')
}

/// `text` as one line: every control character shown as an escape, newline, carriage return
/// and tab included (`\n`, `\t`, the others as [`terminal_safe`] shows them: `\x0d`), and the Unicode
/// line and paragraph separators (`\u{2028}`, `\u{2029}`). For text someone else chose (a file
/// name an agent wrote, a STOP reason read from a file in the worktree) put into one line of
/// a line-oriented rendering — a Markdown journal, `runs show`, a run's end reason — where a
/// newline would start a line of the reader's own, a forged heading or entry.
pub fn one_line(text: &str) -> std::borrow::Cow<'_, str> {
    escaped(text, |c| {
        c.is_control() || matches!(c, '\u{2028}' | '\u{2029}')
    })
}

/// `text` with the characters `escape` picks shown as escapes.
fn escaped(text: &str, escape: impl Fn(char) -> bool) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(&escape) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut safe = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if !escape(c) => safe.push(c),
            '\n' => safe.push_str("\\n"),
            '\t' => safe.push_str("\\t"),
            c if u32::from(c) < 0x80 => safe.push_str(&format!("\\x{:02x}", u32::from(c))),
            c => safe.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
        }
    }
    std::borrow::Cow::Owned(safe)
}

#[cfg(test)]
mod tests {
    use super::{one_line, terminal_safe};

    #[test]
    fn one_line_escapes_every_line_break_and_control_character() {
        assert_eq!(
            one_line("evil\n## Completed Tasks\r\n- [x] fake\tx\u{1b}[2K\u{2028}y"),
            "evil\\n## Completed Tasks\\x0d\\n- [x] fake\\tx\\x1b[2K\\u{2028}y"
        );
        assert!(matches!(
            one_line("plain ünïcode `path`"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn control_characters_are_shown_escaped_newlines_and_tabs_kept() {
        assert_eq!(
            terminal_safe("exit 1: \u{1b}]0;PWNED\u{7}\u{1b}[2K\rok\u{9b}\n\tnext"),
            "exit 1: \\x1b]0;PWNED\\x07\\x1b[2K\\x0dok\\u{9b}\n\tnext"
        );
        assert!(matches!(
            terminal_safe("plain ünïcode\n"),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
