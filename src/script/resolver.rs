//! Module resolution: `import "tnh/<name>"` loads the standard library embedded in the binary
//! (so it works from any directory) and `import ".tnh/scripts/<name>"` loads a module of the
//! repository under review, read through the worktree sandbox. Every other path is refused
//! with a message that says what is allowed.
//!
//! Modules are compiled and evaluated by the importing engine, so they run under the same
//! limits; each is loaded once per host, and an import cycle is an error rather than a hang.
//! Repository modules live in the worktree that agents edit, so they are read only while the
//! run loads its script: an import that first happens later (inside a function) is refused,
//! so an agent cannot rewrite the policy helpers that judge its own changes. The run pins the
//! modules it loaded (their text, in its run directory); a resumed run's host is given those
//! ([`super::ScriptHost::use_pinned_modules`]) and never reads the worktree's.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use rhai::{Engine, EvalAltResult, Module, ModuleResolver, Position, Scope, Shared};

type SharedModule = Shared<Module>;
type RhaiResultOf<T> = Result<T, Box<EvalAltResult>>;

use super::engine::{Limits, sandboxed_engine};
use super::host::HostState;
use super::sandbox::Sandbox;

/// The standard library: import path and source.
pub const STDLIB_MODULES: [(&str, &str); 4] = [
    ("tnh/inputs", include_str!("../../stdlib/inputs.rhai")),
    ("tnh/paths", include_str!("../../stdlib/paths.rhai")),
    ("tnh/policy", include_str!("../../stdlib/policy.rhai")),
    ("tnh/report", include_str!("../../stdlib/report.rhai")),
];

/// Where repository modules live, relative to the worktree.
pub const REPOSITORY_MODULES: &str = ".tnh/scripts/";

/// Where an import path leads.
enum ModulePath {
    /// An embedded stdlib module, with its source.
    Stdlib(&'static str),
    /// A file of the repository, relative to the worktree.
    Repository(String),
}

/// Where `path` leads, or why it may not be imported.
fn classify(path: &str) -> Result<ModulePath, String> {
    if let Some((_, text)) = STDLIB_MODULES.iter().find(|(name, _)| *name == path) {
        return Ok(ModulePath::Stdlib(text));
    }
    let Some(name) = path.strip_prefix(REPOSITORY_MODULES) else {
        return Err(format!(
            "import `{path}` is refused: scripts may import `tnh/<name>` (the standard \
             library: {}) or `{REPOSITORY_MODULES}<name>` (this repository), nothing else",
            STDLIB_MODULES.map(|(name, _)| name).join(", ")
        ));
    };
    let valid = !name.is_empty()
        && name.split('/').all(|part| {
            !part.is_empty()
                && part != "."
                && part != ".."
                && part
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || "_-.".contains(ch))
        });
    if !valid {
        return Err(format!(
            "import `{path}` is refused: a repository module is named by plain path parts"
        ));
    }
    Ok(ModulePath::Repository(if name.ends_with(".rhai") {
        format!("{REPOSITORY_MODULES}{name}")
    } else {
        format!("{REPOSITORY_MODULES}{name}.rhai")
    }))
}

/// A refused import: the message, and the 1-based line and column of its path in the script
/// when it can be found.
pub type RefusedImport = (String, Option<(usize, usize)>);

/// Checks the imports of a script without a worktree, as `validate` does: each must name a
/// stdlib module or a repository module (whose existence is checked when a run loads it).
/// Every refused import is returned, in the order of the script, each with its message and
/// the 1-based line and column of its path in the script (when it can be found).
pub fn check_imports(script: &str) -> Result<(), Vec<RefusedImport>> {
    check_imports_in(script, None)
}

