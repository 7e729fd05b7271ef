//! `.tnh/config.yaml`: agent, validator and planner profiles, protected branches and the
//! script allowlist. Sections belong to the modules that use them; this file
//! finds the configuration, parses it with positions and hands each section out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::document::shape;
use crate::document::yaml::{self, Node, Pos};
use crate::workflow::validate::KnownNames;

pub mod document;
pub mod planner_document;
pub mod planners;
mod profiles;
mod retention;
pub use retention::{DEFAULT_FINISHED_CHECKOUTS, Retention};

/// The configuration file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Reading failed.
    #[error("cannot read config `{path}`: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not valid configuration.
    #[error("{path}:{pos}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Where.
        pos: Pos,
        /// What is wrong.
        message: String,
    },
}

impl ConfigError {
    /// What to do about it.
    pub fn hint(&self) -> Option<String> {
        Some(match self {
            ConfigError::Read { .. } => {
                "check the --config path, or run `tnh-conductor init`".to_owned()
            }
            ConfigError::Invalid { .. } => {
                "fix the configuration at this position; its keys are described in tnh-conductor's \
                 docs/reference/configuration.md and in the commented file `tnh-conductor init` writes"
                    .to_owned()
            }
        })
    }
}

/// The loaded configuration; absent sections are empty.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Where it was read from, when a file existed.
    pub path: Option<PathBuf>,
    /// The repository root it was loaded for (the folder holding `.tnh/`), when there is one:
    /// a relative program path in a profile (`argv: ["./my-agent.sh"]`, `binary`,
    /// `TNH_CLAUDE_BIN`) is resolved against it.
    pub root: Option<PathBuf>,
    /// `agents`: profile name → its definition.
    pub agents: BTreeMap<String, Node>,
    /// `validators`: name → definition.
    pub validators: BTreeMap<String, Node>,
    /// `planners`: name → definition.
    pub planners: BTreeMap<String, Node>,
    /// `protected_branches`: names or globs.
    pub protected_branches: Vec<String>,
    /// `script_allowlist`: folders where script validators may live.
    pub script_allowlist: Vec<String>,
    /// `adr_paths`: globs of the ADRs `tnh adr` and `tnh context` read (empty when not set:
    /// the default [`DEFAULT_ADR_PATHS`] applies).
    pub adr_paths: Vec<String>,
    /// `operator_checkout`: what a change to the operator's checkout during an agent step is.
    pub operator_checkout: OperatorCheckout,
    /// `retention`: how many finished runs keep their checkout.
    pub retention: Retention,
    /// `run --planner NAME`: the planner profile every EVALUATE uses (not read from the file).
    pub planner_override: Option<String>,
    /// SHA-256 of the file's bytes as read, when a file existed (the run's metadata keeps it).
    pub sha256: Option<String>,
}

/// What a change to the operator's checkout while an agent step runs is (the guard always
/// records it; it cannot tell the agent's edit from the operator's own).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OperatorCheckout {
    /// A policy violation (`path_escape`, rule `operator_checkout`): the default, for runs
    /// nobody watches.
    #[default]
    Forbid,
    /// Recorded in the guard report only: for operators who edit the checkout while agents
    /// work in their worktrees.
    Report,
}

