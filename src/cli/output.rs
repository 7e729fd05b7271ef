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
    let unsafe_char = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut safe = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if !unsafe_char(c) => safe.push(c),
            c if u32::from(c) < 0x80 => safe.push_str(&format!("\\x{:02x}", u32::from(c))),
            c => safe.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
        }
    }
    std::borrow::Cow::Owned(safe)
}

#[cfg(test)]
mod tests {
    use super::terminal_safe;

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
