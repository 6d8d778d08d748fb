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

use crate::history::{Patience, next_message, open_watch_on};
use crate::shared::Inner;

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