impl Config {
    /// Loads `explicit` if given, else `<repo>/.tnh/config.yaml` if it exists, else defaults.
    pub fn load(repo: Option<&Path>, explicit: Option<&Path>) -> Result<Self, ConfigError> {
        let path = match (explicit, repo) {
            (Some(path), _) => path.to_path_buf(),
            (None, Some(repo)) => repo.join(".tnh/config.yaml"),
            (None, None) => return Ok(Self::default()),
        };
        let root = repo.map(Path::to_path_buf);
        if explicit.is_none() && !path.exists() {
            return Ok(Self {
                root,
                ..Self::default()
            });
        }
        // Only a regular file (a link to one is followed), opened without blocking: a FIFO in
        // its place would hang every command.
        let bytes = crate::artifacts::safe_files::open_regular_following(&path)
            .and_then(|mut file| {
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut file, &mut bytes).map(|_| bytes)
            })
            .map_err(|source| ConfigError::Read {
                path: path.clone(),
                source,
            })?;
        Ok(Self {
            root,
            ..Self::parse(&bytes, &path)?
        })
    }

    /// Parses configuration text.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Self, ConfigError> {
        let invalid = |pos: Pos, message: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            pos,
            message,
        };
        // A file of comments only (the `init` template with every line commented out) is
        // the default configuration, with or without a byte order mark (Notepad writes one).
        let text = String::from_utf8_lossy(bytes);
        let blank = text
            .strip_prefix('\u{feff}')
            .unwrap_or(&text)
            .lines()
            .all(|line| line.trim().is_empty() || line.trim_start().starts_with('#'));
        if blank {
            return Ok(Config {
                path: Some(path.to_path_buf()),
                sha256: Some(crate::artifacts::sha256_hex(bytes)),
                ..Self::default()
            });
        }
        let root = yaml::parse(bytes).map_err(|error| invalid(error.pos, error.message))?;
        let Some(entries) = root.as_map() else {
            return Err(invalid(
                root.pos,
                format!(
                    "the configuration must be a mapping, found {}",
                    root.value.kind_name()
                ),
            ));
        };
        let mut config = Config {
            path: Some(path.to_path_buf()),
            sha256: Some(crate::artifacts::sha256_hex(bytes)),
            ..Self::default()
        };
        for (key, value) in entries {
            match key.as_str() {
                Some("agents") => {
                    config.agents = named_section(value, "agents")
                        .map_err(|(pos, message)| invalid(pos, message))?
                }
                Some("validators") => {
                    config.validators = named_section(value, "validators")
                        .map_err(|(pos, message)| invalid(pos, message))?
                }
                Some("planners") => {
                    config.planners = named_section(value, "planners")
                        .map_err(|(pos, message)| invalid(pos, message))?
                }
                Some("protected_branches") => {
                    config.protected_branches = strings(value, "protected_branches")
                        .map_err(|(pos, message)| invalid(pos, message))?;
                    check_branch_globs(value).map_err(|(pos, message)| invalid(pos, message))?;
                }
                Some("operator_checkout") => {
                    config.operator_checkout = value
                        .as_str()
                        .and_then(shape::parse)
                        .ok_or_else(|| invalid(value.pos, operator_checkout_expected()))?
                }
                Some("script_allowlist") => {
                    config.script_allowlist = strings(value, "script_allowlist")
                        .map_err(|(pos, message)| invalid(pos, message))?
                }
                Some("retention") => {
                    config.retention =
                        retention::parse(value).map_err(|(pos, message)| invalid(pos, message))?
                }
                Some("adr_paths") => {
                    config.adr_paths =
                        adr_paths(value).map_err(|(pos, message)| invalid(pos, message))?
                }
                // More keys are allowed (the modules that own them read them), but one that is
                // a misspelling of a known key would silently drop what it configures (a
                // `protected_branche:` would protect nothing).
                Some(other) => {
                    if let Some(known) = near_miss(other) {
                        return Err(invalid(
                            key.pos,
                            format!("unknown key `{other}`: did you mean `{known}`?"),
                        ));
                    }
                }
                None => {}
            }
        }
        // Agent profiles are checked now, where they are written: a mistake in one (even one
        // no step uses yet) would otherwise end a run that had already started.
        for (name, node) in &config.agents {
            profiles::check_agent(name, node).map_err(|(pos, message)| invalid(pos, message))?;
        }
        // Validators too: a configured validator is its `argv`, nothing else (a key it would
        // ignore, such as `env` or `timeout`, or a misspelt `agrv`, is refused where written).
        for (name, node) in &config.validators {
            profiles::check_validator(name, node)
                .map_err(|(pos, message)| invalid(pos, message))?;
        }
        // Planner definitions likewise: a mistake in one (even `default`, which an EVALUATE
        // naming no planner asks) would otherwise show only when an EVALUATE asks it.
        for (name, node) in &config.planners {
            planners::check_definition(name, node, &config)
                .map_err(|(pos, error)| invalid(pos, error.to_string()))?;
        }
        Ok(config)
    }

    /// The names workflows may use: built-ins plus configured profiles.
    pub fn known_names(&self) -> KnownNames {
        let mut known = KnownNames::default();
        let add = |list: &mut Vec<String>, names: &BTreeMap<String, Node>| {
            list.extend(
                names
                    .keys()
                    .filter(|name| !list.contains(name))
                    .cloned()
                    .collect::<Vec<_>>(),
            );
        };
        add(&mut known.agents, &self.agents);
        add(&mut known.validators, &self.validators);
        add(&mut known.planners, &self.planners);
        known
    }
}

