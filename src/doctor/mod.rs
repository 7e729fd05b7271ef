//! `doctor`: what a run in this repository needs, checked without starting one — git, each
//! agent and planner CLI the configuration can use (found where, its version against the
//! versions the tests ran, the environment keys its profile passes and whether each is set,
//! never a value), validators, the configuration, a writable `.tnh/` and free disk.
//!
//! The library gathers a [`DoctorReport`]; `src/cli/doctor.rs` prints it.

mod tools;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::config::Config;
use crate::runner::versions::{Version, VersionCheck, check_version};
use crate::runner::{AgentKind, AgentProfile, HostEnv, builtin_profiles};

/// The record format of `doctor --json`.
pub const DOCTOR_SCHEMA_VERSION: u32 = 1;

/// How long a CLI may take to print its version.
const VERSION_TIMEOUT: Duration = Duration::from_secs(20);

/// Free space under which a run is likely to fail (worktrees, captures), and under which it
/// is worth a warning.
const DISK_NEEDED: u64 = 100 * 1024 * 1024;
const DISK_COMFORTABLE: u64 = 1024 * 1024 * 1024;

/// Everything `doctor` found.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct DoctorReport {
    /// The record format (1).
    pub schema_version: u32,
    /// True when nothing a run needs is missing (warnings allowed): exit 0.
    pub ok: bool,
    /// One entry per thing checked, in the order shown.
    pub checks: Vec<Check>,
}

/// One thing checked.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Check {
    /// What kind of thing.
    pub area: Area,
    /// Its name (`git`, the profile's, the validator's, `.tnh/`).
    pub name: String,
    /// The verdict.
    pub status: CheckStatus,
    /// What was found, or what is wrong and what to do.
    pub detail: String,
    /// The program found, when one was looked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The version it reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The version the tests ran, for an agent CLI.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tested_version: Option<String>,
    /// The environment keys the profile passes, and whether each is set (never its value);
    /// empty for what passes none.
    pub env: Vec<EnvKey>,
}

/// An environment key a profile passes.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct EnvKey {
    /// The variable's name.
    pub name: String,
    /// Whether it is set (non-empty) in this environment.
    pub set: bool,
}

/// What a check is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Area {
    /// git itself.
    Git,
    /// `.tnh/config.yaml`.
    Configuration,
    /// An agent profile's program.
    Agent,
    /// A planner profile's program.
    Planner,
    /// A validator's program.
    Validator,
    /// `.tnh/` and the disk under it.
    Storage,
}

/// A verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    /// Fine.
    Ok,
    /// Usable, but worth a look (an untested version, an unset key).
    Warning,
    /// A run that needs it would fail.
    Missing,
}

/// The JSON Schema of `doctor --json`.
pub fn doctor_schema() -> serde_json::Value {
    schemars::schema_for!(DoctorReport).to_value()
}

impl Check {
    fn new(area: Area, name: &str, status: CheckStatus, detail: String) -> Check {
        Check {
            area,
            name: name.to_owned(),
            status,
            detail,
            path: None,
            version: None,
            tested_version: None,
            env: Vec::new(),
        }
    }
}

/// Checks what a run in `repo` (with `config_path`, as `--config` gives it) needs, in the
/// environment `host`.
pub fn examine(repo: Option<&Path>, config_path: Option<&Path>, host: &HostEnv) -> DoctorReport {
    let mut checks = vec![git_check(host)];
    let config = match Config::load(repo, config_path) {
        Ok(config) => {
            let shown = config.path.as_ref().map_or_else(
                || "none (built-in defaults)".to_owned(),
                |path| path.display().to_string(),
            );
            checks.push(Check::new(
                Area::Configuration,
                "configuration",
                CheckStatus::Ok,
                format!("valid: {shown}"),
            ));
            Some(config)
        }
        Err(error) => {
            checks.push(Check::new(
                Area::Configuration,
                "configuration",
                CheckStatus::Missing,
                error.to_string(),
            ));
            None
        }
    };
    let root = config
        .as_ref()
        .and_then(|config| config.root.clone())
        .or(repo.map(Path::to_path_buf));
    if let Some(config) = &config {
        checks.extend(agent_checks(config, root.as_deref(), host));
        checks.extend(tools::planner_checks(config, root.as_deref(), host));
        checks.extend(tools::validator_checks(config, root.as_deref(), host));
    }
    checks.extend(storage_checks(repo));
    DoctorReport {
        schema_version: DOCTOR_SCHEMA_VERSION,
        ok: checks
            .iter()
            .all(|check| check.status != CheckStatus::Missing),
        checks,
    }
}

