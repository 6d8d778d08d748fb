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

use std::sync::Arc;
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

/// The `/mcp` route.
pub fn router(config: McpHttp) -> Router {
    Router::new()
        .route("/mcp", any(serve))
        .with_state(Arc::new(config))
}

fn refuse(status: StatusCode, message: &str) -> Response {
    // A JSON-RPC error object, which MCP clients show as it is.
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32600, "message": message},
    });
    (
        status,
        [(http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn serve(
    State(config): State<Arc<McpHttp>>,
    Query(agent): Query<AgentQuery>,
    request: Request,
) -> Response {
    let Some(agent_id) = agent.agent_id.filter(|a| !a.is_empty()) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "the agent_id query parameter is required: /mcp?agent_id=…&session_id=…&parent_session_id=…",
        );
    };
    let token: Option<HeaderValue> = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .cloned()
        .map(|mut v| {
            v.set_sensitive(true);
            v
        });
    let api = Api::with(config.channel.clone(), token, config.call_timeout);
    if config.auth {
        // The principal must act as this agent: an agent's token names its
        // agent ids, and nobody else's tools may speak for it.
        let who = pb::auth_service_client::AuthServiceClient::new(api.clone())
            .who_am_i(pb::WhoAmIRequest {})
            .await;
        match who {
            Ok(w) => {
                let holds = w
                    .into_inner()
                    .principal
                    .is_some_and(|p| p.agent_ids.contains(&agent_id));
                if !holds {
                    return refuse(
                        StatusCode::FORBIDDEN,
                        &format!("this token's principal does not act as agent {agent_id}"),
                    );
                }
            }
            Err(s) if s.code() == tonic::Code::Unauthenticated => {
                return refuse(StatusCode::UNAUTHORIZED, s.message());
            }
            Err(s) => return refuse(StatusCode::SERVICE_UNAVAILABLE, s.message()),
        }
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
    };
    let tools = CairnTools::new(args, api);
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
    match service.oneshot(request.map(Body::new)).await {
        Ok(response) => response.map(Body::new),
        Err(never) => match never {},
    }
}
