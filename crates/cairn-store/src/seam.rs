//! The storage seam: what the mutations in [`crate::ops`] need from a
//! database ([`ReadTxn`], [`WriteTxn`]: plain reads and writes inside one
//! transaction), and what the store needs from an engine ([`Backend`]: run
//! reads on a snapshot, commit writes durably, feed the hub).
//!
//! The embedded redb engine (crate `cairn-redb`) implements both; another
//! engine (a distributed KV store) implements them over its own
//! transactions, and the rules, the mutations and the server stay as they
//! are.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use cairn_core::Micros;
use cairn_core::error::{Error, Result};
use cairn_core::inbox::Awaiting;
use cairn_core::plan_mode::HistoryEntry;
use cairn_core::session::Session;
use tokio::sync::watch;

use crate::cache::HotPlan;
use crate::health::Readiness;
use crate::records::{Event, PlanRecord, PrincipalRecord, Revision, SessionPage, TodoRecord};

/// Reads, from a snapshot or from inside a write.
pub trait ReadTxn {
    /// Last committed (or, inside a write, last assigned) revision.
    fn revision(&self) -> Result<u64>;
    /// Oldest revision still in the event log minus one.
    fn compact_revision(&self) -> Result<u64>;
    fn session(&self, id: &str) -> Result<Option<Session>>;
    /// Ids of direct children, ordered.
    fn children(&self, id: &str) -> Result<Vec<String>>;
    /// Sessions ordered by id, strictly after `after`.
    fn sessions_after(&self, after: Option<&str>, limit: usize) -> Result<SessionPage>;
    fn plan(&self, session_id: &str) -> Result<Option<PlanRecord>>;
    /// History entries from sequence number `from`: at most `limit`, and
    /// no more once `max_bytes` of records are read (but always one). Also
    /// the sequence number of the next entry, if there is one.
    fn history(
        &self,
        session_id: &str,
        from: u64,
        limit: usize,
        max_bytes: usize,
    ) -> Result<(Vec<HistoryEntry>, Option<u64>)>;
    fn todos(&self, agent_id: &str) -> Result<Option<TodoRecord>>;
    /// Every agent's todo list, by agent id.
    fn todos_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<TodoRecord>>;
    /// Logged revisions from `from` (inclusive): at most `limit`, and no
    /// more once `max_bytes` of records are read (but always one), so a
    /// reader's memory is bounded whatever the revisions hold.
    fn revisions_from(&self, from: u64, limit: usize, max_bytes: usize) -> Result<Vec<Revision>>;
    /// Commit times of logged revisions from `from` (inclusive), at most
    /// `limit`, in revision order.
    fn revision_times(&self, from: u64, limit: usize) -> Result<Vec<(u64, Micros)>>;
    /// Ids of the sessions whose agent is `agent_id`, ordered.
    fn agent_sessions(&self, agent_id: &str) -> Result<Vec<String>>;
    /// Ids of the sessions that hold a lease, ordered: what a server
    /// starting follows, read without scanning every session.
    fn leased(&self) -> Result<Vec<String>>;
    /// Items awaiting approval, oldest first, strictly after `after`, at
    /// most `limit`.
    fn awaiting_after(&self, after: Option<&Awaiting>, limit: usize) -> Result<Vec<Awaiting>>;
    /// A value of the auxiliary key space `space` (records that are not
    /// resources: webhook subscriptions, their delivery cursors, dead
    /// letters).
    fn aux(&self, space: &str, key: &str) -> Result<Option<Vec<u8>>>;
    /// Values of `space` ordered by key, strictly after `after`, at most
    /// `limit`.
    fn aux_after(
        &self,
        space: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>>;
    fn principal(&self, id: &str) -> Result<Option<PrincipalRecord>>;
    /// The principal whose token has this hex SHA-256.
    fn principal_by_token(&self, token_sha256: &str) -> Result<Option<PrincipalRecord>>;
    /// Principals ordered by id, strictly after `after`, at most `limit`.
    fn principals_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<PrincipalRecord>>;
    /// A session's committed plan with its agent and ancestry, if the
    /// engine holds it in memory and it is current for this transaction (inside
    /// a write: untouched by the writes so far). `None` says nothing.
    fn hot_plan(&self, _session_id: &str) -> Result<Option<Arc<HotPlan>>> {
        Ok(None)
    }
    /// Whether every revision is a logged mutation (revisions are dense).
    /// An engine that shares its revision counter with other writers (etcd)
    /// skips numbers, so a log read from `r` may start after `r`.
    fn dense(&self) -> bool {
        true
    }
}

/// The revision an op's records carry while it runs in an engine that
/// learns the revision only when the transaction commits (etcd: its own
/// store-wide counter). The engine stores it as written and reads it back
/// as the revision the record was committed at; the op's answer comes from
/// running it again once that revision is known.
pub const PENDING_REVISION: u64 = 1 << 62;

/// Writes inside one transaction.
pub trait WriteTxn: ReadTxn {
    fn put_session(&mut self, s: &Session) -> Result<()>;
    fn delete_session(&mut self, id: &str) -> Result<()>;
    fn put_child(&mut self, parent: &str, child: &str) -> Result<()>;
    fn delete_child(&mut self, parent: &str, child: &str) -> Result<()>;
    /// Stores a plan record already encoded by [`crate::codec::encode`]:
    /// its size is checked against the limit before anything is written.
    fn put_plan(&mut self, session_id: &str, record: &[u8]) -> Result<()>;
    fn delete_plan(&mut self, session_id: &str) -> Result<()>;
    fn put_history(&mut self, session_id: &str, seq: u64, e: &HistoryEntry) -> Result<()>;
    fn delete_history(&mut self, session_id: &str) -> Result<()>;
    fn put_todos(&mut self, t: &TodoRecord) -> Result<()>;
    fn put_agent_session(&mut self, agent_id: &str, session_id: &str) -> Result<()>;
    fn delete_agent_session(&mut self, agent_id: &str, session_id: &str) -> Result<()>;
    /// Indexes a session as leased (a lease, once taken, is kept until the
    /// session is deleted).
    fn put_leased(&mut self, session_id: &str) -> Result<()>;
    fn delete_leased(&mut self, session_id: &str) -> Result<()>;
    /// Indexes an item as awaiting approval (the inbox), or drops it.
    fn put_awaiting(&mut self, key: &Awaiting) -> Result<()>;
    fn delete_awaiting(&mut self, key: &Awaiting) -> Result<()>;
    /// Stores a principal and indexes its token hash.
    fn put_aux(&mut self, space: &str, key: &str, value: &[u8]) -> Result<()>;
    fn delete_aux(&mut self, space: &str, key: &str) -> Result<()>;
    fn put_principal(&mut self, p: &PrincipalRecord) -> Result<()>;
    /// Removes a principal and its token hash.
    fn delete_principal(&mut self, p: &PrincipalRecord) -> Result<()>;
    /// Appends a revision to the log and makes it the current revision.
    fn append_revision(&mut self, r: &Revision) -> Result<()>;
    /// Drops logged revisions up to `upto` and records the compact revision.
    fn compact_log(&mut self, upto: u64) -> Result<()>;
}

/// What an op sees inside its transaction.
pub struct Ctx<'a> {
    /// The transaction.
    pub txn: &'a mut dyn WriteTxn,
    /// Server time of this batch; every timestamp an op writes comes from it.
    pub now: Micros,
    revision: u64,
    staged: &'a mut Vec<Arc<Revision>>,
    /// Set by maintenance ops that write without a revision (compaction),
    /// so the batch is committed even if no mutation in it logged one.
    maintenance: bool,
    /// The revision is learned at commit: changes carry [`PENDING_REVISION`].
    pending: bool,
}

