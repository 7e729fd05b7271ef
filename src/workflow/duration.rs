//! Durations as workflows and the command line write them: `90s`, `20m`, `24h`, `1h30m`,
//! `500ms`, `7d`, `2w`.

use std::time::Duration;

/// The text is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a duration: {reason}")]
pub struct DurationError {
    /// The text as written.
    pub text: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Parses one or more `<number><unit>` groups (units `ms`, `s`, `m`, `h`, `d`, `w`).
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let error = |reason| DurationError {
        text: text.to_owned(),
        reason,
    };
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(error("it is empty"));
    }
    let mut total: u64 = 0;
    let mut rest = trimmed;
    while !rest.is_empty() {
        let digits = rest
            .find(|ch: char| !ch.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(error(
                "each part must start with a whole number, as in `90s` or `1h30m`",
            ));
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| error("the number is too large"))?;
        rest = &rest[digits..];
        let unit_length = rest
            .find(|ch: char| ch.is_ascii_digit())
            .unwrap_or(rest.len());
        let millis_per_unit = match &rest[..unit_length] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 604_800_000,
            "" => return Err(error("a unit is missing (ms, s, m, h, d or w)")),
            _ => return Err(error("the unit must be ms, s, m, h, d or w")),
        };
        rest = &rest[unit_length..];
        let part = number
            .checked_mul(millis_per_unit)
            .ok_or_else(|| error("it is too long"))?;
        total = total
            .checked_add(part)
            .ok_or_else(|| error("it is too long"))?;
    }
    Ok(Duration::from_millis(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_units_and_combinations() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("20m"), Ok(Duration::from_secs(1200)));
        assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(604_800)));
        assert_eq!(parse_duration("2w"), Ok(Duration::from_secs(1_209_600)));
    }

    #[test]
    fn refuses_what_is_not_a_duration() {
        for text in [
            "",
            "90",
            "s",
            "1.5h",
            "10 minutes",
            "5y",
            "-3s",
            "99999999999999999999s",
        ] {
            assert!(parse_duration(text).is_err(), "{text:?} was accepted");
        }
    }
}
