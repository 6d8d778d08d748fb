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
//! - **Host and Origin**: the server-wide rule of [`crate::site`], shared
//!   with Connect and gRPC-Web on the gRPC port: every request must name
//!   this server (DNS rebinding), and a change from another origin or site
//!   is refused;
//! - **CSRF token**: a state-changing request must carry the token the
//!   server put in the page, which another site's page cannot read;
//! - **CSP** with `frame-ancestors 'none'` (and `X-Frame-Options`): no
//!   framing, so no clickjacking of Approve, and no inline script at all;
//! - **sign-in** with `--auth token`: a person signs in with a token, and
//!   gets an `HttpOnly`, `SameSite=Strict` session cookie (and a CSRF token
//!   of that session); every page, event stream and action needs it, and
//!   acts with that principal's rights.
//!
//! Untrusted text (steps, titles, ids) is only ever set as text by the
//! script, never parsed as HTML.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{Extension, Form, Path, Request, State as AxumState};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use cairn_api::shapes;
use cairn_core::access::{Caller, Role};
use cairn_core::command::{self, PlanCommand, PlanWrite};
use cairn_core::error::Excerpt;
use cairn_store::hub::Topic;
use serde::Deserialize;
use tokio_stream::StreamExt;

use crate::auth::{AuthMode, token_sha256};
use crate::services::State;
use crate::site::Site;
use crate::watch::{self, Item, Start};

mod a2a;

pub use a2a::JSONRPC_PATH;

const PAGE: &str = include_str!("index.html");
const INBOX_PAGE: &str = include_str!("inbox.html");
const INBOX_SCRIPT: &str = include_str!("inbox.js");
const LOGIN: &str = include_str!("login.html");
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
    site: Arc<Site>,
    browsers: Arc<Browsers>,
    /// The A2A agent card, as served (public, like any agent card).
    agent_card: Option<Arc<str>>,
}

/// A signed-in browser.
#[derive(Debug, Clone)]
struct Browser {
    /// The hash of the token it signed in with; the principal is looked up
    /// by it on every request, so a revoked token signs the browser out.
    token_sha256: Option<String>,
    /// The CSRF token of its page.
    csrf: String,
    expires: Instant,
}

/// Signed-in browsers by session cookie; with authentication off, one
/// implicit browser holds the process's CSRF token.
#[derive(Debug)]
struct Browsers {
    open: Option<Browser>,
    signed_in: Mutex<HashMap<String, Browser>>,
    /// Sign-in attempts by address: tokens left and when they were counted.
    attempts: Mutex<HashMap<std::net::IpAddr, (u32, Instant)>>,
    /// Whether cookies are `Secure` (the dashboard is served over TLS).
    secure: bool,
}

/// Name of the session cookie.
const COOKIE: &str = "cairn_session";
/// How long a sign-in lasts.
const SIGN_IN_FOR: Duration = Duration::from_secs(12 * 60 * 60);
/// Most browsers signed in at once; the oldest go first.
const MAX_BROWSERS: usize = 10_000;
/// Most browsers signed in with one token: a token's new sign-in past it
/// ends that token's own oldest, never somebody else's.
const MAX_SIGN_INS_PER_TOKEN: usize = 16;
/// Sign-in attempts one address may make: a burst, then one per
/// [`LOGIN_REFILL`].
const LOGIN_BURST: u32 = 10;
const LOGIN_REFILL: Duration = Duration::from_millis(500);
/// Addresses whose sign-in attempts are counted at once.
const LOGIN_PEERS: usize = 10_000;

/// A request's browser, as the guard found it.
#[derive(Debug, Clone)]
struct Signed {
    caller: Caller,
    token_sha256: Option<String>,
    csrf: String,
}

