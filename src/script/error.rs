//! Script errors that say where: the workflow file, the YAML line and column of the code that
//! failed, the Rhai position inside that code, and the chain of function calls that led there.
//!
//! Rhai reports positions relative to the code it compiled; `Origin` records where each piece
//! of code starts in the workflow so positions translate back to the file the author edits.

use std::fmt;

use rhai::{EvalAltResult, ParseError, Position};

use crate::document::yaml::Pos;

/// The AST source name of the workflow's `script`.
pub(crate) const SCRIPT_SOURCE: &str = "workflow script";
/// What an evaluation stopped by its deadline carries.
pub(crate) const DEADLINE_TOKEN: &str = "deadline";
/// What an evaluation stopped by the memory budget carries.
pub(crate) const MEMORY_TOKEN: &str = "memory";

/// The AST source name of a `${{ … }}` expression or a hook call.
pub(crate) const EXPRESSION_SOURCE: &str = "workflow expression";

/// Which piece of workflow code failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeKind {
    /// The workflow's `script` module.
    Script,
    /// A `${{ … }}` expression.
    Expression,
    /// A function the host calls, such as a policy `check`.
    Hook,
}

impl fmt::Display for CodeKind {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            CodeKind::Script => "script",
            CodeKind::Expression => "expression",
            CodeKind::Hook => "hook",
        })
    }
}

/// Where workflow code starts in the YAML file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Origin {
    /// Line and column of the code's first character (or of its scalar, when not `precise`).
    pub pos: Pos,
    /// What the code is.
    pub kind: CodeKind,
    /// Whether Rhai positions can be added to `pos` (false for code the host wrote itself).
    pub precise: bool,
}

impl Origin {
    /// Where the workflow's `script`, read from a file of `lines`, starts: Rhai's positions map
    /// onto the file when its scalar is written as its value is (a `|` block, whose empty first
    /// lines count too); otherwise (escapes, folded lines) every position is the scalar's own.
    pub(crate) fn of_script<S: AsRef<str>>(
        lines: &[S],
        script: &crate::document::at::At<String>,
    ) -> Self {
        let start = super::expressions::code_start(lines, script.pos, &script.value);
        Origin {
            pos: start.unwrap_or(script.pos),
            kind: CodeKind::Script,
            precise: start.is_some(),
        }
    }

    /// The file position of a Rhai position inside this code.
    fn map(&self, position: Position) -> Pos {
        if !self.precise || position.is_none() {
            return self.pos;
        }
        super::expressions::offset_pos(self.pos, position.line(), position.position())
    }
}

/// Where an error happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The workflow file, as shown to the user.
    pub file: String,
    /// Line and column in the workflow file.
    pub pos: Pos,
    /// The code that failed.
    pub kind: CodeKind,
    /// Line and column inside that code, as Rhai counts them.
    pub code_pos: Option<(usize, usize)>,
    /// Function calls and modules between the workflow code and the failure, outermost first.
    pub trace: Vec<String>,
}

impl fmt::Display for Location {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}:{} ({}", self.file, self.pos, self.kind)?;
        if let Some((line, column)) = self.code_pos {
            write!(formatter, " {line}:{column}")?;
        }
        for frame in &self.trace {
            write!(formatter, ", {frame}")?;
        }
        formatter.write_str(")")
    }
}

