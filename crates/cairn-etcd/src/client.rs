//! The few etcd calls the engine makes, each with a deadline, and what
//! their failures mean to Cairn.
//!
//! Members are balanced here, not by the transport: one channel per
//! member, a call goes to a member in rotation, and a member that refuses
//! connections, cannot be resolved or stays silent is taken out of
//! rotation (by the failing call, or by a health check every
//! [`CHECK_EVERY`]) and readmitted when it answers again, as etcd's own
//! client balancer does. A call that changes nothing moves on to another
//! member within its deadline; a commit moves on only if it was never
//! sent. While a member is out the store reports itself degraded.
//!
//! Every call carries the operator's timeout: a cluster without quorum
//! answers with `UNAVAILABLE` within that time instead of hanging the
//! caller. Reads are linearizable (the first read of a job learns the
//! revision; later reads are pinned to it), so any replica answers what
//! any other has acknowledged.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use cairn_core::error::{Error, Result};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::pb::etcdserverpb::{
    AuthenticateRequest, CompactionRequest, LeaseGrantRequest, LeaseKeepAliveRequest,
    LeaseRevokeRequest, RangeRequest, RangeResponse, TxnRequest, TxnResponse,
    auth_client::AuthClient, kv_client::KvClient, lease_client::LeaseClient,
    watch_client::WatchClient,
};

/// How to reach the cluster.
#[derive(Debug, Clone)]
pub struct Connection {
    /// `http://host:port` or `https://host:port`, one per member.
    pub endpoints: Vec<String>,
    /// Deadline of every call.
    pub timeout: Duration,
    /// CA certificate (PEM file) that signed the members' certificates.
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key (PEM files), when the cluster asks for them.
    pub identity_files: Option<(PathBuf, PathBuf)>,
    /// User name and a file holding the password, when etcd's
    /// authentication is on (never the password itself on a command line).
    pub credentials: Option<(String, PathBuf)>,
}

fn read_file(what: &str, path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path)
        .map_err(|e| Error::Unavailable(format!("etcd {what} {}: {e}", path.display())))
}

/// Adds etcd's auth token (the `token` metadata) when there is one.
#[derive(Debug, Clone, Default)]
pub struct TokenSlot(Arc<RwLock<Option<MetadataValue<Ascii>>>>);

impl tonic::service::Interceptor for TokenSlot {
    fn call(
        &mut self,
        mut req: tonic::Request<()>,
    ) -> std::result::Result<tonic::Request<()>, tonic::Status> {
        let token = self
            .0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(t) = token {
            req.metadata_mut().insert("token", t);
        }
        Ok(req)
    }
}

/// A member's channel, with etcd's auth token added to every call.
pub type Svc = InterceptedService<Channel, TokenSlot>;

/// Pause before trying a call again on another member.
const PAUSE: Duration = Duration::from_millis(50);

/// How often every member is checked.
pub const CHECK_EVERY: Duration = Duration::from_millis(500);
/// How long a member may take to answer the check (a serializable read,
/// served from its own memory) before it is taken out of rotation.
const CHECK_TIMEOUT: Duration = Duration::from_secs(1);

/// A status's message with its whole source chain: a transport failure's
/// cause (refused, unresolvable) is in the chain, not the message.
fn full_text(s: &tonic::Status) -> String {
    let mut detail = s.message().to_owned();
    let mut source = std::error::Error::source(s);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !detail.contains(&text) {
            detail = format!("{detail}: {text}");
        }
        source = cause.source();
    }
    detail
}

/// The request never reached a member: no connection could be made (the
/// member refused it, or its name does not resolve).
fn not_sent(s: &tonic::Status) -> bool {
    if s.code() != tonic::Code::Unavailable {
        return false;
    }
    let text = full_text(s);
    [
        "tcp connect error",
        "dns error",
        "Connection refused",
        "failed to lookup address",
    ]
    .iter()
    .any(|m| text.contains(m))
}

