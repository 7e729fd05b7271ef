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
}
