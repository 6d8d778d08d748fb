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
use crate::pb::etcdserverpb::{
    PutRequest, RangeRequest, RequestOp, TxnRequest, request_op::Request,
};

/// Plans read per page.
const PAGE: i64 = 256;

/// Indexes the waiting items of every plan, unless that was done.
pub(crate) async fn index_waiting(client: &Client, keys: &Keys, max_ops: usize) -> Result<usize> {
    let marker = keys.awaiting_indexed();
    let done = client
        .range(RangeRequest {
            key: marker.clone(),
            count_only: true,
            ..RangeRequest::default()
        })
        .await?;
    if done.count > 0 {
        return Ok(0);
    }
    let start = keys.plans();
    let end = prefix_end(&start);
    let mut from = start.clone();
    let mut puts = Vec::new();
    loop {
        let page = client
            .range(RangeRequest {
                key: from.clone(),
                range_end: end.clone(),
                limit: PAGE,
                ..RangeRequest::default()
            })
            .await?;
        for kv in &page.kvs {
            let record: cairn_store::records::PlanRecord = crate::decode::record(kv)?;
            for w in record.plan.mode.awaiting(&record.session_id) {
                puts.push(keys.awaiting(&w));
            }
        }
        match page.kvs.last() {
            Some(last) if page.more => {
                from.clone_from(&last.key);
                from.push(0);
            }
            _ => break,
        }
    }
    let indexed = puts.len();
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
        client
            .txn(TxnRequest {
                success,
                ..TxnRequest::default()
            })
            .await?;
    }
    Ok(indexed)
}
