//! The planner and validator rows of `doctor`, and asking a program its version.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{Area, Check, CheckStatus, cli_check, cli_program, env_keys};
use crate::config::Config;
use crate::planner::backend::{Backend, ExternalKind};
use crate::runner::versions::Version;
use crate::runner::{AgentKind, HostEnv};

/// Each configured planner (the built-in `rules` needs nothing).
pub(super) fn planner_checks(config: &Config, root: Option<&Path>, host: &HostEnv) -> Vec<Check> {
    config
        .planners
        .keys()
        .filter_map(|name| {
            // The configuration loaded, so every definition reads.
            let Ok(Backend::External(external)) = Backend::from_config(name, config) else {
                return None;
            };
            let program = match &external.kind {
                ExternalKind::Command { argv } => argv.first().cloned().unwrap_or_default(),
                ExternalKind::Claude { binary, .. } => {
                    cli_program(AgentKind::Claude, binary.as_ref(), host)
                }
                ExternalKind::Codex { binary, .. } => {
                    cli_program(AgentKind::Codex, binary.as_ref(), host)
                }
                ExternalKind::Http {
                    url, api_key_env, ..
                } => {
                    let mut check = Check::new(
                        Area::Planner,
                        name,
                        CheckStatus::Ok,
                        format!(
                            "HTTP endpoint {}",
                            crate::planner::backend::redact(url, url)
                        ),
                    );
                    check.env = env_keys(api_key_env.as_slice(), host);
                    if check.env.iter().any(|key| !key.set) {
                        check.status = CheckStatus::Warning;
                        check.detail.push_str("; its api_key_env is not set");
                    }
                    return Some(check);
                }
            };
            let kind = match &external.kind {
                ExternalKind::Claude { .. } => Some(AgentKind::Claude),
                ExternalKind::Codex { .. } => Some(AgentKind::Codex),
                _ => None,
            };
            let program = crate::runner::adapters::resolve_program(&program, root);
            let mut check = cli_check(Area::Planner, name, &program, kind, host);
            check.env = env_keys(&external.pass_env, host);
            Some(check)
        })
        .collect()
}

/// The configured validators, and the standard ones detected in the repository.
pub(super) fn validator_checks(config: &Config, root: Option<&Path>, host: &HostEnv) -> Vec<Check> {
    let Some(root) = root else {
        return Vec::new();
    };
    let mut names: Vec<String> = config.validators.keys().cloned().collect();
    for standard in ["tests", "lint", "typecheck"] {
        if !names.iter().any(|name| name == standard) {
            names.push(standard.to_owned());
        }
    }
    names
        .iter()
        .filter_map(|name| {
            let configured = config.validators.contains_key(name);
            let command = match crate::opcode::validators::registered(name, config, root) {
                Ok(command) => command,
                // A standard name neither configured nor detected is simply not there.
                Err(_) if !configured => return None,
                Err(reason) => {
                    return Some(Check::new(
                        Area::Validator,
                        name,
                        CheckStatus::Missing,
                        reason,
                    ));
                }
            };
            let program = command.argv.first().cloned().unwrap_or_default();
            let program = crate::runner::adapters::resolve_program(&program, Some(root));
            let mut check = cli_check(Area::Validator, name, &program, None, host);
            let how = if command.detected {
                "detected"
            } else {
                "configured"
            };
            check.detail = format!("{how}: `{}`; {}", command.argv.join(" "), check.detail);
            Some(check)
        })
        .collect()
}

/// The version `program --version` prints (stdout, else stderr), within `timeout`; the
/// program is killed if it takes longer.
pub(super) fn program_version(
    program: &Path,
    environment: &[(String, String)],
    timeout: Duration,
) -> Option<Version> {
    let child = Command::new(program)
        .arg("--version")
        .env_clear()
        .envs(environment.iter().map(|(name, value)| (name, value)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let pid = child.id();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(child.wait_with_output());
    });
    match receiver.recv_timeout(timeout) {
        Ok(Ok(output)) => Version::find_in(&String::from_utf8_lossy(&output.stdout))
            .or_else(|| Version::find_in(&String::from_utf8_lossy(&output.stderr))),
        Ok(Err(_)) => None,
        Err(_) => {
            // The waiting thread reaps it once it is dead.
            if let Ok(pid) = i32::try_from(pid) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            None
        }
    }
}
