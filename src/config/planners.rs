//! Planner definitions: the `planners:` entries of the configuration, read and checked where
//! the configuration is read (a mistake shows at its key, before any run starts). The planner
//! turns a definition into the backend an EVALUATE asks.

use std::sync::OnceLock;
use std::time::Duration;

use super::Config;
use super::planner_document::{DefinitionDocument, PlannerKind};
use crate::document::shape;
use crate::document::yaml::{Node, Pos};
use crate::text::redact;

/// A planner definition, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlannerDefinition {
    /// `kind: rules`, or the built-in `rules` and `default`.
    Rules,
    /// A program or model service.
    External(ExternalPlanner),
}

/// The definition of an external planner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalPlanner {
    /// The profile name.
    pub name: String,
    /// What is asked.
    pub kind: ExternalKind,
    /// How long one attempt may take.
    pub timeout: Duration,
    /// Attempts before the kernel decides.
    pub attempts: usize,
    /// Host variables passed through to the process (API keys).
    pub pass_env: Vec<String>,
}

/// The external backends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExternalKind {
    /// Any program: envelope on stdin, decision on stdout.
    Command {
        /// argv.
        argv: Vec<String>,
    },
    /// Claude Code in print mode with a JSON schema.
    Claude {
        /// The binary (`TNH_CLAUDE_BIN` wins).
        binary: Option<String>,
        /// `--model`.
        model: Option<String>,
    },
    /// `codex exec` with an output schema.
    Codex {
        /// The binary (`TNH_CODEX_BIN` wins).
        binary: Option<String>,
        /// `--model`.
        model: Option<String>,
        /// `-c key=value` pairs.
        config: Vec<(String, String)>,
    },
    /// An OpenAI-compatible chat completions endpoint.
    Http {
        /// The endpoint (`…/v1/chat/completions`).
        url: String,
        /// The model name sent.
        model: String,
        /// The variable holding the bearer token, if any.
        api_key_env: Option<String>,
    },
}

/// How long a planner may take unless its profile says `timeout:`.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// Tries before giving up, unless the profile says `attempts:`.
const DEFAULT_ATTEMPTS: usize = 2;

/// The keys a planner definition may have, in declaration order.
fn definition_keys() -> &'static [&'static str] {
    shape::keys::<DefinitionDocument>()
}

