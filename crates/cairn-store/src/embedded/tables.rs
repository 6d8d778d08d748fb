//! The redb tables and the [`ReadView`] / [`WriteView`] of a redb
//! transaction.
//!
//! redb's errors become Cairn's through [`Db`], a local error type: the
//! orphan rule keeps `From<redb::Error>` out of `cairn-core`, which must not
//! know redb anyway.

use cairn_core::Micros;
use cairn_core::error::{Error, Result};
use cairn_core::plan_mode::HistoryEntry;
use cairn_core::session::Session;
use redb::{
    Database, ReadTransaction, ReadableTable, ReadableTableMetadata, TableDefinition,
    WriteTransaction,
};
use serde::de::DeserializeOwned;

use crate::codec::{decode, encode};
use crate::records::{PlanRecord, PrincipalRecord, Revision, SessionPage, TodoRecord};
use crate::seam::{ReadView, WriteView};

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const SESSIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("sessions");
const CHILDREN: TableDefinition<(&str, &str), ()> = TableDefinition::new("children");
const PLANS: TableDefinition<&str, &[u8]> = TableDefinition::new("plans");
const HISTORY: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("plan_history");
const TODOS: TableDefinition<&str, &[u8]> = TableDefinition::new("todos");
const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events");
/// Commit time of each logged revision, so the compactor decides what is
/// due from 16 bytes a revision instead of decoding whole revisions.
const EVENT_TIMES: TableDefinition<u64, i64> = TableDefinition::new("event_times");

/// Sessions by agent, for agent watches and listing by agent.
const AGENT_SESSIONS: TableDefinition<(&str, &str), ()> = TableDefinition::new("agent_sessions");
const PRINCIPALS: TableDefinition<&str, &[u8]> = TableDefinition::new("principals");
/// Principal id by the hex SHA-256 of its token: tokens themselves are
/// never stored.
const TOKENS: TableDefinition<&str, &str> = TableDefinition::new("tokens");

const REVISION_KEY: &str = "revision";
const COMPACT_KEY: &str = "compact_revision";

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
        let events = txn.open_table(EVENTS)?;
        let mut times = txn.open_table(EVENT_TIMES)?;
        // A store written before the times table existed: index it once.
        if times.is_empty()? && !events.is_empty()? {
            tracing::info!("indexing the commit times of the event log (once, after an upgrade)");
            for entry in events.range::<u64>(..)? {
                let (k, v) = entry?;
                let rev: Revision = decode(v.value())?;
                times.insert(k.value(), rev.time)?;
            }
        }
    }
    txn.commit()?;
    Ok(db)
}

