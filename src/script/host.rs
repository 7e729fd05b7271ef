//! The per-run scripting host: one sandboxed engine with the host API, the module resolver and
//! the workflow's compiled `script`, plus the state an evaluation needs (the current `ctx`,
//! its deadline, the captured `print`/`debug` output).
//!
//! Host functions are registered once but must see the context of the evaluation in progress;
//! that context lives in `HostState`, which the engine's callbacks share. Evaluations on one
//! host are serialised so a context can never leak from one evaluation into another.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Instant;

use rhai::{AST, Dynamic, Engine, EvalAltResult, Module, Position, Scope};

use super::context::{ChangedFile, Context, ContextData};
use super::engine::{Limits, sandboxed_engine};
use super::error::{Origin, SCRIPT_SOURCE, ScriptError, Translator};
use super::memory::{MemoryWatch, resident_bytes};
use super::resolver::Resolver;
use super::sandbox::Sandbox;
use crate::document::at::At;

/// A document that may carry a `script` module: the workflow. The workflow sits above the
/// scripting host (its checks compile scripts), so the host sees it only through this.
pub trait WorkflowScript {
    /// The `script` and where it was written, if there is one.
    fn script(&self) -> Option<&At<String>>;
}

/// How many compiled expressions a host keeps.
const MAX_CACHED_EXPRESSIONS: usize = 10_000;
/// The longest `print`/`debug` message kept, in bytes.
const MAX_MESSAGE_BYTES: usize = 4096;
/// How many Rhai operations may pass between two readings of the clock. Reading it every
/// operation would dominate small evaluations; host functions that may take long read it
/// themselves before they start (and while they work), so the deadline holds within one
/// host call or this many operations.
const OPERATIONS_PER_CLOCK_READING: u64 = 16;

/// Where the deadline's time comes from: the system's monotonic clock, or a fake in tests.
pub(crate) trait Clock: Send + Sync + fmt::Debug {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// The monotonic clock.
#[derive(Debug)]
struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// What a host is built from.
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// The workflow file as shown in errors.
    pub file: String,
    /// The workflow's text, to locate expressions inside their YAML scalars.
    pub source: String,
    /// The worktree scripts may read; `None` refuses all file access.
    pub root: Option<PathBuf>,
    /// The sandbox limits.
    pub limits: Limits,
}

/// Whether a message came from `print` or `debug`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    /// `print(…)`.
    Print,
    /// `debug(…)`.
    Debug,
}

/// A message a script printed; the kernel records it as an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptMessage {
    /// `print` or `debug`.
    pub kind: MessageKind,
    /// The text, cut at 4 KiB.
    pub text: String,
}

impl ScriptMessage {
    /// The `script_output` event of the message: `stream` (`print` or `debug`) and `text`.
    pub fn event_payload(&self) -> crate::artifacts::EventPayload {
        let stream = match self.kind {
            MessageKind::Print => "print",
            MessageKind::Debug => "debug",
        };
        crate::artifacts::EventPayload::ScriptOutput(
            crate::artifacts::event_payload::ScriptOutput {
                stream: stream.to_owned(),
                text: self.text.clone(),
            },
        )
    }
}

#[derive(Debug, Default)]
struct Output {
    messages: Vec<ScriptMessage>,
    dropped: usize,
}