impl Browsers {
    /// Whether `ip` may try to sign in now (a token bucket per address).
    fn may_try(&self, ip: std::net::IpAddr) -> bool {
        let now = Instant::now();
        let mut all = self.attempts.lock().unwrap_or_else(PoisonError::into_inner);
        if all.len() >= LOGIN_PEERS && !all.contains_key(&ip) {
            all.retain(|_, (_, at)| now.duration_since(*at) < LOGIN_REFILL * LOGIN_BURST);
            // Every address counted is recent: a new one waits until some
            // age out, so many addresses cannot grow the table.
            if all.len() >= LOGIN_PEERS {
                return false;
            }
        }
        let (tokens, at) = all.entry(ip).or_insert((LOGIN_BURST, now));
        let refilled =
            u32::try_from(now.duration_since(*at).as_millis() / LOGIN_REFILL.as_millis())
                .unwrap_or(u32::MAX);
        if refilled > 0 {
            *tokens = tokens.saturating_add(refilled).min(LOGIN_BURST);
            *at = now;
        }
        if *tokens == 0 {
            return false;
        }
        *tokens -= 1;
        true
    }
}

impl Web {
    /// The dashboard for `state`, answering browsers under `site`'s names
    /// and origins; `secure` when it is served over TLS.
    pub fn new(state: State, site: Arc<Site>, secure: bool) -> Self {
        let open = (state.auth.mode() == AuthMode::Off).then(|| Browser {
            token_sha256: None,
            csrf: random_token(),
            expires: Instant::now() + Duration::from_secs(u64::from(u32::MAX)),
        });
        Web {
            state,
            site,
            browsers: Arc::new(Browsers {
                open,
                signed_in: Mutex::new(HashMap::new()),
                attempts: Mutex::new(HashMap::new()),
                secure,
            }),
            agent_card: None,
        }
    }

    /// Serves `card` at `/.well-known/agent-card.json`.
    #[must_use]
    pub fn with_agent_card(mut self, card: String) -> Self {
        self.agent_card = Some(card.into());
        self
    }

    /// The routes, behind the guard.
    pub fn router(self) -> Router {
        Router::new()
            .route("/", get(page))
            .route("/login", get(login_page).post(login))
            .route("/logout", post(logout))
            .route("/app.js", get(script))
            .route("/app.css", get(style))
            .route("/inbox", get(inbox_page))
            .route("/inbox.js", get(inbox_script))
            .route("/api/inbox", get(inbox))
            .route(
                "/api/sessions/{id}/modifications/{modification}/approve",
                post(approve_modification),
            )
            .route(
                "/api/sessions/{id}/modifications/{modification}/reject",
                post(reject_modification),
            )
            .route("/events", get(events))
            .route(AGENT_CARD_PATH, get(agent_card))
            .route(a2a::JSONRPC_PATH, post(a2a::jsonrpc))
            .route("/api/sessions/{id}/approve", post(approve))
            .route("/api/sessions/{id}/reject", post(reject))
            .layer(middleware::from_fn_with_state(self.clone(), guarded))
            .with_state(self)
    }

    /// The browser a request comes from, if it signed in (or authentication
    /// is off), with its principal as of now.
    async fn browser(&self, headers: &HeaderMap) -> Option<Signed> {
        if let Some(open) = &self.browsers.open {
            return Some(Signed {
                caller: Caller::Open,
                token_sha256: None,
                csrf: open.csrf.clone(),
            });
        }
        let id = cookie(headers, COOKIE)?;
        let browser = {
            let mut all = self
                .browsers
                .signed_in
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match all.get(&id) {
                Some(b) if b.expires > Instant::now() => b.clone(),
                Some(_) => {
                    all.remove(&id);
                    return None;
                }
                None => return None,
            }
        };
        let hash = browser.token_sha256.clone()?;
        let principal = self.state.auth.principal_by_hash(&hash).await.ok()?;
        Some(Signed {
            caller: Caller::Principal(principal),
            token_sha256: Some(hash),
            csrf: browser.csrf,
        })
    }

    /// Signs a browser in; returns its session cookie's value.
    fn sign_in(&self, token_sha256: String) -> String {
        let id = random_token();
        let mut all = self
            .browsers
            .signed_in
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        all.retain(|_, b| b.expires > now);
        let mine: Vec<(String, Instant)> = all
            .iter()
            .filter(|(_, b)| b.token_sha256.as_deref() == Some(token_sha256.as_str()))
            .map(|(k, b)| (k.clone(), b.expires))
            .collect();
        if mine.len() >= MAX_SIGN_INS_PER_TOKEN
            && let Some((oldest, _)) = mine.iter().min_by_key(|(_, e)| *e)
        {
            all.remove(oldest);
        }
        if all.len() >= MAX_BROWSERS
            && let Some(oldest) = all
                .iter()
                .min_by_key(|(_, b)| b.expires)
                .map(|(k, _)| k.clone())
        {
            all.remove(&oldest);
        }
        all.insert(
            id.clone(),
            Browser {
                token_sha256: Some(token_sha256),
                csrf: random_token(),
                expires: now + SIGN_IN_FOR,
            },
        );
        id
    }
}

