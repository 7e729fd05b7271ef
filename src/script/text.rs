//! Pure text and data helpers: `parse_json`, `to_json`, `parse_yaml`, `truncate`, `lines`,
//! `sha256`. None touches the world; all are bounded by the engine's data-size limits, and
//! YAML goes through the workflow parser with its own size, depth and alias caps.

use rhai::{Array, Dynamic, EvalAltResult, INT, ImmutableString, Module};

use super::fs::refuse;
use super::value::{dynamic_to_json, json_to_dynamic};

/// The text functions.
pub(crate) fn create_module() -> Module {
    let mut module = Module::new();
    module.set_native_fn("parse_json", |text: ImmutableString| parse_json(&text));
    module.set_native_fn("to_json", |value: Dynamic| to_json(&value, false));
    module.set_native_fn("to_json", |value: Dynamic, pretty: bool| {
        to_json(&value, pretty)
    });
    module.set_native_fn("parse_yaml", |text: ImmutableString| parse_yaml(&text));
    module.set_native_fn("truncate", |text: ImmutableString, max_chars: INT| {
        Ok(truncate(&text, max_chars))
    });
    module.set_native_fn("lines", |text: ImmutableString| {
        Ok(text
            .lines()
            .map(|line| Dynamic::from(line.to_owned()))
            .collect::<Array>())
    });
    module.set_native_fn("sha256", |text: ImmutableString| Ok(sha256(&text)));
    module
}

fn parse_json(text: &str) -> Result<Dynamic, Box<EvalAltResult>> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|error| refuse("parse_json", &error.to_string()))?;
    json_to_dynamic(&value).map_err(|error| refuse("parse_json", &error))
}

fn to_json(value: &Dynamic, pretty: bool) -> Result<String, Box<EvalAltResult>> {
    let json = dynamic_to_json(value).map_err(|error| refuse("to_json", &error))?;
    let text = if pretty {
        serde_json::to_string_pretty(&json)
    } else {
        serde_json::to_string(&json)
    };
    text.map_err(|error| refuse("to_json", &error.to_string()))
}

fn parse_yaml(text: &str) -> Result<Dynamic, Box<EvalAltResult>> {
    let node = crate::workflow::yaml::parse(text.as_bytes())
        .map_err(|error| refuse("parse_yaml", &format!("{}: {}", error.pos, error.message)))?;
    json_to_dynamic(&node.to_json()).map_err(|error| refuse("parse_yaml", &error))
}

/// At most `max_chars` characters; a cut text ends with `…` (counted in the limit).
fn truncate(text: &ImmutableString, max_chars: INT) -> ImmutableString {
    let limit = usize::try_from(max_chars).unwrap_or(0);
    if text.chars().count() <= limit {
        return text.clone();
    }
    if limit == 0 {
        return ImmutableString::new();
    }
    let mut cut: String = text.chars().take(limit - 1).collect();
    cut.push('…');
    cut.into()
}

fn sha256(text: &str) -> String {
    crate::artifacts::sha256_hex(text.as_bytes())
}
