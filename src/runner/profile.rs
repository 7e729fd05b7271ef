//! Agent profiles: the `agents:` entries of `.tnh/config.yaml` and the built-in
//! `claude-code` (alias `claude`) and `codex` profiles that exist without configuration.
//!
//! A profile says which CLI to drive and with which options; per-step limits (timeout, turns,
//! budget) come from the workflow instead. Unknown keys are refused so a typo in a
//! permission setting never silently falls back to a default.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use super::RunnerError;
use crate::document::shape;

/// Which adapter drives the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AgentKind {
    /// Any program; the prompt arrives on stdin, stdout is plain text.
    Command,
    /// Claude Code: `claude -p --verbose --output-format stream-json`.
    Claude,
    /// Codex: `codex exec --json`.
    Codex,
    /// Gemini CLI: `gemini -p "" --output-format stream-json`.
    Gemini,
}

impl AgentKind {
    /// Every kind, in the order the docs list them.
    pub const ALL: [AgentKind; 4] = [
        AgentKind::Command,
        AgentKind::Claude,
        AgentKind::Codex,
        AgentKind::Gemini,
    ];

    /// The name written in a profile (`kind: command`).
    pub fn name(self) -> &'static str {
        match self {
            AgentKind::Command => "command",
            AgentKind::Claude => "claude",
            AgentKind::Codex => "codex",
            AgentKind::Gemini => "gemini",
        }
    }
}

/// The keys of an `agents:` entry, in declaration order.
pub fn profile_keys() -> &'static [&'static str] {
    shape::keys::<AgentProfile>()
}

/// The kinds that read profile key `key`; `None` for a key profiles do not have.
pub fn kinds_taking(key: &str) -> Option<&'static [AgentKind]> {
    static KINDS: OnceLock<Vec<(&'static str, Vec<AgentKind>)>> = OnceLock::new();
    let table = KINDS.get_or_init(|| {
        shape::key_annotations::<AgentProfile>("x-kinds")
            .into_iter()
            .map(|(key, names)| {
                let kinds = match names {
                    Some(names) => names.iter().filter_map(|name| shape::parse(name)).collect(),
                    None => AgentKind::ALL.to_vec(),
                };
                (key, kinds)
            })
            .collect()
    });
    table
        .iter()
        .find(|(known, _)| *known == key)
        .map(|(_, kinds)| kinds.as_slice())
}

/// Why profile key `key` may not be written on a profile of `kind`, when it may not.
pub fn key_refused_for(key: &str, kind: AgentKind) -> Option<String> {
    let kinds = kinds_taking(key)?;
    if kinds.contains(&kind) {
        return None;
    }
    let names: Vec<String> = kinds
        .iter()
        .map(|kind| format!("`kind: {}`", kind.name()))
        .collect();
    let takers = match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => names.join(""),
    };
    let advice = match (key, kind) {
        ("argv", _) => "; use `binary` to change the program",
        ("binary", AgentKind::Command) => {
            "; a command profile's program is the first item of `argv`"
        }
        _ => "",
    };
    Some(format!(
        "`{key}` does not apply to `kind: {}` (its adapter would ignore it); only {takers} take{} it{advice}",
        kind.name(),
        if kinds.len() == 1 { "s" } else { "" }
    ))
}

