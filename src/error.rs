//! The top-level error: every module's error converts into it, and it alone decides the exit
//! code a command ends with.

pub use crate::exit::ExitStatus;

/// Any error a command can end with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The command line was wrong or asked for something that cannot be done.
    #[error("{message}")]
    Usage {
        /// What was wrong.
        message: String,
        /// What to do about it.
        hint: Option<String>,
    },
    /// The command exists but a later release implements it.
    #[error("`{command}` is not implemented yet")]
    NotImplemented {
        /// The command as typed, e.g. `gate approve`.
        command: String,
    },
    /// A workflow could not be loaded or is invalid.
    #[error(transparent)]
    Workflow(#[from] crate::workflow::WorkflowError),
    /// A prompt could not be loaded or rendered.
    #[error(transparent)]
    Prompt(#[from] crate::prompt::PromptError),
    /// A workflow script or expression failed to compile or evaluate.
    #[error(transparent)]
    Script(#[from] crate::script::ScriptError),
    /// A run could not start or continue.
    #[error(transparent)]
    Run(Box<crate::kernel::run::RunError>),
    /// The configuration file could not be used.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// A workspace (git worktree, snapshot, rollback) operation failed.
    #[error(transparent)]
    Workspace(#[from] crate::workspace::WorkspaceError),
    /// A policy could not be compiled.
    #[error(transparent)]
    Policy(#[from] crate::policy::PolicyError),
    /// An agent or validator process could not be run or recorded.
    #[error(transparent)]
    Runner(#[from] crate::runner::RunnerError),
    /// Reading or writing a file failed.
    #[error("failed to {action} `{path}`: {source}")]
    Io {
        /// What was being done (`read`, `write`).
        action: &'static str,
        /// The file concerned.
        path: std::path::PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Writing JSON failed.
    #[error("failed to serialize JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The demo repository could not be made.
    #[error(transparent)]
    Demo(#[from] crate::demo::DemoError),
    /// `land` refused or failed.
    #[error(transparent)]
    Land(Box<crate::kernel::land::LandError>),
    /// The viewer (`serve`, `report`) could not start or failed.
    #[error(transparent)]
    Viewer(Box<crate::viewer::ViewerError>),
}

impl From<crate::viewer::ViewerError> for Error {
    fn from(error: crate::viewer::ViewerError) -> Self {
        Error::Viewer(Box::new(error))
    }
}

impl From<crate::kernel::land::LandError> for Error {
    fn from(error: crate::kernel::land::LandError) -> Self {
        Error::Land(Box::new(error))
    }
}

impl Error {
    /// A usage error with a hint.
    pub fn usage(message: impl Into<String>, hint: impl Into<String>) -> Self {
        Error::Usage {
            message: message.into(),
            hint: Some(hint.into()),
        }
    }

    /// The exit status this error ends a command with.
    pub fn exit_status(&self) -> ExitStatus {
        match self {
            Error::Usage { .. }
            | Error::NotImplemented { .. }
            | Error::Workflow(_)
            | Error::Config(_)
            | Error::Prompt(_) => ExitStatus::Usage,
            Error::Workspace(error) => error.exit_status(),
            // A `resume` stopped while it waited for the worktree lock: interrupted, as a
            // `run` stopped there is, not a failure.
            Error::Run(error) if error.is_interrupted() => ExitStatus::Interrupted,
            Error::Run(error) if error.is_usage() => ExitStatus::Usage,
            Error::Run(_) => ExitStatus::Runtime,
            Error::Policy(_) => ExitStatus::Usage,
            // A script that does not compile makes the workflow invalid: nothing was started.
            Error::Script(crate::script::ScriptError::Compile { .. }) => ExitStatus::Usage,
            Error::Demo(crate::demo::DemoError::NotEmpty(_)) => ExitStatus::Usage,
            // A landing refused (nothing changed) is a "no", like a failure STOP; bad
            // arguments are usage; git or the run directory failing part-way is runtime.
            Error::Land(error) if error.is_usage() => ExitStatus::Usage,
            Error::Land(error) if error.is_refusal() => ExitStatus::Failure,
            Error::Land(_) => ExitStatus::Runtime,
            Error::Viewer(error) if error.is_usage() => ExitStatus::Usage,
            Error::Script(_)
            | Error::Runner(_)
            | Error::Io { .. }
            | Error::Json(_)
            | Error::Demo(_)
            | Error::Viewer(_) => ExitStatus::Runtime,
        }
    }

    /// A line telling the operator what to do, when there is one.
    pub fn hint(&self) -> Option<String> {
        match self {
            Error::Usage { hint, .. } => hint.clone(),
            Error::NotImplemented { .. } => {
                Some("this command is part of the design and lands in a later release".to_owned())
            }
            Error::Workflow(error) => error.hint(),
            Error::Config(error) => error.hint(),
            Error::Prompt(error) => error.hint(),
            Error::Script(error) => error.hint(),
            Error::Workspace(error) => error.hint(),
            Error::Policy(error) => error.hint(),
            Error::Runner(error) => error.hint(),
            Error::Run(error) => error.hint(),
            Error::Io {
                action: "write",
                path,
                source,
            } => Some(write_hint(path, source)),
            Error::Io { .. } => Some("check that the path exists and is readable".to_owned()),
            Error::Json(_) => None,
            Error::Demo(error) => error.hint(),
            Error::Land(error) => error.hint(),
            Error::Viewer(error) => error.hint(),
        }
    }
}

/// What to do when writing `path` failed: a file standing where one of its folders is needed
/// is named; otherwise the folder's write permission (or a read-only file system).
fn write_hint(path: &std::path::Path, source: &std::io::Error) -> String {
    use std::io::ErrorKind;
    let in_the_way = path
        .ancestors()
        .skip(1)
        .find(|folder| std::fs::metadata(folder).is_ok_and(|metadata| !metadata.is_dir()));
    match (in_the_way, source.kind()) {
        (Some(file), _) => format!(
            "`{}` is a file where a folder is needed: move it away (or pass --config FILE to write elsewhere)",
            file.display()
        ),
        (None, ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem) => {
            let folder = path
                .parent()
                .filter(|parent| !parent.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."));
            format!(
                "you may not write in `{}`: check its permissions (and those of the folders above it) and that the file system is not read-only, or pass --config FILE to write elsewhere",
                folder.display()
            )
        }
        (None, ErrorKind::AlreadyExists | ErrorKind::NotADirectory) => {
            "something that is not a folder stands where one of its folders is needed: move it away (or pass --config FILE to write elsewhere)".to_owned()
        }
        (None, _) => {
            "check that the folder exists and can be written, or pass --config FILE to write elsewhere"
                .to_owned()
        }
    }
}

/// The result type of the library's commands.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// A run or resume stopped by Ctrl-C while it waited for the repository's worktree lock
    /// exits 130 (resumable), whichever layer carries the error; other workspace errors keep
    /// their own status.
    #[test]
    fn a_wait_for_the_worktree_lock_stopped_by_ctrl_c_is_an_interruption() {
        use crate::kernel::run::RunError;
        use crate::workspace::WorkspaceError;
        let interrupted = || WorkspaceError::WorktreeLockInterrupted {
            path: "/repo/.git/tnh-worktrees.lock".into(),
            cause: "Ctrl-C".to_owned(),
            pid: Some(42),
        };
        let through_run = Error::Run(Box::new(RunError::Workspace(interrupted())));
        assert_eq!(through_run.exit_status(), ExitStatus::Interrupted);
        assert_eq!(through_run.exit_status().code(), 130);
        assert_eq!(
            Error::Workspace(interrupted()).exit_status(),
            ExitStatus::Interrupted
        );
        let failed = Error::Run(Box::new(RunError::Workspace(WorkspaceError::Parse {
            command: "git",
            detail: "x".to_owned(),
        })));
        assert_eq!(failed.exit_status(), ExitStatus::Runtime);
        let refused = Error::Run(Box::new(RunError::Workspace(
            WorkspaceError::InvalidRefName("a b".to_owned()),
        )));
        assert_eq!(refused.exit_status(), ExitStatus::Usage);
    }

    /// `init` that could not write its file was told to check that the
    /// path "exists and is readable".
    #[test]
    fn a_failed_write_is_hinted_about_writing() {
        let denied = Error::Io {
            action: "write",
            path: "/repo/.tnh/config.yaml".into(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        };
        let hint = denied.hint().unwrap();
        assert!(
            hint.starts_with("you may not write in `/repo/.tnh`: check its permissions")
                && !hint.contains("readable"),
            "{hint}"
        );
        let folder = tempfile::tempdir().unwrap();
        std::fs::write(folder.path().join(".tnh"), "x").unwrap();
        let blocked = Error::Io {
            action: "write",
            path: folder.path().join(".tnh/config.yaml"),
            source: std::io::Error::from(std::io::ErrorKind::AlreadyExists),
        };
        assert_eq!(
            blocked.hint().unwrap(),
            format!(
                "`{}` is a file where a folder is needed: move it away (or pass --config FILE to write elsewhere)",
                folder.path().join(".tnh").display()
            )
        );
        let read = Error::Io {
            action: "read",
            path: "x".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        assert!(read.hint().unwrap().contains("readable"));
    }
}
