//! Static checks of `${name}` substitutions, `${{ EXPR }}` expressions and the `script` module:
//! names exist, expressions are closed, and Rhai code compiles — with errors pointing at the
//! YAML line and column where the code was written.

use super::diagnostic::Diagnostics;
use super::model::{Gate, Inputs, PromptSpec, Step, StepBody, Stop, ValidatorEntry, Workflow};
use super::yaml::{Node, Pos, Value};
use crate::document::diagnostic::nearest;
use crate::script::expressions::{
    Piece, SUBSTITUTIONS, char_count, code_start, locate_in, offset_pos, scan,
};
use crate::script::names::{CallableNames, UnknownCall, unknown_calls};

/// The offset of the first `{{ … }}` outside every `${{ … }}` of `text`: template syntax that
/// a workflow string does not evaluate (a `$` was likely left out).
fn template_syntax(text: &str, pieces: &[Piece<'_>]) -> Option<usize> {
    let inside_expression = |at: usize| {
        pieces.iter().any(|piece| match piece {
            Piece::Expression { code, offset } => at + 1 >= *offset && at < offset + code.len() + 2,
            _ => false,
        })
    };
    text.match_indices("{{").map(|(at, _)| at).find(|&at| {
        let closed = text[at + 2..].contains("}}");
        closed && !text[..at].ends_with('$') && !inside_expression(at)
    })
}

/// Checks expressions and substitutions across a workflow.
#[derive(Debug)]
pub struct ExpressionChecker<'a> {
    lines: Vec<&'a str>,
    params: Vec<String>,
    engine: rhai::Engine,
    /// The repository whose `.tnh/scripts/` the script's repository modules must be in.
    repository: Option<&'a std::path::Path>,
    /// What expressions may call besides the engine's functions, once the script compiled
    /// (unset when it does not: then calls are not judged).
    callable: std::sync::OnceLock<CallableNames>,
}

impl<'a> ExpressionChecker<'a> {
    /// A checker for a workflow read from `source`.
    pub fn new(source: &'a str, workflow: &Workflow) -> Self {
        // The scripting host's own configuration, so `validate` refuses what a run would.
        let engine = crate::script::engine::checking_engine();
        Self {
            lines: source.lines().collect(),
            params: workflow
                .params
                .iter()
                .map(|param| param.name.value.clone())
                .collect(),
            engine,
            repository: None,
            callable: std::sync::OnceLock::new(),
        }
    }

    /// Checks that the repository modules the script imports are in `repository`'s
    /// `.tnh/scripts/` and compile (`None`: only their names are checked).
    pub fn with_repository(mut self, repository: Option<&'a std::path::Path>) -> Self {
        self.repository = repository;
        self
    }

    /// Runs every check. Returns the functions of the script (see [`ScriptFunction`]): none
    /// without a script, `None` when the script does not compile
    /// (then nothing is known about them).
    pub fn check(
        &self,
        workflow: &Workflow,
        diagnostics: &mut Diagnostics,
    ) -> Option<Vec<ScriptFunction>> {
        let mut functions = Some(Vec::new());
        if workflow.script.is_none() {
            let _ = self.callable.set(CallableNames::default());
        }
        if let Some(script) = &workflow.script {
            let compiled = self.engine.compile(&script.value);
            functions = compiled.as_ref().ok().map(hook_functions);
            // Where Rhai's positions inside the script are in the file, when they can be told.
            let start = code_start(&self.lines, script.pos, &script.value);
            let at = |line: Option<usize>, column: Option<usize>| match start {
                Some(start) => {
                    let (line, column) = within_code(&script.value, line, column);
                    offset_pos(start, line, column)
                }
                None => script.pos,
            };
            if let Err(error) = &compiled {
                let pos = at(error.1.line(), error.1.position());
                diagnostics
                    .error(
                        pos,
                        "script-syntax",
                        format!("the script does not compile: {}", error.0),
                    )
                    .hint("fix the Rhai code at this position");
            }
            if let Ok(ast) = &compiled
                && let Some((count, extra)) = too_many_variables(ast, self.engine.max_variables())
            {
                diagnostics
                    .error(
                        at(extra.line(), extra.position()),
                        "script-limits",
                        format!(
                            "the script's top level defines {count} variables: a run allows {} alive at once, and runs the top level when it loads the script, so it would fail here",
                            self.engine.max_variables()
                        ),
                    )
                    .hint("keep values in fewer variables (an array or a map), or move them into the functions that use them");
            }
            if let Ok(ast) = &compiled {
                let callable = CallableNames::of(ast, self.repository);
                for call in unknown_calls(ast, &callable) {
                    let pos = at(call.position.map(|at| at.0), call.position.map(|at| at.1));
                    report_unknown_call(&call, pos, diagnostics);
                }
                let _ = self.callable.set(callable);
            }
            if compiled.is_ok()
                && script.value.contains("import")
                && let Err(refused) =
                    crate::script::check_imports_in(&script.value, self.repository)
            {
                for (message, import) in refused {
                    let pos = at(import.map(|at| at.0), import.map(|at| at.1));
                    diagnostics.error(pos, "script-import", message).hint(
                        "import `tnh/<name>` from the standard library or `.tnh/scripts/<name>` from the repository",
                    );
                }
            }
        }
        for step in &workflow.steps {
            self.check_step(step, diagnostics);
        }
        functions
    }

