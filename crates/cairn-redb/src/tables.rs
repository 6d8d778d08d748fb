//! The redb tables and the [`ReadTxn`] / [`WriteTxn`] of a redb
//! transaction.
//!
//! redb's errors become Cairn's through [`Db`], a local error type: the
//! orphan rule keeps `From<redb::Error>` out of `cairn-core`, which must not
//! know redb anyway.

use cairn_core::Micros;
use cairn_core::error::{Error, Result};
use cairn_core::inbox::{Awaited, Awaiting};
use cairn_core::plan_mode::HistoryEntry;
use cairn_core::session::Session;
use std::cell::{RefCell, RefMut};
use std::collections::HashSet;
use std::sync::Arc;

use redb::{
    Database, ReadTransaction, ReadableTable, ReadableTableMetadata, Table, TableDefinition,
    WriteTransaction,
};

use cairn_store::cache::{HotPlan, PlanCache};
use cairn_store::codec::{decode, encode, encode_revision, revision_time};
use cairn_store::records::{PlanRecord, PrincipalRecord, Revision, SessionPage, TodoRecord};
use cairn_store::seam::{ReadTxn, WriteTxn};

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const SESSIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("sessions");
const CHILDREN: TableDefinition<(&str, &str), ()> = TableDefinition::new("children");
const PLANS: TableDefinition<&str, &[u8]> = TableDefinition::new("plans");
const HISTORY: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("plan_history");
const TODOS: TableDefinition<&str, &[u8]> = TableDefinition::new("todos");
/// The log: each revision's commit time (first, readable without decoding
/// the rest) and its events.
const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events");
/// Commit times of the log, kept apart by earlier versions; now the first
/// bytes of each logged revision. Dropped when found.
const OLD_EVENT_TIMES: TableDefinition<u64, i64> = TableDefinition::new("event_times");

/// Sessions by agent, for agent watches and listing by agent.
const AGENT_SESSIONS: TableDefinition<(&str, &str), ()> = TableDefinition::new("agent_sessions");
/// Sessions holding a lease, read at start instead of every session.
const LEASED: TableDefinition<&str, ()> = TableDefinition::new("leased");
/// Items awaiting approval, oldest first: (since, session, item).
const AWAITING: TableDefinition<(i64, &str, &str), ()> = TableDefinition::new("awaiting");
/// Records that are not resources, by (space, key): webhook subscriptions,
/// delivery cursors, dead letters.
const AUX: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("aux");
const PRINCIPALS: TableDefinition<&str, &[u8]> = TableDefinition::new("principals");
/// Principal id by the hex SHA-256 of its token: tokens themselves are
/// never stored.
const TOKENS: TableDefinition<&str, &str> = TableDefinition::new("tokens");

const REVISION_KEY: &str = "revision";
const COMPACT_KEY: &str = "compact_revision";
/// Set once the inbox index holds every waiting item (stores written
/// before it existed are indexed once, at open).
const AWAITING_INDEXED_KEY: &str = "awaiting_indexed";

/// A redb failure, or a Cairn error met while reading (a record that does
/// not decode).
#[derive(Debug)]
pub struct Db(Error);

impl From<Db> for Error {
    fn from(e: Db) -> Self {
        e.0
    }
}

impl From<Error> for Db {
    fn from(e: Error) -> Self {
        Db(e)
    }
}

/// What a redb failure means for the caller. The file name is filled in by
/// the store's health, which knows it.
pub fn from_redb(e: redb::Error) -> Error {
    match e {
        // A failed commit discards redb's allocator state: the file is
        // fine, the handle must be reopened.
        redb::Error::Corrupted(detail) if detail.starts_with("Allocator state was discarded") => {
            Error::Unavailable(format!("{detail}; the database is being reopened"))
        }
        redb::Error::Corrupted(detail) => Error::DataLoss {
            file: String::new(),
            detail,
        },
        redb::Error::Io(io) if is_disk_full(&io) => Error::DiskFull {
            file: String::new(),
            detail: io.to_string(),
        },
        redb::Error::Io(io) => {
            Error::Unavailable(format!("I/O error: {io}; the database is being reopened"))
        }
        redb::Error::PreviousIo => Error::Unavailable(
            "an earlier I/O error closed the database; it is being reopened".into(),
        ),
        other => Error::Storage(other.to_string()),
    }
}

/// Whether an I/O error says the disk (or the quota) is full.
pub fn is_disk_full(e: &std::io::Error) -> bool {
    // ENOSPC (28) and EDQUOT (122) on Linux.
    e.kind() == std::io::ErrorKind::StorageFull
        || e.kind() == std::io::ErrorKind::QuotaExceeded
        || matches!(e.raw_os_error(), Some(28 | 122))
}

