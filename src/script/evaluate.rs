//! Evaluation of workflow values: a string that is exactly `${{ EXPR }}` becomes the
//! typed value of EXPR; `${{ EXPR }}` inside a longer string is interpolated as text; `${name}`
//! is plain substitution from the context. Lists and maps are walked, keys are left alone.

use rhai::{Dynamic, Scope};

use super::context::Context;
use super::error::{CodeKind, Origin, ScriptError};
use super::expressions::{NodeList, Piece, is_whole_expression, locate_in, scan};
use super::host::ScriptHost;
use super::value::{dynamic_to_json, json_to_node, to_text};
use crate::document::yaml::{Node, Pos, Value};

/// The name of a value's type in errors, as scripts know it.
fn json_type(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "`()`",
        serde_json::Value::Bool(_) => "bool",
        serde_json::Value::Number(number) if number.is_i64() || number.is_u64() => "int",
        serde_json::Value::Number(_) => "float",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "list",
        serde_json::Value::Object(_) => "map",
    }
}

/// Letters, digits and `_`, not starting with a digit (as `validate` checks written names).
fn is_variable_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|ch: char| ch.is_ascii_digit())
        && name
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

impl ScriptHost {
    /// Evaluates every `${…}` in a YAML value, keeping the types of whole expressions.
    pub fn evaluate_node(&self, node: &Node, context: &Context) -> Result<Node, ScriptError> {
        let value = match &node.value {
            Value::Str(text) => return self.evaluate_string(node.pos, text, context),
            Value::Seq(items) => Value::Seq(
                items
                    .iter()
                    .map(|item| self.evaluate_node(item, context))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Map(entries) => Value::Map(
                entries
                    .iter()
                    .map(|(key, item)| Ok((key.clone(), self.evaluate_node(item, context)?)))
                    .collect::<Result<_, ScriptError>>()?,
            ),
            other => other.clone(),
        };
        Ok(Node {
            pos: node.pos,
            value,
        })
    }

    /// [`ScriptHost::evaluate_node`], as JSON.
    pub fn evaluate_json(
        &self,
        node: &Node,
        context: &Context,
    ) -> Result<serde_json::Value, ScriptError> {
        Ok(self.evaluate_node(node, context)?.to_json())
    }

    /// Evaluates a value that must be a map, such as computed `inputs`: anything else is an error
    /// at the value's YAML position that names `what` and the type it got.
    pub fn evaluate_map(
        &self,
        node: &Node,
        context: &Context,
        what: &str,
    ) -> Result<serde_json::Map<String, serde_json::Value>, ScriptError> {
        match self.evaluate_json(node, context)? {
            serde_json::Value::Object(map) => Ok(map),
            other => Err(self.value_error(
                node.pos,
                format!("{what} must be a map, got {}", json_type(&other)),
            )),
        }
    }

    /// Evaluates an `env` written as one expression: a map of variable names to strings
    /// (numbers and booleans are written as text, as in a written `env`), in the map's order.
    /// A whole value of `()` is no extra environment, and a variable whose value is `()` is
    /// left out.
    pub fn evaluate_env(
        &self,
        node: &Node,
        context: &Context,
    ) -> Result<Vec<(String, String)>, ScriptError> {
        let map = match self.evaluate_json(node, context)? {
            serde_json::Value::Null => return Ok(Vec::new()),
            serde_json::Value::Object(map) => map,
            other => {
                return Err(self.value_error(
                    node.pos,
                    format!("`env` must be a map, got {}", json_type(&other)),
                ));
            }
        };
        let mut env = Vec::new();
        for (name, value) in map {
            if !is_variable_name(&name) {
                return Err(self.value_error(
                    node.pos,
                    format!(
                        "`env` names `{name}`, which is not a valid environment variable name (letters, digits and `_`, not starting with a digit)"
                    ),
                ));
            }
            let what = format!("the `env` value of `{name}`");
            let text = match value {
                serde_json::Value::Null => continue,
                serde_json::Value::String(text) => text,
                serde_json::Value::Number(_) | serde_json::Value::Bool(_) => value.to_string(),
                other => {
                    return Err(self.value_error(
                        node.pos,
                        format!(
                            "`env` must be a map of strings, got {} for `{name}`",
                            json_type(&other)
                        ),
                    ));
                }
            };
            env.push((name, self.argument_text(node.pos, &what, text)?));
        }
        Ok(env)
    }

    /// Evaluates a single-text field of a process, such as a validator's `cwd` or one `env`
    /// value: a string, or a number or boolean written as text. `()` is no value (`None`: the
    /// field is left unset); a list or map is an error at the value's position naming `what`.
    pub fn evaluate_field_text(
        &self,
        node: &Node,
        context: &Context,
        what: &str,
    ) -> Result<Option<String>, ScriptError> {
        match self.evaluate_json(node, context)? {
            serde_json::Value::Null => Ok(None),
            serde_json::Value::String(text) => self.argument_text(node.pos, what, text).map(Some),
            value @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_)) => {
                Ok(Some(value.to_string()))
            }
            other => Err(self.value_error(
                node.pos,
                format!("{what} must be a string, got {}", json_type(&other)),
            )),
        }
    }

    /// Evaluates a list field of a process, such as a validator's `args` or `artifacts`, into
    /// its strings.
    ///
    /// Written as a list, each item is a string (numbers and booleans are written as text), a
    /// list whose items are spliced in, or `()`, which adds nothing. Written as one expression
    /// (`args: "${{ compute_args() }}"`), the value is such a list, one string (a list of one),
    /// or `()` (an empty list: the field is left unset). Anything else is an error at the
    /// value's position naming `what`.
    pub fn evaluate_field_list(
        &self,
        list: &NodeList,
        context: &Context,
        what: &str,
    ) -> Result<Vec<String>, ScriptError> {
        let mut strings = Vec::new();
        match list {
            NodeList::Absent => {}
            NodeList::Expression(node) => match self.evaluate_json(node, context)? {
                serde_json::Value::Null => {}
                serde_json::Value::String(text) => {
                    strings.push(self.argument_text(node.pos, what, text)?);
                }
                serde_json::Value::Array(items) => {
                    for item in items {
                        self.push_item(node.pos, what, item, &mut strings)?;
                    }
                }
                other => {
                    return Err(self.value_error(
                        node.pos,
                        format!(
                            "{what} must be a list of strings (or one string), got {}",
                            json_type(&other)
                        ),
                    ));
                }
            },
            NodeList::Items(nodes) => {
                for node in nodes {
                    match self.evaluate_json(node, context)? {
                        serde_json::Value::Array(items) => {
                            for item in items {
                                self.push_item(node.pos, what, item, &mut strings)?;
                            }
                        }
                        item => self.push_item(node.pos, what, item, &mut strings)?,
                    }
                }
            }
        }
        Ok(strings)
    }

    /// Adds one item of a list field: `()` adds nothing, a list or map is an error.
    fn push_item(
        &self,
        pos: Pos,
        what: &str,
        item: serde_json::Value,
        strings: &mut Vec<String>,
    ) -> Result<(), ScriptError> {
        match item {
            serde_json::Value::Null => {}
            serde_json::Value::String(text) => strings.push(self.argument_text(pos, what, text)?),
            serde_json::Value::Number(_) | serde_json::Value::Bool(_) => {
                strings.push(item.to_string());
            }
            other => {
                return Err(self.value_error(
                    pos,
                    format!(
                        "{what} must be a list of strings, got an item of type {}",
                        json_type(&other)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Text that becomes a process's argument, working directory or environment value: a NUL
    /// byte cannot be passed to a process, so it is an error here, at the value, rather than a
    /// failure to start the process.
    fn argument_text(&self, pos: Pos, what: &str, text: String) -> Result<String, ScriptError> {
        if text.contains('\0') {
            return Err(self.value_error(
                pos,
                format!(
                    "{what} contains a NUL byte, which no program argument, environment value or path can carry"
                ),
            ));
        }
        Ok(text)
    }

    fn value_error(&self, pos: Pos, message: String) -> ScriptError {
        let origin = Origin {
            pos,
            kind: CodeKind::Expression,
            precise: false,
        };
        ScriptError::value(self.file(), &origin, message)
    }

    /// Substitutes and interpolates a string scalar written at `pos`; the result is always text.
    pub fn evaluate_text(
        &self,
        text: &str,
        pos: Pos,
        context: &Context,
    ) -> Result<String, ScriptError> {
        self.interpolate(text, pos, context, true)
    }

    /// Substitutes `${name}` only, as in literal prompt text; a `${{ … }}` there is
    /// an error, as `validate` reports.
    pub fn substitute_names(
        &self,
        text: &str,
        pos: Pos,
        context: &Context,
    ) -> Result<String, ScriptError> {
        self.interpolate(text, pos, context, false)
    }

    fn interpolate(
        &self,
        text: &str,
        pos: Pos,
        context: &Context,
        expressions: bool,
    ) -> Result<String, ScriptError> {
        let mut result = String::with_capacity(text.len());
        let mut from = 0;
        for piece in scan(text) {
            let (start, end, value) = match piece {
                Piece::Substitution { name, offset } => {
                    let origin = self.origin(pos, text, offset);
                    (
                        offset,
                        offset + name.len() + 3,
                        self.substitution(name, &origin, context)?,
                    )
                }
                Piece::Expression { code, offset } => {
                    let origin = self.origin(pos, text, offset);
                    if !expressions {
                        return Err(ScriptError::value(
                            self.file(),
                            &origin,
                            "this text allows `${name}` substitution, not `${{ … }}` expressions",
                        ));
                    }
                    let value = self.evaluate_expression(code, &origin, context)?;
                    let rendered = to_text(&value)
                        .map_err(|message| ScriptError::value(self.file(), &origin, message))?;
                    (offset - 3, offset + code.len() + 2, rendered)
                }
                Piece::Escaped { offset } => (offset, offset + 3, "${".to_owned()),
                Piece::Unclosed { offset } => {
                    return Err(ScriptError::value(
                        self.file(),
                        &self.origin(pos, text, offset),
                        "`${` is not closed",
                    ));
                }
            };
            result.push_str(&text[from..start]);
            result.push_str(&value);
            from = end;
        }
        result.push_str(&text[from..]);
        Ok(result)
    }

    fn substitution(
        &self,
        name: &str,
        origin: &Origin,
        context: &Context,
    ) -> Result<String, ScriptError> {
        context.substitution(name).ok_or_else(|| {
            let mut known = context.substitution_names();
            known.push("params.NAME");
            ScriptError::value(
                self.file(),
                origin,
                format!(
                    "`${{{name}}}` has no value in this run (known: {})",
                    known.join(", ")
                ),
            )
        })
    }

    /// Evaluates one expression whose code starts at `pos` in the workflow file.
    pub fn evaluate_code(
        &self,
        code: &str,
        pos: Pos,
        context: &Context,
    ) -> Result<serde_json::Value, ScriptError> {
        let origin = Origin {
            pos,
            kind: CodeKind::Expression,
            precise: true,
        };
        let value = self.evaluate_expression(code, &origin, context)?;
        dynamic_to_json(&value).map_err(|message| ScriptError::value(self.file(), &origin, message))
    }

    fn evaluate_string(
        &self,
        pos: Pos,
        text: &str,
        context: &Context,
    ) -> Result<Node, ScriptError> {
        if is_whole_expression(text)
            && let [Piece::Expression { code, offset }] = scan(text).as_slice()
        {
            let origin = self.origin(pos, text, *offset);
            let value = self.evaluate_expression(code, &origin, context)?;
            let json = dynamic_to_json(&value)
                .map_err(|message| ScriptError::value(self.file(), &origin, message))?;
            return Ok(json_to_node(&json, pos));
        }
        if !text.contains("${") {
            return Ok(Node {
                pos,
                value: Value::Str(text.to_owned()),
            });
        }
        Ok(Node {
            pos,
            value: Value::Str(self.evaluate_text(text, pos, context)?),
        })
    }

    pub(crate) fn evaluate_expression(
        &self,
        code: &str,
        origin: &Origin,
        context: &Context,
    ) -> Result<Dynamic, ScriptError> {
        if code.trim().is_empty() {
            return Err(ScriptError::value(
                self.file(),
                origin,
                "the expression `${{ }}` is empty",
            ));
        }
        let ast = self.expression(code, origin)?;
        self.run(origin, &ast, &mut Scope::new(), context)
    }

    /// Where byte `offset` of a scalar written at `pos` is in the file.
    fn origin(&self, pos: Pos, text: &str, offset: usize) -> Origin {
        let line = self.lines().get(pos.line.saturating_sub(1) as usize);
        match line.and_then(|line| locate_in(line, pos, text, offset)) {
            Some(located) => Origin {
                pos: located,
                kind: CodeKind::Expression,
                precise: true,
            },
            None => Origin {
                pos,
                kind: CodeKind::Expression,
                precise: false,
            },
        }
    }
}
