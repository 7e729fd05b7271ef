//! The read-only `ctx` scripts see, built from JSON the kernel supplies, plus the workspace
//! changes behind `changed_files()` and `diff_stat()`.
//!
//! The kernel owns the facts (run, params, step, per-step outcomes, workspace, defaults,
//! planner decision, harness report) and hands them over as one JSON object; the host only
//! converts it once and marks it read-only. Changes come as data rather than as a git handle
//! so scripts stay deterministic and the host does not depend on the workspace module.
//!
//! Expected shape (every key optional):
//!
//! ```json
//! { "run": {"id", "dir", "workflow", "started_at"}, "params": {…},
//!   "step": {"id", "visit", "dir"}, "steps": {"<id>": {"outcome", "status", "evidence", "artifacts": {"<role>": [paths]}, "final_response"}},
//!   "workspace": {"root", "repo", "branch", "base_sha"}, "defaults": {"component_kind", "eval_profile"},
//!   "planner": {…last decision…}, "harness_report": {…last report…} }
//! ```

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use rhai::{Dynamic, Map};
use serde::{Deserialize, Serialize};

use super::error::ScriptError;
use super::value::json_to_dynamic;

/// How a file changed since the run's `pre_run` snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// A new file.
    Added,
    /// An existing file with new content or mode.
    Modified,
    /// A removed file.
    Deleted,
    /// A file moved from `old_path`.
    Renamed,
}

impl ChangeKind {
    /// The name scripts see.
    pub fn name(self) -> &'static str {
        match self {
            ChangeKind::Added => "added",
            ChangeKind::Modified => "modified",
            ChangeKind::Deleted => "deleted",
            ChangeKind::Renamed => "renamed",
        }
    }
}

/// One changed file, as the workspace module reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangedFile {
    /// Path relative to the worktree, `/`-separated.
    pub path: String,
    /// How it changed.
    pub kind: ChangeKind,
    /// Lines added (0 for binary files).
    pub added: u64,
    /// Lines removed (0 for binary files).
    pub removed: u64,
    /// The previous path of a renamed file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_path: Option<String>,
    /// Whether git considers the file binary.
    #[serde(default)]
    pub binary: bool,
}

impl ChangedFile {
    /// The map a script receives: `#{path, kind, added, removed, old_path, binary}`.
    pub(crate) fn to_dynamic(&self) -> Dynamic {
        let mut map = Map::new();
        map.insert("path".into(), Dynamic::from(self.path.clone()));
        map.insert("kind".into(), Dynamic::from(self.kind.name()));
        map.insert(
            "added".into(),
            Dynamic::from_int(saturating_int(self.added)),
        );
        map.insert(
            "removed".into(),
            Dynamic::from_int(saturating_int(self.removed)),
        );
        map.insert(
            "old_path".into(),
            self.old_path.clone().map_or(Dynamic::UNIT, Dynamic::from),
        );
        map.insert("binary".into(), Dynamic::from_bool(self.binary));
        Dynamic::from_map(map)
    }
}

pub(crate) fn saturating_int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Produces a context's workspace changes the first time a script asks for them, so a run
/// pays for the git read only when `changed_files()`, `diff_stat()` or a helper built on them
/// is called. The error is shown to the script's caller.
pub type ChangeLoader = Box<dyn FnOnce() -> Result<Vec<ChangedFile>, String> + Send>;

/// What scripts may know about the run at one evaluation. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Context {
    inner: Arc<ContextData>,
}

#[derive(Debug)]
pub(crate) struct ContextData {
    pub json: serde_json::Value,
    pub ctx: Dynamic,
    pub params: Dynamic,
    pub changes: Changes,
}

/// The workspace changes of a context: given, or loaded on first use.
pub(crate) enum Changes {
    /// Known when the context was built.
    Given(Arc<[ChangedFile]>),
    /// Loaded by `loader` on first use. Contexts with the same `key` have the same changes, so
    /// a host may reuse what an earlier context loaded.
    Deferred {
        key: String,
        loader: Mutex<Option<ChangeLoader>>,
        loaded: OnceLock<Result<Arc<[ChangedFile]>, String>>,
    },
}