/// One `agents:` entry. A key only some kinds' adapters read names them (`x-kinds`): every
/// other kind would silently ignore it (a codex profile's `disallowed_tools` restricts
/// nothing), so it is refused there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentProfile {
    /// The adapter.
    pub kind: AgentKind,
    /// `command`: the program and its arguments (required). Not used by other kinds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kinds" = ["command"]))]
    pub argv: Vec<String>,
    /// `claude`/`codex`/`gemini`: the binary to run instead of `claude`/`codex`/`gemini`
    /// (TNH_CLAUDE_BIN, TNH_CODEX_BIN and TNH_GEMINI_BIN still win).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kinds" = ["claude", "codex", "gemini"]))]
    pub binary: Option<String>,
    /// The model (`--model` / `-m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kinds" = ["claude", "codex", "gemini"]))]
    pub model: Option<String>,
    /// Claude `--permission-mode` (`acceptEdits`, `dontAsk`, `plan`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kinds" = ["claude"]))]
    pub permission_mode: Option<String>,
    /// Gemini `--approval-mode` (`default`, `auto_edit`, `yolo`, `plan`; default `auto_edit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kinds" = ["gemini"]))]
    pub approval_mode: Option<String>,
    /// Claude `--allowedTools`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kinds" = ["claude"]))]
    pub allowed_tools: Vec<String>,
    /// Claude `--disallowedTools`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kinds" = ["claude"]))]
    pub disallowed_tools: Vec<String>,
    /// Codex `--sandbox` (default `workspace-write`); Gemini: `true` runs it with `--sandbox`
    /// (the container tool is Gemini's `GEMINI_SANDBOX`), `false` (the default) without.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kinds" = ["codex", "gemini"]))]
    pub sandbox: Option<String>,
    /// Codex `-c key=value` pairs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("x-kinds" = ["codex"]))]
    pub config: BTreeMap<String, ConfigValue>,
    /// Extra directories the agent may use (`--add-dir`, Gemini `--include-directories`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kinds" = ["claude", "codex", "gemini"]))]
    pub add_dirs: Vec<PathBuf>,
    /// Claude `--append-system-prompt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kinds" = ["claude"]))]
    pub append_system_prompt: Option<String>,
    /// Host variables passed through to the agent besides the allowlist.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pass_env: Vec<String>,
    /// Arguments appended after the adapter's own (escape hatch for new CLI flags).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_args: Vec<String>,
    /// The most output kept per stream (stdout, stderr) and visit, in MiB (default
    /// [`DEFAULT_MAX_OUTPUT_MIB`]): past it the agent is stopped, `killed_policy` with cause
    /// `output_limit: …`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_output_mib: Option<u64>,
}

/// The default per-stream output limit of an agent, in MiB.
pub const DEFAULT_MAX_OUTPUT_MIB: u64 = 256;

/// A scalar value of a Codex `-c key=value` pair.
///
/// Deserialized by hand rather than with `#[serde(untagged)]`, whose "did not match any
/// variant" error would hide what was wrong (STYLE.md); `untagged` here only shapes the
/// serialized form and the schema.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum ConfigValue {
    /// A boolean.
    Bool(bool),
    /// An integer.
    Integer(i64),
    /// A floating-point number.
    Float(f64),
    /// Text, passed as written.
    Text(String),
}

impl<'de> Deserialize<'de> for ConfigValue {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ConfigValueVisitor)
    }
}

struct ConfigValueVisitor;

impl serde::de::Visitor<'_> for ConfigValueVisitor {
    type Value = ConfigValue;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("a boolean, a number or a string")
    }

    fn visit_bool<E>(self, value: bool) -> Result<ConfigValue, E> {
        Ok(ConfigValue::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<ConfigValue, E> {
        Ok(ConfigValue::Integer(value))
    }

    fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<ConfigValue, E> {
        i64::try_from(value)
            .map(ConfigValue::Integer)
            .map_err(|_| E::custom("integer too large"))
    }

    fn visit_f64<E>(self, value: f64) -> Result<ConfigValue, E> {
        Ok(ConfigValue::Float(value))
    }

    fn visit_str<E>(self, value: &str) -> Result<ConfigValue, E> {
        Ok(ConfigValue::Text(value.to_owned()))
    }
}

impl std::fmt::Display for ConfigValue {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigValue::Bool(value) => write!(formatter, "{value}"),
            ConfigValue::Integer(value) => write!(formatter, "{value}"),
            ConfigValue::Float(value) => write!(formatter, "{value}"),
            ConfigValue::Text(value) => formatter.write_str(value),
        }
    }
}

impl AgentProfile {
    /// A profile of `kind` with nothing set.
    pub fn empty(kind: AgentKind) -> AgentProfile {
        AgentProfile {
            kind,
            argv: Vec::new(),
            binary: None,
            model: None,
            permission_mode: None,
            approval_mode: None,
            allowed_tools: Vec::new(),
            disallowed_tools: Vec::new(),
            sandbox: None,
            config: BTreeMap::new(),
            add_dirs: Vec::new(),
            append_system_prompt: None,
            pass_env: Vec::new(),
            extra_args: Vec::new(),
            max_output_mib: None,
        }
    }

    /// The most bytes of output kept per stream and visit: `max_output_mib`, or the default.
    pub fn max_output_bytes(&self) -> u64 {
        self.max_output_mib
            .unwrap_or(DEFAULT_MAX_OUTPUT_MIB)
            .saturating_mul(1024 * 1024)
    }

