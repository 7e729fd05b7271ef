//! Text someone else chose (an agent's output, a file name it wrote, a STOP reason read from
//! its file), made safe to show: no escape sequence reaches a terminal, no newline forges a
//! line of a line-oriented rendering, no credential of a configured URL reaches a message.

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

/// `text` with the credentials of `url` (its user information and the values of its query)
/// replaced by `***`, so that no message recorded in the run directory holds them: the URL
/// itself is written redacted, and a credential of 4 characters or more quoted elsewhere in
/// the text is masked too.
pub fn redact(text: &str, url: &str) -> String {
    let (redacted, mut secrets) = redacted_url(url);
    let mut text = text.replace(url, &redacted);
    secrets.retain(|secret| secret.chars().count() >= 4);
    // Longest first, so that a whole user information goes before its parts.
    secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    for secret in secrets {
        text = text.replace(secret, "***");
    }
    text
}

/// `url` with its credentials replaced by `***`, and those credentials.
fn redacted_url(url: &str) -> (String, Vec<&str>) {
    let (scheme, rest) = url
        .split_once("://")
        .map_or(("", url), |(scheme, rest)| (scheme, rest));
    let (rest, fragment) = rest
        .split_once('#')
        .map_or((rest, None), |(rest, fragment)| (rest, Some(fragment)));
    let (rest, query) = rest
        .split_once('?')
        .map_or((rest, None), |(rest, query)| (rest, Some(query)));
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let mut secrets: Vec<&str> = Vec::new();
    let host = match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            secrets.push(userinfo);
            secrets.extend(userinfo.split(':'));
            format!("***@{host}")
        }
        None => authority.to_owned(),
    };
    let mut redacted = if scheme.is_empty() {
        format!("{host}{path}")
    } else {
        format!("{scheme}://{host}{path}")
    };
    if let Some(query) = query {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, value)) => {
                    secrets.push(value);
                    format!("{name}=***")
                }
                None => pair.to_owned(),
            })
            .collect();
        redacted.push('?');
        redacted.push_str(&pairs.join("&"));
    }
    if let Some(fragment) = fragment {
        redacted.push('#');
        redacted.push_str(fragment);
    }
    (redacted, secrets)
}

#[cfg(test)]
mod tests {
    use super::{one_line, redact, terminal_safe};

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

    #[test]
    fn credentials_of_a_url_are_redacted_from_messages() {
        let url = "https://alice:pw-1@api.example.com/v1/chat?api_key=key-2&mode=x#frag";
        let message = redact(&format!("POST {url}: refused (pw-1, key-2)"), url);
        assert_eq!(
            message,
            "POST https://***@api.example.com/v1/chat?api_key=***&mode=***#frag: refused (***, ***)"
        );
        assert_eq!(redact("plain", "http://127.0.0.1:1/v1"), "plain");
    }
}
