//! The environment an agent sees: an allowlist, never the conductor's whole environment.
//!
//! An agent runs untrusted model output as commands, so it must not inherit the operator's
//! tokens by accident. It gets the basic variables a shell needs, the names its profile
//! explicitly passes through (`pass_env`, e.g. `ANTHROPIC_API_KEY`), and the `TNH_*` variables
//! the kernel gives for the step. The host environment is passed in as a value rather than
//! read here, so the library stays testable without mutating process-global state.
//!
//! Agents call `tnh` (the prompts tell them to): when the operator's `PATH` does not find the
//! `tnh` beside the running conductor first, that folder is put first on the agent's `PATH`.

use std::collections::BTreeMap;

/// Variables every agent gets from the host when set there.
pub const ALLOWLIST: [&str; 8] = [
    "PATH", "HOME", "LANG", "TERM", "USER", "SHELL", "TMPDIR", "TZ",
];

/// Where the host's build tools live, passed like the allowlist: without `RUSTUP_HOME` and
/// `CARGO_HOME` (set in the official Rust images), `cargo test` fails in a validator or an
/// agent's shell although it works in the operator's; the same for Java, Go, Python, Node,
/// Ruby and .NET. None of these hold a secret.
pub const TOOLCHAIN: [&str; 20] = [
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "CARGO_HOME",
    "JAVA_HOME",
    "GOPATH",
    "GOROOT",
    "GOCACHE",
    "GOMODCACHE",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "NODE_PATH",
    "NVM_DIR",
    "PNPM_HOME",
    "GEM_HOME",
    "GEM_PATH",
    "DOTNET_ROOT",
    "PKG_CONFIG_PATH",
    "LD_LIBRARY_PATH",
    "XDG_CACHE_HOME",
];

/// A snapshot of the conductor's own environment (names and values).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostEnv {
    variables: BTreeMap<String, String>,
    /// The folder put first on an agent's `PATH` so that its `tnh` is the one beside the
    /// running conductor (see [`tnh_folder`]).
    tnh_dir: Option<String>,
}

impl HostEnv {
    /// The current process environment (variables that are not UTF-8 are skipped), and the
    /// folder of the `tnh` beside this executable when `PATH` would not find that one.
    pub fn from_process() -> HostEnv {
        let variables: BTreeMap<String, String> = std::env::vars_os()
            .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
            .collect();
        let tnh_dir = std::env::current_exe()
            .ok()
            .and_then(|exe| tnh_folder(&exe, variables.get("PATH").map(String::as_str)));
        HostEnv { variables, tnh_dir }
    }

    /// An environment made of the given pairs (tests, embedding).
    pub fn from_pairs<I, K, V>(pairs: I) -> HostEnv
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        HostEnv {
            variables: pairs
                .into_iter()
                .map(|(name, value)| (name.into(), value.into()))
                .collect(),
            tnh_dir: None,
        }
    }

    /// The value of `name`, when set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.variables.get(name).map(String::as_str)
    }

    /// Every variable, as name and value pairs.
    pub fn pairs(&self) -> Vec<(String, String)> {
        self.variables
            .iter()
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect()
    }

    /// This environment with `folder` put first on agents' `PATH` (tests, embedding; see
    /// [`tnh_folder`]).
    #[must_use]
    pub fn with_tnh_dir(mut self, folder: &str) -> HostEnv {
        self.tnh_dir = Some(folder.to_owned());
        self
    }

    /// The folder put first on agents' `PATH`, when there is one.
    pub fn tnh_dir(&self) -> Option<&str> {
        self.tnh_dir.as_deref()
    }
}

/// Where a bare program name is looked for when `PATH` is not set (as `execvp` does).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// The folder to put first on an agent's `PATH` so that the `tnh` it calls is the one beside
/// `exe` (the running conductor): the same version, which reads the run's files as this
/// conductor writes them. `None` when there is no executable `tnh` beside `exe`, when `path`
/// already finds that very file first (an installed conductor: the agent's `PATH` stays the
/// operator's, in the operator's order), or when the folder cannot be written in `PATH` (not
/// UTF-8, or holding a `:`).
pub fn tnh_folder(exe: &std::path::Path, path: Option<&str>) -> Option<String> {
    let folder = exe.parent()?;
    let sibling = std::fs::canonicalize(folder.join("tnh")).ok()?;
    if !is_executable_file(&sibling) {
        return None;
    }
    let found_first = path
        .unwrap_or(DEFAULT_PATH)
        .split(':')
        .map(|entry| if entry.is_empty() { "." } else { entry })
        .map(|entry| std::path::Path::new(entry).join("tnh"))
        .find(|candidate| is_executable_file(candidate));
    if found_first.and_then(|found| std::fs::canonicalize(found).ok()) == Some(sibling) {
        return None;
    }
    let folder = folder.to_str()?;
    (!folder.contains(':')).then(|| folder.to_owned())
}

