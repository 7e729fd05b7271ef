//! Reading an envelope field by field: a field of another shape than the kernel writes reads
//! as its default, never failing the whole envelope. The guard must judge whatever it is given
//! (a hand-written vector, a damaged record) on what it can read of it; the kernel's own
//! envelopes always have the written shape.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// The value as `T`, or `T`'s default when it has another shape.
pub(super) fn value<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned + Default,
{
    Ok(T::deserialize(Value::deserialize(deserializer)?).unwrap_or_default())
}

/// A list of texts: a string item as is, any other item as its JSON text (a policy event or a
/// missing artifact written as an object still counts); not a list: empty.
pub(super) fn strings<'de, D>(deserializer: D) -> Result<Vec<String>, D::Error>
where
    D: Deserializer<'de>,
{
    Ok(match Value::deserialize(deserializer)? {
        Value::Array(items) => items.into_iter().map(text).collect(),
        _ => Vec::new(),
    })
}

/// A list, each item as `T` or its default; not a list: empty.
pub(super) fn items<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned + Default,
{
    Ok(optional_items(deserializer)?.unwrap_or_default())
}

/// A list, each item as `T` or its default; not a list: `None` (as if absent).
pub(super) fn optional_items<'de, D, T>(deserializer: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned + Default,
{
    Ok(match Value::deserialize(deserializer)? {
        Value::Array(items) => Some(
            items
                .into_iter()
                .map(|item| T::deserialize(item).unwrap_or_default())
                .collect(),
        ),
        _ => None,
    })
}

/// A map of exit codes: an integer or `null` each; a code of another shape reads as `null`.
pub(super) fn exit_codes<'de, D>(
    deserializer: D,
) -> Result<std::collections::BTreeMap<String, Option<i64>>, D::Error>
where
    D: Deserializer<'de>,
{
    Ok(match Value::deserialize(deserializer)? {
        Value::Object(codes) => codes
            .into_iter()
            .map(|(name, code)| (name, code.as_i64()))
            .collect(),
        _ => std::collections::BTreeMap::new(),
    })
}

/// A mechanical outcome: not a string reads as `completed`, as if absent.
pub(super) fn outcome<'de, D>(deserializer: D) -> Result<String, D::Error>
where
    D: Deserializer<'de>,
{
    Ok(match Value::deserialize(deserializer)? {
        Value::String(outcome) => outcome,
        _ => "completed".to_owned(),
    })
}

/// An item as text: a string as is, anything else as JSON.
fn text(item: Value) -> String {
    match item {
        Value::String(text) => text,
        other => other.to_string(),
    }
}
