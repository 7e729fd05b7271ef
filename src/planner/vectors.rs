//! Decision vectors: `{"name", "envelope", "expect": {"status",
//! "risk_flags"}}` files run against a backend; the status must match exactly and each listed
//! flag must be present.

use std::path::{Path, PathBuf};

use super::backend::{Backend, Request, Verdict, decide};
use super::{PlannerInput, Status};
use crate::document::shape;

/// Why the vectors of a folder cannot be run. Every file is checked before any is run, so a
/// malformed one never comes after paid planner calls whose results would be lost.
#[derive(Debug, thiserror::Error)]
pub enum VectorsError {
    /// The folder cannot be listed.
    #[error("cannot read `{}`: {source}", folder.display())]
    Folder {
        /// The folder.
        folder: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Some files are not decision vectors: each names its file and what is wrong.
    #[error(
        "{} of the {total} vector file(s) in `{}` cannot be used, so no vector was run:\n{}",
        problems.len(),
        folder.display(),
        problems.iter().map(|problem| format!("  {problem}")).collect::<Vec<_>>().join("\n")
    )]
    Malformed {
        /// The folder.
        folder: PathBuf,
        /// How many `*.json` files it holds.
        total: usize,
        /// One per bad file, in file name order.
        problems: Vec<VectorError>,
    },
}

/// Why one file is not a usable decision vector.
#[derive(Debug, thiserror::Error)]
pub enum VectorError {
    /// The file cannot be read.
    #[error("cannot read `{}`: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not JSON.
    #[error("`{}` is not JSON: {source}", path.display())]
    NotJson {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        source: serde_json::Error,
    },
    /// The file is JSON but not in the vector format.
    #[error("`{}` is not a decision vector: {problem}", path.display())]
    NotAVector {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: FormatError,
    },
}

/// What is wrong with a vector's JSON, against `{"name", "envelope", "expect": {"status",
/// "risk_flags"}}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The vector is not an object.
    #[error("a vector is a JSON object with `name`, `envelope` and `expect`")]
    NotAnObject,
    /// A key the format does not have (`prefix` is `expect.` inside `expect`).
    #[error("unknown key `{prefix}{key}`; {}", unknown_key_hint(key, keys, prefix))]
    UnknownKey {
        /// The key as written.
        key: String,
        /// The keys there.
        keys: &'static [&'static str],
        /// Where (`` or `expect.`).
        prefix: &'static str,
    },
    /// `name` is absent or not a string.
    #[error("`name` is missing or not a string")]
    NoName,
    /// `envelope` is absent.
    #[error("`envelope` is missing")]
    NoEnvelope,
    /// `envelope` is not an object.
    #[error("`envelope` must be an object, got {got}")]
    EnvelopeNotAnObject {
        /// What it is.
        got: serde_json::Value,
    },
    /// `envelope` does not match the planner input schema.
    #[error("`envelope` is not valid planner input: {problem}")]
    InvalidEnvelope {
        /// The first schema problem.
        problem: String,
    },
    /// `expect` is absent or not an object.
    #[error("`expect` is missing or not an object")]
    NoExpect,
    /// `expect.status` is absent or not a string.
    #[error("`expect.status` is missing or not a string")]
    NoStatus,
    /// `expect.status` is none of the five statuses.
    #[error(
        "`expect.status` `{status}` is not a status (success, partial, blocked, unsafe, needs_human){}",
        crate::document::diagnostic::nearest(status, shape::names::<Status>().iter().copied())
            .map_or(String::new(), |near| format!("; did you mean `{near}`?"))
    )]
    UnknownStatus {
        /// The status as written.
        status: String,
    },
    /// `expect.risk_flags` is not a list of strings.
    #[error("`expect.risk_flags` must be a list of strings, got {got}")]
    RiskFlagsNotAList {
        /// What it is.
        got: serde_json::Value,
    },
}

/// A vector file as written: a named envelope and the decision it must get.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VectorDocument {
    /// Names the vector in reports.
    pub name: String,
    /// What the vector checks.
    pub description: Option<String>,
    /// Valid planner input (`tnh-conductor schema planner-input`).
    pub envelope: serde_json::Map<String, serde_json::Value>,
    /// The decision expected.
    pub expect: ExpectDocument,
}

/// A vector's `expect`.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExpectDocument {
    /// The status the planner must answer.
    pub status: Status,
    /// Risk flags the answer must raise.
    pub risk_flags: Option<Vec<String>>,
}

/// A checked vector, ready to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Vector {
    /// The file it was read from.
    pub file: PathBuf,
    /// Its name.
    pub name: String,
    envelope: serde_json::Value,
    input: PlannerInput,
    expected: String,
    risk_flags: Vec<String>,
}