/// [`check_imports`], and with `repository` each repository module the script imports
/// (directly or through another module) must be a file of `repository`'s `.tnh/scripts/` —
/// where a run reads it — and compile: a missing or broken module is refused at its import.
pub fn check_imports_in(
    script: &str,
    repository: Option<&std::path::Path>,
) -> Result<(), Vec<RefusedImport>> {
    let mut engine = sandboxed_engine(&Limits::STANDARD);
    let checker = Arc::new(ImportChecker {
        repository: repository.and_then(|root| Sandbox::named(root, "the repository").ok()),
        ..ImportChecker::default()
    });
    engine.set_module_resolver(SharedChecker(Arc::clone(&checker)));
    let compiled = engine.compile_into_self_contained(&Scope::new(), script);
    let refused = std::mem::take(
        &mut *checker
            .refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner),
    );
    let mut problems = Vec::new();
    // Rhai resolves these imports without positions, and each path once: every `import` of
    // the path, in double quotes or backticks, locates one.
    for (path, message) in refused {
        let mut positions: Vec<(usize, usize)> = [format!("\"{path}\""), format!("`{path}`")]
            .iter()
            .flat_map(|quoted| script.match_indices(quoted.as_str()))
            .filter(|(offset, _)| script[..*offset].trim_end().ends_with("import"))
            .map(|(offset, _)| line_and_column(script, offset))
            .collect();
        positions.sort_unstable();
        if positions.is_empty() {
            problems.push((message.clone(), None));
        }
        for position in positions {
            problems.push((message.clone(), Some(position)));
        }
    }
    problems.sort_by_key(|(_, position)| *position);
    if let Err(error) = compiled
        && problems.is_empty()
    {
        let message = match *error {
            EvalAltResult::ErrorRuntime(message, _) => message.to_string(),
            other => other.to_string(),
        };
        problems.push((message, None));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// The text of the module `path` imports: a stdlib module's, or a repository module read from
/// `repository`'s `.tnh/scripts/` (`None` when refused, unreadable or no repository is given).
pub(crate) fn module_source(path: &str, repository: Option<&std::path::Path>) -> Option<String> {
    match classify(path).ok()? {
        ModulePath::Stdlib(text) => Some(text.to_owned()),
        ModulePath::Repository(file) => {
            let sandbox = Sandbox::named(repository?, "the repository").ok()?;
            sandbox
                .read_text(&file, Limits::STANDARD.max_read_bytes)
                .ok()
        }
    }
}

/// The 1-based line and column (in characters) of a byte offset of `text`.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rsplit('\n')
        .next()
        .unwrap_or_default()
        .chars()
        .count()
        + 1;
    (line, column)
}

/// Accepts every import path with an empty module, noting the refused ones (path and message)
/// so that all of them are reported, not only the first.
#[derive(Debug, Default)]
struct ImportChecker {
    refused: Mutex<Vec<(String, String)>>,
    /// Where repository modules must be, when their existence is checked.
    repository: Option<Sandbox>,
    /// The repository modules being checked (an import cycle is the run's to report).
    checking: Mutex<HashSet<String>>,
}

impl ImportChecker {
    fn refuse(&self, path: &str, message: String) {
        self.refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((path.to_owned(), message));
    }

    /// A repository module must be in the repository and compile; the modules it imports are
    /// checked the same way.
    fn check_module(&self, engine: &Engine, sandbox: &Sandbox, path: &str, file: &str) {
        let fresh = self
            .checking
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(file.to_owned());
        if !fresh {
            return;
        }
        let shown = sandbox.root().join(file);
        match sandbox.read_text(file, Limits::STANDARD.max_read_bytes) {
            Err(error) => self.refuse(
                path,
                format!(
                    "import `{path}` is refused: {error} (`{}`); repository modules are read from the repository's `.tnh/scripts/`, committed or not",
                    shown.display()
                ),
            ),
            Ok(text) => {
                if let Err(error) = engine.compile_into_self_contained(&Scope::new(), &text) {
                    let message = match *error {
                        EvalAltResult::ErrorRuntime(message, _) => message.to_string(),
                        other => other.to_string(),
                    };
                    self.refuse(
                        path,
                        format!("module `{file}` does not compile: {message}"),
                    );
                }
            }
        }
        self.checking
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(file);
    }
}

