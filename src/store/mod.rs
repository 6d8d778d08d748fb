//! Durable state: redb tables, the revision log, and the single writer.
//!
//! ```text
//!  RPC handlers ──write(op)──▶ bounded queue ──▶ writer thread
//!                                                 │ drain up to `commit_batch` ops
//!                                                 │ run each op in ONE write txn
//!                                                 │ commit (Durability::Immediate)
//!                                                 ├──▶ reply to each op
//!                                                 └──▶ hand committed revisions to the watch hub
//!  RPC handlers ──read(f)──▶ reader threads: drain waiting reads, run them
//!                            in one redb read txn (never blocks the writer)
//! ```
//!
//! Every successful mutation gets its own revision (+1, store-wide) and one
//! entry in the event log holding all of its events, written in the same
//! transaction as the data, so the log and the state can never disagree.
//! A mutation is answered only after the commit that contains it is on disk.
//! Mutations validate before they write, so one that fails leaves no trace
//! and never fails its neighbours in the batch.

mod backend;
pub mod compactor;
pub mod health;
pub mod ops;
pub mod records;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redb::{Database, Durability, ReadableDatabase};
use tokio::sync::{mpsc, oneshot};

pub use backend::{ReadView, WriteView};
use backend::{RedbView, RedbWrite};
pub use health::Condition;
use health::{Health, guard, needs_reopen};
use records::{Event, Revision};

use crate::domain::Micros;
use crate::error::{Error, Result};
use crate::watch::Hub;

/// What an op counts against the byte budget at least (keys, record
/// overhead, the log entry), whatever its declared size.
const MIN_OP_BYTES: usize = 256;

/// Name of the database file inside the data directory.
pub const DB_FILE: &str = "cairn.redb";

/// How the store is opened.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Directory holding the database file; created if missing.
    pub data_dir: PathBuf,
    /// Most mutations committed together in one transaction (1 disables
    /// group commit).
    pub commit_batch: usize,
    /// Approximate bytes of input committed together in one transaction; a
    /// batch closes once it reaches this (so it may exceed it by one op).
    pub commit_bytes: usize,
    /// Mutations waiting for the writer before callers wait (backpressure).
    pub queue_depth: usize,
    /// Committed revisions buffered per live watcher before it must catch
    /// up from the log.
    pub watch_buffer: usize,
    /// Threads serving reads (0: one per core, at most 4).
    pub reader_threads: usize,
    /// Verify every page's checksum when opening (reads the whole file).
    pub check_integrity: bool,
    /// Bytes of database pages redb caches in memory.
    pub cache_bytes: usize,
}

impl StoreOptions {
    /// Defaults for a data directory.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        StoreOptions {
            data_dir: data_dir.into(),
            commit_batch: 256,
            commit_bytes: 8 * 1024 * 1024,
            queue_depth: 4096,
            watch_buffer: 128,
            reader_threads: 0,
            check_integrity: true,
            cache_bytes: 256 * 1024 * 1024,
        }
    }
}

/// The open database, shared by the writer and the readers. Empty while
/// the writer reopens it after an I/O error (redb latches those: the handle
/// must be closed, which needs every clone of it gone).
#[derive(Debug, Default)]
struct DbSlot(RwLock<Option<Arc<Database>>>);

impl DbSlot {
    fn get(&self) -> Option<Arc<Database>> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn put(&self, db: Option<Arc<Database>>) -> Option<Arc<Database>> {
        std::mem::replace(
            &mut *self.0.write().unwrap_or_else(PoisonError::into_inner),
            db,
        )
    }
}

/// What an op sees inside the writer's transaction.
pub struct Ctx<'a> {
    /// The transaction.
    pub view: &'a mut dyn WriteView,
    /// Server time of this batch; every timestamp an op writes comes from it.
    pub now: Micros,
    revision: u64,
    staged: &'a mut Vec<Arc<Revision>>,
    /// Set by maintenance ops that write without a revision (compaction),
    /// so the batch is committed even if no mutation in it logged one.
    maintenance: bool,
}

