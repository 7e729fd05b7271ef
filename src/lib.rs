//! tnh-conductor: a deterministic kernel that runs workflows of AI coding agents in isolated
//! git worktrees and leaves a complete, auditable run directory behind.
//!
//! The library never prints: only the `cli` and `tnh` layers write to the terminal.

pub mod artifacts;
pub mod cli;
pub mod config;
pub mod demo;
pub mod doctor;
pub mod document;
pub mod error;
pub mod exit;
pub mod ids;
pub mod kernel;
pub use kernel::opcode;
pub mod outcome;
pub mod planner;
pub mod policy;
pub mod proc;
pub mod prompt;
pub mod runner;
pub mod script;
pub mod text;
pub mod tnh;
pub mod viewer;
pub mod workflow;
pub mod workspace;

pub use error::{Error, ExitStatus};
