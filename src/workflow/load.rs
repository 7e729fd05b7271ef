//! Reading a workflow file and running every check on it: parse, decode, validate.

use std::path::Path;

use super::decode::decode_workflow;
use super::diagnostic::{Diagnostic, Diagnostics};
use super::expressions::ExpressionChecker;
use super::model::Workflow;
use super::validate::{KnownNames, validate_workflow};
use super::yaml::{self, Pos};

/// The result of checking one workflow file.
#[derive(Debug)]
pub struct CheckedWorkflow {
    /// Every problem found, sorted by position.
    pub diagnostics: Vec<Diagnostic>,
    /// The decoded workflow, when decoding got that far (it may still have errors).
    pub workflow: Option<Workflow>,
    /// False when the file could not be read at all (a missing file, a directory).
    pub readable: bool,
}

impl CheckedWorkflow {
    /// True when no error (warnings allowed) was found.
    pub fn is_valid(&self) -> bool {
        self.readable
            && self.workflow.is_some()
            && !self
                .diagnostics
                .iter()
                .any(|item| item.severity == super::diagnostic::Severity::Error)
    }
}

/// Reads and checks a workflow file. `display` names the file in diagnostics.
pub fn check_file(path: &Path, display: &str, known: &KnownNames) -> CheckedWorkflow {
    check_file_keeping_source(path, display, known).0
}

/// [`check_file`], also giving back the bytes it checked (`None` when it could not read them):
/// the run records exactly the text that was checked, read once.
pub fn check_file_keeping_source(
    path: &Path,
    display: &str,
    known: &KnownNames,
) -> (CheckedWorkflow, Option<Vec<u8>>) {
    let mut diagnostics = Diagnostics::new(display);
    let bytes = match read_bounded(path) {
        Ok(bytes) => bytes,
        Err(problem) => {
            diagnostics
                .error(Pos::new(1, 1), problem.code, problem.message)
                .hint(problem.hint);
            let checked = CheckedWorkflow {
                diagnostics: diagnostics.into_sorted(),
                workflow: None,
                readable: problem.code != "read-error",
            };
            return (checked, None);
        }
    };
    let workflow = check_bytes(&bytes, known, &mut diagnostics);
    let checked = CheckedWorkflow {
        diagnostics: diagnostics.into_sorted(),
        workflow,
        readable: true,
    };
    (checked, Some(bytes))
}

/// Checks workflow text already in memory.
pub fn check_bytes(
    bytes: &[u8],
    known: &KnownNames,
    diagnostics: &mut Diagnostics,
) -> Option<Workflow> {
    // Duplicate keys are reported together with every other problem of the document.
    let (root, errors) = yaml::parse_reporting_all(bytes);
    for error in errors {
        let hinted = diagnostics.error(error.pos, error.code, error.message);
        if let Some(hint) = error.hint {
            hinted.hint(hint);
        }
    }
    let root = root?;
    let workflow = decode_workflow(&root, diagnostics)?;
    validate_workflow(&workflow, known, diagnostics);
    // Parsing succeeded, so the bytes are UTF-8.
    let source = std::str::from_utf8(bytes).unwrap_or_default();
    let functions = ExpressionChecker::new(source, &workflow)
        .with_repository(known.prompts.repository())
        .check(&workflow, diagnostics);
    // A script that does not compile is reported; what it defines is then unknown.
    if let Some(functions) = functions {
        super::prompts_check::check_policy_functions(
            &workflow,
            &known.prompts,
            &functions,
            diagnostics,
        );
    }
    Some(workflow)
}

/// Why a file's bytes were not checked.
struct ReadProblem {
    code: &'static str,
    message: String,
    hint: String,
}

fn read_error(message: String, hint: &str) -> ReadProblem {
    ReadProblem {
        code: "read-error",
        message,
        hint: hint.to_owned(),
    }
}

/// Reads a file, refusing anything that is not a regular file (a directory, a FIFO, a device,
/// a socket; a symbolic link is followed) and anything larger than the parser accepts, without
/// reading more than that into memory. The file is opened as the run directory's files are
/// ([`safe_files::open_regular_following`]: a FIFO with no writer cannot block the open).
fn read_bounded(path: &Path) -> Result<Vec<u8>, ReadProblem> {
    use crate::artifacts::safe_files;
    let shown = path.display();
    let file = safe_files::open_regular_following(path).map_err(|error| {
        // Not a regular file: `stat`, which opens nothing, says what it is.
        let kind = std::fs::metadata(path).map(|metadata| metadata.file_type());
        match kind {
            Ok(kind) if kind.is_dir() => read_error(
                format!("`{shown}` is a directory, not a workflow file"),
                "pass the workflow's .yaml file(s), e.g. `dir/*.yaml`",
            ),
            Ok(kind) if !kind.is_file() => read_error(
                format!(
                    "`{shown}` is {}, not a regular file",
                    safe_files::kind_name(kind)
                ),
                "pass the workflow's .yaml file: a FIFO, a device or a socket is not read, as it may never end",
            ),
            _ => {
                let hint = if error.kind() == std::io::ErrorKind::PermissionDenied {
                    "check the file's permissions"
                } else {
                    "check the path; pass workflow .yaml files"
                };
                read_error(format!("cannot read `{shown}`: {error}"), hint)
            }
        }
    })?;
    let size = file.metadata().map(|metadata| metadata.len()).unwrap_or(0);
    let limit = yaml::MAX_DOCUMENT_BYTES as u64;
    let (bytes, more) = safe_files::read_bounded(file, limit).map_err(|error| {
        read_error(
            format!("cannot read `{shown}`: {error}"),
            "check the file's permissions",
        )
    })?;
    if more {
        // The real size comes from the metadata of the regular file: the rest is never read.
        return Err(ReadProblem {
            code: "file-too-large",
            message: format!(
                "the file is {} bytes; workflow files are limited to {} bytes",
                size.max(limit + 1),
                yaml::MAX_DOCUMENT_BYTES
            ),
            hint: "split the workflow or move large data into files it references".to_owned(),
        });
    }
    Ok(bytes)
}
