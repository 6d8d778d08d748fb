//! The server: binds services, health and reflection to a listener.
//!
//! [`serve`] takes an already bound listener and a shutdown future, so tests
//! run the real server in-process on `127.0.0.1:0` with no sleeps, and
//! `main` only parses config and calls it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

use super::plan::PlanApi;
use super::session::SessionApi;
use super::todo::TodoApi;
use super::watch::WatchApi;
use super::{Policy, State};
use crate::pb;
use crate::store::compactor::{self, Retention};
use crate::store::{Store, StoreOptions};

/// Everything `cairn serve` needs besides the listener.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Where and how the store lives.
    pub store: StoreOptions,
    /// The operator's rules.
    pub policy: Policy,
    /// Heartbeat of idle watch streams that ask for no interval.
    pub progress_interval: Duration,
    /// How much of the event log watchers can replay.
    pub retention: Retention,
    /// Address of the web dashboard; off when unset.
    pub web_listen: Option<std::net::SocketAddr>,
}

impl ServerConfig {
    /// Defaults around a data directory.
    pub fn new(data_dir: impl Into<std::path::PathBuf>) -> Self {
        ServerConfig {
            store: StoreOptions::new(data_dir),
            policy: Policy::default(),
            progress_interval: Duration::from_secs(10),
            retention: Retention::default(),
            web_listen: None,
        }
    }
}

/// Errors that stop the server.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The store could not be opened.
    #[error("opening the store: {0}")]
    Store(#[from] crate::error::Error),
    /// The transport failed.
    #[error("serving: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// Reflection could not be built from the descriptor set.
    #[error("reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The web dashboard could not listen or failed.
    #[error("web dashboard: {0}")]
    Web(#[from] std::io::Error),
}

/// The names health reports per service.
const SERVICES: &[&str] = &[
    "cairn.v1.SessionService",
    "cairn.v1.PlanService",
    "cairn.v1.TodoService",
    "cairn.v1.WatchService",
];

/// Serves on `listener` until `shutdown` completes, then lets in-flight
/// requests finish and closes the store (every queued write is committed
/// and answered first).
pub async fn serve(
    listener: TcpListener,
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let opts = config.store.clone();
    let store = tokio::task::spawn_blocking(move || Store::open(&opts))
        .await
        .map_err(|e| crate::error::Error::Storage(format!("open task: {e}")))??;
    let listen = listener
        .local_addr()
        .map_or_else(|e| format!("unknown ({e})"), |a| a.to_string());
    tracing::info!(
        listen = %listen,
        db = %store.path().display(),
        revision = store.revision(),
        "cairn serving"
    );
    let web = match config.web_listen {
        Some(addr) => {
            let web = TcpListener::bind(addr).await?;
            tracing::info!(web_listen = %web.local_addr()?, "web dashboard serving");
            Some(web)
        }
        None => None,
    };
    let compaction = tokio::spawn(compactor::run(store.clone(), config.retention));
    let result = serve_store(listener, web, store.clone(), &config, shutdown).await;
    compaction.abort();
    store.close().await;
    tracing::info!("cairn stopped");
    result
}

/// Serves an already opened store (the caller closes it).
pub async fn serve_store(
    listener: TcpListener,
    web: Option<TcpListener>,
    store: Store,
    config: &ServerConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let hub = std::sync::Arc::clone(store.hub());
    let (web_stop, web_stopped) = tokio::sync::oneshot::channel::<()>();
    // Watch streams never end on their own: tell them to, or graceful
    // shutdown would wait for them forever.
    let shutdown = async move {
        shutdown.await;
        hub.close();
        let _ = web_stop.send(());
    };
    let state = State {
        store,
        policy: Arc::new(config.policy.clone()),
        progress_interval: config.progress_interval,
    };
    let web_task = web.map(|listener| {
        tokio::spawn(crate::web::serve(listener, state.clone(), async {
            let _ = web_stopped.await;
        }))
    });

    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    for name in SERVICES {
        health
            .set_service_status(*name, tonic_health::ServingStatus::Serving)
            .await;
    }

    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;

    Server::builder()
        .accept_http1(true)
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .layer(tonic_web::GrpcWebLayer::new())
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(pb::session_service_server::SessionServiceServer::new(
            SessionApi::new(state.clone()),
        ))
        .add_service(pb::plan_service_server::PlanServiceServer::new(
            PlanApi::new(state.clone()),
        ))
        .add_service(pb::todo_service_server::TodoServiceServer::new(
            TodoApi::new(state.clone()),
        ))
        .add_service(pb::watch_service_server::WatchServiceServer::new(
            WatchApi::new(state),
        ))
        // Small gRPC frames must not wait for Nagle and delayed ACKs: without
        // no-delay a response can sit 40 ms in the kernel.
        .serve_with_incoming_shutdown(
            TcpIncoming::from(listener)
                .with_nodelay(Some(true))
                .with_keepalive(Some(Duration::from_secs(60))),
            shutdown,
        )
        .await?;
    if let Some(task) = web_task {
        match task.await {
            Ok(result) => result?,
            Err(e) => tracing::warn!(error = %e, "web dashboard task failed"),
        }
    }
    Ok(())
}
