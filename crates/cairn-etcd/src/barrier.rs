//! The read barrier: before a read is served from the replica's copy, the
//! copy must hold every mutation acknowledged anywhere before the read
//! arrived. One linearizable etcd read of the log key's revision says
//! which (every mutation rewrites that key); concurrent reads share it.
//!
//! A read joins the next round that has not been sent yet, never one
//! already on the wire, which may have been answered before the read
//! began. So with any number of readers there is at most one round on the
//! wire and one waiting: a round trip per batch of reads, as the
//! Kubernetes apiserver's consistent reads from its watch cache do.

use std::sync::{Mutex, PoisonError};

use cairn_core::error::{Error, Result};
use tokio::sync::{Notify, oneshot};

use crate::client::Client;
use crate::pb::etcdserverpb::RangeRequest;

/// The readers waiting for the next round.
#[derive(Default)]
pub struct Barrier {
    waiting: Mutex<Vec<oneshot::Sender<Result<i64>>>>,
    wake: Notify,
}

impl Barrier {
    /// The revision of the last mutation committed before this call.
    pub async fn revision(&self) -> Result<i64> {
        let (tx, rx) = oneshot::channel();
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(tx);
        self.wake.notify_one();
        rx.await.map_err(|_| Error::ShuttingDown)?
    }

    /// Sends the rounds, one at a time, while there are readers; runs
    /// until its task is aborted.
    pub async fn serve(&self, client: &Client, log_key: Vec<u8>) {
        loop {
            self.wake.notified().await;
            loop {
                let round = std::mem::take(
                    &mut *self.waiting.lock().unwrap_or_else(PoisonError::into_inner),
                );
                if round.is_empty() {
                    break;
                }
                let answer = client
                    .range(RangeRequest {
                        key: log_key.clone(),
                        keys_only: true,
                        ..RangeRequest::default()
                    })
                    .await
                    .map(|r| r.kvs.first().map_or(0, |kv| kv.mod_revision));
                for tx in round {
                    let _ = tx.send(answer.clone());
                }
            }
        }
    }
}
