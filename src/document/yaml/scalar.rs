//! YAML 1.2 core-schema resolution of scalars.

use std::borrow::Cow;

use saphyr_parser::ScalarStyle;

use super::*;

const CORE_TAG_PREFIX: &str = "tag:yaml.org,2002:";

/// YAML 1.2 core-schema resolution of a scalar (plain scalars get types; quoted ones are text).
pub(super) fn resolve_scalar(
    text: Cow<'_, str>,
    style: ScalarStyle,
    tag: Option<&saphyr_parser::Tag>,
    pos: Pos,
) -> Result<Value, ParseError> {
    if let Some(tag) = tag {
        let core =
            (tag.handle == CORE_TAG_PREFIX || tag.handle == "!!").then_some(tag.suffix.as_str());
        return match core {
            Some("str") => Ok(Value::Str(text.into_owned())),
            Some("null" | "bool" | "int" | "float") => Ok(resolve_plain(text)),
            _ => Err(ParseError::new(
                pos,
                "yaml-syntax",
                format!("the tag `{}{}` is not supported", tag.handle, tag.suffix),
                "workflows use plain YAML values; remove the tag",
            )),
        };
    }
    Ok(match style {
        ScalarStyle::Plain => resolve_plain(text),
        _ => Value::Str(text.into_owned()),
    })
}

fn resolve_plain(owned: Cow<'_, str>) -> Value {
    let text: &str = &owned;
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Value::Float(f64::INFINITY);
        }
        "-.inf" | "-.Inf" | "-.INF" => return Value::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Value::Float(f64::NAN),
        _ => {}
    }
    if let Some(number) = plain_integer(text) {
        // Out of range (reported by the tree builder): the nearest 64-bit integer, so the
        // value is still an integer to the checks that follow.
        return Value::Int(number.unwrap_or(if text.starts_with('-') {
            i64::MIN
        } else {
            i64::MAX
        }));
    }
    if is_core_float(text.strip_prefix(['-', '+']).unwrap_or(text))
        && let Ok(number) = text.parse::<f64>()
    {
        return Value::Float(number);
    }
    Value::Str(owned.into_owned())
}

/// A core-schema integer (`[-+]?[0-9]+`, `0x…`, `0o…`): its value, or `None` when it does not
/// fit in 64 bits; `Some`-less (the outer `None`) when the text is not an integer at all.
fn plain_integer(text: &str) -> Option<Option<i64>> {
    let is_digits = |digits: &str, radix: u32| {
        !digits.is_empty() && digits.chars().all(|ch| ch.is_digit(radix))
    };
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    if is_digits(unsigned, 10) {
        return Some(text.parse::<i64>().ok());
    }
    for (prefix, radix) in [("0x", 16), ("0o", 8)] {
        if let Some(digits) = text.strip_prefix(prefix)
            && is_digits(digits, radix)
        {
            return Some(i64::from_str_radix(digits, radix).ok());
        }
    }
    None
}

/// An integer scalar that does not fit in 64 bits: it was reported as "a string" by whatever
/// expected a number. Now it is an error of its own, at the scalar.
pub(super) fn out_of_range(
    text: &str,
    style: ScalarStyle,
    tag: Option<&saphyr_parser::Tag>,
    pos: Pos,
) -> Option<ParseError> {
    let typed = match tag {
        None => style == ScalarStyle::Plain,
        Some(tag) => {
            (tag.handle == CORE_TAG_PREFIX || tag.handle == "!!")
                && matches!(tag.suffix.as_str(), "int" | "null" | "bool" | "float")
        }
    };
    if !typed || plain_integer(text) != Some(None) {
        return None;
    }
    Some(ParseError::new(
        pos,
        "invalid-value",
        format!("the integer `{text}` is out of range (it does not fit in 64 bits)"),
        &format!(
            "use a whole number from {} to {} (quote it to make it text)",
            i64::MIN,
            i64::MAX
        ),
    ))
}