/// The result of one vector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VectorResult {
    /// The vector's name.
    pub name: String,
    /// The expected status.
    pub expected: String,
    /// The status the backend (and guard) gave.
    pub actual: String,
    /// Expected flags that were missing.
    pub missing_flags: Vec<String>,
    /// Why the planner gave no decision of its own, when it did not (it could not run, its
    /// answers were invalid — the kernel decided `planner_error` — or it named an illegal
    /// `next_step`), unless the vector expects `planner_error`.
    pub planner_failure: Option<String>,
}

impl VectorResult {
    /// Whether the vector passed: the planner answered, with the status and flags expected.
    pub fn passed(&self) -> bool {
        self.planner_failure.is_none()
            && self.expected == self.actual
            && self.missing_flags.is_empty()
    }
}

/// Reads and checks every `*.json` vector of a folder, sorted by file name; any bad file is
/// an error listing every bad file, before a planner is asked anything.
pub fn load_vectors(folder: &Path) -> Result<Vec<Vector>, VectorsError> {
    let mut files: Vec<_> = std::fs::read_dir(folder)
        .map_err(|source| VectorsError::Folder {
            folder: folder.to_path_buf(),
            source,
        })?
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            path.extension()
                .is_some_and(|extension| extension == "json")
        })
        .collect();
    files.sort();
    let mut vectors = Vec::new();
    let mut problems = Vec::new();
    for path in &files {
        match load_vector(path) {
            Ok(vector) => vectors.push(vector),
            Err(problem) => problems.push(problem),
        }
    }
    if problems.is_empty() {
        Ok(vectors)
    } else {
        Err(VectorsError::Malformed {
            folder: folder.to_path_buf(),
            total: files.len(),
            problems,
        })
    }
}

fn load_vector(path: &Path) -> Result<Vector, VectorError> {
    let text = std::fs::read_to_string(path).map_err(|source| VectorError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let vector: serde_json::Value =
        serde_json::from_str(&text).map_err(|source| VectorError::NotJson {
            path: path.to_path_buf(),
            source,
        })?;
    let Expectation {
        name,
        input,
        status,
        risk_flags,
    } = check_vector(&vector).map_err(|problem| VectorError::NotAVector {
        path: path.to_path_buf(),
        problem,
    })?;
    Ok(Vector {
        file: path.to_path_buf(),
        name,
        envelope: vector
            .get("envelope")
            .cloned()
            .unwrap_or(serde_json::Value::Null),
        input,
        expected: status,
        risk_flags,
    })
}

/// Runs one vector through the backend and the guard.
pub fn run_vector(vector: &Vector, backend: &Backend) -> VectorResult {
    let request = Request {
        envelope: &vector.envelope,
        input: &vector.input,
        prompt: super::backend::DEFAULT_PROMPT,
        cwd: None,
        run_variables: None,
        cancellation: &crate::runner::Cancellation::never(),
    };
    let expects_planner_error = vector.risk_flags.iter().any(|flag| flag == "planner_error");
    let (decision, actual, planner_failure) = match decide(backend, &request).0 {
        Verdict::Decided {
            decision,
            decided_by,
            ..
        } => {
            let actual = decision.status.name().to_owned();
            // The kernel decided: the planner gave no usable answer. Its reason is the
            // `planner_error` blocker's summary.
            let failure = (decided_by == "kernel" && !expects_planner_error).then(|| {
                decision
                    .blockers
                    .iter()
                    .find(|blocker| blocker.code == "planner_error")
                    .map_or_else(
                        || "the planner gave no usable answer".to_owned(),
                        |blocker| blocker.summary.clone(),
                    )
            });
            (decision, actual, failure)
        }
        Verdict::Illegal { decision, reason } => (
            decision,
            "illegal next_step".to_owned(),
            Some(format!("the planner's answer is illegal: {reason}")),
        ),
        Verdict::Interrupted => (
            crate::planner::Decision::status(crate::planner::Status::Blocked),
            "interrupted".to_owned(),
            Some("interrupted".to_owned()),
        ),
    };
    let missing_flags = vector
        .risk_flags
        .iter()
        .filter(|flag| !decision.risk_flags.iter().any(|found| found == *flag))
        .cloned()
        .collect();
    VectorResult {
        name: vector.name.clone(),
        expected: vector.expected.clone(),
        actual,
        missing_flags,
        planner_failure,
    }
}

/// What a well-formed vector expects.
struct Expectation {
    name: String,
    input: PlannerInput,
    status: String,
    risk_flags: Vec<String>,
}

/// Checks a vector against the format `{"name", "envelope", "expect": {"status",
/// "risk_flags"}}`: known keys only, a string name, an envelope that is valid planner input
/// (`tnh-conductor schema planner-input`), a status among the five, a list of flag strings.
fn check_vector(vector: &serde_json::Value) -> Result<Expectation, FormatError> {
    let object = vector.as_object().ok_or(FormatError::NotAnObject)?;
    unknown_key(object, shape::keys::<VectorDocument>(), "")?;
    let name = object
        .get("name")
        .and_then(serde_json::Value::as_str)
        .ok_or(FormatError::NoName)?
        .to_owned();
    let envelope = object.get("envelope").ok_or(FormatError::NoEnvelope)?;
    if !envelope.is_object() {
        return Err(FormatError::EnvelopeNotAnObject {
            got: envelope.clone(),
        });
    }
    if let Some(problem) = envelope_problems(envelope).into_iter().next() {
        return Err(FormatError::InvalidEnvelope { problem });
    }
    let input = PlannerInput::read(envelope);
    let expect = object
        .get("expect")
        .and_then(serde_json::Value::as_object)
        .ok_or(FormatError::NoExpect)?;
    unknown_key(expect, shape::keys::<ExpectDocument>(), "expect.")?;
    let status = expect
        .get("status")
        .and_then(serde_json::Value::as_str)
        .ok_or(FormatError::NoStatus)?;
    if shape::parse::<Status>(status).is_none() {
        return Err(FormatError::UnknownStatus {
            status: status.to_owned(),
        });
    }
    let risk_flags = match expect.get("risk_flags") {
        None => Vec::new(),
        Some(serde_json::Value::Array(flags)) if flags.iter().all(serde_json::Value::is_string) => {
            flags
                .iter()
                .filter_map(|flag| flag.as_str().map(str::to_owned))
                .collect()
        }
        Some(other) => {
            return Err(FormatError::RiskFlagsNotAList { got: other.clone() });
        }
    };
    Ok(Expectation {
        name,
        input,
        status: status.to_owned(),
        risk_flags,
    })
}

/// Refuses the first key of `object` that is not among `keys`.
fn unknown_key(
    object: &serde_json::Map<String, serde_json::Value>,
    keys: &'static [&'static str],
    prefix: &'static str,
) -> Result<(), FormatError> {
    match object.keys().find(|key| !keys.contains(&key.as_str())) {
        Some(key) => Err(FormatError::UnknownKey {
            key: key.clone(),
            keys,
            prefix,
        }),
        None => Ok(()),
    }
}

