//! The kernel: a pure transition function over a durable state, and (with the kernel issue)
//! the driver loop that executes opcodes and records everything.

pub mod abandon;
mod change_records;
mod continuation;
mod drift;
pub mod driver;
pub mod finished_runs;
pub mod gate;
mod guard_recovery;
pub mod history;
mod interrupted_manifest;
pub mod opcode;
pub use crate::runner::interrupts;
pub mod journal;
pub mod journal_record;
pub mod land;
mod launch;
pub use crate::artifacts::lock;
pub mod operator_rollback;
pub mod orphans;
pub mod params;
pub mod pins;
mod planner_recovery;
pub mod preflight;
pub mod recorder;
mod recovery;
mod recreate;
mod result;
mod resume;
pub mod routing;
pub mod run;
mod run_error;
pub mod run_status;
pub mod run_story;
mod start;
pub mod state;
pub mod step_lines;
pub mod transition;

pub use state::{End, Phase, RunState, Safety};
pub use transition::{
    KernelError, Next, StepReport, Transition, complete_step, fail, start_step, wait_at_gate,
};

#[cfg(test)]
mod tests;
