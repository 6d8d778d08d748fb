//! The real server in-process on `127.0.0.1:0`, a real redb file in a temp
//! dir, reached through the generated clients.

use std::net::SocketAddr;

use cairn_api::plan_service_client::PlanServiceClient;
use cairn_api::session_service_client::SessionServiceClient;
use cairn_api::todo_service_client::TodoServiceClient;
use cairn_etcd::EtcdOptions;
use cairn_redb::RedbOptions;
use cairn_server::{Policy, ServeError, ServerConfig, serve};
use cairn_store::Store;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

use crate::etcd::EtcdCluster;

/// A running server and the temp dir holding its database.
pub struct TestServer {
    pub addr: SocketAddr,
    pub config: ServerConfig,
    /// The engine's options (redb; their watch buffer also on etcd).
    pub redb: RedbOptions,
    shutdown: Option<oneshot::Sender<()>>,
    handle: Option<JoinHandle<Result<(), ServeError>>>,
    dir: Option<tempfile::TempDir>,
    /// The etcd cluster behind it, when the suite runs on etcd.
    pub etcd: Option<EtcdCluster>,
}

/// Revision `n` of a fresh store, as the backend numbers it. etcd's empty
/// store is at its own revision 1, and the first open writes the inbox
/// index's mark (revision 2); Cairn's revision is etcd's, so there the
/// first mutation is revision 3. Revision 0 ("nothing yet") is 0 on both.
pub fn rev(n: u64) -> u64 {
    if on_etcd() && n > 0 { n + 2 } else { n }
}

/// Whether this run puts test servers on etcd (`CAIRN_TEST_BACKEND=etcd`):
/// the same suite then checks the etcd engine.
pub fn on_etcd() -> bool {
    std::env::var("CAIRN_TEST_BACKEND").is_ok_and(|b| b == "etcd")
}

impl TestServer {
    /// A server with default settings on a fresh data dir.
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    /// A server on a fresh data dir, with settings adjusted by `f`.
    pub async fn start_with(f: impl FnOnce(&mut Policy)) -> Self {
        Self::start_config(|c| f(&mut c.policy)).await
    }

    /// A server on a fresh data dir with the whole configuration adjusted.
    pub async fn start_config(f: impl FnOnce(&mut ServerConfig)) -> Self {
        Self::start_engine(f, |_| {}).await
    }

    /// A server on a fresh data dir with its configuration and its engine's
    /// options adjusted.
    pub async fn start_engine(
        f: impl FnOnce(&mut ServerConfig),
        e: impl FnOnce(&mut RedbOptions),
    ) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = ServerConfig::new();
        // Webhooks on, as the binary has them on redb: a key in the data dir.
        config.webhooks.key_file = Some(dir.path().join("webhook.key"));
        f(&mut config);
        let mut redb = RedbOptions::new(dir.path().join("data"));
        e(&mut redb);
        let etcd = if on_etcd() {
            Some(EtcdCluster::start(3).await)
        } else {
            None
        };
        let mut server = Self::launch_on(config, redb, etcd.as_ref(), dir).await;
        server.etcd = etcd;
        server
    }

    /// Opens the store this server runs on: etcd when the suite runs
    /// there, else the redb file.
    async fn open(
        redb: RedbOptions,
        etcd: Option<EtcdOptions>,
    ) -> cairn_core::error::Result<Store> {
        match etcd {
            Some(mut opts) => {
                opts.watch_buffer = redb.watch_buffer;
                cairn_etcd::open(&opts).await
            }
            None => tokio::task::spawn_blocking(move || cairn_redb::open(&redb))
                .await
                .expect("open task"),
        }
    }

    async fn launch_on(
        config: ServerConfig,
        redb: RedbOptions,
        etcd: Option<&EtcdCluster>,
        dir: tempfile::TempDir,
    ) -> Self {
        show_logs();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = oneshot::channel::<()>();
        let store = Self::open(redb.clone(), etcd.map(|c| EtcdOptions::new(c.endpoints())));
        let handle = tokio::spawn(serve(listener, config.clone(), store, async {
            let _ = rx.await;
        }));
        TestServer {
            addr,
            config,
            redb,
            shutdown: Some(tx),
            handle: Some(handle),
            dir: Some(dir),
            etcd: None,
        }
    }

    /// Stops gracefully and waits until the database is closed.
    pub async fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(h) = self.handle.take() {
            h.await.expect("server task").expect("server result");
        }
    }

    /// Opens this (stopped) server's store directly: its redb file, or its
    /// etcd cluster, for checks below the API.
    pub async fn open_store(&self) -> Store {
        let etcd = self.etcd.as_ref().map(|c| EtcdOptions::new(c.endpoints()));
        Self::open(self.redb.clone(), etcd)
            .await
            .expect("open the store")
    }

    /// Stops, then starts a new server on the same data dir.
    pub async fn restart(mut self) -> Self {
        self.stop().await;
        let dir = self.dir.take().expect("dir");
        let etcd = self.etcd.take();
        let mut server =
            Self::launch_on(self.config.clone(), self.redb.clone(), etcd.as_ref(), dir).await;
        server.etcd = etcd;
        server
    }

    /// A connected channel; retries briefly while the listener task starts.
    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .expect("uri")
            .connect()
            .await
            .expect("connect")
    }

    pub async fn sessions(&self) -> SessionServiceClient<Channel> {
        SessionServiceClient::new(self.channel().await)
    }

    pub async fn plans(&self) -> PlanServiceClient<Channel> {
        PlanServiceClient::new(self.channel().await)
    }

    pub async fn todos(&self) -> TodoServiceClient<Channel> {
        TodoServiceClient::new(self.channel().await)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Adds `authorization: Bearer <token>` to every call of a client.
#[derive(Debug, Clone)]
pub struct Bearer(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl Bearer {
    /// A token to present; `None` presents none.
    pub fn new(token: Option<&str>) -> Self {
        Bearer(token.map(|t| format!("Bearer {t}").parse().expect("a header value")))
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// A channel that presents `token` on every call.
pub type Authed = tonic::codegen::InterceptedService<Channel, Bearer>;

/// With `CAIRN_TEST_LOG` set (a filter such as `debug` or `cairn_etcd=trace`),
/// the in-process servers' logs go to the test's output: what a failing
/// test did, seen with `--nocapture`.
fn show_logs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Ok(filter) = std::env::var("CAIRN_TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_test_writer()
                .try_init();
        }
    });
}