    fn check_step(&self, step: &Step, diagnostics: &mut Diagnostics) {
        let mut values: Vec<&Node> = Vec::new();
        match &step.body {
            StepBody::RunAgent(agent) => {
                if let PromptSpec::Literal(_) = &agent.prompt.value {
                    self.check_prompt_text(step, diagnostics);
                }
                push_inputs(&agent.inputs, &mut values);
                values.extend(agent.cwd.iter());
                values.extend(agent.env.iter().map(|(_, value)| value));
            }
            StepBody::RunValidation(validation) => {
                for entry in &validation.run {
                    if let ValidatorEntry::Spec(spec) = entry {
                        values.extend(
                            spec.entrypoint
                                .iter()
                                .chain(spec.args.nodes())
                                .chain(spec.artifacts.nodes())
                                .chain(spec.cwd.iter())
                                .chain(spec.env_expression.iter())
                                .chain(spec.report.iter()),
                        );
                        values.extend(spec.env.iter().map(|(_, value)| value));
                    }
                }
            }
            StepBody::Evaluate(evaluate) => push_inputs(&evaluate.inputs, &mut values),
            StepBody::Gate(Gate { reason, .. }) | StepBody::Stop(Stop { reason, .. }) => {
                values.extend(reason.iter())
            }
            StepBody::Rollback(_) => {}
        }
        for value in values {
            self.check_node(value, diagnostics);
        }
    }

    fn check_prompt_text(&self, step: &Step, diagnostics: &mut Diagnostics) {
        let StepBody::RunAgent(agent) = &step.body else {
            return;
        };
        let PromptSpec::Literal(text) = &agent.prompt.value else {
            return;
        };
        for piece in scan(text) {
            if let Piece::Expression { offset, .. } = piece {
                diagnostics
                    .error(
                        self.locate(agent.prompt.pos, text, offset)
                            .unwrap_or(agent.prompt.pos),
                        "expression-not-allowed",
                        "prompt text allows `${name}` substitution, not `${{ … }}` expressions",
                    )
                    .hint("compute the value in `inputs` and refer to it from a prompt template");
            }
        }
        self.check_text(agent.prompt.pos, text, diagnostics, false);
    }

    fn check_node(&self, node: &Node, diagnostics: &mut Diagnostics) {
        match &node.value {
            Value::Str(text) => self.check_text(node.pos, text, diagnostics, true),
            Value::Seq(items) => items
                .iter()
                .for_each(|item| self.check_node(item, diagnostics)),
            Value::Map(entries) => entries
                .iter()
                .for_each(|(_, value)| self.check_node(value, diagnostics)),
            _ => {}
        }
    }

    fn check_text(&self, pos: Pos, text: &str, diagnostics: &mut Diagnostics, expressions: bool) {
        let pieces = scan(text);
        if let Some(offset) = template_syntax(text, &pieces) {
            let hint = if expressions {
                "workflow strings are not templates: write `${{ EXPR }}` for an expression, or `${params.NAME}` to substitute a parameter"
            } else {
                "literal prompt text is not a template: write `${params.NAME}` to substitute a parameter, or use a prompt file (`family.name.vN`) for a template"
            };
            diagnostics
                .warning(
                    self.locate(pos, text, offset).unwrap_or(pos),
                    "template-syntax",
                    "`{{ … }}` is sent as written, not evaluated",
                )
                .hint(hint);
        }
        for piece in pieces {
            match piece {
                Piece::Unclosed { offset } => diagnostics
                    .error(
                        self.locate(pos, text, offset).unwrap_or(pos),
                        "unclosed-expression",
                        "`${` is not closed",
                    )
                    .hint("close `${name}` with `}` and `${{ expr }}` with `}}`; for a literal `${`, write `$${`"),
                Piece::Substitution { name, offset } => self.check_substitution(
                    name,
                    self.locate(pos, text, offset).unwrap_or(pos),
                    diagnostics,
                ),
                Piece::Expression { code, offset } if expressions => {
                    // Positions inside the code are added only when the code's place in the
                    // file is known; otherwise every problem is at the scalar itself.
                    let at = match self.locate(pos, text, offset) {
                        Some(start) => CodeAt::Exact(start),
                        None => CodeAt::Scalar(pos),
                    };
                    self.check_expression(code, at, diagnostics);
                }
                Piece::Expression { .. } | Piece::Escaped { .. } => {}
            }
        }
    }