impl Ctx<'_> {
    /// The revision the op's changes get when it calls [`Ctx::commit`].
    pub fn next_revision(&self) -> u64 {
        self.revision + 1
    }

    /// Ends a successful op: logs its events under the next revision and
    /// returns that revision.
    /// Removes logged revisions up to `upto` (inclusive) and records it as
    /// the compact revision. Not a mutation: no revision, no event.
    pub fn compact_log(&mut self, upto: u64) -> Result<()> {
        self.view.compact_log(upto)?;
        self.maintenance = true;
        Ok(())
    }

    pub fn commit(&mut self, events: Vec<Event>) -> Result<u64> {
        let rev = Arc::new(Revision {
            revision: self.revision + 1,
            time: self.now,
            events,
        });
        self.view.append_revision(&rev)?;
        self.revision = rev.revision;
        self.staged.push(rev);
        Ok(self.revision)
    }
}

type Finisher = Box<dyn FnOnce(&Result<()>) + Send>;
/// An op runs with the batch's transaction, or with `None` when the batch
/// already failed (then it only produces its finisher).
/// Besides its finisher, an op returns the error that leaves the batch's
/// transaction unusable (a storage failure or a panic part way through its
/// writes), if any.
type Op = Box<dyn FnOnce(Option<&mut Ctx<'_>>) -> (Finisher, Option<Error>) + Send>;

enum Job {
    /// An op and its approximate size in bytes, for the batch byte budget.
    Apply(Op, usize),
    Shutdown,
}

/// A read waiting for a reader thread; `None` tells a reader to stop.
type ReadJob = Option<Box<dyn FnOnce(&dyn ReadView) + Send>>;

/// Most reads one reader thread serves from one read transaction.
const READ_BATCH: usize = 64;

struct Inner {
    reads: crossbeam_channel::Sender<ReadJob>,
    readers: Mutex<Vec<JoinHandle<()>>>,
    jobs: mpsc::Sender<Job>,
    writer: Mutex<Option<JoinHandle<()>>>,
    hub: Arc<Hub>,
    revision: Arc<AtomicU64>,
    db: Arc<DbSlot>,
    health: Arc<Health>,
    path: PathBuf,
}

/// A cheap, cloneable handle to the store.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.inner.path)
            .field("revision", &self.revision())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens the store (blocking: call before serving, or off the runtime).
    pub fn open(opts: &StoreOptions) -> Result<Self> {
        health::install_panic_hook();
        std::fs::create_dir_all(&opts.data_dir)
            .map_err(|e| Error::Storage(format!("create {}: {e}", opts.data_dir.display())))?;
        let path = opts.data_dir.join(DB_FILE);
        let health = Arc::new(Health::new(path.display().to_string()));
        let db = guard(|| backend::open(&path, opts.check_integrity, opts.cache_bytes))
            .map_err(|e| health.observe(e))?;
        let db = Arc::new(db);
        let start = guard(|| {
            let txn = db.begin_read()?;
            RedbView::Read(&txn).revision()
        })
        .map_err(|e| health.observe(e))?;
        let slot = Arc::new(DbSlot::default());
        slot.put(Some(db));
        let revision = Arc::new(AtomicU64::new(start));
        let (jobs, rx) = mpsc::channel(opts.queue_depth.max(1));
        let hub = Arc::new(Hub::new(start, opts.watch_buffer));
        let writer = {
            let w = Writer {
                slot: Arc::clone(&slot),
                hub: Arc::clone(&hub),
                revision: Arc::clone(&revision),
                health: Arc::clone(&health),
                path: path.clone(),
                cache_bytes: opts.cache_bytes,
                limits: BatchLimits {
                    ops: opts.commit_batch.max(1),
                    bytes: opts.commit_bytes.max(1),
                },
                last_now: 0,
            };
            std::thread::Builder::new()
                .name("cairn-writer".into())
                .spawn(move || w.run(rx))
                .map_err(|e| Error::Storage(format!("spawn writer: {e}")))?
        };
        let (reads, read_rx) = crossbeam_channel::unbounded::<ReadJob>();
        let n = match opts.reader_threads {
            0 => std::thread::available_parallelism()
                .map_or(1, std::num::NonZero::get)
                .min(4),
            n => n,
        };
        let mut readers = Vec::with_capacity(n);
        for i in 0..n {
            let slot = Arc::clone(&slot);
            let rx = read_rx.clone();
            readers.push(
                std::thread::Builder::new()
                    .name(format!("cairn-reader-{i}"))
                    .spawn(move || reader_loop(&slot, &rx))
                    .map_err(|e| Error::Storage(format!("spawn reader: {e}")))?,
            );
        }
        Ok(Store {
            inner: Arc::new(Inner {
                reads,
                readers: Mutex::new(readers),
                jobs,
                writer: Mutex::new(Some(writer)),
                hub,
                revision,
                db: slot,
                health,
                path,
            }),
        })
    }

    /// Path of the database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Last committed revision.
    pub fn revision(&self) -> u64 {
        self.inner.revision.load(Ordering::Acquire)
    }

    /// The fan-out of committed revisions to watchers.
    pub fn hub(&self) -> &Arc<Hub> {
        &self.inner.hub
    }

    /// Follows whether the store can serve (for health checks).
    pub fn condition(&self) -> tokio::sync::watch::Receiver<Condition> {
        self.inner.health.subscribe()
    }

    /// Runs `op` in the writer's transaction and answers once the commit
    /// holding it is durable. `op` must validate before it writes and call
    /// [`Ctx::commit`] exactly once when it changed something.
    pub async fn write<T, F>(&self, op: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Ctx<'_>) -> Result<T> + Send + 'static,
    {
        self.write_sized(0, op).await
    }

    /// [`Store::write`] for an op whose input is about `bytes` large, so
    /// that one batch stays within the commit byte budget.
    pub async fn write_sized<T, F>(&self, bytes: usize, op: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Ctx<'_>) -> Result<T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let health = Arc::clone(&self.inner.health);
        let job: Op = Box::new(move |ctx| {
            let out = match ctx {
                // A panic (say, a corrupt page) fails this op, and with it the
                // batch, whose transaction is in an unknown state.
                Some(ctx) => guard(|| op(ctx)),
                None => Err(Error::Storage("the batch failed before this op ran".into())),
            };
            let poisons_batch = match &out {
                Err(
                    e @ (Error::Storage(_)
                    | Error::DataLoss { .. }
                    | Error::DiskFull { .. }
                    | Error::Unavailable(_)
                    | Error::Internal(_)),
                ) => Some(e.clone()),
                _ => None,
            };
            let finish: Finisher = Box::new(move |commit: &Result<()>| {
                let reply = match (commit, out) {
                    (Ok(()), out) => out,
                    (Err(e), _) => Err(e.clone()),
                };
                // The caller may have gone away; the mutation stands anyway.
                let _ = tx.send(reply.map_err(|e| health.observe(e)));
            });
            (finish, poisons_batch)
        });
        self.inner
            .jobs
            .send(Job::Apply(job, bytes.max(MIN_OP_BYTES)))
            .await
            .map_err(|_| Error::ShuttingDown)?;
        rx.await.map_err(|_| Error::ShuttingDown)?
    }

    /// Runs `f` on a read snapshot, on a reader thread (never on the async
    /// workers). Reads that arrive together share one read transaction, so
    /// under load a reader wakes once per batch, not once per read.
    pub async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&dyn ReadView) -> Result<T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let health = Arc::clone(&self.inner.health);
        let job: ReadJob = Some(Box::new(move |view: &dyn ReadView| {
            // The caller may have gone away; nothing to undo for a read.
            let _ = tx.send(guard(|| f(view)).map_err(|e| health.observe(e)));
        }));
        self.inner
            .reads
            .send(job)
            .map_err(|_| Error::ShuttingDown)?;
        rx.await.map_err(|_| Error::ShuttingDown)?
    }

    /// Finishes queued writes, stops the writer and the readers, waits for
    /// them and closes the database file. Later writes fail with
    /// `ShuttingDown`. Idempotent.
    pub async fn close(&self) {
        let _ = self.inner.jobs.send(Job::Shutdown).await;
        let handle = self
            .inner
            .writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let readers = std::mem::take(
            &mut *self
                .inner
                .readers
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for _ in &readers {
            let _ = self.inner.reads.send(None);
        }
        let slot = Arc::clone(&self.inner.db);
        // Joined so that the database file is closed when this returns and
        // can be opened again at once (a restart in the same process).
        let _ = tokio::task::spawn_blocking(move || {
            if let Some(handle) = handle {
                let _ = handle.join();
            }
            for r in readers {
                let _ = r.join();
            }
            drop(slot.put(None));
        })
        .await;
    }
}

