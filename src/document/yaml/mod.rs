//! A YAML document as a tree of nodes that each know their line and column.
//!
//! Workflows are decoded from this tree rather than straight into typed structs so that one
//! pass can report *every* problem (an unknown key here, a wrong type there) with its position,
//! instead of stopping at the first one as a serde derive would.
//!
//! The tree is built from the events of `saphyr-parser` (the saphyr project's YAML 1.2 event
//! parser) without recursion: serde's recursive descent with spans cost more than twice the
//! parse itself and deep stacks. Parsing is bounded: a size cap, a nesting cap, one
//! document per file, and a cap on the nodes that aliases may expand to (alias bombs).

use std::fmt;

use builder::parse_tree;

mod builder;
mod scalar;
mod source;

/// The largest workflow file accepted, in bytes.
pub const MAX_DOCUMENT_BYTES: usize = 8 * 1024 * 1024;

/// How deeply collections may nest. A workflow needs about ten levels; the cap also bounds
/// every later recursive walk of the tree.
pub const MAX_DEPTH: usize = 32;

/// The most nodes a document may hold (a 10,000-step workflow has about 300,000).
pub const MAX_NODES: usize = 1_000_000;

/// The most nodes aliases may copy in all: legitimate workflows alias little, and an alias
/// bomb is stopped long before it costs memory.
pub const MAX_ALIAS_NODES: usize = 100_000;

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

    /// The string items, when the node is a sequence (items of other kinds are skipped).
    pub fn string_items(&self) -> Option<Vec<String>> {
        Some(
            self.as_seq()?
                .iter()
                .filter_map(|item| item.as_str().map(str::to_owned))
                .collect(),
        )
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

impl ParseError {
    fn new(pos: Pos, code: &'static str, message: impl Into<String>, hint: &str) -> Self {
        Self {
            pos,
            code,
            message: message.into(),
            hint: Some(hint.to_owned()),
        }
    }

    fn limit(pos: Pos, what: &str) -> Self {
        Self::new(
            pos,
            "yaml-limits",
            format!("the document exceeds a parsing limit ({what})"),
            "workflows are small documents: nesting depth, alias expansion and document count are bounded",
        )
    }
}

/// Parses bytes into a node tree, refusing what is not bounded, UTF-8 text YAML.
pub fn parse(bytes: &[u8]) -> Result<Node, ParseError> {
    parse_with_node_limit(bytes, MAX_NODES)
}

/// [`parse`] with at most `max_nodes` nodes (keys count, aliases count what they expand to):
/// the limit is checked as the tree grows, so a document over it fails before it is built.
pub fn parse_with_node_limit(bytes: &[u8], max_nodes: usize) -> Result<Node, ParseError> {
    let (root, mut errors) = parse_tree(bytes, max_nodes);
    match root {
        Some(root) if errors.is_empty() => Ok(root),
        _ => Err(errors.remove(0)),
    }
}

/// Every problem of a document at once, in source order: a duplicate key does not stop the
/// parse (the first of its entries is kept, so the tree can still be checked), and the tree is
/// returned unless a problem stopped the parse.
pub fn parse_reporting_all(bytes: &[u8]) -> (Option<Node>, Vec<ParseError>) {
    parse_tree(bytes, MAX_NODES)
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
    fn an_error_at_the_end_of_input_is_placed_on_the_last_line() {
        let error = parse(b"a: [1").unwrap_err();
        assert_eq!(error.pos, Pos::new(1, 6), "{error:?}");
        let error = parse(b"script: |\n  x\n1e999").unwrap_err();
        assert!(error.pos.line <= 3, "{error:?}");
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

    #[test]
    fn a_tab_error_points_at_the_tab() {
        let error = parse(b"steps:\n  - id: a\n\topcode: STOP\n").unwrap_err();
        assert_eq!(
            (error.code, error.pos),
            ("yaml-syntax", Pos::new(3, 1)),
            "{error:?}"
        );
        assert!(error.hint.unwrap().contains("spaces, not tabs"));
        let error = parse(b"steps:\n\t- id: a\n").unwrap_err();
        assert_eq!(error.pos, Pos::new(2, 1), "{error:?}");
        let error = parse(b"a: 1\nb:\tx\n").unwrap_err();
        assert_eq!(error.pos, Pos::new(2, 3), "{error:?}");
    }

    #[test]
    fn every_duplicate_key_is_reported_and_the_first_entry_kept() {
        let text = b"a: 1\nb:\n  c: 1\n  c: 2\na: 3\nd: [x]\n";
        let (root, errors) = parse_reporting_all(text);
        let found: Vec<(&str, u32)> = errors
            .iter()
            .map(|error| (error.code, error.pos.line))
            .collect();
        assert_eq!(found, [("duplicate-key", 4), ("duplicate-key", 5)]);
        let root = root.expect("the tree is still built");
        assert_eq!(
            root.get("a").map(|node| node.value.clone()),
            Some(Value::Int(1))
        );
        assert!(root.get("d").is_some());
        // A problem that stops the parse comes with the duplicates found before it.
        let (root, errors) = parse_reporting_all(b"a: 1\na: 2\nb: [\n");
        assert!(root.is_none());
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert_eq!(errors[0].code, "duplicate-key");
    }

    /// Integers that do not fit in 64 bits were strings; now they are reported where they
    /// are, and kept as integers (the nearest 64-bit one) for the checks that follow. Quoted,
    /// they are text.
    #[test]
    fn integers_out_of_range_are_reported_and_stay_integers() {
        let text = b"a: 99999999999999999999\nb: -99999999999999999999\nc: 0xFFFFFFFFFFFFFFFFFF\nd: \"99999999999999999999\"\ne: 9223372036854775807\n";
        let (root, errors) = parse_reporting_all(text);
        let found: Vec<(&str, u32, u32)> = errors
            .iter()
            .map(|error| (error.code, error.pos.line, error.pos.column))
            .collect();
        assert_eq!(
            found,
            [
                ("invalid-value", 1, 4),
                ("invalid-value", 2, 4),
                ("invalid-value", 3, 4)
            ]
        );
        assert_eq!(
            errors[0].message,
            "the integer `99999999999999999999` is out of range (it does not fit in 64 bits)"
        );
        let root = root.expect("the tree is still built");
        let value = |key: &str| root.get(key).map(|node| node.value.clone());
        assert_eq!(value("a"), Some(Value::Int(i64::MAX)));
        assert_eq!(value("b"), Some(Value::Int(i64::MIN)));
        assert_eq!(
            value("d"),
            Some(Value::Str("99999999999999999999".to_owned()))
        );
        assert_eq!(value("e"), Some(Value::Int(i64::MAX)));
        assert!(parse(b"n: 99999999999999999999\n").is_err());
    }
}