fn named_section(node: &Node, what: &str) -> Result<BTreeMap<String, Node>, (Pos, String)> {
    let entries = node.as_map().ok_or_else(|| {
        (
            node.pos,
            format!("`{what}` must be a mapping of names to definitions"),
        )
    })?;
    entries
        .iter()
        .map(|(key, value)| {
            let name = key
                .as_str()
                .ok_or_else(|| (key.pos, format!("names in `{what}` must be strings")))?;
            Ok((name.to_owned(), value.clone()))
        })
        .collect()
}

fn strings(node: &Node, what: &str) -> Result<Vec<String>, (Pos, String)> {
    let items = node
        .as_seq()
        .ok_or_else(|| (node.pos, format!("`{what}` must be a list of strings")))?;
    items
        .iter()
        .map(|item| {
            item.as_str()
                .map(str::to_owned)
                .ok_or_else(|| (item.pos, format!("entries of `{what}` must be strings")))
        })
        .collect()
}

/// Each `protected_branches` entry compiles as the workspace guard compiles it (`*` does not
/// cross `/`): a bad glob is reported where it is written, not when the run's first agent
/// step guards the workspace (which ended the run).
fn check_branch_globs(node: &Node) -> Result<(), (Pos, String)> {
    for item in node.as_seq().unwrap_or_default() {
        let Some(pattern) = item.as_str() else {
            continue;
        };
        if let Err(error) = compile_glob(pattern) {
            return Err((
                item.pos,
                format!(
                    "invalid protected branch pattern `{pattern}`: {} (a branch name, or a glob such as `release/*`)",
                    error.kind()
                ),
            ));
        }
    }
    Ok(())
}

/// Compiles a configured glob as its users do (the workspace guard, `tnh adr`): `*` does not
/// cross `/`.
fn compile_glob(pattern: &str) -> Result<globset::Glob, globset::Error> {
    globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
}

/// Where `tnh adr` and `tnh context` look for ADRs when `adr_paths` is not set.
pub const DEFAULT_ADR_PATHS: &str = "docs/**/adr/*.md";

/// `adr_paths`: a non-empty list of globs relative to the repository root, each compiling as
/// `tnh adr` compiles it (`*` does not cross `/`). A mistake is reported where it is written:
/// read leniently, a string, a number or a bad glob fell back to the default folder, and the
/// agent was shown other ADRs than the ones configured.
fn adr_paths(node: &Node) -> Result<Vec<String>, (Pos, String)> {
    let example = "a list of globs relative to the repository root, such as `adr_paths: [\"decisions/*.md\"]`";
    let Some(items) = node.as_seq() else {
        return Err((
            node.pos,
            format!(
                "`adr_paths` must be {example}, found {}",
                node.value.kind_name()
            ),
        ));
    };
    if items.is_empty() {
        return Err((
            node.pos,
            format!(
                "`adr_paths` is empty: give at least one glob, or remove the key to use the default `{DEFAULT_ADR_PATHS}`"
            ),
        ));
    }
    let mut patterns = Vec::with_capacity(items.len());
    for item in items {
        let Some(pattern) = item.as_str().filter(|pattern| !pattern.trim().is_empty()) else {
            return Err((
                item.pos,
                format!(
                    "entries of `adr_paths` must be non-empty strings (globs such as `docs/adr/*.md`), found {}",
                    item.value.kind_name()
                ),
            ));
        };
        if let Err(error) = compile_glob(pattern) {
            return Err((
                item.pos,
                format!(
                    "invalid ADR pattern `{pattern}`: {} (a glob relative to the repository root, such as `docs/adr/*.md` or `docs/**/adr/*.md`)",
                    error.kind()
                ),
            ));
        }
        patterns.push(pattern.to_owned());
    }
    Ok(patterns)
}

