//! Group commit on etcd: independent mutations that are ready together
//! share one etcd transaction, as redb's group commit shares one fsync.
//! etcd's cost is per transaction (a raft entry, an apply, a watch
//! notification) more than per key, so a batch of N costs far less than N
//! transactions.
//!
//! What stays as it was for each mutation:
//! - its own compares: the batch commits only if every member's hold; it
//!   is one etcd revision, the events of its members in order in one log
//!   record (each event says its place in the revision);
//! - a conflict fails only its own mutation: when a batch loses a compare,
//!   each member runs again and is then committed alone, so another
//!   replica's write can fail only the mutation that read what it changed;
//! - members are independent: none writes what another reads or writes
//!   (the same keys never share a revision, so a record's revision still
//!   names one version of it).
//!
//! A few batches are on the wire at once; what arrives meanwhile waits for
//! the next, so batches grow with the load and a lone write goes at once.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use cairn_core::error::{Error, Result};
use tokio::sync::{Notify, Semaphore, oneshot};

use crate::client::Client;
use crate::pb::etcdserverpb::{TxnRequest, TxnResponse};
use crate::txn::{Footprint, Txn, combined, resendable};

/// Batches on the wire at once.
const IN_FLIGHT: usize = 4;
/// Most bytes of changes in one batch (etcd takes 1.5 MiB per request).
const MAX_BYTES: usize = 1 << 20;
/// Writes looked at per batch, however long the queue.
const SCAN: usize = 256;

/// How a write's transaction ended: committed or not (a compare failed),
/// and etcd's revision then.
pub type Outcome = Result<(bool, i64)>;

struct Queued {
    txn: Txn,
    footprint: Footprint,
    alone: bool,
    reply: oneshot::Sender<(Txn, Outcome)>,
}

/// The writes ready to commit.
#[derive(Default)]
pub struct Batcher {
    queue: Mutex<VecDeque<Queued>>,
    wake: Notify,
}

impl Batcher {
    /// Commits `txn`, alone when `alone` (else with whatever independent
    /// writes are ready with it); gives it back with the outcome. `None`:
    /// the engine closed with the write queued, never sent.
    pub async fn commit(
        &self,
        txn: Txn,
        footprint: Footprint,
        alone: bool,
    ) -> Option<(Txn, Outcome)> {
        let (reply, rx) = oneshot::channel();
        let alone = alone || txn.alone();
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(Queued {
                txn,
                footprint,
                alone,
                reply,
            });
        self.wake.notify_one();
        rx.await.ok()
    }

    /// Takes the next batch off the queue: the oldest write, and after it
    /// every queued write independent of all taken so far, within the
    /// limits.
    fn next_batch(&self, max_ops: usize) -> Vec<Queued> {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(first) = queue.pop_front() else {
            return Vec::new();
        };
        let (mut ops, mut bytes) = first.txn.weight();
        let mut batch = vec![first];
        if batch[0].alone {
            return batch;
        }
        let mut i = 0;
        let mut scanned = 0;
        while i < queue.len() && scanned < SCAN {
            scanned += 1;
            let q = &queue[i];
            let (o, b) = q.txn.weight();
            let fits = !q.alone && ops + o <= max_ops && bytes + b <= MAX_BYTES;
            let independent = fits
                && batch.iter().all(|t| {
                    !t.footprint.depends_on(&q.footprint) && !q.footprint.depends_on(&t.footprint)
                });
            if independent {
                ops += o;
                bytes += b;
                if let Some(q) = queue.remove(i) {
                    batch.push(q);
                }
            } else {
                i += 1;
            }
        }
        batch
    }

    /// Sends batches until the task is aborted.
    pub async fn serve(self: Arc<Self>, client: Client, max_ops: usize) {
        let slots = Arc::new(Semaphore::new(IN_FLIGHT));
        loop {
            self.wake.notified().await;
            loop {
                let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
                    return;
                };
                let batch = self.next_batch(max_ops);
                if batch.is_empty() {
                    break;
                }
                let client = client.clone();
                tokio::spawn(async move {
                    let _permit = permit;
                    send(&client, batch, max_ops).await;
                });
            }
        }
    }
}

