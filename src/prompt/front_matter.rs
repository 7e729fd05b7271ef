//! One prompt file: `---` YAML front matter `---` then the Markdown template.

use crate::workflow::yaml::{self, Node, Value};

use super::PromptError;

/// What a prompt is for; it must fit the opcode that uses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptRole {
    /// Heavy work done by a coding agent (RUN_AGENT).
    Task,
    /// Allowed and forbidden workspace changes (`policy:`).
    Policy,
    /// Judging evidence into a bounded status (EVALUATE).
    Planner,
    /// Choosing a workflow for a task.
    Triage,
    /// Assessing the risk of a change.
    Risk,
    /// Writing the review journal.
    Journal,
    /// A persona or system prompt for an agent.
    Agent,
}

impl PromptRole {
    /// Names used in front matter.
    pub const NAMES: [&'static str; 7] = [
        "task", "policy", "planner", "triage", "risk", "journal", "agent",
    ];
    const ALL: [PromptRole; 7] = [
        PromptRole::Task,
        PromptRole::Policy,
        PromptRole::Planner,
        PromptRole::Triage,
        PromptRole::Risk,
        PromptRole::Journal,
        PromptRole::Agent,
    ];

    /// The front-matter name.
    pub fn name(self) -> &'static str {
        Self::NAMES[Self::ALL.iter().position(|role| *role == self).unwrap_or(0)]
    }

    fn parse(name: &str) -> Option<Self> {
        Self::NAMES
            .iter()
            .position(|known| *known == name)
            .map(|index| Self::ALL[index])
    }
}

/// Release state of a prompt version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptStatus {
    /// Being written; may change without a new version.
    Draft,
    /// Released and immutable.
    Current,
    /// Released, immutable, and to be replaced.
    Deprecated,
}

impl PromptStatus {
    /// Whether the text is frozen (a change needs a new version).
    pub fn is_released(self) -> bool {
        !matches!(self, PromptStatus::Draft)
    }

    /// The front-matter name.
    pub fn name(self) -> &'static str {
        match self {
            PromptStatus::Draft => "draft",
            PromptStatus::Current => "current",
            PromptStatus::Deprecated => "deprecated",
        }
    }
}

/// The type of a prompt input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputType {
    /// Text.
    String,
    /// A whole number.
    Int,
    /// `true`/`false`.
    Bool,
    /// A list.
    List,
    /// A mapping.
    Map,
    /// Anything.
    Any,
}

impl InputType {
    const NAMES: [&'static str; 6] = ["string", "int", "bool", "list", "map", "any"];
    const ALL: [InputType; 6] = [
        InputType::String,
        InputType::Int,
        InputType::Bool,
        InputType::List,
        InputType::Map,
        InputType::Any,
    ];

    /// The front-matter name.
    pub fn name(self) -> &'static str {
        Self::NAMES[Self::ALL.iter().position(|kind| *kind == self).unwrap_or(0)]
    }

    fn parse(name: &str) -> Option<Self> {
        Self::NAMES
            .iter()
            .position(|known| *known == name)
            .map(|index| Self::ALL[index])
    }

    /// Whether a JSON value has this type.
    pub fn accepts(self, value: &serde_json::Value) -> bool {
        use serde_json::Value as Json;
        match self {
            InputType::String => value.is_string(),
            InputType::Int => value.is_i64() || value.is_u64(),
            InputType::Bool => value.is_boolean(),
            InputType::List => value.is_array(),
            InputType::Map => value.is_object(),
            InputType::Any => !matches!(value, Json::Null),
        }
    }
}

/// One declared input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptInput {
    /// Its name in the template.
    pub name: String,
    /// Its type.
    pub input_type: InputType,
    /// Whether rendering needs it.
    pub required: bool,
    /// What it holds.
    pub description: String,
}

/// Where a prompt was loaded from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptSource {
    /// Embedded in the binary (path under `prompts/`).
    Builtin(String),
    /// A repository's `.tnh/prompts/` (path as found).
    Repo(String),
}

impl PromptSource {
    /// The file, for messages.
    pub fn display(&self) -> &str {
        match self {
            PromptSource::Builtin(path) | PromptSource::Repo(path) => path,
        }
    }
}

