//! The same tools over MCP's Streamable HTTP transport, for remote agents:
//! `POST /mcp?agent_id=coder&session_id=orch:coder&parent_session_id=orch`
//! with the agent's bearer token. A remote agent needs a URL and a token,
//! no local binary.
//!
//! Each HTTP request is served statelessly by a [`CairnTools`] made for it
//! from its query (the agent, its session, its parent) and its
//! `Authorization` header, which is passed through to the Cairn server the
//! tools call over gRPC: the server enforces the principal's rights on
//! every call, exactly as for `cairn mcp` on stdio. With authentication on,
//! the token's principal must also hold the agent id it names.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use cairn_api as pb;
use http::{HeaderValue, StatusCode};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::OnceCell;
use tonic::transport::Channel;
use tower::ServiceExt as _;

use super::args::McpArgs;
use super::tools::CairnTools;
use crate::conn::{Api, ServerArgs};

/// What `/mcp` needs to know about the server it fronts.
#[derive(Debug, Clone)]
pub struct McpHttp {
    /// A channel to the server's own gRPC listener.
    pub channel: Channel,
    /// Whether the server authenticates callers (`--auth token`).
    pub auth: bool,
    /// Deadline of each call the tools make.
    pub call_timeout: Duration,
    /// `Host` values accepted (DNS-rebinding protection): loopback, plus
    /// the hosts of the dashboard's configured origins.
    pub allowed_hosts: Vec<String>,
    /// `Origin` values accepted from browsers (the dashboard's own).
    pub allowed_origins: Vec<String>,
}

/// Who the agent is, from the query (named as the query names them).
#[derive(Debug, Deserialize)]
#[allow(clippy::struct_field_names)]
struct AgentQuery {
    agent_id: Option<String>,
    session_id: Option<String>,
    parent_session_id: Option<String>,
}

/// The sessions `/mcp` has made sure of, by session and parent: each is
/// created (or found) once, not on every call. Bounded: when full it
/// starts over, which costs one more create per session.
#[derive(Debug, Default)]
struct Ensured(Mutex<HashMap<(String, String), Cell>>);

/// Whether one session is made sure of.
type Cell = Arc<OnceCell<()>>;

/// Sessions remembered at most.
const ENSURED_SESSIONS: usize = 4096;

impl Ensured {
    fn cell(&self, session: &str, parent: &str) -> Cell {
        let mut known = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if known.len() >= ENSURED_SESSIONS {
            known.clear();
        }
        Arc::clone(
            known
                .entry((session.to_owned(), parent.to_owned()))
                .or_default(),
        )
    }
}

/// What every `/mcp` request shares.
#[derive(Debug)]
struct Shared {
    config: McpHttp,
    ensured: Ensured,
    running: Running,
}

/// The `/mcp` route.
pub fn router(config: McpHttp) -> Router {
    Router::new()
        .route("/mcp", any(serve))
        .with_state(Arc::new(Shared {
            config,
            ensured: Ensured::default(),
            running: Running::default(),
        }))
}

fn refuse(status: StatusCode, message: &str) -> Response {
    // A JSON-RPC error object, which MCP clients show as it is.
    json_rpc_error(status, &Value::Null, -32600, message)
}

