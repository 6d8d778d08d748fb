//! Approval deadlines through the store: which waiting items have a
//! deadline that acts, and the driver that applies each as it passes.
//!
//! ```text
//!  Hub::dispatch ─▶ Deadlines::observe (inbox events: added, escalated, gone)
//!  start: Store::load_deadlines (every waiting item's deadline, from the index)
//!  driver: sleep until Deadlines::next_due ─▶ Deadlines::due ─▶
//!          PlanCommand::Deadline (applied only while the item still waits
//!          with that deadline: of several servers, one applies it)
//! ```
//!
//! The index lives in memory and is rebuilt at start from the store, so a
//! deadline that passed while the server was down is applied at once.
//! Every server of an etcd cluster follows every deadline; the command's
//! check on the deadline makes each passing one revision.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use cairn_core::Micros;
use cairn_core::access::Caller;
use cairn_core::command::{Command, PlanCommand, PlanWrite};
use cairn_core::error::{Error, Result};
use cairn_core::inbox::Awaiting;

use crate::clock::now_micros;
use crate::records::{EventKind, EventObject, Revision};
use crate::store::Store;

/// Deadline commands in flight at once.
const IN_FLIGHT: usize = 64;
/// The longest the driver sleeps without looking.
const IDLE_TICK: Duration = Duration::from_secs(1);
/// How long after a failed attempt (the store unavailable) it is tried again.
const RETRY_MICROS: Micros = 1_000_000;
/// Waiting items read at once while loading.
const BATCH: usize = 256;

#[derive(Debug, Default)]
struct Index {
    /// When to act, and on what.
    queue: BTreeSet<(Micros, Awaiting)>,
    /// Each item's deadline and when it is queued.
    items: HashMap<Awaiting, (Micros, Micros)>,
}

impl Index {
    fn set(&mut self, key: Awaiting, at: Micros) {
        self.remove(&key);
        self.queue.insert((at, key.clone()));
        self.items.insert(key, (at, at));
    }

    fn remove(&mut self, key: &Awaiting) {
        if let Some((_, when)) = self.items.remove(key) {
            self.queue.remove(&(when, key.clone()));
        }
    }
}

/// The deadlines that act, of every waiting item this server knows of.
#[derive(Debug, Default)]
pub struct Deadlines {
    index: Mutex<Index>,
    wake: tokio::sync::Notify,
}

/// One deadline due: the item and the deadline that passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    pub key: Awaiting,
    pub at: Micros,
}

