//! Following the deployment: each replica runs ONE etcd watch on its whole
//! prefix from the revision its copy ([`crate::mirror`]) has reached. Each
//! message is applied to the copy, then every version of the log key in it
//! (a committed Cairn revision, stamped with etcd's revision) goes to the
//! watch hub — what the embedded writer does after each commit. Catch-up
//! reads for slow watchers use a short-lived watch on the log key from a
//! past revision.
//!
//! The watch asks for a leader (`hasleader`), so a member cut off from its
//! cluster cancels it instead of serving a stale feed, and the replica
//! reconnects to a member that has one.

use std::sync::Arc;
use std::time::Duration;

use cairn_core::error::{Error, Result};
use cairn_store::health::Readiness;
use cairn_store::records::Revision;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::client::Client;
use crate::decode::logged;
use crate::pb::etcdserverpb::{WatchCreateRequest, WatchRequest, WatchResponse, watch_request};
use crate::pb::mvccpb::event::EventType;
use crate::shared::Inner;

/// Why a watch did not open.
enum NotOpened {
    /// No answer within the deadline: trying again would only wait again.
    Silent(Error),
    /// Refused or broken on the way: another member may answer.
    Failed(Error),
}

impl From<NotOpened> for Error {
    fn from(n: NotOpened) -> Error {
        match n {
            NotOpened::Silent(e) | NotOpened::Failed(e) => e,
        }
    }
}

/// Opens a watch on `key` from `start`; the returned sender keeps the
/// request side open (etcd ends a watch whose client closes it).
async fn open_watch(
    client: &Client,
    key: Vec<u8>,
    range_end: Vec<u8>,
    start: i64,
) -> std::result::Result<(mpsc::Sender<WatchRequest>, tonic::Streaming<WatchResponse>), NotOpened> {
    open_watch_on(client, client.watch_client(), key, range_end, start).await
}

/// [`open_watch`] on the member `watch` is the service of.
async fn open_watch_on(
    client: &Client,
    mut watch: crate::pb::etcdserverpb::watch_client::WatchClient<crate::client::Svc>,
    key: Vec<u8>,
    range_end: Vec<u8>,
    start: i64,
) -> std::result::Result<(mpsc::Sender<WatchRequest>, tonic::Streaming<WatchResponse>), NotOpened> {
    let (tx, rx) = mpsc::channel(1);
    let create = WatchRequest {
        request_union: Some(watch_request::RequestUnion::CreateRequest(
            WatchCreateRequest {
                key,
                range_end,
                start_revision: start,
                ..WatchCreateRequest::default()
            },
        )),
    };
    tx.send(create).await.map_err(|_| {
        NotOpened::Failed(Error::Unavailable(
            "etcd watch: request stream closed".into(),
        ))
    })?;
    let mut req = tonic::Request::new(ReceiverStream::new(rx));
    req.metadata_mut().insert(
        "hasleader",
        tonic::metadata::MetadataValue::from_static("true"),
    );
    let stream = tokio::time::timeout(client.timeout(), watch.watch(req))
        .await
        .map_err(|_| {
            NotOpened::Silent(Error::Unavailable(format!(
                "{} did not open a watch within {:?}",
                client.describe(),
                client.timeout()
            )))
        })?
        .map_err(|s| NotOpened::Failed(client.failed("watch", &s)))?
        .into_inner();
    Ok((tx, stream))
}

/// [`open_watch`], tried again on another member while one is down.
async fn open_watch_retrying(
    client: &Client,
    key: &[u8],
    start: i64,
) -> Result<(mpsc::Sender<WatchRequest>, tonic::Streaming<WatchResponse>)> {
    let deadline = tokio::time::Instant::now() + client.timeout();
    loop {
        match open_watch(client, key.to_vec(), Vec::new(), start).await {
            Err(NotOpened::Failed(Error::Unavailable(_)))
                if tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return other.map_err(Error::from),
        }
    }
}

/// How long a watch may be silent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Patience {
    /// A catch-up read: history that exists comes at once, or the member
    /// is not answering (the client's deadline).
    Deadline,
    /// The live log: silence is only an idle store.
    Forever,
}

/// The next message of a watch, as patient as `patience`.
async fn next_message(
    client: &Client,
    stream: &mut tonic::Streaming<WatchResponse>,
    patience: Patience,
) -> Result<WatchResponse> {
    let next = stream.message();
    let msg = if patience == Patience::Deadline {
        tokio::time::timeout(client.timeout(), next)
            .await
            .map_err(|_| {
                Error::Unavailable(format!(
                    "{} sent no history within {:?}",
                    client.describe(),
                    client.timeout()
                ))
            })?
    } else {
        next.await
    };
    msg.map_err(|s| client.failed("watch", &s))?
        .ok_or_else(|| Error::Unavailable(format!("{}: the watch ended", client.describe())))
}

/// Versions of the log key from `from` through `upto` (etcd revisions),
/// at most `limit` and about `max_bytes` (always one).
pub async fn history(
    client: &Client,
    key: Vec<u8>,
    from: i64,
    upto: i64,
    limit: usize,
    max_bytes: usize,
    current: u64,
) -> Result<Vec<Revision>> {
    // Bounded as a whole, not only per message: a read never hangs.
    let budget = client.timeout() * 2;
    tokio::time::timeout(
        budget,
        history_unbounded(client, key, from, upto, limit, max_bytes, current),
    )
    .await
    .map_err(|_| {
        Error::Unavailable(format!(
            "{} did not replay revisions {from}..={upto} within {budget:?}",
            client.describe()
        ))
    })?
}

