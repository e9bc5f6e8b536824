//! The web playground: a chat page at `GET /` (`POST /` stays TGI's generate route), with its
//! script and style sheet under `/playground/`. Plain HTML, CSS and JavaScript compiled into the
//! binary (`crates/server/src/playground/`); the page talks only to this server
//! (`/v1/models`, `/v1/chat/completions`, `/metrics`, `/health`) and loads nothing else.
//!
//! The three files need no API key, so that the page can ask for one when the API answers 401;
//! every response carries a Content-Security-Policy that allows this origin only (no inline
//! script or style, no frames, no form posts).

use axum::http::{header, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// Where the page is served.
pub const INDEX_PATH: &str = "/";
/// Where the page's script is served.
pub const SCRIPT_PATH: &str = "/playground/app.js";
/// Where the page's style sheet is served.
pub const STYLE_PATH: &str = "/playground/style.css";

/// The policy sent with every playground file: scripts, styles, images and requests from this
/// origin only (`data:` images for the empty favicon); nothing may frame the page.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// One file of the playground.
#[derive(Debug, Clone, Copy)]
pub struct Asset {
    pub body: &'static str,
    pub content_type: &'static str,
}

/// The page.
pub const INDEX: Asset = Asset {
    body: include_str!("../playground/index.html"),
    content_type: "text/html; charset=utf-8",
};
/// The script: chat, streaming, markdown, metrics panel, API key form.
pub const SCRIPT: Asset = Asset {
    body: include_str!("../playground/app.js"),
    content_type: "text/javascript; charset=utf-8",
};
/// The style sheet.
pub const STYLE: Asset = Asset {
    body: include_str!("../playground/style.css"),
    content_type: "text/css; charset=utf-8",
};

/// The asset served at `path`, if any.
pub fn asset(path: &str) -> Option<Asset> {
    match path {
        INDEX_PATH => Some(INDEX),
        SCRIPT_PATH => Some(SCRIPT),
        STYLE_PATH => Some(STYLE),
        _ => None,
    }
}

impl IntoResponse for Asset {
    fn into_response(self) -> Response {
        let headers = [
            (header::CONTENT_TYPE, self.content_type),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-cache"),
        ];
        let mut response = (StatusCode::OK, headers, self.body).into_response();
        response.headers_mut().insert(
            HeaderName::from_static("x-frame-options"),
            HeaderValue::from_static("DENY"),
        );
        response
    }
}

/// The playground's routes (no state, no authentication: see the module docs).
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(INDEX_PATH, get(|| async { INDEX }))
        .route(SCRIPT_PATH, get(|| async { SCRIPT }))
        .route(STYLE_PATH, get(|| async { STYLE }))
}

/// The response to `method path` if it asks for a playground file: for a front end whose routes
/// are not built yet (the fleet gateway before a worker announced its model).
pub fn respond(method: &Method, path: &str) -> Option<Response> {
    if method != Method::GET && method != Method::HEAD {
        return None;
    }
    asset(path).map(IntoResponse::into_response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_has_its_type() {
        assert!(asset("/").unwrap().content_type.starts_with("text/html"));
        assert!(asset(SCRIPT_PATH)
            .unwrap()
            .content_type
            .starts_with("text/javascript"));
        assert!(asset(STYLE_PATH)
            .unwrap()
            .content_type
            .starts_with("text/css"));
        assert!(asset("/playground/").is_none());
        assert!(asset("/playground/../Cargo.toml").is_none());
    }

    #[test]
    fn only_reads_are_answered() {
        assert!(respond(&Method::GET, "/").is_some());
        assert!(respond(&Method::HEAD, SCRIPT_PATH).is_some());
        assert!(respond(&Method::POST, "/").is_none());
        assert!(respond(&Method::GET, "/v1/models").is_none());
    }

    #[test]
    fn the_page_links_its_own_files_only() {
        let html = INDEX.body;
        assert!(html.contains(&format!("src=\"{SCRIPT_PATH}\"")));
        assert!(html.contains(&format!("href=\"{STYLE_PATH}\"")));
        for banned in ["http://", "https://", "<script>", "style=", "onclick"] {
            assert!(!html.contains(banned), "index.html contains {banned}");
        }
    }
}
