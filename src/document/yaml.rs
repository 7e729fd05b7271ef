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

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt;

use saphyr_parser::{Event, ScalarStyle, ScanError};

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

fn parse_tree(bytes: &[u8], max_nodes: usize) -> (Option<Node>, Vec<ParseError>) {
    let mut builder = TreeBuilder {
        max_nodes,
        ..TreeBuilder::default()
    };
    let result = build_tree(bytes, &mut builder);
    let mut errors = std::mem::take(&mut builder.problems);
    let root = match result {
        Ok(root) => Some(root),
        Err(error) => {
            errors.push(error);
            None
        }
    };
    errors.sort_by_key(|error| error.pos);
    (root, errors)
}

fn build_tree(bytes: &[u8], builder: &mut TreeBuilder) -> Result<Node, ParseError> {
    if bytes.len() > MAX_DOCUMENT_BYTES {
        return Err(ParseError::new(
            Pos::new(1, 1),
            "file-too-large",
            format!(
                "the file is {} bytes; workflow files are limited to {} bytes",
                bytes.len(),
                MAX_DOCUMENT_BYTES
            ),
            "split the workflow or move large data into files it references",
        ));
    }
    let text = decode_text(bytes)?;
    if text
        .lines()
        .all(|line| line.trim().is_empty() || line.trim_start().starts_with('#'))
    {
        return Err(ParseError::new(
            Pos::new(1, 1),
            "empty-document",
            "the file is empty",
            "a workflow needs workflow_id, version, description, entry_step and steps",
        ));
    }
    builder.aliased = aliased_anchors(text);
    let lines = saturate(text.lines().count() as u64);
    for item in saphyr_parser::Parser::new_from_str(text) {
        let (event, span) = item.map_err(|error| scan_error(&error, text))?;
        let mut pos = Pos::new(
            saturate(span.start.line() as u64),
            saturate(span.start.col() as u64 + 1),
        );
        if pos.line > lines {
            // The end of the input (an empty document, a missing value at the end) is past
            // the last line: name the end of the last line, a place in the file.
            pos = within_text(text, pos);
        }
        builder.event(event, pos)?;
    }
    builder.root.take().ok_or_else(|| {
        ParseError::new(
            Pos::new(1, 1),
            "empty-document",
            "the file holds no YAML document",
            "a workflow is one YAML mapping",
        )
    })
}

/// The anchors some alias refers to, found by a first pass over the parser's events (only when
/// the text has both an `&` and a `*`): the tree builder keeps a copy of these anchors only, so
/// an anchor nothing refers to costs nothing (nested anchors were each copied with their whole
/// subtree, depth × nodes). The pass stops after as many aliases as the alias budget allows,
/// since the builder refuses the document at the next one anyway.
fn aliased_anchors(text: &str) -> HashSet<usize> {
    let mut aliased = HashSet::new();
    if !(text.contains('&') && text.contains('*')) {
        return aliased;
    }
    let mut aliases = 0usize;
    for item in saphyr_parser::Parser::new_from_str(text) {
        // A syntax error is reported by the second pass, at the same place.
        let Ok((Event::Alias(id), _)) = item else {
            if item.is_err() {
                break;
            }
            continue;
        };
        aliased.insert(id);
        aliases += 1;
        if aliases > MAX_ALIAS_NODES {
            break;
        }
    }
    aliased
}

/// A collection being built.
enum Frame {
    Seq {
        pos: Pos,
        anchor: usize,
        /// The node count before this collection was opened: its size is the difference when
        /// it closes.
        start: usize,
        items: Vec<Node>,
    },
    Map {
        pos: Pos,
        anchor: usize,
        /// As for `Seq`.
        start: usize,
        entries: Vec<(Node, Node)>,
        key: Option<Node>,
        seen: Option<HashSet<String>>,
    },
}

/// What an alias copies: the anchored node and its size in nodes, or only its size when it
/// did not fit in the alias budget (an alias to it would exceed the budget).
type Anchored = (Option<Node>, usize);

/// Turns parser events into a tree without recursion, enforcing the limits.
#[derive(Default)]
struct TreeBuilder {
    stack: Vec<Frame>,
    /// The anchors an alias refers to (see [`aliased_anchors`]); no other is kept.
    aliased: HashSet<usize>,
    anchors: HashMap<usize, Anchored>,
    /// Nodes held in `anchors`: at most [`MAX_ALIAS_NODES`].
    anchored_nodes: usize,
    root: Option<Node>,
    documents: usize,
    nodes: usize,
    max_nodes: usize,
    alias_nodes: usize,
    /// Problems that do not stop the parse: keys that repeat one of their mapping (the later
    /// entry is left out of the tree), integers out of range (kept as the nearest 64-bit one).
    problems: Vec<ParseError>,
}

