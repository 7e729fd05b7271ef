//! Recognising an agent that waits for an answer nobody will give.
//!
//! A headless run has no one at the keyboard, so a question is a hang in disguise. The shape
//! of a question is an *unterminated* output line (no newline: the cursor waits after it)
//! that matches a known pattern and then stays unchanged for a short settle period; the
//! supervisor owns the timing, this module only recognises the text. Complete lines are not
//! checked: a program that prints `Continue? [y/N]` followed by a newline and then reads the
//! closed stdin gets end-of-file and goes on by itself.

/// How much of the end of a partial line is examined; prompts are short.
const EXAMINED_SUFFIX: usize = 240;

/// Patterns found anywhere in the examined text (lowercased).
const CONTAINED: [&str; 12] = [
    "[y/n]",
    "(y/n)",
    "[yes/no]",
    "(yes/no",
    "y/n?",
    "[y]/n",
    "y/[n]",
    "press enter",
    "press return",
    "press any key",
    "hit enter",
    "verification code",
];

/// Patterns the examined text ends with, after trailing blanks (lowercased).
const ENDING: [&str; 8] = [
    "password:",
    "passphrase:",
    "login:",
    "username:",
    "user name:",
    "one-time code:",
    "otp:",
    "token:",
];

/// The prompt text when `partial_line` looks like a question waiting for an answer.
pub fn detect_prompt(partial_line: &[u8]) -> Option<String> {
    let start = partial_line.len().saturating_sub(EXAMINED_SUFFIX);
    let text = String::from_utf8_lossy(&partial_line[start..]);
    // Progress bars redraw with `\r`; only the last redraw is on screen.
    let visible = text.rsplit('\r').next().unwrap_or_default().trim();
    if visible.is_empty() {
        return None;
    }
    let lowered = visible.to_lowercase();
    let is_prompt = CONTAINED.iter().any(|pattern| lowered.contains(pattern))
        || ENDING.iter().any(|pattern| lowered.ends_with(pattern))
        || (["password", "passphrase", "username for"]
            .iter()
            .any(|word| lowered.contains(word))
            && lowered.ends_with(':'));
    is_prompt.then(|| visible.to_owned())
}

#[cfg(test)]
mod tests {
    use super::detect_prompt;

    #[test]
    fn recognises_common_questions() {
        for prompt in [
            "Continue? [y/N] ",
            "Overwrite file? (y/n)",
            "Are you sure you want to continue connecting (yes/no/[fingerprint])? ",
            "[sudo] password for dev: ",
            "Password:",
            "Enter passphrase for key '/root/.ssh/id_ed25519': ",
            "Press Enter to continue...",
            "login: ",
            "Username for 'https://github.com': ",
        ] {
            assert!(detect_prompt(prompt.as_bytes()).is_some(), "{prompt:?}");
        }
    }

    #[test]
    fn ignores_ordinary_partial_output() {
        for text in [
            "Compiling tnh-conductor v0.1.0",
            "downloading 45%",
            "{\"type\":\"system\"",
            "",
            "   ",
        ] {
            assert_eq!(detect_prompt(text.as_bytes()), None, "{text:?}");
        }
    }

    #[test]
    fn reports_the_visible_prompt_trimmed() {
        assert_eq!(
            detect_prompt(b"progress 10%\rContinue? [y/N] ").as_deref(),
            Some("Continue? [y/N]")
        );
    }
}
