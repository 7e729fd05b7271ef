//! The Rhai scripting host through its library API: evaluation with typed results and YAML
//! positions, every host function, every stdlib function, hostile scripts, and the examples.

mod evaluation;
mod examples;
mod host_api;
mod hostile;
mod stdlib;

use std::path::Path;

use tnh_conductor::script::{ChangedFile, Context, HostOptions, Limits, ScriptError, ScriptHost};
use tnh_conductor::workflow::model::At;
use tnh_conductor::workflow::yaml::{self, Node};

/// The file name errors are expected to show.
pub const FILE: &str = "flow.yaml";

/// A small YAML document with a `script` and `values` to evaluate, a host for it and a
/// temporary worktree the host is confined to.
pub struct Bench {
    pub worktree: tempfile::TempDir,
    pub root: Node,
    pub host: ScriptHost,
}

impl Bench {
    /// `yaml` holds an optional `script: |` block and a `values:` mapping.
    pub fn new(yaml: &str) -> Self {
        Self::with_files(yaml, &[])
    }

    /// Like `new`, with files written into the worktree first.
    pub fn with_files(yaml: &str, files: &[(&str, &str)]) -> Self {
        Self::try_with_files(yaml, files).unwrap_or_else(|error| panic!("{error}"))
    }

    /// Like `with_files`, returning the script's load error.
    pub fn try_with_files(yaml: &str, files: &[(&str, &str)]) -> Result<Self, ScriptError> {
        Self::build(yaml, files, Limits::STANDARD)
    }

    /// A bench with other limits.
    pub fn with_limits(yaml: &str, limits: Limits) -> Self {
        Self::build(yaml, &[], limits).unwrap_or_else(|error| panic!("{error}"))
    }

    fn build(yaml: &str, files: &[(&str, &str)], limits: Limits) -> Result<Self, ScriptError> {
        let worktree = tempfile::tempdir().unwrap();
        for (path, contents) in files {
            write(worktree.path(), path, contents);
        }
        let root = yaml::parse(yaml.as_bytes()).unwrap();
        let mut host = ScriptHost::new(HostOptions {
            file: FILE.to_owned(),
            source: yaml.to_owned(),
            root: Some(worktree.path().to_path_buf()),
            limits,
        })?;
        if let Some(script) = root.get("script") {
            let text = script.as_str().unwrap().to_owned();
            host.load_script(&At::new(text, script.pos))?;
        }
        Ok(Self {
            worktree,
            root,
            host,
        })
    }

    /// The node under `values.<name>`.
    pub fn value(&self, name: &str) -> &Node {
        self.root
            .get("values")
            .and_then(|values| values.get(name))
            .unwrap_or_else(|| panic!("no value {name}"))
    }

    /// Evaluates `values.<name>` as JSON against `context`.
    pub fn eval_in(&self, name: &str, context: &Context) -> Result<serde_json::Value, ScriptError> {
        self.host.evaluate_json(self.value(name), context)
    }

    /// Evaluates `values.<name>` against a context with no changes.
    pub fn eval(&self, name: &str) -> Result<serde_json::Value, ScriptError> {
        self.eval_in(name, &context(serde_json::json!({})))
    }

    /// Evaluates `values.<name>`, which must succeed.
    pub fn ok(&self, name: &str) -> serde_json::Value {
        self.eval(name).unwrap_or_else(|error| panic!("{error}"))
    }

    /// Evaluates `values.<name>`, which must fail.
    pub fn err(&self, name: &str) -> ScriptError {
        match self.eval(name) {
            Ok(value) => panic!("{name} evaluated to {value}"),
            Err(error) => error,
        }
    }

    /// Writes a file into the worktree.
    pub fn write(&self, path: &str, contents: &str) {
        write(self.worktree.path(), path, contents);
    }
}

pub fn write(root: &Path, path: &str, contents: &str) {
    let path = root.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, contents).unwrap();
}

/// A context from JSON.
pub fn context(value: serde_json::Value) -> Context {
    Context::new(value).unwrap()
}

/// A context with changes given as JSON `ChangedFile`s.
pub fn with_changes(value: serde_json::Value, changes: serde_json::Value) -> Context {
    let changes: Vec<ChangedFile> = serde_json::from_value(changes).unwrap();
    Context::with_changes(value, changes).unwrap()
}

/// The error's `file:line:column`.
pub fn at(error: &ScriptError) -> String {
    let location = error.location().expect("a located error");
    format!("{}:{}", location.file, location.pos)
}
