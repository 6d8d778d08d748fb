//! Serving TCP connections with bounds: the accept loop under the gRPC port
//! and the dashboard.
//!
//! Every connection costs the server a task, buffers and a file descriptor,
//! so a client must not be able to hold them for free:
//!
//! - at most `max_connections` are open at once; one more is closed at once
//!   (the client sees a reset and can try another replica), with a log line;
//! - a connection that has not sent a whole request within
//!   `header_read_timeout` is closed (a slow or partial request), and so is
//!   an HTTP/1 request whose headers do not finish in that time;
//! - a connection with no request in flight for `idle_timeout` is closed
//!   gracefully (HTTP/2 `GOAWAY`); open watch streams count as in flight;
//! - a request body must keep coming: it has `body_read_timeout`, plus a
//!   second for every [`MIN_BODY_RATE`] bytes it brings; past that the
//!   request fails and its connection is closed (a body trickled a byte at
//!   a time no longer holds a connection for ever);
//! - one peer address holds at most `max_connections_per_peer` of the
//!   connections, so a handful of remote sockets cannot take them all;
//! - when `accept` fails (out of file descriptors), the loop backs off and
//!   says so, instead of spinning;
//! - on shutdown the listener closes at once (new connections are refused,
//!   not left hanging), open connections get `drain_timeout` to finish, and
//!   whatever is left then is closed.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

/// Boxed error of a response body.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The response body every connection serves.
pub type BoxBody = UnsyncBoxBody<Bytes, BoxError>;

/// Bounds on connections; each is a `cairn serve` flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Connections open at once.
    pub max_connections: usize,
    /// How long a connection may stay without a request in flight.
    pub idle_timeout: Duration,
    /// How long a new connection (or an HTTP/1 request's headers) may take
    /// to deliver a whole request.
    pub header_read_timeout: Duration,
    /// How long open connections get to finish after shutdown begins.
    pub drain_timeout: Duration,
    /// How long a request body may take, before its size's allowance.
    pub body_read_timeout: Duration,
    /// Connections one peer address may hold at once.
    pub max_connections_per_peer: usize,
}

/// Bytes a second a request body must average, past `body_read_timeout`.
pub const MIN_BODY_RATE: u64 = 64 * 1024;

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_connections: 4096,
            idle_timeout: Duration::from_secs(300),
            header_read_timeout: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(20),
            body_read_timeout: Duration::from_secs(30),
            max_connections_per_peer: 1024,
        }
    }
}

/// Serves `svc` on every connection `listener` accepts (over TLS with
/// `tls`), within `limits`, until `shutdown` completes and the connections
/// have drained.
pub async fn serve<S, B>(
    listener: TcpListener,
    svc: S,
    limits: ConnLimits,
    tls: Option<Arc<rustls::ServerConfig>>,
    what: &'static str,
    shutdown: impl Future<Output = ()>,
) where
    S: tower::Service<Request<ReqBody>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(10))
        .max_pending_accept_reset_streams(Some(64));
    let builder = Arc::new(builder);
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let (stop, stopping) = watch::channel(false);
    let mut tasks = JoinSet::new();
    let mut backoff = Duration::from_millis(5);
    let mut refused = Throttle::default();
    let peers = Arc::new(Peers::default());
    let mut failed = Throttle::default();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    backoff = Duration::from_millis(5);
                    let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                        if refused.due() {
                            tracing::warn!(server = what, limit = limits.max_connections, "connection limit reached: closing new connections");
                        }
                        drop(stream);
                        continue;
                    };
                    let Some(peer_slot) = peers.take(peer.ip(), limits.max_connections_per_peer) else {
                        if refused.due() {
                            tracing::warn!(server = what, %peer, limit = limits.max_connections_per_peer, "per-peer connection limit reached: closing its new connections");
                        }
                        drop(stream);
                        continue;
                    };
                    // Small gRPC frames must not wait for Nagle and delayed
                    // ACKs: without no-delay a response can sit 40 ms in
                    // the kernel. Keepalive finds peers that vanished.
                    let _ = stream.set_nodelay(true);
                    let _ = socket2::SockRef::from(&stream).set_tcp_keepalive(
                        &socket2::TcpKeepalive::new().with_time(Duration::from_secs(60)),
                    );
                    let conn = Connection {
                        builder: Arc::clone(&builder),
                        limits,
                        stopping: stopping.clone(),
                        tls: tls.clone().map(tokio_rustls::TlsAcceptor::from),
                    };
                    tasks.spawn(conn.run(stream, peer, svc.clone(), (slot, peer_slot)));
                }
                Err(e) if is_per_connection(&e) => {}
                Err(e) => {
                    // Out of file descriptors (or memory): nothing to accept
                    // until some close, so wait rather than spin.
                    if failed.due() {
                        tracing::warn!(server = what, error = %e, open = tasks.len(), "cannot accept connections; backing off");
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            },
        }
    }
    // New connections are refused from here on, not left in the backlog.
    drop(listener);
    let _ = stop.send(true);
    let deadline = tokio::time::sleep(limits.drain_timeout);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            next = tasks.join_next() => if next.is_none() { break },
            () = &mut deadline => {
                tracing::warn!(server = what, open = tasks.len(), "drain deadline passed: closing the remaining connections");
                tasks.shutdown().await;
                break;
            }
        }
    }
}