/// What the engine's callbacks and host functions share.
#[derive(Debug)]
pub(crate) struct HostState {
    pub limits: Limits,
    sandbox: Option<Sandbox>,
    /// Set once the workflow's script is loaded: from then on the worktree may hold an
    /// agent's edits, so repository modules are no longer read from it.
    repository_sealed: AtomicBool,
    /// Repository modules pinned when the run started (file path → text): a resumed run's host
    /// takes them from here, never from the worktree an agent may have changed since.
    pinned_modules: Mutex<Option<BTreeMap<String, String>>>,
    /// The repository modules this host loaded (file path → text), for the run to pin.
    loaded_modules: Mutex<BTreeMap<String, String>>,
    /// Where repository modules are read from (`ScriptHost::read_modules_from`): the
    /// operator's repository for a run; `None` reads them from the worktree.
    modules: Mutex<Option<Sandbox>>,
    current: RwLock<Option<Arc<ContextData>>>,
    clock: Arc<dyn Clock>,
    deadline: Mutex<Option<Instant>>,
    /// The memory budget of the evaluation in progress.
    memory: Mutex<MemoryWatch>,
    output: Mutex<Output>,
    /// The deferred workspace changes loaded last, by key: contexts built for the same state
    /// of the worktree share one git read.
    loaded_changes: Mutex<Option<(String, Arc<[ChangedFile]>)>>,
    /// The pattern lists `path_matches` compiled.
    pub(crate) globs: super::fs::GlobCache,
    /// The script values of the changes loaded last (`changed_files()`, `diff_stat()`), built
    /// once and handed out as copies: a policy `check` called once per changed file does not
    /// rebuild the whole list each time.
    pub(crate) change_values: super::fs::ChangeValues,
}

impl HostState {
    /// The context of the evaluation in progress.
    pub(crate) fn context(&self) -> Option<Arc<ContextData>> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The worktree sandbox, or why there is none.
    pub(crate) fn sandbox(&self) -> Result<&Sandbox, String> {
        self.sandbox
            .as_ref()
            .ok_or_else(|| "file access needs a worktree, and this host has none".to_owned())
    }

    fn past_deadline(&self) -> bool {
        self.past_deadline_at(self.clock.now())
    }

    fn past_deadline_at(&self, now: Instant) -> bool {
        let deadline = *self.deadline.lock().unwrap_or_else(PoisonError::into_inner);
        deadline.is_some_and(|deadline| now >= deadline)
    }

    /// Why the evaluation in progress must stop, read every few operations: past its deadline,
    /// or the process grown past the memory budget (read at most once per millisecond).
    fn progress(&self) -> Option<Dynamic> {
        let now = self.clock.now();
        if self.past_deadline_at(now) {
            return Some(deadline_token());
        }
        self.memory
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .exceeded(now, self.limits.max_memory_growth, resident_bytes)
            .then(memory_token)
    }

    /// Stops the evaluation once past its deadline: host functions that may take long call this
    /// before (and while) they work, so a slow call cannot run long after the deadline.
    pub(crate) fn check_deadline(&self) -> Result<(), Box<EvalAltResult>> {
        if self.past_deadline() {
            return Err(EvalAltResult::ErrorTerminated(deadline_token(), Position::NONE).into());
        }
        Ok(())
    }

