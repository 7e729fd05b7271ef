//! Conversions between Rhai values, JSON and the YAML node tree, so that a `${{ … }}` keeps its
//! type (a list stays a list, a map a map) on its way into the step that uses it.
//!
//! Conversions are bounded in depth: the values come from scripts and from the run's context,
//! and a cyclic or absurdly nested value must fail, not overflow the stack.

use rhai::{Array, Dynamic, ImmutableString, Map};

use crate::document::yaml::{Node, Pos, Value};

/// How deeply values may nest when converted.
pub const MAX_VALUE_DEPTH: usize = 64;

/// A JSON value as a Rhai value.
pub fn json_to_dynamic(value: &serde_json::Value) -> Result<Dynamic, String> {
    json_at_depth(value, 0)
}

fn json_at_depth(value: &serde_json::Value, depth: usize) -> Result<Dynamic, String> {
    if depth > MAX_VALUE_DEPTH {
        return Err(format!(
            "the value nests deeper than {MAX_VALUE_DEPTH} levels"
        ));
    }
    Ok(match value {
        serde_json::Value::Null => Dynamic::UNIT,
        serde_json::Value::Bool(flag) => Dynamic::from_bool(*flag),
        serde_json::Value::Number(number) => match number.as_i64() {
            Some(integer) => Dynamic::from_int(integer),
            None => Dynamic::from_float(number.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(text) => Dynamic::from(text.clone()),
        serde_json::Value::Array(items) => {
            let array: Result<Array, String> = items
                .iter()
                .map(|item| json_at_depth(item, depth + 1))
                .collect();
            Dynamic::from_array(array?)
        }
        serde_json::Value::Object(entries) => {
            let mut map = Map::new();
            for (key, item) in entries {
                map.insert(key.as_str().into(), json_at_depth(item, depth + 1)?);
            }
            Dynamic::from_map(map)
        }
    })
}

/// A Rhai value as JSON; functions, timestamps and other host types are refused.
pub fn dynamic_to_json(value: &Dynamic) -> Result<serde_json::Value, String> {
    dynamic_at_depth(value, 0)
}

fn dynamic_at_depth(value: &Dynamic, depth: usize) -> Result<serde_json::Value, String> {
    if depth > MAX_VALUE_DEPTH {
        return Err(format!(
            "the value nests deeper than {MAX_VALUE_DEPTH} levels"
        ));
    }
    if value.is_shared() {
        return dynamic_at_depth(&value.flatten_clone(), depth);
    }
    if value.is_unit() {
        return Ok(serde_json::Value::Null);
    }
    if let Ok(flag) = value.as_bool() {
        return Ok(serde_json::Value::Bool(flag));
    }
    if let Ok(integer) = value.as_int() {
        return Ok(serde_json::Value::from(integer));
    }
    if let Ok(number) = value.as_float() {
        return serde_json::Number::from_f64(number)
            .map(serde_json::Value::Number)
            .ok_or_else(|| format!("the number {number} has no JSON form"));
    }
    if let Ok(character) = value.as_char() {
        return Ok(serde_json::Value::String(character.to_string()));
    }
    if let Some(text) = value.read_lock::<ImmutableString>() {
        return Ok(serde_json::Value::String(text.to_string()));
    }
    if let Some(items) = value.read_lock::<Array>() {
        return items
            .iter()
            .map(|item| dynamic_at_depth(item, depth + 1))
            .collect();
    }
    if let Some(entries) = value.read_lock::<Map>() {
        let mut object = serde_json::Map::new();
        for (key, item) in entries.iter() {
            object.insert(key.to_string(), dynamic_at_depth(item, depth + 1)?);
        }
        return Ok(serde_json::Value::Object(object));
    }
    Err(format!(
        "a value of type `{}` cannot leave the script (use strings, numbers, booleans, arrays and maps)",
        value.type_name()
    ))
}

/// A JSON value as a YAML node; every node takes `pos`, the position of the expression.
pub fn json_to_node(value: &serde_json::Value, pos: Pos) -> Node {
    let value = match value {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(flag) => Value::Bool(*flag),
        serde_json::Value::Number(number) => match number.as_i64() {
            Some(integer) => Value::Int(integer),
            None => Value::Float(number.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(text) => Value::Str(text.clone()),
        serde_json::Value::Array(items) => {
            Value::Seq(items.iter().map(|item| json_to_node(item, pos)).collect())
        }
        serde_json::Value::Object(entries) => Value::Map(
            entries
                .iter()
                .map(|(key, item)| {
                    let key = Node {
                        pos,
                        value: Value::Str(key.clone()),
                    };
                    (key, json_to_node(item, pos))
                })
                .collect(),
        ),
    };
    Node { pos, value }
}

/// The text a value takes when interpolated into a longer string: strings as they are, `()` as
/// nothing, everything else as compact JSON.
pub fn to_text(value: &Dynamic) -> Result<String, String> {
    if value.is_unit() {
        return Ok(String::new());
    }
    if let Some(text) = value.read_lock::<ImmutableString>() {
        return Ok(text.to_string());
    }
    match dynamic_to_json(value)? {
        serde_json::Value::String(text) => Ok(text),
        other => Ok(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trips_through_rhai_values() {
        let value = serde_json::json!({"a": [1, 2.5, "x", null, true], "b": {"c": []}});
        let dynamic = json_to_dynamic(&value).unwrap();
        assert_eq!(dynamic_to_json(&dynamic).unwrap(), value);
    }

    #[test]
    fn nesting_beyond_the_depth_limit_is_refused_not_overflowed() {
        let mut value = serde_json::json!(1);
        for _ in 0..=MAX_VALUE_DEPTH {
            value = serde_json::json!([value]);
        }
        assert!(json_to_dynamic(&value).unwrap_err().contains("deeper"));
    }

    #[test]
    fn text_rendering_keeps_strings_and_prints_the_rest_as_json() {
        assert_eq!(to_text(&Dynamic::from("a b")).unwrap(), "a b");
        assert_eq!(to_text(&Dynamic::UNIT).unwrap(), "");
        assert_eq!(to_text(&Dynamic::from_int(3)).unwrap(), "3");
        let list = json_to_dynamic(&serde_json::json!(["x", 1])).unwrap();
        assert_eq!(to_text(&list).unwrap(), "[\"x\",1]");
    }

    #[test]
    fn nodes_take_the_position_of_the_expression() {
        let node = json_to_node(&serde_json::json!({"k": [1]}), Pos::new(4, 9));
        assert_eq!(node.pos, Pos::new(4, 9));
        assert_eq!(node.get("k").map(|item| item.pos), Some(Pos::new(4, 9)));
    }
}