/// One etcd transaction for the batch; every member gets the outcome.
async fn send(client: &Client, batch: Vec<Queued>, max_ops: usize) {
    let request = {
        let txns: Vec<&Txn> = batch.iter().map(|q| &q.txn).collect();
        combined(&txns, max_ops)
    };
    // Every copy of the transaction compares what each member read at its
    // snapshot: none can commit at or before the oldest snapshot.
    let after = batch.iter().map(|q| q.txn.snapshot()).min().unwrap_or(0);
    let log_key = batch.first().map(|q| q.txn.log_key()).unwrap_or_default();
    let outcome = match request {
        Ok(r) => commit(client, r, log_key, after).await,
        Err(e) => Err(e),
    };
    for q in batch {
        let _ = q.reply.send((q.txn, outcome.clone()));
    }
}

/// Sends the batch's transaction (its writes read at etcd revisions after
/// `after`); when a member lost the answer and a
/// copy went to another, a failed compare is looked into: the first copy
/// may be what changed the keys, and then the batch did commit.
async fn commit(client: &Client, req: TxnRequest, log_key: Vec<u8>, after: i64) -> Outcome {
    let Some(record) = resendable(&req, &log_key).map(<[u8]>::to_vec) else {
        let resp = client.txn(req).await?;
        return Ok((resp.succeeded, revision(&resp)));
    };
    let (resp, resent) = client.txn_resending(req).await?;
    let at = revision(&resp);
    if resp.succeeded || !resent {
        return Ok((resp.succeeded, at));
    }
    // A copy that had not committed by `at` never will: it compares keys
    // that had changed by then.
    match crate::history::find_put(client, log_key, &record, after, at).await {
        Ok(Some(committed)) => {
            tracing::info!(committed, "a commit whose answer was lost had landed");
            Ok((true, committed))
        }
        Ok(None) => Ok((false, at)),
        // History compacted away or unreadable: the outcome stays unknown,
        // and the caller is told so, not a watch's error.
        Err(e) => Err(Error::Unavailable(format!(
            "{}: a commit's answer was lost and whether it landed could not be read ({e}): it may or may not have been applied; read before retrying",
            client.describe()
        ))),
    }
}

fn revision(resp: &TxnResponse) -> i64 {
    resp.header.as_ref().map_or(0, |h| h.revision)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::Keys;
    use crate::mirror::Snap;
    use cairn_store::WriteTxn;
    use cairn_store::records::TodoRecord;

    /// A write of agent `agent`'s todo list, queued.
    fn queued(batcher: &Batcher, agent: &str, alone: bool) {
        let mut txn = Txn::writer(Keys::new("/t/"), Snap::default());
        // Read, then written: what an op does.
        let _ = cairn_store::ReadTxn::todos(&txn, agent);
        txn.put_todos(&TodoRecord {
            agent_id: agent.into(),
            ..TodoRecord::default()
        })
        .unwrap();
        let footprint = txn.footprint();
        let (reply, _) = oneshot::channel();
        batcher.queue.lock().unwrap().push_back(Queued {
            txn,
            footprint,
            alone,
            reply,
        });
    }

    fn agents(batch: &[Queued]) -> Vec<Vec<u8>> {
        batch
            .iter()
            .map(|q| q.footprint.writes[0].clone())
            .collect()
    }

    #[test]
    fn a_batch_takes_only_independent_writes_and_a_lone_one_goes_alone() {
        let b = Batcher::default();
        queued(&b, "a", false);
        queued(&b, "a", false);
        queued(&b, "b", false);
        queued(&b, "c", true);
        queued(&b, "d", false);
        let first = b.next_batch(128);
        assert_eq!(
            agents(&first),
            vec![b"/t/t/a".to_vec(), b"/t/t/b".to_vec(), b"/t/t/d".to_vec()]
        );
        // The second write of a waits for the next batch, in order.
        assert_eq!(agents(&b.next_batch(128)), vec![b"/t/t/a".to_vec()]);
        assert_eq!(agents(&b.next_batch(128)), vec![b"/t/t/c".to_vec()]);
        assert!(b.next_batch(128).is_empty());
    }

    #[test]
    fn a_batch_stays_within_the_cluster_s_operations_limit() {
        let b = Batcher::default();
        for agent in ["a", "b", "c", "d"] {
            queued(&b, agent, false);
        }
        // Each write weighs two operations (its put, its share of the log).
        assert_eq!(b.next_batch(5).len(), 2);
        assert_eq!(b.next_batch(5).len(), 2);
    }
}
