//! The web dashboard: one page that shows the session tree with each plan
//! and every agent's todo list, updated live from the watch stream over
//! server-sent events, with Approve / Reject for plans awaiting approval.
//!
//! Served by `cairn serve --web-listen ADDR` beside the gRPC port (which
//! also speaks gRPC-Web). No front-end build: the page, its script and its
//! style are files compiled into the binary.
//!
//! A dashboard on a person's machine is reachable from every web page that
//! person opens, so it defends itself:
//!
//! - **Host**: every request must name this dashboard (its listen address,
//!   `localhost` on loopback, or a `--web-origin`), which defeats DNS
//!   rebinding, where an attacker's name resolves to 127.0.0.1;
//! - **Origin**: a state-changing request from another origin is refused;
//! - **CSRF token**: a state-changing request must carry the token the
//!   server put in the page, which another site's page cannot read;
//! - **CSP** with `frame-ancestors 'none'` (and `X-Frame-Options`): no
//!   framing, so no clickjacking of Approve, and no inline script at all.
//!
//! Untrusted text (steps, titles, ids) is only ever set as text by the
//! script, never parsed as HTML.

use std::collections::HashSet;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Request, State as AxumState};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use tokio::net::TcpListener;
use tokio_stream::{Stream, StreamExt};

use cairn_store::hub::Target;

use crate::services::State;
use crate::services::plan::PlanApi;
use crate::watch::{self, Item, Start};

const PAGE: &str = include_str!("index.html");
const SCRIPT: &str = include_str!("app.js");
const STYLE: &str = include_str!("app.css");

/// The header a state-changing request carries the page's token in.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// Where scripts, styles and connections may come from: this server only,
/// nothing inline, and no page may frame this one.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The dashboard of one server.
#[derive(Clone)]
pub struct Web {
    state: State,
    guard: Arc<Guard>,
}

/// Who may talk to the dashboard.
#[derive(Debug)]
struct Guard {
    /// `Host` values that name this dashboard, lowercased.
    hosts: HashSet<String>,
    /// Origins whose pages may change state, lowercased.
    origins: HashSet<String>,
    /// The page's CSRF token, fresh per process.
    csrf: String,
    /// The page with the token in it.
    page: String,
}

impl Web {
    /// The dashboard for `state`, listening on `listener`, also reachable
    /// through `origins` (e.g. a reverse proxy's `https://cairn.example.com`).
    pub fn new(state: State, listener: &TcpListener, origins: &[String]) -> Self {
        let listen = listener.local_addr().ok();
        let csrf = random_token();
        let page = PAGE.replace("{{CSRF_TOKEN}}", &csrf);
        Web {
            state,
            guard: Arc::new(Guard::new(listen, origins, csrf, page)),
        }
    }

    /// The routes, behind the guard.
    pub fn router(self) -> Router {
        Router::new()
            .route("/", get(page))
            .route("/app.js", get(script))
            .route("/app.css", get(style))
            .route("/events", get(events))
            .route("/api/sessions/{id}/approve", post(approve))
            .route("/api/sessions/{id}/reject", post(reject))
            .layer(middleware::from_fn_with_state(self.clone(), guarded))
            .with_state(self)
    }
}

impl Guard {
    fn new(listen: Option<SocketAddr>, origins: &[String], csrf: String, page: String) -> Self {
        let mut hosts = HashSet::new();
        if let Some(addr) = listen {
            let port = addr.port();
            let ip = addr.ip();
            if ip.is_unspecified() || ip.is_loopback() {
                hosts.insert(format!("localhost:{port}"));
                hosts.insert(format!("127.0.0.1:{port}"));
                hosts.insert(format!("[::1]:{port}"));
            }
            if !ip.is_unspecified() {
                hosts.insert(addr.to_string());
            }
        }
        let mut allowed = HashSet::new();
        for host in &hosts {
            allowed.insert(format!("http://{host}"));
            allowed.insert(format!("https://{host}"));
        }
        for origin in origins {
            let origin = origin.trim().trim_end_matches('/').to_ascii_lowercase();
            if let Some((_, host)) = origin.split_once("://") {
                hosts.insert(host.to_owned());
            }
            allowed.insert(origin);
        }
        Guard {
            hosts,
            origins: allowed,
            csrf,
            page,
        }
    }

    /// Why a request is refused, if it is.
    fn refuse(
        &self,
        method: &Method,
        headers: &HeaderMap,
        authority: Option<&str>,
    ) -> Option<&'static str> {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .or(authority)
            .map(str::to_ascii_lowercase);
        if !host.is_some_and(|h| self.hosts.contains(&h)) {
            return Some("this dashboard is not served under that host name");
        }
        if matches!(*method, Method::GET | Method::HEAD) {
            return None;
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or_default().to_ascii_lowercase();
            if !self.origins.contains(&origin) {
                return Some("cross-origin requests may not change anything");
            }
        }
        if headers
            .get("sec-fetch-site")
            .is_some_and(|s| s.as_bytes() == b"cross-site")
        {
            return Some("cross-site requests may not change anything");
        }
        let token = headers
            .get(CSRF_HEADER)
            .map(HeaderValue::as_bytes)
            .unwrap_or_default();
        if !same_bytes(token, self.csrf.as_bytes()) {
            return Some("missing or wrong CSRF token: reload the dashboard");
        }
        None
    }
}

