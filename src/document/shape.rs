//! A document's shape, read from the Rust type that describes it: the keys of a struct and
//! the names of an enum, as serde spells them (renames applied) and in declaration order.
//!
//! Decoders walk the positioned YAML tree by hand, which is what gives every problem its
//! position and reports them all at once. Their key lists and value names come from here,
//! so a field added to a document type is known to the decoder and to the JSON Schema
//! derived from the same type at once. The order is the declaration order (a schema's
//! properties are sorted), so hints list keys as the type declares them.

use std::marker::PhantomData;
use std::ops::Deref;

use serde::de::{self, DeserializeOwned, Deserializer, Visitor};

/// The keys of struct `T`, in declaration order; empty for a type that is not a struct with
/// named fields (or that flattens another: serde reads those as maps).
pub fn keys<T: DeserializeOwned>() -> &'static [&'static str] {
    introspect::<T>()
}

/// The names of the unit variants of enum `T`, in declaration order (so `names::<T>()[value
/// as usize]` is a value's name).
pub fn names<T: DeserializeOwned>() -> &'static [&'static str] {
    introspect::<T>()
}

/// The variant of enum `T` named `name`, if any.
pub fn parse<T: DeserializeOwned>(name: &str) -> Option<T> {
    T::deserialize(de::value::StrDeserializer::<de::value::Error>::new(name)).ok()
}

/// The names of an enum as a constant that reads like a slice (`Kind::NAMES.join(", ")`,
/// `Kind::NAMES[kind as usize]`).
pub struct Names<T>(PhantomData<fn() -> T>);

impl<T> Names<T> {
    /// The names of `T`.
    pub const fn new() -> Self {
        Self(PhantomData)
    }
}

impl<T> Default for Names<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> std::fmt::Debug for Names<T> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("Names")
    }
}

impl<T: DeserializeOwned> Deref for Names<T> {
    type Target = [&'static str];

    fn deref(&self) -> &[&'static str] {
        names::<T>()
    }
}

/// For each key of struct `T`, in declaration order, the strings its schema lists under
/// `extension` (`#[schemars(extend("x-kinds" = ["claude"]))]`), or `None` where it lists none.
pub fn key_annotations<T: DeserializeOwned + schemars::JsonSchema>(
    extension: &str,
) -> Vec<(&'static str, Option<Vec<String>>)> {
    let schema = schemars::schema_for!(T).to_value();
    keys::<T>()
        .iter()
        .map(|key| {
            let listed = schema["properties"][*key]
                .get(extension)
                .and_then(serde_json::Value::as_array)
                .map(|items| {
                    items
                        .iter()
                        .filter_map(|item| item.as_str().map(str::to_owned))
                        .collect()
                });
            (*key, listed)
        })
        .collect()
}

/// A document enum's schema as its names only (`{"type": "string", "enum": [...]}`): the
/// variants' doc comments are for readers of the code, and the field using the enum says
/// what it is for.
pub fn names_only(schema: &mut schemars::Schema) {
    use serde_json::Value as Json;
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    let names: Vec<Json> = match (object.get("enum"), object.get("oneOf")) {
        (Some(Json::Array(names)), _) => names.clone(),
        (_, Some(Json::Array(variants))) => variants
            .iter()
            .filter_map(|variant| variant.get("const").cloned())
            .collect(),
        _ => return,
    };
    object.clear();
    object.insert("type".into(), "string".into());
    object.insert("enum".into(), Json::Array(names));
}

/// The field or variant list serde's derive hands its deserializer, or empty.
fn introspect<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut found: &'static [&'static str] = &[];
    // The introspector always fails once it has the list: no value is ever built.
    let _ = T::deserialize(Introspector(&mut found));
    found
}

/// A deserializer that only records the names it is asked for.
struct Introspector<'a>(&'a mut &'static [&'static str]);

impl<'de> Deserializer<'de> for Introspector<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct or an enum"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = fields;
        Err(de::Error::custom("introspected"))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        variants: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = variants;
        Err(de::Error::custom("introspected"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Sample {
        first: u32,
        #[serde(rename = "type")]
        kind: String,
        #[serde(rename = "*")]
        wildcard: Option<String>,
    }

    #[derive(Debug, PartialEq, serde::Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Choice {
        PreRun,
        PreStep,
    }

    #[test]
    fn keys_and_names_follow_the_declaration_and_serde_renames() {
        assert_eq!(keys::<Sample>(), ["first", "type", "*"]);
        assert_eq!(names::<Choice>(), ["pre_run", "pre_step"]);
        assert_eq!(parse::<Choice>("pre_step"), Some(Choice::PreStep));
        assert_eq!(parse::<Choice>("PreStep"), None);
        const NAMES: Names<Choice> = Names::new();
        assert_eq!(NAMES[Choice::PreStep as usize], "pre_step");
        assert_eq!(NAMES.join(", "), "pre_run, pre_step");
        assert!(keys::<String>().is_empty());
    }
}
