//! The etcd engine behind the store's [`Backend`] seam.
//!
//! A write is one etcd transaction for one mutation, so a mutation's
//! revision is the transaction's. Mutations from any number of replicas
//! run concurrently; each transaction compares what its mutation read, so
//! two that touch the same objects can never both win: the loser runs
//! again on the new state (and then, say, fails its `expected_revision`).
//! A write is answered only once etcd has committed it (to a quorum's
//! disks), and with an error — never a guess — when etcd cannot say.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use cairn_core::error::{Error, Result};
use cairn_store::health::{Health, Readiness, guard};
use cairn_store::hub::Hub;
use cairn_store::seam::{BoxFuture, ReadJob, WriteJob};
use cairn_store::{Backend, Ctx, Store};
use tokio::sync::{Notify, Semaphore, watch};
use tokio::task::JoinHandle;

use crate::client::Client;
use crate::keys::Keys;
use crate::pb::etcdserverpb::RangeRequest;
use crate::shared::{EtcdOptions, Inner, OwnRuntime};
use crate::txn::Txn;
use cairn_store::ReadTxn;

/// The etcd engine.
pub struct Etcd {
    inner: Arc<Inner>,
    follower: Mutex<Option<JoinHandle<()>>>,
}

/// Connects to the cluster, starts following its log, and returns the
/// store over it. Fails if no member answers within the timeout.
pub async fn open(opts: &EtcdOptions) -> Result<Store> {
    if !opts.prefix.ends_with('/') {
        return Err(Error::InvalidField {
            field: "etcd_prefix".into(),
            description: format!("{:?} must end with '/'", opts.prefix),
        });
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("cairn-etcd")
        .enable_all()
        .build()
        .map_err(|e| Error::Internal(format!("etcd runtime: {e}")))?;
    let rt = runtime.handle().clone();
    let runtime = OwnRuntime(Some(runtime));
    let client = {
        // The channel's connections are tasks of the engine's runtime.
        let _entered = rt.enter();
        Client::new(&opts.connection)?
    };
    let keys = Keys::new(&opts.prefix);
    let (c, key, k) = (client.clone(), keys.log(), keys.clone());
    let max_ops = opts.max_txn_ops;
    let head = rt
        .spawn(async move {
            c.authenticate().await?;
            let indexed = crate::migrate::index_waiting(&c, &k, max_ops).await?;
            if indexed > 0 {
                tracing::info!(indexed, "plans awaiting approval indexed for the inbox");
            }
            c.range(RangeRequest {
                key,
                keys_only: true,
                ..RangeRequest::default()
            })
            .await
        })
        .await
        .map_err(|e| Error::Internal(format!("etcd open: {e}")))??;
    // Dispatched so far: the last logged revision (0 on an empty
    // deployment); the log watch starts right after it.
    let start = head.kvs.first().map_or(0, |kv| kv.mod_revision);
    let start_u = u64::try_from(start).unwrap_or(0);
    // No hot plans: a replica's memory may lag other replicas' writes, and
    // reads must be linearizable.
    let hub = Arc::new(Hub::new(start_u, opts.watch_buffer, 0));
    let inner = Arc::new(Inner {
        health: Health::new(client.describe().to_owned()),
        client,
        keys,
        hub: Arc::clone(&hub),
        rt: rt.clone(),
        revision: AtomicU64::new(start_u),
        closed: AtomicBool::new(false),
        close_signal: Notify::new(),
        writes: Arc::new(Semaphore::new(opts.max_in_flight.max(1))),
        last_now: Mutex::new(0),
        presence: Mutex::new(None),
        opts: opts.clone(),
        _runtime: runtime,
    });
    let follower = rt.spawn(crate::follow::follow(Arc::clone(&inner), start + 1));
    // A member out of rotation is reduced redundancy, not an outage.
    let mut out = inner.client.members_out();
    let weak = Arc::downgrade(&inner);
    rt.spawn(async move {
        loop {
            let count = *out.borrow_and_update();
            match weak.upgrade() {
                Some(inner) => inner.health.set_degraded(count > 0),
                None => return,
            }
            if out.changed().await.is_err() {
                return;
            }
        }
    });
    tracing::info!(endpoints = %inner.client.describe(), prefix = %opts.prefix, revision = start, "etcd store open");
    let engine = Etcd {
        inner,
        follower: Mutex::new(Some(follower)),
    };
    Ok(Store::new(Arc::new(engine), hub))
}

/// Runs one write job to its end: committed and answered, failed and
/// answered, or retried after losing a race.
fn run_write(inner: &Inner, mut job: WriteJob) {
    let now = inner.now();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut txn = Txn::writer(inner.client.clone(), inner.keys.clone(), inner.rt.clone());
        let mut staged = Vec::new();
        let snapshot = match txn.revision() {
            Ok(s) => s,
            Err(e) => {
                let (finish, _) = job(None);
                finish(&Err(e), 1);
                return;
            }
        };
        let (finish, poisoned) = {
            let mut ctx = Ctx::pending(&mut txn, now, snapshot, &mut staged);
            job(Some(&mut ctx))
        };
        if let Some(e) = poisoned {
            finish(&Err(e), 1);
            return;
        }
        if !txn.has_changes() {
            // Refused before writing, or nothing to change: answered as is.
            finish(&Ok(()), 1);
            return;
        }
        let committed = txn
            .transaction(inner.opts.max_txn_ops)
            .and_then(|txn| inner.rt.block_on(inner.client.txn(txn)));
        let resp = match committed {
            Ok(resp) => resp,
            Err(e) => {
                finish(&Err(e), 1);
                return;
            }
        };
        if !resp.succeeded {
            // Something it read changed: run it again on the new state.
            drop(finish);
            if attempt >= inner.opts.max_attempts {
                let (finish, _) = job(None);
                finish(
                    &Err(Error::Unavailable(format!(
                        "gave up after {attempt} attempts: other writers kept changing what this mutation reads"
                    ))),
                    1,
                );
                return;
            }
            std::thread::sleep(Duration::from_micros(
                200 * u64::from(attempt.min(20)) + fastrand_micros(),
            ));
            continue;
        }
        drop(finish);
        let revision = resp
            .header
            .as_ref()
            .map_or(0, |h| u64::try_from(h.revision).unwrap_or(0));
        if txn.logged() {
            inner.observed(revision);
        }
        let compact_to = txn.compact_to();
        // The answer: the same mutation on the same snapshot, now knowing
        // its revision (its changes are dropped; they are committed).
        let replay = txn.replay();
        let mut staged = Vec::new();
        let (finish, _) = {
            let mut ctx = Ctx::new(replay, now, revision.saturating_sub(1), &mut staged);
            job(Some(&mut ctx))
        };
        finish(&Ok(()), 1);
        if let Some(upto) = compact_to {
            // etcd keeps revision upto + 1 and everything after it.
            let to = i64::try_from(upto + 1).unwrap_or(i64::MAX);
            if let Err(e) = inner.rt.block_on(inner.client.compact(to)) {
                tracing::warn!(error = %e, "etcd compaction failed; the next one retries");
            }
        }
        return;
    }
}

