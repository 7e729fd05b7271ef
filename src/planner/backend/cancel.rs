//! Waiting on a planner without outliving the operator's Ctrl-C: an HTTP call and the pause
//! before a retry both end as soon as the run is cancelled.

use std::time::Duration;

use crate::runner::Cancellation;

/// Runs `work` on a thread of its own and waits for it, unless the run is cancelled first
/// (then `None`, and the thread's result is dropped when it ends).
pub(super) fn unless_cancelled<T: Send + 'static>(
    cancellation: &Cancellation,
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    if cancellation.is_cancelled() {
        return None;
    }
    let Ok(runtime) = crate::runner::runtime::shared() else {
        return Some(work());
    };
    let (sender, receiver) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("tnh-planner-call".into())
        .spawn(move || {
            let _ = sender.send(work());
        });
    if spawned.is_err() {
        return None;
    }
    let cancelled = cancelled(cancellation.clone());
    runtime.block_on(async move {
        tokio::select! {
            result = receiver => result.ok(),
            () = cancelled => None,
        }
    })
}

/// Sleeps `wait` unless the run is cancelled first; `false` when it was.
pub(super) fn sleep_unless_cancelled(cancellation: &Cancellation, wait: Duration) -> bool {
    if cancellation.is_cancelled() {
        return false;
    }
    let Ok(runtime) = crate::runner::runtime::shared() else {
        return true;
    };
    let cancelled = cancelled(cancellation.clone());
    runtime.block_on(async move {
        tokio::select! {
            () = tokio::time::sleep(wait) => true,
            () = cancelled => false,
        }
    })
}

/// Resolves once cancellation has been requested; never for a cancellation that cannot fire.
async fn cancelled(mut cancellation: Cancellation) {
    if cancellation.is_cancelled() {
        return;
    }
    if cancellation.next_request().await.is_some() {
        return;
    }
    std::future::pending::<()>().await;
}