macro_rules! db_from {
    ($($t:ty),* $(,)?) => {$(
        impl From<$t> for Db {
            fn from(e: $t) -> Self {
                Db(from_redb(e.into()))
            }
        }
    )*};
}

db_from!(
    redb::Error,
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
);

/// Opens (or creates) the database file and every table.
///
/// An existing file that is empty is refused: redb would silently make it a
/// new store at revision 0, hiding that the data is gone (a truncated copy,
/// a failed restore). With `check_integrity`, every page's checksum is
/// verified first, so a file damaged outside redb fails here, with a clear
/// error, instead of on some later read.
pub fn open(
    path: &std::path::Path,
    check_integrity: bool,
    cache_bytes: usize,
) -> std::result::Result<Database, Db> {
    match std::fs::metadata(path) {
        Ok(m) if m.len() == 0 => {
            return Err(Db(Error::DataLoss {
                file: path.display().to_string(),
                detail: "the file is empty (0 bytes), as if truncated; restore it from a backup, or remove it to start a new, empty store".into(),
            }));
        }
        _ => {}
    }
    let file = path.display().to_string();
    let mut builder = Database::builder();
    builder.set_check_integrity_on_open(check_integrity);
    builder.set_cache_size(cache_bytes);
    builder.set_repair_callback(move |session| {
        let progress = session.progress();
        if progress == 0.0 {
            tracing::warn!(file = %file, "the database needs repair (unclean shutdown or integrity check): repairing");
        } else {
            tracing::info!(file = %file, progress = format!("{:.0}%", progress * 100.0), "repairing the database");
        }
    });
    let db = builder.create(path)?;
    let txn = db.begin_write()?;
    {
        txn.open_table(META)?;
        txn.open_table(SESSIONS)?;
        txn.open_table(CHILDREN)?;
        txn.open_table(PLANS)?;
        txn.open_table(HISTORY)?;
        txn.open_table(TODOS)?;
        txn.open_table(PRINCIPALS)?;
        txn.open_table(TOKENS)?;
        txn.open_table(LEASED)?;
        txn.open_table(AWAITING)?;
        txn.open_table(AUX)?;
        // A store written before the agent index existed: index it once.
        let sessions = txn.open_table(SESSIONS)?;
        let mut by_agent = txn.open_table(AGENT_SESSIONS)?;
        if by_agent.is_empty()? && !sessions.is_empty()? {
            for entry in sessions.range::<&str>(..)? {
                let (_, v) = entry?;
                let s: Session = decode(v.value())?;
                if !s.agent_id.is_empty() {
                    by_agent.insert((s.agent_id.as_str(), s.session_id.as_str()), ())?;
                }
            }
        }
        drop(by_agent);
        drop(sessions);
        let mut meta = txn.open_table(META)?;
        if read::meta(&meta, AWAITING_INDEXED_KEY)? == 0 {
            let plans = txn.open_table(PLANS)?;
            let mut awaiting = txn.open_table(AWAITING)?;
            for entry in plans.range::<&str>(..)? {
                let (k, v) = entry?;
                let record: PlanRecord = decode(v.value())?;
                for w in record.plan.mode.awaiting(k.value()) {
                    let item = w.item.key();
                    awaiting.insert((w.since, w.session_id.as_str(), item.as_str()), ())?;
                }
            }
            meta.insert(AWAITING_INDEXED_KEY, 1)?;
        }
        drop(meta);
        txn.open_table(EVENTS)?;
    }
    txn.delete_table(OLD_EVENT_TIMES)?;
    txn.commit()?;
    Ok(db)
}

/// Reads over a table, whichever transaction opened it: a read
/// transaction's `ReadOnlyTable` and the writer's held `Table` share them.
mod read {
    use super::{Awaited, Awaiting, Db, Micros, Revision, SessionPage, decode, revision_time};
    use cairn_store::codec::{decode_revision_sized, decode_sized};
    use redb::ReadableTable;
    use serde::de::DeserializeOwned;
    use std::ops::Bound;

    pub fn record<T: DeserializeOwned>(
        t: &impl ReadableTable<&'static str, &'static [u8]>,
        key: &str,
    ) -> Result<Option<T>, Db> {
        Ok(t.get(key)?.map(|v| decode(v.value())).transpose()?)
    }

    pub fn meta(t: &impl ReadableTable<&'static str, u64>, key: &str) -> Result<u64, Db> {
        Ok(t.get(key)?.map_or(0, |v| v.value()))
    }

