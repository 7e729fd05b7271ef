//! The `http` backend: an OpenAI-compatible `/v1/chat/completions` endpoint asked with a
//! JSON-schema response format. Redirects are not followed, the answer is read bounded, an
//! HTTP 429 sets the pause before the next attempt, and no message keeps the URL's credentials.

use std::time::Duration;

use super::cancel::unless_cancelled;
use super::decision::{NotUtf8, decode, parse_decision};
use super::request::model_prompt;
use super::{Asked, AttemptError, External, Request};
use crate::planner::Decision;
use crate::text::redact;

/// The most of an HTTP response body read.
const BODY_LIMIT: u64 = 8 * 1024 * 1024;

/// The longest wait an HTTP 429 `Retry-After` may impose before the next attempt.
const RETRY_AFTER_MAX: Duration = Duration::from_secs(60);

/// The wait before retrying an HTTP 429 that names no `Retry-After`.
const RETRY_AFTER_DEFAULT: Duration = Duration::from_secs(1);

/// Why an HTTP planner's answer holds no decision. Every text in it is redacted (see
/// [`redact`]).
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The request could not be sent or got no answer.
    #[error("POST {url}: {reason}")]
    Post {
        /// The endpoint, redacted.
        url: String,
        /// Why, redacted.
        reason: String,
    },
    /// The server answered a redirect, which is not followed.
    #[error(
        "the server answered HTTP {status}, a redirect{}, which a planner does not follow; set the planner's `url` to the endpoint itself{}",
        location.as_ref().map_or_else(|| " without a Location".to_owned(), |location| format!(" to `{location}`")),
        unread_suffix(unread.as_ref())
    )]
    Redirect {
        /// The status.
        status: ureq::http::StatusCode,
        /// Its `Location`, redacted, if any.
        location: Option<String>,
        /// What is wrong with the body as read, if anything.
        unread: Option<Unread>,
    },
    /// The server answered an error status.
    #[error(
        "the server answered HTTP {status}{}: {head}{}",
        wait.map(|wait| format!(" (it asks to wait {} s before retrying)", wait.as_secs_f64())).unwrap_or_default(),
        unread_suffix(unread.as_ref())
    )]
    Status {
        /// The status.
        status: ureq::http::StatusCode,
        /// The start of the body.
        head: String,
        /// The pause before the next attempt an HTTP 429 imposes.
        wait: Option<Duration>,
        /// What is wrong with the body as read, if anything.
        unread: Option<Unread>,
    },
    /// The answer is otherwise good, but its body was not read whole or is not UTF-8.
    #[error(transparent)]
    Unread(Unread),
    /// The body is not JSON.
    #[error("the response is not JSON: {0}")]
    NotJson(serde_json::Error),
    /// The model refused to answer.
    #[error("the model refused: {0}")]
    Refused(String),
    /// The body is JSON without the answer where chat completions put it.
    #[error("the response has no choices[0].message.content")]
    NoContent,
}

/// `; unread`, or nothing.
fn unread_suffix(unread: Option<&Unread>) -> String {
    unread
        .map(|unread| format!("; {unread}"))
        .unwrap_or_default()
}

/// Why an answer's body is not the whole answer as sent.
#[derive(Debug, thiserror::Error)]
pub enum Unread {
    /// It was cut.
    #[error(transparent)]
    Cut(Cut),
    /// It is not UTF-8.
    #[error(transparent)]
    NotUtf8(NotUtf8),
    /// It was cut, and what was read is not UTF-8.
    #[error("{0}; {1}")]
    CutAndNotUtf8(Cut, NotUtf8),
}

/// Why the read of a body stopped short.
#[derive(Debug, thiserror::Error)]
pub enum Cut {
    /// The body is larger than [`BODY_LIMIT`].
    #[error(
        "the answer is larger than {BODY_LIMIT} bytes: its first {BODY_LIMIT} bytes were read and the rest dropped, so it is refused"
    )]
    TooLarge,
    /// The read failed (a timeout, a reset).
    #[error(
        "reading the answer failed after {read} bytes ({reason}): the answer is cut there, so it is refused"
    )]
    Failed {
        /// The bytes read before.
        read: usize,
        /// Why, redacted.
        reason: String,
    },
}

/// One attempt of an `http` planner.
pub(super) fn ask(
    external: &External,
    request: &Request<'_>,
    url: &str,
    model: &str,
    api_key_env: Option<&str>,
) -> Asked {
    let body = request_body(request, model);
    let host = crate::runner::HostEnv::from_process();
    let key = api_key_env
        .and_then(|name| host.get(name))
        .map(str::to_owned);
    let timeout = external.timeout;
    let target = url.to_owned();
    // The call runs on its own thread so that Ctrl-C can stop the wait: an abandoned call
    // ends by itself within the planner's timeout, and its answer is dropped.
    let exchange = move || post(&target, timeout, key.as_deref(), body.to_string());
    let (raw, answer, retry_after) = match unless_cancelled(request.cancellation, exchange) {
        None => (String::new(), Err(AttemptError::Interrupted), None),
        Some(Err(reason)) => {
            let error = HttpError::Post {
                url: redact(url, url),
                reason: redact(&reason.to_string(), url),
            };
            (String::new(), Err(error.into()), None)
        }
        Some(Ok(exchange)) => judge(exchange, url),
    };
    Asked {
        raw,
        answer,
        retry_after,
        stderr: None,
    }
}

