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

pub use crate::text::{one_line, terminal_safe};