impl Deadlines {
    fn lock(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Follows committed revisions: an item added (or escalated) with a
    /// deadline that acts is queued at it; any other is dropped.
    pub fn observe(&self, revisions: &[Arc<Revision>]) {
        let mut earlier = false;
        {
            let mut index = self.lock();
            let first = index.queue.first().map(|(when, _)| *when);
            for e in revisions.iter().flat_map(|r| &r.events) {
                let EventObject::Inbox(item) = &e.object else {
                    continue;
                };
                match &item.deadline {
                    Some(d) if e.kind == EventKind::InboxAdded && d.acts() => {
                        index.set(item.key.clone(), d.at);
                        earlier |= first.is_none_or(|f| d.at < f);
                    }
                    _ => index.remove(&item.key),
                }
            }
        }
        if earlier {
            self.wake.notify_one();
        }
    }

    /// Queues deadlines read from the store (at start).
    pub fn load(&self, found: impl IntoIterator<Item = Due>) {
        let mut index = self.lock();
        for d in found {
            index.set(d.key, d.at);
        }
        drop(index);
        self.wake.notify_one();
    }

    /// Takes the deadlines due by `now` out of the queue.
    pub fn due(&self, now: Micros) -> Vec<Due> {
        let mut index = self.lock();
        let mut out = Vec::new();
        while let Some((when, _)) = index.queue.first()
            && *when <= now
        {
            let Some((_, key)) = index.queue.pop_first() else {
                break;
            };
            if let Some((at, _)) = index.items.remove(&key) {
                out.push(Due { key, at });
            }
        }
        out
    }

    /// Queues a deadline again after a failed attempt, unless the item
    /// changed meanwhile.
    fn retry(&self, d: Due, when: Micros) {
        let mut index = self.lock();
        if index.items.contains_key(&d.key) {
            return;
        }
        index.queue.insert((when, d.key.clone()));
        index.items.insert(d.key, (d.at, when));
    }

    /// When the next deadline falls due.
    pub fn next_due(&self) -> Option<Micros> {
        self.lock().queue.first().map(|(when, _)| *when)
    }

    /// Deadlines queued.
    pub fn len(&self) -> usize {
        self.lock().items.len()
    }

    /// Whether none is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Store {
    /// Reads the deadline of every waiting item (from the index of them)
    /// and queues those that act; one passed already is due at once.
    pub async fn load_deadlines(&self) -> Result<usize> {
        let found = self
            .read(|v| {
                let mut out = Vec::new();
                let mut cursor: Option<Awaiting> = None;
                loop {
                    let keys = v.awaiting_after(cursor.as_ref(), BATCH)?;
                    let exhausted = keys.len() < BATCH;
                    for key in keys {
                        cursor = Some(key.clone());
                        let Some(record) = v.plan(&key.session_id)? else {
                            continue;
                        };
                        if let Some(d) = record.plan.mode.deadline_of(key.item)
                            && d.acts()
                        {
                            out.push(Due { at: d.at, key });
                        }
                    }
                    if exhausted {
                        return Ok(out);
                    }
                }
            })
            .await?;
        let n = found.len();
        self.hub().deadlines().load(found);
        Ok(n)
    }

    /// Applies each deadline as it passes, until the store closes.
    pub async fn drive_deadlines(self) {
        let deadlines = self.hub().deadlines();
        let mut flight = tokio::task::JoinSet::new();
        loop {
            let now = now_micros();
            let sleep = match deadlines.next_due() {
                Some(due) => Duration::from_micros(u64::try_from(due - now).unwrap_or(0)),
                None => IDLE_TICK,
            }
            .min(IDLE_TICK);
            if !sleep.is_zero() {
                tokio::select! {
                    () = tokio::time::sleep(sleep) => {}
                    () = deadlines.wake.notified() => {}
                }
            }
            if self.hub().is_closed() {
                return;
            }
            for d in deadlines.due(now_micros()) {
                while flight.len() >= IN_FLIGHT {
                    flight.join_next().await;
                }
                let store = self.clone();
                flight.spawn(async move { store.pass(d).await });
            }
            while flight.try_join_next().is_some() {}
        }
    }

    async fn pass(&self, d: Due) {
        let command = Command::Plan(PlanWrite {
            session_id: d.key.session_id.clone(),
            expected_revision: None,
            command: PlanCommand::Deadline {
                item: d.key.item,
                at: d.at,
            },
        });
        match self.apply(&Caller::Open, command, 64).await {
            Ok((_, rev)) => {
                tracing::info!(
                    session_id = d.key.session_id,
                    item = d.key.item.key(),
                    rev,
                    "approval deadline applied"
                );
            }
            // Decided, applied by another server, or gone: nothing to do.
            Err(
                Error::DeadlineMoved
                | Error::NoPendingPlan
                | Error::NoActivePlan
                | Error::ModificationNotFound(_)
                | Error::SessionNotFound(_),
            ) => {}
            Err(e) => {
                tracing::warn!(session_id = d.key.session_id, error = %e, "approval deadline not applied yet");
                self.hub()
                    .deadlines()
                    .retry(d, now_micros().saturating_add(RETRY_MICROS));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_core::inbox::Awaited;

    fn key(s: &str) -> Awaiting {
        Awaiting {
            since: 1,
            session_id: s.into(),
            item: Awaited::Plan,
        }
    }

    #[test]
    fn due_takes_only_what_passed_and_retry_yields_to_news() {
        let d = Deadlines::default();
        d.load([
            Due {
                key: key("a"),
                at: 10,
            },
            Due {
                key: key("b"),
                at: 20,
            },
        ]);
        assert_eq!(d.next_due(), Some(10));
        assert_eq!(
            d.due(15),
            vec![Due {
                key: key("a"),
                at: 10
            }]
        );
        assert_eq!(d.len(), 1);
        d.retry(
            Due {
                key: key("a"),
                at: 10,
            },
            30,
        );
        assert_eq!(
            d.due(25),
            vec![Due {
                key: key("b"),
                at: 20
            }]
        );
        // A retry queued later keeps the deadline it is for.
        assert_eq!(
            d.due(30),
            vec![Due {
                key: key("a"),
                at: 10
            }]
        );
        d.load([Due {
            key: key("c"),
            at: 40,
        }]);
        // An item re-queued meanwhile (escalated) wins over a stale retry.
        d.retry(
            Due {
                key: key("c"),
                at: 5,
            },
            50,
        );
        assert_eq!(
            d.due(100),
            vec![Due {
                key: key("c"),
                at: 40
            }]
        );
        assert!(d.is_empty());
    }
}