async fn serve(
    State(shared): State<Arc<Shared>>,
    Query(agent): Query<AgentQuery>,
    request: Request,
) -> Response {
    let Some(agent_id) = agent.agent_id.filter(|a| !a.is_empty()) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "the agent_id query parameter is required: /mcp?agent_id=…&session_id=…&parent_session_id=…",
        );
    };
    let config = &shared.config;
    let token: Option<HeaderValue> = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .cloned()
        .map(|mut v| {
            v.set_sensitive(true);
            v
        });
    let api = Api::with(config.channel.clone(), token, config.call_timeout);
    if config.auth
        && let Some(refused) = refuse_other_agents(&api, &agent_id).await
    {
        return refused;
    }
    let args = McpArgs {
        // Unused: the tools call through `api`.
        server: ServerArgs {
            server: String::new(),
            token: None,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
        },
        agent_id,
        session_id: agent.session_id.filter(|s| !s.is_empty()),
        parent_session_id: agent.parent_session_id.filter(|s| !s.is_empty()),
        call_timeout: config.call_timeout,
        lease_ttl: None,
    };
    let ensured = shared.ensured.cell(
        args.session_id.as_deref().unwrap_or(&args.agent_id),
        args.parent_session_id.as_deref().unwrap_or_default(),
    );
    // Who may cancel this call: the same token, for the same agent and
    // session (the request id alone is the client's counter).
    let caller = format!(
        "{}\u{0}{}\u{0}{}",
        request
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default(),
        args.agent_id,
        args.session_id.as_deref().unwrap_or_default(),
    );
    let tools = CairnTools::sharing(args, api, ensured).renewing_per_call();
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
        return refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            "the request body is larger than 4 MiB or could not be read",
        );
    };
    let mut call = None;
    if parts.method == http::Method::POST {
        match check_message(&bytes) {
            Checked::Answer(response) => return response,
            Checked::Call(id) => call = Some(id),
            Checked::Cancel(id) => shared.running.cancel(&format!("{caller}\u{0}{id}")),
            Checked::Other => {}
        }
    }
    let request = Request::from_parts(parts, Body::from(bytes));
    let mut http = StreamableHttpServerConfig::default();
    http.legacy_session_mode = false;
    http.json_response = true;
    http.allowed_hosts.clone_from(&config.allowed_hosts);
    http.allowed_origins.clone_from(&config.allowed_origins);
    let service = StreamableHttpService::new(
        move || Ok(tools.clone()),
        Arc::new(LocalSessionManager::default()),
        http,
    );
    let served = service.oneshot(request);
    let Some(id) = call else {
        return match served.await {
            Ok(response) => response.map(Body::new),
            Err(never) => match never {},
        };
    };
    // A call runs until it answers or its client cancels it
    // (`notifications/cancelled`, which arrives as another POST): dropping
    // it ends what it waits on, such as a `wait`'s watch. The registration
    // goes when this future does, answered or abandoned by its client.
    let mut running = shared.running.start(format!("{caller}\u{0}{id}"));
    tokio::select! {
        served = served => match served {
            Ok(response) => response.map(Body::new),
            Err(never) => match never {},
        },
        Ok(()) = &mut running.cancelled => {
            json_rpc_error(StatusCode::OK, &id, -32800, "request cancelled")
        }
    }
}

/// With authentication on, the principal must act as the agent the query
/// names: an agent's token names its agent ids, and nobody else's tools
/// may speak for it. `Some` is the refusal.
async fn refuse_other_agents(api: &Api, agent_id: &str) -> Option<Response> {
    let who = pb::auth_service_client::AuthServiceClient::new(api.clone())
        .who_am_i(pb::WhoAmIRequest {})
        .await;
    match who {
        Ok(w) => {
            let holds = w
                .into_inner()
                .principal
                .is_some_and(|p| p.agent_ids.iter().any(|a| a == agent_id));
            (!holds).then(|| {
                refuse(
                    StatusCode::FORBIDDEN,
                    &format!("this token's principal does not act as agent {agent_id}"),
                )
            })
        }
        Err(s) if s.code() == tonic::Code::Unauthenticated => {
            Some(refuse(StatusCode::UNAUTHORIZED, s.message()))
        }
        Err(s) => Some(refuse(StatusCode::SERVICE_UNAVAILABLE, s.message())),
    }
}

/// Largest request body `/mcp` reads.
const MAX_BODY: usize = 4 * 1024 * 1024;

/// What a POSTed message is, as far as `/mcp` itself must know.
enum Checked {
    /// Answered here: not JSON, not JSON-RPC, or a request whose params
    /// are missing.
    Answer(Response),
    /// A request, by its id.
    Call(Value),
    /// `notifications/cancelled` for the request with this id.
    Cancel(Value),
    /// Anything else, for the MCP service.
    Other,
}