/// Either kind of redb transaction, read through the same code.
pub enum RedbView<'a> {
    Read(&'a ReadTransaction),
    Write(&'a WriteTransaction),
}

/// Opens `$def` on whichever transaction `$view` holds and runs `$body`
/// with it bound to `$t` (the two table types share `ReadableTable`).
macro_rules! with_table {
    ($view:expr, $def:expr, |$t:ident| $body:expr) => {{
        let run = || -> std::result::Result<_, Db> {
            match $view {
                RedbView::Read(r) => {
                    let $t = r.open_table($def)?;
                    $body
                }
                RedbView::Write(w) => {
                    let $t = w.open_table($def)?;
                    $body
                }
            }
        };
        run().map_err(Error::from)
    }};
}

/// Runs redb calls, turning their errors into Cairn's.
fn db<T>(f: impl FnOnce() -> std::result::Result<T, Db>) -> Result<T> {
    f().map_err(Error::from)
}

fn get_record<T: DeserializeOwned>(
    t: &impl ReadableTable<&'static str, &'static [u8]>,
    key: &str,
) -> std::result::Result<Option<T>, Db> {
    Ok(t.get(key)?.map(|v| decode(v.value())).transpose()?)
}

impl ReadView for RedbView<'_> {
    fn revision(&self) -> Result<u64> {
        with_table!(self, META, |t| Ok(t
            .get(REVISION_KEY)?
            .map_or(0, |v| v.value())))
    }

    fn compact_revision(&self) -> Result<u64> {
        with_table!(self, META, |t| Ok(t
            .get(COMPACT_KEY)?
            .map_or(0, |v| v.value())))
    }

    fn session(&self, id: &str) -> Result<Option<Session>> {
        with_table!(self, SESSIONS, |t| get_record(&t, id))
    }

    fn children(&self, id: &str) -> Result<Vec<String>> {
        with_table!(self, CHILDREN, |t| {
            let mut out = Vec::new();
            for entry in t.range((id, "")..)? {
                let (k, ()) = entry.map(|(k, _)| (k, ()))?;
                let (parent, child) = k.value();
                if parent != id {
                    break;
                }
                out.push(child.to_owned());
            }
            Ok(out)
        })
    }

    fn sessions_after(&self, after: Option<&str>, limit: usize) -> Result<SessionPage> {
        with_table!(self, SESSIONS, |t| {
            let mut page = SessionPage::default();
            let range = match after {
                Some(a) => {
                    t.range::<&str>((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded))?
                }
                None => t.range::<&str>(..)?,
            };
            for entry in range {
                let (_, v) = entry?;
                if page.sessions.len() == limit {
                    page.next_after = page.sessions.last().map(|s| s.session_id.clone());
                    break;
                }
                page.sessions.push(decode(v.value())?);
            }
            Ok(page)
        })
    }

    fn plan(&self, session_id: &str) -> Result<Option<PlanRecord>> {
        with_table!(self, PLANS, |t| get_record(&t, session_id))
    }

    fn history(
        &self,
        session_id: &str,
        from: u64,
        limit: usize,
        max_bytes: usize,
    ) -> Result<(Vec<HistoryEntry>, Option<u64>)> {
        with_table!(self, HISTORY, |t| {
            let mut out = Vec::new();
            let mut bytes = 0;
            for entry in t.range((session_id, from)..=(session_id, u64::MAX))? {
                let (k, v) = entry?;
                if out.len() >= limit.max(1) || (bytes >= max_bytes && !out.is_empty()) {
                    return Ok((out, Some(k.value().1)));
                }
                bytes += v.value().len();
                out.push(decode(v.value())?);
            }
            Ok((out, None))
        })
    }

    fn todos(&self, agent_id: &str) -> Result<Option<TodoRecord>> {
        with_table!(self, TODOS, |t| get_record(&t, agent_id))
    }

    fn all_todos(&self) -> Result<Vec<TodoRecord>> {
        with_table!(self, TODOS, |t| {
            let mut out = Vec::new();
            for entry in t.range::<&str>(..)? {
                let (_, v) = entry?;
                out.push(decode(v.value())?);
            }
            Ok(out)
        })
    }

    fn revisions_from(&self, from: u64, limit: usize, max_bytes: usize) -> Result<Vec<Revision>> {
        with_table!(self, EVENTS, |t| {
            let mut out = Vec::new();
            let mut bytes = 0;
            for entry in t.range(from..)?.take(limit) {
                let (_, v) = entry?;
                bytes += v.value().len();
                out.push(decode(v.value())?);
                if bytes >= max_bytes {
                    break;
                }
            }
            Ok(out)
        })
    }

    fn revision_times(&self, from: u64, limit: usize) -> Result<Vec<(u64, Micros)>> {
        with_table!(self, EVENT_TIMES, |t| {
            let mut out = Vec::new();
            for entry in t.range(from..)?.take(limit) {
                let (k, v) = entry?;
                out.push((k.value(), v.value()));
            }
            Ok(out)
        })
    }

    fn agent_sessions(&self, agent_id: &str) -> Result<Vec<String>> {
        with_table!(self, AGENT_SESSIONS, |t| {
            let mut out = Vec::new();
            for entry in t.range((agent_id, "")..)? {
                let (k, ()) = entry.map(|(k, _)| (k, ()))?;
                let (agent, session) = k.value();
                if agent != agent_id {
                    break;
                }
                out.push(session.to_owned());
            }
            Ok(out)
        })
    }

    fn principal(&self, id: &str) -> Result<Option<PrincipalRecord>> {
        with_table!(self, PRINCIPALS, |t| get_record(&t, id))
    }

    fn principal_by_token(&self, token_sha256: &str) -> Result<Option<PrincipalRecord>> {
        let id = with_table!(self, TOKENS, |t| Ok(t
            .get(token_sha256)?
            .map(|v| v.value().to_owned())))?;
        match id {
            Some(id) => self.principal(&id),
            None => Ok(None),
        }
    }

    fn principals_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<PrincipalRecord>> {
        with_table!(self, PRINCIPALS, |t| {
            let range = match after {
                Some(a) => {
                    t.range::<&str>((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded))?
                }
                None => t.range::<&str>(..)?,
            };
            let mut out = Vec::new();
            for entry in range.take(limit) {
                let (_, v) = entry?;
                out.push(decode(v.value())?);
            }
            Ok(out)
        })
    }
}

