//! Pure text and data helpers: `parse_json`, `to_json`, `parse_yaml`, `truncate`, `lines`,
//! `sha256`, and bounded replacements of Rhai's `split`, `split_rev` and `to_chars`. None
//! touches the world.
//!
//! Rhai checks data sizes only on the value a function returns, so a function that builds a
//! large value reaches its full size in memory before the limit applies (`lines()` of a 4 MiB
//! string is millions of strings). Every helper here that builds a collection therefore stops
//! as soon as the collection passes the engine's limits, and the parsers refuse input above
//! the `read_file` size and count what they build while they build it. Helpers whose cost
//! grows with their input read the deadline before they start.

use std::sync::Arc;

use rhai::{Array, Dynamic, EvalAltResult, INT, ImmutableString, Module};

use super::fs::{refuse, too_large};
use super::host::HostState;
use super::value::{dynamic_to_json, json_to_dynamic};

/// The text functions, bound to one host (for its limits and deadline).
pub(crate) fn create_module(state: Arc<HostState>) -> Module {
    let mut module = Module::new();
    let host = Arc::clone(&state);
    module.set_native_fn("parse_json", move |text: ImmutableString| {
        parse_json(&host, &text)
    });
    module.set_native_fn("to_json", |value: Dynamic| to_json(&value, false));
    module.set_native_fn("to_json", |value: Dynamic, pretty: bool| {
        to_json(&value, pretty)
    });
    let host = Arc::clone(&state);
    module.set_native_fn("parse_yaml", move |text: ImmutableString| {
        parse_yaml(&host, &text)
    });
    module.set_native_fn("truncate", |text: ImmutableString, max_chars: INT| {
        Ok(truncate(&text, max_chars))
    });
    let host = Arc::clone(&state);
    module.set_native_fn("sha256", move |text: ImmutableString| {
        host.check_deadline()?;
        bounded_input(&host, "sha256", &text)?;
        Ok(crate::artifacts::sha256_hex(text.as_bytes()))
    });
    add_splitting_functions(&mut module, &state);
    module
}

/// `lines`, and Rhai's `split`, `split_rev` and `to_chars` with the same results, built only up
/// to the array limit. Registered after Rhai's packages, these shadow Rhai's versions.
fn add_splitting_functions(module: &mut Module, state: &Arc<HostState>) {
    let host = Arc::clone(state);
    module.set_native_fn("lines", move |text: ImmutableString| {
        collect(&host, text.lines())
    });
    let host = Arc::clone(state);
    module.set_native_fn("to_chars", move |text: ImmutableString| {
        collect(&host, text.chars())
    });
    let host = Arc::clone(state);
    module.set_native_fn("split", move |text: ImmutableString| {
        if text.is_empty() {
            return Ok(vec![Dynamic::from(text)]);
        }
        collect(&host, text.split_whitespace())
    });
    let host = Arc::clone(state);
    module.set_native_fn(
        "split",
        move |text: ImmutableString, delimiter: ImmutableString| {
            split(&host, &text, &delimiter, None, false)
        },
    );
    let host = Arc::clone(state);
    module.set_native_fn(
        "split",
        move |text: ImmutableString, delimiter: ImmutableString, segments: INT| {
            split(&host, &text, &delimiter, Some(segments), false)
        },
    );
    let host = Arc::clone(state);
    module.set_native_fn("split", move |text: ImmutableString, delimiter: char| {
        split(&host, &text, &delimiter.to_string(), None, false)
    });
    let host = Arc::clone(state);
    module.set_native_fn(
        "split",
        move |text: ImmutableString, delimiter: char, segments: INT| {
            split(&host, &text, &delimiter.to_string(), Some(segments), false)
        },
    );
    let host = Arc::clone(state);
    module.set_native_fn(
        "split_rev",
        move |text: ImmutableString, delimiter: ImmutableString| {
            split(&host, &text, &delimiter, None, true)
        },
    );
    let host = Arc::clone(state);
    module.set_native_fn(
        "split_rev",
        move |text: ImmutableString, delimiter: ImmutableString, segments: INT| {
            split(&host, &text, &delimiter, Some(segments), true)
        },
    );
    let host = Arc::clone(state);
    module.set_native_fn(
        "split_rev",
        move |text: ImmutableString, delimiter: char| {
            split(&host, &text, &delimiter.to_string(), None, true)
        },
    );
    let host = Arc::clone(state);
    module.set_native_fn(
        "split_rev",
        move |text: ImmutableString, delimiter: char, segments: INT| {
            split(&host, &text, &delimiter.to_string(), Some(segments), true)
        },
    );
}

/// Rhai's `split`/`split_rev` by a delimiter, into at most `segments` pieces when given (fewer
/// than 2 segments, an empty text, or a delimiter the text does not hold: the text itself).
fn split(
    state: &HostState,
    text: &ImmutableString,
    delimiter: &str,
    segments: Option<INT>,
    reverse: bool,
) -> Result<Array, Box<EvalAltResult>> {
    let whole = text.is_empty()
        || (!delimiter.is_empty() && !text.contains(delimiter))
        || segments.is_some_and(|segments| segments <= 1);
    if whole {
        return Ok(vec![Dynamic::from(text.clone())]);
    }
    match (
        segments.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        reverse,
    ) {
        (None, false) => collect(state, text.split(delimiter)),
        (None, true) => collect(state, text.rsplit(delimiter)),
        (Some(count), false) => collect(state, text.splitn(count, delimiter)),
        (Some(count), true) => collect(state, text.rsplitn(count, delimiter)),
    }
}

