//! The etcd engine behind the store's [`Backend`] seam.
//!
//! A mutation's revision is the etcd transaction's that commits it: its
//! own, or one it shares with independent mutations ready with it
//! ([`crate::batcher`]). The mutation runs on the replica's copy
//! ([`crate::mirror`]); its transaction compares what it read, so a copy
//! that lagged another replica's write costs a second run, never a lost
//! update. This replica's own writes of the same keys queue
//! ([`crate::claims`]) instead of racing each other. A write is answered
//! only once etcd has committed it (to a quorum's disks), and with an
//! error — never a guess — when etcd cannot say.
//!
//! Everything awaits etcd on the caller's runtime: no blocking thread, no
//! runtime of the engine's own.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use cairn_core::error::{Error, Result};
use cairn_store::health::{Health, Readiness};
use cairn_store::hub::Hub;
use cairn_store::records::Revision;
use cairn_store::seam::{BoxFuture, CommitTimes, ReadJob, WriteJob};
use cairn_store::{Backend, Ctx, Store};
use tokio::sync::{Notify, Semaphore, watch};
use tokio::task::JoinHandle;

use crate::barrier::Barrier;
use crate::batcher::Batcher;
use crate::claims::{Claims, settled};
use crate::client::Client;
use crate::keys::Keys;
use crate::mirror::Mirror;
use crate::shared::{EtcdOptions, Inner};
use crate::txn::Txn;
use cairn_store::ReadTxn;

/// How long a write that lost a compare waits for the copy to reach the
/// revision that beat it. Revisions of keys outside the prefix never
/// reach the copy: after this, it runs on what the copy has.
const CATCH_UP: Duration = Duration::from_millis(50);

/// The etcd engine.
pub struct Etcd {
    inner: Arc<Inner>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

/// Connects to the cluster, loads the deployment's keys, starts following
/// them, and returns the store over them. Fails if no member answers
/// within the timeout.
pub async fn open(opts: &EtcdOptions) -> Result<Store> {
    if !opts.prefix.ends_with('/') {
        return Err(Error::InvalidField {
            field: "etcd_prefix".into(),
            description: format!("{:?} must end with '/'", opts.prefix),
        });
    }
    let client = Client::new(&opts.connection)?;
    let keys = Keys::new(&opts.prefix);
    client.authenticate().await?;
    let snap = crate::mirror::load(&client, &keys).await?;
    let (indexed, migrated) =
        crate::migrate::index_waiting(&client, &keys, &snap, opts.max_txn_ops).await?;
    if indexed > 0 {
        tracing::info!(indexed, "plans awaiting approval indexed for the inbox");
    }
    let log_key = keys.log();
    // Dispatched so far: the last logged revision (0 on an empty
    // deployment).
    let start = snap
        .kvs
        .get(&log_key)
        .map_or(0, |kv| u64::try_from(kv.mod_revision).unwrap_or(0));
    let loaded = snap.revision;
    // No hot plans: the copy is the cache, and it is fenced per read.
    let hub = Arc::new(Hub::new(start, opts.watch_buffer, 0));
    let inner = Arc::new(Inner {
        health: Health::new(client.describe().to_owned()),
        client,
        keys,
        hub: Arc::clone(&hub),
        mirror: Mirror::new(snap),
        claims: Claims::default(),
        barrier: Barrier::default(),
        batcher: Arc::new(Batcher::default()),
        log_key,
        // Reads wait for the copy to hold what the migration wrote, as for
        // this replica's own commits.
        written: AtomicI64::new(migrated),
        revision: AtomicU64::new(start),
        closed: AtomicBool::new(false),
        close_signal: Notify::new(),
        writes: Arc::new(Semaphore::new(opts.max_in_flight.max(1))),
        last_now: Mutex::new(0),
        presence: Mutex::new(None),
        opts: opts.clone(),
    });
    let mut tasks = vec![tokio::spawn(crate::follow::follow(Arc::clone(&inner)))];
    let barrier = Arc::clone(&inner);
    tasks.push(tokio::spawn(async move {
        barrier
            .barrier
            .serve(&barrier.client, barrier.log_key.clone())
            .await;
    }));
    tasks.push(tokio::spawn(
        Arc::clone(&inner.batcher).serve(inner.client.clone(), opts.max_txn_ops),
    ));
    // A member out of rotation is reduced redundancy, not an outage.
    let mut out = inner.client.members_out();
    let weak = Arc::downgrade(&inner);
    tasks.push(tokio::spawn(async move {
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
    }));
    tracing::info!(endpoints = %inner.client.describe(), prefix = %opts.prefix, revision = start, etcd_revision = loaded, "etcd store open");
    let engine = Etcd {
        inner,
        tasks: Mutex::new(tasks),
    };
    Ok(Store::new(Arc::new(engine), hub))
}

/// The ticket a write holds in this replica's queue, given back however
/// the write ends.
struct Ticket<'a> {
    claims: &'a Claims,
    ticket: Option<u64>,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.ticket {
            self.claims.release(t);
        }
    }
}

