//! Reading a decision out of an answer: the text of it (UTF-8 or not), the JSON object in it
//! (whole or in a fenced block), and the limits a decision must keep.

use crate::planner::Decision;

/// Why an answer holds no usable decision.
#[derive(Debug, thiserror::Error)]
pub enum DecisionError {
    /// The answer is not JSON at all.
    #[error("the answer is not JSON: {source}")]
    NotJson {
        /// What the JSON parser said.
        source: serde_json::Error,
    },
    /// The answer is JSON but not a decision (a missing `status`, a key given twice, …).
    #[error("the answer is not a valid decision: {source}")]
    Invalid {
        /// What the decision parser said.
        source: serde_json::Error,
    },
    /// A list of the decision holds more items than [`limits`] allow.
    #[error("the decision is too large: {count} {list} (at most {limit})")]
    TooMany {
        /// The list (`risk_flags`, `blockers`).
        list: &'static str,
        /// How many it holds.
        count: usize,
        /// The most allowed.
        limit: usize,
    },
    /// A text of the decision is longer than [`limits`] allow.
    #[error("the decision is too large: {what} has {count} characters (at most {limit})")]
    TooLong {
        /// The text (`a risk flag`, `next_step`, …).
        what: &'static str,
        /// How many characters it has.
        count: usize,
        /// The most allowed.
        limit: usize,
    },
    /// `fix_instructions` is larger than [`limits::FIX_INSTRUCTIONS_BYTES`] as JSON.
    #[error(
        "the decision is too large: fix_instructions is {bytes} bytes of JSON (at most {})",
        limits::FIX_INSTRUCTIONS_BYTES
    )]
    FixInstructionsTooLarge {
        /// Its size as JSON.
        bytes: usize,
    },
}

/// An answer that is not UTF-8: it is kept with U+FFFD in place of the invalid bytes, and the
/// attempt fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the answer is not UTF-8 (invalid byte at offset {at}); it is kept with U+FFFD in place of the invalid bytes"
)]
pub struct NotUtf8 {
    /// The offset of the first invalid byte.
    pub at: usize,
}

/// Text from bytes: kept lossily when not UTF-8, with the reason saying so.
pub(super) fn decode(bytes: Vec<u8>) -> (String, Option<NotUtf8>) {
    match String::from_utf8(bytes) {
        Ok(text) => (text, None),
        Err(error) => {
            let at = error.utf8_error().valid_up_to();
            let text = String::from_utf8_lossy(error.as_bytes()).into_owned();
            (text, Some(NotUtf8 { at }))
        }
    }
}

/// The decision in a text: the whole text, or the first fenced JSON block in it (a fence
/// marked `json` in any case, or unmarked), prose around it allowed. Parsed straight into a
/// [`Decision`], so a key given twice is refused rather than the last one winning.
pub(super) fn parse_decision(text: &str) -> Result<Decision, DecisionError> {
    let trimmed = text.trim();
    let body = if trimmed.starts_with('{') {
        trimmed
    } else {
        fenced_block(trimmed).unwrap_or(trimmed)
    };
    serde_json::from_str::<Decision>(body.trim()).map_err(|source| {
        if serde_json::from_str::<serde::de::IgnoredAny>(body.trim()).is_ok() {
            DecisionError::Invalid { source }
        } else {
            DecisionError::NotJson { source }
        }
    })
}

/// The decision in a JSON value (Claude's `structured_output`).
pub(super) fn decision_from(value: serde_json::Value) -> Result<Decision, DecisionError> {
    serde_json::from_value::<Decision>(value).map_err(|source| DecisionError::Invalid { source })
}

/// The body of the first fenced block of `text` marked `json` (any case) or unmarked.
fn fenced_block(text: &str) -> Option<&str> {
    let mut offset = 0;
    let mut opened: Option<usize> = None;
    for line in text.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        let trimmed = line.trim();
        match opened {
            None => {
                if let Some(info) = trimmed.strip_prefix("```")
                    && (info.is_empty() || info.eq_ignore_ascii_case("json"))
                {
                    opened = Some(offset);
                }
            }
            Some(body_start) => {
                if trimmed == "```" {
                    return Some(&text[body_start..start]);
                }
            }
        }
    }
    None
}

/// The most of each part of a decision accepted: more is refused as a failed attempt, so one
/// answer cannot fill events, manifests and the next envelope.
pub mod limits {
    /// Risk flags in one decision.
    pub const RISK_FLAGS: usize = 32;
    /// Characters of one risk flag or blocker code.
    pub const NAME_CHARS: usize = 100;
    /// Blockers in one decision.
    pub const BLOCKERS: usize = 32;
    /// Characters of a blocker's summary or evidence reference.
    pub const SUMMARY_CHARS: usize = 2000;
    /// Bytes of `fix_instructions` as JSON.
    pub const FIX_INSTRUCTIONS_BYTES: usize = 16 * 1024;
    /// Characters of `next_step`.
    pub const NEXT_STEP_CHARS: usize = 200;
}