/// Why a script or expression could not be compiled or evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    /// The code does not compile.
    #[error("{location}: the {} does not compile: {message}", location.kind)]
    Compile {
        /// Where (boxed: errors travel up through `Result`s and should stay small).
        location: Box<Location>,
        /// Rhai's message.
        message: String,
    },
    /// A sandbox limit stopped the code.
    #[error("{location}: the {} exceeded the {limit} limit", location.kind)]
    Limit {
        /// Where (boxed: errors travel up through `Result`s and should stay small).
        location: Box<Location>,
        /// Which limit, with its value.
        limit: String,
    },
    /// The evaluation ran past its wall-clock deadline.
    #[error("{location}: the {} ran past its {millis} ms deadline", location.kind)]
    Deadline {
        /// Where (boxed: errors travel up through `Result`s and should stay small).
        location: Box<Location>,
        /// The deadline.
        millis: u128,
    },
    /// The code tried to modify the read-only context.
    #[error("{location}: the {} tried to modify `{name}`, which is read-only", location.kind)]
    ReadOnly {
        /// Where (boxed: errors travel up through `Result`s and should stay small).
        location: Box<Location>,
        /// The constant or context variable.
        name: String,
    },
    /// The code failed: a thrown error, a refused host call, a missing function.
    #[error("{location}: the {} failed: {message}", location.kind)]
    Runtime {
        /// Where (boxed: errors travel up through `Result`s and should stay small).
        location: Box<Location>,
        /// What went wrong.
        message: String,
    },
    /// The code ran but its value cannot be used where it was written.
    #[error("{location}: {message}")]
    Value {
        /// Where (boxed: errors travel up through `Result`s and should stay small).
        location: Box<Location>,
        /// What is wrong with the value.
        message: String,
    },
    /// The context the caller supplied cannot be given to scripts.
    #[error("the script context is invalid: {message}")]
    Context {
        /// What is wrong.
        message: String,
    },
}

impl ScriptError {
    /// What to do about the error.
    pub fn hint(&self) -> Option<String> {
        let hint = match self {
            ScriptError::Compile { .. } => "fix the Rhai code at this position",
            ScriptError::Limit { .. } => {
                "scripts are small deterministic helpers: bound loops, recursion and data sizes"
            }
            ScriptError::Deadline { .. } => {
                "each evaluation has a wall-clock deadline; do less work per call"
            }
            ScriptError::ReadOnly { .. } => {
                "`ctx` and `params` are read-only: copy a value into a local variable to change it"
            }
            ScriptError::Runtime { .. } => {
                "fix the call at this position; docs/scripting.md lists the host API and its limits"
            }
            ScriptError::Value { .. } => "return a value of the kind this field expects",
            ScriptError::Context { .. } => "the context must be a JSON object (a kernel bug)",
        };
        Some(hint.to_owned())
    }

    /// Where the error happened, when it concerns workflow code.
    pub fn location(&self) -> Option<&Location> {
        match self {
            ScriptError::Compile { location, .. }
            | ScriptError::Limit { location, .. }
            | ScriptError::Deadline { location, .. }
            | ScriptError::ReadOnly { location, .. }
            | ScriptError::Runtime { location, .. }
            | ScriptError::Value { location, .. } => Some(location.as_ref()),
            ScriptError::Context { .. } => None,
        }
    }

    /// The fields of the run's `step_failed` event: the message as its `error`, the hint and,
    /// when located, `file`, `line`, `column`, `code` and `code_position`.
    pub fn step_failed(&self) -> crate::artifacts::event_payload::StepFailed {
        let location = self.location();
        crate::artifacts::event_payload::StepFailed {
            error: self.to_string(),
            hint: self.hint(),
            file: location.map(|location| location.file.clone()),
            line: location.map(|location| location.pos.line.into()),
            column: location.map(|location| location.pos.column.into()),
            code: location.map(|location| location.kind.to_string()),
            code_position: location
                .and_then(|location| location.code_pos)
                .map(|(line, column)| format!("{line}:{column}")),
            ..Default::default()
        }
    }

    /// A compile error of code that starts at `origin`.
    pub(crate) fn compile(file: &str, origin: &Origin, error: &ParseError) -> Self {
        let location = Box::new(Location {
            file: file.to_owned(),
            pos: origin.map(error.1),
            kind: origin.kind,
            code_pos: code_pos(error.1),
            trace: Vec::new(),
        });
        ScriptError::Compile {
            location,
            message: error.0.to_string(),
        }
    }

    /// A value error at `origin`.
    pub(crate) fn value(file: &str, origin: &Origin, message: impl Into<String>) -> Self {
        ScriptError::Value {
            location: Box::new(Location {
                file: file.to_owned(),
                pos: origin.pos,
                kind: origin.kind,
                code_pos: None,
                trace: Vec::new(),
            }),
            message: message.into(),
        }
    }
}

fn code_pos(position: Position) -> Option<(usize, usize)> {
    Some((position.line()?, position.position().unwrap_or(1)))
}