/// Runs one write job to its end: committed and answered, failed and
/// answered, or run again after losing a race.
async fn run_write(inner: &Inner, mut job: WriteJob) {
    let now = inner.now();
    let mut attempt = 0;
    let mut fenced = false;
    let mut ticket = Ticket {
        claims: &inner.claims,
        ticket: None,
    };
    loop {
        let mut txn = Txn::writer(inner.keys.clone(), inner.mirror.snapshot());
        let snapshot = txn.snapshot();
        let mut staged = Vec::new();
        let (finish, poisoned) = {
            let revision = txn.revision().unwrap_or(0);
            let mut ctx = Ctx::pending(&mut txn, now, revision, &mut staged);
            job(Some(&mut ctx))
        };
        if let Some(e) = poisoned {
            finish(&Err(e), 1);
            return;
        }
        if !txn.has_changes() {
            // Refused before writing, or nothing to change. No compare
            // guards that answer: it must not come from a copy that lags a
            // write acknowledged before this one began.
            if !fenced {
                fenced = true;
                if let Err(e) = fence(inner).await {
                    finish(&Err(e), 1);
                    return;
                }
                if inner.mirror.applied() > snapshot {
                    drop(finish);
                    continue;
                }
            }
            finish(&Ok(()), 1);
            return;
        }
        let footprint = txn.footprint();
        if let Err(wait) = inner.claims.claim(
            &mut ticket.ticket,
            footprint.clone(),
            snapshot,
            inner.mirror.applied(),
        ) {
            // An earlier write of this replica changes what this one read:
            // run again once the copy has it (not counted as an attempt).
            drop(finish);
            if let Some(r) = settled(wait).await
                && let Err(e) = inner.mirror.reached(r, inner.client.timeout()).await
            {
                // The copy is not following etcd: no way to run on what
                // the earlier write committed.
                let (finish, _) = job(None);
                finish(&Err(e), 1);
                return;
            }
            continue;
        }
        attempt += 1;
        // After a lost compare, alone: only its own conflicts can fail it.
        let Some((back, outcome)) = inner.batcher.commit(txn, footprint, attempt > 1).await else {
            finish(&Err(Error::ShuttingDown), 1);
            return;
        };
        txn = back;
        let (succeeded, revision) = match outcome {
            Ok(o) => o,
            Err(e) => {
                finish(&Err(e), 1);
                return;
            }
        };
        if !succeeded {
            // Another replica changed something it (or, in a batch, another
            // member) read: run it again on the copy once it has that
            // change.
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
            let _ = inner.mirror.reached(revision, CATCH_UP).await;
            if attempt > 1 {
                tokio::time::sleep(Duration::from_micros(
                    200 * u64::from(attempt.min(20)) + jitter_micros(),
                ))
                .await;
            }
            continue;
        }
        drop(finish);
        if let Some(t) = ticket.ticket.take() {
            // Later writes of the same keys wait for the copy to have it.
            inner.claims.committed(t, revision);
        }
        answer(inner, txn, job, now, revision).await;
        return;
    }
}

