//! A YAML document as a tree of nodes that each know their line and column.
//!
//! Workflows are decoded from this tree rather than straight into typed structs so that one
//! pass can report *every* problem (an unknown key here, a wrong type there) with its position,
//! instead of stopping at the first one as a serde derive would. Parsing is bounded: a size
//! cap, a nesting cap and serde-saphyr's budgets stop alias bombs and deep nesting.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

/// The largest workflow file accepted, in bytes.
pub const MAX_DOCUMENT_BYTES: usize = 8 * 1024 * 1024;

/// How deeply collections may nest. A workflow needs about ten levels; the cap keeps the
/// recursive deserializer far inside the parsing thread's stack.
pub const MAX_DEPTH: usize = 32;

/// The stack of the thread that parses: serde's recursive descent uses tens of kilobytes a
/// level in debug builds, more than a test thread's default 2 MiB allows at the depth cap.
const PARSER_STACK_BYTES: usize = 16 * 1024 * 1024;

/// A 1-based line and column in a source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Pos {
    /// 1-based line.
    pub line: u32,
    /// 1-based column, in characters.
    pub column: u32,
}

impl Pos {
    /// A position from 1-based coordinates.
    pub fn new(line: u32, column: u32) -> Self {
        Self { line, column }
    }
}

impl fmt::Display for Pos {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}:{}", self.line, self.column)
    }
}

/// A YAML node and where it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Where the node starts in the source.
    pub pos: Pos,
    /// What the node holds.
    pub value: Value,
}

/// The value of a node. Mappings keep their source order.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `~`, `null` or nothing.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A floating-point number.
    Float(f64),
    /// A string scalar.
    Str(String),
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping, in source order.
    Map(Vec<(Node, Node)>),
}

impl Value {
    /// A short name of the value's kind, for "expected X, found Y" messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a number",
            Value::Str(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }
}

impl Node {
    /// The string, when the node is a string scalar.
    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Str(text) => Some(text),
            _ => None,
        }
    }

    /// The entries, when the node is a mapping.
    pub fn as_map(&self) -> Option<&[(Node, Node)]> {
        match &self.value {
            Value::Map(entries) => Some(entries),
            _ => None,
        }
    }

    /// The items, when the node is a sequence.
    pub fn as_seq(&self) -> Option<&[Node]> {
        match &self.value {
            Value::Seq(items) => Some(items),
            _ => None,
        }
    }

    /// Looks up a string key in a mapping node.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.as_map()?
            .iter()
            .find(|(name, _)| name.as_str() == Some(key))
            .map(|(_, value)| value)
    }

    /// The node as JSON (mapping keys rendered as text), for schema checks and artifacts.
    pub fn to_json(&self) -> serde_json::Value {
        match &self.value {
            Value::Null => serde_json::Value::Null,
            Value::Bool(flag) => serde_json::Value::Bool(*flag),
            Value::Int(number) => serde_json::Value::from(*number),
            Value::Float(number) => serde_json::Number::from_f64(*number)
                .map_or(serde_json::Value::Null, serde_json::Value::Number),
            Value::Str(text) => serde_json::Value::String(text.clone()),
            Value::Seq(items) => items.iter().map(Node::to_json).collect(),
            Value::Map(entries) => serde_json::Value::Object(
                entries
                    .iter()
                    .map(|(key, value)| (key.scalar_text(), value.to_json()))
                    .collect(),
            ),
        }
    }

    /// A scalar rendered as text (used for mapping keys that are not strings).
    pub fn scalar_text(&self) -> String {
        match &self.value {
            Value::Null => "null".to_owned(),
            Value::Bool(flag) => flag.to_string(),
            Value::Int(number) => number.to_string(),
            Value::Float(number) => number.to_string(),
            Value::Str(text) => text.clone(),
            Value::Seq(_) => "[…]".to_owned(),
            Value::Map(_) => "{…}".to_owned(),
        }
    }
}

/// Why a document could not be parsed at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// Where the problem is (1:1 when it concerns the whole file).
    pub pos: Pos,
    /// Stable diagnostic code.
    pub code: &'static str,
    /// What is wrong.
    pub message: String,
    /// What to do.
    pub hint: Option<String>,
}