/// Checks a POSTed body the way JSON-RPC clients expect (the MCP service
/// alone answers a malformed one with a bare `415`): not JSON is `-32700`,
/// not a JSON-RPC message `-32600`, both with `400`; a request that needs
/// params and has none is `-32602`.
fn check_message(body: &[u8]) -> Checked {
    let Ok(message) = serde_json::from_slice::<Value>(body) else {
        return Checked::Answer(json_rpc_error(
            StatusCode::BAD_REQUEST,
            &Value::Null,
            -32700,
            "parse error: the body is not JSON",
        ));
    };
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let valid = message.get("jsonrpc").and_then(|v| v.as_str()) == Some("2.0")
        && (message
            .get("method")
            .is_some_and(serde_json::Value::is_string)
            || message.get("result").is_some()
            || message.get("error").is_some());
    if !valid {
        return Checked::Answer(json_rpc_error(
            StatusCode::BAD_REQUEST,
            &id,
            -32600,
            "invalid request: not a JSON-RPC 2.0 message",
        ));
    }
    let method = message.get("method").and_then(|m| m.as_str());
    let params = message.get("params");
    match method {
        Some("tools/call" | "initialize") if !params.is_some_and(serde_json::Value::is_object) => {
            Checked::Answer(json_rpc_error(
                StatusCode::OK,
                &id,
                -32602,
                "invalid params: this method takes a params object",
            ))
        }
        Some("notifications/cancelled") => params
            .and_then(|p| p.get("requestId"))
            .map_or(Checked::Other, |r| Checked::Cancel(r.clone())),
        Some(_) if message.get("id").is_some() => Checked::Call(id),
        _ => Checked::Other,
    }
}

/// A JSON-RPC error response (`id` null when unknown).
fn json_rpc_error(status: StatusCode, id: &Value, code: i64, message: &str) -> Response {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": code, "message": message},
    });
    (
        status,
        [(http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Calls in progress, so that a client can cancel one: by the caller's
/// key, a registration's serial and the way to tell it.
#[derive(Debug, Default)]
struct Running {
    calls: Mutex<HashMap<String, (u64, tokio::sync::oneshot::Sender<()>)>>,
    serial: std::sync::atomic::AtomicU64,
}

/// One call's registration; it unregisters when dropped, whether the call
/// answered or its client went away.
struct Registration<'a> {
    running: &'a Running,
    key: String,
    serial: u64,
    /// Fires when the client cancels the call.
    cancelled: tokio::sync::oneshot::Receiver<()>,
}

impl Running {
    /// Registers a call. The same key registered again (a client reusing
    /// an id) takes it over; the first call then just cannot be cancelled.
    fn start(&self, key: String) -> Registration<'_> {
        let (tx, cancelled) = tokio::sync::oneshot::channel();
        let serial = self
            .serial
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone(), (serial, tx));
        Registration {
            running: self,
            key,
            serial,
            cancelled,
        }
    }

    fn cancel(&self, key: &str) {
        let call = self
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
        if let Some((_, tx)) = call {
            let _ = tx.send(());
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        let mut calls = self
            .running
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if calls.get(&self.key).is_some_and(|(s, _)| *s == self.serial) {
            calls.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_abandoned_call_leaves_no_registration() {
        let running = Running::default();
        // A call whose client went away: its future is dropped unanswered.
        let pending = async {
            let _r = running.start("k\u{0}1".into());
            std::future::pending::<()>().await;
        };
        let _ = tokio::time::timeout(std::time::Duration::from_millis(10), pending).await;
        assert_eq!(running.len(), 0);
        // A reused key: the older registration leaving does not remove the
        // newer one, which can still be cancelled.
        let old = running.start("k".into());
        let mut new = running.start("k".into());
        drop(old);
        running.cancel("k");
        assert!(new.cancelled.try_recv().is_ok());
        assert_eq!(running.len(), 0);
    }
}