/// Compares in time independent of where the inputs differ.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// 32 random bytes from the operating system, as hex.
fn random_token() -> String {
    let mut bytes = [0u8; 32];
    if let Err(e) = getrandom::fill(&mut bytes) {
        // Without the OS's randomness there is no safe token: refuse every
        // state change rather than accept a guessable one.
        tracing::error!(error = %e, "no system randomness: the dashboard refuses every change");
        return String::from("unavailable");
    }
    let mut hex = String::with_capacity(64);
    for b in bytes {
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

/// Checks host, origin and token, then adds the security headers.
async fn guarded(AxumState(web): AxumState<Web>, request: Request, next: Next) -> Response {
    let authority = request.uri().authority().map(|a| a.as_str().to_owned());
    let mut response = match web.guard.refuse(
        request.method(),
        request.headers(),
        authority.as_deref(),
    ) {
        Some(why) => {
            tracing::warn!(method = %request.method(), path = %cairn_core::error::Excerpt(request.uri().path()), why, "dashboard request refused");
            (
                StatusCode::FORBIDDEN,
                Json(serde_json::json!({ "error": why })),
            )
                .into_response()
        }
        None => next.run(request).await,
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    response
}

async fn page(AxumState(web): AxumState<Web>) -> Html<String> {
    Html(web.guard.page.clone())
}

async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        SCRIPT,
    )
}

async fn style() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE)
}

/// Everything, as it is now and as it changes: each message is one event
/// of the watch stream as JSON (`change`), then `synced`, then changes.
async fn events(
    AxumState(web): AxumState<Web>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let stream = watch::watch(
        web.state.store.clone(),
        Target::All,
        Start::Snapshot,
        Duration::from_secs(15),
    )
    .map_while(|item| match item {
        Ok(Item::Event(d)) => Some(
            SseEvent::default()
                .event("change")
                .json_data(serde_json::json!({ "revision": d.revision, "event": d.event }))
                .ok(),
        ),
        Ok(Item::Synced(r)) => Some(Some(
            SseEvent::default().event("synced").data(r.to_string()),
        )),
        Ok(Item::Progress(r)) => Some(Some(
            SseEvent::default().event("progress").data(r.to_string()),
        )),
        // The browser's EventSource reconnects and starts over.
        Err(_) => None,
    })
    .filter_map(|e| e.map(Ok));
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// Body of approve / reject.
#[derive(Debug, Default, Deserialize)]
struct Decision {
    #[serde(default)]
    approver: String,
    #[serde(default)]
    reason: String,
}

fn failed(e: &cairn_core::error::Error) -> Response {
    let code = match crate::status::code(e) {
        tonic::Code::NotFound => StatusCode::NOT_FOUND,
        tonic::Code::FailedPrecondition | tonic::Code::Aborted => StatusCode::CONFLICT,
        tonic::Code::InvalidArgument | tonic::Code::ResourceExhausted => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (code, Json(serde_json::json!({ "error": e.to_string() }))).into_response()
}

async fn approve(
    AxumState(web): AxumState<Web>,
    Path(id): Path<String>,
    body: Option<Json<Decision>>,
) -> Response {
    let Json(d) = body.unwrap_or_default();
    let approver = if d.approver.is_empty() {
        "dashboard".to_owned()
    } else {
        d.approver
    };
    let bytes = id.len() + approver.len();
    match PlanApi::new(web.state)
        .approve(id, approver, None, bytes)
        .await
    {
        Ok((_, revision)) => Json(serde_json::json!({ "revision": revision })).into_response(),
        Err(e) => failed(&e),
    }
}

async fn reject(
    AxumState(web): AxumState<Web>,
    Path(id): Path<String>,
    body: Option<Json<Decision>>,
) -> Response {
    let Json(d) = body.unwrap_or_default();
    let bytes = id.len() + d.reason.len();
    match PlanApi::new(web.state)
        .reject(id, d.reason, None, bytes)
        .await
    {
        Ok((_, revision)) => Json(serde_json::json!({ "revision": revision })).into_response(),
        Err(e) => failed(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard() -> Guard {
        Guard::new(
            Some("127.0.0.1:8080".parse().unwrap()),
            &["https://Cairn.example.com/".into()],
            "t0ken".into(),
            String::new(),
        )
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn hosts_origins_and_tokens() {
        let g = guard();
        let get = Method::GET;
        let post = Method::POST;
        assert_eq!(
            g.refuse(&get, &headers(&[("host", "127.0.0.1:8080")]), None),
            None
        );
        assert_eq!(
            g.refuse(&get, &headers(&[("host", "localhost:8080")]), None),
            None
        );
        assert_eq!(
            g.refuse(&get, &headers(&[("host", "cairn.example.com")]), None),
            None
        );
        assert!(
            g.refuse(&get, &headers(&[("host", "evil.example:8080")]), None)
                .is_some()
        );
        assert!(g.refuse(&get, &HeaderMap::new(), None).is_some());
        let ok = [("host", "127.0.0.1:8080"), ("x-csrf-token", "t0ken")];
        assert_eq!(g.refuse(&post, &headers(&ok), None), None);
        assert!(
            g.refuse(&post, &headers(&[("host", "127.0.0.1:8080")]), None)
                .is_some()
        );
        assert!(
            g.refuse(
                &post,
                &headers(&[("host", "127.0.0.1:8080"), ("x-csrf-token", "t0keN")]),
                None
            )
            .is_some()
        );
        let mut cross = ok.to_vec();
        cross.push(("origin", "https://evil.example"));
        assert!(g.refuse(&post, &headers(&cross), None).is_some());
        let mut same = ok.to_vec();
        same.push(("origin", "https://cairn.example.com"));
        assert_eq!(g.refuse(&post, &headers(&same), None), None);
    }
}
