//! The configuration the `tnh` commands read: the conductor's own — `.tnh/config.yaml` of the
//! repository's main working tree — and never a checkout's own `.tnh/`. A run's worktree has
//! no `.tnh/config.yaml` (`.tnh/` is excluded from git), so reading the worktree's would give
//! an agent other validators (or none) than RUN_VALIDATION uses in the same run.
//!
//! Inside a run, the run's `metadata.json` names the repository, the configuration file when
//! the run was started (or last continued) with `--config FILE`, and the SHA-256 of the
//! configuration it used; a file that no longer matches it (changed since) is still read, and
//! the command says so.

use std::path::{Path, PathBuf};

use super::TnhError;
use crate::config::Config;

/// The configuration a `tnh` command uses, and a note for stderr when it is not the one the
/// run recorded.
pub struct RunConfig {
    /// The loaded configuration (defaults when the repository has no file).
    pub config: Config,
    /// Where it is (or would be) read from.
    pub path: PathBuf,
    /// Set when the file is not the one the run's metadata recorded.
    pub note: Option<String>,
}

/// What a run's `metadata.json` says about the configuration.
struct Recorded {
    run_id: String,
    repo_root: PathBuf,
    config_sha256: Option<String>,
    /// The file given with `--config`, when one was.
    config_path: Option<PathBuf>,
}

/// The main working tree of the repository `checkout` belongs to: the run's recorded
/// repository inside a run, else the one git names from `checkout`.
pub fn repo_root(checkout: &Path) -> Result<PathBuf, TnhError> {
    if let Some(recorded) = recorded() {
        return Ok(recorded.repo_root);
    }
    crate::workspace::runs::find_repo_root(checkout).map_err(|error| {
        TnhError::new(
            format!(
                "cannot find the repository of `{}`: {error}",
                checkout.display()
            ),
            error.hint().unwrap_or_else(|| {
                "run tnh from a folder of a git repository (any checkout of it)".to_owned()
            }),
        )
    })
}

/// Names `checkout`'s own `.tnh/config.yaml` on stderr when it differs from the one of the
/// main working tree `root`, which is read instead.
fn warn_ignored_checkout_config(checkout: &Path, root: &Path) {
    if let Some(ignored) = crate::workspace::runs::ignored_checkout_config(checkout, root) {
        super::note(&format!("warning: {ignored}"));
    }
}

/// Loads the configuration for commands run in `checkout`.
pub fn load(checkout: &Path) -> Result<RunConfig, TnhError> {
    let recorded = recorded();
    let repo = match &recorded {
        Some(recorded) => recorded.repo_root.clone(),
        None => repo_root(checkout)?,
    };
    let explicit = recorded
        .as_ref()
        .and_then(|recorded| recorded.config_path.clone());
    if explicit.is_none() {
        warn_ignored_checkout_config(checkout, &repo);
    }
    let path = explicit
        .clone()
        .unwrap_or_else(|| repo.join(".tnh/config.yaml"));
    let config = Config::load(Some(&repo), explicit.as_deref()).map_err(|error| {
        TnhError::new(
            error.to_string(),
            error
                .hint()
                .unwrap_or_else(|| format!("fix {}", path.display())),
        )
    })?;
    let note = recorded.and_then(|recorded| {
        let expected = recorded.config_sha256?;
        let found = config.sha256.clone().unwrap_or_else(|| "none".to_owned());
        (expected != found).then(|| {
            format!(
                "note: `{}` is not the configuration run {} recorded (sha256 {expected}): it changed since the run started; using it as it is now",
                path.display(),
                recorded.run_id
            )
        })
    });
    Ok(RunConfig { config, path, note })
}

/// The run's metadata, when `TNH_RUN_DIR` names a run directory.
fn recorded() -> Option<Recorded> {
    let run_dir = std::env::var_os("TNH_RUN_DIR").filter(|dir| !dir.is_empty())?;
    let bytes = std::fs::read(crate::artifacts::RunDir::at(&run_dir).metadata()).ok()?;
    let metadata: RecordedMetadata = serde_json::from_slice(&bytes).ok()?;
    let repo_root = metadata.repo_root.filter(|root| !root.is_empty())?;
    Some(Recorded {
        run_id: metadata.run_id.unwrap_or_default(),
        repo_root: PathBuf::from(repo_root),
        config_sha256: metadata.config_sha256,
        config_path: metadata
            .config_path
            .filter(|path| !path.is_empty())
            .map(PathBuf::from),
    })
}

/// What `tnh` reads of a run's `metadata.json`; a field of another shape reads as absent.
#[derive(Default, serde::Deserialize)]
#[serde(default)]
struct RecordedMetadata {
    #[serde(deserialize_with = "crate::artifacts::evidence::lenient")]
    run_id: Option<String>,
    #[serde(deserialize_with = "crate::artifacts::evidence::lenient")]
    repo_root: Option<String>,
    #[serde(deserialize_with = "crate::artifacts::evidence::lenient")]
    config_sha256: Option<String>,
    #[serde(deserialize_with = "crate::artifacts::evidence::lenient")]
    config_path: Option<String>,
}
