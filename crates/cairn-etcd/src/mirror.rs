//! The replica's copy of its deployment's keys, fed by one etcd watch on
//! the whole prefix: what every read and every mutation of this replica
//! runs on, so neither waits for etcd to read.
//!
//! The copy is a persistent ordered map: a snapshot is a cheap clone that
//! later changes never touch, so a read or a mutation sees one etcd
//! revision from start to end while the follower goes on applying. The
//! follower applies each watch message whole (etcd never splits a
//! revision across messages), then publishes the revision it reached:
//! the copy is always exactly etcd's state of the prefix at that revision.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use cairn_core::error::{Error, Result};
use cairn_store::records::Revision;
use imbl::OrdMap;
use tokio::sync::watch;

use crate::client::Client;
use crate::decode::logged;
use crate::keys::{Keys, prefix_end};
use crate::pb::etcdserverpb::RangeRequest;
use crate::pb::mvccpb::event::EventType;
use crate::pb::mvccpb::{Event, KeyValue};

/// Keys read per page while loading.
const PAGE: i64 = 1000;

/// The prefix's keys at one etcd revision.
#[derive(Clone, Default)]
pub struct Snap {
    /// The etcd revision this is the state at.
    pub revision: i64,
    pub kvs: OrdMap<Vec<u8>, Arc<KeyValue>>,
}

/// The watch-fed copy.
pub struct Mirror {
    snap: RwLock<Snap>,
    applied: watch::Sender<i64>,
}

impl Mirror {
    pub fn new(snap: Snap) -> Self {
        let (applied, _) = watch::channel(snap.revision);
        Mirror {
            snap: RwLock::new(snap),
            applied,
        }
    }

    /// The state now: a clone that later changes leave as it is.
    pub fn snapshot(&self) -> Snap {
        self.snap
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The etcd revision the copy has reached.
    pub fn applied(&self) -> i64 {
        *self.applied.borrow()
    }

    /// Waits until the copy has reached `revision`, at most `patience`.
    pub async fn reached(&self, revision: i64, patience: Duration) -> Result<()> {
        if self.applied() >= revision {
            return Ok(());
        }
        let mut rx = self.applied.subscribe();
        match tokio::time::timeout(patience, rx.wait_for(|r| *r >= revision)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err(Error::ShuttingDown),
            Err(_) => Err(Error::Unavailable(format!(
                "this replica's copy of etcd is at revision {}, not yet at {revision}, after {patience:?}",
                self.applied()
            ))),
        }
    }

    /// Applies one watch message's events, in order, and returns the Cairn
    /// revisions among them (versions of the log key) for the hub.
    pub fn apply(&self, events: Vec<Event>, log_key: &[u8]) -> Vec<Arc<Revision>> {
        let mut logged_revs = Vec::new();
        let mut last = 0;
        {
            let mut snap = self.snap.write().unwrap_or_else(PoisonError::into_inner);
            let held = snap.revision;
            for ev in events {
                let Some(kv) = ev.kv else { continue };
                last = last.max(kv.mod_revision);
                let delete = ev.r#type == EventType::Delete as i32;
                if !delete && kv.key == log_key {
                    match logged(&kv) {
                        Ok((r, _)) => logged_revs.push(Arc::new(r)),
                        Err(e) => {
                            tracing::error!(revision = kv.mod_revision, error = %e, "a logged revision does not decode; skipped");
                        }
                    }
                }
                if kv.mod_revision <= held {
                    // Already held (a message seen again after a reload).
                    continue;
                }
                if delete {
                    snap.kvs.remove(&kv.key);
                } else {
                    snap.kvs.insert(kv.key.clone(), Arc::new(kv));
                }
            }
            if last <= snap.revision {
                return logged_revs;
            }
            snap.revision = last;
        }
        self.applied.send_replace(last);
        logged_revs
    }

    /// Replaces the whole copy (after etcd compacted the history the watch
    /// needed to resume).
    pub fn replace(&self, fresh: Snap) {
        let revision = fresh.revision;
        *self.snap.write().unwrap_or_else(PoisonError::into_inner) = fresh;
        self.applied.send_replace(revision);
    }
}

/// Reads every key of the prefix at one revision, a page at a time.
pub async fn load(client: &Client, keys: &Keys) -> Result<Snap> {
    let start = keys.prefix().to_vec();
    let end = prefix_end(&start);
    let mut from = start;
    let mut snap = Snap::default();
    loop {
        let resp = client
            .range(RangeRequest {
                key: from.clone(),
                range_end: end.clone(),
                limit: PAGE,
                revision: snap.revision,
                // Pinned to a revision a linearizable read returned: any
                // member that applied it answers the same.
                serializable: snap.revision > 0,
                ..RangeRequest::default()
            })
            .await?;
        if snap.revision == 0 {
            snap.revision = resp.header.as_ref().map_or(0, |h| h.revision);
        }
        let Some(last) = resp.kvs.last().map(|kv| kv.key.clone()) else {
            return Ok(snap);
        };
        for kv in resp.kvs {
            snap.kvs.insert(kv.key.clone(), Arc::new(kv));
        }
        if !resp.more {
            return Ok(snap);
        }
        from = last;
        from.push(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str, value: &str, revision: i64) -> Event {
        Event {
            r#type: EventType::Put as i32,
            kv: Some(KeyValue {
                key: key.as_bytes().to_vec(),
                value: value.as_bytes().to_vec(),
                mod_revision: revision,
                ..KeyValue::default()
            }),
            prev_kv: None,
        }
    }

    fn value(m: &Mirror, key: &str) -> Option<(String, i64)> {
        m.snapshot().kvs.get(key.as_bytes()).map(|kv| {
            (
                String::from_utf8_lossy(&kv.value).into_owned(),
                kv.mod_revision,
            )
        })
    }

    #[test]
    fn a_snapshot_never_changes_under_its_reader() {
        let m = Mirror::new(Snap::default());
        m.apply(vec![put("a", "1", 2)], b"log");
        let before = m.snapshot();
        m.apply(vec![put("a", "2", 3)], b"log");
        assert_eq!(before.revision, 2);
        assert_eq!(&before.kvs.get(b"a".as_slice()).unwrap().value, b"1");
        assert_eq!(value(&m, "a"), Some(("2".into(), 3)));
    }
}