impl TreeBuilder {
    fn event(&mut self, event: Event<'_>, pos: Pos) -> Result<(), ParseError> {
        match event {
            Event::DocumentStart(..) => {
                self.documents += 1;
                if self.documents > 1 {
                    return Err(ParseError::limit(pos, "one YAML document per file"));
                }
            }
            Event::Scalar(text, style, anchor, tag) => {
                if let Some(problem) = out_of_range(&text, style, tag.as_deref(), pos) {
                    self.problems.push(problem);
                }
                let value = resolve_scalar(text, style, tag.as_deref(), pos)?;
                self.complete(Node { pos, value }, anchor, 1)?;
            }
            Event::SequenceStart(anchor, _) => self.open(
                Frame::Seq {
                    pos,
                    anchor,
                    start: self.nodes,
                    items: Vec::new(),
                },
                pos,
            )?,
            Event::MappingStart(anchor, _) => {
                self.open(
                    Frame::Map {
                        pos,
                        anchor,
                        start: self.nodes,
                        entries: Vec::new(),
                        key: None,
                        seen: None,
                    },
                    pos,
                )?;
            }
            Event::SequenceEnd | Event::MappingEnd => self.close(pos)?,
            Event::Alias(id) => {
                let (anchored, size) = self.anchors.get(&id).ok_or_else(|| {
                    ParseError::new(
                        pos,
                        "yaml-syntax",
                        "this alias refers to no anchor",
                        "define `&name` before using `*name`",
                    )
                })?;
                let size = *size;
                self.alias_nodes = self.alias_nodes.saturating_add(size);
                let Some(anchored) = anchored
                    .as_ref()
                    .filter(|_| self.alias_nodes <= MAX_ALIAS_NODES)
                else {
                    return Err(ParseError::limit(pos, "alias expansion"));
                };
                // The copy is where the alias is written, down to its last node: a problem in
                // it is reported at the alias (as well as at the anchor, when it is there too).
                let node = relocated(anchored, pos);
                self.complete(node, 0, size)?;
            }
            _ => {}
        }
        Ok(())
    }

    fn open(&mut self, frame: Frame, pos: Pos) -> Result<(), ParseError> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(ParseError::limit(pos, "nesting depth"));
        }
        self.count(pos, 1)?;
        self.stack.push(frame);
        Ok(())
    }

    fn close(&mut self, pos: Pos) -> Result<(), ParseError> {
        let (node, anchor, start) = match self.stack.pop() {
            Some(Frame::Seq {
                pos,
                anchor,
                start,
                items,
            }) => (
                Node {
                    pos,
                    value: Value::Seq(items),
                },
                anchor,
                start,
            ),
            Some(Frame::Map {
                pos,
                anchor,
                start,
                entries,
                ..
            }) => (
                Node {
                    pos,
                    value: Value::Map(entries),
                },
                anchor,
                start,
            ),
            None => {
                return Err(ParseError::new(
                    pos,
                    "yaml-syntax",
                    "unbalanced collection end",
                    "fix the YAML structure",
                ));
            }
        };
        // The collection's own node was counted when it opened, and so was everything in it
        // (entries left out as duplicate keys too: the size errs on the large side).
        let size = self.nodes - start;
        self.place(node, anchor, size)
    }

    fn count(&mut self, pos: Pos, size: usize) -> Result<(), ParseError> {
        self.nodes = self.nodes.saturating_add(size);
        if self.nodes > self.max_nodes {
            return Err(ParseError::limit(pos, "number of nodes"));
        }
        Ok(())
    }

    /// Counts a finished scalar or alias copy of `size` nodes, then places it.
    fn complete(&mut self, node: Node, anchor: usize, size: usize) -> Result<(), ParseError> {
        self.count(node.pos, size)?;
        self.place(node, anchor, size)
    }

    /// Places a finished node of `size` nodes (already counted): as the root, a sequence item,
    /// a mapping key or a value. An anchored node is copied only when an alias refers to it,
    /// and only while the copies fit in the alias budget.
    fn place(&mut self, node: Node, anchor: usize, size: usize) -> Result<(), ParseError> {
        if anchor != 0 && self.aliased.contains(&anchor) {
            let fits = self.anchored_nodes.saturating_add(size) <= MAX_ALIAS_NODES;
            if fits {
                self.anchored_nodes += size;
            }
            self.anchors
                .insert(anchor, (fits.then(|| node.clone()), size));
        }
        match self.stack.last_mut() {
            None => self.root = Some(node),
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map {
                entries, key, seen, ..
            }) => match key.take() {
                None => *key = Some(node),
                Some(name) => match check_duplicate(&name, entries, seen) {
                    Ok(()) => entries.push((name, node)),
                    Err(duplicate) => self.problems.push(duplicate),
                },
            },
        }
        Ok(())
    }
}