/// Bytes a record takes in the store.
pub fn encoded_len<T: serde::Serialize>(record: &T) -> Result<usize> {
    Ok(backend::encode(record)?.len())
}

/// Server time now; every stored timestamp comes from here.
pub fn now_micros() -> Micros {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// When the writer closes a batch.
#[derive(Debug, Clone, Copy)]
struct BatchLimits {
    ops: usize,
    bytes: usize,
}

fn reader_loop(slot: &DbSlot, rx: &crossbeam_channel::Receiver<ReadJob>) {
    let mut jobs = Vec::with_capacity(READ_BATCH);
    let mut stop = false;
    while let Ok(Some(first)) = rx.recv() {
        jobs.push(first);
        for job in rx.try_iter().take(READ_BATCH - 1) {
            if let Some(job) = job {
                jobs.push(job);
            } else {
                stop = true;
                break;
            }
        }
        let Some(db) = slot.get() else {
            let err =
                Error::Unavailable("the database is being reopened after a storage error".into());
            for job in jobs.drain(..) {
                job(&FailedView(err.clone()));
            }
            continue;
        };
        // Each job catches its own panics; a panic opening the transaction
        // fails this batch's reads and the thread carries on.
        match guard(|| Ok(db.begin_read()?)) {
            Ok(txn) => {
                let view = RedbView::Read(&txn);
                for job in jobs.drain(..) {
                    job(&view);
                }
            }
            Err(err) => {
                for job in jobs.drain(..) {
                    job(&FailedView(err.clone()));
                }
            }
        }
        drop(db);
        if stop {
            return;
        }
    }
}

/// Answers every read with the error that kept the transaction from opening.
struct FailedView(Error);

macro_rules! failed_view {
    ($($name:ident($($arg:ty),*) -> $ret:ty;)*) => {
        impl ReadView for FailedView {
            $(fn $name(&self, $(_: $arg),*) -> Result<$ret> { Err(self.0.clone()) })*
        }
    };
}

failed_view! {
    revision() -> u64;
    compact_revision() -> u64;
    session(&str) -> Option<crate::domain::session::Session>;
    children(&str) -> Vec<String>;
    sessions_after(Option<&str>, usize) -> records::SessionPage;
    plan(&str) -> Option<records::PlanRecord>;
    history(&str, u64, usize, usize) -> (Vec<crate::domain::plan_mode::HistoryEntry>, Option<u64>);
    todos(&str) -> Option<records::TodoRecord>;
    all_todos() -> Vec<records::TodoRecord>;
    revisions_from(u64, usize, usize) -> Vec<Revision>;
    revision_times(u64, usize) -> Vec<(u64, Micros)>;
}

/// The writer thread: the only one that writes.
struct Writer {
    slot: Arc<DbSlot>,
    hub: Arc<Hub>,
    revision: Arc<AtomicU64>,
    health: Arc<Health>,
    path: PathBuf,
    cache_bytes: usize,
    limits: BatchLimits,
    /// Time never goes backwards in stored records, even if the clock does.
    last_now: Micros,
}

/// Longest pause between attempts to reopen the database while it cannot
/// be written.
const MAX_REOPEN_BACKOFF: Duration = Duration::from_secs(5);

impl Writer {
    fn run(mut self, mut rx: mpsc::Receiver<Job>) {
        let mut ops = Vec::with_capacity(self.limits.ops);
        loop {
            let mut shutdown = false;
            let mut bytes = 0;
            match rx.blocking_recv() {
                Some(Job::Apply(op, size)) => {
                    ops.push(op);
                    bytes += size;
                }
                Some(Job::Shutdown) | None => shutdown = true,
            }
            // Take whatever else is already waiting: this is what makes one
            // fsync serve many concurrent callers.
            while !shutdown && ops.len() < self.limits.ops && bytes < self.limits.bytes {
                match rx.try_recv() {
                    Ok(Job::Apply(op, size)) => {
                        ops.push(op);
                        bytes += size;
                    }
                    Ok(Job::Shutdown) => shutdown = true,
                    Err(_) => break,
                }
            }
            if shutdown {
                // Answer anything still queued instead of leaving callers hanging.
                rx.close();
                while let Ok(job) = rx.try_recv() {
                    if let Job::Apply(op, _) = job {
                        ops.push(op);
                    }
                }
            }
            if !ops.is_empty()
                && let Some(e) = self.commit_batch(ops.drain(..))
                && needs_reopen(&e)
                && !shutdown
                && !self.recover(&mut rx, &e)
            {
                return;
            }
            if shutdown {
                return;
            }
        }
    }

    /// Commits one batch; returns the error that failed it, if any.
    fn commit_batch(&mut self, ops: impl Iterator<Item = Op>) -> Option<Error> {
        self.last_now = now_micros().max(self.last_now);
        let now = self.last_now;
        let start = self.revision.load(Ordering::Acquire);
        let mut staged = Vec::new();
        let mut maintenance = false;
        let mut finishers = Vec::new();
        let mut failure: Option<Error> = None;
        let mut end = start;

        let begun = match self.slot.get() {
            Some(db) => guard(|| Ok(db.begin_write()?)),
            None => Err(Error::Unavailable("the database is being reopened".into())),
        };
        match begun {
            Ok(mut txn) => {
                if let Err(e) = txn.set_durability(Durability::Immediate) {
                    failure = Some(Error::Storage(e.to_string()));
                }
                {
                    let mut w = RedbWrite { txn: &txn };
                    for op in ops {
                        if failure.is_some() {
                            // The transaction is already lost; do not run more ops in it.
                            finishers.push(op(None).0);
                            continue;
                        }
                        let mut ctx = Ctx {
                            view: &mut w,
                            now,
                            revision: end,
                            staged: &mut staged,
                            maintenance: false,
                        };
                        let (finish, poisoned) = op(Some(&mut ctx));
                        end = ctx.revision;
                        maintenance |= ctx.maintenance;
                        finishers.push(finish);
                        // The op's own error says best what failed the
                        // batch (disk full, corruption, a panic).
                        failure = poisoned;
                    }
                }
                if failure.is_none() {
                    if staged.is_empty() && !maintenance {
                        let _ = txn.abort();
                    } else if let Err(e) = guard(|| Ok(txn.commit()?)) {
                        failure = Some(e);
                    }
                } else {
                    let _ = guard(|| Ok(txn.abort()?));
                }
            }
            Err(e) => {
                finishers.extend(ops.map(|op| op(None).0));
                failure = Some(e);
            }
        }

        let outcome = if let Some(e) = failure.clone() {
            let e = self.health.observe(e);
            tracing::error!(error = %e, "write batch failed; no mutation of it was applied");
            Err(e)
        } else {
            self.revision.store(end, Ordering::Release);
            // Never blocks: a watcher whose buffer is full is told to catch up
            // from the log instead.
            self.hub.dispatch(&staged);
            Ok(())
        };
        for finish in finishers {
            finish(&outcome);
        }
        failure
    }

    /// After an I/O failure (disk full): answers writes with the error
    /// until a write can succeed again, then reopens the database. Returns
    /// false when the server shut down meanwhile.
    fn recover(&mut self, rx: &mut mpsc::Receiver<Job>, cause: &Error) -> bool {
        self.health.set(Condition::Recovering);
        let mut error = self.health.observe(cause.clone());
        let mut backoff = Duration::from_millis(100);
        let mut next_try = std::time::Instant::now();
        loop {
            // Callers get the reason at once rather than a hung request.
            loop {
                match rx.try_recv() {
                    Ok(Job::Apply(op, _)) => op(None).0(&Err(error.clone())),
                    Ok(Job::Shutdown) | Err(mpsc::error::TryRecvError::Disconnected) => {
                        return false;
                    }
                    Err(mpsc::error::TryRecvError::Empty) => break,
                }
            }
            if std::time::Instant::now() >= next_try {
                match self.reopen() {
                    Ok(()) => {
                        self.health.set(Condition::Serving);
                        return true;
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "the database cannot be reopened yet");
                        if !matches!(e, Error::Unavailable(_)) {
                            error = self.health.observe(e);
                        }
                        backoff = (backoff * 2).min(MAX_REOPEN_BACKOFF);
                        next_try = std::time::Instant::now() + backoff;
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Closes the failed handle (once the readers let go of it) and opens
    /// the file again, if a small write to the data directory succeeds.
    fn reopen(&mut self) -> Result<()> {
        probe_space(&self.path)?;
        if let Some(old) = self.slot.put(None) {
            // Readers hold the handle only for one batch of reads.
            let mut old = Some(old);
            for _ in 0..200 {
                match old.take().map(Arc::try_unwrap) {
                    Some(Ok(db)) => {
                        drop(db);
                        break;
                    }
                    Some(Err(shared)) => {
                        old = Some(shared);
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    None => break,
                }
            }
            if let Some(still_shared) = old {
                self.slot.put(Some(still_shared));
                return Err(Error::Unavailable("readers still hold the database".into()));
            }
        }
        let db = guard(|| backend::open(&self.path, false, self.cache_bytes))
            .map_err(|e| self.health.observe(e))?;
        // Prove a commit works before taking writes again.
        let probe = guard(|| {
            let txn = db.begin_write()?;
            txn.commit()?;
            Ok(())
        });
        self.slot.put(Some(Arc::new(db)));
        probe?;
        tracing::info!(file = %self.path.display(), "database reopened after a storage error");
        Ok(())
    }
}

/// Whether a small file can be written and synced beside the database: the
/// cheap test of free space before a reopen, which may need to repair.
fn probe_space(db_path: &Path) -> Result<()> {
    use std::io::Write as _;
    let probe = db_path.with_extension("redb.probe");
    let result = (|| {
        let mut f = std::fs::File::create(&probe)?;
        f.write_all(&vec![0u8; 1 << 20])?;
        f.sync_all()
    })();
    let _ = std::fs::remove_file(&probe);
    result.map_err(|e| {
        if crate::error::is_disk_full(&e) {
            Error::DiskFull {
                file: db_path.display().to_string(),
                detail: e.to_string(),
            }
        } else {
            Error::Unavailable(format!("probe write failed: {e}"))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn panics_fail_one_request_and_never_a_worker() {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = StoreOptions::new(dir.path());
        opts.reader_threads = 1;
        let store = Store::open(&opts).unwrap();
        for _ in 0..5 {
            let r: Result<()> = store.read(|_| panic!("a bug in a read")).await;
            assert!(matches!(r, Err(Error::Internal(m)) if m.contains("a bug in a read")));
            let w: Result<()> = store.write(|_| panic!("a bug in a write")).await;
            assert!(matches!(w, Err(Error::Internal(m)) if m.contains("a bug in a write")));
        }
        // The one reader and the writer are still there.
        assert_eq!(store.read(|v| v.revision()).await.unwrap(), 0);
        let rev = store.write(|ctx| ctx.commit(Vec::new())).await.unwrap();
        assert_eq!(rev, 1);
        // A bug is not corruption: health stays as it was.
        assert_eq!(*store.condition().borrow(), Condition::Serving);
        store.close().await;
    }
}
