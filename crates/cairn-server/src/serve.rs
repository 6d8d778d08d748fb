//! Serving: binds the services, health and reflection to a listener.
//!
//! [`serve`] takes an already bound listener, the opening of a store and a
//! shutdown future, so tests run the real server in-process on
//! `127.0.0.1:0` with no sleeps, and `main` only parses config, chooses the
//! engine and calls it: this crate names no engine. Connections are served by
//! [`super::conn`], which bounds what each client may hold.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use tokio::net::TcpListener;
use tonic::Status;
use tonic::service::Routes;
use tonic_types::{ErrorDetails, StatusExt};

use cairn_api as pb;
use cairn_store::compactor::{self, Retention};
use cairn_store::lessor::LeaseConfig;
use cairn_store::{Readiness, Store};

use crate::auth::{Auth, AuthMode};
use crate::conn::{self, ConnLimits};
use crate::services::auth::AuthApi;
use crate::services::plan::PlanApi;
use crate::services::session::SessionApi;
use crate::services::todo::TodoApi;
use crate::services::watch::WatchApi;
use crate::services::{Policy, State};
use crate::site::Site;
use crate::status::ERROR_DOMAIN;
use crate::tls::{TlsError, TlsFiles};

/// Default largest request a client may send, as gRPC's own default.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// Everything `cairn serve` needs besides the listener.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The operator's rules.
    pub policy: Policy,
    /// Heartbeat of idle watch streams that ask for no interval.
    pub progress_interval: Duration,
    /// How much of the event log watchers can replay.
    pub retention: Retention,
    /// Address of the web dashboard; off when unset.
    pub web_listen: Option<std::net::SocketAddr>,
    /// Origins (`https://cairn.example.com`) browsers may reach the server
    /// under besides its listen addresses: their hosts are accepted as
    /// `Host`, and their pages may call the dashboard, Connect and gRPC-Web.
    pub web_origins: Vec<String>,
    /// Bounds on the connections of both listeners.
    pub conn: ConnLimits,
    /// Largest request message accepted, in bytes.
    pub max_request_bytes: usize,
    /// How callers authenticate.
    pub auth: AuthMode,
    /// With token authentication: a file whose trimmed contents are the
    /// bootstrap admin's token (a mounted secret).
    pub admin_token_file: Option<std::path::PathBuf>,
    /// Serve without authentication on addresses other than loopback.
    pub allow_unauthenticated: bool,
    /// TLS for both listeners; plaintext when unset.
    pub tls: Option<TlsFiles>,
    /// Trace spans are exported (OTLP): each call's span continues the
    /// caller's trace from its `traceparent` metadata.
    pub trace_context: bool,
    /// Address of the Prometheus `/metrics` listener; off when unset.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// More routes on the web listener, outside the dashboard's cookie and
    /// CSRF guard (they bring their own): `/mcp`, which the binary wires in
    /// from the MCP client so that the server never imports a client.
    pub web_extra: Option<WebRoutes>,
    /// Lease timings: default TTL and grace, idle time, this server's name.
    pub leases: LeaseConfig,
    /// Webhook deliveries: attempts, backoff, the sealing key.
    pub webhooks: crate::webhooks::WebhookConfig,
}

/// Routes added to the web listener.
#[derive(Clone)]
pub struct WebRoutes(pub axum::Router);

impl std::fmt::Debug for WebRoutes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebRoutes")
    }
}

