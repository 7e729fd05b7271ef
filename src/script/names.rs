//! Which functions a piece of workflow code calls that nothing defines: `validate` and the
//! checks before a run report them with their position, instead of a run failing on them
//! after its agents worked for an hour.
//!
//! A name is known when the engine a run uses has it (Rhai's packages, its built-in keywords
//! such as `call` and `type_of`, the host API), when the workflow's script or the code itself
//! defines it, or — for a namespaced call `alias::name` — when the module imported as `alias`
//! exports it. A miss is better than a false alarm, so what cannot be told statically is left
//! alone: method calls (`x.len()`, or a function pointer kept in a map property), operators,
//! calls through a name that is also a variable or parameter (a closure called as `f(x)`), and
//! namespaces whose module cannot be read.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use rhai::{AST, ASTNode, Expr, Position, Stmt};

use super::engine::{Limits, checking_engine};
use super::host::{HostOptions, ScriptHost};

/// A call of a function nothing defines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownCall {
    /// The name called (with its namespace, `alias::name`, when it has one).
    pub name: String,
    /// Rhai's position of the call inside the code (line and column, 1-based).
    pub position: Option<(usize, usize)>,
    /// A known name near it.
    pub suggestion: Option<String>,
}

/// The functions a piece of code can call besides the engine's: those of the workflow's
/// script, and those of each module it imports, by alias.
#[derive(Debug, Clone, Default)]
pub struct CallableNames {
    /// Functions defined by the script (or the module being checked).
    pub defined: BTreeSet<String>,
    /// Import alias → the public functions of the module, `None` when it could not be read.
    pub modules: BTreeMap<String, Option<BTreeSet<String>>>,
}

impl CallableNames {
    /// The functions `ast` defines and the modules it imports, read from the standard
    /// library or `repository`'s `.tnh/scripts/`.
    pub fn of(ast: &AST, repository: Option<&std::path::Path>) -> Self {
        let defined = ast
            .iter_functions()
            .map(|function| function.name.to_owned())
            .collect();
        let mut modules = BTreeMap::new();
        for statement in ast.statements() {
            if let Stmt::Import(import, _) = statement
                && let Expr::StringConstant(path, _) = &import.0
                && !import.1.name.is_empty()
            {
                let exported = super::resolver::module_source(path, repository)
                    .and_then(|text| module_functions(&text));
                modules.insert(import.1.name.to_string(), exported);
            }
        }
        Self { defined, modules }
    }
}

/// The public functions of a module's source, `None` when it does not compile.
fn module_functions(text: &str) -> Option<BTreeSet<String>> {
    let ast = checking_engine().compile(text).ok()?;
    Some(
        ast.iter_functions()
            .filter(|function| function.access != rhai::FnAccess::Private)
            .map(|function| function.name.to_owned())
            .collect(),
    )
}

/// Every function name the engine of a run knows without any script: Rhai's packages and
/// built-in keywords and the host API. Built once per process.
pub fn engine_functions() -> &'static BTreeSet<String> {
    static NAMES: OnceLock<BTreeSet<String>> = OnceLock::new();
    NAMES.get_or_init(|| {
        let options = HostOptions {
            file: String::new(),
            source: String::new(),
            root: None,
            limits: Limits::STANDARD,
        };
        let mut names = BTreeSet::new();
        let mut texts = vec![checking_engine().definitions().builtin_functions()];
        match ScriptHost::new(options) {
            Ok(host) => texts.push(host.engine().definitions().static_module()),
            // Without a root nothing can fail; were it to, only the packages are known.
            Err(_) => texts.push(checking_engine().definitions().static_module()),
        }
        for text in &texts {
            names.extend(defined_names(text));
        }
        names
    })
}

/// The names of the `fn NAME(…)` lines of Rhai's definitions text (not `op`, `get x`, `set x`).
fn defined_names(text: &str) -> impl Iterator<Item = String> + '_ {
    text.lines().filter_map(|line| {
        let rest = line.trim_start().strip_prefix("fn ")?;
        let name = &rest[..rest.find('(')?];
        (!name.contains(' ')).then(|| name.to_owned())
    })
}

/// The calls of `ast` that nothing defines (see the module's doc), in the order written.
pub fn unknown_calls(ast: &AST, callable: &CallableNames) -> Vec<UnknownCall> {
    let variables = variable_names(ast);
    let engine = engine_functions();
    let mut found = Vec::new();
    ast.walk(&mut |path: &[ASTNode]| {
        let call = match path.last() {
            Some(ASTNode::Expr(Expr::FnCall(call, position))) => Some((call, position)),
            Some(ASTNode::Stmt(Stmt::FnCall(call, position))) => Some((call, position)),
            _ => None,
        };
        if let Some((call, position)) = call
            && call.op_token.is_none()
            && is_identifier(&call.name)
        {
            let name = call.name.as_str();
            let unknown = if call.namespace.is_empty() {
                let known = engine.contains(name)
                    || callable.defined.contains(name)
                    || variables.contains(name);
                (!known).then(|| {
                    let candidates = engine.iter().chain(&callable.defined);
                    (name.to_owned(), nearest(name, candidates))
                })
            } else {
                let root = call.namespace.root();
                match callable.modules.get(root) {
                    // Only a call of a module that was read can be judged.
                    Some(Some(exported)) if !exported.contains(name) => Some((
                        format!("{root}::{name}"),
                        nearest(name, exported.iter()).map(|near| format!("{root}::{near}")),
                    )),
                    _ => None,
                }
            };
            if let Some((name, suggestion)) = unknown {
                found.push(UnknownCall {
                    name,
                    position: rhai_position(*position),
                    suggestion,
                });
            }
        }
        true
    });
    found
}

fn nearest<'a>(name: &str, candidates: impl Iterator<Item = &'a String>) -> Option<String> {
    crate::document::diagnostic::nearest(name, candidates.map(String::as_str)).map(str::to_owned)
}

fn rhai_position(position: Position) -> Option<(usize, usize)> {
    Some((position.line()?, position.position().unwrap_or(1)))
}

/// An operator is called by its symbol; only names can be undefined functions.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_alphabetic() || first == '_')
        && chars.all(|ch| ch.is_alphanumeric() || ch == '_')
}

/// Every name the code uses as a variable or parameter: a call through one of them may call
/// a function pointer it holds (a closure), which cannot be told apart statically.
fn variable_names(ast: &AST) -> BTreeSet<String> {
    let mut names: BTreeSet<String> = ast
        .iter_functions()
        .flat_map(|function| function.params.into_iter().map(str::to_owned))
        .collect();
    ast.walk(&mut |path: &[ASTNode]| {
        match path.last() {
            Some(ASTNode::Expr(Expr::Variable(variable, ..))) => {
                names.insert(variable.1.to_string());
            }
            Some(ASTNode::Stmt(Stmt::Var(declaration, ..))) => {
                names.insert(declaration.0.name.to_string());
            }
            Some(ASTNode::Stmt(Stmt::For(looping, ..))) => {
                names.insert(looping.0.name.to_string());
                if let Some(counter) = &looping.1 {
                    names.insert(counter.name.to_string());
                }
            }
            _ => {}
        }
        true
    });
    names
}

#[cfg(test)]
#[path = "names_tests.rs"]
mod tests;