impl fmt::Debug for Changes {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Changes::Given(changes) => formatter.debug_tuple("Given").field(changes).finish(),
            Changes::Deferred { key, loaded, .. } => formatter
                .debug_struct("Deferred")
                .field("key", key)
                .field("loaded", &loaded.get())
                .finish_non_exhaustive(),
        }
    }
}

impl Changes {
    /// The changes, loading them once; `reuse` may supply them for a deferred key instead.
    pub(crate) fn get(
        &self,
        reuse: impl FnOnce(&str) -> Option<Arc<[ChangedFile]>>,
    ) -> Result<Arc<[ChangedFile]>, String> {
        let (key, loader, loaded) = match self {
            Changes::Given(changes) => return Ok(Arc::clone(changes)),
            Changes::Deferred {
                key,
                loader,
                loaded,
            } => (key, loader, loaded),
        };
        loaded
            .get_or_init(|| {
                if let Some(changes) = reuse(key) {
                    return Ok(changes);
                }
                let load = loader
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take()
                    .ok_or_else(|| "the workspace changes could not be loaded".to_owned())?;
                load().map(Arc::from)
            })
            .clone()
    }

    /// The key of deferred changes, for reuse by later contexts.
    pub(crate) fn key(&self) -> Option<&str> {
        match self {
            Changes::Given(_) => None,
            Changes::Deferred { key, .. } => Some(key),
        }
    }
}

impl Context {
    /// A context from the kernel's JSON object.
    pub fn new(value: serde_json::Value) -> Result<Self, ScriptError> {
        Self::with_changes(value, Vec::new())
    }

    /// A context with the workspace changes since `pre_run` (or, in a policy `check`, the
    /// changes of the step being checked).
    pub fn with_changes(
        value: serde_json::Value,
        changes: Vec<ChangedFile>,
    ) -> Result<Self, ScriptError> {
        Self::build(value, Changes::Given(changes.into()))
    }

    /// A context whose workspace changes are loaded by `loader` when a script first asks for
    /// them. `key` names the changes (say, the two trees compared): a host reuses changes
    /// already loaded under the same key instead of calling `loader`.
    pub fn with_deferred_changes(
        value: serde_json::Value,
        key: impl Into<String>,
        loader: ChangeLoader,
    ) -> Result<Self, ScriptError> {
        Self::build(
            value,
            Changes::Deferred {
                key: key.into(),
                loader: Mutex::new(Some(loader)),
                loaded: OnceLock::new(),
            },
        )
    }

    fn build(value: serde_json::Value, changes: Changes) -> Result<Self, ScriptError> {
        if !value.is_object() {
            return Err(ScriptError::Context {
                message: "it is not a JSON object".to_owned(),
            });
        }
        let ctx = json_to_dynamic(&value)
            .map_err(|message| ScriptError::Context { message })?
            .into_read_only();
        let params = value
            .get("params")
            .map(json_to_dynamic)
            .transpose()
            .map_err(|message| ScriptError::Context { message })?
            .unwrap_or_else(|| Dynamic::from_map(Map::new()))
            .into_read_only();
        Ok(Self {
            inner: Arc::new(ContextData {
                json: value,
                ctx,
                params,
                changes,
            }),
        })
    }

    /// An empty context (no params, no changes), e.g. for static checks and tests.
    pub fn empty() -> Self {
        Self::new(serde_json::Value::Object(serde_json::Map::new()))
            .unwrap_or_else(|_| unreachable!("an empty object is a valid context"))
    }

    /// The JSON the context was built from.
    pub fn json(&self) -> &serde_json::Value {
        &self.inner.json
    }

    /// The workspace changes, loaded now if they were deferred.
    pub fn changes(&self) -> Result<Arc<[ChangedFile]>, ScriptError> {
        self.inner
            .changes
            .get(|_| None)
            .map_err(|message| ScriptError::Context { message })
    }

    pub(crate) fn data(&self) -> &Arc<ContextData> {
        &self.inner
    }