impl<'a> Ctx<'a> {
    /// An op's context in a transaction whose last revision is `revision`;
    /// committed revisions are staged for the hub.
    pub fn new(
        txn: &'a mut dyn WriteTxn,
        now: Micros,
        revision: u64,
        staged: &'a mut Vec<Arc<Revision>>,
    ) -> Self {
        Ctx {
            txn,
            now,
            revision,
            staged,
            maintenance: false,
            pending: false,
        }
    }

    /// An op's context in an engine that learns the revision at commit
    /// (one mutation per transaction, read at snapshot `revision`): its
    /// changes carry [`PENDING_REVISION`].
    pub fn pending(
        txn: &'a mut dyn WriteTxn,
        now: Micros,
        revision: u64,
        staged: &'a mut Vec<Arc<Revision>>,
    ) -> Self {
        Ctx {
            pending: true,
            ..Ctx::new(txn, now, revision, staged)
        }
    }

    /// The revision the op's changes get when it calls [`Ctx::commit`]
    /// ([`PENDING_REVISION`] where it is learned at commit).
    pub fn next_revision(&self) -> u64 {
        if self.pending {
            PENDING_REVISION
        } else {
            self.revision + 1
        }
    }

    /// The last revision assigned in this transaction (before any change:
    /// the revision the op reads at).
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Whether a maintenance op wrote without a revision.
    pub fn wrote_maintenance(&self) -> bool {
        self.maintenance
    }

    /// Removes logged revisions up to `upto` (inclusive) and records it as
    /// the compact revision. Not a mutation: no revision, no event.
    pub fn compact_log(&mut self, upto: u64) -> Result<()> {
        self.txn.compact_log(upto)?;
        self.maintenance = true;
        Ok(())
    }