/// The checker as the engine's resolver, shared with `check_imports`, which reads what it
/// noted once compilation is over.
#[derive(Debug)]
struct SharedChecker(Arc<ImportChecker>);

impl ModuleResolver for SharedChecker {
    fn resolve(
        &self,
        engine: &Engine,
        _source: Option<&str>,
        path: &str,
        _pos: Position,
    ) -> RhaiResultOf<SharedModule> {
        match classify(path) {
            Err(message) => self.0.refuse(path, message),
            Ok(ModulePath::Repository(file)) => {
                if let Some(sandbox) = &self.0.repository {
                    self.0.check_module(engine, sandbox, path, &file);
                }
            }
            Ok(ModulePath::Stdlib(_)) => {}
        }
        Ok(Module::new().into())
    }
}

/// Resolves imports for one host.
#[derive(Debug)]
pub(crate) struct Resolver {
    state: Arc<HostState>,
    loaded: Mutex<HashMap<String, SharedModule>>,
    loading: Mutex<HashSet<String>>,
}

impl Resolver {
    pub(crate) fn new(state: Arc<HostState>) -> Self {
        Self {
            state,
            loaded: Mutex::new(HashMap::new()),
            loading: Mutex::new(HashSet::new()),
        }
    }

    /// The source of a module, or why it may not be imported.
    fn source(&self, path: &str) -> Result<String, String> {
        match classify(path)? {
            ModulePath::Stdlib(text) => Ok(text.to_owned()),
            ModulePath::Repository(_) if self.state.repository_sealed() => Err(format!(
                "import `{path}` is refused: repository modules are read when the run loads the \
                 script, before any agent changes the worktree; import it at the top of `script`"
            )),
            ModulePath::Repository(file) => {
                let text = match self.state.pinned_module(&file) {
                    Some(Some(text)) => text,
                    Some(None) => {
                        return Err(format!(
                            "import `{path}` is refused: the run pinned the repository modules \
                             it loaded when it started, and `{file}` was not among them (a \
                             module the workflow imports since it was edited is not read from \
                             the worktree, which agents change); start a new run to use it"
                        ));
                    }
                    None => {
                        let sandbox = self.state.modules_sandbox()?;
                        sandbox
                            .read_text(&file, self.state.limits.max_read_bytes)
                            .map_err(|error| {
                                format!(
                                    "import `{path}` failed: {error} (`{}`)",
                                    sandbox.root().join(&file).display()
                                )
                            })?
                    }
                };
                self.state.note_module(&file, &text);
                Ok(text)
            }
        }
    }

    fn load(&self, engine: &Engine, path: &str, pos: Position) -> RhaiResultOf<SharedModule> {
        let refused = |message: String| -> Box<EvalAltResult> {
            EvalAltResult::ErrorRuntime(message.into(), pos).into()
        };
        let text = self.source(path).map_err(refused)?;
        let in_module = |error: Box<EvalAltResult>| -> Box<EvalAltResult> {
            EvalAltResult::ErrorInModule(path.to_owned(), error, pos).into()
        };
        let mut ast = engine
            .compile(text)
            .map_err(|error| in_module(EvalAltResult::ErrorParsing(*error.0, error.1).into()))?;
        ast.set_source(path);
        let module = Module::eval_ast_as_new(Scope::new(), &ast, engine).map_err(in_module)?;
        Ok(module.into())
    }
}

impl ModuleResolver for Resolver {
    fn resolve(
        &self,
        engine: &Engine,
        _source: Option<&str>,
        path: &str,
        pos: Position,
    ) -> RhaiResultOf<SharedModule> {
        if let Some(module) = self
            .loaded
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(path)
        {
            return Ok(module.clone());
        }
        let fresh = self
            .loading
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(path.to_owned());
        if !fresh {
            return Err(EvalAltResult::ErrorRuntime(
                format!("import `{path}` is part of an import cycle").into(),
                pos,
            )
            .into());
        }
        let result = self.load(engine, path, pos);
        self.loading
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(path);
        let module = result?;
        self.loaded
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(path.to_owned(), module.clone());
        Ok(module)
    }
}
