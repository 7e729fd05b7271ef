//! One line of an agent step's `runlog.ndjson`, as `tnh runlog append` writes it. The kernel
//! reads the file as the agent's own (any JSON object a line, fields as text) when it turns
//! the lines into `agent_runlog` events; this type is the format `tnh` writes.

use serde::{Deserialize, Serialize};

/// One line of an agent step's `runlog.ndjson` (`tnh runlog append`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RunlogEntry {
    /// The version of this format.
    pub schema_version: u32,
    /// When it was appended (RFC 3339 UTC).
    pub timestamp: String,
    /// What kind of entry.
    pub kind: RunlogKind,
    /// The entry.
    pub message: String,
    /// A file or artifact the entry refers to.
    #[serde(rename = "ref")]
    pub reference: Option<String>,
    /// The step it was appended in (`TNH_STEP_ID`).
    pub step_id: Option<String>,
}

/// Kinds of run-log entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunlogKind {
    /// Something worth knowing.
    Note,
    /// A choice made, and why.
    Decision,
    /// Something that stops progress.
    Blocker,
    /// A question for a human.
    Question,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_of_today_reads_back_and_writes_the_same_keys() {
        let line = r#"{"kind":"decision","message":"kept it small","ref":"feature.txt","schema_version":1,"step_id":"implement","timestamp":"2026-12-06T07:03:49Z"}"#;
        let entry: RunlogEntry = serde_json::from_str(line).unwrap();
        assert_eq!(entry.kind, RunlogKind::Decision);
        assert_eq!(entry.reference.as_deref(), Some("feature.txt"));
        assert_eq!(
            serde_json::to_value(&entry).unwrap(),
            serde_json::from_str::<serde_json::Value>(line).unwrap()
        );
    }
}