/// Worth trying again for a call that changes nothing: a member down, a
/// broken connection, an election in progress.
fn transient(s: &tonic::Status) -> bool {
    not_sent(s)
        || matches!(
            s.code(),
            tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::OutOfRange
        ) && [
            "transport error",
            "connection",
            "leader changed",
            "no leader",
            "timed out",
            // A serializable read pinned to a revision this member has
            // not applied yet: another (or a moment later) has.
            "future revision",
        ]
        .iter()
        .any(|m| s.message().contains(m))
}

/// One member of the cluster and whether calls go to it.
struct Member {
    url: String,
    kv: KvClient<Svc>,
    watch: WatchClient<Svc>,
    lease: LeaseClient<Svc>,
    auth: AuthClient<Channel>,
    /// Out of rotation since the health check or a call saw it fail.
    out: Mutex<bool>,
}

/// The members, the rotation, and how many are out.
struct Members {
    list: Vec<Member>,
    next: AtomicUsize,
    out: tokio::sync::watch::Sender<usize>,
}

impl Members {
    /// The next member in rotation; when every member is out, the next one
    /// all the same (one may be back before its check says so).
    fn pick(&self) -> usize {
        let n = self.list.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        (0..n)
            .map(|k| (start + k) % n)
            .find(|&i| !self.is_out(i))
            .unwrap_or(start)
    }

    fn is_out(&self, i: usize) -> bool {
        *self.list[i]
            .out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes member `i` out of rotation (or readmits it), logging the change.
    fn mark(&self, i: usize, out: bool, why: &str) {
        let changed = {
            let mut flag = self.list[i]
                .out
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let changed = *flag != out;
            *flag = out;
            changed
        };
        if !changed {
            return;
        }
        let count = (0..self.list.len()).filter(|&k| self.is_out(k)).count();
        if out {
            tracing::warn!(member = %self.list[i].url, why, members_out = count, "etcd member taken out of rotation");
        } else {
            tracing::info!(member = %self.list[i].url, members_out = count, "etcd member back in rotation");
        }
        self.out.send_replace(count);
    }
}

/// Checks every member every [`CHECK_EVERY`] until the client is gone.
async fn check_members(members: Weak<Members>) {
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        let Some(m) = members.upgrade() else {
            return;
        };
        let mut checks = tokio::task::JoinSet::new();
        for i in 0..m.list.len() {
            let mut kv = m.list[i].kv.clone();
            checks.spawn(async move {
                let probe = kv.range(RangeRequest {
                    key: b"\0cairn-health".to_vec(),
                    serializable: true,
                    count_only: true,
                    ..RangeRequest::default()
                });
                // Any answer from etcd itself (even a refusal of the read)
                // shows the member alive; silence or a transport failure
                // does not.
                let alive = match tokio::time::timeout(CHECK_TIMEOUT, probe).await {
                    Ok(Ok(_)) => true,
                    Ok(Err(s)) => {
                        !matches!(s.code(), tonic::Code::Unavailable | tonic::Code::Unknown)
                    }
                    Err(_) => false,
                };
                (i, alive)
            });
        }
        while let Some(Ok((i, alive))) = checks.join_next().await {
            m.mark(i, !alive, "no answer to the health check");
        }
    }
}

