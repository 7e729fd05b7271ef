//! Cancellation of a running step by the operator (Ctrl-C, SIGTERM or SIGHUP, wired by the
//! kernel).
//!
//! Like cargo-nextest: the first request ends the step gracefully (SIGTERM, grace, SIGKILL);
//! a second request kills the group at once. A `watch` channel carries the number of
//! requests, so a late subscriber still sees a request made before it started waiting, and no
//! extra dependency is needed for a cancellation token.

use tokio::sync::watch;

/// The kernel's side: request cancellation of every step holding a [`Cancellation`].
#[derive(Debug, Clone)]
pub struct CancelHandle {
    requests: std::sync::Arc<watch::Sender<u32>>,
    cause: Cause,
}

/// What asked for the first cancellation (`Ctrl-C`, `SIGTERM`, …), shared by both sides.
type Cause = std::sync::Arc<std::sync::Mutex<Option<String>>>;

/// The supervisor's side: tells how many times cancellation was requested.
#[derive(Debug, Clone)]
pub struct Cancellation {
    requests: Option<watch::Receiver<u32>>,
    cause: Cause,
}

/// How hard a step should be stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CancelLevel {
    /// SIGTERM, grace period, SIGKILL.
    Graceful,
    /// SIGKILL now.
    Immediate,
}

impl CancelHandle {
    /// A new handle and the cancellation its steps listen to.
    pub fn new() -> (CancelHandle, Cancellation) {
        let (sender, receiver) = watch::channel(0);
        let cause = Cause::default();
        let handle = CancelHandle {
            requests: std::sync::Arc::new(sender),
            cause: cause.clone(),
        };
        (
            handle,
            Cancellation {
                requests: Some(receiver),
                cause,
            },
        )
    }

    /// Requests cancellation (as Ctrl-C does); the second request asks for an immediate kill.
    pub fn cancel(&self) {
        self.cancel_because("Ctrl-C");
    }

    /// Requests cancellation, saying what asked for it (`SIGTERM`); the first cause is kept.
    pub fn cancel_because(&self, cause: &str) {
        if let Ok(mut kept) = self.cause.lock() {
            kept.get_or_insert_with(|| cause.to_owned());
        }
        self.requests
            .send_modify(|count| *count = count.saturating_add(1));
    }
}

impl Cancellation {
    /// A cancellation that never fires (tests, tools run outside a kernel).
    pub fn never() -> Cancellation {
        Cancellation {
            requests: None,
            cause: Cause::default(),
        }
    }

    /// What asked for the first cancellation (`Ctrl-C`, `SIGTERM`, `SIGHUP`), once one did.
    pub fn cause(&self) -> Option<String> {
        self.cause.lock().ok().and_then(|cause| cause.clone())
    }

    /// Waits until a new request arrives; `None` once no request can ever arrive.
    pub(crate) async fn next_request(&mut self) -> Option<CancelLevel> {
        let receiver = self.requests.as_mut()?;
        if receiver.changed().await.is_err() {
            self.requests = None;
            return None;
        }
        let count = *receiver.borrow_and_update();
        Some(if count >= 2 {
            CancelLevel::Immediate
        } else {
            CancelLevel::Graceful
        })
    }

    /// Whether a request is already pending (made before the step started).
    pub(crate) fn already_requested(&self) -> Option<CancelLevel> {
        let count = *self.requests.as_ref()?.borrow();
        match count {
            0 => None,
            1 => Some(CancelLevel::Graceful),
            _ => Some(CancelLevel::Immediate),
        }
    }

    /// Whether the operator asked to cancel (at least once) by now.
    pub fn is_cancelled(&self) -> bool {
        self.already_requested().is_some()
    }

    /// Whether this cancellation can still fire.
    pub(crate) fn is_live(&self) -> bool {
        self.requests.is_some()
    }
}
