//! Decision vectors (OA06 §8, DESIGN §8): `{"name", "envelope", "expect": {"status",
//! "risk_flags"}}` files run against a backend; the status must match exactly and each listed
//! flag must be present.

use std::path::Path;

use super::backend::{Backend, Request, Verdict, decide};

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
}

impl VectorResult {
    /// Whether the vector passed.
    pub fn passed(&self) -> bool {
        self.expected == self.actual && self.missing_flags.is_empty()
    }
}

/// Runs every `*.json` vector of a folder, sorted by file name.
pub fn run_vectors(folder: &Path, backend: &Backend) -> Result<Vec<VectorResult>, String> {
    let mut files: Vec<_> = std::fs::read_dir(folder)
        .map_err(|error| format!("cannot read `{}`: {error}", folder.display()))?
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            path.extension()
                .is_some_and(|extension| extension == "json")
        })
        .collect();
    files.sort();
    files
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path)
                .map_err(|error| format!("cannot read `{}`: {error}", path.display()))?;
            let vector: serde_json::Value = serde_json::from_str(&text)
                .map_err(|error| format!("`{}` is not JSON: {error}", path.display()))?;
            let Expectation {
                name,
                status: expected,
                risk_flags,
            } = check_vector(&vector).map_err(|problem| {
                format!("`{}` is not a decision vector: {problem}", path.display())
            })?;
            let request = Request {
                envelope: &vector["envelope"],
                prompt: super::backend::DEFAULT_PROMPT,
                cwd: None,
                run_variables: None,
                cancellation: &crate::runner::Cancellation::never(),
            };
            let (decision, actual) = match decide(backend, &request).0 {
                Verdict::Decided { decision, .. } => {
                    let actual = decision.status.name().to_owned();
                    (decision, actual)
                }
                Verdict::Illegal { decision, .. } => (decision, "illegal next_step".to_owned()),
                Verdict::Interrupted => (
                    crate::planner::Decision::status(crate::planner::Status::Blocked),
                    "interrupted".to_owned(),
                ),
            };
            let missing_flags = risk_flags
                .into_iter()
                .filter(|flag| !decision.risk_flags.iter().any(|found| found == flag))
                .collect();
            Ok(VectorResult {
                name,
                expected,
                actual,
                missing_flags,
            })
        })
        .collect()
}

/// What a well-formed vector expects.
struct Expectation {
    name: String,
    status: String,
    risk_flags: Vec<String>,
}

/// The keys of a vector and of its `expect` (DESIGN §8; `description` is a note).
const VECTOR_KEYS: &[&str] = &["name", "description", "envelope", "expect"];
const EXPECT_KEYS: &[&str] = &["status", "risk_flags"];

/// Checks a vector against the format `{"name", "envelope", "expect": {"status",
/// "risk_flags"}}`: known keys only, a string name, an envelope that is valid planner input
/// (`tnh-conductor schema planner-input`), a status among the five, a list of flag strings.
fn check_vector(vector: &serde_json::Value) -> Result<Expectation, String> {
    let object = vector
        .as_object()
        .ok_or("a vector is a JSON object with `name`, `envelope` and `expect`")?;
    unknown_key(object, VECTOR_KEYS, "")?;
    let name = object
        .get("name")
        .and_then(serde_json::Value::as_str)
        .ok_or("`name` is missing or not a string")?
        .to_owned();
    let envelope = object.get("envelope").ok_or("`envelope` is missing")?;
    if !envelope.is_object() {
        return Err(format!("`envelope` must be an object, got {envelope}"));
    }
    if let Some(problem) = envelope_problems(envelope).into_iter().next() {
        return Err(format!("`envelope` is not valid planner input: {problem}"));
    }
    let expect = object
        .get("expect")
        .and_then(serde_json::Value::as_object)
        .ok_or("`expect` is missing or not an object")?;
    unknown_key(expect, EXPECT_KEYS, "expect.")?;
    let status = expect
        .get("status")
        .and_then(serde_json::Value::as_str)
        .ok_or("`expect.status` is missing or not a string")?;
    let known = ["success", "partial", "blocked", "unsafe", "needs_human"];
    if !known.contains(&status) {
        let hint = crate::workflow::diagnostic::nearest(status, known.iter().copied())
            .map_or(String::new(), |near| format!("; did you mean `{near}`?"));
        return Err(format!(
            "`expect.status` `{status}` is not a status (success, partial, blocked, unsafe, needs_human){hint}"
        ));
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
            return Err(format!(
                "`expect.risk_flags` must be a list of strings, got {other}"
            ));
        }
    };
    Ok(Expectation {
        name,
        status: status.to_owned(),
        risk_flags,
    })
}

fn unknown_key(
    object: &serde_json::Map<String, serde_json::Value>,
    keys: &[&str],
    prefix: &str,
) -> Result<(), String> {
    match object.keys().find(|key| !keys.contains(&key.as_str())) {
        Some(key) => {
            let hint = match crate::workflow::diagnostic::nearest(key, keys.iter().copied()) {
                Some(near) => format!("did you mean `{prefix}{near}`?"),
                None => format!(
                    "the keys are {}",
                    keys.iter()
                        .map(|key| format!("`{prefix}{key}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            Err(format!("unknown key `{prefix}{key}`; {hint}"))
        }
        None => Ok(()),
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
            Err(problem) => problem,
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
