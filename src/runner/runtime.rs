//! The process's one tokio runtime, built the first time something needs it and kept until
//! the process ends. Agents, validators, planner processes, `tnh`'s tools and the waits on a
//! planner are all supervised on it, through its handle: a run, a gate decision and the
//! `--wait` that follows them in one process share it instead of each building their own.
//!
//! Lazily built, in a low module, rather than built in `main` and passed down: the library's
//! entry points (the kernel, the planner, `tnh`) are also called from tests and benchmarks,
//! and a process that never supervises anything (`validate`, `runs list`) never starts its
//! threads. Two worker threads, as each run had before: supervision is mostly waiting.
//!
//! Its handle's `block_on` may be called from any thread that is not itself running async
//! code (as a runtime's own `block_on`).

use std::sync::OnceLock;

use tokio::runtime::{Handle, Runtime};

/// The runtime, once built.
static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// The process's runtime, built on the first call.
pub fn shared() -> std::io::Result<Handle> {
    if let Some(runtime) = RUNTIME.get() {
        return Ok(runtime.handle().clone());
    }
    let built = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("tnh-runtime")
        .enable_all()
        .build()?;
    // Two first calls at once: one runtime is kept, the other dropped here, before any use.
    let runtime = RUNTIME.get_or_init(|| built);
    Ok(runtime.handle().clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_is_built_once_and_runs_timers_and_tasks_from_any_thread() {
        let first = shared().unwrap();
        let kept: *const Runtime = RUNTIME.get().unwrap();
        let second = std::thread::spawn(|| shared().unwrap()).join().unwrap();
        assert!(std::ptr::eq(kept, RUNTIME.get().unwrap()));
        drop(first);
        let answer = second.block_on(async {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            tokio::spawn(async { 42 }).await.unwrap()
        });
        assert_eq!(answer, 42);
    }
}