    /// The workspace changes of the evaluation in progress (none outside one). Deferred changes
    /// are loaded once, or reused from a context of the same key; the time the load takes is the
    /// kernel's, not the script's, so it moves the deadline.
    pub(crate) fn changes(&self) -> Result<Arc<[ChangedFile]>, String> {
        let Some(context) = self.context() else {
            return Ok(Arc::from(Vec::new()));
        };
        let started = self.clock.now();
        let changes = context.changes.get(|key| {
            self.loaded_changes
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
                .filter(|(loaded, _)| loaded == key)
                .map(|(_, changes)| Arc::clone(changes))
        })?;
        if let Some(key) = context.changes.key() {
            *self
                .loaded_changes
                .lock()
                .unwrap_or_else(PoisonError::into_inner) =
                Some((key.to_owned(), Arc::clone(&changes)));
        }
        let spent = self.clock.now().saturating_duration_since(started);
        if let Some(deadline) = self
            .deadline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            *deadline += spent;
        }
        Ok(changes)
    }

    /// Whether repository modules may still be read from the worktree.
    pub(crate) fn repository_sealed(&self) -> bool {
        self.repository_sealed.load(Ordering::SeqCst)
    }

    /// The pinned text of a repository module: `None` when the host reads modules from the
    /// worktree, `Some(None)` when modules are pinned but this one is not among them.
    pub(crate) fn pinned_module(&self, file: &str) -> Option<Option<String>> {
        self.pinned_modules
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|modules| modules.get(file).cloned())
    }

    /// The sandbox repository modules are read from, and what it is called in messages: the
    /// repository given to [`ScriptHost::read_modules_from`], else the worktree.
    pub(crate) fn modules_sandbox(&self) -> Result<Sandbox, String> {
        match &*self.modules.lock().unwrap_or_else(PoisonError::into_inner) {
            Some(sandbox) => Ok(sandbox.clone()),
            None => self.sandbox().cloned(),
        }
    }

    /// Notes the text of a repository module the host loaded.
    pub(crate) fn note_module(&self, file: &str, text: &str) {
        self.loaded_modules
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(file.to_owned(), text.to_owned());
    }

    fn seal_repository(&self) {
        self.repository_sealed.store(true, Ordering::SeqCst);
    }

    /// The host's clock, for budgets over several evaluations.
    pub(crate) fn now(&self) -> Instant {
        self.clock.now()
    }

    /// Starts an evaluation: its deadline is the per-evaluation limit, or `until` when that
    /// comes first (the end of a budget several evaluations share).
    fn begin(&self, context: &Context, until: Option<Instant>) {
        *self.current.write().unwrap_or_else(PoisonError::into_inner) =
            Some(Arc::clone(context.data()));
        let now = self.clock.now();
        let deadline = now + self.limits.deadline;
        *self.deadline.lock().unwrap_or_else(PoisonError::into_inner) =
            Some(until.map_or(deadline, |until| until.min(deadline)));
        self.memory
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .start(now);
    }

    fn end(&self) {
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = None;
        *self.deadline.lock().unwrap_or_else(PoisonError::into_inner) = None;
        self.memory
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stop();
    }

    fn record(&self, kind: MessageKind, text: &str) {
        let mut output = self.output.lock().unwrap_or_else(PoisonError::into_inner);
        if output.messages.len() >= self.limits.max_messages {
            output.dropped += 1;
            return;
        }
        let mut end = text.len().min(MAX_MESSAGE_BYTES);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        output.messages.push(ScriptMessage {
            kind,
            text: text[..end].to_owned(),
        });
    }
}

/// The scripting host of one run.
#[derive(Debug)]
pub struct ScriptHost {
    engine: Engine,
    state: Arc<HostState>,
    file: String,
    lines: Vec<String>,
    script: Option<Origin>,
    expressions: Mutex<HashMap<String, Arc<AST>>>,
    /// The context of the step visit in progress, by key (see [`ScriptHost::visit_context`]).
    visit: Mutex<Option<(String, Context)>>,
    evaluation: Mutex<()>,
    /// Names and arities of the functions the workflow's script defines.
    defined: Vec<(String, usize)>,
}

impl ScriptHost {
    /// A host without a workflow script.
    pub fn new(options: HostOptions) -> Result<Self, ScriptError> {
        Self::with_clock(options, Arc::new(SystemClock))
    }

