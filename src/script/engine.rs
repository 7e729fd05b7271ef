//! The one engine configuration every script runs under: the workflow's `script`, each
//! `${{ … }}` expression, stdlib and repository modules, and the static checks of `validate`.
//!
//! Limits are plain constants rather than Rhai's build-dependent defaults (Rhai lowers call
//! depth in debug builds), so a script that passes in a debug test passes in a release run and
//! the other way round. The language is Rhai's standard library minus what reaches outside:
//! no `eval`, no `sleep`/`exit` (the language-core package is left out), no time package; the
//! host API registered by `host` is the only door to the world.

use std::sync::OnceLock;
use std::time::Duration;

use rhai::packages::{
    ArithmeticPackage, BasicArrayPackage, BasicBlobPackage, BasicFnPackage, BasicIteratorPackage,
    BasicMapPackage, BasicMathPackage, BasicStringPackage, BitFieldPackage, LogicPackage,
    MoreStringPackage, Package,
};
use rhai::{Engine, Module, Shared};

/// Keywords a script may not use: `eval` would run code the validator never saw.
pub const DISABLED_SYMBOLS: [&str; 1] = ["eval"];

/// Bounds on what one evaluation may consume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Rhai operations per evaluation (a `loop {}` stops here).
    pub max_operations: u64,
    /// Nested function calls (unbounded recursion stops here, well before the native stack).
    pub max_call_levels: usize,
    /// Expression nesting at global level, checked when compiling.
    pub max_expr_depth: usize,
    /// Expression nesting inside functions, checked when compiling.
    pub max_function_expr_depth: usize,
    /// Bytes in one string.
    pub max_string_bytes: usize,
    /// Items in one value's arrays, nested arrays and arrays inside maps counted together (and
    /// bytes in one blob).
    pub max_array_items: usize,
    /// Entries in one value's object maps, nested maps and maps inside arrays counted
    /// together: room for the change list of `max_array_items` files (`changed_files()` gives
    /// a 6-entry map per change) with some to spare.
    pub max_map_entries: usize,
    /// Variables alive at once.
    pub max_variables: usize,
    /// Functions one script may define.
    pub max_functions: usize,
    /// Modules one evaluation may import.
    pub max_modules: usize,
    /// Wall-clock time of one evaluation.
    pub deadline: Duration,
    /// Wall-clock time of all the policy `check` calls of one step (one call per changed
    /// file): files not checked by then fail closed.
    pub max_check_time: Duration,
    /// Bytes the process's resident memory may grow by during one evaluation (read from
    /// `/proc/self/statm` every millisecond of evaluation time; see `script::memory`).
    pub max_memory_growth: u64,
    /// Bytes `read_file` returns, and the size of a repository module.
    pub max_read_bytes: u64,
    /// Directory entries one `glob` may visit.
    pub max_glob_entries: usize,
    /// `print`/`debug` messages kept per evaluation; later ones are counted, not kept.
    pub max_messages: usize,
}

impl Limits {
    /// The limits of every run and every build profile.
    pub const STANDARD: Limits = Limits {
        max_operations: 1_000_000,
        max_call_levels: 48,
        max_expr_depth: 64,
        max_function_expr_depth: 48,
        max_string_bytes: 4 * 1024 * 1024,
        max_array_items: 20_000,
        max_map_entries: 200_000,
        max_variables: 256,
        max_functions: 1_000,
        max_modules: 64,
        deadline: Duration::from_secs(2),
        max_check_time: Duration::from_secs(30),
        max_memory_growth: 128 * 1024 * 1024,
        max_read_bytes: 1024 * 1024,
        max_glob_entries: 50_000,
        max_messages: 1_000,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::STANDARD
    }
}

/// The standard packages, built once per process: building them costs more than a compile.
fn packages() -> &'static [Shared<Module>] {
    static PACKAGES: OnceLock<Vec<Shared<Module>>> = OnceLock::new();
    PACKAGES.get_or_init(|| {
        vec![
            ArithmeticPackage::new().as_shared_module(),
            BasicStringPackage::new().as_shared_module(),
            BasicIteratorPackage::new().as_shared_module(),
            BasicFnPackage::new().as_shared_module(),
            BitFieldPackage::new().as_shared_module(),
            LogicPackage::new().as_shared_module(),
            BasicMathPackage::new().as_shared_module(),
            BasicArrayPackage::new().as_shared_module(),
            BasicBlobPackage::new().as_shared_module(),
            BasicMapPackage::new().as_shared_module(),
            MoreStringPackage::new().as_shared_module(),
        ]
    })
}

/// An engine with the sandbox's language and limits, but no host API and no module resolver:
/// what `validate` compiles with, and what the host builds on.
pub fn sandboxed_engine(limits: &Limits) -> Engine {
    let mut engine = Engine::new_raw();
    for package in packages() {
        engine.register_global_module(package.clone());
    }
    for symbol in DISABLED_SYMBOLS {
        engine.disable_symbol(symbol);
    }
    engine
        .set_max_operations(limits.max_operations)
        .set_max_call_levels(limits.max_call_levels)
        .set_max_expr_depths(limits.max_expr_depth, limits.max_function_expr_depth)
        .set_max_string_size(limits.max_string_bytes)
        .set_max_array_size(limits.max_array_items)
        .set_max_map_size(limits.max_map_entries)
        .set_max_variables(limits.max_variables)
        .set_max_functions(limits.max_functions)
        .set_max_modules(limits.max_modules);
    // Without a resolver of the host, no import can be resolved at all.
    engine.set_module_resolver(rhai::module_resolvers::DummyModuleResolver::new());
    engine
}

/// The engine `validate` compiles scripts and expressions with.
pub fn checking_engine() -> Engine {
    sandboxed_engine(&Limits::STANDARD)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tests run in debug builds: the engine must carry the standard limits there too, not
    /// Rhai's lower debug defaults.
    #[test]
    fn the_engine_carries_the_standard_limits_in_every_build() {
        let limits = Limits::STANDARD;
        let engine = sandboxed_engine(&limits);
        assert_eq!(engine.max_operations(), limits.max_operations);
        assert_eq!(engine.max_call_levels(), limits.max_call_levels);
        assert_eq!(engine.max_expr_depth(), limits.max_expr_depth);
        assert_eq!(
            engine.max_function_expr_depth(),
            limits.max_function_expr_depth
        );
        assert_eq!(engine.max_string_size(), limits.max_string_bytes);
        assert_eq!(engine.max_array_size(), limits.max_array_items);
        assert_eq!(engine.max_map_size(), limits.max_map_entries);
        assert_eq!(engine.max_variables(), limits.max_variables);
        assert_eq!(engine.max_functions(), limits.max_functions);
        assert_eq!(engine.max_modules(), limits.max_modules);
    }

    #[test]
    fn eval_is_a_compile_error_and_deep_nesting_is_refused_while_compiling() {
        let engine = checking_engine();
        let error = engine.compile("fn f(code) { eval(code) }").unwrap_err();
        assert!(error.to_string().contains("'eval' is disabled"), "{error}");
        let nested = format!("{}1{}", "(".repeat(500), ")".repeat(500));
        assert!(engine.compile_expression(&nested).is_err());
    }
}