impl ServerConfig {
    /// Defaults: loopback, no authentication, no dashboard.
    pub fn new() -> Self {
        ServerConfig {
            policy: Policy::default(),
            progress_interval: Duration::from_secs(10),
            retention: Retention::default(),
            web_listen: None,
            web_origins: Vec::new(),
            conn: ConnLimits::default(),
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            auth: AuthMode::Off,
            admin_token_file: None,
            allow_unauthenticated: false,
            tls: None,
            web_extra: None,
            metrics_listen: None,
            trace_context: false,
            leases: LeaseConfig::default(),
            webhooks: crate::webhooks::WebhookConfig::default(),
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig::new()
    }
}

/// Errors that stop the server.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The store could not be opened.
    #[error("opening the store: {0}")]
    Store(#[from] cairn_core::error::Error),
    /// Reflection could not be built from the descriptor set.
    #[error("reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The web dashboard could not listen or failed.
    #[error("web dashboard: {0}")]
    Web(#[from] std::io::Error),
    /// The configuration is unsafe or incomplete.
    #[error("{0}")]
    Config(String),
    /// TLS could not be set up.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// The names health reports per service.
const SERVICES: &[&str] = &[
    "",
    "cairn.v1.AdminService",
    "cairn.v1.AuthService",
    "cairn.v1.SessionService",
    "cairn.v1.PlanService",
    "cairn.v1.TodoService",
    "cairn.v1.WatchService",
];

/// The health service that reports reduced redundancy (an etcd member out
/// of rotation) as NOT_SERVING while the others stay SERVING.
pub const REDUNDANCY_SERVICE: &str = "cairn.store.redundancy";

/// Serves on `listener` until `shutdown` completes, then lets in-flight
/// requests finish (within the drain deadline) and closes the store (every
/// queued write is committed and answered first). `open` opens the store:
/// it is awaited only once the configuration has been found safe.
pub async fn serve(
    listener: TcpListener,
    config: ServerConfig,
    open: impl Future<Output = cairn_core::error::Result<Store>> + Send,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    // Refuse an unsafe configuration before touching the store.
    let listen_addrs = [listener.local_addr().ok(), config.web_listen];
    check_exposure(&config, &listen_addrs)?;
    let admin_token = read_admin_token(&config)?;
    let store = open.await?.with_limits(config.policy.limits.clone());
    store.hub().leases().configure(config.leases.clone());
    if !config.leases.holder.is_empty() {
        store.announce(&config.leases.holder).await?;
    }
    let leased = store.load_leases().await?;
    tracing::info!(leased, "leases re-armed with a full TTL");
    let liveness = tokio::spawn(store.clone().drive_leases());
    // Deadlines that passed while no server ran fall due at once.
    let deadlines = store.load_deadlines().await?;
    tracing::info!(deadlines, "approval deadlines followed");
    let enforcer = tokio::spawn(store.clone().drive_deadlines());
    let web = match config.web_listen {
        Some(addr) => {
            let web = TcpListener::bind(addr).await?;
            tracing::info!(web_listen = %web.local_addr()?, "web dashboard serving");
            Some(web)
        }
        None => None,
    };
    let auth = Auth::new(config.auth, admin_token.as_deref(), store.clone());
    let compaction = tokio::spawn(compactor::run(store.clone(), config.retention));
    let tls = config
        .tls
        .as_ref()
        .map(TlsFiles::server_config)
        .transpose()?;
    let metrics_task = match config.metrics_listen {
        Some(addr) => {
            let listener = crate::metrics::bind(addr)
                .await
                .map_err(|e| ServeError::Config(format!("--metrics-listen {addr}: {e}")))?;
            if tls.is_none() && !addr.ip().is_loopback() {
                tracing::warn!(metrics_listen = %addr, "metrics are served in plaintext and without authentication beyond loopback: anyone who reaches the port reads them (serve with --tls-cert, or bind to loopback behind a proxy)");
            }
            crate::metrics::install().map(|handle| {
                tokio::spawn(crate::metrics::serve(
                    listener,
                    handle,
                    store.clone(),
                    config.conn,
                    tls.clone(),
                    std::future::pending(),
                ))
            })
        }
        None => None,
    };
    // Only now, with every listener bound and every secret read: a start
    // that fails never claims to serve.
    let listen = listener
        .local_addr()
        .map_or_else(|e| format!("unknown ({e})"), |a| a.to_string());
    tracing::info!(
        listen = %listen,
        data = %store.describe(),
        revision = store.revision(),
        "cairn serving"
    );
    let result = serve_store(listener, web, store.clone(), auth, tls, &config, shutdown).await;
    compaction.abort();
    liveness.abort();
    enforcer.abort();
    if let Some(task) = metrics_task {
        task.abort();
    }
    store.close().await;
    tracing::info!("cairn stopped");
    result
}

/// Refuses to serve without authentication where others can reach it.
fn check_exposure(
    config: &ServerConfig,
    addrs: &[Option<std::net::SocketAddr>],
) -> Result<(), ServeError> {
    if config.auth == AuthMode::Token {
        if config.admin_token_file.is_none() {
            tracing::warn!(
                "--auth token without --admin-token-file: only principals already in the store can call"
            );
        }
        return Ok(());
    }
    let exposed: Vec<String> = addrs
        .iter()
        .flatten()
        .filter(|a| !a.ip().is_loopback())
        .map(ToString::to_string)
        .collect();
    if exposed.is_empty() || config.allow_unauthenticated {
        if !exposed.is_empty() {
            tracing::warn!(listen = %exposed.join(","), "serving WITHOUT authentication beyond loopback (--allow-unauthenticated): anyone who reaches it may do anything");
        }
        return Ok(());
    }
    Err(ServeError::Config(format!(
        "refusing to listen on {} with --auth off: anyone who can reach it could approve plans, write todos and delete sessions. Use --auth token with --admin-token-file, or accept the risk with --allow-unauthenticated",
        exposed.join(" and ")
    )))
}

/// The bootstrap admin's token, from its file.
fn read_admin_token(config: &ServerConfig) -> Result<Option<String>, ServeError> {
    let Some(path) = &config.admin_token_file else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| ServeError::Config(format!("--admin-token-file {}: {e}", path.display())))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        if std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o077 != 0) {
            tracing::warn!(path = %path.display(), "--admin-token-file is readable by other users: whoever reads it is admin (chmod 600 it)");
        }
    }
    let token = text.trim().to_owned();
    if token.len() < 16 {
        return Err(ServeError::Config(format!(
            "--admin-token-file {}: the token must be at least 16 characters",
            path.display()
        )));
    }
    Ok(Some(token))
}

