//! What the etcd engine's parts share: its options, its own runtime, and
//! the state its writers, readers and log follower all hold.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use cairn_core::Micros;
use cairn_store::health::Health;
use cairn_store::hub::Hub;
use cairn_store::now_micros;
use tokio::runtime::Handle;
use tokio::sync::{Notify, Semaphore};

use crate::client::{Client, Connection};
use crate::keys::Keys;

/// How the etcd engine is set up.
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    pub connection: Connection,
    /// Prefix of every key, so that one etcd holds several deployments.
    pub prefix: String,
    /// Committed revisions buffered per live watcher before it must catch
    /// up from the log.
    pub watch_buffer: usize,
    /// Most operations etcd accepts in one transaction (its
    /// `--max-txn-ops`, 128 by default).
    pub max_txn_ops: usize,
    /// Mutations in flight at once (each holds a blocking thread while it
    /// waits for etcd); more wait.
    pub max_in_flight: usize,
    /// Times a mutation runs again after losing a race before it fails.
    pub max_attempts: u32,
    /// TTL of the etcd lease a replica's presence is on: how long after a
    /// replica dies the others adopt the session leases it held.
    pub replica_ttl: Duration,
}

impl EtcdOptions {
    pub fn new(endpoints: Vec<String>) -> Self {
        EtcdOptions {
            connection: Connection {
                endpoints,
                timeout: Duration::from_secs(5),
                ca_file: None,
                identity_files: None,
                credentials: None,
            },
            prefix: "/cairn/".into(),
            watch_buffer: 128,
            max_txn_ops: 128,
            max_in_flight: 256,
            max_attempts: 64,
            replica_ttl: Duration::from_secs(10),
        }
    }
}

/// The engine's own runtime: etcd's connections, the log watch and the
/// blocking threads the transactions wait on live here, whatever runtime (and
/// flavour) the caller runs on — a transaction's `block_on` needs a runtime whose
/// timers and sockets other threads drive.
pub(crate) struct OwnRuntime(pub(crate) Option<tokio::runtime::Runtime>);

impl Drop for OwnRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            // Never blocks: may run inside another runtime's task.
            rt.shutdown_background();
        }
    }
}

/// What the engine's parts share.
pub struct Inner {
    pub(crate) client: Client,
    pub(crate) keys: Keys,
    pub(crate) hub: Arc<Hub>,
    pub(crate) health: Health,
    pub(crate) rt: Handle,
    pub(crate) revision: AtomicU64,
    pub(crate) closed: AtomicBool,
    pub(crate) close_signal: Notify,
    pub(crate) writes: Arc<Semaphore>,
    pub(crate) last_now: Mutex<Micros>,
    /// The etcd lease this replica's presence is on, once announced.
    pub(crate) presence: Mutex<Option<i64>>,
    pub(crate) opts: EtcdOptions,
    /// Owns what `rt` runs on; last, so it goes after everything using it.
    pub(crate) _runtime: OwnRuntime,
}

impl Inner {
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Completes once the engine closes.
    pub(crate) async fn closed(&self) {
        let notified = self.close_signal.notified();
        if self.is_closed() {
            return;
        }
        notified.await;
    }

    /// Notes a revision known to be committed.
    pub(crate) fn observed(&self, revision: u64) {
        self.revision.fetch_max(revision, Ordering::AcqRel);
    }

    pub(crate) fn now(&self) -> Micros {
        let mut last = self.last_now.lock().unwrap_or_else(PoisonError::into_inner);
        *last = now_micros().max(*last);
        *last
    }
}
