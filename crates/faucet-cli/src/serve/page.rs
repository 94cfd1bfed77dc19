//! `GET /`: the status page — one HTML file and one script, included in the binary (no
//! build step), that read `GET /pipelines` and `GET /members` every 2 s and call the API's
//! pause / resume / stop / run (and, with `--cluster`, drain / undrain) routes with the API
//! token, which the page asks for once and keeps in the tab's `sessionStorage`.
//!
//! The page and its script hold no data, so they are served to anyone; the data comes from
//! the API routes, under their rules ([`super::auth`], [`super::api::Reads`]): off loopback
//! the page shows nothing until the token is given. Every value goes into the page through
//! `textContent`, and the Content-Security-Policy allows only this server's own script and
//! connections, so a pipeline name or an error text cannot run as code.

use axum::http::header;
use axum::response::{IntoResponse, Response};

/// The page.
const HTML: &str = include_str!("page/status.html");
/// Its script.
const SCRIPT: &str = include_str!("page/status.js");

/// Scripts only from this server, no inline script, connections only to this server, no
/// framing.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; \
                   connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
                   frame-ancestors 'none'";

fn answer(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-store"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        body,
    )
        .into_response()
}

/// `GET /`.
pub(crate) async fn index() -> Response {
    answer("text/html; charset=utf-8", HTML)
}

/// `GET /status.js`.
pub(crate) async fn script() -> Response {
    answer("text/javascript; charset=utf-8", SCRIPT)
}