fn is_executable_file(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
}

/// The complete environment of an agent process.
///
/// `tnh_variables` are the step's `TNH_*` variables; names not starting with `TNH_` are
/// ignored so the kernel cannot widen the allowlist by mistake.
pub fn agent_environment(
    host: &HostEnv,
    pass_env: &[String],
    tnh_variables: &BTreeMap<String, String>,
) -> Vec<(String, String)> {
    let mut environment = BTreeMap::new();
    for name in ALLOWLIST
        .iter()
        .chain(TOOLCHAIN.iter())
        .copied()
        .chain(pass_env.iter().map(String::as_str))
    {
        if let Some(value) = host.get(name) {
            environment.insert(name.to_owned(), value.to_owned());
        }
    }
    if let Some(folder) = host.tnh_dir() {
        let path = host.get("PATH").unwrap_or(DEFAULT_PATH);
        environment.insert("PATH".to_owned(), format!("{folder}:{path}"));
    }
    for (name, value) in tnh_variables {
        if name.starts_with("TNH_") {
            environment.insert(name.clone(), value.clone());
        }
    }
    environment.into_iter().collect()
}

/// An agent's environment with its step's `env` added: a step variable replaces a variable of
/// the same name (`PATH` too), except the kernel's `TNH_*` variables, which a step never
/// replaces (`validate` refuses such names).
pub fn with_step_env(
    environment: Vec<(String, String)>,
    step_env: &[(String, String)],
) -> Vec<(String, String)> {
    if step_env.is_empty() {
        return environment;
    }
    let mut merged: BTreeMap<String, String> = environment.into_iter().collect();
    for (name, value) in step_env {
        if !name.starts_with("TNH_") {
            merged.insert(name.clone(), value.clone());
        }
    }
    merged.into_iter().collect()
}

/// Parts of a variable name that mark a secret: validators never see such variables.
pub const SECRET_MARKERS: [&str; 5] = ["KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL"];

/// Whether a variable name looks like it holds a secret.
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_MARKERS.iter().any(|marker| upper.contains(marker))
}