/// The webhook deliverer over `store`, running.
fn start_webhooks(
    store: &Store,
    config: &ServerConfig,
) -> Result<(Arc<crate::webhooks::Webhooks>, tokio::task::JoinHandle<()>), ServeError> {
    let webhooks = crate::webhooks::Webhooks::new(store.clone(), config.webhooks.clone())
        .map_err(|e| ServeError::Config(format!("--webhook-key-file: {e}")))?;
    let webhooks = Arc::new(webhooks);
    Ok((Arc::clone(&webhooks), tokio::spawn(webhooks.run())))
}

/// Serves an already opened store (the caller closes it).
pub async fn serve_store(
    listener: TcpListener,
    web: Option<TcpListener>,
    store: Store,
    auth: Arc<Auth>,
    tls: Option<Arc<rustls::ServerConfig>>,
    config: &ServerConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let hub = Arc::clone(store.hub());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (webhooks, deliveries) = start_webhooks(&store, config)?;
    let state = State {
        store: store.clone(),
        policy: Arc::new(config.policy.clone()),
        progress_interval: config.progress_interval,
        auth: Arc::clone(&auth),
        webhooks,
    };

    let (health, health_service) = tonic_health::server::health_reporter();
    // Health follows the store: NOT_SERVING while it cannot write (a full
    // disk) or its file is corrupt, so orchestrators route around it.
    let mut condition = store.condition();
    let health_task = tokio::spawn(async move {
        loop {
            let now = *condition.borrow_and_update();
            let status = match now {
                Readiness::Serving | Readiness::Degraded => tonic_health::ServingStatus::Serving,
                Readiness::Recovering | Readiness::Corrupt => {
                    tonic_health::ServingStatus::NotServing
                }
            };
            for name in SERVICES {
                health.set_service_status(*name, status).await;
            }
            // Serving, but one more failure from not: what an operator
            // alerts on without a load balancer draining the replica.
            let redundancy = match now {
                Readiness::Serving => tonic_health::ServingStatus::Serving,
                _ => tonic_health::ServingStatus::NotServing,
            };
            health
                .set_service_status(REDUNDANCY_SERVICE, redundancy)
                .await;
            if condition.changed().await.is_err() {
                return;
            }
        }
    });

    let routes = api_routes(&state, health_service, config.max_request_bytes)?;
    let max = config.max_request_bytes;
    // One rule for what browsers may reach, on both listeners.
    let listens: Vec<std::net::SocketAddr> = [
        listener.local_addr().ok(),
        web.as_ref().and_then(|w| w.local_addr().ok()),
    ]
    .into_iter()
    .flatten()
    .collect();
    let site = Arc::new(Site::new(&listens, &config.web_origins));
    let grpc = crate::site::Gate::new(
        crate::connect::Connect::new(
            crate::metrics::Rpc::new(
                Edge {
                    inner: tonic_web::GrpcWebLayer::new().layer(routes),
                    auth: Arc::clone(&auth),
                    traced: config.trace_context,
                },
                config.metrics_listen.is_some(),
            ),
            max,
            auth,
        ),
        Arc::clone(&site),
    );

    let agent_card = agent_card(&listener, web.as_ref(), tls.is_some(), &state)?;
    let web_task = web.map(|listener| {
        let mut stopped = stopped.clone();
        let web = crate::web::Web::new(state.clone(), Arc::clone(&site), tls.is_some())
            .with_agent_card(agent_card.clone());
        tokio::spawn(conn::serve(
            listener,
            web_router(web, config.web_extra.as_ref()),
            config.conn,
            tls.clone(),
            "web",
            async move {
                let _ = stopped.wait_for(|s| *s).await;
            },
        ))
    });

    // Watch streams never end on their own: tell them to, or graceful
    // shutdown would wait for them until the drain deadline.
    let shutdown = async move {
        shutdown.await;
        tracing::info!("shutting down: refusing new connections, draining open ones");
        hub.close();
        let _ = stop.send(true);
    };
    let mut stopped_grpc = stopped.clone();
    tokio::join!(
        shutdown,
        conn::serve(listener, grpc, config.conn, tls, "grpc", async move {
            let _ = stopped_grpc.wait_for(|s| *s).await;
        })
    );
    if let Some(task) = web_task
        && let Err(e) = task.await
    {
        tracing::warn!(error = %e, "web dashboard task failed");
    }
    health_task.abort();
    deliveries.abort();
    Ok(())
}