/// Errors of one incoming connection, not of the listener.
fn is_per_connection(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionReset, Interrupted, WouldBlock};
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | Interrupted | WouldBlock
    )
}

/// At most one log line a second for a repeated condition.
#[derive(Debug, Default)]
struct Throttle(Option<Instant>);

impl Throttle {
    fn due(&mut self) -> bool {
        let now = Instant::now();
        if self
            .0
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            return false;
        }
        self.0 = Some(now);
        true
    }
}

/// What a connection's timers look at.
#[derive(Debug)]
struct Activity {
    opened: Instant,
    /// Requests (and response bodies, e.g. watch streams) in flight.
    in_flight: AtomicUsize,
    /// Milliseconds after `opened` when the last request ended.
    last_ms: AtomicU64,
    /// Whether any whole request arrived yet.
    requested: AtomicBool,
    /// A request body stopped coming: the connection is closed.
    stalled: AtomicBool,
}

impl Activity {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn idle_for(&self) -> Option<Duration> {
        (self.in_flight.load(Ordering::Acquire) == 0).then(|| {
            Duration::from_millis(
                self.now_ms()
                    .saturating_sub(self.last_ms.load(Ordering::Acquire)),
            )
        })
    }
}

/// Held while a request or its response body is alive.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn new(activity: &Arc<Activity>) -> Self {
        activity.requested.store(true, Ordering::Release);
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(Arc::clone(activity))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.last_ms.store(self.0.now_ms(), Ordering::Release);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One accepted connection.
struct Connection {
    builder: Arc<auto::Builder<TokioExecutor>>,
    limits: ConnLimits,
    stopping: watch::Receiver<bool>,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl Connection {
    async fn run<S, B>(
        self,
        stream: tokio::net::TcpStream,
        peer: SocketAddr,
        svc: S,
        _slots: (tokio::sync::OwnedSemaphorePermit, PeerSlot),
    ) where
        S: tower::Service<Request<ReqBody>, Response = Response<B>, Error = Infallible>
            + Clone
            + Send
            + 'static,
        S::Future: Send + 'static,
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        match self.tls.clone() {
            None => self.serve_io(stream, peer, svc).await,
            Some(acceptor) => {
                // The handshake counts against the header-read timeout: a
                // client that never finishes it holds nothing for long.
                match tokio::time::timeout(self.limits.header_read_timeout, acceptor.accept(stream))
                    .await
                {
                    Ok(Ok(tls)) => self.serve_io(tls, peer, svc).await,
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                    Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                }
            }
        }
    }

