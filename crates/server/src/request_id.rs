//! [`RequestId`]: the id every request carries, from the client's `X-Request-Id` header when
//! it is usable, else drawn at random.
//!
//! The [`assign`] middleware runs first: it picks the id, stores it in the request's
//! extensions and in a task-local (so error bodies rendered anywhere in the handler can name
//! it), and echoes it in the response's `X-Request-Id` header, on every route, errors and
//! 404s included. The access log line ([`crate::request_log`]) and the error bodies
//! ([`crate::error`]) carry it as `request_id`. The outermost [`assign`] also notes when the
//! request arrived ([`arrived`]), where its end-to-end latency starts.
//!
//! A client id is kept when it is 1 to [`MAX_LEN`] bytes of visible ASCII (`!` to `~`, no
//! spaces or control characters); anything else is replaced by a generated id (32 lowercase
//! hex digits, 128 random bits), so logs never carry unbounded or unprintable client text.
//! The request goes on with the chosen id in its `X-Request-Id` header, so a second [`assign`]
//! further in (the fleet gateway wraps the server's routes in one of its own) keeps it.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

/// The header that carries the id, both ways.
pub const HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// Longest client id kept, in bytes.
pub const MAX_LEN: usize = 128;

tokio::task_local! {
    static CURRENT: RequestId;
    /// When the outermost [`assign`] saw the request: where its end-to-end latency starts.
    static ARRIVED: Instant;
}

/// When the request this task serves arrived (at the outermost [`assign`]), if it runs under
/// one.
pub fn arrived() -> Option<Instant> {
    ARRIVED.try_with(|t| *t).ok()
}

/// A request's id (cheap to clone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(Arc<str>);

impl RequestId {
    /// The client's id if it is usable: 1 to [`MAX_LEN`] bytes, each visible ASCII.
    pub fn from_client(value: &[u8]) -> Option<RequestId> {
        let usable = !value.is_empty()
            && value.len() <= MAX_LEN
            && value.iter().all(|b| (0x21..=0x7e).contains(b));
        if !usable {
            return None;
        }
        std::str::from_utf8(value).ok().map(|s| RequestId(s.into()))
    }

    /// A fresh id: 32 lowercase hex digits.
    pub fn generate() -> RequestId {
        RequestId(crate::response_id::random_hex128().into())
    }

    /// The id of the request this task serves, if it runs under [`assign`].
    pub fn current() -> Option<RequestId> {
        CURRENT.try_with(Clone::clone).ok()
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The id of the request this task serves, as an owned string (for error bodies).
pub fn current_string() -> Option<String> {
    RequestId::current().map(|id| id.as_str().to_string())
}

/// Middleware: picks the request's id, serves the request with it in scope and echoes it in
/// the response header.
pub async fn assign(mut req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get(&HEADER)
        .and_then(|v| RequestId::from_client(v.as_bytes()))
        .unwrap_or_else(RequestId::generate);
    req.extensions_mut().insert(id.clone());
    // Visible ASCII is always a valid header value.
    let value = HeaderValue::from_str(id.as_str()).ok();
    if let Some(value) = &value {
        req.headers_mut().insert(HEADER, value.clone());
    }
    let arrived = arrived().unwrap_or_else(Instant::now);
    let mut response = ARRIVED
        .scope(arrived, CURRENT.scope(id.clone(), next.run(req)))
        .await;
    if let Some(value) = value {
        response.headers_mut().insert(HEADER, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ids_must_be_short_visible_ascii() {
        assert_eq!(
            RequestId::from_client(b"abc-123_x.y").map(|i| i.to_string()),
            Some("abc-123_x.y".to_string())
        );
        assert!(RequestId::from_client(&[b'a'; MAX_LEN]).is_some());
        assert!(RequestId::from_client(&[b'a'; MAX_LEN + 1]).is_none());
        assert!(RequestId::from_client(b"").is_none());
        assert!(RequestId::from_client(b"has space").is_none());
        assert!(RequestId::from_client(b"tab\there").is_none());
        assert!(RequestId::from_client("caf\u{e9}".as_bytes()).is_none());
    }

    #[test]
    fn generated_ids_are_32_hex_digits_and_differ() {
        let (a, b) = (RequestId::generate(), RequestId::generate());
        assert_eq!(a.as_str().len(), 32);
        assert!(a
            .as_str()
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
        assert_ne!(a, b);
    }

    #[tokio::test]
    async fn an_inner_assign_keeps_the_id_the_outer_one_chose() {
        use axum::body::Body;
        use tower::ServiceExt;
        let inner = axum::Router::new()
            .route(
                "/",
                axum::routing::get(|| async { current_string().unwrap_or_default() }),
            )
            .layer(axum::middleware::from_fn(assign));
        let outer = axum::Router::new()
            .fallback_service(inner)
            .layer(axum::middleware::from_fn(assign));
        let req = Request::builder()
            .uri("/")
            .header(HEADER, "not usable")
            .body(Body::empty())
            .unwrap();
        let response = outer.oneshot(req).await.unwrap();
        let echoed = response.headers()[HEADER].to_str().unwrap().to_string();
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        assert_eq!(echoed.len(), 32, "{echoed}");
        assert_eq!(
            body,
            echoed.as_bytes(),
            "the handler saw the id the client got"
        );
    }

    #[tokio::test]
    async fn the_id_is_in_scope_only_inside_the_request() {
        assert!(RequestId::current().is_none());
        let id = RequestId::generate();
        let seen = CURRENT
            .scope(id.clone(), async { RequestId::current() })
            .await;
        assert_eq!(seen, Some(id));
    }
}
