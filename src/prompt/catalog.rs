//! The catalog: the embedded built-in library, overridden by a repository's `.tnh/prompts/`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use super::{Prompt, PromptError, PromptSource};
use crate::workflow::diagnostic::nearest;

/// The built-in prompt files, embedded so the binary works from any directory.
/// A test fails when a file under `prompts/` is missing here.
pub const BUILTIN_FILES: &[(&str, &str)] = &[
    (
        "prompts/task/implement_adr.v1.md",
        include_str!("../../prompts/task/implement_adr.v1.md"),
    ),
    (
        "prompts/task/fix_from_harness_report.v1.md",
        include_str!("../../prompts/task/fix_from_harness_report.v1.md"),
    ),
    (
        "prompts/task/synthesize_harness.v1.md",
        include_str!("../../prompts/task/synthesize_harness.v1.md"),
    ),
    (
        "prompts/task/review_diff.v1.md",
        include_str!("../../prompts/task/review_diff.v1.md"),
    ),
    (
        "prompts/task/plan_adr.v1.md",
        include_str!("../../prompts/task/plan_adr.v1.md"),
    ),
    (
        "prompts/task/fix_from_logs.v1.md",
        include_str!("../../prompts/task/fix_from_logs.v1.md"),
    ),
    (
        "prompts/task/fix_from_logs.v2.md",
        include_str!("../../prompts/task/fix_from_logs.v2.md"),
    ),
    (
        "prompts/policy/workspace_safety.v1.md",
        include_str!("../../prompts/policy/workspace_safety.v1.md"),
    ),
    (
        "prompts/planner/evaluate_step.v1.md",
        include_str!("../../prompts/planner/evaluate_step.v1.md"),
    ),
    (
        "prompts/planner/evaluate_results.v1.md",
        include_str!("../../prompts/planner/evaluate_results.v1.md"),
    ),
    (
        "prompts/planner/evaluate_harness_report.v1.md",
        include_str!("../../prompts/planner/evaluate_harness_report.v1.md"),
    ),
    (
        "prompts/planner/evaluate_plan.v1.md",
        include_str!("../../prompts/planner/evaluate_plan.v1.md"),
    ),
    (
        "prompts/triage/route_task.v1.md",
        include_str!("../../prompts/triage/route_task.v1.md"),
    ),
    (
        "prompts/risk/assess_changes.v1.md",
        include_str!("../../prompts/risk/assess_changes.v1.md"),
    ),
    (
        "prompts/journal/generate_daily.v1.md",
        include_str!("../../prompts/journal/generate_daily.v1.md"),
    ),
];

/// Prompts by reference (`family.name.vN`).
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    prompts: BTreeMap<String, Prompt>,
}

/// The built-in library, parsed once per process.
pub fn builtin_catalog() -> Result<&'static Catalog, &'static PromptError> {
    static BUILTIN: OnceLock<Result<Catalog, PromptError>> = OnceLock::new();
    BUILTIN
        .get_or_init(|| {
            let mut catalog = Catalog::default();
            for (path, text) in BUILTIN_FILES {
                catalog.insert(
                    Prompt::parse(text, PromptSource::Builtin((*path).to_owned()))?,
                    path,
                )?;
            }
            Ok(catalog)
        })
        .as_ref()
}

impl Catalog {
    /// The built-in library plus `<repo>/.tnh/prompts/**/*.md`, which take precedence.
    pub fn load(repo: Option<&Path>) -> Result<Self, PromptError> {
        let mut catalog = builtin_catalog().map_err(clone_error)?.clone();
        if let Some(folder) = repo
            .map(|repo| repo.join(".tnh/prompts"))
            .filter(|folder| folder.is_dir())
        {
            for path in markdown_files(&folder)? {
                let text = std::fs::read_to_string(&path).map_err(|source| PromptError::Read {
                    path: path.clone(),
                    source,
                })?;
                let shown = path.display().to_string();
                let relative = path
                    .strip_prefix(&folder)
                    .unwrap_or(&path)
                    .display()
                    .to_string();
                catalog.insert(Prompt::parse(&text, PromptSource::Repo(shown))?, &relative)?;
            }
        }
        Ok(catalog)
    }

    /// Adds or replaces a prompt, checking that its file name matches its id and version.
    fn insert(&mut self, prompt: Prompt, path: &str) -> Result<(), PromptError> {
        let (family, name) = prompt
            .prompt_id
            .split_once('.')
            .unwrap_or(("", &prompt.prompt_id));
        let expected = format!("{family}/{name}.v{}.md", prompt.version);
        if !path.ends_with(&expected) {
            return Err(PromptError::Invalid {
                file: prompt.source.display().to_owned(),
                line: 2,
                column: 1,
                message: format!(
                    "prompt `{}` must live in a file ending `{expected}`",
                    prompt.reference()
                ),
            });
        }
        self.prompts.insert(prompt.reference(), prompt);
        Ok(())
    }

    /// The prompt with this reference.
    pub fn get(&self, reference: &str) -> Option<&Prompt> {
        self.prompts.get(reference)
    }

    /// The prompt with this reference, or an error suggesting a near one.
    pub fn resolve(&self, reference: &str) -> Result<&Prompt, PromptError> {
        self.get(reference).ok_or_else(|| PromptError::Unknown {
            reference: reference.to_owned(),
            suggestion: nearest(reference, self.prompts.keys().map(String::as_str))
                .map(str::to_owned),
        })
    }

    /// Every prompt, ordered by reference.
    pub fn iter(&self) -> impl Iterator<Item = &Prompt> {
        self.prompts.values()
    }

    /// Every reference.
    pub fn references(&self) -> impl Iterator<Item = &str> {
        self.prompts.keys().map(String::as_str)
    }
}

fn clone_error(error: &PromptError) -> PromptError {
    PromptError::Invalid {
        file: "built-in library".into(),
        line: 1,
        column: 1,
        message: error.to_string(),
    }
}

/// Markdown files under a folder, sorted, without following symlinks out of it.
fn markdown_files(folder: &Path) -> Result<Vec<std::path::PathBuf>, PromptError> {
    let mut found = Vec::new();
    let mut pending = vec![folder.to_path_buf()];
    while let Some(directory) = pending.pop() {
        let entries = std::fs::read_dir(&directory).map_err(|source| PromptError::Read {
            path: directory.clone(),
            source,
        })?;
        for entry in entries {
            let entry = entry.map_err(|source| PromptError::Read {
                path: directory.clone(),
                source,
            })?;
            let kind = entry.file_type().map_err(|source| PromptError::Read {
                path: entry.path(),
                source,
            })?;
            let path = entry.path();
            if kind.is_dir() {
                pending.push(path);
            } else if kind.is_file() && path.extension().is_some_and(|extension| extension == "md")
            {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}