/// The kinds that read each definition key that not every kind reads.
fn key_kinds() -> &'static [(&'static str, Vec<String>)] {
    static KINDS: OnceLock<Vec<(&'static str, Vec<String>)>> = OnceLock::new();
    KINDS.get_or_init(|| {
        shape::key_annotations::<DefinitionDocument>("x-kinds")
            .into_iter()
            .filter_map(|(key, kinds)| Some((key, kinds?)))
            .collect()
    })
}

/// Why a planner definition cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DefinitionError {
    /// No planner of that name is configured (and it is not built in).
    #[error("planner `{name}` is not defined under `planners:`")]
    Undefined {
        /// The planner asked.
        name: String,
    },
    /// The definition is not a mapping.
    #[error(
        "planner `{name}` must be a mapping such as `{{kind: rules}}` or `{{kind: command, argv: [...]}}`"
    )]
    NotMapping {
        /// The planner.
        name: String,
    },
    /// A key of the definition is not a string.
    #[error("keys of planner `{name}` must be strings")]
    KeyNotText {
        /// The planner.
        name: String,
    },
    /// A key no definition has.
    #[error(
        "planner `{name}` has an unknown key `{key}`; {}",
        unknown_key_hint(key)
    )]
    UnknownKey {
        /// The planner.
        name: String,
        /// The key as written.
        key: String,
    },
    /// A key the definition's kind would ignore.
    #[error(
        "planner `{name}` is `kind: {kind}`, which would ignore `{key}`; only {} take{} it",
        takers.iter().map(|kind| format!("`kind: {kind}`")).collect::<Vec<_>>().join(", "),
        if takers.len() == 1 { "s" } else { "" }
    )]
    IgnoredKey {
        /// The planner.
        name: String,
        /// Its kind.
        kind: String,
        /// The key.
        key: String,
        /// The kinds that read the key.
        takers: Vec<String>,
    },
    /// A key that must be a string is not.
    #[error("planner `{name}`: `{key}` must be a string, got {got}")]
    NotText {
        /// The planner.
        name: String,
        /// The key.
        key: String,
        /// What it holds.
        got: serde_json::Value,
    },
    /// A key that must be a list of strings is not.
    #[error("planner `{name}`: `{key}` must be a list of strings, got {got}")]
    NotList {
        /// The planner.
        name: String,
        /// The key.
        key: String,
        /// What it holds.
        got: serde_json::Value,
    },
    /// The definition has no `kind`.
    #[error(
        "planner `{name}` has no `kind`; add one of `kind: rules`, `command`, `claude`, `codex` or `http`"
    )]
    NoKind {
        /// The planner.
        name: String,
    },
    /// The definition's `kind` is none of the backends.
    #[error(
        "planner `{name}` has kind `{kind}`; the kinds are rules, command, claude, codex, http"
    )]
    UnknownKind {
        /// The planner.
        name: String,
        /// The kind as written.
        kind: String,
    },
    /// A `kind: rules` definition has another key.
    #[error("planner `{name}` is `kind: rules`, which takes no other key, but has `{key}`")]
    RulesTakesNoKey {
        /// The planner.
        name: String,
        /// The other key.
        key: String,
    },
    /// A key its kind needs is absent (`argv`, `url`, `model`).
    #[error("planner `{name}` has no `{key}`")]
    Missing {
        /// The planner.
        name: String,
        /// The key.
        key: &'static str,
    },
    /// An `http` planner's `url` is not an HTTP URL.
    #[error("planner `{name}`: `url` `{url}` is not an http:// or https:// URL")]
    NotHttpUrl {
        /// The planner.
        name: String,
        /// The URL, redacted.
        url: String,
    },
    /// `timeout` is not a duration.
    #[error("planner `{name}`: timeout `{value}`: {reason}")]
    Timeout {
        /// The planner.
        name: String,
        /// The value as written.
        value: String,
        /// Why it is not a duration.
        reason: crate::workflow::duration::DurationError,
    },
    /// `timeout` is zero.
    #[error(
        "planner `{name}`: timeout `{value}` would kill every attempt at once; give a positive duration such as `2m`"
    )]
    ZeroTimeout {
        /// The planner.
        name: String,
        /// The value as written.
        value: String,
    },
    /// `attempts` is a number outside 1 to 10.
    #[error("planner `{name}`: attempts must be 1 to 10")]
    AttemptsOutOfRange {
        /// The planner.
        name: String,
    },
    /// `attempts` is not a number.
    #[error("planner `{name}`: attempts must be a number, got {got}")]
    AttemptsNotNumber {
        /// The planner.
        name: String,
        /// What it holds.
        got: serde_json::Value,
    },
}

impl DefinitionError {
    /// The key of the definition the error is about, if one.
    fn key(&self) -> Option<&str> {
        match self {
            DefinitionError::UnknownKey { key, .. }
            | DefinitionError::IgnoredKey { key, .. }
            | DefinitionError::NotText { key, .. }
            | DefinitionError::NotList { key, .. }
            | DefinitionError::RulesTakesNoKey { key, .. } => Some(key),
            DefinitionError::Missing { key, .. } => Some(key),
            DefinitionError::NoKind { .. } | DefinitionError::UnknownKind { .. } => Some("kind"),
            DefinitionError::NotHttpUrl { .. } => Some("url"),
            DefinitionError::Timeout { .. } | DefinitionError::ZeroTimeout { .. } => {
                Some("timeout")
            }
            DefinitionError::AttemptsOutOfRange { .. }
            | DefinitionError::AttemptsNotNumber { .. } => Some("attempts"),
            DefinitionError::Undefined { .. }
            | DefinitionError::NotMapping { .. }
            | DefinitionError::KeyNotText { .. } => None,
        }
    }
}

/// The nearest known key to a misspelt one, else the list of keys.
fn unknown_key_hint(key: &str) -> String {
    match crate::document::diagnostic::nearest(key, definition_keys().iter().copied()) {
        Some(near) => format!("did you mean `{near}`?"),
        None => format!("the keys are {}", definition_keys().join(", ")),
    }
}

