//! One prompt file: `---` YAML front matter `---` then the Markdown template.

use crate::document::diagnostic::nearest;
use crate::document::shape::{self, Names};
use crate::document::yaml::{self, Node, Value};

use super::PromptError;

/// What a prompt is for; it must fit the opcode that uses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
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
    pub const NAMES: Names<Self> = Names::new();

    /// The front-matter name.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    fn parse(name: &str) -> Option<Self> {
        shape::parse(name)
    }
}

/// Release state of a prompt version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
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
        shape::names::<Self>()[self as usize]
    }
}

/// The type of a prompt input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
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
    const NAMES: Names<Self> = Names::new();

    /// The front-matter name.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    fn parse(name: &str) -> Option<Self> {
        shape::parse(name)
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

    /// Parses a prompt file's text, reporting every problem of its front matter and its
    /// template, each with its line.
    pub fn parse(text: &str, source: PromptSource) -> Result<Self, Vec<PromptError>> {
        let file = source.display().to_owned();
        let invalid = |line: u32, column: u32, message: String| PromptError::Invalid {
            file: file.clone(),
            line,
            column,
            message,
        };
        // A file saved with CRLF line endings (a Windows editor, `core.autocrlf`) is read as
        // the same text with LF: lines, and so every position, stay the same.
        let normalised;
        let text = if text.contains("\r\n") {
            normalised = text.replace("\r\n", "\n");
            normalised.as_str()
        } else {
            text
        };
        let Some(rest) = text.strip_prefix("---\n") else {
            return Err(vec![invalid(
                1,
                1,
                "a prompt file starts with `---` and YAML front matter".into(),
            )]);
        };
        let Some(end) = rest.find("\n---\n") else {
            return Err(vec![invalid(
                1,
                1,
                "the front matter is not closed by a `---` line".into(),
            )]);
        };
        let front = &rest[..=end];
        let body = &rest[end + "\n---\n".len()..];
        let body_line = u32::try_from(front.lines().count() + 3).unwrap_or(u32::MAX);
        // Positions in the front matter are one line below the document's: the opening `---`.
        let root = match yaml::parse(front.as_bytes()) {
            Ok(root) => root,
            Err(error) => {
                let mut problems = super::render::template_problems(&file, body, body_line, None);
                problems.insert(
                    0,
                    invalid(error.pos.line + 1, error.pos.column, error.message),
                );
                return Err(problems);
            }
        };
        let mut fields = FrontMatter {
            root: &root,
            file: &file,
            problems: Vec::new(),
        };
        let prompt = fields.prompt(body, body_line, source);
        // The template's variables are checked against the inputs only when those are known
        // (a front matter with problems could miss an input the template rightly reads).
        let declared: Option<Vec<String>> = prompt
            .as_ref()
            .filter(|_| fields.problems.is_empty())
            .map(|prompt| {
                prompt
                    .inputs
                    .iter()
                    .map(|input| input.name.clone())
                    .collect()
            });
        let mut problems =
            super::render::template_problems(&file, body, body_line, declared.as_deref());
        fields.problems.append(&mut problems);
        match prompt {
            Some(prompt) if fields.problems.is_empty() => Ok(prompt),
            _ => {
                fields.problems.sort_by_key(PromptError::position);
                Err(fields.problems)
            }
        }
    }
}

/// A prompt's front matter as written: its keys and what each holds.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FrontMatterDocument {
    /// `family.name`.
    pub prompt_id: String,
    /// The prompt's version (`vN` in references), at least 1.
    pub version: u32,
    /// What the prompt is for.
    pub role: PromptRole,
    /// One line on what it does.
    pub summary: String,
    /// The inputs the template uses.
    pub inputs: Option<Vec<InputDocument>>,
    /// What the prompt asks to produce.
    pub outputs: Option<Vec<String>>,
    /// Release state (default `current`).
    pub status: Option<PromptStatus>,
    /// Policy prompts: globs every change must match.
    pub allowed_paths: Option<Vec<String>>,
    /// Policy prompts: globs no change may match.
    pub forbidden_paths: Option<Vec<String>>,
    /// Policy prompts: operation ids or advisory text.
    pub forbidden_operations: Option<Vec<String>>,
    /// Policy prompts: a script function called for each changed file.
    pub check: Option<String>,
    /// Planner prompts: the schema of the decision asked for.
    pub decision_schema: Option<serde_json::Value>,
}

