//! The template language prompts may use, and the limits that keep a render bounded.
//!
//! Fuel bounds how many instructions a render executes, not how much memory it takes: a chain
//! of `{% set s = s ~ s ~ s %}` doubles a string per instruction and reaches gigabytes in a
//! dozen lines. minijinja offers no hook on its operators, so the bound is built from three
//! parts instead:
//!
//! - the output is written through a writer that refuses more than [`MAX_RENDERED_BYTES`];
//! - the constructs that build a value larger than their operands are refused when the
//!   template is compiled (so `validate` reports them): the `~` operator, `*`, `+` unless its
//!   right operand is a number, capture blocks (`{% set x %}…{% endset %}`, `{% filter %}`);
//! - only filters whose result is no larger than their input (up to case mapping) are
//!   available, and `join`, which combines many values, is ours and stops at the same limit.
//!
//! What remains is linear: every value a template holds is at most a small multiple of its
//! inputs and its own text.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use minijinja::machinery::{Instruction, Instructions, get_compiled_template};
use minijinja::value::ValueKind;
use minijinja::{Environment, Error, ErrorKind, State, UndefinedBehavior, Value};

/// The most bytes one render may produce (and one `join` may build).
pub const MAX_RENDERED_BYTES: usize = 2 * 1024 * 1024;

/// The most template instructions one render may execute.
const FUEL: u64 = 200_000;

/// Filters a prompt may use: none of them makes a value larger than its input.
pub const ALLOWED_FILTERS: &[&str] = &[
    "abs",
    "attr",
    "bool",
    "capitalize",
    "count",
    "d",
    "default",
    "dictsort",
    "first",
    "float",
    "groupby",
    "int",
    "items",
    "join",
    "last",
    "length",
    "lines",
    "lower",
    "map",
    "max",
    "min",
    "reject",
    "rejectattr",
    "reverse",
    "round",
    "safe",
    "select",
    "selectattr",
    "sort",
    "split",
    "title",
    "trim",
    "unique",
    "upper",
];

/// Built-in filters that can multiply their input (`escape` of `&`, `replace`, `indent`,
/// `format`…), removed from the prompt environment.
const REMOVED_FILTERS: &[&str] = &[
    "batch",
    "center",
    "chain",
    "e",
    "escape",
    "format",
    "indent",
    "list",
    "pprint",
    "replace",
    "slice",
    "string",
    "sum",
    "tojson",
    "truncate",
    "urlencode",
    "wordcount",
    "wordwrap",
    "zip",
];

/// One construct of a template that prompts may not use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// 1-based line within the template body.
    pub line: u32,
    /// What is refused.
    pub message: String,
    /// What to write instead.
    pub hint: String,
}

/// The environment every prompt is compiled and rendered in.
pub fn environment() -> Environment<'static> {
    let mut environment = Environment::new();
    environment.set_undefined_behavior(UndefinedBehavior::Strict);
    environment.set_fuel(Some(FUEL));
    environment.set_recursion_limit(32);
    for name in REMOVED_FILTERS {
        environment.remove_filter(name);
    }
    environment.remove_global("debug");
    environment.add_filter("join", bounded_join);
    // An optional input that was not given is none; it renders as nothing, not `none`.
    environment.set_formatter(|output, state, value| {
        if value.is_none() {
            Ok(())
        } else {
            minijinja::escape_formatter(output, state, value)
        }
    });
    environment
}

/// The constructs of a compiled template that prompts may not use, in order.
pub fn refusals(template: &minijinja::Template<'_, '_>) -> Vec<Refusal> {
    let compiled = get_compiled_template(template);
    let mut found = Vec::new();
    scan(&compiled.instructions, &mut found);
    for block in compiled.blocks.values() {
        scan(block, &mut found);
    }
    let mut seen = BTreeSet::new();
    found.retain(|refusal: &Refusal| seen.insert((refusal.line, refusal.message.clone())));
    found
}

/// The 1-based template line where `name` is first read, if the compiled template reads it.
pub fn first_lookup(template: &minijinja::Template<'_, '_>, name: &str) -> Option<u32> {
    let compiled = get_compiled_template(template);
    std::iter::once(&compiled.instructions)
        .chain(compiled.blocks.values())
        .filter_map(|instructions| {
            (0..)
                .map_while(|index| instructions.get(index).map(|instruction| (index, instruction)))
                .find(|(_, instruction)| matches!(instruction, Instruction::Lookup(found) if *found == name))
                .and_then(|(index, _)| instructions.get_line(index))
        })
        .filter_map(|line| u32::try_from(line).ok())
        .min()
}

