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
pub mod ops;
pub mod records;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use redb::{Database, Durability, ReadableDatabase};
use tokio::sync::{mpsc, oneshot};

pub use backend::{ReadView, WriteView};
use backend::{RedbView, RedbWrite};
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
        }
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
type Op = Box<dyn FnOnce(Option<&mut Ctx<'_>>) -> (Finisher, bool) + Send>;

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
        std::fs::create_dir_all(&opts.data_dir)
            .map_err(|e| Error::Storage(format!("create {}: {e}", opts.data_dir.display())))?;
        let path = opts.data_dir.join(DB_FILE);
        let db = Arc::new(backend::open(&path)?);
        let start = {
            let txn = db.begin_read()?;
            RedbView::Read(&txn).revision()?
        };
        let revision = Arc::new(AtomicU64::new(start));
        let (jobs, rx) = mpsc::channel(opts.queue_depth.max(1));
        let hub = Arc::new(Hub::new(start, opts.watch_buffer));
        let writer = {
            let db = Arc::clone(&db);
            let hub = Arc::clone(&hub);
            let revision = Arc::clone(&revision);
            let limits = BatchLimits {
                ops: opts.commit_batch.max(1),
                bytes: opts.commit_bytes.max(1),
            };
            std::thread::Builder::new()
                .name("cairn-writer".into())
                .spawn(move || writer_loop(&db, rx, limits, &hub, &revision))
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
            let db = Arc::clone(&db);
            let rx = read_rx.clone();
            readers.push(
                std::thread::Builder::new()
                    .name(format!("cairn-reader-{i}"))
                    .spawn(move || reader_loop(&db, &rx))
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
        let job: Op = Box::new(move |ctx| {
            let out = match ctx {
                Some(ctx) => op(ctx),
                None => Err(Error::Storage("the batch failed before this op ran".into())),
            };
            let storage_failed = matches!(out, Err(Error::Storage(_)));
            let finish: Finisher = Box::new(move |commit: &Result<()>| {
                let reply = match (commit, out) {
                    (Ok(()), out) => out,
                    (Err(e), _) => Err(e.clone()),
                };
                // The caller may have gone away; the mutation stands anyway.
                let _ = tx.send(reply);
            });
            (finish, storage_failed)
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
        let job: ReadJob = Some(Box::new(move |view: &dyn ReadView| {
            // The caller may have gone away; nothing to undo for a read.
            let _ = tx.send(f(view));
        }));
        self.inner
            .reads
            .send(job)
            .map_err(|_| Error::ShuttingDown)?;
        rx.await.map_err(|_| Error::ShuttingDown)?
    }

    /// Finishes queued writes, stops the writer and waits for it. Later
    /// writes fail with `ShuttingDown`. Idempotent.
    pub async fn close(&self) {
        let _ = self.inner.jobs.send(Job::Shutdown).await;
        let handle = self
            .inner
            .writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let readers = std::mem::take(
            &mut *self
                .inner
                .readers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for _ in &readers {
            let _ = self.inner.reads.send(None);
        }
        // Joined so that the database file is closed when this returns and
        // can be opened again at once (a restart in the same process).
        let _ = tokio::task::spawn_blocking(move || {
            if let Some(handle) = handle {
                let _ = handle.join();
            }
            for r in readers {
                let _ = r.join();
            }
        })
        .await;
    }
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

fn reader_loop(db: &Database, rx: &crossbeam_channel::Receiver<ReadJob>) {
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
        match db.begin_read() {
            Ok(txn) => {
                let view = RedbView::Read(&txn);
                for job in jobs.drain(..) {
                    job(&view);
                }
            }
            Err(e) => {
                let err = Error::from(e);
                for job in jobs.drain(..) {
                    job(&FailedView(err.clone()));
                }
            }
        }
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
    history(&str) -> Vec<crate::domain::plan_mode::HistoryEntry>;
    todos(&str) -> Option<records::TodoRecord>;
    all_todos() -> Vec<records::TodoRecord>;
    revisions_from(u64, usize) -> Vec<Revision>;
}

fn writer_loop(
    db: &Database,
    mut rx: mpsc::Receiver<Job>,
    limits: BatchLimits,
    hub: &Hub,
    revision: &AtomicU64,
) {
    let mut last_now = 0;
    let mut ops = Vec::with_capacity(limits.ops);
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
        while !shutdown && ops.len() < limits.ops && bytes < limits.bytes {
            match rx.try_recv() {
                Ok(Job::Apply(op, size)) => {
                    ops.push(op);
                    bytes += size;
                }
                Ok(Job::Shutdown) => shutdown = true,
                Err(_) => break,
            }
        }
        if !ops.is_empty() {
            // Time never goes backwards in stored records, even if the clock does.
            last_now = now_micros().max(last_now);
            commit_batch(db, ops.drain(..), last_now, hub, revision);
        }
        if shutdown {
            // Answer anything still queued instead of leaving callers hanging.
            rx.close();
            while let Ok(job) = rx.try_recv() {
                if let Job::Apply(op, _) = job {
                    ops.push(op);
                }
            }
            if !ops.is_empty() {
                last_now = now_micros().max(last_now);
                commit_batch(db, ops.drain(..), last_now, hub, revision);
            }
            return;
        }
    }
}

fn commit_batch(
    db: &Database,
    ops: impl Iterator<Item = Op>,
    now: Micros,
    hub: &Hub,
    revision: &AtomicU64,
) {
    let start = revision.load(Ordering::Acquire);
    let mut staged = Vec::new();
    let mut maintenance = false;
    let mut finishers = Vec::new();
    let mut failure: Option<Error> = None;
    let mut end = start;

    match db.begin_write() {
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
                    let (finish, storage_failed) = op(Some(&mut ctx));
                    end = ctx.revision;
                    maintenance |= ctx.maintenance;
                    finishers.push(finish);
                    if storage_failed {
                        failure = Some(Error::Storage("a write in this batch failed".into()));
                    }
                }
            }
            if failure.is_none() {
                if staged.is_empty() && !maintenance {
                    let _ = txn.abort();
                } else if let Err(e) = txn.commit() {
                    failure = Some(Error::Storage(format!("commit: {e}")));
                }
            } else {
                let _ = txn.abort();
            }
        }
        Err(e) => {
            let err = Error::Storage(format!("begin write: {e}"));
            finishers.extend(ops.map(|op| op(None).0));
            failure = Some(err);
        }
    }

    let outcome = if let Some(e) = failure {
        tracing::error!(error = %e, "write batch failed; no mutation of it was applied");
        Err(e)
    } else {
        revision.store(end, Ordering::Release);
        // Never blocks: a watcher whose buffer is full is told to catch up
        // from the log instead.
        hub.dispatch(&staged);
        Ok(())
    };
    for finish in finishers {
        finish(&outcome);
    }
}