    fn check_substitution(&self, name: &str, pos: Pos, diagnostics: &mut Diagnostics) {
        if let Some(param) = name.strip_prefix("params.") {
            self.check_param(param, pos, diagnostics);
            return;
        }
        if !SUBSTITUTIONS.contains(&name) {
            let mut candidates: Vec<String> = SUBSTITUTIONS
                .iter()
                .map(|name| (*name).to_owned())
                .collect();
            candidates.extend(self.params.iter().map(|param| format!("params.{param}")));
            diagnostics
                .error(
                    pos,
                    "unknown-substitution",
                    format!("`${{{name}}}` is not a known substitution"),
                )
                .suggest(
                    name,
                    candidates.iter().map(String::as_str),
                    format!(
                        "known: {}, params.NAME; for a literal `${{` (a shell's `${{{name}}}`), write `$${{`: `$${{{name}}}`",
                        SUBSTITUTIONS.join(", ")
                    ),
                );
        }
    }

    fn check_param(&self, param: &str, pos: Pos, diagnostics: &mut Diagnostics) {
        if self.params.iter().any(|declared| declared == param) {
            return;
        }
        let hinted = diagnostics.error(
            pos,
            "unknown-param",
            format!("parameter `{param}` is not declared in `params`"),
        );
        match nearest(param, self.params.iter().map(String::as_str)) {
            Some(best) => hinted.hint(format!("did you mean `params.{best}`?")),
            None => hinted.hint(format!(
                "declare it under `params:` with a type, e.g. `{param}: {{type: string}}`"
            )),
        }
    }

    fn check_expression(&self, code: &str, at: CodeAt, diagnostics: &mut Diagnostics) {
        if code.trim().is_empty() {
            diagnostics
                .error(
                    at.pos(),
                    "script-syntax",
                    "the expression `${{ }}` is empty",
                )
                .hint("write a Rhai expression between the braces");
            return;
        }
        match self.engine.compile_expression(code) {
            Err(error) => {
                let hint = "`${{ … }}` holds one Rhai expression; put statements in a `script` function and call it";
                diagnostics
                    .error(
                        at.inside(error.1.line(), error.1.position()),
                        "script-syntax",
                        format!("the expression does not compile: {}", error.0),
                    )
                    .hint(hint);
                return;
            }
            Ok(ast) => {
                if let Some(callable) = self.callable.get() {
                    for call in unknown_calls(&ast, callable) {
                        let pos =
                            at.inside(call.position.map(|at| at.0), call.position.map(|at| at.1));
                        report_unknown_call(&call, pos, diagnostics);
                    }
                }
            }
        }
        for (offset, _) in code.match_indices("params.") {
            let preceded_by_identifier = code[..offset]
                .chars()
                .next_back()
                .is_some_and(|ch| ch.is_alphanumeric() || ch == '_' || ch == '.');
            if preceded_by_identifier {
                continue;
            }
            let rest = &code[offset + "params.".len()..];
            let name: String = rest
                .chars()
                .take_while(|ch| ch.is_alphanumeric() || *ch == '_')
                .collect();
            if !name.is_empty() {
                self.check_param(
                    &name,
                    at.inside(Some(1), Some(char_count(&code[..offset]) as usize + 1)),
                    diagnostics,
                );
            }
        }
    }

    /// The position of byte `offset` of a scalar that starts at `pos`, when the scalar is on one
    /// line of the source, written as its value is.
    fn locate(&self, pos: Pos, text: &str, offset: usize) -> Option<Pos> {
        self.lines
            .get(pos.line.saturating_sub(1) as usize)
            .and_then(|line| locate_in(line, pos, text, offset))
    }
}

/// A call of a function nothing defines: a run would fail on it when it gets there.
fn report_unknown_call(call: &UnknownCall, pos: Pos, diagnostics: &mut Diagnostics) {
    let reported = diagnostics.error(
        pos,
        "unknown-function",
        format!(
            "function `{}` is not defined: not by the workflow's `script`, a module it imports, the host API or Rhai",
            call.name
        ),
    );
    match &call.suggestion {
        Some(near) => reported.hint(format!("did you mean `{near}`?")),
        None => reported.hint(
            "define it in the workflow's `script` (or a module it imports); docs/scripting.md lists the host API",
        ),
    }
}

/// Where the code of an expression is: its first character exactly, or only its scalar (whose
/// text differs from its value, or spans lines), where every problem inside it is reported.
#[derive(Debug, Clone, Copy)]
enum CodeAt {
    Exact(Pos),
    Scalar(Pos),
}

impl CodeAt {
    fn pos(self) -> Pos {
        match self {
            CodeAt::Exact(pos) | CodeAt::Scalar(pos) => pos,
        }
    }

