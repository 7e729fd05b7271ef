//! Writing HTML: every text goes through [`escape`]; pages share one layout and style sheet.

use std::fmt::Write as _;

/// The style sheet: served as `/assets/viewer.css`, inlined in a report.
pub(super) const STYLE: &str = include_str!("viewer.css");

/// `text` safe inside an element or a quoted attribute.
pub(super) fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            other => escaped.push(other),
        }
    }
    escaped
}

/// `text` as one path segment of a link (run ids and step ids are plain, but a step id comes
/// from a workflow file and is encoded anyway).
pub(super) fn segment(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            encoded.push(char::from(byte));
        } else {
            let _ = write!(encoded, "%{byte:02X}");
        }
    }
    encoded
}

/// How a page is delivered: by the server (styles and script as files) or as one report file
/// (styles inline, no script).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Delivery {
    /// A page of `serve`; `live` adds the script that follows a running run.
    Served {
        /// Whether the page loads the live script.
        live: bool,
    },
    /// A `report` file.
    Report,
}

/// A whole page around `body`.
pub(super) fn page(title: &str, body: &str, delivery: Delivery) -> String {
    let head = match delivery {
        Delivery::Served { live } => {
            let script = if live {
                "<script src=\"/assets/live.js\" defer></script>"
            } else {
                ""
            };
            format!("<link rel=\"stylesheet\" href=\"/assets/viewer.css\">{script}")
        }
        Delivery::Report => format!("<style>{STYLE}</style>"),
    };
    let navigation = match delivery {
        Delivery::Served { .. } => {
            "<nav><a href=\"/\">Runs</a> <a href=\"/gates\">Gates</a> <a href=\"/journal\">Journal</a></nav>"
        }
        Delivery::Report => "",
    };
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"referrer\" content=\"same-origin\">\
         <title>{} — tnh-conductor</title>{head}</head>\
         <body>{navigation}<main>{body}</main></body></html>\n",
        escape(title)
    )
}

/// A note that a file is still being written by the run.
pub(super) fn being_written(what: &str) -> String {
    format!(
        "<p class=\"writing\">{} is being written.</p>",
        escape(what)
    )
}

/// `<pre>` of escaped text.
pub(super) fn pre(text: &str) -> String {
    format!("<pre>{}</pre>", escape(text))
}

/// A table: a header row and rows of cells that are already HTML.
pub(super) fn table(class: &str, headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut html = format!("<table class=\"{class}\">");
    // A table of names and values has no header row.
    if headers.iter().any(|header| !header.is_empty()) {
        html.push_str("<thead><tr>");
        for header in headers {
            let _ = write!(html, "<th>{}</th>", escape(header));
        }
        html.push_str("</tr></thead>");
    }
    html.push_str("<tbody>");
    for row in rows {
        html.push_str("<tr>");
        for cell in row {
            let _ = write!(html, "<td>{cell}</td>");
        }
        html.push_str("</tr>");
    }
    html.push_str("</tbody></table>");
    html
}

/// How long between two RFC 3339 times, compactly (`4s`, `2m05s`, `1h03m`).
pub(super) fn duration_between(start: &str, end: Option<&str>) -> String {
    let parse = |text: &str| text.parse::<jiff::Timestamp>().ok();
    let (Some(start), Some(end)) = (parse(start), end.and_then(parse)) else {
        return String::new();
    };
    let milliseconds = end.duration_since(start).as_millis().max(0);
    compact_duration(u64::try_from(milliseconds).unwrap_or(0))
}

/// `milliseconds` compactly.
pub(super) fn compact_duration(milliseconds: u64) -> String {
    let seconds = milliseconds / 1000;
    match seconds {
        0 => format!("{milliseconds}ms"),
        1..60 => format!("{seconds}s"),
        60..3600 => format!("{}m{:02}s", seconds / 60, seconds % 60),
        _ => format!("{}h{:02}m", seconds / 3600, seconds % 3600 / 60),
    }
}

/// An RFC 3339 time shortened to the minute (`2026-12-06 12:30`).
pub(super) fn short_time(time: &str) -> String {
    time.get(..16).unwrap_or(time).replace('T', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_leaves_no_markup_of_agent_text() {
        assert_eq!(
            escape("<script>alert('x')</script> & <img onerror=\"a\">"),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &lt;img onerror=&quot;a&quot;&gt;"
        );
    }

    #[test]
    fn a_segment_encodes_what_could_leave_it() {
        assert_eq!(segment("a/../b c"), "a%2F..%2Fb%20c");
    }

    #[test]
    fn durations_are_compact() {
        assert_eq!(compact_duration(250), "250ms");
        assert_eq!(compact_duration(125_000), "2m05s");
        assert_eq!(
            duration_between("2026-01-01T00:00:00Z", Some("2026-01-01T00:00:04Z")),
            "4s"
        );
    }
}