/// A cookie's value from the request headers.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// Whether a state-changing request carries its page's CSRF token.
fn csrf_ok(headers: &HeaderMap, signed: &Signed) -> bool {
    let token = headers
        .get(CSRF_HEADER)
        .map(HeaderValue::as_bytes)
        .unwrap_or_default();
    same_bytes(token, signed.csrf.as_bytes())
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

fn refused(status: StatusCode, why: &'static str) -> Response {
    (status, Json(serde_json::json!({ "error": why }))).into_response()
}

/// Checks host and origin, finds the browser's sign-in, checks the CSRF
/// token of changes, then adds the security headers.
/// Where A2A clients look for the agent card.
pub const AGENT_CARD_PATH: &str = "/.well-known/agent-card.json";

/// The agent card: JSON built by the server, never from a request.
async fn agent_card(AxumState(web): AxumState<Web>) -> Response {
    match web.agent_card {
        Some(card) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            card.to_string(),
        )
            .into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn guarded(AxumState(web): AxumState<Web>, mut request: Request, next: Next) -> Response {
    let authority = request.uri().authority().map(|a| a.as_str().to_owned());
    let path = request.uri().path().to_owned();
    let method = request.method().clone();
    let mut response = if let Some(why) =
        web.site
            .refuse(&method, request.headers(), authority.as_deref())
    {
        tracing::warn!(method = %method, path = %Excerpt(&path), why, "dashboard request refused");
        refused(StatusCode::FORBIDDEN, why)
    } else {
        let open_path = matches!(
            path.as_str(),
            "/login" | "/app.js" | "/app.css" | AGENT_CARD_PATH
        );
        if path == a2a::JSONRPC_PATH {
            // An API, not a page: its callers present bearer tokens, and a
            // browser's cookie is never taken for one.
            next.run(request).await
        } else {
            match web.browser(request.headers()).await {
                Some(signed) => {
                    let changes = !matches!(method, Method::GET | Method::HEAD);
                    if changes && path != "/login" && !csrf_ok(request.headers(), &signed) {
                        tracing::warn!(method = %method, path = %Excerpt(&path), "dashboard change without its CSRF token refused");
                        refused(
                            StatusCode::FORBIDDEN,
                            "missing or wrong CSRF token: reload the dashboard",
                        )
                    } else {
                        request.extensions_mut().insert(signed);
                        next.run(request).await
                    }
                }
                None if open_path => next.run(request).await,
                None if path == "/" => Redirect::to("/login").into_response(),
                None => refused(StatusCode::UNAUTHORIZED, "sign in first"),
            }
        }
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
    // Not `no-referrer`: under it browsers send `Origin: null` with the
    // sign-in form, which the origin check must refuse.
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
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

async fn page(Extension(signed): Extension<Signed>) -> Html<String> {
    Html(PAGE.replace("{{CSRF_TOKEN}}", &signed.csrf))
}

async fn inbox_page(Extension(signed): Extension<Signed>) -> Html<String> {
    Html(INBOX_PAGE.replace("{{CSRF_TOKEN}}", &signed.csrf))
}

async fn inbox_script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        INBOX_SCRIPT,
    )
}

/// Most inbox items the page shows.
const INBOX_ITEMS: usize = 500;

/// What awaits the signed-in principal's approval (`ListInbox`), in the
/// shape of `cairn_api::shapes::inbox_item_json`.
async fn inbox(AxumState(web): AxumState<Web>, Extension(signed): Extension<Signed>) -> Response {
    match web
        .state
        .store
        .inbox(&signed.caller, None, INBOX_ITEMS)
        .await
    {
        Ok((page, revision)) => {
            let now = cairn_store::now_micros();
            let items: Vec<_> = page
                .items
                .into_iter()
                .map(|i| shapes::inbox_item_json(&crate::convert::inbox_item(i), now))
                .collect();
            Json(serde_json::json!({
                "items": items,
                "more": page.next_after.is_some(),
                "revision": revision,
            }))
            .into_response()
        }
        Err(e) => failed(&e),
    }
}

/// The sign-in form; `error` says why the last try failed.
fn login_form(error: &str) -> Html<String> {
    Html(LOGIN.replace("{{ERROR}}", error))
}

async fn login_page() -> Html<String> {
    login_form("")
}

/// Body of the sign-in form.
#[derive(Debug, Deserialize)]
struct SignIn {
    token: String,
}

async fn login(
    AxumState(web): AxumState<Web>,
    peer: Option<Extension<crate::conn::Peer>>,
    Form(form): Form<SignIn>,
) -> Response {
    if web.state.auth.mode() == AuthMode::Off {
        return Redirect::to("/").into_response();
    }
    if let Some(Extension(peer)) = peer
        && !web.browsers.may_try(peer.0.ip())
    {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, "1")],
            login_form("Too many sign-in attempts from this address: wait a moment."),
        )
            .into_response();
    }
    let hash = token_sha256(form.token.trim());
    match web.state.auth.principal_by_hash(&hash).await {
        Ok(principal) => {
            tracing::info!(principal = %Excerpt(&principal.principal_id), "signed in to the dashboard");
            let id = web.sign_in(hash);
            let secure = if web.browsers.secure { "; Secure" } else { "" };
            let cookie = format!(
                "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{secure}",
                SIGN_IN_FOR.as_secs()
            );
            let mut response = Redirect::to("/").into_response();
            if let Ok(value) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            response
        }
        Err(_) => (
            StatusCode::UNAUTHORIZED,
            login_form("That token is unknown or revoked."),
        )
            .into_response(),
    }
}

