//! One-time work at open for deployments written by an older version.
//!
//! - The inbox index (`{prefix}w/…`): plans waiting for approval before the
//!   index existed are indexed once, then `{prefix}awaiting_indexed` marks
//!   it done (a new deployment writes the mark at its first open, so its
//!   first mutation is etcd's revision 3). A plan decided while this runs
//!   may leave a stale key; the inbox re-reads every plan it lists, so a
//!   stale key is never shown.

use cairn_core::error::Result;

use crate::client::Client;
use crate::keys::{Keys, prefix_end};
use crate::mirror::Snap;
use crate::pb::etcdserverpb::{PutRequest, RequestOp, TxnRequest, request_op::Request};

/// Indexes the waiting items of every plan in `snap` (the prefix as the
/// replica loaded it), unless that was done: how many, and the etcd
/// revision of the last write (0: none). The keys it writes reach the
/// copy through the watch, which starts after `snap`, so reads must be
/// fenced on that revision.
pub(crate) async fn index_waiting(
    client: &Client,
    keys: &Keys,
    snap: &Snap,
    max_ops: usize,
) -> Result<(usize, i64)> {
    let marker = keys.awaiting_indexed();
    if snap.kvs.contains_key(&marker) {
        return Ok((0, 0));
    }
    let start = keys.plans();
    let mut puts = Vec::new();
    for (_, kv) in snap.kvs.range(start.clone()..prefix_end(&start)) {
        let record: cairn_store::records::PlanRecord = crate::decode::record(kv)?;
        for w in record.plan.mode.awaiting(&record.session_id) {
            puts.push(keys.awaiting(&w));
        }
    }
    let indexed = puts.len();
    let mut last = 0;
    puts.push(marker);
    for chunk in puts.chunks(max_ops.max(1)) {
        let success = chunk
            .iter()
            .map(|key| RequestOp {
                request: Some(Request::RequestPut(PutRequest {
                    key: key.clone(),
                    ..PutRequest::default()
                })),
            })
            .collect();
        let done = client
            .txn(TxnRequest {
                success,
                ..TxnRequest::default()
            })
            .await?;
        last = done.header.map_or(last, |h| h.revision);
    }
    Ok((indexed, last))
}
