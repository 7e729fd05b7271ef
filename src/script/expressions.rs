//! Where `${name}` substitutions and `${{ EXPR }}` expressions are in the strings of a workflow,
//! and where their code is in the file. The workflow's checks and the evaluation of a run both
//! read strings through here, so they agree on what is an expression.

use crate::document::yaml::{Node, Pos};

/// The plain substitution names (besides `params.NAME`).
pub const SUBSTITUTIONS: [&str; 7] = [
    "run_id", "run_dir", "step_id", "step_dir", "worktree", "repo", "base_sha",
];

/// One `${…}` or `${{ … }}` occurrence in a string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece<'t> {
    /// `${name}`.
    Substitution {
        /// The name between the braces.
        name: &'t str,
        /// Byte offset of `$` in the string.
        offset: usize,
    },
    /// `${{ expr }}`.
    Expression {
        /// The code between the double braces, untrimmed.
        code: &'t str,
        /// Byte offset of the code in the string.
        offset: usize,
    },
    /// `$${`: a literal `${` (the three bytes stand for the two).
    Escaped {
        /// Byte offset of the first `$` in the string.
        offset: usize,
    },
    /// An opening `${` or `${{` without its closing brace(s).
    Unclosed {
        /// Byte offset of `$` in the string.
        offset: usize,
    },
}

/// Finds every substitution, expression and escaped `$${` in a string, in order.
///
/// An expression ends at the first `}}` outside the braces and string literals of its code,
/// so `${{ #{a: #{b: 1}} }}` is one expression; when the code's braces do not balance, at the
/// first `}}` (and the code is then reported as it does not compile).
pub fn scan(text: &str) -> Vec<Piece<'_>> {
    let mut pieces = Vec::new();
    let mut from = 0;
    while let Some(found) = text[from..].find("${") {
        let start = from + found;
        if start > from && text.as_bytes()[start - 1] == b'$' {
            pieces.push(Piece::Escaped { offset: start - 1 });
            from = start + 2;
            continue;
        }
        if text[start..].starts_with("${{") {
            let code_start = start + 3;
            match expression_length(&text[code_start..]) {
                Some(length) => {
                    pieces.push(Piece::Expression {
                        code: &text[code_start..code_start + length],
                        offset: code_start,
                    });
                    from = code_start + length + 2;
                }
                None => {
                    pieces.push(Piece::Unclosed { offset: start });
                    break;
                }
            }
        } else {
            let name_start = start + 2;
            match text[name_start..].find('}') {
                Some(length) => {
                    pieces.push(Piece::Substitution {
                        name: &text[name_start..name_start + length],
                        offset: start,
                    });
                    from = name_start + length + 1;
                }
                None => {
                    pieces.push(Piece::Unclosed { offset: start });
                    break;
                }
            }
        }
    }
    pieces
}

/// The length of the code before the `}}` that closes an expression (see [`scan`]).
fn expression_length(rest: &str) -> Option<usize> {
    let bytes = rest.as_bytes();
    let mut depth = 0usize;
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            quote @ (b'"' | b'\'' | b'`') => {
                // A string, character or template literal: skip to its closing quote.
                let mut end = index + 1;
                while end < bytes.len() && bytes[end] != quote {
                    end += if bytes[end] == b'\\' && quote != b'`' {
                        2
                    } else {
                        1
                    };
                }
                if end >= bytes.len() {
                    break;
                }
                index = end;
            }
            b'{' => depth += 1,
            b'}' if depth > 0 => depth -= 1,
            b'}' if bytes.get(index + 1) == Some(&b'}') => return Some(index),
            _ => {}
        }
        index += 1;
    }
    rest.find("}}")
}

/// A list written out, or one `${{ EXPR }}` whose value is the list.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum NodeList {
    /// `args: [a, b]`.
    Items(Vec<Node>),
    /// `args: "${{ compute_args() }}"`.
    Expression(Node),
    /// Not given.
    #[default]
    Absent,
}

impl NodeList {
    /// The nodes to check or expand: the items, or the one expression.
    pub fn nodes(&self) -> &[Node] {
        match self {
            NodeList::Items(items) => items,
            NodeList::Expression(node) => std::slice::from_ref(node),
            NodeList::Absent => &[],
        }
    }
}

/// True when a string is exactly one `${{ EXPR }}`, which keeps the expression's type.
pub fn is_whole_expression(text: &str) -> bool {
    let trimmed = text.trim();
    trimmed.starts_with("${{")
        && matches!(
            scan(trimmed).as_slice(),
            [Piece::Expression { code, offset: 3 }] if 3 + code.len() + 2 == trimmed.len()
        )
}