/// A write transaction seen through [`WriteView`].
pub struct RedbWrite<'a> {
    pub txn: &'a WriteTransaction,
}

impl RedbWrite<'_> {
    fn view(&self) -> RedbView<'_> {
        RedbView::Write(self.txn)
    }
}

impl ReadView for RedbWrite<'_> {
    fn revision(&self) -> Result<u64> {
        self.view().revision()
    }
    fn compact_revision(&self) -> Result<u64> {
        self.view().compact_revision()
    }
    fn session(&self, id: &str) -> Result<Option<Session>> {
        self.view().session(id)
    }
    fn children(&self, id: &str) -> Result<Vec<String>> {
        self.view().children(id)
    }
    fn sessions_after(&self, after: Option<&str>, limit: usize) -> Result<SessionPage> {
        self.view().sessions_after(after, limit)
    }
    fn plan(&self, session_id: &str) -> Result<Option<PlanRecord>> {
        self.view().plan(session_id)
    }
    fn history(
        &self,
        session_id: &str,
        from: u64,
        limit: usize,
        max_bytes: usize,
    ) -> Result<(Vec<HistoryEntry>, Option<u64>)> {
        self.view().history(session_id, from, limit, max_bytes)
    }
    fn todos(&self, agent_id: &str) -> Result<Option<TodoRecord>> {
        self.view().todos(agent_id)
    }
    fn all_todos(&self) -> Result<Vec<TodoRecord>> {
        self.view().all_todos()
    }
    fn revisions_from(&self, from: u64, limit: usize, max_bytes: usize) -> Result<Vec<Revision>> {
        self.view().revisions_from(from, limit, max_bytes)
    }
    fn revision_times(&self, from: u64, limit: usize) -> Result<Vec<(u64, Micros)>> {
        self.view().revision_times(from, limit)
    }
    fn agent_sessions(&self, agent_id: &str) -> Result<Vec<String>> {
        self.view().agent_sessions(agent_id)
    }
    fn principal(&self, id: &str) -> Result<Option<PrincipalRecord>> {
        self.view().principal(id)
    }
    fn principal_by_token(&self, token_sha256: &str) -> Result<Option<PrincipalRecord>> {
        self.view().principal_by_token(token_sha256)
    }
    fn principals_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<PrincipalRecord>> {
        self.view().principals_after(after, limit)
    }
}

