//! Which command a validator runs: a name from `.tnh/config.yaml`'s `validators:`, else
//! detected from the worktree (Cargo, npm, Python), or a script entrypoint that must lie under
//! the run directory or the configured `script_allowlist`.

use std::path::{Component, Path, PathBuf};

use crate::config::Config;
use crate::document::yaml::Node;

/// A resolved validator command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// argv.
    pub argv: Vec<String>,
    /// Whether it was detected from the worktree (recorded in the report).
    pub detected: bool,
}

/// The command of a registered validator (`tests`, `lint`, `typecheck` or a configured name).
pub fn registered(name: &str, config: &Config, worktree: &Path) -> Result<Command, String> {
    if let Some(node) = config.validators.get(name) {
        let argv = node.get("argv").and_then(Node::string_items);
        return match argv {
            Some(argv) if !argv.is_empty() => Ok(Command {
                argv,
                detected: false,
            }),
            _ => Err(format!(
                "validator `{name}` in the configuration has no `argv` list"
            )),
        };
    }
    detect(name, worktree).map(|argv| Command { argv, detected: true }).ok_or_else(|| {
        format!("validator `{name}` is not configured and cannot be detected in the worktree (no Cargo.toml, package.json script or Python project for it)")
    })
}

fn detect(name: &str, worktree: &Path) -> Option<Vec<String>> {
    let words = |text: &str| {
        text.split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    if worktree.join("Cargo.toml").is_file() {
        return match name {
            "tests" => Some(words("cargo test")),
            "lint" => Some(words("cargo clippy --all-targets -- -D warnings")),
            "typecheck" => Some(words("cargo check --all-targets")),
            _ => None,
        };
    }
    // The worktree is the agent's: a FIFO there must not hang the step.
    if let Ok(text) = crate::artifacts::safe_files::read_text_following(
        &worktree.join("package.json"),
        16 * 1024 * 1024,
    ) {
        let script = match name {
            "tests" => "test",
            other => other,
        };
        let manifest: serde_json::Value = serde_json::from_str(&text).ok()?;
        return manifest["scripts"]
            .get(script)
            .map(|_| words(&format!("npm run --silent {script}")));
    }
    let python = ["pyproject.toml", "setup.py", "setup.cfg", "pytest.ini"]
        .iter()
        .any(|file| worktree.join(file).is_file());
    if python {
        return match name {
            "tests" => Some(words("python3 -m pytest -q")),
            "lint" => Some(words("ruff check .")),
            "typecheck" => Some(words("mypy .")),
            _ => None,
        };
    }
    None
}

/// The module of a `python… -m MODULE` validator whose interpreter could not find it, from
/// what it printed: Python's own `PYTHON: No module named MODULE` (or `Error while finding
/// module specification for 'MODULE'`), never a test's `ModuleNotFoundError`, which is a
/// failing check.
pub fn missing_python_module(argv: &[String], output: &str) -> Option<String> {
    let interpreter = Path::new(argv.first()?).file_name()?.to_str()?;
    if !interpreter.starts_with("python") || argv.get(1).map(String::as_str) != Some("-m") {
        return None;
    }
    let module = argv.get(2)?;
    let runpy_says = |line: &str| {
        line.ends_with(&format!(": No module named {module}"))
            || line.contains(&format!(
                ": Error while finding module specification for '{module}'"
            ))
    };
    output
        .lines()
        .any(|line| runpy_says(line.trim_end()))
        .then(|| module.clone())
}

/// The argv of a script entrypoint, after checking that it lies under the run directory or an
/// allowlisted folder. Paths under the artifacts root resolve against the repository, others
/// against the worktree.
pub fn script(
    entrypoint: &str,
    args: Vec<String>,
    run_dir: &Path,
    repo: &Path,
    worktree: &Path,
    config: &Config,
) -> Result<Command, String> {
    let relative = Path::new(entrypoint);
    if relative
        .components()
        .any(|component| matches!(component, Component::ParentDir))
    {
        return Err(format!("entrypoint `{entrypoint}` contains `..`"));
    }
    let path: PathBuf = if relative.is_absolute() {
        relative.to_path_buf()
    } else if entrypoint.starts_with(".tnh/") {
        repo.join(relative)
    } else {
        worktree.join(relative)
    };
    let resolved = path
        .canonicalize()
        .map_err(|error| format!("entrypoint `{entrypoint}` cannot be found ({error})"))?;
    let allowed_roots: Vec<PathBuf> = std::iter::once(run_dir.to_path_buf())
        .chain(
            config
                .script_allowlist
                .iter()
                .map(|folder| worktree.join(folder)),
        )
        .filter_map(|root| root.canonicalize().ok())
        .collect();
    if !allowed_roots.iter().any(|root| resolved.starts_with(root)) {
        return Err(format!(
            "entrypoint `{entrypoint}` is outside the run directory and the configured script_allowlist"
        ));
    }
    let shown = resolved.display().to_string();
    let mut argv = match resolved
        .extension()
        .and_then(|extension| extension.to_str())
    {
        Some("py") => vec!["python3".to_owned(), shown],
        Some("sh") => vec!["sh".to_owned(), shown],
        _ => vec![shown],
    };
    argv.extend(args);
    Ok(Command {
        argv,
        detected: false,
    })
}

/// The folder a validator runs in: `cwd` relative to the worktree root, refused
/// when it is absolute, climbs out with `..`, does not exist, or resolves (through a symbolic
/// link) to a folder outside the worktree — a validator never runs elsewhere.
pub fn working_directory(worktree: &Path, cwd: &str) -> Result<PathBuf, String> {
    if let Some(reason) = crate::workflow::validate::cwd_leaves_worktree(cwd) {
        return Err(reason.to_owned());
    }
    let path = worktree.join(cwd);
    let real_worktree = worktree
        .canonicalize()
        .map_err(|error| format!("cannot be checked: the worktree cannot be resolved ({error})"))?;
    let real = path
        .canonicalize()
        .map_err(|error| format!("is not a folder of the worktree ({error})"))?;
    if !real.starts_with(&real_worktree) {
        return Err(format!(
            "resolves to `{}`, outside the worktree (a symbolic link)",
            real.display()
        ));
    }
    if !real.is_dir() {
        return Err("is not a folder".to_owned());
    }
    Ok(path)
}

/// The conductor's own `unshare`, by absolute path, when `unshare -rn` can give a process its
/// own empty network namespace here. Looked up once on the conductor's `PATH`: a validator's
/// `env` (its own `PATH` included) applies to the validator, never to the helper that
/// isolates it.
pub fn isolation_helper() -> Option<&'static Path> {
    static HELPER: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    HELPER
        .get_or_init(|| {
            use std::os::unix::fs::PermissionsExt;
            let search = std::env::var_os("PATH")?;
            let helper = std::env::split_paths(&search)
                .filter(|directory| directory.is_absolute())
                .map(|directory| directory.join("unshare"))
                .find(|candidate| {
                    std::fs::metadata(candidate)
                        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
                })?;
            std::process::Command::new(&helper)
                .args(["-rn", "true"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|status| status.success())
                .then_some(helper)
        })
        .as_deref()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_python_module_is_told_from_a_failing_test() {
        let argv: Vec<String> = ["python3", "-m", "pytest", "-q"].map(str::to_owned).into();
        let missing = "/usr/bin/python3: No module named pytest\n";
        assert_eq!(
            missing_python_module(&argv, missing).as_deref(),
            Some("pytest")
        );
        let nested: Vec<String> = ["python3", "-m", "a.b"].map(str::to_owned).into();
        let spec = "/usr/bin/python3: Error while finding module specification for 'a.b' (ModuleNotFoundError: No module named 'a')";
        assert_eq!(missing_python_module(&nested, spec).as_deref(), Some("a.b"));
        // A test importing something missing is a failing check.
        let failing = "E   ModuleNotFoundError: No module named 'requests'\n1 error in 0.1s";
        assert_eq!(missing_python_module(&argv, failing), None);
        let cargo: Vec<String> = ["cargo", "test"].map(str::to_owned).into();
        assert_eq!(missing_python_module(&cargo, missing), None);
    }
}