    /// One auxiliary value.
    pub fn aux(
        t: &impl ReadableTable<(&'static str, &'static str), &'static [u8]>,
        space: &str,
        key: &str,
    ) -> Result<Option<Vec<u8>>, Db> {
        Ok(t.get((space, key))?.map(|v| v.value().to_vec()))
    }

    /// Auxiliary values of `space` strictly after `after`, at most `limit`.
    pub fn aux_after(
        t: &impl ReadableTable<(&'static str, &'static str), &'static [u8]>,
        space: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, Db> {
        let from = match after {
            Some(a) => Bound::Excluded((space, a)),
            None => Bound::Included((space, "")),
        };
        let mut out = Vec::new();
        for entry in t.range::<(&str, &str)>((from, Bound::Unbounded))? {
            let (k, v) = entry?;
            let (s, key) = k.value();
            if s != space || out.len() >= limit.max(1) {
                break;
            }
            out.push((key.to_owned(), v.value().to_vec()));
        }
        Ok(out)
    }

    /// Inbox keys strictly after `after`, at most `limit`.
    pub fn awaiting(
        t: &impl ReadableTable<(i64, &'static str, &'static str), ()>,
        after: Option<&Awaiting>,
        limit: usize,
    ) -> Result<Vec<Awaiting>, Db> {
        let item = after.map(|a| a.item.key());
        let from = match (after, &item) {
            (Some(a), Some(i)) => Bound::Excluded((a.since, a.session_id.as_str(), i.as_str())),
            _ => Bound::Unbounded,
        };
        let mut out = Vec::new();
        for entry in t.range::<(i64, &str, &str)>((from, Bound::Unbounded))? {
            if out.len() >= limit.max(1) {
                break;
            }
            let (k, _) = entry?;
            let (since, session_id, item) = k.value();
            // A key this version cannot read is skipped, not fatal.
            if let Some(item) = Awaited::parse(item) {
                out.push(Awaiting {
                    since,
                    session_id: session_id.to_owned(),
                    item,
                });
            }
        }
        Ok(out)
    }

    /// Every key of a set-like table, in order.
    pub fn keys(t: &impl ReadableTable<&'static str, ()>) -> Result<Vec<String>, Db> {
        let mut out = Vec::new();
        for entry in t.range::<&str>(..)? {
            out.push(entry?.0.value().to_owned());
        }
        Ok(out)
    }

    /// Second halves of the `(first, second)` keys whose first half is `first`.
    pub fn pairs(
        t: &impl ReadableTable<(&'static str, &'static str), ()>,
        first: &str,
    ) -> Result<Vec<String>, Db> {
        let mut out = Vec::new();
        for entry in t.range((first, "")..)? {
            let (k, _) = entry?;
            let (a, b) = k.value();
            if a != first {
                break;
            }
            out.push(b.to_owned());
        }
        Ok(out)
    }

    /// Records with keys strictly after `after`, at most `limit`; and the
    /// key to continue after when more follow.
    pub fn records_after<T: DeserializeOwned>(
        t: &impl ReadableTable<&'static str, &'static [u8]>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<T>, Option<String>), Db> {
        let range = match after {
            Some(a) => t.range::<&str>((Bound::Excluded(a), Bound::Unbounded))?,
            None => t.range::<&str>(..)?,
        };
        let mut out = Vec::new();
        let mut last = None;
        for entry in range {
            let (k, v) = entry?;
            if out.len() == limit {
                return Ok((out, last));
            }
            last = Some(k.value().to_owned());
            out.push(decode(v.value())?);
        }
        Ok((out, None))
    }

    pub fn sessions_after(
        t: &impl ReadableTable<&'static str, &'static [u8]>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<SessionPage, Db> {
        let (sessions, next_after) = records_after(t, after, limit)?;
        Ok(SessionPage {
            sessions,
            next_after,
        })
    }

    pub fn history<T: DeserializeOwned>(
        t: &impl ReadableTable<(&'static str, u64), &'static [u8]>,
        session_id: &str,
        from: u64,
        limit: usize,
        max_bytes: usize,
    ) -> Result<(Vec<T>, Option<u64>), Db> {
        let mut out = Vec::new();
        let mut bytes = 0;
        for entry in t.range((session_id, from)..=(session_id, u64::MAX))? {
            let (k, v) = entry?;
            if out.len() >= limit.max(1) || (bytes >= max_bytes && !out.is_empty()) {
                return Ok((out, Some(k.value().1)));
            }
            // Counted decoded: the budget bounds memory and messages.
            let (entry, size) = decode_sized(v.value())?;
            bytes += size;
            out.push(entry);
        }
        Ok((out, None))
    }

    /// Up to `limit` records after the key `after` (from the first when
    /// `None`), in key order.
    pub fn after<T: DeserializeOwned>(
        t: &impl ReadableTable<&'static str, &'static [u8]>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<T>, Db> {
        use std::ops::Bound;
        let range = match after {
            Some(a) => t.range::<&str>((Bound::Excluded(a), Bound::Unbounded))?,
            None => t.range::<&str>(..)?,
        };
        let mut out = Vec::new();
        for entry in range.take(limit.max(1)) {
            let (_, v) = entry?;
            out.push(decode(v.value())?);
        }
        Ok(out)
    }

    pub fn revisions_from(
        t: &impl ReadableTable<u64, &'static [u8]>,
        from: u64,
        limit: usize,
        max_bytes: usize,
    ) -> Result<Vec<Revision>, Db> {
        let mut out = Vec::new();
        let mut bytes = 0;
        for entry in t.range(from..)?.take(limit) {
            let (_, v) = entry?;
            let (revision, size) = decode_revision_sized(v.value())?;
            bytes += size;
            out.push(revision);
            if bytes >= max_bytes {
                break;
            }
        }
        Ok(out)
    }

    pub fn revision_times(
        t: &impl ReadableTable<u64, &'static [u8]>,
        from: u64,
        limit: usize,
    ) -> Result<Vec<(u64, Micros)>, Db> {
        let mut out = Vec::new();
        for entry in t.range(from..)?.take(limit) {
            let (k, v) = entry?;
            out.push((k.value(), revision_time(v.value())?));
        }
        Ok(out)
    }
}

/// A read transaction seen through [`ReadTxn`].
pub struct RedbTxn<'a>(pub &'a ReadTransaction);

/// Runs redb calls, turning their errors into Cairn's.
fn db<T>(f: impl FnOnce() -> std::result::Result<T, Db>) -> Result<T> {
    f().map_err(Error::from)
}

impl ReadTxn for RedbTxn<'_> {
    fn revision(&self) -> Result<u64> {
        db(|| read::meta(&self.0.open_table(META)?, REVISION_KEY))
    }
    fn compact_revision(&self) -> Result<u64> {
        db(|| read::meta(&self.0.open_table(META)?, COMPACT_KEY))
    }
    fn session(&self, id: &str) -> Result<Option<Session>> {
        db(|| read::record(&self.0.open_table(SESSIONS)?, id))
    }
    fn children(&self, id: &str) -> Result<Vec<String>> {
        db(|| read::pairs(&self.0.open_table(CHILDREN)?, id))
    }
    fn sessions_after(&self, after: Option<&str>, limit: usize) -> Result<SessionPage> {
        db(|| read::sessions_after(&self.0.open_table(SESSIONS)?, after, limit))
    }
    fn plan(&self, session_id: &str) -> Result<Option<PlanRecord>> {
        db(|| read::record(&self.0.open_table(PLANS)?, session_id))
    }
    fn history(
        &self,
        session_id: &str,
        from: u64,
        limit: usize,
        max_bytes: usize,
    ) -> Result<(Vec<HistoryEntry>, Option<u64>)> {
        db(|| {
            read::history(
                &self.0.open_table(HISTORY)?,
                session_id,
                from,
                limit,
                max_bytes,
            )
        })
    }
    fn todos(&self, agent_id: &str) -> Result<Option<TodoRecord>> {
        db(|| read::record(&self.0.open_table(TODOS)?, agent_id))
    }
    fn todos_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<TodoRecord>> {
        db(|| read::after(&self.0.open_table(TODOS)?, after, limit))
    }
    fn revisions_from(&self, from: u64, limit: usize, max_bytes: usize) -> Result<Vec<Revision>> {
        db(|| read::revisions_from(&self.0.open_table(EVENTS)?, from, limit, max_bytes))
    }
    fn revision_times(&self, from: u64, limit: usize) -> Result<Vec<(u64, Micros)>> {
        db(|| read::revision_times(&self.0.open_table(EVENTS)?, from, limit))
    }
    fn agent_sessions(&self, agent_id: &str) -> Result<Vec<String>> {
        db(|| read::pairs(&self.0.open_table(AGENT_SESSIONS)?, agent_id))
    }
    fn leased(&self) -> Result<Vec<String>> {
        db(|| read::keys(&self.0.open_table(LEASED)?))
    }
    fn awaiting_after(&self, after: Option<&Awaiting>, limit: usize) -> Result<Vec<Awaiting>> {
        db(|| read::awaiting(&self.0.open_table(AWAITING)?, after, limit))
    }
    fn aux(&self, space: &str, key: &str) -> Result<Option<Vec<u8>>> {
        db(|| read::aux(&self.0.open_table(AUX)?, space, key))
    }
    fn aux_after(
        &self,
        space: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>> {
        db(|| read::aux_after(&self.0.open_table(AUX)?, space, after, limit))
    }
    fn principal(&self, id: &str) -> Result<Option<PrincipalRecord>> {
        db(|| read::record(&self.0.open_table(PRINCIPALS)?, id))
    }
    fn principal_by_token(&self, token_sha256: &str) -> Result<Option<PrincipalRecord>> {
        let id = db(|| {
            Ok(self
                .0
                .open_table(TOKENS)?
                .get(token_sha256)?
                .map(|v| v.value().to_owned()))
        })?;
        match id {
            Some(id) => self.principal(&id),
            None => Ok(None),
        }
    }
    fn principals_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<PrincipalRecord>> {
        db(|| Ok(read::records_after(&self.0.open_table(PRINCIPALS)?, after, limit)?.0))
    }
}

/// A table the writer keeps open for a whole batch: opening a redb table
/// looks it up and closing it stages its new root, which cost more than
/// the one insert a mutation makes in most tables.
struct Held<'txn, K: redb::Key + 'static, V: redb::Value + 'static> {
    def: TableDefinition<'static, K, V>,
    table: RefCell<Option<Table<'txn, K, V>>>,
}

impl<'txn, K: redb::Key + 'static, V: redb::Value + 'static> Held<'txn, K, V> {
    fn new(def: TableDefinition<'static, K, V>) -> Self {
        Held {
            def,
            table: RefCell::new(None),
        }
    }

    /// The table, opened on first use. A second use while the first is
    /// still borrowed (never done) is an error, not a panic.
    fn get(
        &self,
        txn: &'txn WriteTransaction,
    ) -> std::result::Result<RefMut<'_, Table<'txn, K, V>>, Db> {
        let mut cell = self
            .table
            .try_borrow_mut()
            .map_err(|_| Db(Error::Internal("a table used twice at once".into())))?;
        if cell.is_none() {
            *cell = Some(txn.open_table(self.def)?);
        }
        RefMut::filter_map(cell, Option::as_mut)
            .map_err(|_| Db(Error::Internal("a table failed to open".into())))
    }
}

/// A write transaction seen through [`WriteTxn`], its tables held open
/// until [`RedbWrite::finish`].
pub struct RedbWrite<'txn> {
    txn: &'txn WriteTransaction,
    /// The last revision appended in this transaction, written to `meta`
    /// once, at the end.
    appended: Option<u64>,
    /// The committed hot plans, current for every session this
    /// transaction has not touched.
    hot: Option<&'txn PlanCache>,
    /// Sessions whose record or plan this transaction wrote.
    touched: HashSet<String>,
    /// A session was deleted or moved: ancestry in the cache may be stale.
    reshaped: bool,
    meta: Held<'txn, &'static str, u64>,
    sessions: Held<'txn, &'static str, &'static [u8]>,
    children: Held<'txn, (&'static str, &'static str), ()>,
    plans: Held<'txn, &'static str, &'static [u8]>,
    history: Held<'txn, (&'static str, u64), &'static [u8]>,
    todos: Held<'txn, &'static str, &'static [u8]>,
    events: Held<'txn, u64, &'static [u8]>,
    agent_sessions: Held<'txn, (&'static str, &'static str), ()>,
    leased: Held<'txn, &'static str, ()>,
    aux: Held<'txn, (&'static str, &'static str), &'static [u8]>,
    awaiting: Held<'txn, (i64, &'static str, &'static str), ()>,
    principals: Held<'txn, &'static str, &'static [u8]>,
    tokens: Held<'txn, &'static str, &'static str>,
}

