//! `retention:` in `.tnh/config.yaml`: how many finished runs keep their checkout
//! (`.tnh/worktrees/<run>`). A repository run every night keeps every run, and a checkout per
//! run is a full copy of the repository's files; a finished run needs its checkout no more
//! (its branch, snapshot refs and run directory stay, and `rollback` checks it out again).

use crate::document::yaml::{Node, Pos, Value};

/// What is kept of finished runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// How many of the most recently finished runs keep their checkout; older finished runs'
    /// checkouts are removed when a new run starts. Runs that have not finished (running,
    /// waiting at a gate, interrupted, blocked or stopped) always keep theirs.
    pub finished_checkouts: usize,
}

/// The number of finished runs whose checkout is kept when the file says nothing.
pub const DEFAULT_FINISHED_CHECKOUTS: usize = 5;

impl Default for Retention {
    fn default() -> Self {
        Self {
            finished_checkouts: DEFAULT_FINISHED_CHECKOUTS,
        }
    }
}

/// Reads `retention:`: a mapping of known keys, each a non-negative integer.
pub(super) fn parse(node: &Node) -> Result<Retention, (Pos, String)> {
    let Some(entries) = node.as_map() else {
        return Err((
            node.pos,
            format!(
                "`retention` must be a mapping such as `{{finished_checkouts: 5}}`, found {}",
                node.value.kind_name()
            ),
        ));
    };
    let mut retention = Retention::default();
    for (key, value) in entries {
        match key.as_str() {
            Some("finished_checkouts") => {
                retention.finished_checkouts = match value.value {
                    Value::Int(number) => usize::try_from(number).ok(),
                    _ => None,
                }
                .ok_or_else(|| {
                    (
                        value.pos,
                        format!(
                            "`retention.finished_checkouts` must be a whole number of runs (0 or more), found {}",
                            value.value.kind_name()
                        ),
                    )
                })?;
            }
            other => {
                let text = other.unwrap_or_default();
                let keys = crate::document::shape::keys::<super::document::RetentionDocument>();
                let hint = match crate::document::diagnostic::nearest(text, keys.iter().copied()) {
                    Some(near) => format!("did you mean `{near}`?"),
                    None => format!("the keys are {}", keys.join(", ")),
                };
                return Err((
                    key.pos,
                    format!("unknown key `{text}` in `retention`; {hint}"),
                ));
            }
        }
    }
    Ok(retention)
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::path::Path;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text.as_bytes(), Path::new("c.yaml")).map_err(|error| error.to_string())
    }

    #[test]
    fn retention_defaults_to_five_finished_checkouts_and_reads_its_key() {
        assert_eq!(
            parse("agents: {}\n").unwrap().retention.finished_checkouts,
            5
        );
        let set = parse("retention:\n  finished_checkouts: 0\n").unwrap();
        assert_eq!(set.retention.finished_checkouts, 0);
    }

    #[test]
    fn retention_refuses_unknown_keys_and_bad_numbers_where_written() {
        let typo = parse("retention:\n  finished_checkout: 3\n").unwrap_err();
        assert!(
            typo.starts_with("c.yaml:2:3: unknown key `finished_checkout` in `retention`; did you mean `finished_checkouts`?"),
            "{typo}"
        );
        let negative = parse("retention:\n  finished_checkouts: -1\n").unwrap_err();
        assert!(negative.contains("must be a whole number"), "{negative}");
        let text = parse("retention:\n  finished_checkouts: many\n").unwrap_err();
        assert!(text.contains("found a string"), "{text}");
        let near = parse("retension: {}\n").unwrap_err();
        assert!(near.contains("did you mean `retention`"), "{near}");
    }
}