/// Refuses a decision past [`limits`], saying which part and the limit.
pub(super) fn within_limits(decision: &Decision) -> Result<(), DecisionError> {
    let too_many = |list: &'static str, count: usize, limit: usize| {
        if count > limit {
            Err(DecisionError::TooMany { list, count, limit })
        } else {
            Ok(())
        }
    };
    too_many("risk_flags", decision.risk_flags.len(), limits::RISK_FLAGS)?;
    too_many("blockers", decision.blockers.len(), limits::BLOCKERS)?;
    for flag in &decision.risk_flags {
        too_long("a risk flag", flag, limits::NAME_CHARS)?;
    }
    for blocker in &decision.blockers {
        too_long("a blocker code", &blocker.code, limits::NAME_CHARS)?;
        too_long("a blocker summary", &blocker.summary, limits::SUMMARY_CHARS)?;
        if let Some(reference) = &blocker.evidence_ref {
            too_long("a blocker evidence_ref", reference, limits::SUMMARY_CHARS)?;
        }
        if let Some(severity) = &blocker.severity {
            too_long("a blocker severity", severity, limits::NAME_CHARS)?;
        }
    }
    if let Some(next) = &decision.next_step {
        too_long("next_step", next, limits::NEXT_STEP_CHARS)?;
    }
    if let Some(fix) = &decision.fix_instructions {
        let bytes = serde_json::to_vec(fix).map_or(0, |text| text.len());
        if bytes > limits::FIX_INSTRUCTIONS_BYTES {
            return Err(DecisionError::FixInstructionsTooLarge { bytes });
        }
    }
    Ok(())
}

/// Refuses a text of more than `limit` characters.
fn too_long(what: &'static str, text: &str, limit: usize) -> Result<(), DecisionError> {
    let count = text.chars().count();
    if count > limit {
        Err(DecisionError::TooLong { what, count, limit })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::Status;

    #[test]
    fn a_fenced_block_is_found_after_prose_and_in_any_case() {
        for text in [
            "Here is my decision:\n```json\n{\"status\": \"partial\"}\n```\nThanks.",
            "```JSON\n{\"status\": \"partial\"}\n```",
            "Decision:\n```\n{\"status\": \"partial\"}\n```",
            "  {\"status\": \"partial\"}  ",
        ] {
            assert_eq!(
                parse_decision(text).unwrap().status,
                Status::Partial,
                "{text}"
            );
        }
        assert!(parse_decision("```python\nprint(1)\n```").is_err());
    }

    #[test]
    fn a_decision_with_a_key_given_twice_is_refused() {
        let error = parse_decision(r#"{"status": "unsafe", "status": "success"}"#)
            .unwrap_err()
            .to_string();
        assert!(error.contains("duplicate field `status`"), "{error}");
        assert!(error.contains("not a valid decision"), "{error}");
        let error = parse_decision("not json").unwrap_err().to_string();
        assert!(error.contains("not JSON"), "{error}");
    }

    #[test]
    fn a_decision_past_the_limits_is_refused() {
        let refusal = |decision: &Decision| within_limits(decision).unwrap_err().to_string();
        let mut decision = Decision::status(Status::Partial);
        assert!(within_limits(&decision).is_ok());
        decision.risk_flags = vec!["flag".into(); limits::RISK_FLAGS + 1];
        assert_eq!(
            refusal(&decision),
            "the decision is too large: 33 risk_flags (at most 32)"
        );
        decision.risk_flags = vec!["x".repeat(limits::NAME_CHARS + 1)];
        assert_eq!(
            refusal(&decision),
            "the decision is too large: a risk flag has 101 characters (at most 100)"
        );
        decision.risk_flags.clear();
        decision.fix_instructions = Some(crate::planner::FixInstructions {
            objective: "x".repeat(20_000),
            constraints: Vec::new(),
            edits: Vec::new(),
            verification: Vec::new(),
        });
        assert!(refusal(&decision).contains("fix_instructions"));
    }

    #[test]
    fn an_answer_that_is_not_utf8_says_where() {
        let (text, not_utf8) = decode(b"ok \xff".to_vec());
        assert_eq!(text, "ok \u{FFFD}");
        assert_eq!(
            not_utf8.map(|error| error.to_string()).as_deref(),
            Some(
                "the answer is not UTF-8 (invalid byte at offset 3); it is kept with U+FFFD in place of the invalid bytes"
            )
        );
    }
}