/// The pieces as an array, refused with Rhai's array-size error as soon as there is one more
/// than the limit: at most `max_array_items + 1` pieces are ever built.
fn collect<T: Into<Dynamic>>(
    state: &HostState,
    pieces: impl Iterator<Item = T>,
) -> Result<Array, Box<EvalAltResult>> {
    state.check_deadline()?;
    let limit = state.limits.max_array_items;
    let array: Array = pieces
        .take(limit.saturating_add(1))
        .map(Into::into)
        .collect();
    if array.len() > limit {
        return Err(too_large("Size of array"));
    }
    Ok(array)
}

/// Refuses an input larger than `read_file` may return, before any work on it.
fn bounded_input(state: &HostState, function: &str, text: &str) -> Result<(), Box<EvalAltResult>> {
    let limit = state.limits.max_read_bytes;
    if u64::try_from(text.len()).unwrap_or(u64::MAX) > limit {
        return Err(refuse(
            function,
            &format!(
                "the text is {} bytes; at most {limit} bytes are accepted",
                text.len()
            ),
        ));
    }
    Ok(())
}

/// The most values (mapping keys included) `parse_json` and `parse_yaml` build: an array's
/// worth of items plus as many map entries with their keys. Counted while parsing, so a 1 MiB
/// text of tiny values never becomes a large tree before the data size limits see it (the map
/// limit itself is larger, to hold a change list of that many files).
fn max_parsed_values(state: &HostState) -> usize {
    state
        .limits
        .max_array_items
        .saturating_mul(3)
        .saturating_add(1)
}

fn too_many_values(function: &str, limit: usize) -> Box<EvalAltResult> {
    refuse(
        function,
        &format!("the text holds more than {limit} values (the array and map limits)"),
    )
}

fn parse_json(state: &HostState, text: &str) -> Result<Dynamic, Box<EvalAltResult>> {
    state.check_deadline()?;
    bounded_input(state, "parse_json", text)?;
    let limit = max_parsed_values(state);
    if json_values_at_most(text) > limit {
        return Err(too_many_values("parse_json", limit));
    }
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|error| refuse("parse_json", &error.to_string()))?;
    json_to_dynamic(&value).map_err(|error| refuse("parse_json", &error))
}

/// An upper bound of the values and keys in a JSON text, counted without parsing it: every
/// value is the first one or follows `[`, `,` or `:`, and every key follows `{` or `,`.
fn json_values_at_most(text: &str) -> usize {
    let mut count = 1usize;
    let mut in_string = false;
    let mut escaped = false;
    for byte in text.bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' | b',' | b':' => count += 1,
            _ => {}
        }
    }
    count
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

fn parse_yaml(state: &HostState, text: &str) -> Result<Dynamic, Box<EvalAltResult>> {
    state.check_deadline()?;
    bounded_input(state, "parse_yaml", text)?;
    let limit = max_parsed_values(state);
    let node =
        crate::document::yaml::parse_with_node_limit(text.as_bytes(), limit).map_err(|error| {
            match error.code {
                "yaml-limits" if error.message.contains("number of nodes") => {
                    too_many_values("parse_yaml", limit)
                }
                _ => refuse("parse_yaml", &format!("{}: {}", error.pos, error.message)),
            }
        })?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The limit is found while the array is built: at most one piece past it is ever made.
    #[test]
    fn a_split_builds_at_most_one_piece_past_the_array_limit() {
        let host = crate::script::ScriptHost::new(crate::script::HostOptions {
            file: "flow.yaml".to_owned(),
            source: String::new(),
            root: None,
            limits: crate::script::Limits {
                max_array_items: 10,
                ..crate::script::Limits::STANDARD
            },
        })
        .unwrap();
        let built = std::cell::Cell::new(0usize);
        let pieces = (0..1_000_000).map(|index| {
            built.set(built.get() + 1);
            index.to_string()
        });
        let error = collect(host.state(), pieces).unwrap_err();
        assert!(
            matches!(*error, EvalAltResult::ErrorDataTooLarge(..)),
            "{error}"
        );
        assert_eq!(built.get(), 11);
        assert_eq!(
            collect(host.state(), ["a", "b"].into_iter()).unwrap().len(),
            2
        );
    }

    #[test]
    fn the_json_value_count_is_an_upper_bound_that_ignores_strings() {
        assert_eq!(json_values_at_most("1"), 1);
        assert_eq!(json_values_at_most("[1,2,3]"), 4);
        assert!(json_values_at_most(r#"{"a":1,"b":[2]}"#) >= 5);
        assert_eq!(json_values_at_most(r#""a,b:[{\"c""#), 1);
    }
}
