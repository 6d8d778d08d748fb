//! Reader threads: each drains the reads waiting and serves them from one
//! redb read transaction, so under load a reader wakes once per batch, not
//! once per read, and reads never wait for the writer.

use cairn_core::error::Error;
use redb::ReadableDatabase;

use crate::tables::{Db, RedbTxn};
use crate::{DbSlot, QueuedRead};
use cairn_store::health::guard;

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
                job(Err(err.clone()));
            }
            continue;
        };
        // Each job catches its own panics; a panic opening the transaction
        // fails this batch's reads and the thread carries on.
        match guard(|| db.begin_read().map_err(|e| Error::from(Db::from(e)))) {
            Ok(txn) => {
                let view = RedbTxn(&txn);
                for job in jobs.drain(..) {
                    job(Ok(&view));
                }
            }
            Err(err) => {
                for job in jobs.drain(..) {
                    job(Err(err.clone()));
                }
            }
        }
        drop(db);
        if stop {
            return;
        }
    }
}