/// Parses bytes into a node tree, refusing what is not bounded, UTF-8 text YAML.
pub fn parse(bytes: &[u8]) -> Result<Node, ParseError> {
    if bytes.len() > MAX_DOCUMENT_BYTES {
        return Err(ParseError {
            pos: Pos::new(1, 1),
            code: "file-too-large",
            message: format!(
                "the file is {} bytes; workflow files are limited to {} bytes",
                bytes.len(),
                MAX_DOCUMENT_BYTES
            ),
            hint: Some("split the workflow or move large data into files it references".into()),
        });
    }
    let text = decode_text(bytes)?;
    if text
        .lines()
        .all(|line| line.trim().is_empty() || line.trim_start().starts_with('#'))
    {
        return Err(ParseError {
            pos: Pos::new(1, 1),
            code: "empty-document",
            message: "the file is empty".into(),
            hint: Some(
                "a workflow needs workflow_id, version, description, entry_step and steps".into(),
            ),
        });
    }
    let parse_on_thread = || {
        let options = serde_saphyr::options! {
            budget: serde_saphyr::budget! {
                max_depth: MAX_DEPTH,
                flow_nesting_limit: MAX_DEPTH,
                max_nodes: 1_000_000,
                max_events: 4_000_000,
                max_documents: 1,
                max_recorded_anchor_events: 100_000,
                max_recorded_anchor_bytes: 4 * 1024 * 1024,
            },
            with_snippet: false,
            strict_booleans: true,
        };
        serde_saphyr::from_str_with_options::<Node>(text, options)
            .map_err(|error| yaml_error(&error, text))
    };
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("yaml-parser".into())
            .stack_size(PARSER_STACK_BYTES)
            .spawn_scoped(scope, parse_on_thread)
            .map_err(|error| ParseError {
                pos: Pos::new(1, 1),
                code: "read-error",
                message: format!("failed to start the parser thread: {error}"),
                hint: None,
            })?
            .join()
            .unwrap_or_else(|_| {
                Err(ParseError {
                    pos: Pos::new(1, 1),
                    code: "yaml-syntax",
                    message: "the YAML parser failed on this document".into(),
                    hint: Some(
                        "report this file as a bug; it should get a clear diagnostic".into(),
                    ),
                })
            })
    })
}

fn decode_text(bytes: &[u8]) -> Result<&str, ParseError> {
    if let Some(offset) = bytes.iter().position(|byte| *byte == 0) {
        return Err(ParseError {
            pos: position_of_offset(bytes, offset),
            code: "not-text",
            message: "the file is binary (it contains a NUL byte), not YAML text".into(),
            hint: Some("pass the workflow's .yaml file".into()),
        });
    }
    std::str::from_utf8(bytes).map_err(|error| ParseError {
        pos: position_of_offset(bytes, error.valid_up_to()),
        code: "not-text",
        message: "the file is not valid UTF-8 text".into(),
        hint: Some("save the workflow as UTF-8".into()),
    })
}

fn position_of_offset(bytes: &[u8], offset: usize) -> Pos {
    let before = &bytes[..offset.min(bytes.len())];
    let line = before.iter().filter(|byte| **byte == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|byte| *byte == b'\n')
        .map_or(0, |index| index + 1);
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count()
        + 1;
    Pos::new(saturate(line as u64), saturate(column as u64))
}

fn saturate(value: u64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

fn yaml_error(error: &serde_saphyr::Error, text: &str) -> ParseError {
    let pos = error
        .location()
        .filter(|location| location.line() > 0)
        .map_or(Pos::new(1, 1), |location| {
            Pos::new(
                saturate(location.line()),
                saturate(location.column().max(1)),
            )
        });
    let mut message = strip_location_suffix(&error.without_snippet().to_string());
    let lowered = message.to_lowercase();
    let (code, hint) = if lowered.contains("duplicate") {
        if let Some(key) = message
            .strip_prefix("duplicate mapping key: ")
            .and_then(|rest| rest.split(',').next())
        {
            message = format!("key `{key}` appears twice in this mapping");
        }
        (
            "duplicate-key",
            "each key may appear once in a mapping; remove or rename one",
        )
    } else if lowered.contains("budget") || lowered.contains("recursion limit") {
        message = format!(
            "the document exceeds a parsing limit ({})",
            limit_name(&message)
        );
        (
            "yaml-limits",
            "workflows are small documents: nesting depth, alias expansion and document count are bounded",
        )
    } else if line_has_tab_indent(text, pos.line) {
        ("yaml-syntax", "YAML indentation must use spaces, not tabs")
    } else {
        ("yaml-syntax", "fix the YAML syntax at this position")
    };
    ParseError {
        pos,
        code,
        message,
        hint: Some(hint.into()),
    }
}

/// A readable name for the limit a budget message reports.
fn limit_name(message: &str) -> &'static str {
    let breach = message.strip_prefix("budget breached: ").unwrap_or(message);
    let kind = breach.split([' ', '{']).next().unwrap_or_default();
    match kind {
        "RecordedAnchorEvents" | "RecordedAnchorBytes" | "Aliases" | "AliasAnchorRatio" => {
            "alias expansion"
        }
        "Documents" => "one YAML document per file",
        "Depth" | "recursion" => "nesting depth",
        "Nodes" | "Events" => "number of nodes",
        "Anchors" => "number of anchors",
        _ => "size",
    }
}

fn line_has_tab_indent(text: &str, line: u32) -> bool {
    let index = line.saturating_sub(1) as usize;
    let nearby = index.saturating_sub(1)..=index;
    text.lines()
        .enumerate()
        .filter(|(number, _)| nearby.contains(number))
        .any(|(_, content)| content.trim_start_matches(' ').starts_with('\t'))
}