/// Translates a Rhai evaluation error of code that starts at `origin`.
pub(crate) struct Translator<'a> {
    /// The workflow file.
    pub file: &'a str,
    /// Where the workflow's `script` starts, when there is one.
    pub script: Option<Origin>,
    /// The evaluation deadline, for the message.
    pub deadline_millis: u128,
    /// The memory an evaluation may add to the process, for the message.
    pub memory_budget: u64,
}

impl Translator<'_> {
    /// The error, located at the deepest position inside workflow code.
    pub(crate) fn translate(&self, origin: &Origin, error: EvalAltResult) -> ScriptError {
        let mut trace = Vec::new();
        let mut code = Some(*origin);
        let mut anchor = (*origin, error.position());
        let mut current = error;
        let innermost = loop {
            if let Some(origin) = code {
                anchor = (origin, current.position());
            }
            match current {
                EvalAltResult::ErrorInFunctionCall(name, source, inner, position) => {
                    trace.push(frame(&format!("in `{name}`"), code, &source, position));
                    code = self.code_of(&source, code);
                    current = *inner;
                }
                EvalAltResult::ErrorInModule(path, inner, position) => {
                    trace.push(frame(&format!("in module `{path}`"), code, "", position));
                    code = None;
                    current = *inner;
                }
                other => break other,
            }
        };
        if code.is_none() {
            trace.push(format!("at {}", display_position(innermost.position())));
        }
        let (origin, position) = anchor;
        let location = Box::new(Location {
            file: self.file.to_owned(),
            pos: origin.map(position),
            kind: origin.kind,
            code_pos: code_pos(position),
            trace,
        });
        self.classify(location, innermost)
    }

    fn code_of(&self, source: &str, current: Option<Origin>) -> Option<Origin> {
        match source {
            SCRIPT_SOURCE => self.script,
            "" | EXPRESSION_SOURCE => current,
            _ => None,
        }
    }

    fn classify(&self, location: Box<Location>, error: EvalAltResult) -> ScriptError {
        let limit = |limit: String| ScriptError::Limit {
            location: location.clone(),
            limit,
        };
        match error {
            EvalAltResult::ErrorTooManyOperations(..) => limit("operations".to_owned()),
            EvalAltResult::ErrorStackOverflow(..) => limit("call depth".to_owned()),
            EvalAltResult::ErrorTooManyVariables(..) => limit("variables".to_owned()),
            EvalAltResult::ErrorTooManyModules(..) => limit("imported modules".to_owned()),
            EvalAltResult::ErrorDataTooLarge(what, ..) => limit(format!("data size ({what})")),
            EvalAltResult::ErrorTerminated(token, ..)
                if token
                    .read_lock::<rhai::ImmutableString>()
                    .is_some_and(|text| text.as_str() == MEMORY_TOKEN) =>
            {
                limit(format!(
                    "memory ({} MiB more than the process held as the evaluation began)",
                    self.memory_budget / (1024 * 1024)
                ))
            }
            EvalAltResult::ErrorTerminated(..) => ScriptError::Deadline {
                location,
                millis: self.deadline_millis,
            },
            EvalAltResult::ErrorAssignmentToConstant(name, ..) => {
                ScriptError::ReadOnly { location, name }
            }
            EvalAltResult::ErrorRuntime(value, ..) => ScriptError::Runtime {
                location,
                message: value.to_string(),
            },
            mut other => {
                // Rhai appends its own position; ours is in the location already.
                other.clear_position();
                ScriptError::Runtime {
                    location,
                    message: lowercase_first(&other.to_string()),
                }
            }
        }
    }
}

fn frame(what: &str, code: Option<Origin>, source: &str, position: Position) -> String {
    match (code, source) {
        (None, _) => format!("{what} at {}", display_position(position)),
        (Some(_), "" | SCRIPT_SOURCE | EXPRESSION_SOURCE) => what.to_owned(),
        (Some(_), module) => format!("{what} of `{module}`"),
    }
}

fn display_position(position: Position) -> String {
    match (position.line(), position.position()) {
        (Some(line), Some(column)) => format!("{line}:{column}"),
        (Some(line), None) => format!("{line}"),
        _ => "an unknown position".to_owned(),
    }
}

/// Rhai capitalises its messages; ours are lowercase fragments.
fn lowercase_first(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}
