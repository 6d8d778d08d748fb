//! [`Store`]: the handle the server holds, an engine behind the
//! [`Backend`] seam and the hub it feeds.

use std::sync::Arc;

use cairn_core::Limits;
use cairn_core::access::{self, Caller};
use cairn_core::command::Command;
use cairn_core::error::{Error, Result};
use tokio::sync::oneshot;
use tracing::Instrument as _;

use crate::health::{Readiness, guard};
use crate::hub::Hub;
use crate::ops::{self, Applied};
use crate::records::Revision;
use crate::seam::{Backend, Ctx, Finisher, ReadJob, ReadTxn, WriteJob};

/// A cheap, cloneable handle to the store: an engine and its hub.
#[derive(Clone)]
pub struct Store {
    backend: Arc<dyn Backend>,
    hub: Arc<Hub>,
    /// The limits every write and read is checked against.
    limits: Arc<Limits>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("data", &self.backend.describe())
            .field("revision", &self.revision())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// A store over an engine that feeds `hub`.
    pub fn new(backend: Arc<dyn Backend>, hub: Arc<Hub>) -> Self {
        Store {
            backend,
            hub,
            limits: Arc::new(Limits::default()),
        }
    }

    /// The same store, checking writes and reads against `limits`.
    #[must_use]
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = Arc::new(limits);
        self
    }

    /// The limits writes and reads are checked against.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Applies `command` on behalf of `caller` in one durable write
    /// ([`ops::apply`]); `bytes` is about the size of the request, for the
    /// commit byte budget. An engine may run it more than once: it runs
    /// the same value each time.
    pub async fn apply(
        &self,
        caller: &Caller,
        command: Command,
        bytes: usize,
    ) -> Result<(Applied, u64)> {
        // A plan write by the session's agent is a sign of life.
        let renews = match &command {
            Command::Plan(w) if w.command.action() == access::Action::WritePlan => {
                Some(w.session_id.clone())
            }
            _ => None,
        };
        let caller = caller.clone();
        let limits = Arc::clone(&self.limits);
        let out = self
            .write(bytes, move |ctx| {
                ops::apply(ctx, &caller, &command, &limits)
            })
            .await?;
        if let Some(id) = renews {
            // Renewing a lease held as it is cannot fail; a write that
            // needs more is the driver's to lift.
            let _ = self.hub.leases().renew(&Caller::Open, &id, true, None);
        }
        Ok(out)
    }

    pub(crate) fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// Where the data lives (a file, endpoints), for logs.
    pub fn describe(&self) -> String {
        self.backend.describe()
    }

    /// A consistent online copy of the store as a new database file at
    /// `dest`, taken from one snapshot while writes go on; the revision it
    /// holds.
    pub async fn backup(&self, caller: &Caller, dest: std::path::PathBuf) -> Result<u64> {
        access::check_admin(caller)?;
        let backend = Arc::clone(&self.backend);
        tokio::task::spawn_blocking(move || backend.backup(&dest))
            .await
            .map_err(|e| Error::Internal(format!("backup task: {e}")))?
            .map_err(|e| match e {
                // Writing the copy failed, not the store: the engine said
                // where, and the store's health stays as it is.
                e @ Error::BackupFailed { .. } => e,
                e => self.backend.observe(e),
            })
    }

    /// Bytes of the database on this machine's disk (the redb file).
    pub fn bytes(&self) -> Option<u64> {
        self.backend.bytes()
    }

    /// Last committed revision.
    pub fn revision(&self) -> u64 {
        self.backend.revision()
    }

    /// The fan-out of committed revisions to watchers.
    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// The hot plans, for reads that need no database.
    pub fn plans(&self) -> &crate::cache::PlanCache {
        self.hub.plans()
    }

    /// Follows whether the store can serve (for health checks).
    pub fn condition(&self) -> tokio::sync::watch::Receiver<Readiness> {
        self.backend.condition()
    }

    /// Runs `op` in a write transaction and answers once the commit holding
    /// it is durable. `op` must validate before it writes and call
    /// [`Ctx::commit`] exactly once when it changed something. It may run
    /// more than once (an engine may retry it on a conflict), so it must
    /// not consume what it captured. `bytes` is about the size of its
    /// input, so that one batch stays within the commit byte budget.
    pub async fn write<T, F>(&self, bytes: usize, mut op: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnMut(&mut Ctx<'_>) -> Result<T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        // Shared by every run of the op: an engine may run it more than
        // once, and only the run whose finisher it calls answers.
        let tx = Arc::new(std::sync::Mutex::new(Some(tx)));
        let job: WriteJob = Box::new(move |ctx| {
            let out = match ctx {
                // A panic (say, a corrupt page) fails this op, and with it the
                // batch, whose transaction is in an unknown state.
                Some(ctx) => guard(|| op(ctx)),
                None => Err(Error::Storage("the batch failed before this op ran".into())),
            };
            let poisons_batch = match &out {
                Err(e) if e.is_infrastructure() => Some(e.clone()),
                _ => None,
            };
            let tx = Arc::clone(&tx);
            let finish: Finisher = Box::new(move |commit: &Result<()>, batch: usize| {
                let reply = match (commit, out) {
                    (Ok(()), out) => out.map(|t| (t, batch)),
                    (Err(e), _) => Err(e.clone()),
                };
                // The caller may have gone away; the mutation stands anyway.
                let tx = tx
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take();
                if let Some(tx) = tx {
                    let _ = tx.send(reply);
                }
            });
            (finish, poisons_batch)
        });
        // The wait for the durable commit, as a child of the caller's span
        // (an RPC's, so a trace shows where a slow write waited).
        let span = tracing::info_span!("commit", batch_size = tracing::field::Empty);
        let waited = async {
            self.backend.write(job, bytes).await?;
            rx.await.map_err(|_| Error::ShuttingDown)?
        }
        .instrument(span.clone())
        .await;
        match waited {
            Ok((out, batch)) => {
                span.record("batch_size", i64::try_from(batch).unwrap_or(i64::MAX));
                Ok(out)
            }
            Err(e) => Err(self.backend.observe(e)),
        }
    }

    /// Runs `f` on a read snapshot, off the async workers. Reads that
    /// arrive together may share one snapshot.
    pub async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&dyn ReadTxn) -> Result<T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: ReadJob = Box::new(move |view: Result<&dyn ReadTxn>| {
            // The caller may have gone away; nothing to undo for a read.
            let _ = tx.send(view.and_then(|v| guard(|| f(v))));
        });
        self.backend.read(job)?;
        rx.await
            .map_err(|_| Error::ShuttingDown)?
            .map_err(|e| self.backend.observe(e))
    }

    /// Logged revisions from `from` (inclusive), at most `limit` and about
    /// `max_bytes` (always one): a watcher's catch-up, a webhook's next
    /// deliveries.
    pub async fn log_from(
        &self,
        from: u64,
        limit: usize,
        max_bytes: usize,
    ) -> Result<Vec<Revision>> {
        match self.backend.log(from, limit, max_bytes) {
            Some(read) => read.await.map_err(|e| self.backend.observe(e)),
            None => {
                self.read(move |v| v.revisions_from(from, limit, max_bytes))
                    .await
            }
        }
    }

    /// Commit times of logged revisions from `from` (inclusive), at most
    /// `limit`, in revision order (fewer when the engine bounds the read).
    pub async fn revision_times(
        &self,
        from: u64,
        limit: usize,
    ) -> Result<Vec<(u64, cairn_core::Micros)>> {
        match self.backend.revision_times(from, limit) {
            Some(read) => read.await.map_err(|e| self.backend.observe(e)),
            None => self.read(move |v| v.revision_times(from, limit)).await,
        }
    }

    /// Commits what is queued, stops the engine and releases its data.
    /// Later writes fail with `ShuttingDown`. Idempotent.
    pub async fn close(&self) {
        self.backend.close().await;
    }
}
