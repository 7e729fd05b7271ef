//! The shape of `.tnh/config.yaml`: the sections tnh-conductor reads and what each holds.
//! `config.rs` reads the file key by key (a mistake is reported where it is written); its key
//! lists come from these types. Other tools may keep keys of their own in the file.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

use super::OperatorCheckout;
use super::planner_document::DefinitionDocument;
use crate::runner::AgentProfile;

/// The sections of the configuration tnh-conductor reads.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ConfigDocument {
    /// Agent profiles by name.
    pub agents: Option<BTreeMap<String, AgentProfile>>,
    /// Validator commands by name.
    pub validators: Option<BTreeMap<String, ValidatorCommand>>,
    /// Planner definitions by name.
    pub planners: Option<BTreeMap<String, DefinitionDocument>>,
    /// Branch names or globs no run may write.
    pub protected_branches: Option<Vec<String>>,
    /// Folders where script validators may live.
    pub script_allowlist: Option<Vec<String>>,
    /// What a change to the operator's checkout during an agent step is.
    pub operator_checkout: Option<OperatorCheckout>,
    /// Globs of the ADRs `tnh adr` and `tnh context` read.
    pub adr_paths: Option<Vec<String>>,
    /// What is kept of finished runs.
    pub retention: Option<RetentionDocument>,
}

/// A configured validator: its command and nothing else.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ValidatorCommand {
    /// The program and its arguments.
    pub argv: Vec<String>,
}

/// `retention:`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetentionDocument {
    /// How many of the most recently finished runs keep their checkout.
    pub finished_checkouts: Option<u64>,
}
