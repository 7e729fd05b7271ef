//! The kernel: a pure transition function over a durable state, and (with the kernel issue)
//! the driver loop that executes opcodes and records everything.

pub mod abandon;
pub mod driver;
pub mod finished_runs;
pub mod gate;
pub mod history;
pub use crate::runner::interrupts;
pub mod journal;
pub mod journal_record;
pub mod land;
pub use crate::artifacts::lock;
pub mod operator_rollback;
pub mod orphans;
pub mod params;
pub mod pins;
pub mod preflight;
pub mod recorder;
mod result;
pub mod routing;
pub mod run;
pub mod run_status;
pub mod run_story;
pub mod state;
pub mod transition;

pub use state::{End, Phase, RunState, Safety};
pub use transition::{
    KernelError, Next, StepReport, Transition, complete_step, fail, start_step, wait_at_gate,
};

#[cfg(test)]
mod tests;