/// One entry of `inputs`.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct InputDocument {
    /// Its name in the template.
    pub name: String,
    /// Its type (default `string`).
    #[serde(rename = "type")]
    pub input_type: Option<InputType>,
    /// Whether it must be given (default true).
    pub required: Option<bool>,
    /// What it is.
    pub description: Option<String>,
}

/// Keys a prompt's front matter may hold.
pub fn front_matter_keys() -> &'static [&'static str] {
    shape::keys::<FrontMatterDocument>()
}

struct FrontMatter<'a> {
    root: &'a Node,
    file: &'a str,
    problems: Vec<PromptError>,
}

impl FrontMatter<'_> {
    /// Every field, each problem recorded; `None` when a field the prompt needs is unusable.
    fn prompt(&mut self, body: &str, body_line: u32, source: PromptSource) -> Option<Prompt> {
        if !self.check_keys() {
            return None;
        }
        let prompt_id = self.string("prompt_id");
        let version = self.version();
        let role = self.role();
        let status = self.status();
        let summary = self.string("summary");
        let inputs = self.inputs();
        let outputs = self.string_list("outputs");
        let policy = (role == Some(PromptRole::Policy)).then(|| self.policy());
        Some(Prompt {
            prompt_id: prompt_id?,
            version: version?,
            role: role?,
            summary: summary?,
            inputs,
            outputs,
            status: status?,
            policy,
            decision_schema: self.root.get("decision_schema").map(Node::to_json),
            body: body.to_owned(),
            body_line,
            source,
        })
    }

    fn at(&mut self, node: &Node, message: String) {
        self.problems.push(PromptError::Invalid {
            file: self.file.to_owned(),
            line: node.pos.line + 1,
            column: node.pos.column,
            message,
        });
    }

    fn error(&mut self, key: &str, message: String) {
        let node = self.root.get(key).unwrap_or(self.root);
        self.at(node, message);
    }

    /// Whether the front matter is a mapping; records each unknown key.
    fn check_keys(&mut self) -> bool {
        let Some(entries) = self.root.as_map() else {
            self.problems.push(PromptError::Invalid {
                file: self.file.to_owned(),
                line: 2,
                column: 1,
                message: "the front matter must be a mapping".into(),
            });
            return false;
        };
        for (key, _) in entries {
            let name = key.scalar_text();
            if !front_matter_keys().contains(&name.as_str()) {
                let near = nearest(&name, front_matter_keys().iter().copied())
                    .map(|near| format!("did you mean `{near}`? "))
                    .unwrap_or_default();
                self.at(
                    key,
                    format!(
                        "unknown front-matter key `{name}` ({near}valid: {})",
                        front_matter_keys().join(", ")
                    ),
                );
            }
        }
        true
    }

    /// `Ok(None)` when absent, `Err(())` (recorded) when not a string.
    fn optional_string(&mut self, key: &str) -> Result<Option<String>, ()> {
        match self.root.get(key) {
            None => Ok(None),
            Some(node) => match node.as_str() {
                Some(text) => Ok(Some(text.to_owned())),
                None => {
                    self.error(key, format!("`{key}` must be a string"));
                    Err(())
                }
            },
        }
    }

    fn string(&mut self, key: &str) -> Option<String> {
        match self.optional_string(key) {
            Ok(Some(text)) => Some(text),
            Ok(None) => {
                self.error(key, format!("the front matter is missing `{key}`"));
                None
            }
            Err(()) => None,
        }
    }

    fn role(&mut self) -> Option<PromptRole> {
        let name = self.string("role")?;
        let role = PromptRole::parse(&name);
        if role.is_none() {
            self.error(
                "role",
                format!(
                    "role `{name}` is not one of {}",
                    PromptRole::NAMES.join(", ")
                ),
            );
        }
        role
    }

    fn status(&mut self) -> Option<PromptStatus> {
        let Some(name) = self.optional_string("status").ok()? else {
            return Some(PromptStatus::Current);
        };
        let status = shape::parse(&name);
        if status.is_none() {
            let names = shape::names::<PromptStatus>();
            let listed = match names.split_last() {
                Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
                None => String::new(),
            };
            self.error("status", format!("status `{name}` is not {listed}"));
        }
        status
    }

    fn version(&mut self) -> Option<u32> {
        match self.root.get("version").map(|node| &node.value) {
            Some(Value::Int(number)) if *number >= 1 => {
                let version = u32::try_from(*number).ok();
                if version.is_none() {
                    self.error("version", "version is too large".into());
                }
                version
            }
            Some(_) => {
                self.error(
                    "version",
                    "version must be a whole number of at least 1".into(),
                );
                None
            }
            None => {
                self.error("version", "the front matter is missing `version`".into());
                None
            }
        }
    }

    fn string_list(&mut self, key: &str) -> Vec<String> {
        let root = self.root;
        let Some(node) = root.get(key) else {
            return Vec::new();
        };
        let Some(items) = node.as_seq() else {
            self.error(key, format!("`{key}` must be a list of strings"));
            return Vec::new();
        };
        let mut strings = Vec::new();
        for item in items {
            match item.as_str() {
                Some(text) => strings.push(text.to_owned()),
                None => self.at(item, format!("entries of `{key}` must be strings")),
            }
        }
        strings
    }

    fn inputs(&mut self) -> Vec<PromptInput> {
        let root = self.root;
        let Some(node) = root.get("inputs") else {
            return Vec::new();
        };
        let Some(items) = node.as_seq() else {
            self.error(
                "inputs",
                "`inputs` must be a list of {name, type, required, description}".into(),
            );
            return Vec::new();
        };
        let mut inputs: Vec<PromptInput> = Vec::new();
        let mut names: Vec<&str> = Vec::new();
        for item in items {
            if let Some(name) = item.get("name").and_then(Node::as_str) {
                if names.contains(&name) {
                    self.at(item, format!("input `{name}` is declared twice"));
                    continue;
                }
                names.push(name);
            }
            inputs.extend(self.input(item));
        }
        inputs
    }

    fn input(&mut self, item: &Node) -> Option<PromptInput> {
        let name = item.get("name").and_then(Node::as_str);
        if name.is_none() {
            self.at(item, "an input needs a `name`".into());
        }
        let type_name = item.get("type").and_then(Node::as_str).unwrap_or("string");
        let input_type = InputType::parse(type_name);
        if input_type.is_none() {
            let at = item.get("type").unwrap_or(item);
            self.at(
                at,
                format!(
                    "input type `{type_name}` is not one of {}",
                    InputType::NAMES.join(", ")
                ),
            );
        }
        let required = match item.get("required") {
            None => Some(true),
            Some(Node {
                value: Value::Bool(flag),
                ..
            }) => Some(*flag),
            Some(node) => {
                self.at(node, "`required` must be true or false".into());
                None
            }
        };
        let description = item
            .get("description")
            .and_then(Node::as_str)
            .unwrap_or_default()
            .to_owned();
        Some(PromptInput {
            name: name?.to_owned(),
            input_type: input_type?,
            required: required?,
            description,
        })
    }

    fn policy(&mut self) -> PolicyFields {
        let check = self.optional_string("check").ok().flatten();
        PolicyFields {
            allowed_paths: self.string_list("allowed_paths"),
            forbidden_paths: self.string_list("forbidden_paths"),
            forbidden_operations: self.string_list("forbidden_operations"),
            check,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(front_matter: &str) -> Vec<String> {
        let text = format!("---\n{front_matter}---\nHello.\n");
        match Prompt::parse(&text, PromptSource::Repo("p.md".into())) {
            Ok(_) => Vec::new(),
            Err(errors) => errors.iter().map(ToString::to_string).collect(),
        }
    }

    /// The keys and names a front matter may use are read from its document type, and told
    /// as before, in the order the type declares them.
    #[test]
    fn front_matter_keys_and_names_come_from_its_type() {
        let base = "prompt_id: task.x\nversion: 1\nsummary: s\n";
        assert!(problems(&format!("{base}role: task\nstatus: draft\n")).is_empty());
        assert_eq!(
            problems(&format!("{base}role: task\nstatus: final\n")),
            ["p.md:6:9: status `final` is not draft, current or deprecated"]
        );
        assert_eq!(
            problems(&format!("{base}role: tasks\n")),
            [
                "p.md:5:7: role `tasks` is not one of task, policy, planner, triage, risk, journal, agent"
            ]
        );
        let unknown = problems(&format!("{base}role: task\nsumary: s\n"));
        assert_eq!(
            unknown,
            [
                "p.md:6:1: unknown front-matter key `sumary` (did you mean `summary`? valid: prompt_id, version, role, summary, inputs, outputs, status, allowed_paths, forbidden_paths, forbidden_operations, check, decision_schema)"
            ]
        );
        assert_eq!(PromptStatus::Deprecated.name(), "deprecated");
        assert_eq!(InputType::parse("any"), Some(InputType::Any));
    }
}
