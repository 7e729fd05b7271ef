//! Building the tree from the parser's events, without recursion, within the caps on
//! nesting, nodes and alias copies.

use std::collections::{HashMap, HashSet};

use saphyr_parser::Event;

use super::scalar::{out_of_range, resolve_scalar};
use super::source::{decode_text, saturate, scan_error, within_text};
use super::*;

pub(super) fn parse_tree(bytes: &[u8], max_nodes: usize) -> (Option<Node>, Vec<ParseError>) {
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
pub(super) fn aliased_anchors(text: &str) -> HashSet<usize> {
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
pub(super) struct TreeBuilder {
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