/// A copy of `node` with every position in it set to `pos` (recursion bounded by the depth
/// cap; the copy by the alias budget).
fn relocated(node: &Node, pos: Pos) -> Node {
    let value = match &node.value {
        Value::Seq(items) => Value::Seq(items.iter().map(|item| relocated(item, pos)).collect()),
        Value::Map(entries) => Value::Map(
            entries
                .iter()
                .map(|(key, value)| (relocated(key, pos), relocated(value, pos)))
                .collect(),
        ),
        scalar => scalar.clone(),
    };
    Node { pos, value }
}

/// Small mappings are searched; large ones keep a set of their keys.
fn check_duplicate(
    key: &Node,
    entries: &[(Node, Node)],
    seen: &mut Option<HashSet<String>>,
) -> Result<(), ParseError> {
    const SEARCH_LIMIT: usize = 16;
    let duplicate = if entries.len() < SEARCH_LIMIT {
        entries
            .iter()
            .any(|(existing, _)| existing.value == key.value)
    } else {
        let set = seen.get_or_insert_with(|| {
            entries
                .iter()
                .map(|(existing, _)| key_identity(existing))
                .collect()
        });
        !set.insert(key_identity(key))
    };
    if duplicate {
        return Err(ParseError::new(
            key.pos,
            "duplicate-key",
            format!("key `{}` appears twice in this mapping", key.scalar_text()),
            "each key may appear once in a mapping; remove or rename one",
        ));
    }
    Ok(())
}

fn key_identity(node: &Node) -> String {
    format!("{}:{}", node.value.kind_name(), node.scalar_text())
}

const CORE_TAG_PREFIX: &str = "tag:yaml.org,2002:";