    /// A `command` profile running `argv`.
    pub fn command<S: Into<String>>(argv: impl IntoIterator<Item = S>) -> AgentProfile {
        AgentProfile {
            argv: argv.into_iter().map(Into::into).collect(),
            ..AgentProfile::empty(AgentKind::Command)
        }
    }

    /// The keys set on this profile (to something other than their default).
    fn set_keys(&self) -> Vec<&'static str> {
        [
            ("argv", !self.argv.is_empty()),
            ("binary", self.binary.is_some()),
            ("model", self.model.is_some()),
            ("permission_mode", self.permission_mode.is_some()),
            ("approval_mode", self.approval_mode.is_some()),
            ("allowed_tools", !self.allowed_tools.is_empty()),
            ("disallowed_tools", !self.disallowed_tools.is_empty()),
            ("sandbox", self.sandbox.is_some()),
            ("config", !self.config.is_empty()),
            ("add_dirs", !self.add_dirs.is_empty()),
            ("append_system_prompt", self.append_system_prompt.is_some()),
        ]
        .into_iter()
        .filter_map(|(key, set)| set.then_some(key))
        .collect()
    }

    /// Checks what serde cannot: `argv` exactly for commands, no key the kind would ignore,
    /// a positive output limit.
    pub fn check(&self, name: &str) -> Result<(), RunnerError> {
        let refuse = |message: String| RunnerError::Profile {
            agent: name.to_owned(),
            message,
        };
        if self.max_output_mib == Some(0) {
            return Err(refuse(
                "`max_output_mib` must be at least 1 (MiB of output kept per stream)".to_owned(),
            ));
        }
        if self.kind == AgentKind::Command && self.argv.is_empty() {
            return Err(refuse(
                "`kind: command` needs a non-empty `argv`".to_owned(),
            ));
        }
        if self.kind == AgentKind::Gemini
            && let Some(sandbox) = self.sandbox.as_deref()
            && !matches!(sandbox, "true" | "false")
        {
            return Err(refuse(format!(
                "a gemini profile's `sandbox` is `true` or `false`, not `{sandbox}` (the container tool is chosen by GEMINI_SANDBOX; pass it with `pass_env`)"
            )));
        }
        match self
            .set_keys()
            .into_iter()
            .find_map(|key| key_refused_for(key, self.kind))
        {
            Some(message) => Err(refuse(message)),
            None => Ok(()),
        }
    }
}

/// The profiles that exist without configuration: `claude-code` and `codex`.
pub fn builtin_profiles() -> BTreeMap<String, AgentProfile> {
    let claude = AgentProfile {
        permission_mode: Some("acceptEdits".to_owned()),
        pass_env: vec![
            "ANTHROPIC_API_KEY".to_owned(),
            "CLAUDE_CODE_OAUTH_TOKEN".to_owned(),
        ],
        ..AgentProfile::empty(AgentKind::Claude)
    };
    let codex = AgentProfile {
        sandbox: Some("workspace-write".to_owned()),
        pass_env: vec![
            "CODEX_API_KEY".to_owned(),
            "OPENAI_API_KEY".to_owned(),
            "CODEX_HOME".to_owned(),
        ],
        ..AgentProfile::empty(AgentKind::Codex)
    };
    BTreeMap::from([
        ("claude-code".to_owned(), claude),
        ("codex".to_owned(), codex),
    ])
}