fn scan(instructions: &Instructions<'_>, found: &mut Vec<Refusal>) {
    let count = (0..)
        .take_while(|index| instructions.get(*index).is_some())
        .count();
    let count = u32::try_from(count).unwrap_or(u32::MAX);
    let targets = jump_targets(instructions, count);
    for index in 0..count {
        let Some(instruction) = instructions.get(index) else {
            break;
        };
        let refusal = match instruction {
            Instruction::StringConcat => Some((
                "the `~` operator is not available in prompts".to_owned(),
                "write the parts side by side: `{{ a }}{{ b }}`".to_owned(),
            )),
            Instruction::Mul => Some((
                "the `*` operator is not available in prompts (it repeats text and lists)"
                    .to_owned(),
                "compute numbers before rendering and pass them as inputs".to_owned(),
            )),
            Instruction::Add if !adds_a_number(instructions, index, &targets) => Some((
                "`+` is only available in prompts to add a number written in the template (`x + 1`)"
                    .to_owned(),
                "write the parts side by side: `{{ a }}{{ b }}`".to_owned(),
            )),
            Instruction::BeginCapture(_) => Some((
                "capture blocks (`{% set x %}…{% endset %}`, `{% filter %}`) are not available in prompts"
                    .to_owned(),
                "write the text where it is used, or pass it as an input".to_owned(),
            )),
            Instruction::ApplyFilter(name, ..) if !ALLOWED_FILTERS.contains(name) => Some((
                format!("filter `{name}` is not available in prompts"),
                format!("available filters: {}", ALLOWED_FILTERS.join(", ")),
            )),
            _ => None,
        };
        if let Some((message, hint)) = refusal {
            let line = instructions
                .get_line(index)
                .and_then(|line| u32::try_from(line).ok())
                .unwrap_or(1);
            found.push(Refusal {
                line,
                message,
                hint,
            });
        }
    }
}

/// Whether the `+` at `index` adds a number constant: its right operand is the instruction
/// just before it and no jump lands on the `+` (a conditional expression's other branch).
fn adds_a_number(instructions: &Instructions<'_>, index: u32, targets: &BTreeSet<u32>) -> bool {
    if targets.contains(&index) {
        return false;
    }
    index
        .checked_sub(1)
        .and_then(|previous| instructions.get(previous))
        .is_some_and(|previous| {
            matches!(previous, Instruction::LoadConst(value) if value.kind() == ValueKind::Number)
        })
}

fn jump_targets(instructions: &Instructions<'_>, count: u32) -> BTreeSet<u32> {
    (0..count)
        .filter_map(|index| match instructions.get(index)? {
            Instruction::Jump(target)
            | Instruction::JumpIfFalse(target)
            | Instruction::JumpIfFalseOrPop(target)
            | Instruction::JumpIfTrueOrPop(target)
            | Instruction::Iterate(target) => Some(*target),
            _ => None,
        })
        .collect()
}

/// `join` that stops at [`MAX_RENDERED_BYTES`] instead of building whatever it is given.
fn bounded_join(_state: &State, value: &Value, joiner: Option<&str>) -> Result<String, Error> {
    let joiner = joiner.unwrap_or("");
    let mut output = BoundedText::default();
    if let Some(text) = value.as_str() {
        for (index, character) in text.chars().enumerate() {
            if index > 0 {
                output.push(joiner)?;
            }
            output.push(character.encode_utf8(&mut [0; 4]))?;
        }
        return Ok(output.text);
    }
    for (index, item) in value.try_iter()?.enumerate() {
        if index > 0 {
            output.push(joiner)?;
        }
        if write!(output, "{item}").is_err() {
            return Err(too_large());
        }
    }
    Ok(output.text)
}

fn too_large() -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("`join` would build more than {MAX_RENDERED_BYTES} bytes"),
    )
}

/// Text that refuses to grow past [`MAX_RENDERED_BYTES`].
#[derive(Default)]
struct BoundedText {
    text: String,
}

impl BoundedText {
    fn push(&mut self, part: &str) -> Result<(), Error> {
        self.write_str(part).map_err(|_| too_large())
    }
}

impl std::fmt::Write for BoundedText {
    fn write_str(&mut self, part: &str) -> std::fmt::Result {
        if self.text.len() + part.len() > MAX_RENDERED_BYTES {
            return Err(std::fmt::Error);
        }
        self.text.push_str(part);
        Ok(())
    }
}

/// An `io::Write` that keeps at most [`MAX_RENDERED_BYTES`] and remembers when it refused more.
#[derive(Default)]
pub struct BoundedOutput {
    /// What was written.
    pub bytes: Vec<u8>,
    /// Whether a write was refused because of the limit.
    pub exceeded: bool,
}

impl std::io::Write for BoundedOutput {
    fn write(&mut self, buffer: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buffer.len() > MAX_RENDERED_BYTES {
            self.exceeded = true;
            return Err(std::io::Error::other("the rendered prompt is too large"));
        }
        self.bytes.extend_from_slice(buffer);
        Ok(buffer.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