/// A cheap, cloneable handle on the cluster.
#[derive(Clone)]
pub struct Client {
    members: Arc<Members>,
    token: TokenSlot,
    credentials: Option<(String, String)>,
    timeout: Duration,
    describe: String,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoints", &self.describe)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Connects lazily: a member that is down now is tried again later.
    pub fn new(c: &Connection) -> Result<Self> {
        if c.endpoints.is_empty() {
            return Err(Error::Unavailable("no etcd endpoints given".into()));
        }
        let ca = c
            .ca_file
            .as_deref()
            .map(|p| read_file("CA file", p))
            .transpose()?;
        let identity = match &c.identity_files {
            Some((cert, key)) => Some((
                read_file("certificate file", cert)?,
                read_file("key file", key)?,
            )),
            None => None,
        };
        let credentials = match &c.credentials {
            Some((user, file)) => {
                let password =
                    String::from_utf8(read_file("password file", file)?).map_err(|_| {
                        Error::Unavailable("the etcd password file is not UTF-8".into())
                    })?;
                Some((
                    user.clone(),
                    password.trim_end_matches(['\r', '\n']).to_owned(),
                ))
            }
            None => None,
        };
        let token = TokenSlot::default();
        let mut list = Vec::with_capacity(c.endpoints.len());
        for url in &c.endpoints {
            let mut e = Endpoint::from_shared(url.clone())
                .map_err(|e| Error::Unavailable(format!("etcd endpoint {url:?}: {e}")))?
                .connect_timeout(c.timeout.min(Duration::from_secs(2)))
                .tcp_nodelay(true)
                .http2_keep_alive_interval(Duration::from_secs(5))
                .keep_alive_timeout(c.timeout)
                .keep_alive_while_idle(true);
            if url.starts_with("https://") {
                let mut tls = ClientTlsConfig::new();
                if let Some(ca) = &ca {
                    tls = tls.ca_certificate(Certificate::from_pem(ca));
                } else {
                    tls = tls.with_enabled_roots();
                }
                if let Some((cert, key)) = &identity {
                    tls = tls.identity(Identity::from_pem(cert, key));
                }
                e = e
                    .tls_config(tls)
                    .map_err(|e| Error::Unavailable(format!("etcd TLS for {url}: {e}")))?;
            }
            let channel = e.connect_lazy();
            list.push(Member {
                url: url.clone(),
                kv: KvClient::with_interceptor(channel.clone(), token.clone()),
                watch: WatchClient::with_interceptor(channel.clone(), token.clone()),
                lease: LeaseClient::with_interceptor(channel.clone(), token.clone()),
                auth: AuthClient::new(channel),
                out: Mutex::new(false),
            });
        }
        let members = Arc::new(Members {
            list,
            next: AtomicUsize::new(0),
            out: tokio::sync::watch::Sender::new(0),
        });
        tokio::spawn(check_members(Arc::downgrade(&members)));
        Ok(Client {
            members,
            token,
            credentials,
            timeout: c.timeout,
            describe: format!("etcd {}", c.endpoints.join(",")),
        })
    }

    /// How many members are out of rotation, as it changes.
    pub fn members_out(&self) -> tokio::sync::watch::Receiver<usize> {
        self.members.out.subscribe()
    }

    /// The endpoints, for logs and messages.
    pub fn describe(&self) -> &str {
        &self.describe
    }

    /// The deadline of every call.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Gets a token for the configured user (etcd's simple tokens expire,
    /// so this runs again whenever etcd says the token is invalid).
    pub async fn authenticate(&self) -> Result<()> {
        let Some((name, password)) = &self.credentials else {
            return Ok(());
        };
        let mut auth = self.members.list[self.members.pick()].auth.clone();
        let reply = tokio::time::timeout(
            self.timeout,
            auth.authenticate(AuthenticateRequest {
                name: name.clone(),
                password: password.clone(),
            }),
        )
        .await
        .map_err(|_| self.late("authenticate"))?
        .map_err(|s| self.failed("authenticate", &s))?
        .into_inner();
        let value: MetadataValue<Ascii> = reply
            .token
            .parse()
            .map_err(|_| Error::Unavailable("etcd returned an unusable auth token".into()))?;
        *self
            .token
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(value);
        Ok(())
    }

