//! The catalog: the embedded built-in library, overridden by a repository's `.tnh/prompts/`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use super::read::read_prompt_file;
use super::{Prompt, PromptError, PromptSource};
use crate::document::diagnostic::nearest;

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
        "prompts/task/fix_from_harness_report.v2.md",
        include_str!("../../prompts/task/fix_from_harness_report.v2.md"),
    ),
    (
        "prompts/task/review_diff.v2.md",
        include_str!("../../prompts/task/review_diff.v2.md"),
    ),
    (
        "prompts/task/fix_with_sources.v1.md",
        include_str!("../../prompts/task/fix_with_sources.v1.md"),
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

/// Prompts by reference (`family.name.vN`), and the repository's prompt files that have
/// problems: those block only the workflows that reference them.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    prompts: BTreeMap<String, Prompt>,
    broken: Vec<BrokenPrompt>,
    /// The repository the catalog was loaded for, whose `.tnh/` also holds the workflow's
    /// repository modules (`.tnh/scripts/`).
    repository: Option<std::path::PathBuf>,
}

/// A repository prompt file that could not be loaded, with every problem found in it.
#[derive(Debug, Clone)]
pub struct BrokenPrompt {
    /// The reference its path gives (`task/x.v1.md` → `task.x.v1`), when it has that shape.
    pub reference: Option<String>,
    /// The file, for messages.
    pub file: String,
    /// Every problem, in file order.
    pub problems: Vec<PromptErrorText>,
}

/// A problem of a broken prompt, kept as its message and hint (errors are not `Clone`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptErrorText {
    /// `FILE:LINE:COL: what is wrong`.
    pub message: String,
    /// What to do about it.
    pub hint: Option<String>,
}

impl From<&PromptError> for PromptErrorText {
    fn from(error: &PromptError) -> Self {
        Self {
            message: error.to_string(),
            hint: error.hint(),
        }
    }
}

/// The built-in library, parsed once per process.
pub fn builtin_catalog() -> Result<&'static Catalog, &'static PromptError> {
    static BUILTIN: OnceLock<Result<Catalog, PromptError>> = OnceLock::new();
    BUILTIN
        .get_or_init(|| {
            let mut catalog = Catalog::default();
            for (path, text) in BUILTIN_FILES {
                let prompt = Prompt::parse(text, PromptSource::Builtin((*path).to_owned()))
                    .map_err(|mut problems| problems.remove(0))?;
                if let Some(problem) = file_name_problem(&prompt, path) {
                    return Err(problem);
                }
                catalog.prompts.insert(prompt.reference(), prompt);
            }
            Ok(catalog)
        })
        .as_ref()
}

impl Catalog {
    /// The repository the catalog was loaded for (`None` for the built-in library alone):
    /// where the workflow's repository modules (`.tnh/scripts/`) are read from too.
    pub fn repository(&self) -> Option<&Path> {
        self.repository.as_deref()
    }

    /// The built-in library plus `<repo>/.tnh/prompts/**/*.md`, which take precedence. A file
    /// with problems is kept aside as a [`BrokenPrompt`]: it hides the built-in of the same
    /// reference (it was meant to replace it), and resolving it is an error listing its
    /// problems. Only an unreadable folder fails the whole load.
    pub fn load(repo: Option<&Path>) -> Result<Self, PromptError> {
        let mut catalog = builtin_catalog().map_err(clone_error)?.clone();
        catalog.repository = repo.map(Path::to_path_buf);
        if let Some(folder) = repo
            .map(|repo| repo.join(".tnh/prompts"))
            .filter(|folder| folder.is_dir())
        {
            for path in markdown_files(&folder)? {
                let shown = path.display().to_string();
                let relative = path
                    .strip_prefix(&folder)
                    .unwrap_or(&path)
                    .display()
                    .to_string();
                let parsed = read_prompt_file(&path, &shown)
                    .map_err(|problem| vec![problem])
                    .and_then(|text| Prompt::parse(&text, PromptSource::Repo(shown.clone())))
                    .and_then(|prompt| match file_name_problem(&prompt, &relative) {
                        Some(problem) => Err(vec![problem]),
                        None => Ok(prompt),
                    });
                match parsed {
                    Ok(prompt) => {
                        catalog.prompts.insert(prompt.reference(), prompt);
                    }
                    Err(problems) => {
                        let reference = reference_of_path(&relative);
                        if let Some(reference) = &reference {
                            catalog.prompts.remove(reference);
                        }
                        catalog.broken.push(BrokenPrompt {
                            reference,
                            file: shown,
                            problems: problems.iter().map(PromptErrorText::from).collect(),
                        });
                    }
                }
            }
        }
        Ok(catalog)
    }

    /// The prompt with this reference.
    pub fn get(&self, reference: &str) -> Option<&Prompt> {
        self.prompts.get(reference)
    }

    /// The broken prompt file with this reference, if one is.
    pub fn broken(&self, reference: &str) -> Option<&BrokenPrompt> {
        self.broken
            .iter()
            .find(|broken| broken.reference.as_deref() == Some(reference))
    }

    /// Every repository prompt file that could not be loaded, in path order.
    pub fn broken_files(&self) -> &[BrokenPrompt] {
        &self.broken
    }

    /// The prompt with this reference, or an error listing a broken file's problems or
    /// suggesting a near reference.
    pub fn resolve(&self, reference: &str) -> Result<&Prompt, PromptError> {
        if let Some(broken) = self.broken(reference) {
            return Err(PromptError::Broken {
                reference: reference.to_owned(),
                file: broken.file.clone(),
                problems: broken
                    .problems
                    .iter()
                    .map(|problem| problem.message.clone())
                    .collect(),
            });
        }
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

/// A prompt must live in `<family>/<name>.v<N>.md` for its `prompt_id` and `version`.
fn file_name_problem(prompt: &Prompt, path: &str) -> Option<PromptError> {
    let (family, name) = prompt
        .prompt_id
        .split_once('.')
        .unwrap_or(("", &prompt.prompt_id));
    let expected = format!("{family}/{name}.v{}.md", prompt.version);
    (!path.ends_with(&expected)).then(|| PromptError::Invalid {
        file: prompt.source.display().to_owned(),
        line: 2,
        column: 1,
        message: format!(
            "prompt `{}` must live in a file ending `{expected}`",
            prompt.reference()
        ),
    })
}

/// `family/name.vN.md` → `family.name.vN`: the reference a workflow would use for the file.
fn reference_of_path(relative: &str) -> Option<String> {
    let path = Path::new(relative);
    let family = path.parent()?.file_name()?.to_str()?;
    let stem = path.file_stem()?.to_str()?;
    let (_, version) = stem.rsplit_once(".v")?;
    version
        .parse::<u32>()
        .ok()
        .map(|_| format!("{family}.{stem}"))
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
    for entry in walkdir::WalkDir::new(folder) {
        let entry = entry.map_err(|error| PromptError::Read {
            path: error.path().unwrap_or(folder).to_path_buf(),
            source: error.into(),
        })?;
        let path = entry.path();
        if entry.file_type().is_file()
            && path.extension().is_some_and(|extension| extension == "md")
        {
            found.push(path.to_path_buf());
        }
    }
    found.sort();
    Ok(found)
}