/// The nearest key to a misspelt one, else the list of keys.
fn unknown_key_hint(key: &str, keys: &[&str], prefix: &str) -> String {
    match crate::document::diagnostic::nearest(key, keys.iter().copied()) {
        Some(near) => format!("did you mean `{prefix}{near}`?"),
        None => format!(
            "the keys are {}",
            keys.iter()
                .map(|key| format!("`{prefix}{key}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// What makes an envelope invalid planner input, per [`super::input_schema`].
fn envelope_problems(envelope: &serde_json::Value) -> Vec<String> {
    static VALIDATOR: std::sync::OnceLock<Option<jsonschema::Validator>> =
        std::sync::OnceLock::new();
    let Some(validator) =
        VALIDATOR.get_or_init(|| jsonschema::validator_for(&super::input_schema()).ok())
    else {
        return Vec::new();
    };
    crate::artifacts::harness::schema_problems(validator, envelope)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(vector: serde_json::Value) -> String {
        match check_vector(&vector) {
            Ok(_) => panic!("accepted: {vector}"),
            Err(problem) => problem.to_string(),
        }
    }

    #[test]
    fn malformed_vectors_are_refused_naming_the_problem() {
        let envelope = serde_json::json!({
            "run_id": "r", "workflow_id": "w", "step_id": "s", "evaluate_prompt": "p.v1",
            "allowed_next_steps": [], "provenance_window": [],
            "evidence": {"transcript_summary": "", "workspace_diff_summary": "",
                "validation": {"mechanical_outcome": "completed", "exit_codes": {}, "timeouts": []},
                "artifacts": [], "policy_events": []}
        });
        let good = serde_json::json!({"name": "n", "envelope": envelope,
            "expect": {"status": "success", "risk_flags": []}});
        assert!(check_vector(&good).is_ok());
        let with = |key: &str, value: serde_json::Value| {
            let mut vector = good.clone();
            vector[key] = value;
            vector
        };
        let mut no_envelope = good.clone();
        no_envelope.as_object_mut().unwrap().remove("envelope");
        assert!(problem(no_envelope).contains("`envelope` is missing"));
        assert!(problem(with("envelope", "text".into())).contains("must be an object"));
        assert!(
            problem(with("envelope", serde_json::json!({}))).contains("not valid planner input")
        );
        assert!(
            problem(with(
                "expect",
                serde_json::json!({"status": "success", "risk_flags": "x"})
            ))
            .contains("must be a list of strings")
        );
        assert!(
            problem(with(
                "expect",
                serde_json::json!({"status": "success", "risk_fags": []})
            ))
            .contains("unknown key `expect.risk_fags`; did you mean `expect.risk_flags`?")
        );
        assert!(
            problem(with("expect", serde_json::json!({"status": "sucess"})))
                .contains("did you mean `success`?")
        );
        let mut unnamed = good.clone();
        unnamed.as_object_mut().unwrap().remove("name");
        assert!(problem(unnamed).contains("`name`"));
    }
}