async fn history_unbounded(
    client: &Client,
    key: Vec<u8>,
    from: i64,
    upto: i64,
    limit: usize,
    max_bytes: usize,
    current: u64,
) -> Result<Vec<Revision>> {
    let (_keep, mut stream) = open_watch_retrying(client, &key, from).await?;
    let mut out = Vec::new();
    let mut bytes = 0;
    loop {
        let msg = next_message(client, &mut stream, Patience::Deadline).await?;
        if msg.compact_revision > 0 {
            return Err(Error::RevisionCompacted {
                requested: u64::try_from(from).unwrap_or(0),
                compact_revision: u64::try_from(msg.compact_revision - 1).unwrap_or(0),
                current_revision: current,
            });
        }
        if msg.canceled {
            return Err(Error::Unavailable(format!(
                "{}: watch canceled: {}",
                client.describe(),
                msg.cancel_reason
            )));
        }
        for ev in msg.events {
            let Some(kv) = ev.kv else { continue };
            if ev.r#type != EventType::Put as i32 || kv.mod_revision > upto {
                continue;
            }
            let (r, size) = logged(&kv)?;
            bytes += size;
            let done = kv.mod_revision >= upto;
            out.push(r);
            if done || out.len() >= limit || bytes >= max_bytes {
                return Ok(out);
            }
        }
    }
}

/// Keeps the copy and the hub current, reconnecting until the engine
/// closes.
pub async fn follow(inner: Arc<Inner>) {
    let mut pause = Duration::from_millis(50);
    loop {
        if inner.is_closed() {
            return;
        }
        match follow_once(&inner).await {
            Ok(Flow::Closed) => return,
            Ok(Flow::Resume) => pause = Duration::from_millis(50),
            Err(e) => {
                if inner.is_closed() {
                    return;
                }
                tracing::warn!(error = %e, applied = inner.mirror.applied(), "etcd watch broken; reconnecting");
                inner.health.set(Readiness::Recovering);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// How a watch ended without an error.
enum Flow {
    /// The engine closed.
    Closed,
    /// Watch again from where the copy is.
    Resume,
}

/// Whether etcd's compaction to `compact` took Cairn revisions from `next`
/// on that this replica never dispatched: the log key's last version at
/// the compact revision is one of them.
async fn lost_to_compaction(inner: &Inner, next: i64, compact: i64) -> bool {
    let at = inner
        .client
        .range(crate::pb::etcdserverpb::RangeRequest {
            key: inner.keys.log(),
            revision: compact,
            ..Default::default()
        })
        .await;
    match at {
        Ok(r) => r.kvs.first().is_some_and(|kv| kv.mod_revision >= next),
        // Cannot tell: assume the worst, and say so.
        Err(_) => true,
    }
}

/// The history the watch needed is gone: read the whole prefix again.
/// Cairn revisions in the gap that this replica never dispatched are lost
/// to its watchers (said loudly); anything else (other keys' history) is
/// only a reload.
async fn reload(inner: &Inner, next: i64, compact: i64) -> Result<()> {
    if lost_to_compaction(inner, next, compact).await {
        tracing::error!(
            next,
            compact_revision = compact,
            "etcd compacted revisions this replica had not dispatched yet"
        );
    } else {
        tracing::info!(
            next,
            compact_revision = compact,
            "etcd was compacted past this replica's position, over revisions that are not Cairn's; reloading"
        );
    }
    let fresh = crate::mirror::load(&inner.client, &inner.keys).await?;
    inner.mirror.replace(fresh);
    Ok(())
}

async fn follow_once(inner: &Inner) -> Result<Flow> {
    let next = inner.mirror.applied() + 1;
    let prefix = inner.keys.prefix().to_vec();
    let end = crate::keys::prefix_end(&prefix);
    let (member, watch) = inner.client.watch_member();
    let (_keep, mut stream) = open_watch_on(&inner.client, watch, prefix, end, next).await?;
    // A member that dies or goes silent leaves the rotation within a
    // health check; the watch leaves it then too, rather than waiting for
    // the connection's keep-alive (reads and writes wait on the copy).
    let mut rotation = inner.client.members_out();
    loop {
        let msg = tokio::select! {
            m = next_message(&inner.client, &mut stream, Patience::Forever) => m?,
            () = inner.closed() => return Ok(Flow::Closed),
            changed = rotation.changed() => {
                if changed.is_ok() && inner.client.is_out(member) {
                    return Err(Error::Unavailable(
                        "the member the watch was on left the rotation".into(),
                    ));
                }
                continue;
            }
        };
        if msg.compact_revision > 0 {
            reload(inner, next, msg.compact_revision).await?;
            return Ok(Flow::Resume);
        }
        if msg.canceled {
            return Err(Error::Unavailable(format!(
                "watch canceled: {}",
                msg.cancel_reason
            )));
        }
        if msg.created {
            inner.health.set(Readiness::Serving);
        }
        if msg.events.is_empty() {
            continue;
        }
        if let Some(lag) = inner.opts.watch_lag {
            tokio::time::sleep(lag).await;
        }
        let revisions = inner.mirror.apply(msg.events, &inner.log_key);
        tracing::trace!(
            applied = inner.mirror.applied(),
            logged = revisions.len(),
            "watch message applied"
        );
        if let Some(last) = revisions.last() {
            inner.observed(last.revision);
            cairn_store::telemetry::revision(last.revision);
            inner.hub.dispatch(&revisions);
        }
    }
}