async fn logout(AxumState(web): AxumState<Web>, headers: HeaderMap) -> Response {
    if let Some(id) = cookie(&headers, COOKIE) {
        web.browsers
            .signed_in
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
    }
    let mut response = Redirect::to("/login").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("cairn_session=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"),
    );
    response
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

/// Everything the signed-in principal may see, as it is now and as it
/// changes: each message is one event of the watch stream (`change`, in
/// the shape of `cairn_api::shapes::event_json`, which docs/dashboard.md
/// documents), then `synced`, then changes. It ends when the principal's
/// token is revoked.
async fn events(AxumState(web): AxumState<Web>, Extension(signed): Extension<Signed>) -> Response {
    let target = match &signed.caller {
        Caller::Open => Topic::All,
        Caller::Principal(p) if p.reads_everything() => Topic::All,
        Caller::Principal(p)
            if !p.session_roots.is_empty()
                && (p.has(Role::Viewer) || p.has(Role::Approver) || p.has(Role::Orchestrator)) =>
        {
            Topic::Trees(p.session_roots.iter().cloned().collect())
        }
        Caller::Principal(_) => {
            return refused(
                StatusCode::FORBIDDEN,
                "the dashboard shows session trees: it needs a viewer, approver or orchestrator principal",
            );
        }
    };
    let inner = watch::scoped(
        watch::watch(
            web.state.store.clone(),
            target,
            Start::Snapshot,
            Duration::from_secs(15),
        ),
        watch::Scope::of(&signed.caller),
    );
    let auth = Arc::clone(&web.state.auth);
    let hash = signed.token_sha256;
    let stream = async_stream::stream! {
        tokio::pin!(inner);
        let revoked = auth.revoked(hash.as_deref());
        tokio::pin!(revoked);
        loop {
            let item = tokio::select! {
                item = inner.next() => item,
                () = &mut revoked => break,
            };
            let event = match item {
                Some(Ok(Item::Event(d))) => SseEvent::default()
                    .event("change")
                    .json_data(shapes::event_json(&crate::convert::event(d)))
                    .ok(),
                Some(Ok(Item::Synced(r))) => Some(SseEvent::default().event("synced").data(r.to_string())),
                Some(Ok(Item::Progress(r))) => {
                    Some(SseEvent::default().event("progress").data(r.to_string()))
                }
                // The browser's EventSource reconnects and starts over.
                Some(Err(_)) | None => break,
            };
            if let Some(event) = event {
                yield Ok::<_, Infallible>(event);
            }
        }
    };
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
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
        tonic::Code::PermissionDenied => StatusCode::FORBIDDEN,
        tonic::Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (code, Json(serde_json::json!({ "error": e.to_string() }))).into_response()
}