    /// Writes an auxiliary value (a delivery cursor, a dead letter). Not a
    /// mutation: no revision, no event.
    pub fn put_aux(&mut self, space: &str, key: &str, value: &[u8]) -> Result<()> {
        self.txn.put_aux(space, key, value)?;
        self.maintenance = true;
        Ok(())
    }

    /// Deletes an auxiliary value; like [`Ctx::put_aux`], no revision.
    pub fn delete_aux(&mut self, space: &str, key: &str) -> Result<()> {
        self.txn.delete_aux(space, key)?;
        self.maintenance = true;
        Ok(())
    }

    /// Ends a successful op: logs its events under the next revision and
    /// returns that revision.
    pub fn commit(&mut self, events: Vec<Event>) -> Result<u64> {
        let rev = Arc::new(Revision {
            revision: self.next_revision(),
            time: self.now,
            events,
        });
        self.txn.append_revision(&rev)?;
        self.revision = rev.revision;
        self.staged.push(rev);
        Ok(self.revision)
    }
}

/// Answers a read with the snapshot it ran on, or with the error that kept
/// the engine from taking one.
pub type ReadJob = Box<dyn FnOnce(Result<&dyn ReadTxn>) + Send>;

/// Called once a write's batch is settled: `Ok` once the commit holding it
/// is durable, or the error that failed the batch; and how many mutations
/// that commit carried (for the commit span).
pub type Finisher = Box<dyn FnOnce(&Result<()>, usize) + Send>;

/// A write as an engine runs it. It may run more than once (an engine with
/// optimistic transactions retries on conflict); it gets the transaction,
/// or `None` when its batch already failed. Besides its finisher it
/// returns the error that leaves the transaction unusable (a storage
/// failure or a panic part way through its writes), if any.
pub type WriteJob = Box<dyn FnMut(Option<&mut Ctx<'_>>) -> (Finisher, Option<Error>) + Send>;

/// Logged revisions with their commit times, in revision order.
pub type CommitTimes = Vec<(u64, Micros)>;

/// A boxed future, for object-safe engine methods.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A storage engine behind the store.
pub trait Backend: Send + Sync + 'static {
    /// Runs `job` on a consistent snapshot, off the async workers.
    fn read(&self, job: ReadJob) -> Result<()>;
    /// Queues `job` (about `bytes` of input) for a durable commit; waits
    /// while the queue is full. The job's finisher answers the caller.
    fn write(&self, job: WriteJob, bytes: usize) -> BoxFuture<'_, Result<()>>;
    /// Logged revisions from `from` (inclusive) through the last committed
    /// one, bounded like [`ReadTxn::revisions_from`], for an engine whose
    /// log is not read from a snapshot (etcd: its own history, through a
    /// watch). `None`: read it from a snapshot.
    fn log(
        &self,
        _from: u64,
        _limit: usize,
        _max_bytes: usize,
    ) -> Option<BoxFuture<'_, Result<Vec<Revision>>>> {
        None
    }
    /// Commit times of logged revisions from `from`, like
    /// [`ReadTxn::revision_times`], for an engine whose log is not read
    /// from a snapshot. `None`: read them from a snapshot.
    fn revision_times(
        &self,
        _from: u64,
        _limit: usize,
    ) -> Option<BoxFuture<'_, Result<CommitTimes>>> {
        None
    }
    /// Last committed revision.
    fn revision(&self) -> u64;
    /// Whether the engine can serve, for health checks.
    fn condition(&self) -> watch::Receiver<Readiness>;
    /// Where the data lives, for logs and messages.
    fn describe(&self) -> String;
    /// Writes a consistent online copy of the whole store, taken from one
    /// snapshot, as a new file at `dest`; returns the revision it holds.
    /// Blocking: call off the async workers.
    fn backup(&self, _dest: &std::path::Path) -> Result<u64> {
        Err(Error::Unavailable(
            "this backend has no file to copy: back up its cluster with its own tools".into(),
        ))
    }
    /// Bytes the data takes on this machine's disk, if it is here.
    fn bytes(&self) -> Option<u64> {
        None
    }
    /// Announces this process, as long as it runs, as the replica `name`
    /// that holds leases (see [`Backend::replicas`]). Nothing to do for a
    /// store only one process opens.
    fn announce(&self, _name: &str) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }
    /// The replicas announced and alive now, when several processes can
    /// share this store; `None` when only this one can. A replica missing
    /// here died (or lost the store long enough to be given up): the
    /// survivors take over the timers of the leases it held.
    fn replicas(&self) -> BoxFuture<'_, Result<Option<BTreeSet<String>>>> {
        Box::pin(async { Ok(None) })
    }
    /// Names the data in a storage error and notes what the error says
    /// about the engine (corruption turns health `NOT_SERVING` for good).
    fn observe(&self, e: Error) -> Error;
    /// Commits what is queued, stops, and releases the data (a file, a
    /// connection). Idempotent.
    fn close(&self) -> BoxFuture<'_, ()>;
}