/// What `operator_checkout` must be.
fn operator_checkout_expected() -> String {
    let names: Vec<String> = shape::names::<OperatorCheckout>()
        .iter()
        .map(|name| format!("`{name}`"))
        .collect();
    format!("`operator_checkout` must be {}", names.join(" or "))
}

/// The known key `key` is a likely misspelling of (the same but for case, `-` for `_` or a
/// plural, and then a small edit away: one letter for keys of up to 8 letters, two for longer
/// ones),
/// if any. Another word at the same distance (another tool's `events:` is two letters from
/// `agents`) is not a misspelling: it is left to its owner.
fn near_miss(key: &str) -> Option<&'static str> {
    let normal = key.to_ascii_lowercase().replace('-', "_");
    shape::keys::<document::ConfigDocument>()
        .iter()
        .copied()
        .find(|known| {
            let allowed = if known.len() <= 8 { 1 } else { 2 };
            let singular = |word: &str| word.trim_end_matches('s').to_owned();
            strsim::damerau_levenshtein(&singular(&normal), &singular(known)) <= allowed
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_profiles_extend_the_built_in_names() {
        let text = b"agents:\n  scripted: {kind: command, argv: [python3, a.py]}\nvalidators:\n  docs: {argv: [make, docs]}\nplanners:\n  judge: {kind: command, argv: [./judge.sh]}\nprotected_branches: [main, release/*]\nother_tool: {x: 1}\n";
        let config = Config::parse(text, Path::new("c.yaml")).unwrap();
        let known = config.known_names();
        assert!(
            known.agents.contains(&"scripted".to_owned())
                && known.agents.contains(&"codex".to_owned())
        );
        assert!(known.validators.contains(&"docs".to_owned()));
        assert!(known.planners.contains(&"judge".to_owned()));
        assert_eq!(config.protected_branches, ["main", "release/*"]);
    }

    #[test]
    fn a_configuration_error_points_to_documentation_that_ships() {
        let error = Config::parse(b"agents: [a, b]\n", Path::new("c.yaml")).unwrap_err();
        let hint = error.hint().unwrap();
        assert!(
            !hint.contains("DESIGN") && hint.contains("docs/reference/configuration.md"),
            "{hint}"
        );
        assert!(
            include_str!("../docs/reference/configuration.md").contains("\n## Top-level keys\n")
        );
    }

    /// `protected_branches: ["release/*", "[invalid"]`
    /// was accepted here; the run started and died at its first agent step, without the
    /// configuration's position.
    #[test]
    fn an_invalid_protected_branch_glob_is_reported_where_it_is_written() {
        let error = Config::parse(
            b"protected_branches:\n  - release/*\n  - \"[invalid\"\n",
            Path::new("c.yaml"),
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "c.yaml:3:5: invalid protected branch pattern `[invalid`: unclosed character class; missing ']' (a branch name, or a glob such as `release/*`)"
        );
    }

    #[test]
    fn a_bad_section_is_reported_with_its_position() {
        let error = Config::parse(b"agents: [a, b]\n", Path::new("c.yaml")).unwrap_err();
        assert_eq!(
            error.to_string(),
            "c.yaml:1:9: `agents` must be a mapping of names to definitions"
        );
    }

    #[test]
    fn a_broken_agent_profile_is_reported_where_it_is_written_even_unused() {
        let parse = |text: &str| {
            Config::parse(text.as_bytes(), Path::new("c.yaml"))
                .unwrap_err()
                .to_string()
        };
        let typo = parse(
            "agents:\n  ok: {kind: command, argv: [echo]}\n  spare:\n    kind: codex\n    timout: 5m\n",
        );
        assert!(
            typo.starts_with("c.yaml:5:5: agent profile `spare` is invalid: unknown key `timout`")
                && typo.contains("workflow's step"),
            "{typo}"
        );
        let empty = parse("agents:\n  bare: {kind: command}\n");
        assert!(
            empty.starts_with("c.yaml:2:9: ") && empty.contains("non-empty `argv`"),
            "{empty}"
        );
    }

    /// A typo in an agent profile was reported at the profile's line,
    /// with the list of every field and no nearest key; a wrong type likewise.
    #[test]
    fn an_agent_profile_mistake_is_reported_at_its_key_with_the_nearest_one() {
        let parse = |text: &str| {
            Config::parse(text.as_bytes(), Path::new("c.yaml"))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            parse(
                "agents:\n  claude-code:\n    kind: claude\n    model: m\n    permision_mode: plan\n"
            ),
            "c.yaml:5:5: agent profile `claude-code` is invalid: unknown key `permision_mode`; did you mean `permission_mode`?"
        );
        let wrong_type = parse("agents:\n  c:\n    kind: claude\n    pass_env: HOME\n");
        assert!(
            wrong_type
                .starts_with("c.yaml:4:15: agent profile `c` is invalid: `pass_env`: invalid type"),
            "{wrong_type}"
        );
        let kind = parse("agents:\n  c: {kind: gemeni}\n");
        assert!(
            kind.starts_with("c.yaml:2:13: agent profile `c` is invalid: `kind` must be one of `command`, `claude`, `codex`, `gemini`, found `gemeni`"),
            "{kind}"
        );
        let no_kind = parse("agents:\n  c: {model: m}\n");
        assert!(
            no_kind.starts_with("c.yaml:2:6: agent profile `c` is invalid: it has no `kind`"),
            "{no_kind}"
        );
        let limit = parse("agents:\n  c: {kind: codex, max_output_mib: 0}\n");
        assert!(limit.starts_with("c.yaml:2:36: "), "{limit}");
    }

    /// Keys the profile's kind never reads were accepted and dropped, a
    /// codex profile's `disallowed_tools` or a claude profile's `sandbox` restricting nothing.
    #[test]
    fn a_profile_key_its_kind_would_ignore_is_refused_where_written() {
        let parse = |text: &str| Config::parse(text.as_bytes(), Path::new("c.yaml"));
        for (text, expected) in [
            (
                "agents:\n  cx: {kind: codex, disallowed_tools: [Bash]}\n",
                "c.yaml:2:21: agent profile `cx` is invalid: `disallowed_tools` does not apply to `kind: codex` (its adapter would ignore it); only `kind: claude` takes it",
            ),
            (
                "agents:\n  cx:\n    kind: codex\n    permission_mode: plan\n",
                "c.yaml:4:5: agent profile `cx` is invalid: `permission_mode` does not apply to `kind: codex`",
            ),
            (
                "agents:\n  cx: {kind: codex, allowed_tools: [Read]}\n",
                "c.yaml:2:21: agent profile `cx` is invalid: `allowed_tools` does not apply",
            ),
            (
                "agents:\n  cl: {kind: claude, sandbox: read-only}\n",
                "c.yaml:2:22: agent profile `cl` is invalid: `sandbox` does not apply to `kind: claude` (its adapter would ignore it); only `kind: codex` and `kind: gemini` take it",
            ),
            (
                "agents:\n  cmd: {kind: command, argv: [sh], model: m}\n",
                "c.yaml:2:36: agent profile `cmd` is invalid: `model` does not apply to `kind: command` (its adapter would ignore it); only `kind: claude`, `kind: codex` and `kind: gemini` take it",
            ),
            (
                "agents:\n  cl: {kind: claude, argv: [x]}\n",
                "c.yaml:2:22: agent profile `cl` is invalid: `argv` does not apply to `kind: claude` (its adapter would ignore it); only `kind: command` takes it; use `binary` to change the program",
            ),
            (
                "planners:\n  h: {kind: http, url: \"http://127.0.0.1:9/v1\", model: m, argv: [x]}\n",
                "c.yaml:2:59: planner `h` is `kind: http`, which would ignore `argv`; only `kind: command` takes it",
            ),
            (
                "planners:\n  h: {kind: command, argv: [x], model: m}\n",
                "c.yaml:2:33: planner `h` is `kind: command`, which would ignore `model`; only `kind: claude`, `kind: codex`, `kind: http` take it",
            ),
            (
                "planners:\n  h: {kind: http, url: \"http://127.0.0.1:9/v1\", model: m, pass_env: [K]}\n",
                "c.yaml:2:59: planner `h` is `kind: http`, which would ignore `pass_env`",
            ),
        ] {
            let error = parse(text).unwrap_err().to_string();
            assert!(error.starts_with(expected), "{text}: {error}");
        }
        // Keys every kind reads, and each kind's own.
        parse(
            "agents:\n  a: {kind: command, argv: [x], pass_env: [K], extra_args: [-v], max_output_mib: 3}\n  b: {kind: claude, binary: c, model: m, permission_mode: plan, allowed_tools: [Read], disallowed_tools: [Bash], add_dirs: [/tmp], append_system_prompt: s}\n  c: {kind: codex, binary: c, model: m, sandbox: read-only, config: {k: v}, add_dirs: [/tmp]}\nplanners:\n  p: {kind: codex, binary: c, model: m, config: {k: v}, timeout: 1m, attempts: 2, pass_env: [K]}\n  q: {kind: http, url: \"http://127.0.0.1:9/v1\", model: m, api_key_env: K, timeout: 1m, attempts: 2}\n",
        )
        .unwrap();
    }

    #[test]
    fn a_configured_validator_is_its_argv_and_nothing_else() {
        let parse = |text: &str| Config::parse(text.as_bytes(), Path::new("c.yaml"));
        assert!(parse("validators:\n  tests: {argv: [cargo, test]}\n").is_ok());
        let extra = parse("validators:\n  tests: {argv: [make], timeout: 1s}\n")
            .unwrap_err()
            .to_string();
        assert!(
            extra.starts_with("c.yaml:2:25: unknown key `timeout` in validator `tests`"),
            "{extra}"
        );
        let typo = parse("validators:\n  tests: {agrv: [make]}\n")
            .unwrap_err()
            .to_string();
        assert!(typo.contains("unknown key `agrv`"), "{typo}");
        let empty = parse("validators:\n  tests: {argv: []}\n")
            .unwrap_err()
            .to_string();
        assert!(empty.contains("needs `argv`"), "{empty}");
    }

    #[test]
    fn operator_checkout_is_forbid_by_default_or_report_when_asked() {
        let parse = |text: &str| Config::parse(text.as_bytes(), Path::new("c.yaml"));
        assert_eq!(
            parse("{}\n").unwrap().operator_checkout,
            OperatorCheckout::Forbid
        );
        assert_eq!(
            parse("operator_checkout: report\n")
                .unwrap()
                .operator_checkout,
            OperatorCheckout::Report
        );
        assert_eq!(
            parse("agents: {}\noperator_checkout: ignore\n")
                .unwrap_err()
                .to_string(),
            "c.yaml:2:20: `operator_checkout` must be `forbid` or `report`"
        );
    }

    #[test]
    fn a_misspelt_known_key_is_refused_other_keys_are_left_to_their_owners() {
        let parse = |text: &str| Config::parse(text.as_bytes(), Path::new("c.yaml"));
        for (text, known) in [
            ("protected_branche: [release/*]\n", "protected_branches"),
            ("protected-branches: [release/*]\n", "protected_branches"),
            ("Agents: {}\n", "agents"),
            ("validator:\n  tests: {argv: [make]}\n", "validators"),
            ("planer: {}\n", "planners"),
            ("operator_chekout: report\n", "operator_checkout"),
            ("adr_path: [decisions/*.md]\n", "adr_paths"),
            ("Adr_paths: [decisions/*.md]\n", "adr_paths"),
            ("adr-paths: [decisions/*.md]\n", "adr_paths"),
        ] {
            let error = parse(text).unwrap_err().to_string();
            assert!(
                error.starts_with("c.yaml:1:1: unknown key")
                    && error.contains(&format!("did you mean `{known}`?")),
                "{text}: {error}"
            );
        }
        assert!(parse("other_tool: {x: 1}\nnotes: text\n").is_ok());
        // Another tool's `events:` is not a misspelt `agents`.
        for other in ["events", "plugins", "hooks", "agent_logs", "planning"] {
            let text = format!("{other}: {{x: 1}}\n");
            assert!(parse(&text).is_ok(), "{other}: {:?}", parse(&text).err());
        }
        for (typo, known) in [
            ("agnets", "agents"),
            ("agent", "agents"),
            ("plannres", "planners"),
            ("protected_brnaches", "protected_branches"),
            ("script_alowlist", "script_allowlist"),
            ("validatrs", "validators"),
        ] {
            let error = parse(&format!("{typo}: {{}}\n")).unwrap_err().to_string();
            assert!(
                error.contains(&format!("did you mean `{known}`?")),
                "{typo}: {error}"
            );
        }
    }

    /// `adr_paths` was read leniently by `tnh adr`, so a string, a number
    /// or a glob that does not compile fell back to the default folder without a word.
    #[test]
    fn adr_paths_is_a_non_empty_list_of_globs_checked_where_written() {
        let parse = |text: &str| Config::parse(text.as_bytes(), Path::new("c.yaml"));
        assert_eq!(
            parse("adr_paths: [decisions/*.md, \"docs/**/adr/*.md\"]\n")
                .unwrap()
                .adr_paths,
            ["decisions/*.md", "docs/**/adr/*.md"]
        );
        assert!(parse("agents: {}\n").unwrap().adr_paths.is_empty());
        for (text, expected) in [
            (
                "adr_paths: \"decisions/*.md\"\n",
                "c.yaml:1:12: `adr_paths` must be a list of globs",
            ),
            (
                "adr_paths: 5\n",
                "c.yaml:1:12: `adr_paths` must be a list of globs",
            ),
            ("adr_paths: []\n", "c.yaml:1:12: `adr_paths` is empty"),
            (
                "adr_paths:\n  - docs/adr/*.md\n  - 7\n",
                "c.yaml:3:5: entries of `adr_paths` must be non-empty strings",
            ),
            (
                "adr_paths:\n  - \"[bad\"\n",
                "c.yaml:2:5: invalid ADR pattern `[bad`: unclosed character class",
            ),
        ] {
            let error = parse(text).unwrap_err().to_string();
            assert!(error.starts_with(expected), "{text}: {error}");
        }
    }

    #[test]
    fn a_file_of_comments_only_is_the_default_configuration() {
        let config = Config::parse(b"# nothing yet\n\n  # really\n", Path::new("c.yaml")).unwrap();
        assert!(config.agents.is_empty() && config.protected_branches.is_empty());
        assert!(config.sha256.is_some());
    }

    /// With a byte order mark before it (Notepad), a comment-only file
    /// was "the file holds no YAML document" for every command.
    #[test]
    fn a_file_of_comments_only_after_a_byte_order_mark_is_the_default_configuration() {
        for text in [
            "\u{feff}# nothing yet\n# agents:\n",
            "\u{feff}\n",
            "\u{feff}",
        ] {
            let config = Config::parse(text.as_bytes(), Path::new("c.yaml")).unwrap();
            assert!(
                config.agents.is_empty() && config.sha256.is_some(),
                "{text:?}"
            );
        }
        let config = Config::parse(
            "\u{feff}protected_branches: [main]\n".as_bytes(),
            Path::new("c.yaml"),
        )
        .unwrap();
        assert_eq!(config.protected_branches, ["main"]);
    }
}