    /// A Rhai position inside the code, in the file.
    fn inside(self, line: Option<usize>, column: Option<usize>) -> Pos {
        match self {
            CodeAt::Exact(start) => offset_pos(start, line, column),
            CodeAt::Scalar(pos) => pos,
        }
    }
}

/// The number of variables the script's top level defines and the first one past `limit`,
/// when there are more than `limit`: a run evaluates the top level when it loads the script,
/// where each `let` and `const` stays alive to the end, and Rhai stops at the variables limit.
fn too_many_variables(ast: &rhai::AST, limit: usize) -> Option<(usize, rhai::Position)> {
    let variables: Vec<rhai::Position> = ast
        .statements()
        .iter()
        .filter(|statement| matches!(statement, rhai::Stmt::Var(..)))
        .map(rhai::Stmt::position)
        .collect();
    let extra = *variables.get(limit)?;
    Some((variables.len(), extra))
}

/// A function of the workflow's script, as a hook (a policy `check`) sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptFunction {
    /// The function's name.
    pub name: String,
    /// How many parameters it takes.
    pub arity: usize,
    /// `private fn`: the script's top level is loaded as a module, which exports public
    /// functions only, so the host cannot call it by name.
    pub private: bool,
}

fn hook_functions(ast: &rhai::AST) -> Vec<ScriptFunction> {
    ast.iter_functions()
        .filter(|function| function.this_type.is_none())
        .map(|function| ScriptFunction {
            name: function.name.to_owned(),
            arity: function.params.len(),
            private: function.access == rhai::FnAccess::Private,
        })
        .collect()
}

fn push_inputs<'w>(inputs: &'w Inputs, values: &mut Vec<&'w Node>) {
    match inputs {
        Inputs::Values(entries) => values.extend(entries.iter().map(|(_, value)| value)),
        Inputs::Expression(node) => values.push(node),
        Inputs::Names(_) | Inputs::None => {}
    }
}

/// Rhai puts an error at the end of code that ends with a line break on the line after the
/// code, which can be past the end of the file: point at the end of the last line instead.
fn within_code(
    code: &str,
    line: Option<usize>,
    column: Option<usize>,
) -> (Option<usize>, Option<usize>) {
    let last = code.lines().count().max(1);
    match line {
        Some(line) if line > last => {
            let width = code.lines().last().map_or(0, |text| text.chars().count());
            (Some(last), Some(width + 1))
        }
        _ => (line, column),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_syntax_is_found_outside_expressions_only() {
        let found = |text: &str| template_syntax(text, &scan(text));
        assert_eq!(found("Fixed {{ params.test }}"), Some(6));
        assert_eq!(found("${{ params.test }}"), None);
        assert_eq!(found("${{ #{a: #{b: 1}} }} and {{ x }}"), Some(25));
        assert_eq!(found("${{ #{a: #{b: 1}} }}"), None);
        assert_eq!(found("an opening {{ alone"), None);
        assert_eq!(found("$${{ literal }}"), None);
    }

    #[test]
    fn no_shipped_workflow_or_example_calls_an_unknown_function() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut checked = 0;
        for folder in ["workflows", "examples"] {
            for entry in std::fs::read_dir(root.join(folder)).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_none_or(|extension| extension != "yaml") {
                    continue;
                }
                let known = crate::workflow::validate::KnownNames::default();
                let checked_file = crate::workflow::load::check_file(&path, "wf.yaml", &known);
                let unknown: Vec<_> = checked_file
                    .diagnostics
                    .iter()
                    .filter(|diagnostic| diagnostic.code == "unknown-function")
                    .collect();
                assert!(unknown.is_empty(), "{}: {unknown:?}", path.display());
                checked += 1;
            }
        }
        assert!(checked >= 8, "{checked} files checked");
    }

    #[test]
    fn validate_reports_an_unknown_function_of_an_expression_at_its_position() {
        let source = "workflow_id: w\nversion: 1\ndescription: d\nentry_step: g\nscript: |\n  fn fix(x) { x }\nsteps:\n  - id: g\n    opcode: STOP\n    reason: \"${{ fixed(1) }}\"\n";
        let known = crate::workflow::validate::KnownNames::default();
        let mut diagnostics = crate::document::diagnostic::Diagnostics::new("wf.yaml");
        crate::workflow::load::check_bytes(source.as_bytes(), &known, &mut diagnostics);
        let found: Vec<_> = diagnostics
            .into_sorted()
            .into_iter()
            .filter(|diagnostic| diagnostic.code == "unknown-function")
            .map(|diagnostic| (diagnostic.line, diagnostic.column, diagnostic.hint))
            .collect();
        assert_eq!(
            found,
            vec![(10, 18, Some("did you mean `fix`?".to_owned()))]
        );
    }
}