/// The key of a definition of `kind` that kind would ignore, with why, if any.
fn ignored_key<'n>(name: &str, node: &'n Node, kind: &str) -> Option<(&'n Node, DefinitionError)> {
    node.as_map()?.iter().find_map(|(key, _)| {
        let text = key.as_str()?;
        let (_, kinds) = key_kinds().iter().find(|(known, _)| *known == text)?;
        if kinds.iter().any(|taker| taker == kind) {
            return None;
        }
        let error = DefinitionError::IgnoredKey {
            name: name.to_owned(),
            kind: kind.to_owned(),
            key: text.to_owned(),
            takers: kinds.clone(),
        };
        Some((key, error))
    })
}

/// The planner an EVALUATE asks when neither `run --planner`, the step's `planner:` nor
/// `defaults.planner` names one: the profile configured as `default`, else the built-in
/// `rules`.
pub fn default_planner_name(config: &Config) -> &'static str {
    if config.planners.contains_key("default") {
        "default"
    } else {
        "rules"
    }
}

/// Checks the planner definition `name` of `config` (its node is `node`) where the
/// configuration is read: a mapping of known keys, of a known kind, with what that kind needs.
/// The error says where and what.
pub fn check_definition(
    name: &str,
    node: &Node,
    config: &Config,
) -> Result<(), (Pos, DefinitionError)> {
    let name_owned = || name.to_owned();
    let Some(entries) = node.as_map() else {
        return Err((node.pos, DefinitionError::NotMapping { name: name_owned() }));
    };
    for (key, _) in entries {
        let Some(text) = key.as_str() else {
            return Err((key.pos, DefinitionError::KeyNotText { name: name_owned() }));
        };
        if !definition_keys().contains(&text) {
            let key_text = text.to_owned();
            let error = DefinitionError::UnknownKey {
                name: name_owned(),
                key: key_text,
            };
            return Err((key.pos, error));
        }
    }
    // A key the kind does not read (an http planner's `argv`) would configure nothing.
    if let Some(kind) = node.get("kind").and_then(Node::as_str)
        && shape::parse::<PlannerKind>(kind).is_some_and(|kind| kind != PlannerKind::Rules)
        && let Some((key, error)) = ignored_key(name, node, kind)
    {
        return Err((key.pos, error));
    }
    config.planner(name).map(drop).map_err(|error| {
        // At the value of the key the error is about, when the definition has it.
        let at = error.key().and_then(|key| node.get(key));
        (at.map_or(node.pos, |value| value.pos), error)
    })
}

/// A planner definition's node, read key by key: a key present with the wrong type is an
/// error naming it, never taken as absent.
struct Definition<'a> {
    name: &'a str,
    node: &'a Node,
}