use tower::Layer as _;

/// The A2A agent card of a server whose gRPC port is `listener` (and web
/// listener `web`, which serves the JSON-RPC binding), named as a client on
/// this machine dials them (a bind to every address is reached on
/// loopback).
fn agent_card(
    listener: &TcpListener,
    web: Option<&TcpListener>,
    tls: bool,
    state: &State,
) -> Result<String, ServeError> {
    let auth = state.auth.mode() != crate::auth::AuthMode::Off;
    let scheme = if tls { "https" } else { "http" };
    let addr = |l: &TcpListener| {
        l.local_addr().map_or_else(
            |_| String::new(),
            |mut a| {
                if a.ip().is_unspecified() {
                    a.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
                }
                a.to_string()
            },
        )
    };
    // The gRPC interface is a gRPC target (`host:port`): both SDKs hand the
    // URL to their channel as it is, and a channel takes no scheme.
    let jsonrpc = web.map(|w| format!("{scheme}://{}{}", addr(w), crate::web::JSONRPC_PATH));
    Ok(crate::services::a2a::agent_card_json(
        &addr(listener),
        jsonrpc.as_deref(),
        auth,
        state.webhooks.enabled(),
    )?)
}

/// Every gRPC service: the API, health and reflection.
fn api_routes(
    state: &State,
    health_service: tonic_health::pb::health_server::HealthServer<
        impl tonic_health::pb::health_server::Health,
    >,
    max: usize,
) -> Result<Routes, ServeError> {
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;

    Ok(Routes::new(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(
            pb::session_service_server::SessionServiceServer::new(SessionApi::new(state.clone()))
                .max_decoding_message_size(max),
        )
        .add_service(
            pb::plan_service_server::PlanServiceServer::new(PlanApi::new(state.clone()))
                .max_decoding_message_size(max),
        )
        .add_service(
            pb::todo_service_server::TodoServiceServer::new(TodoApi::new(state.clone()))
                .max_decoding_message_size(max),
        )
        .add_service(
            pb::watch_service_server::WatchServiceServer::new(WatchApi::new(state.clone()))
                .max_decoding_message_size(max),
        )
        .add_service(
            pb::auth_service_server::AuthServiceServer::new(AuthApi::new(state.clone()))
                .max_decoding_message_size(max),
        )
        .add_service(
            pb::admin_service_server::AdminServiceServer::new(
                crate::services::admin::AdminApi::new(state.clone()),
            )
            .max_decoding_message_size(max),
        )
        .add_service(
            pb::a2a::a2a_service_server::A2aServiceServer::new(crate::services::a2a::A2aApi::new(
                state.clone(),
            ))
            .max_decoding_message_size(max),
        )
        .prepare())
}

/// The dashboard, plus the routes the binary adds (outside its guard).
fn web_router(web: crate::web::Web, extra: Option<&WebRoutes>) -> axum::Router {
    match extra {
        Some(extra) => web.router().merge(extra.0.clone()),
        None => web.router(),
    }
}

/// What every gRPC call passes through on its way in and out: who the
/// caller is, the client's deadline (`grpc-timeout`), and gRPC's code for
/// an oversized request.
#[derive(Clone)]
struct Edge<S> {
    inner: S,
    auth: Arc<Auth>,
    /// Spans are exported: continue the caller's trace (`traceparent`).
    traced: bool,
}

/// Calls anyone may make: probes and API discovery.
fn is_open_path(path: &str) -> bool {
    path.starts_with("/grpc.health.v1.Health/") || path.starts_with("/grpc.reflection.")
}

/// The text tonic gives a request over `max_decoding_message_size`.
const TOO_LARGE: &str = "Error, decoded message length too large";

impl<S, ReqB, B> tower::Service<Request<ReqB>> for Edge<S>
where
    S: tower::Service<Request<ReqB>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    ReqB: Send + 'static,
    B: Default + Send + 'static,
{
    type Response = Response<B>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<B>, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        let deadline = req
            .headers()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_grpc_timeout);
        // The inner service was made ready for this call; a clone takes its
        // place for the next one.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let auth = Arc::clone(&self.auth);
        let traced = self.traced;
        Box::pin(async move {
            // Connect authenticated it already, before reading its body.
            let known = req
                .extensions()
                .get::<crate::auth::Authenticated>()
                .is_some();
            if !known
                && !is_open_path(req.uri().path())
                && let Err(e) = auth.identify(&mut req).await
            {
                return Ok(crate::status::status(e).into_http());
            }
            let span = if traced {
                crate::metrics::rpc_span(&req)
            } else {
                tracing::Span::none()
            };
            let fut = tracing::Instrument::instrument(inner.call(req), span);
            let response = match deadline {
                Some(d) => match tokio::time::timeout(d, fut).await {
                    Ok(r) => r?,
                    Err(_) => return Ok(Status::deadline_exceeded("deadline exceeded").into_http()),
                },
                None => fut.await?,
            };
            Ok(oversized_to_resource_exhausted(response))
        })
    }
}

