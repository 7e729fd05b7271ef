//! The environment an agent sees: an allowlist, never the conductor's whole environment.
//!
//! An agent runs untrusted model output as commands, so it must not inherit the operator's
//! tokens by accident. It gets the basic variables a shell needs, the names its profile
//! explicitly passes through (`pass_env`, e.g. `ANTHROPIC_API_KEY`), and the `TNH_*` variables
//! the kernel gives for the step. The host environment is passed in as a value rather than
//! read here, so the library stays testable without mutating process-global state.

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
}

impl HostEnv {
    /// The current process environment (variables that are not UTF-8 are skipped).
    pub fn from_process() -> HostEnv {
        HostEnv {
            variables: std::env::vars_os()
                .filter_map(|(name, value)| {
                    Some((name.into_string().ok()?, value.into_string().ok()?))
                })
                .collect(),
        }
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
        }
    }

    /// The value of `name`, when set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.variables.get(name).map(String::as_str)
    }
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