/// `[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?` or `\.[0-9]+(...)?` — the core schema's floats.
fn is_core_float(text: &str) -> bool {
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(index) => (&text[..index], Some(&text[index + 1..])),
        None => (text, None),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = |part: &str| part.bytes().all(|byte| byte.is_ascii_digit());
    let mantissa_ok =
        digits(whole) && digits(fraction) && !(whole.is_empty() && fraction.is_empty());
    let exponent_ok = exponent.is_none_or(|exponent| {
        let unsigned = exponent.strip_prefix(['-', '+']).unwrap_or(exponent);
        !unsigned.is_empty() && digits(unsigned)
    });
    mantissa_ok && exponent_ok && (mantissa.contains('.') || exponent.is_some())
}

#[cfg(test)]
mod scalar_tests {
    use super::*;

    #[test]
    fn plain_scalars_resolve_by_the_yaml_1_2_core_schema() {
        let node = parse(b"a: ~\nb: true\nc: FALSE\nd: -12\ne: 0x1f\nf: 0o17\ng: 1.5e3\nh: .5\ni: yes\nj: '12'\nk: 1.2.3\n").unwrap();
        let value = |key: &str| node.get(key).unwrap().value.clone();
        assert_eq!(value("a"), Value::Null);
        assert_eq!(value("b"), Value::Bool(true));
        assert_eq!(value("c"), Value::Bool(false));
        assert_eq!(value("d"), Value::Int(-12));
        assert_eq!(value("e"), Value::Int(31));
        assert_eq!(value("f"), Value::Int(15));
        assert_eq!(value("g"), Value::Float(1500.0));
        assert_eq!(value("h"), Value::Float(0.5));
        // YAML 1.1 booleans are text in YAML 1.2.
        assert_eq!(value("i"), Value::Str("yes".into()));
        assert_eq!(value("j"), Value::Str("12".into()));
        assert_eq!(value("k"), Value::Str("1.2.3".into()));
        // An integer out of range is an error (`integers_out_of_range_are_reported_…`).
    }

    #[test]
    fn core_tags_are_honoured_and_others_refused() {
        let node = parse(b"a: !!str 12\nb: !!int 7\n").unwrap();
        assert_eq!(node.get("a").unwrap().value, Value::Str("12".into()));
        assert_eq!(node.get("b").unwrap().value, Value::Int(7));
        let error = parse(b"a: !python/object foo\n").unwrap_err();
        assert_eq!((error.code, error.pos.line), ("yaml-syntax", 1));
    }

    #[test]
    fn aliases_copy_their_anchor_at_the_alias_position() {
        let node = parse(b"base: &b {x: 1, y: [2]}\ncopy: *b\n").unwrap();
        let copy = node.get("copy").unwrap();
        assert_eq!(copy.pos, Pos::new(2, 7));
        assert_eq!(copy.get("x").unwrap().value, Value::Int(1));
        // Every node of the copy is at the alias, so a problem in it is reported there.
        let (key, value) = &copy.as_map().unwrap()[1];
        assert_eq!((key.pos, value.pos), (Pos::new(2, 7), Pos::new(2, 7)));
        assert_eq!(value.as_seq().unwrap()[0].pos, Pos::new(2, 7));
        // The anchor itself keeps its positions.
        assert_eq!(
            node.get("base").unwrap().get("x").unwrap().pos,
            Pos::new(1, 14)
        );
    }

    #[test]
    fn the_end_of_the_input_is_a_position_in_the_file() {
        let node = parse(b"---\n").unwrap();
        assert_eq!(
            (node.value.clone(), node.pos),
            (Value::Null, Pos::new(1, 4))
        );
        let node = parse(b"a: 1\nb:").unwrap();
        assert_eq!(node.get("b").unwrap().pos.line, 2);
    }

    #[test]
    fn large_mappings_still_catch_duplicate_keys() {
        let mut text: String = (0..100)
            .map(|index| format!("k{index}: {index}\n"))
            .collect();
        text.push_str("k42: again\n");
        let error = parse(text.as_bytes()).unwrap_err();
        assert_eq!((error.code, error.pos.line), ("duplicate-key", 101));
    }
}
