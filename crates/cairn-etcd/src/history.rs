//! Reading etcd's history of one key through short-lived watches: a
//! slow watcher's catch-up from the log key's past versions, and whether a
//! commit whose answer was lost did land. Also the watch-opening shared
//! with [`crate::follow`], the replica's one long-lived watch.

use std::time::Duration;

use cairn_core::error::{Error, Result};
use cairn_store::records::Revision;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::client::Client;
use crate::decode::logged;
use crate::pb::etcdserverpb::{WatchCreateRequest, WatchRequest, WatchResponse, watch_request};
use crate::pb::mvccpb::KeyValue;
use crate::pb::mvccpb::event::EventType;

/// Why a watch did not open.
pub enum NotOpened {
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
pub async fn open_watch_on(
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
pub enum Patience {
    /// A catch-up read: history that exists comes at once, or the member
    /// is not answering (the client's deadline).
    Deadline,
    /// The live log: silence is only an idle store.
    Forever,
}

/// The next message of a watch, as patient as `patience`.
pub async fn next_message(
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
    let mut out = Vec::new();
    let mut bytes = 0;
    versions(client, &key, from, upto, current, |kv| {
        let (r, size) = logged(kv)?;
        bytes += size;
        out.push(r);
        Ok(out.len() >= limit || bytes >= max_bytes)
    })
    .await?;
    Ok(out)
}

/// The etcd revision after `after` at which `key` was put with exactly
/// `value`, as of etcd revision `at`; `None`: it was not (and, if a
/// transaction's compares failed at `at`, never will be).
pub async fn find_put(
    client: &Client,
    key: Vec<u8>,
    value: &[u8],
    after: i64,
    at: i64,
) -> Result<Option<i64>> {
    let last = client
        .range(crate::pb::etcdserverpb::RangeRequest {
            key: key.clone(),
            revision: at,
            ..Default::default()
        })
        .await?
        .kvs
        .first()
        .map_or(0, |kv| kv.mod_revision);
    if last <= after {
        return Ok(None);
    }
    let mut found = None;
    versions(
        client,
        &key,
        after + 1,
        last,
        u64::try_from(at).unwrap_or(0),
        |kv| {
            if kv.value == value {
                found = Some(kv.mod_revision);
            }
            Ok(found.is_some())
        },
    )
    .await?;
    Ok(found)
}

/// Walks the puts of `key` from `from` through `upto` (etcd revisions) in
/// order until `visit` says stop. A member that breaks or falls silent
/// midway is left, and the walk goes on from the next version on another;
/// the whole walk is bounded, so a read never hangs.
async fn versions(
    client: &Client,
    key: &[u8],
    from: i64,
    upto: i64,
    current: u64,
    mut visit: impl FnMut(&KeyValue) -> Result<bool>,
) -> Result<()> {
    let budget = client.timeout() * 2;
    let mut next = from;
    let walk = async {
        loop {
            match walk_from(client, key, &mut next, upto, current, &mut visit).await {
                Err(Error::Unavailable(why)) => {
                    tracing::debug!(next, why, "etcd history read broken; going on elsewhere");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                done => return done,
            }
        }
    };
    tokio::time::timeout(budget, walk).await.map_err(|_| {
        Error::Unavailable(format!(
            "{} did not replay revisions {from}..={upto} within {budget:?}",
            client.describe()
        ))
    })?
}

/// One watch of [`versions`], `next` kept past each version visited.
async fn walk_from(
    client: &Client,
    key: &[u8],
    next: &mut i64,
    upto: i64,
    current: u64,
    visit: &mut impl FnMut(&KeyValue) -> Result<bool>,
) -> Result<()> {
    let from = *next;
    let (_keep, mut stream) = open_watch_retrying(client, key, from).await?;
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
            *next = kv.mod_revision + 1;
            if visit(&kv)? || kv.mod_revision >= upto {
                return Ok(());
            }
        }
    }
}
