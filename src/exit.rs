//! How a command ends, as the operator's shell sees it: the exit codes every layer maps
//! its outcomes to.

use std::process::ExitCode;

/// How a command ended, as the operator's shell sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// 0: success (a success STOP, a valid workflow, a command that did its job).
    Success,
    /// 1: a failure STOP, or `validate` found an invalid workflow.
    Failure,
    /// 2: bad invocation or invalid workflow; nothing was started.
    Usage,
    /// 3: the run waits at a gate.
    Waiting,
    /// 4: runtime error; the run is kept and its reason recorded.
    Runtime,
    /// 130: interrupted; the run can be resumed.
    Interrupted,
}

impl ExitStatus {
    /// The numeric process exit code.
    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Success => 0,
            ExitStatus::Failure => 1,
            ExitStatus::Usage => 2,
            ExitStatus::Waiting => 3,
            ExitStatus::Runtime => 4,
            ExitStatus::Interrupted => 130,
        }
    }
}

impl From<ExitStatus> for ExitCode {
    fn from(status: ExitStatus) -> Self {
        ExitCode::from(status.code())
    }
}
