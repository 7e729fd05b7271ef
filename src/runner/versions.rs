//! The agent CLI versions the test suite ran for real: `tests/real-agents/versions`, embedded
//! at build time, and how a version a CLI reports compares with them.
//!
//! Each line of that file is an npm package and its exact version (`@openai/codex 0.171.0`);
//! `#` starts a comment. `.ci/run` installs exactly those, and the tests in
//! `tests/integration/real_agents.rs` drive them against a scripted model server, so these are
//! the versions whose flags, events and exit codes the adapters are known to read right. A
//! newer CLI may have changed them: `doctor` and the pre-run checks warn.

use std::fmt;

use super::AgentKind;

/// The versions file, as built in.
const VERSIONS_FILE: &str = include_str!("../../tests/real-agents/versions");

/// A dotted version (`2.1.332`), compared number by number.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub Vec<u64>);

impl Version {
    /// The first dotted number in a text (`codex-cli 0.171.0`, `2.1.332 (Claude Code)`).
    pub fn find_in(text: &str) -> Option<Version> {
        text.split(|character: char| !(character.is_ascii_digit() || character == '.'))
            .filter(|word| word.contains('.'))
            .find_map(Version::parse)
    }

    /// A version written as numbers separated by dots, nothing else.
    pub fn parse(text: &str) -> Option<Version> {
        let parts: Option<Vec<u64>> = text
            .trim_matches('.')
            .split('.')
            .map(|part| part.parse().ok())
            .collect();
        parts.filter(|parts| parts.len() >= 2).map(Version)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(u64::to_string).collect();
        formatter.write_str(&parts.join("."))
    }
}

/// One CLI the tests ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestedVersion {
    /// The npm package (`@anthropic-ai/claude-code`).
    pub package: String,
    /// The agent kind that drives it.
    pub kind: AgentKind,
    /// The version the tests ran: the newest known to work.
    pub version: Version,
    /// The oldest version the adapter is known to work with.
    pub oldest: Version,
}

/// The kind that drives an npm package of the versions file.
fn kind_of(package: &str) -> Option<AgentKind> {
    match package {
        "@anthropic-ai/claude-code" => Some(AgentKind::Claude),
        "@openai/codex" => Some(AgentKind::Codex),
        "@google/gemini-cli" => Some(AgentKind::Gemini),
        _ => None,
    }
}

/// Every CLI of the versions file.
pub fn tested_versions() -> Vec<TestedVersion> {
    parse_versions(VERSIONS_FILE)
}

/// The tested version of the CLI a kind drives (`None` for `command`).
pub fn tested_version(kind: AgentKind) -> Option<TestedVersion> {
    tested_versions()
        .into_iter()
        .find(|tested| tested.kind == kind)
}

/// Reads a versions file; lines it cannot read are skipped (a test checks the built-in one
/// reads whole).
pub fn parse_versions(text: &str) -> Vec<TestedVersion> {
    text.lines()
        .map(|line| line.split('#').next().unwrap_or("").trim())
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let package = words.next()?;
            let version = Version::parse(words.next()?)?;
            let oldest = match words.next() {
                Some(word) => Version::parse(word.strip_prefix("oldest=")?)?,
                None => version.clone(),
            };
            Some(TestedVersion {
                package: package.to_owned(),
                kind: kind_of(package)?,
                version,
                oldest,
            })
        })
        .collect()
}

/// How a found version compares with the tested one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionCheck {
    /// Between the oldest known to work and the version the tests ran.
    Tested,
    /// Older than the oldest known to work: flags or events the adapter reads may be missing.
    Older,
    /// Newer than the version the tests ran: untested, may have changed.
    Newer,
}

/// Compares `found` with the tested version of `kind`; `None` when the kind has none.
pub fn check_version(kind: AgentKind, found: &Version) -> Option<(VersionCheck, TestedVersion)> {
    let tested = tested_version(kind)?;
    let check = if *found > tested.version {
        VersionCheck::Newer
    } else if *found < tested.oldest {
        VersionCheck::Older
    } else {
        VersionCheck::Tested
    };
    Some((check, tested))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_versions_file_names_each_cli_once() {
        let tested = tested_versions();
        let listed = VERSIONS_FILE
            .lines()
            .filter(|line| !line.trim().is_empty() && !line.trim_start().starts_with('#'))
            .count();
        assert_eq!(tested.len(), listed, "every line reads");
        for kind in [AgentKind::Claude, AgentKind::Codex, AgentKind::Gemini] {
            assert_eq!(
                tested.iter().filter(|tested| tested.kind == kind).count(),
                1,
                "{kind:?}"
            );
        }
        assert!(tested_version(AgentKind::Command).is_none());
    }

    #[test]
    fn versions_are_found_in_what_the_clis_print_and_compared_by_number() {
        let cases = [
            ("2.1.332 (Claude Code)", "2.1.332"),
            ("codex-cli 0.171.0", "0.171.0"),
            ("0.61.0\n", "0.61.0"),
        ];
        for (printed, expected) in cases {
            assert_eq!(Version::find_in(printed).unwrap().to_string(), expected);
        }
        assert!(Version::find_in("no version here").is_none());
        assert!(Version::parse("0.10.0") > Version::parse("0.9.9"));
        let tested = tested_version(AgentKind::Codex).unwrap().version;
        let newer = Version(vec![tested.0[0], tested.0[1] + 1, 0]);
        assert_eq!(
            check_version(AgentKind::Codex, &newer).unwrap().0,
            VersionCheck::Newer
        );
        assert_eq!(
            check_version(AgentKind::Codex, &tested).unwrap().0,
            VersionCheck::Tested
        );
    }
}