impl<'txn> RedbWrite<'txn> {
    /// A transaction of `txn`; with `hot`, plans the batch has not touched are
    /// read from memory.
    pub fn new(txn: &'txn WriteTransaction, hot: Option<&'txn PlanCache>) -> Self {
        RedbWrite {
            txn,
            appended: None,
            hot,
            touched: HashSet::new(),
            reshaped: false,
            meta: Held::new(META),
            sessions: Held::new(SESSIONS),
            children: Held::new(CHILDREN),
            plans: Held::new(PLANS),
            history: Held::new(HISTORY),
            todos: Held::new(TODOS),
            events: Held::new(EVENTS),
            agent_sessions: Held::new(AGENT_SESSIONS),
            leased: Held::new(LEASED),
            aux: Held::new(AUX),
            awaiting: Held::new(AWAITING),
            principals: Held::new(PRINCIPALS),
            tokens: Held::new(TOKENS),
        }
    }

    /// Records the last revision and closes the tables, before the commit.
    pub fn finish(self) -> Result<()> {
        if let Some(rev) = self.appended {
            db(|| {
                self.meta.get(self.txn)?.insert(REVISION_KEY, rev)?;
                Ok(())
            })?;
        }
        Ok(())
    }
}

impl ReadTxn for RedbWrite<'_> {
    fn revision(&self) -> Result<u64> {
        match self.appended {
            Some(rev) => Ok(rev),
            None => db(|| read::meta(&*self.meta.get(self.txn)?, REVISION_KEY)),
        }
    }
    fn compact_revision(&self) -> Result<u64> {
        db(|| read::meta(&*self.meta.get(self.txn)?, COMPACT_KEY))
    }
    fn session(&self, id: &str) -> Result<Option<Session>> {
        db(|| read::record(&*self.sessions.get(self.txn)?, id))
    }
    fn children(&self, id: &str) -> Result<Vec<String>> {
        db(|| read::pairs(&*self.children.get(self.txn)?, id))
    }
    fn sessions_after(&self, after: Option<&str>, limit: usize) -> Result<SessionPage> {
        db(|| read::sessions_after(&*self.sessions.get(self.txn)?, after, limit))
    }
    fn plan(&self, session_id: &str) -> Result<Option<PlanRecord>> {
        db(|| read::record(&*self.plans.get(self.txn)?, session_id))
    }
    fn history(
        &self,
        session_id: &str,
        from: u64,
        limit: usize,
        max_bytes: usize,
    ) -> Result<(Vec<HistoryEntry>, Option<u64>)> {
        db(|| {
            read::history(
                &*self.history.get(self.txn)?,
                session_id,
                from,
                limit,
                max_bytes,
            )
        })
    }
    fn todos(&self, agent_id: &str) -> Result<Option<TodoRecord>> {
        db(|| read::record(&*self.todos.get(self.txn)?, agent_id))
    }
    fn todos_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<TodoRecord>> {
        db(|| read::after(&*self.todos.get(self.txn)?, after, limit))
    }
    fn revisions_from(&self, from: u64, limit: usize, max_bytes: usize) -> Result<Vec<Revision>> {
        db(|| read::revisions_from(&*self.events.get(self.txn)?, from, limit, max_bytes))
    }
    fn revision_times(&self, from: u64, limit: usize) -> Result<Vec<(u64, Micros)>> {
        db(|| read::revision_times(&*self.events.get(self.txn)?, from, limit))
    }
    fn agent_sessions(&self, agent_id: &str) -> Result<Vec<String>> {
        db(|| read::pairs(&*self.agent_sessions.get(self.txn)?, agent_id))
    }
    fn leased(&self) -> Result<Vec<String>> {
        db(|| read::keys(&*self.leased.get(self.txn)?))
    }
    fn awaiting_after(&self, after: Option<&Awaiting>, limit: usize) -> Result<Vec<Awaiting>> {
        db(|| read::awaiting(&*self.awaiting.get(self.txn)?, after, limit))
    }
    fn aux(&self, space: &str, key: &str) -> Result<Option<Vec<u8>>> {
        db(|| read::aux(&*self.aux.get(self.txn)?, space, key))
    }
    fn aux_after(
        &self,
        space: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>> {
        db(|| read::aux_after(&*self.aux.get(self.txn)?, space, after, limit))
    }
    fn principal(&self, id: &str) -> Result<Option<PrincipalRecord>> {
        db(|| read::record(&*self.principals.get(self.txn)?, id))
    }
    fn principal_by_token(&self, token_sha256: &str) -> Result<Option<PrincipalRecord>> {
        let id = db(|| {
            Ok(self
                .tokens
                .get(self.txn)?
                .get(token_sha256)?
                .map(|v| v.value().to_owned()))
        })?;
        match id {
            Some(id) => self.principal(&id),
            None => Ok(None),
        }
    }
    fn principals_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<PrincipalRecord>> {
        db(|| Ok(read::records_after(&*self.principals.get(self.txn)?, after, limit)?.0))
    }
    fn hot_plan(&self, session_id: &str) -> Result<Option<Arc<HotPlan>>> {
        if self.reshaped || self.touched.contains(session_id) {
            return Ok(None);
        }
        Ok(self.hot.and_then(|h| h.get(session_id)))
    }
}

