//! The event stream of a run page: Server-Sent Events fed by following `events.ndjson` from a
//! byte offset (the page's, or the last event the browser got), reading only what was
//! appended since. A line not yet ended (a write in progress) waits for its newline.

use std::convert::Infallible;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};

use super::server::Shared;
use crate::artifacts::{Event, EventPayload, EventType};
use crate::outcome::Outcome;

/// The script of live pages, served as `/assets/live.js`.
pub(super) const SCRIPT: &str = include_str!("live.js");

/// How often the log is looked at for new lines: well within the second a page may lag.
const POLL: Duration = Duration::from_millis(200);

/// The most bytes read at once.
const CHUNK: u64 = 1024 * 1024;

/// Where to start: `?from=BYTES`.
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct From {
    #[serde(default)]
    from: u64,
}

/// What a page is told of one event.
#[derive(Debug, serde::Serialize)]
struct EventView<'a> {
    seq: u64,
    event_type: EventType,
    step_id: Option<&'a str>,
    visit: Option<u32>,
    opcode: Option<&'a str>,
    outcome: Option<&'a str>,
    /// The run ended: the page stops following.
    ended: bool,
}

fn view(event: &Event) -> EventView<'_> {
    let outcome = match &event.payload {
        EventPayload::StepCompleted(completed) => completed.outcome.map(Outcome::as_str),
        EventPayload::StepFailed(_) => Some("failed"),
        EventPayload::StepInterrupted(_) => Some("interrupted"),
        _ => None,
    };
    let opcode = match &event.payload {
        EventPayload::StepStarted(started) => Some(started.opcode.as_str()),
        _ => None,
    };
    let event_type = event.event_type();
    EventView {
        seq: event.seq,
        event_type,
        step_id: event.step_id.as_deref(),
        visit: event.visit,
        opcode,
        outcome,
        ended: matches!(
            event_type,
            EventType::RunCompleted | EventType::RunFailed | EventType::RunAbandoned
        ),
    }
}

/// The complete lines after `offset`, each with the offset just past it.
fn read_after(path: &std::path::Path, offset: u64) -> Vec<(Event, u64)> {
    let Ok(mut file) = crate::artifacts::safe_files::open_regular(path) else {
        return Vec::new();
    };
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(offset)).is_err()
        || file.take(CHUNK).read_to_end(&mut bytes).is_err()
    {
        return Vec::new();
    }
    let mut events = Vec::new();
    let mut start = 0;
    while let Some(length) = bytes[start..].iter().position(|byte| *byte == b'\n') {
        let line = &bytes[start..start + length];
        start += length + 1;
        if let Ok(event) = serde_json::from_slice::<Event>(line) {
            events.push((event, offset + start as u64));
        }
    }
    events
}

/// What the stream has read so far.
struct Tail {
    path: PathBuf,
    offset: u64,
    pending: std::collections::VecDeque<(Event, u64)>,
}

/// `GET /r/{repo}/{run}/events`: the run's events from the offset on, as they are written.
pub(super) async fn events(
    State(shared): State<Arc<Shared>>,
    Path((repo, run_id)): Path<(usize, String)>,
    Query(from): Query<From>,
    headers: HeaderMap,
) -> Response {
    let run_dir = match shared.run(repo, &run_id) {
        Ok((_, run_dir)) => run_dir,
        Err(response) => return *response,
    };
    // A browser that reconnects says the last event it got.
    let offset = headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse().ok())
        .unwrap_or(from.from);
    let tail = Tail {
        path: run_dir.events(),
        offset,
        pending: std::collections::VecDeque::new(),
    };
    let stream = futures_util::stream::unfold(tail, |mut tail| async move {
        loop {
            if let Some((event, next)) = tail.pending.pop_front() {
                tail.offset = next;
                let data = serde_json::to_string(&view(&event)).unwrap_or_default();
                let message = SseEvent::default()
                    .event("run")
                    .id(next.to_string())
                    .data(data);
                return Some((Ok::<_, Infallible>(message), tail));
            }
            let (path, offset) = (tail.path.clone(), tail.offset);
            let read = tokio::task::spawn_blocking(move || read_after(&path, offset))
                .await
                .unwrap_or_default();
            if read.is_empty() {
                tokio::time::sleep(POLL).await;
            }
            tail.pending.extend(read);
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_without_its_newline_waits() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("events.ndjson");
        let line = r#"{"schema_version":1,"seq":1,"timestamp":"t","run_id":"r","event_type":"run_started"}"#;
        std::fs::write(&path, format!("{line}\n{}", &line[..20])).unwrap();
        let read = read_after(&path, 0);
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].1, line.len() as u64 + 1);
        assert!(read_after(&path, read[0].1).is_empty());
    }
}