/// Answers a committed write, and runs the etcd compaction it asked for.
async fn answer(
    inner: &Inner,
    mut txn: Txn,
    mut job: WriteJob,
    now: cairn_core::Micros,
    revision: i64,
) {
    inner.written.fetch_max(revision, Ordering::AcqRel);
    let revision = u64::try_from(revision).unwrap_or(0);
    if txn.logged() {
        inner.observed(revision);
    }
    let compact_to = txn.compact_to();
    // The answer: the same mutation on the same snapshot, now knowing its
    // revision (its changes are dropped; they are committed).
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
        if let Err(e) = inner.client.compact(to).await {
            tracing::warn!(error = %e, "etcd compaction failed; the next one retries");
        }
    }
}

/// A little jitter, so racing replicas do not retry in lockstep.
fn jitter_micros() -> u64 {
    u64::from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
            % 500,
    )
}

/// Waits until the copy holds every mutation committed before this call
/// (and this replica's own writes): what makes a read from it
/// linearizable.
async fn fence(inner: &Inner) -> Result<()> {
    let last = inner.barrier.revision().await?;
    let target = last.max(inner.written.load(Ordering::Acquire));
    inner.mirror.reached(target, inner.client.timeout()).await
}

impl Inner {
    /// Logged revisions from `from` through the last one the copy holds
    /// (committed, and dispatched or about to be), from etcd's history of
    /// the log key.
    async fn history(&self, from: u64, limit: usize, max_bytes: usize) -> Result<Vec<Revision>> {
        let upto = self
            .mirror
            .snapshot()
            .kvs
            .get(&self.log_key)
            .map_or(0, |kv| kv.mod_revision);
        let from = i64::try_from(from).unwrap_or(i64::MAX).max(1);
        if from > upto {
            return Ok(Vec::new());
        }
        crate::history::history(
            &self.client,
            self.log_key.clone(),
            from,
            upto,
            limit.max(1),
            max_bytes,
            u64::try_from(upto).unwrap_or(0),
        )
        .await
    }
}

/// Serves a read from the copy once it is fenced.
async fn run_read(inner: &Inner, job: ReadJob) {
    match fence(inner).await {
        Ok(()) => job(Ok(&Txn::reader(
            inner.keys.clone(),
            inner.mirror.snapshot(),
        ))),
        Err(e) => job(Err(e)),
    }
}

impl Backend for Etcd {
    fn read(&self, job: ReadJob) -> Result<()> {
        if self.inner.is_closed() {
            return Err(Error::ShuttingDown);
        }
        let inner = Arc::clone(&self.inner);
        tokio::spawn(async move { run_read(&inner, job).await });
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
            // Its own task: a caller that goes away does not stop a commit
            // half way through its queue.
            let done = tokio::spawn(async move {
                let _permit = permit;
                run_write(&inner, job).await;
            });
            done.await
                .map_err(|e| Error::Internal(format!("write task: {e}")))
        })
    }

    fn log(
        &self,
        from: u64,
        limit: usize,
        max_bytes: usize,
    ) -> Option<BoxFuture<'_, Result<Vec<Revision>>>> {
        Some(Box::pin(self.inner.history(from, limit, max_bytes)))
    }

    /// Read from etcd's history of the log key, about a megabyte of records
    /// at a time: the compactor asks again for what it did not get.
    fn revision_times(
        &self,
        from: u64,
        limit: usize,
    ) -> Option<BoxFuture<'_, Result<CommitTimes>>> {
        Some(Box::pin(async move {
            let revs = self.inner.history(from, limit, 1 << 20).await?;
            Ok(revs.iter().map(|r| (r.revision, r.time)).collect())
        }))
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
        Box::pin(crate::presence::announce(
            Arc::clone(&self.inner),
            name.to_owned(),
        ))
    }

    fn replicas(&self) -> BoxFuture<'_, Result<Option<BTreeSet<String>>>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move { Ok(Some(crate::presence::replicas(&inner).await?)) })
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
            let tasks =
                std::mem::take(&mut *self.tasks.lock().unwrap_or_else(PoisonError::into_inner));
            for t in &tasks {
                t.abort();
            }
            for t in tasks {
                let _ = t.await;
            }
            crate::presence::withdraw(&self.inner).await;
        })
    }
}