/// The complete environment of a validator: the allowlist, the step's `TNH_*` variables and the
/// validator's own `env`, minus every name that looks like a secret (agents' pass-through keys
/// included). Returns the environment and the names that were dropped.
pub fn validator_environment(
    host: &HostEnv,
    extra: &[(String, String)],
    tnh_variables: &BTreeMap<String, String>,
) -> (Vec<(String, String)>, Vec<String>) {
    let mut environment: BTreeMap<String, String> = agent_environment(host, &[], tnh_variables)
        .into_iter()
        .collect();
    let mut dropped = Vec::new();
    for (name, value) in extra {
        if is_secret_name(name) {
            dropped.push(name.clone());
        } else {
            environment.insert(name.clone(), value.clone());
        }
    }
    environment.retain(|name, _| !is_secret_name(name) || name.starts_with("TNH_"));
    (environment.into_iter().collect(), dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_allowlisted_passed_and_step_variables_reach_the_agent() {
        let host = HostEnv::from_pairs([
            ("PATH", "/usr/bin"),
            ("HOME", "/home/dev"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("ANTHROPIC_API_KEY", "key"),
            ("TNH_CLAUDE_BIN", "/opt/claude"),
        ]);
        let step = BTreeMap::from([
            ("TNH_STEP_ID".to_owned(), "implement".to_owned()),
            ("LD_PRELOAD".to_owned(), "/evil.so".to_owned()),
        ]);
        let environment = agent_environment(&host, &["ANTHROPIC_API_KEY".to_owned()], &step);
        let names: Vec<&str> = environment.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["ANTHROPIC_API_KEY", "HOME", "PATH", "TNH_STEP_ID"]);
    }

    #[test]
    fn where_the_build_tools_live_reaches_agents_and_validators() {
        let host = HostEnv::from_pairs([
            ("PATH", "/usr/local/cargo/bin:/usr/bin"),
            ("RUSTUP_HOME", "/usr/local/rustup"),
            ("CARGO_HOME", "/usr/local/cargo"),
            ("JAVA_HOME", "/opt/java"),
            ("DATABASE_URL", "postgres://me:pw@db"),
        ]);
        let step = BTreeMap::new();
        let (environment, _) = validator_environment(&host, &[], &step);
        let names: Vec<&str> = environment.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["CARGO_HOME", "JAVA_HOME", "PATH", "RUSTUP_HOME"]);
        let agent = agent_environment(&host, &[], &step);
        assert_eq!(agent.len(), 4, "{agent:?}");
    }

    #[test]
    fn a_steps_env_is_added_to_the_agents_but_never_replaces_the_kernels_variables() {
        let host = HostEnv::from_pairs([("PATH", "/usr/bin"), ("SECRET_TOKEN", "t")]);
        let step = BTreeMap::from([("TNH_RUN_ID".to_owned(), "r".to_owned())]);
        let environment = with_step_env(
            agent_environment(&host, &[], &step),
            &[
                ("MODE".to_owned(), "fast".to_owned()),
                ("PATH".to_owned(), "/opt/bin".to_owned()),
                ("TNH_RUN_ID".to_owned(), "forged".to_owned()),
            ],
        );
        assert_eq!(
            environment,
            [
                ("MODE".to_owned(), "fast".to_owned()),
                ("PATH".to_owned(), "/opt/bin".to_owned()),
                ("TNH_RUN_ID".to_owned(), "r".to_owned()),
            ]
        );
    }

    #[test]
    fn the_folder_of_the_conductors_tnh_comes_first_on_the_agents_path() {
        let host = HostEnv::from_pairs([("PATH", "/usr/bin:/bin")]).with_tnh_dir("/opt/tnh");
        let environment = agent_environment(&host, &[], &BTreeMap::new());
        assert_eq!(
            environment,
            [("PATH".to_owned(), "/opt/tnh:/usr/bin:/bin".to_owned())]
        );
        // With no `PATH` at all, the agent still finds what `execvp` would.
        let bare = HostEnv::default().with_tnh_dir("/opt/tnh");
        let environment = agent_environment(&bare, &[], &BTreeMap::new());
        assert_eq!(
            environment,
            [("PATH".to_owned(), "/opt/tnh:/bin:/usr/bin".to_owned())]
        );
        // A step's own `PATH` replaces it, as it replaces the host's.
        let stepped = with_step_env(
            agent_environment(&host, &[], &BTreeMap::new()),
            &[("PATH".to_owned(), "/mine".to_owned())],
        );
        assert_eq!(stepped, [("PATH".to_owned(), "/mine".to_owned())]);
    }

    #[test]
    fn the_conductors_folder_is_added_only_when_path_finds_another_tnh_or_none() {
        use std::os::unix::fs::PermissionsExt;
        let make = |dir: &std::path::Path, name: &str, mode: u32| {
            std::fs::create_dir_all(dir).unwrap();
            let file = dir.join(name);
            std::fs::write(&file, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
            file
        };
        let root = tempfile::tempdir().unwrap();
        let release = root.path().join("release");
        let exe = make(&release, "tnh-conductor", 0o755);
        make(&release, "tnh", 0o755);
        let other = root.path().join("other");
        make(&other, "tnh", 0o755);
        let folder = release.to_str().unwrap();
        let other_folder = other.to_str().unwrap();
        // Not on PATH: added.
        assert_eq!(tnh_folder(&exe, Some("/usr/bin")), Some(folder.to_owned()));
        assert_eq!(tnh_folder(&exe, None), Some(folder.to_owned()));
        // On PATH, found first: PATH is left as it is.
        let on_path = format!("{folder}:/usr/bin");
        assert_eq!(tnh_folder(&exe, Some(&on_path)), None);
        // Another `tnh` (an older install) would be found first: added before it.
        let shadowed = format!("{other_folder}:{folder}");
        assert_eq!(tnh_folder(&exe, Some(&shadowed)), Some(folder.to_owned()));
        // No `tnh` beside the conductor, or one that cannot run: nothing to add.
        let lonely = root.path().join("lonely");
        let lonely_exe = make(&lonely, "tnh-conductor", 0o755);
        assert_eq!(tnh_folder(&lonely_exe, Some("/usr/bin")), None);
        make(&lonely, "tnh", 0o644);
        assert_eq!(tnh_folder(&lonely_exe, Some("/usr/bin")), None);
    }

    #[test]
    fn validators_never_see_secret_looking_names() {
        let host = HostEnv::from_pairs([("PATH", "/usr/bin"), ("ANTHROPIC_API_KEY", "key")]);
        let extra = [
            ("GITHUB_TOKEN".to_owned(), "t".to_owned()),
            ("MODE".to_owned(), "fast".to_owned()),
        ];
        let step = BTreeMap::from([("TNH_RUN_ID".to_owned(), "r".to_owned())]);
        let (environment, dropped) = validator_environment(&host, &extra, &step);
        let names: Vec<&str> = environment.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["MODE", "PATH", "TNH_RUN_ID"]);
        assert_eq!(dropped, ["GITHUB_TOKEN"]);
    }
}