/// The profile called `name`: configured profiles first, then the built-ins
/// (`claude` is an alias of `claude-code`).
pub fn resolve_profile(
    name: &str,
    configured: &BTreeMap<String, AgentProfile>,
) -> Result<AgentProfile, RunnerError> {
    if let Some(profile) = configured.get(name) {
        profile.check(name)?;
        return Ok(profile.clone());
    }
    let builtins = builtin_profiles();
    let canonical = if name == "claude" && !configured.contains_key("claude") {
        "claude-code"
    } else {
        name
    };
    if let Some(profile) = configured
        .get(canonical)
        .or_else(|| builtins.get(canonical))
    {
        return Ok(profile.clone());
    }
    let mut known: Vec<String> = configured.keys().chain(builtins.keys()).cloned().collect();
    known.push("claude".to_owned());
    known.sort();
    known.dedup();
    Err(RunnerError::UnknownAgent {
        agent: name.to_owned(),
        known,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kinds each key is refused for come from the profile type: every kind named there
    /// is one, and a key only some kinds read names them.
    #[test]
    fn each_keys_kinds_are_read_from_the_profile_type() {
        for (key, names) in shape::key_annotations::<AgentProfile>("x-kinds") {
            let kinds = kinds_taking(key).unwrap();
            assert_eq!(
                kinds.len(),
                names.map_or(AgentKind::ALL.len(), |names| names.len()),
                "{key}"
            );
        }
        assert_eq!(profile_keys().first(), Some(&"kind"));
        assert_eq!(kinds_taking("kind"), Some(&AgentKind::ALL[..]));
        assert_eq!(kinds_taking("argv"), Some(&[AgentKind::Command][..]));
        assert_eq!(
            kinds_taking("sandbox"),
            Some(&[AgentKind::Codex, AgentKind::Gemini][..])
        );
        assert_eq!(kinds_taking("timeout"), None);
    }

    #[test]
    fn the_output_limit_defaults_to_the_documented_256_mib_per_stream() {
        let profile = AgentProfile::command(["true"]);
        assert_eq!(profile.max_output_bytes(), 256 * 1024 * 1024);
        let limited = AgentProfile {
            max_output_mib: Some(3),
            ..profile
        };
        assert_eq!(limited.max_output_bytes(), 3 * 1024 * 1024);
        let documented = include_str!("../../docs/runners.md");
        assert!(documented.contains("profile's `max_output_mib` (default **256 MiB**"));
    }

    #[test]
    fn design_example_profiles_parse() {
        let yaml = r#"
scripted:
  kind: command
  argv: ["python3", "examples/agents/scripted.py"]
claude-code:
  kind: claude
  model: claude-sonnet-4-5
  permission_mode: acceptEdits
  allowed_tools: [Read, Edit, Write, Bash]
  pass_env: [ANTHROPIC_API_KEY]
codex:
  kind: codex
  model: gpt-5
  sandbox: workspace-write
  config: { model_reasoning_effort: "high" }
  pass_env: [CODEX_API_KEY]
"#;
        let profiles: BTreeMap<String, AgentProfile> = serde_saphyr::from_str(yaml).unwrap();
        assert_eq!(
            profiles["codex"].config["model_reasoning_effort"].to_string(),
            "high"
        );
        assert_eq!(profiles["claude-code"].allowed_tools.len(), 4);
        assert_eq!(
            resolve_profile("claude", &profiles)
                .unwrap()
                .model
                .as_deref(),
            Some("claude-sonnet-4-5")
        );
    }

    #[test]
    fn codex_config_values_are_scalars() {
        let yaml =
            "kind: codex\nconfig: { effort: high, retries: 3, fast: true, temperature: 0.5 }\n";
        let profile: AgentProfile = serde_saphyr::from_str(yaml).unwrap();
        let pairs: Vec<String> = profile
            .config
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect();
        assert_eq!(
            pairs,
            ["effort=high", "fast=true", "retries=3", "temperature=0.5"]
        );
        let nested = "kind: codex\nconfig: { effort: [a, b] }\n";
        let error = serde_saphyr::from_str::<AgentProfile>(nested)
            .unwrap_err()
            .to_string();
        assert!(error.contains("a boolean, a number or a string"), "{error}");
    }

    #[test]
    fn unknown_keys_and_names_are_refused() {
        let typo = "kind: claude\npermision_mode: plan\n";
        assert!(serde_saphyr::from_str::<AgentProfile>(typo).is_err());
        let error = resolve_profile("gemini", &BTreeMap::new()).unwrap_err();
        assert_eq!(error.to_string(), "unknown agent `gemini`");
        assert!(error.hint().unwrap().contains("claude-code"));
    }

    #[test]
    fn builtins_exist_without_configuration() {
        let none = BTreeMap::new();
        assert_eq!(
            resolve_profile("claude", &none).unwrap().kind,
            AgentKind::Claude
        );
        assert_eq!(
            resolve_profile("claude-code", &none).unwrap().kind,
            AgentKind::Claude
        );
        assert_eq!(
            resolve_profile("codex", &none).unwrap().kind,
            AgentKind::Codex
        );
        let bad = AgentProfile::empty(AgentKind::Command);
        assert!(bad.check("scripted").is_err());
    }
}
