//! The harness: start, stop and restart a real server in-process.

use std::net::SocketAddr;

use cairn::api::Policy;
use cairn::api::server::{ServeError, ServerConfig, serve};
use cairn::pb;
use cairn::pb::plan_service_client::PlanServiceClient;
use cairn::pb::session_service_client::SessionServiceClient;
use cairn::pb::todo_service_client::TodoServiceClient;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use tonic::{Code, Status};
use tonic_types::StatusExt;

/// A running server and the temp dir holding its database.
pub struct TestServer {
    pub addr: SocketAddr,
    pub config: ServerConfig,
    shutdown: Option<oneshot::Sender<()>>,
    handle: Option<JoinHandle<Result<(), ServeError>>>,
    dir: Option<tempfile::TempDir>,
}

impl TestServer {
    /// A server with default settings on a fresh data dir.
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    /// A server on a fresh data dir, with settings adjusted by `f`.
    pub async fn start_with(f: impl FnOnce(&mut Policy)) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = ServerConfig::new(dir.path().join("data"));
        f(&mut config.policy);
        Self::launch(config, dir).await
    }

    /// A server on a fresh data dir with the whole configuration adjusted.
    pub async fn start_config(f: impl FnOnce(&mut ServerConfig)) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = ServerConfig::new(dir.path().join("data"));
        f(&mut config);
        Self::launch(config, dir).await
    }

    async fn launch(config: ServerConfig, dir: tempfile::TempDir) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = oneshot::channel::<()>();
        let handle = tokio::spawn(serve(listener, config.clone(), async {
            let _ = rx.await;
        }));
        TestServer {
            addr,
            config,
            shutdown: Some(tx),
            handle: Some(handle),
            dir: Some(dir),
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

    /// Stops, then starts a new server on the same data dir.
    pub async fn restart(mut self) -> Self {
        self.stop().await;
        let dir = self.dir.take().expect("dir");
        Self::launch(self.config.clone(), dir).await
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

/// Asserts code, exact message and `ErrorInfo` reason of an error.
#[track_caller]
pub fn assert_status(status: &Status, code: Code, message: &str, reason: &str) {
    assert_eq!(status.code(), code, "code of {status:?}");
    assert_eq!(status.message(), message, "message of {status:?}");
    let info = status
        .get_details_error_info()
        .unwrap_or_else(|| panic!("no ErrorInfo in {status:?}"));
    assert_eq!(info.reason, reason, "reason of {status:?}");
    assert_eq!(info.domain, "cairn.dev");
}

/// The `BadRequest` field of an INVALID_ARGUMENT (or limit) error.
#[track_caller]
pub fn bad_field(status: &Status) -> String {
    status
        .get_details_bad_request()
        .and_then(|b| b.field_violations.first().map(|v| v.field.clone()))
        .unwrap_or_else(|| panic!("no BadRequest in {status:?}"))
}

pub fn item(step: &str, status: pb::StepStatus) -> pb::PlanItem {
    pb::PlanItem {
        id: 0,
        step: step.into(),
        status: status.into(),
    }
}

/// A five-step plan (seed 1's first example), one in progress.
pub fn five_steps() -> Vec<pb::PlanItem> {
    use pb::StepStatus::{Completed, InProgress, Pending};
    vec![
        item("Design the database schema", Completed),
        item("Implement the sign-up API", InProgress),
        item("Implement the login API", Pending),
        item("Add password hashing", Pending),
        item("Write unit tests", Pending),
    ]
}

pub fn update(session: &str, items: Vec<pb::PlanItem>) -> pb::UpdatePlanRequest {
    pb::UpdatePlanRequest {
        session_id: session.into(),
        explanation: "Implement user authentication".into(),
        plan: items,
        expected_revision: None,
    }
}

pub fn session(id: &str, parent: &str) -> pb::CreateSessionRequest {
    pb::CreateSessionRequest {
        session: Some(pb::Session {
            session_id: id.into(),
            parent_session_id: parent.into(),
            agent_id: format!("agent-{id}"),
            title: format!("session {id}"),
            ..pb::Session::default()
        }),
    }
}

pub fn todo(id: &str, status: pb::TodoStatus) -> pb::TodoItem {
    pb::TodoItem {
        id: id.into(),
        content: format!("do {id}"),
        status: status.into(),
        priority: pb::Priority::Medium.into(),
        ..pb::TodoItem::default()
    }
}

/// The start of a long text, for assertion messages.
pub fn short(text: &str) -> String {
    text.chars().take(40).collect()
}