/// The chat completions request: the prompt and the envelope, the answer held to the schema.
fn request_body(request: &Request<'_>, model: &str) -> serde_json::Value {
    serde_json::json!({
        "model": model,
        "temperature": 0,
        "messages": [
            { "role": "system", "content": "You are the planner of tnh-conductor. You judge the evidence of an AI coding run and answer with one JSON planner decision." },
            { "role": "user", "content": model_prompt(request) },
        ],
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "planner_decision",
                "strict": true,
                "schema": crate::planner::answer_schema::answer_schema(),
            },
        },
    })
}

/// The raw answer (redacted), the decision in what the server answered, and the pause an
/// HTTP 429 asks for.
fn judge(
    exchange: Exchange,
    url: &str,
) -> (String, Result<Decision, AttemptError>, Option<Duration>) {
    let Exchange {
        status,
        text,
        unread,
        retry_after,
        location,
    } = exchange;
    let text = redact(&text, url);
    // Redirects are not followed: a 302 would become a GET without the envelope, and what
    // another URL answers would be taken as the judgement of this evidence.
    if status.is_redirection() {
        let location = location.map(|location| redact(&redact(&location, &location), url));
        let error = HttpError::Redirect {
            status,
            location,
            unread,
        };
        return (text, Err(error.into()), None);
    }
    if !status.is_success() {
        let head: String = text.chars().take(200).collect();
        let wait = (status.as_u16() == 429).then(|| {
            retry_after
                .unwrap_or(RETRY_AFTER_DEFAULT)
                .min(RETRY_AFTER_MAX)
        });
        let error = HttpError::Status {
            status,
            head,
            wait,
            unread,
        };
        return (text, Err(error.into()), wait);
    }
    // What is wrong with the body as read (cut, not UTF-8) is a failure even when the answer
    // is otherwise good.
    if let Some(problem) = unread {
        return (text, Err(HttpError::Unread(problem).into()), None);
    }
    let answer = content(&text).and_then(|content| Ok(parse_decision(&content)?));
    (text, answer, None)
}

/// The model's answer in a chat completions response.
fn content(text: &str) -> Result<String, AttemptError> {
    let response = serde_json::from_str::<serde_json::Value>(text).map_err(HttpError::NotJson)?;
    let message = &response["choices"][0]["message"];
    if let Some(refusal) = message["refusal"].as_str() {
        return Err(HttpError::Refused(refusal.to_owned()).into());
    }
    Ok(message["content"]
        .as_str()
        .map(str::to_owned)
        .ok_or(HttpError::NoContent)?)
}

/// What an HTTP server answered.
struct Exchange {
    status: ureq::http::StatusCode,
    /// The body as read (at most [`BODY_LIMIT`] bytes), decoded lossily.
    text: String,
    /// Why `text` is not the whole answer as sent, when it is not: cut at the limit, cut by a
    /// failed read (a timeout, a reset), not UTF-8; what it says is redacted.
    unread: Option<Unread>,
    retry_after: Option<Duration>,
    /// The `Location` of a redirect.
    location: Option<String>,
}

/// One POST with a global timeout, reading at most [`BODY_LIMIT`] of the answer; a redirect
/// is returned as it is, never followed.
fn post(
    url: &str,
    timeout: Duration,
    key: Option<&str>,
    body: String,
) -> Result<Exchange, ureq::Error> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let mut call = agent.post(url).header("Content-Type", "application/json");
    if let Some(key) = key {
        call = call.header("Authorization", &format!("Bearer {key}"));
    }
    let mut response = call.send(body)?;
    let status = response.status();
    // `Retry-After: SECONDS` (an HTTP date is not honoured: the default pause applies).
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let location = response.headers().get("location").map(|value| {
        String::from_utf8_lossy(value.as_bytes())
            .chars()
            .take(500)
            .collect()
    });
    let (bytes, cut) = read_body(response.body_mut().as_reader(), url);
    let (text, not_utf8) = decode_body(bytes, cut.is_some());
    let unread = match (cut, not_utf8) {
        (Some(cut), Some(not_utf8)) => Some(Unread::CutAndNotUtf8(cut, not_utf8)),
        (Some(cut), None) => Some(Unread::Cut(cut)),
        (None, Some(not_utf8)) => Some(Unread::NotUtf8(not_utf8)),
        (None, None) => None,
    };
    Ok(Exchange {
        status,
        text,
        unread,
        retry_after,
        location,
    })
}

/// At most [`BODY_LIMIT`] bytes of an answer's body, what was read kept whatever happens,
/// with why the read stopped short when it did (the limit, a timeout, a reset).
fn read_body(mut reader: impl std::io::Read, url: &str) -> (Vec<u8>, Option<Cut>) {
    let mut bytes = Vec::new();
    let mut chunk = vec![0_u8; 64 * 1024];
    loop {
        match reader.read(&mut chunk) {
            Ok(0) => return (bytes, None),
            Ok(count) => {
                bytes.extend_from_slice(&chunk[..count]);
                if bytes.len() as u64 > BODY_LIMIT {
                    bytes.truncate(BODY_LIMIT as usize);
                    return (bytes, Some(Cut::TooLarge));
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => {
                let read = bytes.len();
                let reason = redact(&error.to_string(), url);
                return (bytes, Some(Cut::Failed { read, reason }));
            }
        }
    }
}

/// The text of a body, kept lossily when not UTF-8 with the reason saying so (as [`decode`]);
/// a body `cut` inside a character is not called "not UTF-8" for that last, partial one.
fn decode_body(bytes: Vec<u8>, cut: bool) -> (String, Option<NotUtf8>) {
    match std::str::from_utf8(&bytes) {
        Err(error) if cut && error.error_len().is_none() => {
            (String::from_utf8_lossy(&bytes).into_owned(), None)
        }
        _ => decode(bytes),
    }
}