    async fn serve_io<IO, S, B>(mut self, io: IO, peer: SocketAddr, svc: S)
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
        S: tower::Service<Request<ReqBody>, Response = Response<B>, Error = Infallible>
            + Clone
            + Send
            + 'static,
        S::Future: Send + 'static,
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let activity = Arc::new(Activity {
            opened: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
            requested: AtomicBool::new(false),
            stalled: AtomicBool::new(false),
        });
        let tracked = Tracked {
            inner: svc,
            activity: Arc::clone(&activity),
            body_read_timeout: self.limits.body_read_timeout,
            peer,
        };
        let conn = self
            .builder
            .serve_connection_with_upgrades(TokioIo::new(io), TowerToHyperService::new(tracked));
        tokio::pin!(conn);
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut closing = false;
        loop {
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                    return;
                }
                Ok(_) = self.stopping.wait_for(|s| *s), if !closing => {
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
                _ = tick.tick() => {
                    if activity.stalled.load(Ordering::Acquire) {
                        tracing::debug!(%peer, "a request body stopped coming: closing");
                        return;
                    }
                    let Some(idle) = activity.idle_for() else { continue };
                    if !activity.requested.load(Ordering::Acquire) {
                        if idle >= self.limits.header_read_timeout {
                            tracing::debug!(%peer, "no whole request in time: closing");
                            return;
                        }
                    } else if idle >= self.limits.idle_timeout && !closing {
                        tracing::debug!(%peer, "idle: closing");
                        closing = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
        }
    }
}

/// Counts requests in flight (until their response body ends).
#[derive(Clone)]
struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
    body_read_timeout: Duration,
    peer: SocketAddr,
}

/// The address a request came from, as a request extension.
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub SocketAddr);

impl<S, B> tower::Service<Request<Incoming>> for Tracked<S>
where
    S: tower::Service<Request<ReqBody>, Response = Response<B>, Error = Infallible>,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<BoxBody>;
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<dyn Future<Output = Result<Response<BoxBody>, Infallible>> + Send + 'static>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<Incoming>) -> Self::Future {
        req.extensions_mut().insert(Peer(self.peer));
        let guard = InFlight::new(&self.activity);
        let activity = Arc::clone(&self.activity);
        let timeout = self.body_read_timeout;
        let fut = self
            .inner
            .call(req.map(|body| ReqBody::new(body, timeout, activity)));
        Box::pin(async move {
            let response = fut.await?;
            // The guard lives as long as the body: a watch stream keeps its
            // connection busy until it ends.
            Ok(response.map(move |body| {
                body.map_frame(move |frame| {
                    let _alive = &guard;
                    frame
                })
                .map_err(Into::into)
                .boxed_unsync()
            }))
        })
    }
}

/// Connections per peer address.
#[derive(Debug, Default)]
struct Peers(std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>);

/// One connection's place in its peer's count; given back on drop.
pub(crate) struct PeerSlot(Arc<Peers>, std::net::IpAddr);

impl Peers {
    fn take(self: &Arc<Self>, ip: std::net::IpAddr, limit: usize) -> Option<PeerSlot> {
        let mut all = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = all.entry(ip).or_insert(0);
        if *n >= limit.max(1) {
            return None;
        }
        *n += 1;
        Some(PeerSlot(Arc::clone(self), ip))
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut all = self
            .0
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = all.get_mut(&self.1) {
            *n -= 1;
            if *n == 0 {
                all.remove(&self.1);
            }
        }
    }
}

/// A request body that must keep coming (see the module header): past its
/// deadline it fails, and its connection is marked to be closed.
pub struct ReqBody {
    inner: Incoming,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    start: tokio::time::Instant,
    allowance: Duration,
    received: u64,
    activity: Option<Arc<Activity>>,
}

/// A request body that stopped coming.
#[derive(Debug)]
pub struct BodyTimedOut;

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body did not arrive in time")
    }
}

impl std::error::Error for BodyTimedOut {}

impl ReqBody {
    fn new(inner: Incoming, allowance: Duration, activity: Arc<Activity>) -> Self {
        let start = tokio::time::Instant::now();
        ReqBody {
            inner,
            deadline: Box::pin(tokio::time::sleep_until(start + allowance)),
            start,
            allowance,
            received: 0,
            activity: Some(activity),
        }
    }
}

impl http_body::Body for ReqBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        match std::pin::Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.received += data.len() as u64;
                    let more = Duration::from_secs(this.received / MIN_BODY_RATE);
                    let until = this.start + this.allowance + more;
                    this.deadline.as_mut().reset(until);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => {
                this.activity = None;
                Poll::Ready(None)
            }
            Poll::Pending => {
                if this.activity.is_some() && this.deadline.as_mut().poll(cx).is_ready() {
                    if let Some(a) = this.activity.take() {
                        a.stalled.store(true, Ordering::Release);
                    }
                    return Poll::Ready(Some(Err(Box::new(BodyTimedOut))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