async fn approve(
    AxumState(web): AxumState<Web>,
    Extension(signed): Extension<Signed>,
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
    decide(&web, &signed, id, PlanCommand::Approve { approver }, bytes).await
}

async fn reject(
    AxumState(web): AxumState<Web>,
    Extension(signed): Extension<Signed>,
    Path(id): Path<String>,
    body: Option<Json<Decision>>,
) -> Response {
    let Json(d) = body.unwrap_or_default();
    let bytes = id.len() + d.reason.len();
    let reject = PlanCommand::Reject { reason: d.reason };
    decide(&web, &signed, id, reject, bytes).await
}

async fn approve_modification(
    AxumState(web): AxumState<Web>,
    Extension(signed): Extension<Signed>,
    Path((id, modification_id)): Path<(String, u32)>,
) -> Response {
    decide_modification(
        &web,
        &signed,
        id,
        modification_id,
        command::Decision::Approve,
    )
    .await
}

async fn reject_modification(
    AxumState(web): AxumState<Web>,
    Extension(signed): Extension<Signed>,
    Path((id, modification_id)): Path<(String, u32)>,
) -> Response {
    decide_modification(
        &web,
        &signed,
        id,
        modification_id,
        command::Decision::Reject,
    )
    .await
}

/// `ApproveModification` or `RejectModification`, from the inbox page.
async fn decide_modification(
    web: &Web,
    signed: &Signed,
    id: String,
    modification_id: u32,
    decision: command::Decision,
) -> Response {
    let bytes = id.len();
    let decide_it = PlanCommand::DecideModification {
        modification_id,
        decision,
    };
    decide(web, signed, id, decide_it, bytes).await
}

/// Applies an approver's decision on a session's plan, as `ApprovePlan` or
/// `RejectPlan` would.
async fn decide(
    web: &Web,
    signed: &Signed,
    session_id: String,
    command: PlanCommand,
    bytes: usize,
) -> Response {
    let write = PlanWrite {
        session_id,
        expected_revision: None,
        command,
    };
    match web
        .state
        .store
        .apply(&signed.caller, write.into(), bytes)
        .await
    {
        Ok((_, revision)) => Json(serde_json::json!({ "revision": revision })).into_response(),
        Err(e) => failed(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    /// The sign-in rate limit's table is bounded whatever the number of
    /// addresses (an IPv6 client has plenty).
    #[test]
    fn sign_in_attempts_are_counted_for_a_bounded_number_of_addresses() {
        let b = Browsers {
            open: None,
            signed_in: Mutex::new(HashMap::new()),
            attempts: Mutex::new(HashMap::new()),
            secure: false,
        };
        for i in 0..LOGIN_PEERS {
            let ip = std::net::IpAddr::V6(std::net::Ipv6Addr::from(u128::try_from(i).unwrap()));
            assert!(b.may_try(ip));
        }
        let new = std::net::IpAddr::V6(std::net::Ipv6Addr::from(u128::MAX));
        assert!(!b.may_try(new), "a new address waits");
        assert_eq!(b.attempts.lock().unwrap().len(), LOGIN_PEERS);
        // A counted address goes on with its own budget.
        assert!(b.may_try(std::net::IpAddr::V6(std::net::Ipv6Addr::from(0u128))));
    }

    #[test]
    fn csrf_tokens_and_cookies() {
        let signed = Signed {
            caller: Caller::Open,
            token_sha256: None,
            csrf: "t0ken".into(),
        };
        assert!(csrf_ok(&headers(&[("x-csrf-token", "t0ken")]), &signed));
        assert!(!csrf_ok(&headers(&[("x-csrf-token", "t0keN")]), &signed));
        assert!(!csrf_ok(&HeaderMap::new(), &signed));
        let h = headers(&[("cookie", "a=1; cairn_session=abc; b=2")]);
        assert_eq!(cookie(&h, COOKIE).as_deref(), Some("abc"));
    }
}