/// serde-saphyr appends " at line X column Y"; the diagnostic carries the position itself.
fn strip_location_suffix(message: &str) -> String {
    let trimmed = match message.rfind(" at line ") {
        Some(index) => &message[..index],
        None => message,
    };
    trimmed.trim().to_owned()
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spanned = Spanned::<Value>::deserialize(deserializer)?;
        let location = spanned.referenced;
        Ok(Node {
            pos: Pos::new(saturate(location.line()), saturate(location.column())),
            value: spanned.value,
        })
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a YAML value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        Value::deserialize(deserializer)
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Int(value))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Value, E> {
        Ok(i64::try_from(value).map_or(Value::Float(value as f64), Value::Int))
    }

    fn visit_i128<E: de::Error>(self, value: i128) -> Result<Value, E> {
        Ok(i64::try_from(value).map_or(Value::Float(value as f64), Value::Int))
    }

    fn visit_u128<E: de::Error>(self, value: u128) -> Result<Value, E> {
        Ok(i64::try_from(value).map_or(Value::Float(value as f64), Value::Int))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Value, E> {
        Ok(Value::Float(value))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Value, E> {
        Ok(Value::Str(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Value, E> {
        Ok(Value::Str(value))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(access.size_hint().unwrap_or(0).min(1024));
        while let Some(item) = access.next_element::<Node>()? {
            items.push(item);
        }
        Ok(Value::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut entries = Vec::with_capacity(access.size_hint().unwrap_or(0).min(1024));
        while let Some(key) = access.next_key::<Node>()? {
            let value = access.next_value::<Node>()?;
            if entries
                .iter()
                .any(|(existing, _): &(Node, Node)| existing.value == key.value)
            {
                return Err(de::Error::custom(format!(
                    "duplicate key `{}` at line {} column {}",
                    key.scalar_text(),
                    key.pos.line,
                    key.pos.column
                )));
            }
            entries.push((key, value));
        }
        Ok(Value::Map(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Node {
        parse(text.as_bytes()).unwrap()
    }

    #[test]
    fn nodes_carry_one_based_positions() {
        let node = parsed("a: 1\nlist:\n  - x\n  - {k: v}\n");
        let list = node.get("list").unwrap().as_seq().unwrap();
        assert_eq!(list[0].pos, Pos::new(3, 5));
        assert_eq!(list[1].get("k").unwrap().as_str(), Some("v"));
        assert_eq!(node.get("a").unwrap().value, Value::Int(1));
    }

    #[test]
    fn empty_and_binary_files_are_refused_with_codes() {
        assert_eq!(parse(b"  \n").unwrap_err().code, "empty-document");
        assert_eq!(parse(b"a: \0").unwrap_err().code, "not-text");
        assert_eq!(parse(b"a: \xff\xfe").unwrap_err().code, "not-text");
    }

    #[test]
    fn duplicate_keys_are_errors_at_the_second_key() {
        let error = parse(b"a: 1\nb: 2\na: 3\n").unwrap_err();
        assert_eq!(error.code, "duplicate-key", "{error:?}");
        assert_eq!(error.pos.line, 3, "{error:?}");
    }
}

#[cfg(test)]
mod hostile_tests {
    use super::*;

    #[test]
    fn an_alias_bomb_stops_at_the_budget() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for level in 1..9 {
            let previous = format!("*a{}", level - 1);
            let items = vec![previous.as_str(); 10].join(", ");
            text.push_str(&format!("a{level}: &a{level} [{items}]\n"));
        }
        let error = parse(text.as_bytes()).unwrap_err();
        assert_eq!(error.code, "yaml-limits", "{error:?}");
    }

    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        for depth in [MAX_DEPTH + 1, 10_000] {
            let flow = "[".repeat(depth) + &"]".repeat(depth);
            assert_eq!(parse(flow.as_bytes()).unwrap_err().code, "yaml-limits");
        }
        let within = "[".repeat(MAX_DEPTH - 1) + &"]".repeat(MAX_DEPTH - 1);
        assert!(parse(within.as_bytes()).is_ok());
        let block: String = (0..200)
            .map(|depth| format!("{}k:\n", " ".repeat(depth)))
            .collect();
        assert_eq!(parse(block.as_bytes()).unwrap_err().code, "yaml-limits");
    }

    #[test]
    fn tabs_and_multiple_documents_are_reported() {
        let tabs = parse(b"steps:\n\t- id: x\n").unwrap_err();
        assert_eq!((tabs.code, tabs.pos.line), ("yaml-syntax", 2));
        assert!(tabs.hint.unwrap().contains("tabs"));
        assert_eq!(parse(b"a: 1\n---\nb: 2\n").unwrap_err().code, "yaml-limits");
    }

    #[test]
    fn block_scalars_start_at_their_first_content_line() {
        let node = parse(b"script: |\n  let x = 1;\n").unwrap();
        assert_eq!(node.get("script").unwrap().pos, Pos::new(2, 3));
    }
}