/// A little jitter, so racing replicas do not retry in lockstep.
fn fastrand_micros() -> u64 {
    u64::from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
            % 500,
    )
}

impl Backend for Etcd {
    fn read(&self, job: ReadJob) -> Result<()> {
        if self.inner.is_closed() {
            return Err(Error::ShuttingDown);
        }
        let inner = Arc::clone(&self.inner);
        self.inner.rt.spawn_blocking(move || {
            let txn = Txn::reader(inner.client.clone(), inner.keys.clone(), inner.rt.clone());
            job(&txn);
        });
        Ok(())
    }

    fn write(&self, job: WriteJob, _bytes: usize) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            if self.inner.is_closed() {
                return Err(Error::ShuttingDown);
            }
            let permit = Arc::clone(&self.inner.writes)
                .acquire_owned()
                .await
                .map_err(|_| Error::ShuttingDown)?;
            let inner = Arc::clone(&self.inner);
            let done = self.inner.rt.spawn_blocking(move || {
                let _permit = permit;
                // A panic is the job's own (caught inside it); this guards
                // the engine's code around it.
                let _ = guard(|| {
                    run_write(&inner, job);
                    Ok(())
                });
            });
            done.await
                .map_err(|e| Error::Internal(format!("write task: {e}")))
        })
    }

    fn revision(&self) -> u64 {
        self.inner.revision.load(Ordering::Acquire)
    }

    fn condition(&self) -> watch::Receiver<Readiness> {
        self.inner.health.subscribe()
    }

    fn describe(&self) -> String {
        format!(
            "{} (prefix {})",
            self.inner.client.describe(),
            self.inner.opts.prefix
        )
    }

    fn announce(&self, name: &str) -> BoxFuture<'_, Result<()>> {
        let announce = crate::presence::announce(Arc::clone(&self.inner), name.to_owned());
        Box::pin(async move {
            self.inner
                .rt
                .spawn(announce)
                .await
                .map_err(|e| Error::Internal(format!("replica announcement: {e}")))?
        })
    }

    fn replicas(&self) -> BoxFuture<'_, Result<Option<BTreeSet<String>>>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let alive = self
                .inner
                .rt
                .spawn(async move { crate::presence::replicas(&inner).await })
                .await
                .map_err(|e| Error::Internal(format!("replicas read: {e}")))??;
            Ok(Some(alive))
        })
    }

    fn observe(&self, e: Error) -> Error {
        match e {
            // One bad record (written around Cairn, say with etcdctl) fails
            // the reads that touch it, named by its key; it is no reason
            // to drain every replica, and when the key is repaired or
            // deleted nothing is left to recover.
            Error::DataLoss { file, detail } if file.starts_with("etcd key ") => {
                tracing::error!(key = %file, %detail, "a record in etcd does not decode");
                Error::DataLoss { file, detail }
            }
            e => self.inner.health.observe(e),
        }
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.inner.closed.store(true, Ordering::Release);
            self.inner.close_signal.notify_waiters();
            // Writes already running finish and are answered.
            let all = u32::try_from(self.inner.opts.max_in_flight.max(1)).unwrap_or(u32::MAX);
            let _drained = self.inner.writes.acquire_many(all).await;
            let follower = self
                .follower
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            if let Some(f) = follower {
                let _ = f.await;
            }
            let inner = Arc::clone(&self.inner);
            let _ = self
                .inner
                .rt
                .spawn(async move { crate::presence::withdraw(&inner).await })
                .await;
        })
    }
}