/// The position of byte `offset` of a scalar that starts at `pos` on source line `line`, when
/// the scalar is on that one line (plain or quoted without escapes before the offset).
pub(crate) fn locate_in(line: &str, pos: Pos, text: &str, offset: usize) -> Option<Pos> {
    let start: usize = line
        .chars()
        .take(pos.column.saturating_sub(1) as usize)
        .map(char::len_utf8)
        .sum();
    let rest = line.get(start..)?;
    let quoted = rest.starts_with(['"', '\'']);
    let written = if quoted { &rest[1..] } else { rest };
    let first_line = text.lines().next().unwrap_or_default();
    if text.contains('\n') || offset > first_line.len() || !written.starts_with(first_line) {
        return None;
    }
    let extra = u32::from(quoted);
    Some(Pos::new(
        pos.line,
        pos.column + extra + char_count(&text[..offset]),
    ))
}

pub(crate) fn char_count(text: &str) -> u32 {
    u32::try_from(text.chars().count()).unwrap_or(u32::MAX)
}

/// Where the first character of `code`, the value of a scalar written at `pos`, is in the file
/// whose `lines` are given, when each line of the code is written as it is in the source from
/// there: a block scalar (`|`; its position is its first line with content, so empty lines
/// before it are counted back), or a plain or quoted scalar on one line without escapes. Rhai's
/// positions inside the code then map onto the file with [`offset_pos`]. `None` when the
/// scalar's text differs from its value (escapes, folded lines, a quoted scalar over several
/// lines): a position inside it can only be the scalar's own.
pub(crate) fn code_start<S: AsRef<str>>(lines: &[S], pos: Pos, code: &str) -> Option<Pos> {
    let first = lines.get(pos.line.checked_sub(1)? as usize)?.as_ref();
    let indent = pos.column.saturating_sub(1) as usize;
    let quoted = first
        .chars()
        .nth(indent)
        .is_some_and(|ch| ch == '"' || ch == '\'');
    let start = if quoted {
        Pos::new(pos.line, pos.column + 1)
    } else {
        let empty = code.lines().take_while(|line| line.is_empty()).count();
        Pos::new(pos.line.checked_sub(saturate(empty))?, pos.column)
    };
    for (index, text) in code.lines().enumerate() {
        let number = (start.line as usize - 1).checked_add(index)?;
        let source = lines.get(number)?.as_ref();
        let skip = (start.column as usize).saturating_sub(1);
        let written = source
            .char_indices()
            .nth(skip)
            .map_or("", |(byte, _)| &source[byte..]);
        let same = if text.is_empty() {
            written.trim().is_empty()
        } else {
            written.starts_with(text)
        };
        if !same {
            return None;
        }
    }
    Some(start)
}

fn saturate(count: usize) -> u32 {
    u32::try_from(count).unwrap_or(u32::MAX)
}

/// Maps a Rhai position (1-based line and column inside the code) onto the file.
pub(crate) fn offset_pos(start: Pos, line: Option<usize>, column: Option<usize>) -> Pos {
    let line = u32::try_from(line.unwrap_or(1)).unwrap_or(1).max(1);
    let column = u32::try_from(column.unwrap_or(1)).unwrap_or(1).max(1);
    if line == 1 {
        Pos::new(start.line, start.column + column - 1)
    } else {
        Pos::new(start.line + line - 1, start.column + column - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_finds_substitutions_expressions_and_unclosed_openings() {
        assert_eq!(
            scan("a ${run_id} b ${{ params.x + 1 }} c"),
            vec![
                Piece::Substitution {
                    name: "run_id",
                    offset: 2
                },
                Piece::Expression {
                    code: " params.x + 1 ",
                    offset: 17
                },
            ]
        );
        assert_eq!(scan("x ${{ 1 + 2"), vec![Piece::Unclosed { offset: 2 }]);
        assert_eq!(
            scan("$${HOME} and $$${run_id}"),
            vec![Piece::Escaped { offset: 0 }, Piece::Escaped { offset: 14 }]
        );
        assert_eq!(scan("x ${run_id"), vec![Piece::Unclosed { offset: 2 }]);
        assert!(scan("plain $HOME text").is_empty());
    }

    /// An expression ends at the `}}` outside its own braces and strings.
    #[test]
    fn an_expression_ends_at_the_braces_that_close_it() {
        let code = |text: &'static str| match scan(text).as_slice() {
            [Piece::Expression { code, .. }] => *code,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            code("${{ to_json(#{a: #{b: 1}}) }}"),
            " to_json(#{a: #{b: 1}}) "
        );
        assert_eq!(code("${{ #{a: 1}}}"), " #{a: 1}");
        assert_eq!(code("${{ \"}}\" + '}' + `}}` }}"), " \"}}\" + '}' + `}}` ");
        // Unbalanced: the first `}}`, as before (the code then does not compile).
        assert_eq!(code("${{ { }} x"), " { ");
        assert_eq!(code("${{ \"}} x"), " \"");
    }
}
