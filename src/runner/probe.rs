//! What the checks before a run ask the machine: whether a program can be found, what a short
//! probe (`claude --version`, `python3 -c "import pytest"`) answers, and whether an agent CLI's
//! version is one the adapters were tested with.
//!
//! A probe is bounded: stdin is `/dev/null`, and a probe still running at its timeout is
//! killed (its process group), so a CLI that waits for a login never holds the run up.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long one probe may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where `program` is found: a path (with a `/`) as given, a bare name on `PATH`. `None` when
/// there is no executable file there.
pub fn find_program(program: &str) -> Option<PathBuf> {
    if program.is_empty() {
        return None;
    }
    if program.contains('/') {
        let path = PathBuf::from(program);
        return is_executable(&path).then_some(path);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|folder| folder.join(program))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path)
        .is_ok_and(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
}

/// What a probe printed and how it exited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeOutput {
    /// Whether it exited 0.
    pub success: bool,
    /// Standard output and standard error, as text.
    pub output: String,
}

/// Runs `program args…` in `cwd` with stdin closed, for at most `timeout`. `Err` says why no
/// answer came: it could not start, or it was killed at the timeout.
pub fn probe(
    program: &Path,
    args: &[&str],
    cwd: Option<&Path>,
    timeout: Duration,
) -> Result<ProbeOutput, String> {
    use std::os::unix::process::CommandExt as _;
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(cwd) = cwd {
        command.current_dir(cwd);
    }
    let mut child = command
        .spawn()
        .map_err(|error| format!("it could not start: {error}"))?;
    let group = i32::try_from(child.id()).unwrap_or(0);
    let (mut stdout, mut stderr) = (child.stdout.take(), child.stderr.take());
    let (sender, receiver) = mpsc::channel();
    // The reader owns the pipes and the child: it answers once both pipes close and the child
    // is reaped, whichever order they come in.
    std::thread::spawn(move || {
        let mut output = String::new();
        let mut errors = String::new();
        if let Some(pipe) = stdout.as_mut() {
            let _ = pipe.take(64 * 1024).read_to_string(&mut output);
        }
        if let Some(pipe) = stderr.as_mut() {
            let _ = pipe.take(64 * 1024).read_to_string(&mut errors);
        }
        let status = child.wait();
        output.push_str(&errors);
        let _ = sender.send(status.map(|status| ProbeOutput {
            success: status.success(),
            output,
        }));
    });
    match receiver.recv_timeout(timeout) {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(error)) => Err(format!("it could not be waited for: {error}")),
        Err(_) => {
            if group > 0 {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(group),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            Err(format!(
                "it gave no answer within {} s and was stopped",
                timeout.as_secs()
            ))
        }
    }
}

/// How a CLI's version compares with those the adapters were tested with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionCheck {
    /// Within the tested range.
    Tested(String),
    /// Newer than the newest tested: probably fine, said as a warning.
    Newer {
        /// What the CLI reported.
        found: String,
        /// The newest tested.
        newest: String,
    },
    /// Older than the oldest tested: its flags or output may differ from what the adapter
    /// sends and reads.
    Older {
        /// What the CLI reported.
        found: String,
        /// The oldest tested.
        oldest: String,
    },
    /// `--version` gave no version (it failed, timed out or printed none): said as a warning.
    Unknown(String),
}

/// Asks `program --version` (the CLI of agent kind `kind`) and compares its answer with the
/// versions the adapters were tested with (tests/real-agents/versions, see
/// [`super::versions`]).
pub fn check_version(kind: super::profile::AgentKind, program: &Path) -> VersionCheck {
    if super::versions::tested_version(kind).is_none() {
        return VersionCheck::Unknown(format!("no tested versions are listed for `{kind:?}`"));
    }
    let answer = match probe(program, &["--version"], None, PROBE_TIMEOUT) {
        Ok(answer) if answer.success => answer.output,
        Ok(answer) => {
            return VersionCheck::Unknown(format!("`--version` failed: {}", short(&answer.output)));
        }
        Err(reason) => return VersionCheck::Unknown(format!("`--version`: {reason}")),
    };
    let Some(found) = super::versions::Version::find_in(&answer) else {
        return VersionCheck::Unknown(format!(
            "`--version` printed no version: {}",
            short(&answer)
        ));
    };
    match super::versions::check_version(kind, &found) {
        Some((super::versions::VersionCheck::Newer, tested)) => VersionCheck::Newer {
            found: found.to_string(),
            newest: tested.version.to_string(),
        },
        Some((super::versions::VersionCheck::Older, tested)) => VersionCheck::Older {
            found: found.to_string(),
            oldest: tested.oldest.to_string(),
        },
        _ => VersionCheck::Tested(found.to_string()),
    }
}

/// The first line of a probe's answer, bounded and safe to print.
fn short(text: &str) -> String {
    let line = text.trim().lines().next().unwrap_or_default();
    crate::text::one_line(&line.chars().take(200).collect::<String>()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_is_found_on_path_or_at_its_path() {
        assert!(find_program("sh").is_some());
        assert!(find_program("/bin/sh").is_some());
        assert!(find_program("no-such-program-anywhere").is_none());
        assert!(find_program("/nonexistent/agent.sh").is_none());
    }

    #[test]
    fn a_probe_that_hangs_is_stopped_at_its_timeout() {
        let sh = find_program("sh").unwrap();
        let answer = probe(&sh, &["-c", "echo hi; exit 3"], None, PROBE_TIMEOUT).unwrap();
        assert_eq!(
            answer,
            ProbeOutput {
                success: false,
                output: "hi\n".into()
            }
        );
        let error = probe(
            &sh,
            &["-c", "exec sleep 30"],
            None,
            Duration::from_millis(200),
        )
        .unwrap_err();
        assert!(error.contains("no answer within"), "{error}");
    }
}