    /// The value of a `${name}` substitution, as text.
    pub fn substitution(&self, name: &str) -> Option<String> {
        let path: &[&str] = match name {
            "run_id" => &["run", "id"],
            "run_dir" => &["run", "dir"],
            "step_id" => &["step", "id"],
            "step_dir" => &["step", "dir"],
            "worktree" => &["workspace", "root"],
            "repo" => &["workspace", "repo"],
            "base_sha" => &["workspace", "base_sha"],
            _ => {
                let param = name.strip_prefix("params.")?;
                return self.inner.json.get("params")?.get(param).map(json_text);
            }
        };
        let mut value = &self.inner.json;
        for key in path {
            value = value.get(key)?;
        }
        Some(json_text(value))
    }

    /// The plain substitution names with a value in this context, for error messages.
    pub(crate) fn substitution_names(&self) -> Vec<&'static str> {
        super::expressions::SUBSTITUTIONS
            .into_iter()
            .filter(|name| self.substitution(name).is_some())
            .collect()
    }
}

fn json_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(text) => text.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substitutions_come_from_the_context() {
        let context = Context::new(serde_json::json!({
            "run": {"id": "r1", "dir": "/runs/r1"},
            "step": {"id": "build", "dir": "/runs/r1/artifacts/build/1"},
            "workspace": {"root": "/wt", "repo": "/repo", "base_sha": "abc"},
            "params": {"name": "docs", "count": 3, "list": [1, 2]},
        }))
        .unwrap();
        let value = |name: &str| context.substitution(name);
        assert_eq!(value("run_id").as_deref(), Some("r1"));
        assert_eq!(value("run_dir").as_deref(), Some("/runs/r1"));
        assert_eq!(value("step_id").as_deref(), Some("build"));
        assert_eq!(value("worktree").as_deref(), Some("/wt"));
        assert_eq!(value("repo").as_deref(), Some("/repo"));
        assert_eq!(value("base_sha").as_deref(), Some("abc"));
        assert_eq!(value("params.name").as_deref(), Some("docs"));
        assert_eq!(value("params.count").as_deref(), Some("3"));
        assert_eq!(value("params.list").as_deref(), Some("[1,2]"));
        assert_eq!(value("params.missing"), None);
        assert_eq!(value("nope"), None);
    }

    #[test]
    fn workspace_changes_fold_into_the_kinds_scripts_see() {
        use crate::workspace::ChangeKind as Workspace;
        let change = |kind, old_mode: Option<&str>| crate::workspace::ChangedFile {
            path: "a.bin".to_owned(),
            old_path: None,
            kind,
            old_mode: old_mode.map(str::to_owned),
            new_mode: Some("100644".to_owned()),
            binary: true,
            symlink_target: None,
            lines_added: 2,
            lines_removed: 1,
            quoted_path: None,
            quoted_old_path: None,
        };
        let cases = [
            (Workspace::Add, None, ChangeKind::Added),
            (Workspace::Modify, Some("100644"), ChangeKind::Modified),
            (Workspace::Delete, Some("100644"), ChangeKind::Deleted),
            (Workspace::Rename, Some("100644"), ChangeKind::Renamed),
            (Workspace::Binary, None, ChangeKind::Added),
            (Workspace::Binary, Some("100644"), ChangeKind::Modified),
            (Workspace::Symlink, None, ChangeKind::Added),
            (Workspace::Mode, Some("100644"), ChangeKind::Modified),
        ];
        for (kind, old_mode, expected) in cases {
            let converted = ChangedFile::from(&change(kind, old_mode));
            assert_eq!(converted.kind, expected, "{kind:?}");
            assert_eq!((converted.added, converted.removed), (2, 1));
            assert!(converted.binary);
        }
    }

    #[test]
    fn a_context_must_be_an_object() {
        assert!(Context::new(serde_json::json!([1])).is_err());
    }

    #[test]
    fn the_host_can_move_between_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<crate::script::ScriptHost>();
        assert_send_sync::<Context>();
    }
}