fn git_check(host: &HostEnv) -> Check {
    match cli_check(Area::Git, "git", "git", None, host) {
        mut check if check.status == CheckStatus::Ok => {
            check.detail = "found".to_owned();
            check
        }
        check => check,
    }
}

/// The configured agent profiles, and the built-in ones the configuration does not replace.
fn agent_checks(config: &Config, root: Option<&Path>, host: &HostEnv) -> Vec<Check> {
    let mut profiles: BTreeMap<String, (AgentProfile, bool)> = builtin_profiles()
        .into_iter()
        .map(|(name, profile)| (name, (profile, false)))
        .collect();
    for (name, node) in &config.agents {
        // The configuration loaded, so every profile in it reads.
        if let Ok(profile) = serde_json::from_value::<AgentProfile>(node.to_json()) {
            profiles.insert(name.clone(), (profile, true));
        }
    }
    profiles
        .iter()
        .map(|(name, (profile, configured))| {
            let mut check = profile_check(Area::Agent, name, profile, root, host);
            // A built-in profile is needed only by a workflow that names it.
            if !configured && check.status == CheckStatus::Missing {
                check.status = CheckStatus::Warning;
                check
                    .detail
                    .push_str(" (built-in profile: needed only by workflows that name it)");
            }
            check
        })
        .collect()
}

fn profile_check(
    area: Area,
    name: &str,
    profile: &AgentProfile,
    root: Option<&Path>,
    host: &HostEnv,
) -> Check {
    let (program, kind) = match profile.kind {
        AgentKind::Command => (profile.argv.first().cloned().unwrap_or_default(), None),
        kind => (cli_program(kind, profile.binary.as_ref(), host), Some(kind)),
    };
    let program = crate::runner::adapters::resolve_program(&program, root);
    let mut check = cli_check(area, name, &program, kind, host);
    check.env = env_keys(&profile.pass_env, host);
    if check.status == CheckStatus::Ok && check.env.iter().any(|key| !key.set) {
        check.status = CheckStatus::Warning;
        check
            .detail
            .push_str("; some keys it passes are not set (fine if the CLI has a stored login)");
    }
    check
}

/// The program a CLI kind runs: its `TNH_*_BIN`, else the profile's `binary`, else its name.
pub(crate) fn cli_program(kind: AgentKind, binary: Option<&String>, host: &HostEnv) -> String {
    let (variable, default) = match kind {
        AgentKind::Claude => ("TNH_CLAUDE_BIN", "claude"),
        AgentKind::Codex => ("TNH_CODEX_BIN", "codex"),
        AgentKind::Gemini => ("TNH_GEMINI_BIN", "gemini"),
        AgentKind::Command => ("", ""),
    };
    host.get(variable)
        .filter(|value| !value.is_empty())
        .map(str::to_owned)
        .or_else(|| binary.cloned())
        .unwrap_or_else(|| default.to_owned())
}

pub(crate) fn env_keys(names: &[String], host: &HostEnv) -> Vec<EnvKey> {
    names
        .iter()
        .map(|name| EnvKey {
            name: name.clone(),
            set: host.get(name).is_some_and(|value| !value.is_empty()),
        })
        .collect()
}

