//! Where the operator CLI writes: stdout for results, stderr for diagnostics. A closed stdout
//! (the reader went away, as with `| head`) is not an error.

use std::io::{self, IsTerminal, Write};

use super::ColorChoice;
use crate::error::Error;

/// The operator CLI's terminal.
#[derive(Debug)]
pub struct Output {
    color: bool,
    quiet: bool,
    stdout_closed: bool,
}

impl Output {
    /// An output honouring the colour choice and quiet flag.
    pub fn new(choice: ColorChoice, quiet: bool) -> Self {
        let color = match choice {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none()
            }
        };
        Self {
            color,
            quiet,
            stdout_closed: false,
        }
    }

    /// Whether diagnostics are coloured.
    pub fn color(&self) -> bool {
        self.color
    }

    /// Writes text to stdout, control characters shown escaped (text an agent wrote must not
    /// drive the operator's terminal); a broken pipe silences later writes.
    pub fn print(&mut self, text: &str) {
        self.print_styled(&terminal_safe(text));
    }

    /// Writes text to stdout as is: for text this program styled itself (colours), whose
    /// parts were made safe with [`terminal_safe`].
    pub fn print_styled(&mut self, text: &str) {
        if self.stdout_closed {
            return;
        }
        let mut stdout = io::stdout().lock();
        if let Err(error) = stdout
            .write_all(text.as_bytes())
            .and_then(|()| stdout.flush())
            && error.kind() == io::ErrorKind::BrokenPipe
        {
            self.stdout_closed = true;
        }
    }

    /// Writes a line to stderr unless quiet (control characters escaped).
    pub fn note(&mut self, text: &str) {
        if !self.quiet {
            let _ = writeln!(io::stderr(), "{}", terminal_safe(text));
        }
    }

    /// Writes text to stderr, control characters escaped (diagnostics are shown even when
    /// quiet).
    pub fn diagnostic(&mut self, text: &str) {
        self.diagnostic_styled(&terminal_safe(text));
    }

    /// Writes text this program styled itself to stderr as is.
    pub fn diagnostic_styled(&mut self, text: &str) {
        let _ = io::stderr().write_all(text.as_bytes());
    }

    /// Reports a command's error and its hint on stderr.
    pub fn error(&mut self, error: &Error) {
        let (red, cyan, reset) = if self.color {
            ("\x1b[1;31m", "\x1b[36m", "\x1b[0m")
        } else {
            ("", "", "")
        };
        let mut text = format!("{red}error{reset}: {}\n", terminal_safe(&error.to_string()));
        if let Some(hint) = error.hint() {
            text.push_str(&format!("  {cyan}hint{reset}: {}\n", terminal_safe(&hint)));
        }
        self.diagnostic_styled(&text);
    }
}

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