/// tonic answers an oversized request with OUT_OF_RANGE; gRPC's convention
/// (and every other limit of Cairn) is RESOURCE_EXHAUSTED with a reason.
fn oversized_to_resource_exhausted<B: Default>(response: Response<B>) -> Response<B> {
    let Some(status) = Status::from_header_map(response.headers()) else {
        return response;
    };
    if status.code() != tonic::Code::OutOfRange || !status.message().starts_with(TOO_LARGE) {
        return response;
    }
    let numbers: Vec<&str> = status
        .message()
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .collect();
    let mut meta = HashMap::new();
    if let [actual, limit, ..] = numbers.as_slice() {
        meta.insert("actual".to_owned(), (*actual).to_owned());
        meta.insert("limit".to_owned(), (*limit).to_owned());
    }
    let message = format!(
        "request: message size exceeds the limit of {} bytes (got {})",
        meta.get("limit").map_or("?", String::as_str),
        meta.get("actual").map_or("?", String::as_str),
    );
    let details = ErrorDetails::with_error_info("LIMIT_EXCEEDED", ERROR_DOMAIN, meta);
    Status::with_error_details(tonic::Code::ResourceExhausted, message, details).into_http()
}

/// `grpc-timeout`: up to 8 digits and a unit (H, M, S, m, u, n).
fn parse_grpc_timeout(text: &str) -> Option<Duration> {
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts() {
        assert_eq!(parse_grpc_timeout("100m"), Some(Duration::from_millis(100)));
        assert_eq!(parse_grpc_timeout("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_grpc_timeout("123456789S"), None);
        assert_eq!(parse_grpc_timeout("S"), None);
        assert_eq!(parse_grpc_timeout(""), None);
        assert_eq!(parse_grpc_timeout("5x"), None);
    }
}