impl Definition<'_> {
    /// A string key, if present.
    fn text(&self, key: &str) -> Result<Option<String>, DefinitionError> {
        match self.node.get(key) {
            None => Ok(None),
            Some(value) => match value.to_json() {
                serde_json::Value::String(text) => Ok(Some(text)),
                got => Err(DefinitionError::NotText {
                    name: self.name.to_owned(),
                    key: key.to_owned(),
                    got,
                }),
            },
        }
    }

    /// A string key its kind needs.
    fn required(&self, key: &'static str) -> Result<String, DefinitionError> {
        self.text(key)?.ok_or_else(|| DefinitionError::Missing {
            name: self.name.to_owned(),
            key,
        })
    }

    /// A list-of-strings key, empty when absent.
    fn list(&self, key: &str) -> Result<Vec<String>, DefinitionError> {
        match self.node.get(key) {
            None => Ok(Vec::new()),
            Some(value) => match value.to_json() {
                serde_json::Value::Array(items)
                    if items.iter().all(serde_json::Value::is_string) =>
                {
                    Ok(items
                        .into_iter()
                        .filter_map(|item| item.as_str().map(str::to_owned))
                        .collect())
                }
                got => Err(DefinitionError::NotList {
                    name: self.name.to_owned(),
                    key: key.to_owned(),
                    got,
                }),
            },
        }
    }

    /// The `kind: rules` definition, which takes no other key.
    fn rules(&self) -> Result<PlannerDefinition, DefinitionError> {
        let other = self
            .node
            .as_map()
            .into_iter()
            .flatten()
            .find(|(key, _)| key.as_str() != Some("kind"));
        match other {
            Some((key, _)) => Err(DefinitionError::RulesTakesNoKey {
                name: self.name.to_owned(),
                key: key.as_str().unwrap_or_default().to_owned(),
            }),
            None => Ok(PlannerDefinition::Rules),
        }
    }

    /// What an external kind asks, from its keys.
    fn external_kind(&self, kind: &str) -> Result<ExternalKind, DefinitionError> {
        Ok(match kind {
            "command" => {
                let argv = self.list("argv")?;
                if argv.is_empty() {
                    return Err(DefinitionError::Missing {
                        name: self.name.to_owned(),
                        key: "argv",
                    });
                }
                ExternalKind::Command { argv }
            }
            "claude" => ExternalKind::Claude {
                binary: self.text("binary")?,
                model: self.text("model")?,
            },
            "codex" => ExternalKind::Codex {
                binary: self.text("binary")?,
                model: self.text("model")?,
                config: self.codex_config(),
            },
            "http" => {
                let url = self.required("url")?;
                self.check_url(&url)?;
                ExternalKind::Http {
                    model: self.required("model")?,
                    api_key_env: self.text("api_key_env")?,
                    url,
                }
            }
            other => {
                return Err(DefinitionError::UnknownKind {
                    name: self.name.to_owned(),
                    kind: other.to_owned(),
                });
            }
        })
    }

    /// A codex planner's `config:` mapping as `-c key=value` pairs, a value that is not a
    /// string written as JSON.
    fn codex_config(&self) -> Vec<(String, String)> {
        let Some(entries) = self.node.get("config").and_then(Node::as_map) else {
            return Vec::new();
        };
        entries
            .iter()
            .filter_map(|(key, value)| {
                let value = match value.to_json() {
                    serde_json::Value::String(text) => text,
                    other => other.to_string(),
                };
                Some((key.as_str()?.to_owned(), value))
            })
            .collect()
    }

    /// Refuses a `url` that is not `http://` or `https://` with a host, or holds whitespace.
    fn check_url(&self, url: &str) -> Result<(), DefinitionError> {
        let scheme = url
            .split_once("://")
            .map(|(scheme, rest)| (scheme.to_ascii_lowercase(), rest));
        match scheme {
            Some((scheme, rest))
                if (scheme == "http" || scheme == "https")
                    && !rest.is_empty()
                    && !rest.starts_with('/')
                    && !url.chars().any(char::is_whitespace) =>
            {
                Ok(())
            }
            _ => Err(DefinitionError::NotHttpUrl {
                name: self.name.to_owned(),
                url: redact(url, url),
            }),
        }
    }

    /// How long one attempt may take.
    fn timeout(&self) -> Result<Duration, DefinitionError> {
        let Some(value) = self.text("timeout")? else {
            return Ok(DEFAULT_TIMEOUT);
        };
        let timeout = crate::workflow::duration::parse_duration(&value).map_err(|reason| {
            DefinitionError::Timeout {
                name: self.name.to_owned(),
                value: value.clone(),
                reason,
            }
        })?;
        if timeout.is_zero() {
            return Err(DefinitionError::ZeroTimeout {
                name: self.name.to_owned(),
                value,
            });
        }
        Ok(timeout)
    }

    /// How many attempts are made.
    fn attempts(&self) -> Result<usize, DefinitionError> {
        let name = || self.name.to_owned();
        match self.node.get("attempts").map(Node::to_json) {
            Some(serde_json::Value::Number(number)) => number
                .as_u64()
                .filter(|count| (1..=10).contains(count))
                .and_then(|count| usize::try_from(count).ok())
                .ok_or_else(|| DefinitionError::AttemptsOutOfRange { name: name() }),
            Some(got) => Err(DefinitionError::AttemptsNotNumber { name: name(), got }),
            None => Ok(DEFAULT_ATTEMPTS),
        }
    }

    /// The host variables passed through: `pass_env`, else the API keys of the CLI asked.
    fn pass_env(&self, kind: &ExternalKind) -> Result<Vec<String>, DefinitionError> {
        let pass_env = self.list("pass_env")?;
        if !pass_env.is_empty() {
            return Ok(pass_env);
        }
        Ok(match kind {
            ExternalKind::Claude { .. } => vec!["ANTHROPIC_API_KEY".into()],
            ExternalKind::Codex { .. } => vec!["CODEX_API_KEY".into(), "OPENAI_API_KEY".into()],
            _ => Vec::new(),
        })
    }
}

