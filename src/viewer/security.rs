//! Who may ask what: the access token (printed with the URL, then kept in a cookie), the
//! same-origin check on every request that changes something, the `Host` check that keeps a
//! web page from reaching the server through a rebound name, and the headers every answer
//! carries (a Content-Security-Policy without inline scripts among them).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ViewerError;
use super::server::Shared;

/// The cookie that carries the token after the first visit.
const COOKIE: &str = "tnh_viewer_token";

/// The policy every page is served with: scripts and styles only from the server's own files
/// (never inline), nothing from elsewhere, no framing, forms posted only back here.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
     base-uri 'none'";

/// A new random token: 32 bytes from the operating system, in hex.
pub(super) fn new_token() -> Result<String, ViewerError> {
    let mut bytes = [0_u8; 32];
    getrandom::fill(&mut bytes).map_err(|error| ViewerError::Token(error.to_string()))?;
    Ok(bytes.iter().map(|byte| format!("{byte:02x}")).collect())
}

/// Compares without stopping at the first difference, so timing tells nothing of the token.
fn same_secret(given: &str, token: &str) -> bool {
    given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0_u8, |difference, (left, right)| {
                difference | (left ^ right)
            })
            == 0
}

/// The token of the request's cookie.
fn cookie_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

/// The token given in the query (`?token=…`), as the printed URL carries it.
fn query_token(request: &Request) -> Option<String> {
    request.uri().query().and_then(|query| {
        query
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .find(|(name, _)| *name == "token")
            .map(|(_, value)| value.to_owned())
    })
}

/// Whether the `Host` header names this server as the operator reaches it: a loopback name
/// and the server's port. A remote-serving server accepts any.
fn host_allowed(shared: &Shared, headers: &HeaderMap) -> bool {
    if shared.allow_remote {
        return true;
    }
    let Some(host) = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
    else {
        return false;
    };
    let port = shared.address.port();
    ["127.0.0.1", "localhost", "[::1]"]
        .iter()
        .any(|name| host == format!("{name}:{port}"))
}

/// Whether a request that changes something comes from a page of this server: its `Origin`
/// (or, without one, its `Referer`) is this server's, and a browser's `Sec-Fetch-Site`, when
/// sent, says the same.
fn same_origin(headers: &HeaderMap) -> bool {
    let text = |name: header::HeaderName| headers.get(name).and_then(|value| value.to_str().ok());
    let Some(host) = text(header::HOST) else {
        return false;
    };
    let own = format!("http://{host}");
    let from_here = match (text(header::ORIGIN), text(header::REFERER)) {
        (Some(origin), _) => origin == own,
        (None, Some(referer)) => referer == own || referer.starts_with(&format!("{own}/")),
        (None, None) => false,
    };
    let site = headers
        .get("sec-fetch-site")
        .and_then(|value| value.to_str().ok());
    from_here && site.is_none_or(|site| site == "same-origin")
}

fn refused(status: StatusCode, why: &str) -> Response {
    let body = super::html::page(
        "Refused",
        &format!(
            "<h1>Refused</h1><p class=\"refused\">{}</p>",
            super::html::escape(why)
        ),
        super::html::Delivery::Served { live: false },
    );
    (status, axum::response::Html(body)).into_response()
}

/// Checks every request, and adds the security headers to every answer.
pub(super) async fn guard(
    State(shared): State<Arc<Shared>>,
    request: Request,
    next: Next,
) -> Response {
    let mut response = check(&shared, request, next).await;
    let headers = response.headers_mut();
    let fixed = [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        // Nothing leaves for other sites; a page's own forms keep their `Origin` (under
        // `no-referrer` a browser sends `Origin: null`, and every decision would be refused).
        (header::REFERRER_POLICY, "same-origin"),
        (header::CACHE_CONTROL, "no-store"),
    ];
    for (name, value) in fixed {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

async fn check(shared: &Shared, request: Request, next: Next) -> Response {
    if !host_allowed(shared, request.headers()) {
        return refused(
            StatusCode::FORBIDDEN,
            "this server answers only at the address it printed",
        );
    }
    // The printed URL: the token moves into a cookie, and out of the address bar.
    if let Some(given) = query_token(&request) {
        if request.method() == Method::GET && same_secret(&given, &shared.token) {
            let path = request.uri().path().to_owned();
            let cookie = format!(
                "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict",
                shared.token
            );
            return (
                StatusCode::SEE_OTHER,
                [(header::LOCATION, path), (header::SET_COOKIE, cookie)],
            )
                .into_response();
        }
        return refused(StatusCode::FORBIDDEN, "this token is not the server's");
    }
    let has_token =
        cookie_token(request.headers()).is_some_and(|given| same_secret(given, &shared.token));
    if !has_token {
        return refused(
            StatusCode::FORBIDDEN,
            "open the URL `tnh-conductor serve` printed (it carries the access token)",
        );
    }
    let safe = matches!(*request.method(), Method::GET | Method::HEAD);
    if !safe && !same_origin(request.headers()) {
        return refused(
            StatusCode::FORBIDDEN,
            "a change must come from a page of this server (its Origin did not match)",
        );
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_and_long() {
        let first = new_token().unwrap();
        assert_eq!(first.len(), 64);
        assert_ne!(first, new_token().unwrap());
    }

    #[test]
    fn only_the_same_secret_matches() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abd", "abc"));
        assert!(!same_secret("ab", "abc"));
    }

    #[test]
    fn a_cross_site_origin_is_not_this_server() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8080"),
        );
        assert!(same_origin(&headers));
        headers.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(!same_origin(&headers));
        headers.remove("sec-fetch-site");
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(!same_origin(&headers));
        headers.remove(header::ORIGIN);
        assert!(!same_origin(&headers));
    }
}