impl WriteTxn for RedbWrite<'_> {
    fn put_session(&mut self, s: &Session) -> Result<()> {
        self.touched.insert(s.session_id.clone());
        let bytes = encode(s)?;
        db(|| {
            self.sessions
                .get(self.txn)?
                .insert(s.session_id.as_str(), bytes.as_slice())?;
            Ok(())
        })
    }

    fn delete_session(&mut self, id: &str) -> Result<()> {
        self.reshaped = true;
        db(|| {
            self.sessions.get(self.txn)?.remove(id)?;
            Ok(())
        })
    }

    fn put_child(&mut self, parent: &str, child: &str) -> Result<()> {
        db(|| {
            self.children.get(self.txn)?.insert((parent, child), ())?;
            Ok(())
        })
    }

    fn delete_child(&mut self, parent: &str, child: &str) -> Result<()> {
        // A move or a deletion: the ancestry of all below may change.
        self.reshaped = true;
        db(|| {
            self.children.get(self.txn)?.remove((parent, child))?;
            Ok(())
        })
    }

    fn put_plan(&mut self, session_id: &str, record: &[u8]) -> Result<()> {
        self.touched.insert(session_id.to_owned());
        db(|| {
            self.plans.get(self.txn)?.insert(session_id, record)?;
            Ok(())
        })
    }

    fn delete_plan(&mut self, session_id: &str) -> Result<()> {
        self.touched.insert(session_id.to_owned());
        db(|| {
            self.plans.get(self.txn)?.remove(session_id)?;
            Ok(())
        })
    }

    fn put_history(&mut self, session_id: &str, seq: u64, e: &HistoryEntry) -> Result<()> {
        let bytes = encode(e)?;
        db(|| {
            self.history
                .get(self.txn)?
                .insert((session_id, seq), bytes.as_slice())?;
            Ok(())
        })
    }

    fn delete_history(&mut self, session_id: &str) -> Result<()> {
        db(|| {
            self.history
                .get(self.txn)?
                .retain_in((session_id, 0)..=(session_id, u64::MAX), |_, _| false)?;
            Ok(())
        })
    }

    fn put_todos(&mut self, t: &TodoRecord) -> Result<()> {
        let bytes = encode(t)?;
        db(|| {
            self.todos
                .get(self.txn)?
                .insert(t.agent_id.as_str(), bytes.as_slice())?;
            Ok(())
        })
    }

    fn put_agent_session(&mut self, agent_id: &str, session_id: &str) -> Result<()> {
        db(|| {
            self.agent_sessions
                .get(self.txn)?
                .insert((agent_id, session_id), ())?;
            Ok(())
        })
    }

    fn put_aux(&mut self, space: &str, key: &str, value: &[u8]) -> Result<()> {
        db(|| {
            self.aux.get(self.txn)?.insert((space, key), value)?;
            Ok(())
        })
    }

    fn delete_aux(&mut self, space: &str, key: &str) -> Result<()> {
        db(|| {
            self.aux.get(self.txn)?.remove((space, key))?;
            Ok(())
        })
    }

    fn put_leased(&mut self, session_id: &str) -> Result<()> {
        db(|| {
            self.leased.get(self.txn)?.insert(session_id, ())?;
            Ok(())
        })
    }

    fn delete_leased(&mut self, session_id: &str) -> Result<()> {
        db(|| {
            self.leased.get(self.txn)?.remove(session_id)?;
            Ok(())
        })
    }

    fn put_awaiting(&mut self, key: &Awaiting) -> Result<()> {
        let item = key.item.key();
        db(|| {
            self.awaiting
                .get(self.txn)?
                .insert((key.since, key.session_id.as_str(), item.as_str()), ())?;
            Ok(())
        })
    }

    fn delete_awaiting(&mut self, key: &Awaiting) -> Result<()> {
        let item = key.item.key();
        db(|| {
            self.awaiting.get(self.txn)?.remove((
                key.since,
                key.session_id.as_str(),
                item.as_str(),
            ))?;
            Ok(())
        })
    }

    fn delete_agent_session(&mut self, agent_id: &str, session_id: &str) -> Result<()> {
        db(|| {
            self.agent_sessions
                .get(self.txn)?
                .remove((agent_id, session_id))?;
            Ok(())
        })
    }

    fn put_principal(&mut self, p: &PrincipalRecord) -> Result<()> {
        let bytes = encode(p)?;
        let id = p.principal.principal_id.as_str();
        // A rotation replaces the old hash: the old token stops working in
        // the same commit.
        let old = self.principal(id)?;
        db(|| {
            let mut tokens = self.tokens.get(self.txn)?;
            if let Some(old) = old {
                tokens.remove(old.token_sha256.as_str())?;
            }
            tokens.insert(p.token_sha256.as_str(), id)?;
            self.principals
                .get(self.txn)?
                .insert(id, bytes.as_slice())?;
            Ok(())
        })
    }

    fn delete_principal(&mut self, p: &PrincipalRecord) -> Result<()> {
        db(|| {
            self.tokens.get(self.txn)?.remove(p.token_sha256.as_str())?;
            self.principals
                .get(self.txn)?
                .remove(p.principal.principal_id.as_str())?;
            Ok(())
        })
    }

    fn append_revision(&mut self, r: &Revision) -> Result<()> {
        let bytes = encode_revision(r)?;
        db(|| {
            self.events
                .get(self.txn)?
                .insert(r.revision, bytes.as_slice())?;
            Ok(())
        })?;
        self.appended = Some(r.revision);
        Ok(())
    }

    fn compact_log(&mut self, upto: u64) -> Result<()> {
        if upto <= self.compact_revision()? {
            return Ok(());
        }
        db(|| {
            self.events
                .get(self.txn)?
                .retain_in(..=upto, |_, _| false)?;
            self.meta.get(self.txn)?.insert(COMPACT_KEY, upto)?;
            Ok(())
        })
    }
}

