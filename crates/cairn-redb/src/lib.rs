//! `cairn-redb`: the embedded engine, one redb file under the data
//! directory, behind the store's seam ([`cairn_store::Backend`]). The
//! binary opens it with [`open`] and hands the [`Store`] to the server,
//! which never names an engine.
//!
//! ```text
//!  Store::write ──▶ bounded queue ──▶ writer thread
//!                                      │ drain up to `commit_batch` ops
//!                                      │ run each op in ONE write txn
//!                                      │ commit (Durability::Immediate)
//!                                      ├──▶ reply to each op
//!                                      └──▶ hand committed revisions to the hub
//!  Store::read ──▶ reader threads: drain waiting reads, run them in one
//!                  redb read txn (never blocks the writer)
//! ```
//!
//! Mutations validate before they write, so one that fails leaves no trace
//! and never fails its neighbours in the batch. An I/O failure (a full
//! disk) makes the writer answer writes with it until a write can succeed
//! again, then reopen the file: redb latches I/O errors, so the handle must
//! be closed, which needs every reader to let go of it.

mod readers;
pub mod tables;
mod writer;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;

use cairn_core::error::{Error, Result};
use redb::{Database, ReadableDatabase};
use tokio::sync::{mpsc, watch};

use cairn_store::health::{Health, Readiness, guard};
use cairn_store::hub::Hub;
use cairn_store::seam::{Backend, BoxFuture, ReadJob, ReadTxn, WriteJob};
use tables::RedbTxn;

pub use cairn_store::Store;

/// How the embedded store is opened.
#[derive(Debug, Clone)]
pub struct RedbOptions {
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
    /// Bytes of hot plans kept decoded in memory (0: none).
    pub plan_cache_bytes: u64,
}

impl RedbOptions {
    /// Defaults for a data directory.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        RedbOptions {
            data_dir: data_dir.into(),
            commit_batch: 256,
            commit_bytes: 8 * 1024 * 1024,
            queue_depth: 4096,
            watch_buffer: 128,
            reader_threads: 0,
            check_integrity: true,
            cache_bytes: 256 * 1024 * 1024,
            plan_cache_bytes: 64 * 1024 * 1024,
        }
    }
}

/// Opens the embedded store (blocking: call before serving, or off the
/// runtime).
pub fn open(opts: &RedbOptions) -> Result<Store> {
    let (backend, hub) = Embedded::open(opts)?;
    Ok(Store::new(Arc::new(backend), hub))
}

/// Name of the database file inside the data directory.
pub const DB_FILE: &str = "cairn.redb";

/// What an op counts against the byte budget at least (keys, record
/// overhead, the log entry), whatever its declared size.
const MIN_OP_BYTES: usize = 256;

/// The open database, shared by the writer and the readers. Empty while
/// the writer reopens it after an I/O error.
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

/// What the writer thread receives.
enum Job {
    /// A write and its approximate size in bytes, for the batch byte budget.
    Apply(WriteJob, usize),
    Shutdown,
}

/// A read waiting for a reader thread; `None` tells a reader to stop.
type QueuedRead = Option<ReadJob>;

/// The redb engine.
pub struct Embedded {
    reads: crossbeam_channel::Sender<QueuedRead>,
    readers: Mutex<Vec<JoinHandle<()>>>,
    jobs: mpsc::Sender<Job>,
    writer: Mutex<Option<JoinHandle<()>>>,
    revision: Arc<AtomicU64>,
    db: Arc<DbSlot>,
    health: Arc<Health>,
    path: PathBuf,
}