/// Finds `program` on the host's PATH; for a CLI kind, asks its version and compares it with
/// the tested one.
pub(crate) fn cli_check(
    area: Area,
    name: &str,
    program: &str,
    kind: Option<AgentKind>,
    host: &HostEnv,
) -> Check {
    let environment = host.pairs();
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let found = crate::runner::supervisor::find_program(program, &environment, &cwd)
        .filter(|path| path.is_file());
    let Some(path) = found else {
        return Check::new(
            area,
            name,
            CheckStatus::Missing,
            format!(
                "`{program}` not found (on PATH, or at that path); install it, or point the profile's `binary` (or TNH_*_BIN) at it"
            ),
        );
    };
    let mut check = Check::new(area, name, CheckStatus::Ok, "found".to_owned());
    check.path = Some(path.display().to_string());
    if kind.is_none() && area != Area::Git {
        return check;
    }
    let version = tools::program_version(&path, &environment, VERSION_TIMEOUT);
    check.version = version.as_ref().map(Version::to_string);
    let Some(kind) = kind else {
        return check;
    };
    let Some(version) = version else {
        check.status = CheckStatus::Warning;
        check.detail = "found, but `--version` printed no version".to_owned();
        return check;
    };
    if let Some((verdict, tested)) = check_version(kind, &version) {
        check.tested_version = Some(tested.version.to_string());
        (check.status, check.detail) = match verdict {
            VersionCheck::Tested => (CheckStatus::Ok, "the tested version".to_owned()),
            VersionCheck::Newer => (
                CheckStatus::Warning,
                format!(
                    "newer than the tested {} {}: its flags or events may have changed",
                    tested.package, tested.version
                ),
            ),
            VersionCheck::Older => (
                CheckStatus::Warning,
                format!(
                    "older than the tested {} {}: flags the adapter passes may be missing",
                    tested.package, tested.version
                ),
            ),
        };
    }
    check
}

/// `.tnh/` writable, and the free space under it.
fn storage_checks(repo: Option<&Path>) -> Vec<Check> {
    let Some(repo) = repo else {
        return vec![Check::new(
            Area::Storage,
            ".tnh/",
            CheckStatus::Missing,
            "not inside a git repository: a run needs one (pass --repo DIR)".to_owned(),
        )];
    };
    let tnh = repo.join(".tnh");
    // `.tnh/` is made by the first run; until then its parent must take it.
    let folder = if tnh.is_dir() {
        tnh.clone()
    } else {
        repo.to_path_buf()
    };
    let writable = match tempfile::NamedTempFile::new_in(&folder) {
        Ok(_) => Check::new(
            Area::Storage,
            ".tnh/",
            CheckStatus::Ok,
            format!("writable: {}", folder.display()),
        ),
        Err(error) => Check::new(
            Area::Storage,
            ".tnh/",
            CheckStatus::Missing,
            format!("cannot write in {}: {error}", folder.display()),
        ),
    };
    vec![writable, disk_check(&folder)]
}

fn disk_check(folder: &Path) -> Check {
    let free = match nix::sys::statvfs::statvfs(folder) {
        Ok(stats) => stats
            .blocks_available()
            .saturating_mul(stats.fragment_size()),
        Err(error) => {
            return Check::new(
                Area::Storage,
                "free disk",
                CheckStatus::Warning,
                format!(
                    "cannot read the free space of {}: {error}",
                    folder.display()
                ),
            );
        }
    };
    let mib = free / (1024 * 1024);
    let status = match free {
        free if free < DISK_NEEDED => CheckStatus::Missing,
        free if free < DISK_COMFORTABLE => CheckStatus::Warning,
        _ => CheckStatus::Ok,
    };
    Check::new(
        Area::Storage,
        "free disk",
        status,
        format!("{mib} MiB free under {}", folder.display()),
    )
}