/// A parsed prompt file.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    /// `family.name`.
    pub prompt_id: String,
    /// The version number.
    pub version: u32,
    /// What the prompt is for.
    pub role: PromptRole,
    /// One line about it.
    pub summary: String,
    /// Declared inputs.
    pub inputs: Vec<PromptInput>,
    /// What the prompt asks the model to produce.
    pub outputs: Vec<String>,
    /// Release state.
    pub status: PromptStatus,
    /// Policy fields (role policy): allowed_paths, forbidden_paths, forbidden_operations.
    pub policy: Option<PolicyFields>,
    /// The decision schema a planner prompt expects, as JSON.
    pub decision_schema: Option<serde_json::Value>,
    /// The template text after the front matter.
    pub body: String,
    /// The 1-based line of the file where the body starts.
    pub body_line: u32,
    /// Where it came from.
    pub source: PromptSource,
}

/// The enforceable fields of a policy prompt.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PolicyFields {
    /// Globs every change must match.
    pub allowed_paths: Vec<String>,
    /// Globs no change may match.
    pub forbidden_paths: Vec<String>,
    /// Operation ids or advisory text.
    pub forbidden_operations: Vec<String>,
    /// A script function checked per changed file.
    pub check: Option<String>,
}

impl Prompt {
    /// The reference workflows use: `family.name.vN`.
    pub fn reference(&self) -> String {
        format!("{}.v{}", self.prompt_id, self.version)
    }

    /// Parses a prompt file's text.
    pub fn parse(text: &str, source: PromptSource) -> Result<Self, PromptError> {
        let file = source.display().to_owned();
        let invalid = |line: u32, column: u32, message: String| PromptError::Invalid {
            file: file.clone(),
            line,
            column,
            message,
        };
        let rest = text.strip_prefix("---\n").ok_or_else(|| {
            invalid(
                1,
                1,
                "a prompt file starts with `---` and YAML front matter".into(),
            )
        })?;
        let end = rest.find("\n---\n").ok_or_else(|| {
            invalid(
                1,
                1,
                "the front matter is not closed by a `---` line".into(),
            )
        })?;
        let front = &rest[..=end];
        let body = &rest[end + "\n---\n".len()..];
        let body_line = u32::try_from(front.lines().count() + 3).unwrap_or(u32::MAX);
        // Positions in the front matter are one line below the document's: the opening `---`.
        let root = yaml::parse(front.as_bytes())
            .map_err(|error| invalid(error.pos.line + 1, error.pos.column, error.message))?;
        let fields = FrontMatter {
            root: &root,
            file: &file,
        };
        fields.check_keys()?;
        let prompt_id = fields.string("prompt_id")?;
        let version = fields.version()?;
        let role_name = fields.string("role")?;
        let role = PromptRole::parse(&role_name).ok_or_else(|| {
            fields.error(
                "role",
                format!(
                    "role `{role_name}` is not one of {}",
                    PromptRole::NAMES.join(", ")
                ),
            )
        })?;
        let status = match fields.optional_string("status")?.as_deref() {
            None | Some("current") => PromptStatus::Current,
            Some("draft") => PromptStatus::Draft,
            Some("deprecated") => PromptStatus::Deprecated,
            Some(other) => {
                return Err(fields.error(
                    "status",
                    format!("status `{other}` is not draft, current or deprecated"),
                ));
            }
        };
        let policy = (role == PromptRole::Policy)
            .then(|| fields.policy())
            .transpose()?;
        Ok(Prompt {
            prompt_id,
            version,
            role,
            summary: fields.string("summary")?,
            inputs: fields.inputs()?,
            outputs: fields.string_list("outputs")?,
            status,
            policy,
            decision_schema: root.get("decision_schema").map(Node::to_json),
            body: body.to_owned(),
            body_line,
            source,
        })
    }
}

/// Keys a prompt's front matter may hold.
pub const FRONT_MATTER_KEYS: &[&str] = &[
    "prompt_id",
    "version",
    "role",
    "summary",
    "inputs",
    "outputs",
    "status",
    "allowed_paths",
    "forbidden_paths",
    "forbidden_operations",
    "check",
    "decision_schema",
];

struct FrontMatter<'a> {
    root: &'a Node,
    file: &'a str,
}