/// YAML 1.2 core-schema resolution of a scalar (plain scalars get types; quoted ones are text).
fn resolve_scalar(
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
fn out_of_range(
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

fn decode_text(bytes: &[u8]) -> Result<&str, ParseError> {
    // UTF-16 text is full of NUL bytes: say what it is rather than calling it binary.
    if bytes.starts_with(&[0xFF, 0xFE]) || bytes.starts_with(&[0xFE, 0xFF]) {
        return Err(ParseError::new(
            Pos::new(1, 1),
            "not-text",
            "the file is UTF-16 text (it starts with a UTF-16 byte order mark); workflows are UTF-8",
            "save the workflow as UTF-8 (in most editors: \"Save with encoding\" → UTF-8)",
        ));
    }
    if let Some(offset) = bytes.iter().position(|byte| *byte == 0) {
        return Err(ParseError::new(
            position_of_offset(bytes, offset),
            "not-text",
            "the file is binary (it contains a NUL byte), not YAML text",
            "pass the workflow's .yaml file",
        ));
    }
    std::str::from_utf8(bytes).map_err(|error| {
        ParseError::new(
            position_of_offset(bytes, error.valid_up_to()),
            "not-text",
            "the file is not valid UTF-8 text",
            "save the workflow as UTF-8",
        )
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

fn scan_error(error: &ScanError, text: &str) -> ParseError {
    let marker = error.marker();
    let pos = within_text(
        text,
        Pos::new(
            saturate(marker.line() as u64).max(1),
            saturate(marker.col() as u64 + 1),
        ),
    );
    let message = error.info();
    if message.contains("recursion limit") || message.contains("nesting") {
        return ParseError::limit(pos, "nesting depth");
    }
    // The scanner reports a tab where the token before it started, or the token after it:
    // point at the tab itself.
    let at_tab = if message.contains("tab") {
        tab_before(text, pos).or_else(|| tab_after(text, pos))
    } else {
        let before = Pos::new(pos.line, pos.column.saturating_sub(1).max(1));
        tab_after(text, before).filter(|tab| *tab == before)
    };
    let pos = at_tab.unwrap_or(pos);
    let hint = if at_tab.is_some() || line_has_tab_indent(text, pos.line) {
        "YAML indentation and separation must use spaces, not tabs: replace the tab with spaces"
    } else {
        "fix the YAML syntax at this position"
    };
    ParseError::new(pos, "yaml-syntax", message, hint)
}

/// The parser reports an unexpected end of input on the line after the last one; the
/// position is moved to the end of the last line, so it names a place in the file.
fn within_text(text: &str, pos: Pos) -> Pos {
    let Some(last) = text.lines().last() else {
        return Pos::new(1, 1);
    };
    let lines = saturate(text.lines().count() as u64);
    if pos.line <= lines {
        return pos;
    }
    Pos::new(lines, saturate(last.chars().count() as u64 + 1))
}

/// The last tab of `pos`'s line at or before it.
fn tab_before(text: &str, pos: Pos) -> Option<Pos> {
    let content = text.lines().nth(pos.line.checked_sub(1)? as usize)?;
    let column = content
        .chars()
        .take(pos.column as usize)
        .enumerate()
        .filter(|(_, c)| *c == '\t')
        .last()?
        .0;
    Some(Pos::new(pos.line, saturate(column as u64 + 1)))
}

/// The first tab at or after `pos`, within that line and the next two.
fn tab_after(text: &str, pos: Pos) -> Option<Pos> {
    let first = pos.line.saturating_sub(1) as usize;
    text.lines()
        .enumerate()
        .skip(first)
        .take(3)
        .find_map(|(index, content)| {
            let skip = if index == first {
                pos.column.saturating_sub(1) as usize
            } else {
                0
            };
            let column = content.chars().skip(skip).position(|c| c == '\t')? + skip;
            Some(Pos::new(
                saturate(index as u64 + 1),
                saturate(column as u64 + 1),
            ))
        })
}

fn line_has_tab_indent(text: &str, line: u32) -> bool {
    let index = line.saturating_sub(1) as usize;
    let nearby = index.saturating_sub(1)..=index;
    text.lines()
        .enumerate()
        .filter(|(number, _)| nearby.contains(number))
        .any(|(_, content)| content.trim_start_matches(' ').starts_with('\t'))
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

#[cfg(test)]
mod hostile_tests {
    use super::*;

    #[test]
    fn an_alias_bomb_stops_at_the_budget() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for level in 1..9 {
            let previous = format!("*a{}", level - 1);
            let items = [previous.as_str(); 10].join(", ");
            text.push_str(&format!("a{level}: &a{level} [{items}]\n"));
        }
        let error = parse(text.as_bytes()).unwrap_err();
        assert_eq!(error.code, "yaml-limits", "{error:?}");
    }

    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        for depth in [MAX_DEPTH + 1, 10_000] {
            let flow = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            assert_eq!(parse(flow.as_bytes()).unwrap_err().code, "yaml-limits");
        }
        let within = format!("{}{}", "[".repeat(MAX_DEPTH - 1), "]".repeat(MAX_DEPTH - 1));
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

    /// The builder after parsing `text`, to look at what it kept.
    fn built(text: &str) -> TreeBuilder {
        let mut builder = TreeBuilder {
            max_nodes: MAX_NODES,
            ..TreeBuilder::default()
        };
        build_tree(text.as_bytes(), &mut builder).unwrap();
        builder
    }

    #[test]
    fn anchors_no_alias_refers_to_are_not_copied() {
        let mut text = String::from("x: ");
        for level in 0..30 {
            text.push_str(&format!("&a{level} {{k{level}: "));
        }
        text.push_str("[1, 2, 3]");
        text.push_str(&"}".repeat(30));
        text.push_str("\nglob: 'src/**'\n");
        let builder = built(&text);
        assert!(builder.anchors.is_empty());
        assert_eq!(builder.anchored_nodes, 0);
        // Only the anchor used is kept, with its size.
        let builder = built("a: &a [1, 2]\nb: &b {k: v}\nc: *b\n");
        assert_eq!(builder.anchors.len(), 1);
        assert_eq!(
            builder.anchors[&builder.aliased.iter().copied().next().unwrap()].1,
            3
        );
        assert_eq!(builder.anchored_nodes, 3);
    }

    #[test]
    fn nested_anchors_that_are_all_aliased_stay_within_the_alias_budget() {
        // Every anchor is used: the copies kept are bounded by the alias budget, and an alias
        // to one that did not fit is refused as alias expansion, at the alias.
        let mut text = String::from("x: ");
        for level in 0..30 {
            text.push_str(&format!("&a{level} {{k{level}: "));
        }
        text.push_str(&format!("[{}]", vec!["1"; MAX_ALIAS_NODES].join(",")));
        text.push_str(&"}".repeat(30));
        text.push('\n');
        for level in 0..30 {
            text.push_str(&format!("y{level}: *a{level}\n"));
        }
        let mut builder = TreeBuilder {
            max_nodes: MAX_NODES,
            ..TreeBuilder::default()
        };
        let error = build_tree(text.as_bytes(), &mut builder).unwrap_err();
        assert_eq!(
            (error.code, error.pos.line),
            ("yaml-limits", 2),
            "{error:?}"
        );
        assert!(builder.anchored_nodes <= MAX_ALIAS_NODES);
        assert!(builder.anchors.values().all(|(node, _)| node.is_none()));
    }

    #[test]
    fn block_scalars_start_at_their_first_content_line() {
        let node = parse(b"script: |\n  let x = 1;\n").unwrap();
        assert_eq!(node.get("script").unwrap().pos, Pos::new(2, 3));
    }
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