    /// A linearizable range read (at `revision` when not 0). A read changes
    /// nothing, so it is tried again on another member while a member is
    /// down or an election runs, within the deadline.
    pub async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        // A silent member gets a part of the deadline, then the read moves
        // on: a read can be sent again safely.
        let attempt = (self.timeout / 3).max(Duration::from_millis(500));
        let mut retried_auth = false;
        loop {
            let i = self.members.pick();
            let mut kv = self.members.list[i].kv.clone();
            let now = tokio::time::Instant::now();
            let until = deadline.min(now + attempt);
            let out = match tokio::time::timeout_at(until, kv.range(req.clone())).await {
                Ok(out) => out,
                Err(_) if until < deadline => {
                    self.members.mark(i, true, "a read went unanswered");
                    continue;
                }
                Err(_) => return Err(self.late("range")),
            };
            match out {
                Ok(r) => return Ok(r.into_inner()),
                Err(s) if !retried_auth && self.token_expired(&s) => {
                    retried_auth = true;
                    self.authenticate().await?;
                }
                Err(s) if transient(&s) && tokio::time::Instant::now() + PAUSE < deadline => {
                    if not_sent(&s) {
                        self.members.mark(i, true, "refused or unresolvable");
                    }
                    tokio::time::sleep(PAUSE).await;
                }
                Err(s) => return Err(self.failed("range", &s)),
            }
        }
    }

    /// A transaction. A timeout or a broken connection leaves its outcome
    /// unknown, which the caller is told rather than a retry risked.
    pub async fn txn(&self, req: TxnRequest) -> Result<TxnResponse> {
        self.send_txn(req, false).await.map(|(r, _)| r)
    }

    /// A transaction that fences itself: it compares a key it writes, so
    /// of two copies at most one commits, and it may be sent again. A
    /// member that does not answer within a part of the deadline, or
    /// whose connection breaks after sending, is left and the same request
    /// goes to another. The flag says it was sent more than once: then a
    /// failed compare may be the first copy's commit, which the caller
    /// must look for before running the mutation again.
    pub async fn txn_resending(&self, req: TxnRequest) -> Result<(TxnResponse, bool)> {
        self.send_txn(req, true).await
    }

    async fn send_txn(&self, req: TxnRequest, may_resend: bool) -> Result<(TxnResponse, bool)> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let attempt = if may_resend {
            (self.timeout / 3).max(Duration::from_millis(500))
        } else {
            self.timeout
        };
        let mut retried_auth = false;
        let mut resent = false;
        loop {
            let i = self.members.pick();
            let mut kv = self.members.list[i].kv.clone();
            let until = deadline.min(tokio::time::Instant::now() + attempt);
            let Ok(out) = tokio::time::timeout_at(until, kv.txn(req.clone())).await else {
                // Whatever the outcome, the next calls go elsewhere.
                self.members.mark(i, true, "a commit went unanswered");
                if until < deadline {
                    resent = true;
                    continue;
                }
                return Err(Error::Unavailable(format!(
                    "{} did not confirm the commit within {:?}: it may or may not have been applied; read before retrying",
                    self.describe, self.timeout
                )));
            };
            match out {
                Ok(r) => return Ok((r.into_inner(), resent)),
                Err(s) if !retried_auth && self.token_expired(&s) => {
                    retried_auth = true;
                    self.authenticate().await?;
                }
                // Never sent (no connection to that member): safe to send
                // to another.
                Err(s) if not_sent(&s) && tokio::time::Instant::now() + PAUSE < deadline => {
                    self.members.mark(i, true, "refused or unresolvable");
                    tokio::time::sleep(PAUSE).await;
                }
                // Sent, and the connection broke: only a request that
                // fences itself goes again.
                Err(s)
                    if may_resend
                        && transient(&s)
                        && tokio::time::Instant::now() + PAUSE < deadline =>
                {
                    self.members
                        .mark(i, true, "the connection broke during a commit");
                    resent = true;
                    tokio::time::sleep(PAUSE).await;
                }
                Err(s) if s.message().contains("too many operations in txn request") => {
                    return Err(Error::LimitExceeded {
                        field: "mutation".into(),
                        what: "etcd operations in one transaction (the cluster's --max-txn-ops; delete a large tree in parts)",
                        limit: 128,
                        actual: req.success.len().max(req.compare.len()),
                    });
                }
                Err(s) if s.message().contains("request is too large") => {
                    return Err(Error::LimitExceeded {
                        field: "mutation".into(),
                        what: "bytes in one etcd transaction",
                        limit: 1_572_864,
                        actual: prost::Message::encoded_len(&req),
                    });
                }
                Err(s) => return Err(self.failed("commit", &s)),
            }
        }
    }

    /// Compacts etcd's history before `revision` (every key's).
    pub async fn compact(&self, revision: i64) -> Result<()> {
        let mut kv = self.members.list[self.members.pick()].kv.clone();
        tokio::time::timeout(
            self.timeout,
            kv.compact(CompactionRequest {
                revision,
                physical: false,
            }),
        )
        .await
        .map_err(|_| self.late("compact"))?
        .map_err(|s| self.failed("compact", &s))?;
        Ok(())
    }

    /// Grants an etcd lease of `ttl` (etcd may raise it to its minimum);
    /// its id.
    pub async fn grant(&self, ttl: Duration) -> Result<i64> {
        let mut lease = self.members.list[self.members.pick()].lease.clone();
        let reply = tokio::time::timeout(
            self.timeout,
            lease.lease_grant(LeaseGrantRequest {
                ttl: i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX),
                id: 0,
            }),
        )
        .await
        .map_err(|_| self.late("lease grant"))?
        .map_err(|s| self.failed("lease grant", &s))?
        .into_inner();
        Ok(reply.id)
    }

    /// Renews lease `id` once; the TTL it has now, 0 if it is gone
    /// (expired or revoked).
    pub async fn keep_alive(&self, id: i64) -> Result<i64> {
        let mut lease = self.members.list[self.members.pick()].lease.clone();
        let call = async {
            let mut replies = lease
                .lease_keep_alive(tokio_stream::once(LeaseKeepAliveRequest { id }))
                .await?
                .into_inner();
            replies.message().await
        };
        let reply = tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| self.late("lease keep-alive"))?
            .map_err(|s| self.failed("lease keep-alive", &s))?;
        Ok(reply.map_or(0, |r| r.ttl))
    }

    /// Revokes lease `id`: the keys attached to it are deleted at once.
    pub async fn revoke(&self, id: i64) -> Result<()> {
        let mut lease = self.members.list[self.members.pick()].lease.clone();
        tokio::time::timeout(self.timeout, lease.lease_revoke(LeaseRevokeRequest { id }))
            .await
            .map_err(|_| self.late("lease revoke"))?
            .map_err(|s| self.failed("lease revoke", &s))?;
        Ok(())
    }

    /// The watch service of a member in rotation, for catch-up reads.
    pub fn watch_client(&self) -> WatchClient<Svc> {
        self.watch_member().1
    }

    /// A member in rotation and its watch service, for the engine's one
    /// long watch: it leaves that member once [`Client::is_out`] says so.
    pub fn watch_member(&self) -> (usize, WatchClient<Svc>) {
        let i = self.members.pick();
        (i, self.members.list[i].watch.clone())
    }

    /// Whether member `i` is out of rotation now.
    pub fn is_out(&self, i: usize) -> bool {
        self.members.is_out(i)
    }

    fn token_expired(&self, s: &tonic::Status) -> bool {
        self.credentials.is_some()
            && (s.message().contains("invalid auth token")
                || s.message().contains("user name is empty"))
    }

    fn late(&self, what: &str) -> Error {
        Error::Unavailable(format!(
            "{} did not answer a {what} within {:?}",
            self.describe, self.timeout
        ))
    }

    /// What an etcd error means to Cairn's callers.
    pub fn failed(&self, what: &str, s: &tonic::Status) -> Error {
        if s.message().contains("required revision has been compacted") {
            return Error::Unavailable(format!(
                "{}: {what}: the revision read was compacted meanwhile; retry",
                self.describe
            ));
        }
        Error::Unavailable(format!("{}: {what}: {}", self.describe, full_text(s)))
    }
}