impl Embedded {
    /// Opens (or creates) `cairn.redb` under the data directory and starts
    /// the writer and the readers; returns the engine and the hub it feeds.
    pub fn open(opts: &RedbOptions) -> Result<(Self, Arc<Hub>)> {
        cairn_store::health::install_panic_hook();
        let new_dir = !opts.data_dir.exists();
        std::fs::create_dir_all(&opts.data_dir)
            .map_err(|e| Error::Storage(format!("create {}: {e}", opts.data_dir.display())))?;
        let path = opts.data_dir.join(DB_FILE);
        let new_file = !path.exists();
        let health = Arc::new(Health::new(path.display().to_string()));
        let db = guard(|| Ok(tables::open(&path, opts.check_integrity, opts.cache_bytes)?))
            .map_err(|e| health.observe(e))?;
        private(&opts.data_dir, new_dir, 0o700);
        private(&path, new_file, 0o600);
        let db = Arc::new(db);
        let start = guard(|| {
            let txn = db
                .begin_read()
                .map_err(|e| Error::from(tables::Db::from(e)))?;
            RedbTxn(&txn).revision()
        })
        .map_err(|e| health.observe(e))?;
        let slot = Arc::new(DbSlot::default());
        slot.put(Some(db));
        let revision = Arc::new(AtomicU64::new(start));
        let (jobs, rx) = mpsc::channel(opts.queue_depth.max(1));
        let hub = Arc::new(Hub::new(start, opts.watch_buffer, opts.plan_cache_bytes));
        let writer = writer::Writer {
            slot: Arc::clone(&slot),
            hub: Arc::clone(&hub),
            revision: Arc::clone(&revision),
            health: Arc::clone(&health),
            path: path.clone(),
            cache_bytes: opts.cache_bytes,
            limits: writer::BatchLimits {
                ops: opts.commit_batch.max(1),
                bytes: opts.commit_bytes.max(1),
            },
            last_now: 0,
        };
        let writer = std::thread::Builder::new()
            .name("cairn-writer".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| Error::Storage(format!("spawn writer: {e}")))?;
        let (reads, read_rx) = crossbeam_channel::unbounded::<QueuedRead>();
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
                    .spawn(move || readers::run(&slot, &rx))
                    .map_err(|e| Error::Storage(format!("spawn reader: {e}")))?,
            );
        }
        Ok((
            Embedded {
                reads,
                readers: Mutex::new(readers),
                jobs,
                writer: Mutex::new(Some(writer)),
                revision,
                db: slot,
                health,
                path,
            },
            hub,
        ))
    }
}

impl Backend for Embedded {
    fn read(&self, job: ReadJob) -> Result<()> {
        self.reads.send(Some(job)).map_err(|_| Error::ShuttingDown)
    }

    fn write(&self, job: WriteJob, bytes: usize) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.jobs
                .send(Job::Apply(job, bytes.max(MIN_OP_BYTES)))
                .await
                .map_err(|_| Error::ShuttingDown)
        })
    }

    fn revision(&self) -> u64 {
        self.revision.load(Ordering::Acquire)
    }

    fn condition(&self) -> watch::Receiver<Readiness> {
        self.health.subscribe()
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn backup(&self, dest: &std::path::Path) -> Result<u64> {
        let db = self
            .db
            .get()
            .ok_or_else(|| Error::Unavailable("the database is being reopened".into()))?;
        guard(|| {
            // A read transaction: a snapshot that writers never wait for.
            let txn = db
                .begin_read()
                .map_err(|e| Error::from(tables::Db::from(e)))?;
            tables::backup(&txn, dest)
        })
    }

    fn bytes(&self) -> Option<u64> {
        std::fs::metadata(&self.path).ok().map(|m| m.len())
    }

    fn observe(&self, e: Error) -> Error {
        self.health.observe(e)
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let _ = self.jobs.send(Job::Shutdown).await;
            let handle = self
                .writer
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            let readers =
                std::mem::take(&mut *self.readers.lock().unwrap_or_else(PoisonError::into_inner));
            for _ in &readers {
                let _ = self.reads.send(None);
            }
            let slot = Arc::clone(&self.db);
            // Joined so that the database file is closed when this returns
            // and can be opened again at once (a restart in the same process).
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
        })
    }
}

/// Plans, todos and token hashes are nobody else's business: what Cairn
/// creates is its owner's only (`mode`); an existing path that others may
/// read is left as the operator made it, with a warning.
fn private(path: &std::path::Path, created: bool, mode: u32) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        if created {
            if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)) {
                tracing::warn!(path = %path.display(), error = %e, "could not make the data private");
            }
        } else if std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o077 != 0) {
            tracing::warn!(path = %path.display(), "the data is readable by other users: chmod it (Cairn creates it with mode {mode:o})");
        }
    }
    #[cfg(not(unix))]
    let _ = (path, created, mode);
}

#[cfg(test)]
mod store_tests {
    use super::*;
    use cairn_store::Readiness;

    #[tokio::test]
    async fn panics_fail_one_request_and_never_a_worker() {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = RedbOptions::new(dir.path());
        opts.reader_threads = 1;
        let store = open(&opts).unwrap();
        for _ in 0..5 {
            let r: Result<()> = store.read(|_| panic!("a bug in a read")).await;
            assert!(matches!(r, Err(Error::Internal(m)) if m.contains("a bug in a read")));
            let w: Result<()> = store.write(0, |_| panic!("a bug in a write")).await;
            assert!(matches!(w, Err(Error::Internal(m)) if m.contains("a bug in a write")));
        }
        // The one reader and the writer are still there.
        assert_eq!(store.read(|v| v.revision()).await.unwrap(), 0);
        let rev = store.write(0, |ctx| ctx.commit(Vec::new())).await.unwrap();
        assert_eq!(rev, 1);
        // A bug is not corruption: health stays as it was.
        assert_eq!(*store.condition().borrow(), Readiness::Serving);
        store.close().await;
    }
}
