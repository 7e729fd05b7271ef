//! The `agents:` and `validators:` sections of `.tnh/config.yaml`, each entry checked where it
//! is written: a mistake in a profile no step uses yet would otherwise end a run that had
//! already started.

use super::document;
use crate::document::shape;
use crate::document::yaml::{Node, Pos};

/// An `agents:` entry, checked where each part is written: a mapping whose keys are profile
/// keys (a typo gets the nearest one), with a known `kind`, no key that kind would ignore,
/// values of the right type, and what [`crate::runner::AgentProfile::check`] asks.
pub(super) fn check_agent(name: &str, node: &Node) -> Result<(), (Pos, String)> {
    use crate::runner::{AgentKind, AgentProfile, profile};
    let invalid = |message: String| format!("agent profile `{name}` is invalid: {message}");
    let Some(entries) = node.as_map() else {
        return Err((
            node.pos,
            invalid(format!(
                "it must be a mapping such as `{{kind: command, argv: [...]}}`, found {}",
                node.value.kind_name()
            )),
        ));
    };
    let keys = || profile::profile_keys().iter().copied();
    for (key, _) in entries {
        let Some(text) = key.as_str() else {
            return Err((key.pos, invalid("its keys must be strings".to_owned())));
        };
        if profile::kinds_taking(text).is_none() {
            let hint = match crate::document::diagnostic::nearest(text, keys()) {
                Some(near) => format!("did you mean `{near}`?"),
                None => format!(
                    "the keys are {} (per-step limits such as `timeout` go on the workflow's step)",
                    keys().collect::<Vec<_>>().join(", ")
                ),
            };
            return Err((key.pos, invalid(format!("unknown key `{text}`; {hint}"))));
        }
    }
    let kinds = AgentKind::ALL
        .map(|kind| format!("`{}`", kind.name()))
        .join(", ");
    let Some(kind_node) = node.get("kind") else {
        return Err((
            node.pos,
            invalid(format!("it has no `kind`; add one of {kinds}")),
        ));
    };
    let kind: AgentKind = serde_json::from_value(kind_node.to_json()).map_err(|_| {
        (
            kind_node.pos,
            invalid(format!(
                "`kind` must be one of {kinds}, found {}",
                match kind_node.as_str() {
                    Some(text) => format!("`{text}`"),
                    None => kind_node.value.kind_name().to_owned(),
                }
            )),
        )
    })?;
    // Each key alone, so a wrong type is reported at its value.
    let kind_json = kind_node.to_json();
    for (key, value) in entries {
        let Some(text) = key.as_str().filter(|text| *text != "kind") else {
            continue;
        };
        if let Some(message) = profile::key_refused_for(text, kind) {
            return Err((key.pos, invalid(message)));
        }
        let alone = serde_json::Map::from_iter([
            ("kind".to_owned(), kind_json.clone()),
            (text.to_owned(), value.to_json()),
        ]);
        if let Err(error) = serde_json::from_value::<AgentProfile>(alone.into()) {
            return Err((value.pos, invalid(format!("`{text}`: {error}"))));
        }
    }
    let profile: AgentProfile = serde_json::from_value(node.to_json())
        .map_err(|error| (node.pos, invalid(error.to_string())))?;
    profile.check(name).map_err(|error| {
        // At the key the message is about, when the profile has it.
        let at = ["max_output_mib", "argv"]
            .into_iter()
            .find(|key| error.to_string().contains(&format!("`{key}`")))
            .and_then(|key| node.get(key));
        (at.map_or(node.pos, |value| value.pos), error.to_string())
    })
}

/// A configured validator: a mapping with `argv`, a non-empty list of strings, and nothing
/// else.
pub(super) fn check_validator(name: &str, node: &Node) -> Result<(), (Pos, String)> {
    let Some(entries) = node.as_map() else {
        return Err((
            node.pos,
            format!("validator `{name}` must be a mapping with `argv`"),
        ));
    };
    for (key, _) in entries {
        if !key
            .as_str()
            .is_some_and(|key| shape::keys::<document::ValidatorCommand>().contains(&key))
        {
            return Err((
                key.pos,
                format!(
                    "unknown key `{}` in validator `{name}`: a configured validator takes only `argv` (give `env`, `timeout` and the like on a RUN_VALIDATION step's validator)",
                    key.as_str().unwrap_or("?")
                ),
            ));
        }
    }
    match node.get("argv").and_then(Node::string_items) {
        Some(argv) if !argv.is_empty() => Ok(()),
        _ => Err((
            node.pos,
            format!("validator `{name}` needs `argv`, a non-empty list of strings"),
        )),
    }
}
