//! What the etcd engine's parts share: its options, and the state its
//! writers, readers and follower all hold.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use cairn_core::Micros;
use cairn_store::health::Health;
use cairn_store::hub::Hub;
use cairn_store::now_micros;
use tokio::sync::{Notify, Semaphore};

use crate::barrier::Barrier;
use crate::batcher::Batcher;
use crate::claims::Claims;
use crate::client::{Client, Connection};
use crate::keys::Keys;
use crate::mirror::Mirror;

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
    /// Mutations in flight at once; more wait.
    pub max_in_flight: usize,
    /// Times a mutation runs again after losing a race before it fails.
    pub max_attempts: u32,
    /// TTL of the etcd lease a replica's presence is on: how long after a
    /// replica dies the others adopt the session leases it held.
    pub replica_ttl: Duration,
    /// Fault injection for tests: how long the watch's messages wait
    /// before the copy applies them, so that the copy lags etcd the way a
    /// slow network or a busy replica makes it (`CAIRN_FAULT_ETCD_WATCH_LAG`,
    /// a duration such as `50ms`; never set in production).
    pub watch_lag: Option<Duration>,
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
            watch_lag: std::env::var("CAIRN_FAULT_ETCD_WATCH_LAG")
                .ok()
                .and_then(|v| cairn_core::duration::parse_duration(&v).ok()),
        }
    }
}

/// What the engine's parts share.
pub struct Inner {
    pub(crate) client: Client,
    pub(crate) keys: Keys,
    pub(crate) hub: Arc<Hub>,
    pub(crate) health: Health,
    /// The replica's copy of the deployment's keys.
    pub(crate) mirror: Mirror,
    /// This replica's writes not yet in the copy, per key.
    pub(crate) claims: Claims,
    /// The shared linearizable read that fences reads from the copy.
    pub(crate) barrier: Barrier,
    /// Independent writes ready together, committed as one transaction.
    pub(crate) batcher: Arc<Batcher>,
    /// The log key, compared on every event of the watch.
    pub(crate) log_key: Vec<u8>,
    /// The last etcd revision this replica committed: its own reads see
    /// it, even a maintenance write the log key does not record.
    pub(crate) written: AtomicI64,
    /// Last Cairn revision known committed.
    pub(crate) revision: AtomicU64,
    pub(crate) closed: AtomicBool,
    pub(crate) close_signal: Notify,
    pub(crate) writes: Arc<Semaphore>,
    pub(crate) last_now: Mutex<Micros>,
    /// The etcd lease this replica's presence is on, once announced.
    pub(crate) presence: Mutex<Option<i64>>,
    pub(crate) opts: EtcdOptions,
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
