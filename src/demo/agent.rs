//! The built-in scripted agent (`tnh-conductor demo-agent`), so the demo needs no model and no
//! interpreter: it reads its prompt and carries out the directives it finds there, one per
//! line, in its working directory. Other lines are ignored, so directives can sit inside a
//! normal task prompt. The directives are those of `examples/agents/scripted.py`:
//!
//! ```text
//! WRITE path: text          write a file (\n in text becomes a newline); folders are created
//! APPEND path: text         append a line to a file
//! DELETE path               delete a file
//! SAY text                  the final message (printed last)
//! FAIL text                 text on stderr, exit 1
//! EXIT n                    exit with status n after the other directives
//! ONCE directive            only on the step's first visit
//! AFTER_FIRST directive     only from the second visit on
//! ```

use std::path::{Component, Path};

/// What the agent did, for the caller to print.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Performed {
    /// Progress lines (stdout).
    pub progress: Vec<String>,
    /// The final message lines (stdout, last).
    pub said: Vec<String>,
    /// A failure message (stderr).
    pub failure: Option<String>,
    /// The exit status.
    pub status: i32,
}

/// The visit of the step, from `TNH_STEP_DIR` (`…/artifacts/<step>/<visit>`); 1 when unknown.
pub fn visit_from_step_dir(step_dir: Option<&str>) -> u32 {
    step_dir
        .and_then(|dir| Path::new(dir.trim_end_matches('/')).file_name())
        .and_then(|name| name.to_str())
        .and_then(|name| name.parse().ok())
        .unwrap_or(1)
}

/// Carries out the prompt's directives in `cwd`. Paths must stay inside `cwd`.
pub fn perform(prompt: &str, visit: u32, cwd: &Path) -> Performed {
    let mut performed = Performed::default();
    for raw in prompt.lines() {
        let mut line = raw.trim();
        if let Some(rest) = line.strip_prefix("ONCE ") {
            if visit != 1 {
                continue;
            }
            line = rest;
        } else if let Some(rest) = line.strip_prefix("AFTER_FIRST ") {
            if visit == 1 {
                continue;
            }
            line = rest;
        }
        let (verb, rest) = line.split_once(' ').unwrap_or((line, ""));
        let result = match verb {
            "WRITE" | "APPEND" => {
                let (path, text) = rest.split_once(": ").unwrap_or((rest, ""));
                let text = text.replace("\\n", "\n");
                write(cwd, path, &text, verb == "APPEND")
                    .map(|()| format!("{} {path}", verb.to_lowercase()))
            }
            "DELETE" => inside(cwd, rest)
                .and_then(|path| std::fs::remove_file(path).map_err(|error| error.to_string()))
                .map(|()| format!("deleted {rest}")),
            "SAY" => {
                performed.said.push(rest.to_owned());
                continue;
            }
            "FAIL" => {
                performed.failure = Some(rest.to_owned());
                performed.status = 1;
                return performed;
            }
            "EXIT" => {
                performed.status = rest.trim().parse().unwrap_or(1);
                continue;
            }
            _ => continue,
        };
        match result {
            Ok(progress) => performed.progress.push(progress),
            Err(error) => {
                performed.failure = Some(format!("{verb} {rest}: {error}"));
                performed.status = 1;
                return performed;
            }
        }
    }
    performed
}

/// A relative path that stays inside `cwd`.
fn inside(cwd: &Path, path: &str) -> Result<std::path::PathBuf, String> {
    let relative = Path::new(path.trim());
    let escapes = relative.is_absolute()
        || relative
            .components()
            .any(|component| matches!(component, Component::ParentDir));
    if escapes || path.trim().is_empty() {
        return Err("the path must be relative and inside the working directory".into());
    }
    Ok(cwd.join(relative))
}

fn write(cwd: &Path, path: &str, text: &str, append: bool) -> Result<(), String> {
    let target = inside(cwd, path)?;
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(|error| error.to_string())?;
    }
    if append {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&target)
            .map_err(|error| error.to_string())?;
        writeln!(file, "{text}").map_err(|error| error.to_string())
    } else {
        std::fs::write(&target, text).map_err(|error| error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_follow_the_visit_and_stay_inside_the_folder() {
        let dir = tempfile::tempdir().unwrap();
        let prompt = "Some task text.\nONCE WRITE a/b.txt: one\\ntwo\nAFTER_FIRST APPEND a/b.txt: three\nSAY done\n";
        let first = perform(prompt, 1, dir.path());
        assert_eq!(first.status, 0);
        assert_eq!(first.said, ["done"]);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a/b.txt")).unwrap(),
            "one\ntwo"
        );
        perform(prompt, 2, dir.path());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a/b.txt")).unwrap(),
            "one\ntwothree\n"
        );
        let escape = perform("WRITE ../outside.txt: x", 1, dir.path());
        assert_eq!(escape.status, 1);
        assert!(!dir.path().parent().unwrap().join("outside.txt").exists());
        let failed = perform("FAIL broken\nWRITE never.txt: x", 1, dir.path());
        assert_eq!(failed.failure.as_deref(), Some("broken"));
        assert!(!dir.path().join("never.txt").exists());
        assert_eq!(visit_from_step_dir(Some("/r/artifacts/fix/3/")), 3);
        assert_eq!(visit_from_step_dir(None), 1);
    }
}