    /// A host whose deadline reads `clock`.
    pub(crate) fn with_clock(
        options: HostOptions,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, ScriptError> {
        let sandbox = options
            .root
            .as_deref()
            .map(Sandbox::new)
            .transpose()
            .map_err(|message| ScriptError::Context { message })?;
        let state = Arc::new(HostState {
            limits: options.limits.clone(),
            sandbox,
            repository_sealed: AtomicBool::new(false),
            pinned_modules: Mutex::new(None),
            loaded_modules: Mutex::new(BTreeMap::new()),
            modules: Mutex::new(None),
            current: RwLock::new(None),
            clock,
            deadline: Mutex::new(None),
            memory: Mutex::new(MemoryWatch::default()),
            output: Mutex::new(Output::default()),
            loaded_changes: Mutex::new(None),
            globs: super::fs::GlobCache::default(),
            change_values: super::fs::ChangeValues::default(),
        });
        let mut engine = sandboxed_engine(&options.limits);
        install_callbacks(&mut engine, &state);
        engine.register_global_module(super::fs::create_module(Arc::clone(&state)).into());
        engine.register_global_module(super::text::create_module(Arc::clone(&state)).into());
        engine.set_module_resolver(Resolver::new(Arc::clone(&state)));
        Ok(Self {
            engine,
            state,
            file: options.file,
            lines: options.source.lines().map(str::to_owned).collect(),
            script: None,
            expressions: Mutex::new(HashMap::new()),
            visit: Mutex::new(None),
            evaluation: Mutex::new(()),
            defined: Vec::new(),
        })
    }

    /// The run's engine: the sandboxed language, the host API and the loaded script.
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Whether the workflow's script defines a function with this name and number of parameters
    /// (optional hooks such as `summarize(evidence)` are called only when defined).
    pub fn defines(&self, name: &str, arity: usize) -> bool {
        self.defined
            .iter()
            .any(|(defined, parameters)| defined == name && *parameters == arity)
    }

    /// Where the workflow's script was written, when there is one.
    pub fn script_position(&self) -> Option<crate::document::yaml::Pos> {
        self.script.as_ref().map(|origin| origin.pos)
    }

    /// Repository modules (`.tnh/scripts/…`) come from `modules` (file path → text, as the run
    /// pinned them when it started) instead of the worktree: a resumed run judges its steps
    /// with the helpers it started with, whatever an agent wrote into the worktree since. An
    /// import of a module not among them is refused. Call before [`ScriptHost::load_script`].
    pub fn use_pinned_modules(&self, modules: BTreeMap<String, String>) {
        *self
            .state
            .pinned_modules
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(modules);
    }

    /// Repository modules (`.tnh/scripts/…`) are read from `repository` — the operator's
    /// repository, where `.tnh/prompts/` is read too, so a module need not be committed —
    /// instead of the worktree. Call before [`ScriptHost::load_script`].
    pub fn read_modules_from(&self, repository: &std::path::Path) -> Result<(), ScriptError> {
        let sandbox = Sandbox::named(repository, "the repository")
            .map_err(|message| ScriptError::Context { message })?;
        *self
            .state
            .modules
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(sandbox);
        Ok(())
    }

    /// The repository modules the workflow's script loaded (directly or through another
    /// module): file path (`.tnh/scripts/…`) → text, for the run to pin.
    pub fn repository_modules(&self) -> BTreeMap<String, String> {
        self.state
            .loaded_modules
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A host with the workflow's `script` compiled and loaded.
    pub fn for_workflow(
        options: HostOptions,
        workflow: &impl WorkflowScript,
    ) -> Result<Self, ScriptError> {
        let mut host = Self::new(options)?;
        if let Some(script) = workflow.script() {
            host.load_script(script)?;
        }
        Ok(host)
    }

    /// Compiles the workflow's `script` and runs its top level once (imports, constants), so
    /// its functions can be called from every expression and hook of the run.
    pub fn load_script(&mut self, script: &At<String>) -> Result<(), ScriptError> {
        let origin = Origin::of_script(self.lines(), script);
        let mut ast = self
            .engine
            .compile(&script.value)
            .map_err(|error| ScriptError::compile(&self.file, &origin, &error))?;
        ast.set_source(SCRIPT_SOURCE);
        self.defined = ast
            .iter_functions()
            .map(|function| (function.name.to_owned(), function.params.len()))
            .collect();
        self.script = Some(origin);
        let context = Context::empty();
        let module = {
            let _serial = self
                .evaluation
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            self.state.begin(&context, None);
            let module = Module::eval_ast_as_new(Scope::new(), &ast, &self.engine);
            self.state.end();
            self.state.seal_repository();
            module.map_err(|error| self.translator().translate(&origin, *error))?
        };
        self.engine.register_global_module(module.into());
        Ok(())
    }

    /// The `print`/`debug` messages since the last call, oldest first; a final message counts
    /// those dropped beyond the limit.
    pub fn take_output(&self) -> Vec<ScriptMessage> {
        let mut output = self
            .state
            .output
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut messages = std::mem::take(&mut output.messages);
        if output.dropped > 0 {
            messages.push(ScriptMessage {
                kind: MessageKind::Debug,
                text: format!("{} more messages were dropped", output.dropped),
            });
            output.dropped = 0;
        }
        messages
    }

    /// The context of one step visit: built by `build` the first time `key` is asked for, then
    /// the same context (with the same workspace changes, loaded at most once) for every later
    /// evaluation of that visit. A new key replaces the kept context.
    pub fn visit_context(
        &self,
        key: &str,
        build: impl FnOnce() -> Result<Context, ScriptError>,
    ) -> Result<Context, ScriptError> {
        let mut visit = self.visit.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((kept, context)) = visit.as_ref()
            && kept == key
        {
            return Ok(context.clone());
        }
        let context = build()?;
        *visit = Some((key.to_owned(), context.clone()));
        Ok(context)
    }

    /// What the host functions share.
    pub(crate) fn state(&self) -> &Arc<HostState> {
        &self.state
    }

    /// The limits this host enforces.
    pub fn limits(&self) -> &Limits {
        &self.state.limits
    }

    pub(crate) fn file(&self) -> &str {
        &self.file
    }

    pub(crate) fn lines(&self) -> &[String] {
        &self.lines
    }

    pub(crate) fn translator(&self) -> Translator<'_> {
        Translator {
            file: &self.file,
            script: self.script,
            deadline_millis: self.state.limits.deadline.as_millis(),
            memory_budget: self.state.limits.max_memory_growth,
        }
    }

    /// The compiled form of an expression, compiled once per host.
    pub(crate) fn expression(&self, code: &str, origin: &Origin) -> Result<Arc<AST>, ScriptError> {
        if let Some(ast) = self
            .expressions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(code)
        {
            return Ok(Arc::clone(ast));
        }
        let mut ast = self
            .engine
            .compile_expression(code)
            .map_err(|error| ScriptError::compile(&self.file, origin, &error))?;
        ast.set_source(super::error::EXPRESSION_SOURCE);
        let ast = Arc::new(ast);
        let mut cache = self
            .expressions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if cache.len() < MAX_CACHED_EXPRESSIONS {
            cache.insert(code.to_owned(), Arc::clone(&ast));
        }
        Ok(ast)
    }

    /// Evaluates compiled code against `context`, within the deadline.
    pub(crate) fn run(
        &self,
        origin: &Origin,
        ast: &AST,
        scope: &mut Scope,
        context: &Context,
    ) -> Result<Dynamic, ScriptError> {
        self.run_until(origin, ast, scope, context, None)
    }

    /// [`ScriptHost::run`], stopped at `until` if that comes before the deadline.
    pub(crate) fn run_until(
        &self,
        origin: &Origin,
        ast: &AST,
        scope: &mut Scope,
        context: &Context,
        until: Option<Instant>,
    ) -> Result<Dynamic, ScriptError> {
        let _serial = self
            .evaluation
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.state.begin(context, until);
        let result = self.engine.eval_ast_with_scope::<Dynamic>(scope, ast);
        self.state.end();
        result.map_err(|error| self.translator().translate(origin, *error))
    }
}

/// The value an evaluation stopped by the deadline carries.
fn deadline_token() -> Dynamic {
    Dynamic::from(super::error::DEADLINE_TOKEN)
}

/// The value an evaluation stopped by the memory budget carries.
fn memory_token() -> Dynamic {
    Dynamic::from(super::error::MEMORY_TOKEN)
}

fn install_callbacks(engine: &mut Engine, state: &Arc<HostState>) {
    let printed = Arc::clone(state);
    engine.on_print(move |text| printed.record(MessageKind::Print, text));
    let debugged = Arc::clone(state);
    engine.on_debug(move |text, _source, _position| debugged.record(MessageKind::Debug, text));
    let watch = Arc::clone(state);
    engine.on_progress(move |operations| {
        if operations % OPERATIONS_PER_CLOCK_READING == 0 {
            watch.progress()
        } else {
            None
        }
    });
    let variables = Arc::clone(state);
    // `on_var` is marked deprecated only as "volatile"; it is how `ctx` reaches functions,
    // which cannot see the caller's scope.
    #[allow(deprecated)]
    engine.on_var(move |name, index, _context| {
        // A non-zero index is a local variable or parameter of the same name: leave it alone.
        if index != 0 {
            return Ok(None);
        }
        Ok(match name {
            "ctx" => variables.context().map(|context| context.ctx.clone()),
            "params" => variables.context().map(|context| context.params.clone()),
            _ => None,
        })
    });
}

#[cfg(test)]
#[path = "host_tests.rs"]
mod tests;
