//! Ctrl-C, SIGTERM and SIGHUP, listened to for the whole process from before a run does any
//! work: creating the worktree, recovering an interrupted visit, driving steps, asking at a
//! gate (`--wait`). Left to their default action they would kill the conductor alone, with a
//! `git` or an agent still running and nothing recorded; listened to, each raises the
//! cancellation level (the first ends the step gracefully, the second kills it at once), and
//! whoever holds the [`Cancellation`] stops at its next safe point, resumable.
//!
//! The handlers are installed once and stay: a signal is never lost between two phases, nor
//! between the end of a drive and the `--wait` prompt.
//!
//! A signal that was ignored when the process started stays ignored: `nohup tnh-conductor
//! run …` ignores SIGHUP so that closing the terminal does not stop the run, and a
//! non-interactive shell starts a job `&` with SIGINT (and SIGQUIT) ignored. Those launchers
//! asked for exactly that; the conductor keeps it (and its agents inherit it).

use std::sync::Mutex;

use tokio::signal::unix::{SignalKind, signal};

use crate::runner::{CancelHandle, Cancellation};

/// The process's cancellation, once its signals are listened to.
static LISTENING: Mutex<Option<Cancellation>> = Mutex::new(None);

/// Listens to Ctrl-C, SIGTERM and SIGHUP (once per process; later calls return the same
/// cancellation). From the moment this returns, none of them has its default action; one that
/// was ignored when this was first called (`nohup`, a background job) stays ignored.
pub fn listen() -> std::io::Result<Cancellation> {
    let mut listening = LISTENING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(cancellation) = listening.as_ref() {
        return Ok(cancellation.clone());
    }
    // A runtime of its own, on its own thread, rather than the shared one: the signals must
    // be counted even while the shared runtime's workers are busy (a supervisor writing a
    // large output to a slow disk) or before anything built it.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let (handle, cancellation) = CancelHandle::new();
    // Read before any handler is installed: installing one replaces the disposition.
    let ignored = ignored_signals();
    // Registered here, before returning: a signal from now on is counted.
    let streams = {
        let _entered = runtime.enter();
        [
            (SignalKind::interrupt(), "Ctrl-C"),
            (SignalKind::terminate(), "SIGTERM"),
            (SignalKind::hangup(), "SIGHUP"),
        ]
        .into_iter()
        .filter(|(kind, _)| !is_in(ignored, kind.as_raw_value()))
        .map(|(kind, name)| signal(kind).map(|stream| (stream, name)))
        .collect::<std::io::Result<Vec<_>>>()?
    };
    std::thread::Builder::new()
        .name("tnh-signals".into())
        .spawn(move || {
            runtime.block_on(async move {
                for (mut stream, name) in streams {
                    let handle = handle.clone();
                    tokio::spawn(async move {
                        while stream.recv().await.is_some() {
                            handle.cancel_because(name);
                        }
                    });
                }
                // The handle lives as long as the process: the cancellation never closes.
                std::future::pending::<()>().await;
            });
        })?;
    *listening = Some(cancellation.clone());
    Ok(cancellation)
}

/// The process's cancellation when [`listen`] was called, without listening otherwise: a
/// wait deep in a command (the repository's worktree lock) answers the operator's Ctrl-C when
/// the command listens, and the signal's default action still ends the others.
pub fn listening() -> Option<Cancellation> {
    LISTENING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// The signals this process ignores, as the `SigIgn` mask of `/proc/self/status` (bit `n - 1`
/// for signal `n`); none when it cannot be read (every signal is then listened to).
fn ignored_signals() -> u64 {
    crate::proc::own_status()
        .and_then(|status| parse_ignored(&status))
        .unwrap_or(0)
}

/// The `SigIgn` mask of a `/proc/PID/status` text.
fn parse_ignored(status: &str) -> Option<u64> {
    let mask = status
        .lines()
        .find_map(|line| line.strip_prefix("SigIgn:"))?;
    u64::from_str_radix(mask.trim(), 16).ok()
}

/// Whether signal `number` is in `mask`.
fn is_in(mask: u64, number: i32) -> bool {
    (1..=64).contains(&number) && mask & (1 << (number - 1)) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ignored_signals_are_read_from_the_status_mask() {
        // SIGHUP (1) and SIGINT (2) ignored, as under `nohup` in a background job.
        let status = "Name:\ttnh-conductor\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000000003\nSigCgt:\t0000000000000000\n";
        let mask = parse_ignored(status).unwrap();
        assert!(is_in(mask, 1) && is_in(mask, 2));
        assert!(!is_in(mask, 15));
        assert!(!is_in(mask, 0) && !is_in(mask, 65));
        assert_eq!(parse_ignored("Name:\tx\n"), None);
        assert_eq!(parse_ignored("SigIgn:\tzz\n"), None);
    }
}