impl WriteView for RedbWrite<'_> {
    fn put_session(&mut self, s: &Session) -> Result<()> {
        db(|| {
            self.txn
                .open_table(SESSIONS)?
                .insert(s.session_id.as_str(), encode(s)?.as_slice())?;
            Ok(())
        })
    }

    fn delete_session(&mut self, id: &str) -> Result<()> {
        db(|| {
            self.txn.open_table(SESSIONS)?.remove(id)?;
            Ok(())
        })
    }

    fn put_child(&mut self, parent: &str, child: &str) -> Result<()> {
        db(|| {
            self.txn.open_table(CHILDREN)?.insert((parent, child), ())?;
            Ok(())
        })
    }

    fn delete_child(&mut self, parent: &str, child: &str) -> Result<()> {
        db(|| {
            self.txn.open_table(CHILDREN)?.remove((parent, child))?;
            Ok(())
        })
    }

    fn put_plan(&mut self, p: &PlanRecord) -> Result<()> {
        db(|| {
            self.txn
                .open_table(PLANS)?
                .insert(p.session_id.as_str(), encode(p)?.as_slice())?;
            Ok(())
        })
    }

    fn delete_plan(&mut self, session_id: &str) -> Result<()> {
        db(|| {
            self.txn.open_table(PLANS)?.remove(session_id)?;
            Ok(())
        })
    }

    fn put_history(&mut self, session_id: &str, seq: u64, e: &HistoryEntry) -> Result<()> {
        db(|| {
            self.txn
                .open_table(HISTORY)?
                .insert((session_id, seq), encode(e)?.as_slice())?;
            Ok(())
        })
    }

    fn delete_history(&mut self, session_id: &str) -> Result<()> {
        db(|| {
            self.txn
                .open_table(HISTORY)?
                .retain_in((session_id, 0)..=(session_id, u64::MAX), |_, _| false)?;
            Ok(())
        })
    }

    fn put_todos(&mut self, t: &TodoRecord) -> Result<()> {
        db(|| {
            self.txn
                .open_table(TODOS)?
                .insert(t.agent_id.as_str(), encode(t)?.as_slice())?;
            Ok(())
        })
    }

    fn put_agent_session(&mut self, agent_id: &str, session_id: &str) -> Result<()> {
        db(|| {
            self.txn
                .open_table(AGENT_SESSIONS)?
                .insert((agent_id, session_id), ())?;
            Ok(())
        })
    }

    fn delete_agent_session(&mut self, agent_id: &str, session_id: &str) -> Result<()> {
        db(|| {
            self.txn
                .open_table(AGENT_SESSIONS)?
                .remove((agent_id, session_id))?;
            Ok(())
        })
    }

    fn put_principal(&mut self, p: &PrincipalRecord) -> Result<()> {
        db(|| {
            let id = p.principal.principal_id.as_str();
            let mut tokens = self.txn.open_table(TOKENS)?;
            // A rotation replaces the old hash: the old token stops working
            // in the same commit.
            if let Some(old) = self.txn.open_table(PRINCIPALS)?.get(id)? {
                let old: PrincipalRecord = decode(old.value())?;
                tokens.remove(old.token_sha256.as_str())?;
            }
            tokens.insert(p.token_sha256.as_str(), id)?;
            self.txn
                .open_table(PRINCIPALS)?
                .insert(id, encode(p)?.as_slice())?;
            Ok(())
        })
    }

    fn delete_principal(&mut self, p: &PrincipalRecord) -> Result<()> {
        db(|| {
            self.txn
                .open_table(TOKENS)?
                .remove(p.token_sha256.as_str())?;
            self.txn
                .open_table(PRINCIPALS)?
                .remove(p.principal.principal_id.as_str())?;
            Ok(())
        })
    }

    fn append_revision(&mut self, r: &Revision) -> Result<()> {
        db(|| {
            self.txn
                .open_table(EVENTS)?
                .insert(r.revision, encode(r)?.as_slice())?;
            self.txn
                .open_table(EVENT_TIMES)?
                .insert(r.revision, r.time)?;
            self.txn
                .open_table(META)?
                .insert(REVISION_KEY, r.revision)?;
            Ok(())
        })
    }

    fn compact_log(&mut self, upto: u64) -> Result<()> {
        db(|| {
            if upto <= self.compact_revision()? {
                return Ok(());
            }
            self.txn
                .open_table(EVENTS)?
                .retain_in(..=upto, |_, _| false)?;
            self.txn
                .open_table(EVENT_TIMES)?
                .retain_in(..=upto, |_, _| false)?;
            self.txn.open_table(META)?.insert(COMPACT_KEY, upto)?;
            Ok(())
        })
    }
}
