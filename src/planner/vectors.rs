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
            let expected = vector["expect"]["status"]
                .as_str()
                .ok_or_else(|| format!("`{}` has no expect.status", path.display()))?;
            let missing_flags = vector["expect"]["risk_flags"]
                .as_array()
                .map(|flags| {
                    flags
                        .iter()
                        .filter_map(|flag| flag.as_str())
                        .filter(|flag| !decision.risk_flags.iter().any(|found| found == flag))
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            Ok(VectorResult {
                name: vector["name"].as_str().unwrap_or_default().to_owned(),
                expected: expected.to_owned(),
                actual,
                missing_flags,
            })
        })
        .collect()
}
