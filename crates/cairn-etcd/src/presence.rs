//! Which replicas are alive: each announces itself with a key on an etcd
//! lease of its own and renews it; a replica that dies (or cannot reach
//! etcd for the lease's TTL) loses its key when etcd expires the lease.
//!
//! ```text
//!  announce: LeaseGrant(replica TTL) ─▶ Put {prefix}r/{name} on it ─▶
//!            renew every TTL/3 ─▶ the lease gone (expired): announce again
//!  close:    LeaseRevoke (the key goes at once: the survivors need not
//!            wait a TTL to adopt this replica's leases)
//!  replicas: Range {prefix}r/ (keys only)
//! ```
//!
//! The survivors read this to take over the session leases a dead replica
//! held (`cairn_store::lessor`). A replica's name is unique per process, so
//! a restarted replica is a new one and its old name's leases are adopted.

use std::collections::BTreeSet;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use cairn_core::error::{Error, Result};

use crate::keys::{prefix_end, suffix};
use crate::pb::etcdserverpb::{
    PutRequest, RangeRequest, RequestOp, TxnRequest, request_op::Request,
};
use crate::shared::Inner;

/// Pause before announcing again after a failure.
const RETRY: Duration = Duration::from_secs(1);

/// Announces `name` (before this replica serves: a lease it takes must
/// never name a holder the others cannot see yet), then keeps it announced
/// in the background until the engine closes.
pub(crate) async fn announce(inner: Arc<Inner>, name: String) -> Result<()> {
    check_name(&name)?;
    let lease = put_on_lease(&inner, &inner.keys.replica(&name), inner.opts.replica_ttl).await?;
    *inner
        .presence
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = Some(lease);
    tokio::spawn(keep_announced(inner, name, lease));
    Ok(())
}

async fn keep_announced(inner: Arc<Inner>, name: String, mut lease: i64) {
    let ttl = inner.opts.replica_ttl;
    let key = inner.keys.replica(&name);
    loop {
        // Renew until the lease is gone (lapsed while etcd was out of
        // reach), then announce again.
        loop {
            tokio::select! {
                () = tokio::time::sleep(ttl / 3) => {}
                () = inner.closed() => return,
            }
            match inner.client.keep_alive(lease).await {
                Ok(left) if left > 0 => {}
                Ok(_) => break,
                // Renewed again a third of a TTL later: two misses in a
                // row are still within the TTL.
                Err(e) => tracing::debug!(replica = %name, error = %e, "presence not renewed"),
            }
        }
        lease = loop {
            match put_on_lease(&inner, &key, ttl).await {
                Ok(id) => break id,
                Err(e) => {
                    tracing::warn!(replica = %name, error = %e, "replica not announced; trying again");
                }
            }
            tokio::select! {
                () = tokio::time::sleep(RETRY) => {}
                () = inner.closed() => return,
            }
        };
        *inner
            .presence
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(lease);
        if inner.is_closed() {
            // Closed while announcing: `close` may have withdrawn already.
            withdraw(&inner).await;
            return;
        }
        tracing::warn!(replica = %name, "replica announced again: its presence had lapsed, and others may have adopted its leases");
    }
}

async fn put_on_lease(inner: &Inner, key: &[u8], ttl: Duration) -> Result<i64> {
    let lease = inner.client.grant(ttl).await?;
    inner
        .client
        .txn(TxnRequest {
            success: vec![RequestOp {
                request: Some(Request::RequestPut(PutRequest {
                    key: key.to_vec(),
                    lease,
                    ..PutRequest::default()
                })),
            }],
            ..TxnRequest::default()
        })
        .await?;
    Ok(lease)
}

/// The names of the replicas announced now.
pub(crate) async fn replicas(inner: &Inner) -> Result<BTreeSet<String>> {
    let prefix = inner.keys.replicas();
    let reply = inner
        .client
        .range(RangeRequest {
            key: prefix.clone(),
            range_end: prefix_end(&prefix),
            keys_only: true,
            ..RangeRequest::default()
        })
        .await?;
    Ok(reply
        .kvs
        .iter()
        .filter_map(|kv| suffix(&kv.key, &prefix).map(str::to_owned))
        .collect())
}

/// Takes this replica's presence away at once (at close).
pub(crate) async fn withdraw(inner: &Inner) {
    let lease = inner
        .presence
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    if let Some(id) = lease
        && let Err(e) = inner.client.revoke(id).await
    {
        tracing::warn!(error = %e, "replica presence not withdrawn; it lapses after its TTL");
    }
}

/// A replica's name must be one key segment.
fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.contains('/') {
        return Err(Error::InvalidField {
            field: "replica".into(),
            description: format!("{name:?} must be non-empty and hold no '/'"),
        });
    }
    Ok(())
}
