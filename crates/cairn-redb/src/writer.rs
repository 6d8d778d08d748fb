//! The writer thread: the only one that writes. It drains queued writes
//! into one transaction, commits it durably, answers each write and hands
//! the committed revisions to the hub; after an I/O failure it answers
//! writes with the failure until the file can be reopened.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cairn_core::Micros;
use cairn_core::error::{Error, Result};
use redb::Durability;
use tokio::sync::mpsc;

use crate::tables::{self, Db, RedbWrite};
use crate::{DbSlot, Job};
use cairn_store::clock::now_micros;
use cairn_store::health::{Health, Readiness, guard, needs_reopen};
use cairn_store::hub::Hub;
use cairn_store::seam::Ctx;
use cairn_store::seam::WriteJob;

/// When the writer closes a batch.
#[derive(Debug, Clone, Copy)]
pub(super) struct BatchLimits {
    pub(super) ops: usize,
    pub(super) bytes: usize,
}

/// The writer thread: the only one that writes.
pub(super) struct Writer {
    pub(super) slot: Arc<DbSlot>,
    pub(super) hub: Arc<Hub>,
    pub(super) revision: Arc<AtomicU64>,
    pub(super) health: Arc<Health>,
    pub(super) path: PathBuf,
    pub(super) cache_bytes: usize,
    pub(super) limits: BatchLimits,
    /// Time never goes backwards in stored records, even if the clock does.
    pub(super) last_now: Micros,
}

/// Longest pause between attempts to reopen the database while it cannot
/// be written.
const MAX_REOPEN_BACKOFF: Duration = Duration::from_secs(5);

impl Writer {
    pub(super) fn run(mut self, mut rx: mpsc::Receiver<Job>) {
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
    fn commit_batch(&mut self, ops: impl Iterator<Item = WriteJob>) -> Option<Error> {
        self.last_now = now_micros().max(self.last_now);
        let now = self.last_now;
        let start = self.revision.load(Ordering::Acquire);
        let mut staged = Vec::new();
        let mut maintenance = false;
        let mut finishers = Vec::new();
        let mut failure: Option<Error> = None;
        let mut end = start;

        let begun = match self.slot.get() {
            Some(db) => guard(|| db.begin_write().map_err(|e| Error::from(Db::from(e)))),
            None => Err(Error::Unavailable("the database is being reopened".into())),
        };
        match begun {
            Ok(mut txn) => {
                if let Err(e) = txn.set_durability(Durability::Immediate) {
                    failure = Some(Error::Storage(e.to_string()));
                }
                let mut w = RedbWrite::new(&txn, Some(self.hub.plans()));
                for op in ops {
                    if failure.is_some() {
                        // The transaction is already lost; do not run more ops in it.
                        let mut op = op;
                        finishers.push(op(None).0);
                        continue;
                    }
                    let mut op = op;
                    let mut ctx = Ctx::new(&mut w, now, end, &mut staged);
                    let (finish, poisoned) = op(Some(&mut ctx));
                    end = ctx.revision();
                    maintenance |= ctx.wrote_maintenance();
                    finishers.push(finish);
                    // The op's own error says best what failed the
                    // batch (disk full, corruption, a panic).
                    failure = poisoned;
                }
                // The last revision is recorded once per batch, and the
                // tables close before the commit.
                if let Err(e) = guard(|| w.finish())
                    && failure.is_none()
                {
                    failure = Some(e);
                }
                if failure.is_none() {
                    if staged.is_empty() && !maintenance {
                        let _ = txn.abort();
                    } else {
                        // The commit includes its fsync (Durability::Immediate).
                        let started = std::time::Instant::now();
                        if let Err(e) = guard(|| txn.commit().map_err(|e| Error::from(Db::from(e))))
                        {
                            failure = Some(e);
                        }
                        cairn_store::telemetry::commit(staged.len(), started.elapsed());
                    }
                } else {
                    let _ = guard(|| txn.abort().map_err(|e| Error::from(Db::from(e))));
                }
            }
            Err(e) => {
                finishers.extend(ops.map(|mut op| op(None).0));
                failure = Some(e);
            }
        }

        let outcome = if let Some(e) = failure.clone() {
            let e = self.health.observe(e);
            tracing::error!(error = %e, "write batch failed; no mutation of it was applied");
            Err(e)
        } else {
            self.revision.store(end, Ordering::Release);
            cairn_store::telemetry::revision(end);
            // Never blocks: a watcher whose buffer is full is told to catch up
            // from the log instead.
            self.hub.dispatch(&staged);
            Ok(())
        };
        let batch = staged.len();
        for finish in finishers {
            finish(&outcome, batch);
        }
        failure
    }

    /// After an I/O failure (disk full): answers writes with the error
    /// until a write can succeed again, then reopens the database. Returns
    /// false when the server shut down meanwhile.
    fn recover(&mut self, rx: &mut mpsc::Receiver<Job>, cause: &Error) -> bool {
        self.health.set(Readiness::Recovering);
        let mut error = self.health.observe(cause.clone());
        let mut backoff = Duration::from_millis(100);
        let mut next_try = std::time::Instant::now();
        loop {
            // Callers get the reason at once rather than a hung request.
            loop {
                match rx.try_recv() {
                    Ok(Job::Apply(mut op, _)) => op(None).0(&Err(error.clone()), 0),
                    Ok(Job::Shutdown) | Err(mpsc::error::TryRecvError::Disconnected) => {
                        return false;
                    }
                    Err(mpsc::error::TryRecvError::Empty) => break,
                }
            }
            if std::time::Instant::now() >= next_try {
                match self.reopen() {
                    Ok(()) => {
                        self.health.set(Readiness::Serving);
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
        let db = guard(|| Ok(tables::open(&self.path, false, self.cache_bytes)?))
            .map_err(|e| self.health.observe(e))?;
        // Prove a commit works before taking writes again.
        let probe = guard(|| {
            let write = || -> std::result::Result<(), Db> {
                db.begin_write()?.commit()?;
                Ok(())
            };
            Ok(write()?)
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
        if tables::is_disk_full(&e) {
            Error::DiskFull {
                file: db_path.display().to_string(),
                detail: e.to_string(),
            }
        } else {
            Error::Unavailable(format!("probe write failed: {e}"))
        }
    })
}