impl FrontMatter<'_> {
    fn error(&self, key: &str, message: String) -> PromptError {
        let pos = self.root.get(key).map_or(self.root.pos, |node| node.pos);
        PromptError::Invalid {
            file: self.file.to_owned(),
            line: pos.line + 1,
            column: pos.column,
            message,
        }
    }

    fn check_keys(&self) -> Result<(), PromptError> {
        let Some(entries) = self.root.as_map() else {
            return Err(PromptError::Invalid {
                file: self.file.to_owned(),
                line: 2,
                column: 1,
                message: "the front matter must be a mapping".into(),
            });
        };
        for (key, _) in entries {
            let name = key.scalar_text();
            if !FRONT_MATTER_KEYS.contains(&name.as_str()) {
                return Err(PromptError::Invalid {
                    file: self.file.to_owned(),
                    line: key.pos.line + 1,
                    column: key.pos.column,
                    message: format!(
                        "unknown front-matter key `{name}` (valid: {})",
                        FRONT_MATTER_KEYS.join(", ")
                    ),
                });
            }
        }
        Ok(())
    }

    fn optional_string(&self, key: &str) -> Result<Option<String>, PromptError> {
        match self.root.get(key) {
            None => Ok(None),
            Some(node) => node
                .as_str()
                .map(|text| Some(text.to_owned()))
                .ok_or_else(|| self.error(key, format!("`{key}` must be a string"))),
        }
    }

    fn string(&self, key: &str) -> Result<String, PromptError> {
        self.optional_string(key)?
            .ok_or_else(|| self.error(key, format!("the front matter is missing `{key}`")))
    }

    fn version(&self) -> Result<u32, PromptError> {
        match self.root.get("version").map(|node| &node.value) {
            Some(Value::Int(number)) if *number >= 1 => u32::try_from(*number)
                .map_err(|_| self.error("version", "version is too large".into())),
            Some(_) => Err(self.error(
                "version",
                "version must be a whole number of at least 1".into(),
            )),
            None => Err(self.error("version", "the front matter is missing `version`".into())),
        }
    }

    fn string_list(&self, key: &str) -> Result<Vec<String>, PromptError> {
        let Some(node) = self.root.get(key) else {
            return Ok(Vec::new());
        };
        let items = node
            .as_seq()
            .ok_or_else(|| self.error(key, format!("`{key}` must be a list of strings")))?;
        items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| self.error(key, format!("entries of `{key}` must be strings")))
            })
            .collect()
    }

    fn inputs(&self) -> Result<Vec<PromptInput>, PromptError> {
        let Some(node) = self.root.get("inputs") else {
            return Ok(Vec::new());
        };
        let items = node.as_seq().ok_or_else(|| {
            self.error(
                "inputs",
                "`inputs` must be a list of {name, type, required, description}".into(),
            )
        })?;
        items.iter().map(|item| self.input(item)).collect()
    }

    fn input(&self, item: &Node) -> Result<PromptInput, PromptError> {
        let at = |message: String| PromptError::Invalid {
            file: self.file.to_owned(),
            line: item.pos.line + 1,
            column: item.pos.column,
            message,
        };
        let name = item
            .get("name")
            .and_then(Node::as_str)
            .ok_or_else(|| at("an input needs a `name`".into()))?;
        let type_name = item.get("type").and_then(Node::as_str).unwrap_or("string");
        let input_type = InputType::parse(type_name).ok_or_else(|| {
            at(format!(
                "input type `{type_name}` is not one of {}",
                InputType::NAMES.join(", ")
            ))
        })?;
        let required = match item.get("required").map(|node| &node.value) {
            None => true,
            Some(Value::Bool(flag)) => *flag,
            Some(_) => return Err(at("`required` must be true or false".into())),
        };
        let description = item
            .get("description")
            .and_then(Node::as_str)
            .unwrap_or_default()
            .to_owned();
        Ok(PromptInput {
            name: name.to_owned(),
            input_type,
            required,
            description,
        })
    }

    fn policy(&self) -> Result<PolicyFields, PromptError> {
        Ok(PolicyFields {
            allowed_paths: self.string_list("allowed_paths")?,
            forbidden_paths: self.string_list("forbidden_paths")?,
            forbidden_operations: self.string_list("forbidden_operations")?,
            check: self.optional_string("check")?,
        })
    }
}
