//! Reader threads: each drains the reads waiting and serves them from one
//! redb read transaction, so under load a reader wakes once per batch, not
//! once per read, and reads never wait for the writer.

use cairn_core::Micros;
use cairn_core::error::{Error, Result};
use redb::ReadableDatabase;

use crate::tables::{Db, RedbTxn};
use crate::{DbSlot, QueuedRead};
use cairn_store::health::guard;
use cairn_store::records::{self, Revision};
use cairn_store::seam::ReadTxn;

/// Most reads one reader thread serves from one read transaction.
const READ_BATCH: usize = 64;

/// Serves reads until told to stop.
pub(super) fn run(slot: &DbSlot, rx: &crossbeam_channel::Receiver<QueuedRead>) {
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
        match guard(|| db.begin_read().map_err(|e| Error::from(Db::from(e)))) {
            Ok(txn) => {
                let view = RedbTxn(&txn);
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
        impl ReadTxn for FailedView {
            $(fn $name(&self, $(_: $arg),*) -> Result<$ret> { Err(self.0.clone()) })*
        }
    };
}

failed_view! {
    revision() -> u64;
    compact_revision() -> u64;
    session(&str) -> Option<cairn_core::session::Session>;
    children(&str) -> Vec<String>;
    sessions_after(Option<&str>, usize) -> records::SessionPage;
    leased() -> Vec<String>;
    awaiting_after(Option<&cairn_core::inbox::Awaiting>, usize) -> Vec<cairn_core::inbox::Awaiting>;
    plan(&str) -> Option<records::PlanRecord>;
    history(&str, u64, usize, usize) -> (Vec<cairn_core::plan_mode::HistoryEntry>, Option<u64>);
    todos(&str) -> Option<records::TodoRecord>;
    todos_after(Option<&str>, usize) -> Vec<records::TodoRecord>;
    revisions_from(u64, usize, usize) -> Vec<Revision>;
    revision_times(u64, usize) -> Vec<(u64, Micros)>;
    agent_sessions(&str) -> Vec<String>;
    aux(&str, &str) -> Option<Vec<u8>>;
    aux_after(&str, Option<&str>, usize) -> Vec<(String, Vec<u8>)>;
    principal(&str) -> Option<records::PrincipalRecord>;
    principal_by_token(&str) -> Option<records::PrincipalRecord>;
    principals_after(Option<&str>, usize) -> Vec<records::PrincipalRecord>;
}