/// Copies one table from a snapshot into a new file's transaction.
fn copy_table<K: redb::Key + 'static, V: redb::Value + 'static>(
    from: &ReadTransaction,
    to: &WriteTransaction,
    def: TableDefinition<'static, K, V>,
) -> std::result::Result<(), Db> {
    let source = match from.open_table(def) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let mut target = to.open_table(def)?;
    for entry in source.iter()? {
        let (k, v) = entry?;
        target.insert(k.value(), v.value())?;
    }
    Ok(())
}

/// Writes a consistent copy of the store, as of the snapshot `from`, into
/// a new database file at `dest` (which must not exist), durably. Returns
/// the revision the copy holds.
pub fn backup(from: &ReadTransaction, dest: &std::path::Path) -> Result<u64> {
    let revision = RedbTxn(from).revision()?;
    let dir = || {
        dest.parent()
            .map_or_else(String::new, |d| d.display().to_string())
    };
    let out = Database::builder()
        .create(dest)
        .map_err(|e| Error::BackupFailed {
            dir: dir(),
            detail: format!("create {}: {e}", dest.display()),
        })?;
    db(|| {
        let mut txn = out.begin_write()?;
        txn.set_durability(redb::Durability::Immediate)
            .map_err(|e| Db(Error::Storage(e.to_string())))?;
        copy_table(from, &txn, META)?;
        copy_table(from, &txn, SESSIONS)?;
        copy_table(from, &txn, CHILDREN)?;
        copy_table(from, &txn, PLANS)?;
        copy_table(from, &txn, HISTORY)?;
        copy_table(from, &txn, TODOS)?;
        copy_table(from, &txn, EVENTS)?;
        copy_table(from, &txn, AGENT_SESSIONS)?;
        copy_table(from, &txn, LEASED)?;
        copy_table(from, &txn, AWAITING)?;
        copy_table(from, &txn, PRINCIPALS)?;
        copy_table(from, &txn, TOKENS)?;
        txn.commit()?;
        Ok(())
    })
    .map_err(|e| match e {
        // Only the copy is written: a full disk is the copy's failure, and
        // says nothing about the store.
        Error::DiskFull { detail, .. } => Error::BackupFailed { dir: dir(), detail },
        e => e,
    })?;
    Ok(revision)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_core::plan_mode::PendingPlan;
    use redb::ReadableDatabase;

    /// A store written before the inbox index existed has its waiting
    /// plans indexed once, when it is opened.
    #[test]
    fn waiting_plans_of_an_older_store_are_indexed_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cairn.redb");
        let db = open(&path, false, 1 << 20).unwrap();
        let mut record = PlanRecord {
            session_id: "s".into(),
            ..PlanRecord::default()
        };
        record.plan.mode.pending = Some(PendingPlan {
            plan_id: "plan_1".into(),
            submit_time: 42,
            ..PendingPlan::default()
        });
        // As an older version left it: the plan, no index, no mark.
        let txn = db.begin_write().unwrap();
        {
            let bytes = encode(&record).unwrap();
            txn.open_table(PLANS)
                .unwrap()
                .insert("s", bytes.as_slice())
                .unwrap();
            txn.open_table(META)
                .unwrap()
                .remove(AWAITING_INDEXED_KEY)
                .unwrap();
        }
        txn.commit().unwrap();
        drop(db);
        let db = open(&path, false, 1 << 20).unwrap();
        let read = db.begin_read().unwrap();
        let keys = read::awaiting(&read.open_table(AWAITING).unwrap(), None, 10)
            .map_err(|Db(e)| e)
            .unwrap();
        assert_eq!(
            keys,
            [Awaiting {
                since: 42,
                session_id: "s".into(),
                item: Awaited::Plan
            }]
        );
    }
}