impl Config {
    /// The definition of the planner profile `name` (`rules`/`default` exist without
    /// configuration).
    pub fn planner(&self, name: &str) -> Result<PlannerDefinition, DefinitionError> {
        let Some(node) = self.planners.get(name) else {
            return match name {
                "rules" | "default" => Ok(PlannerDefinition::Rules),
                other => Err(DefinitionError::Undefined {
                    name: other.to_owned(),
                }),
            };
        };
        let definition = Definition { name, node };
        let Some(kind) = definition.text("kind")? else {
            return Err(DefinitionError::NoKind {
                name: name.to_owned(),
            });
        };
        if kind == "rules" {
            return definition.rules();
        }
        let kind = definition.external_kind(&kind)?;
        Ok(PlannerDefinition::External(ExternalPlanner {
            name: name.to_owned(),
            timeout: definition.timeout()?,
            attempts: definition.attempts()?,
            pass_env: definition.pass_env(&kind)?,
            kind,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What reading a configuration with one planner definition says, with its position.
    fn refusal(definition: &str) -> String {
        let text = format!("planners:\n  judge: {definition}\n");
        Config::parse(text.as_bytes(), std::path::Path::new("c.yaml"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_bad_definition_is_refused_at_the_key_it_is_about() {
        let cases = [
            (
                "{kind: http, url: \"ftp://u:secret-1@h/x\", model: m}",
                "c.yaml:2:28: planner `judge`: `url` `ftp://***@h/x` is not an http:// or https:// URL",
            ),
            (
                "{kind: command, argv: [j], attempts: 11}",
                "c.yaml:2:47: planner `judge`: attempts must be 1 to 10",
            ),
            (
                "{kind: command, argv: [j], attempts: many}",
                "c.yaml:2:47: planner `judge`: attempts must be a number, got \"many\"",
            ),
            (
                "{kind: command, argv: [j], timeout: 0s}",
                "c.yaml:2:46: planner `judge`: timeout `0s` would kill every attempt at once; give a positive duration such as `2m`",
            ),
            (
                "{kind: http, url: \"http://h/v1\"}",
                "c.yaml:2:10: planner `judge` has no `model`",
            ),
            (
                "{kind: command, argv: 3}",
                "c.yaml:2:32: planner `judge`: `argv` must be a list of strings, got 3",
            ),
            (
                "{kind: rules, timeout: 1m}",
                "c.yaml:2:33: planner `judge` is `kind: rules`, which takes no other key, but has `timeout`",
            ),
            (
                "{kind: shell}",
                "c.yaml:2:17: planner `judge` has kind `shell`; the kinds are rules, command, claude, codex, http",
            ),
            (
                "{model: m}",
                "c.yaml:2:10: planner `judge` has no `kind`; add one of `kind: rules`, `command`, `claude`, `codex` or `http`",
            ),
            (
                "{kind: http, argv: [j]}",
                "c.yaml:2:23: planner `judge` is `kind: http`, which would ignore `argv`; only `kind: command` takes it",
            ),
            (
                "{kind: command, argv: [j], modle: m}",
                "c.yaml:2:37: planner `judge` has an unknown key `modle`; did you mean `model`?",
            ),
            (
                "[kind]",
                "c.yaml:2:10: planner `judge` must be a mapping such as `{kind: rules}` or `{kind: command, argv: [...]}`",
            ),
        ];
        for (definition, expected) in cases {
            assert_eq!(refusal(definition), expected, "{definition}");
        }
    }

    #[test]
    fn an_undefined_planner_is_named_and_the_built_in_ones_are_rules() {
        let error = Config::default().planner("judge").unwrap_err();
        assert_eq!(
            error.to_string(),
            "planner `judge` is not defined under `planners:`"
        );
        for name in ["rules", "default"] {
            assert_eq!(
                Config::default().planner(name),
                Ok(PlannerDefinition::Rules)
            );
        }
    }
}
