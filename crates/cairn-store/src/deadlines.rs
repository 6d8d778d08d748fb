//! The approval deadlines a server follows: which waiting items have a
//! deadline that acts, queued by when it passes. The driver that applies
//! them is in [`crate::approvals`].
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

use cairn_core::Micros;
use cairn_core::inbox::Awaiting;

use crate::records::{EventKind, EventObject, Revision};

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
    pub(crate) wake: tokio::sync::Notify,
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
    pub fn retry(&self, d: Due, when: Micros) {
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
