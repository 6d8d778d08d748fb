//! The watch hub: fan-out of committed revisions to the watchers they
//! concern.
//!
//! ```text
//!  writer ── commit ──▶ Hub::dispatch(revisions)
//!                         │ index: tree root / session / agent / all
//!                         │ try_send to the few watchers each event concerns
//!                         ▼
//!        per-watcher buffer (bounded) ──▶ Subscription (a watch stream)
//!                         ▲ full? the hub stops sending and flags it; the
//!                         │ stream reads the log from its own position,
//!                         │ then resyncs with the hub
//! ```
//!
//! The hub belongs to the store because the writer feeds it, and only with
//! committed revisions: everything it has dispatched is in the log. It is
//! indexed by target, so a revision costs a few hash lookups and wakes only
//! the watchers it concerns, whether 10 or 10,000 streams are open. It
//! never blocks: a watcher that cannot keep up is flagged and stops
//! receiving until it [resyncs](Subscription::resync).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TryRecvError;

use crate::cache::PlanCache;
use crate::records::{Event, EventKind, Revision};

/// What a watch follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Topic {
    /// One session: its record and plan.
    Session(String),
    /// A session and every session below it, decided at each event's
    /// revision (sessions created or moved in later count).
    Tree(String),
    /// One agent: its todo list and the sessions it works in.
    Agent(String),
    /// Several sessions (for `Wait`).
    Sessions(BTreeSet<String>),
    /// Several session trees (a principal's roots, on the dashboard).
    Trees(BTreeSet<String>),
    /// Everything watchers may see.
    All,
    /// Principal changes, which only servers follow (to forget tokens).
    Principals,
    /// Items starting and ending a wait for approval, in every tree (the
    /// caller's rights decide which it sees).
    Inbox,
}

impl Topic {
    /// Whether `event` belongs to this target.
    pub fn matches(&self, event: &Event) -> bool {
        // Inbox events are for inbox watchers only: the plan event of the
        // same revision tells everyone else.
        if event.kind.is_inbox() != matches!(self, Topic::Inbox) {
            return false;
        }
        match self {
            Topic::Session(id) => event.session_id == *id,
            Topic::Tree(root) => event.in_tree(root),
            Topic::Agent(agent) => {
                event.kind != EventKind::PrincipalChanged
                    && (event.agent_id == *agent
                        || (!event.session_id.is_empty() && event.previous_agent_id == *agent))
            }
            Topic::Sessions(ids) => ids.contains(&event.session_id),
            Topic::Trees(roots) => roots.iter().any(|r| event.in_tree(r)),
            Topic::All => event.kind != EventKind::PrincipalChanged,
            Topic::Principals => event.kind == EventKind::PrincipalChanged,
            Topic::Inbox => true,
        }
    }

    /// The target's kind, a bounded metrics label (never an id).
    pub fn kind(&self) -> &'static str {
        match self {
            Topic::Session(_) => "session",
            Topic::Tree(_) => "tree",
            Topic::Agent(_) => "agent",
            Topic::Sessions(_) => "sessions",
            Topic::Trees(_) => "trees",
            Topic::All => "all",
            Topic::Principals => "principals",
            Topic::Inbox => "inbox",
        }
    }

    /// The hub index keys this target is filed under.
    fn keys(&self) -> Vec<Key> {
        match self {
            Topic::Session(id) => vec![Key::Session(id.clone())],
            Topic::Tree(root) => vec![Key::Tree(root.clone())],
            Topic::Agent(agent) => vec![Key::Agent(agent.clone())],
            Topic::Sessions(ids) => ids.iter().cloned().map(Key::Session).collect(),
            Topic::Trees(roots) => roots.iter().cloned().map(Key::Tree).collect(),
            Topic::All => vec![Key::All],
            Topic::Principals => vec![Key::Principals],
            Topic::Inbox => vec![Key::Inbox],
        }
    }
}

/// Where the hub files a watcher.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Key {
    Session(String),
    Tree(String),
    Agent(String),
    All,
    Principals,
    Inbox,
}

/// One registered watcher, as the hub sees it.
#[derive(Debug)]
struct Slot {
    id: u64,
    tx: mpsc::Sender<Arc<Revision>>,
    /// Set by the hub (under its lock) when the buffer was full; from then
    /// on the hub sends this watcher nothing until it resyncs.
    overflowed: AtomicBool,
    /// The last revision the hub considered this watcher for, so that a
    /// watcher filed under several keys of one revision gets it once,
    /// without a scan over the others.
    last_revision: AtomicU64,
}

/// Watchers by what they follow. One map per kind, keyed by plain ids, so
/// dispatch looks events up by `&str` without building keys.
#[derive(Debug, Default)]
struct Registry {
    next_id: u64,
    sessions: HashMap<String, Vec<Arc<Slot>>>,
    trees: HashMap<String, Vec<Arc<Slot>>>,
    agents: HashMap<String, Vec<Arc<Slot>>>,
    all: Vec<Arc<Slot>>,
    principals: Vec<Arc<Slot>>,
    inbox: Vec<Arc<Slot>>,
}

impl Registry {
    /// The list a key files into.
    fn list_mut(&mut self, key: &Key) -> &mut Vec<Arc<Slot>> {
        match key {
            Key::Session(id) => self.sessions.entry(id.clone()).or_default(),
            Key::Tree(id) => self.trees.entry(id.clone()).or_default(),
            Key::Agent(id) => self.agents.entry(id.clone()).or_default(),
            Key::All => &mut self.all,
            Key::Principals => &mut self.principals,
            Key::Inbox => &mut self.inbox,
        }
    }

    fn remove(&mut self, key: &Key, slot_id: u64) {
        let (map, id) = match key {
            Key::Session(id) => (&mut self.sessions, id),
            Key::Tree(id) => (&mut self.trees, id),
            Key::Agent(id) => (&mut self.agents, id),
            Key::All => {
                self.all.retain(|s| s.id != slot_id);
                return;
            }
            Key::Principals => {
                self.principals.retain(|s| s.id != slot_id);
                return;
            }
            Key::Inbox => {
                self.inbox.retain(|s| s.id != slot_id);
                return;
            }
        };
        if let Some(list) = map.get_mut(id) {
            list.retain(|s| s.id != slot_id);
            if list.is_empty() {
                map.remove(id);
            }
        }
    }
}

/// Fans committed revisions out to the watchers they concern.
#[derive(Debug)]
pub struct Hub {
    registry: Mutex<Registry>,
    /// Last revision fully dispatched; stored inside the lock, after the
    /// sends, so a reader that loads it and then finds its buffer empty
    /// has received everything up to it.
    dispatched: AtomicU64,
    buffer: usize,
    /// Flips to true when the server shuts down, so streams end instead of
    /// holding graceful shutdown open forever.
    closing: tokio::sync::watch::Sender<bool>,
    /// The hot plans, which follow the same committed revisions.
    plans: PlanCache,
    /// The leases, which follow them too.
    leases: crate::lessor::Lessor,
    /// The approval deadlines, which follow the inbox events.
    deadlines: crate::deadlines::Deadlines,
}

impl Hub {
    /// A hub whose watchers start after `revision`, each buffering up to
    /// `buffer` revisions, with a hot-plan cache of `cache_bytes`.
    pub fn new(revision: u64, buffer: usize, cache_bytes: u64) -> Self {
        Hub {
            registry: Mutex::new(Registry::default()),
            dispatched: AtomicU64::new(revision),
            buffer: buffer.max(1),
            closing: tokio::sync::watch::Sender::new(false),
            plans: PlanCache::new(cache_bytes, revision),
            leases: crate::lessor::Lessor::default(),
            deadlines: crate::deadlines::Deadlines::default(),
        }
    }

    /// The hot plans.
    pub fn plans(&self) -> &PlanCache {
        &self.plans
    }

    /// The leases this server follows.
    pub fn leases(&self) -> &crate::lessor::Lessor {
        &self.leases
    }

    /// The approval deadlines this server applies.
    pub fn deadlines(&self) -> &crate::deadlines::Deadlines {
        &self.deadlines
    }

    /// Ends every watch stream and `Wait` (with `UNAVAILABLE`), now and
    /// from now on: the server is shutting down.
    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    /// Whether [`Hub::close`] was called.
    pub fn is_closed(&self) -> bool {
        *self.closing.borrow()
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Last revision fully dispatched.
    pub fn dispatched(&self) -> u64 {
        self.dispatched.load(Ordering::Acquire)
    }

    /// Registers a watcher. Revisions after the returned one arrive through
    /// the subscription; earlier ones are in the log.
    pub fn subscribe(self: &Arc<Self>, target: &Topic) -> (Subscription, u64) {
        let (tx, rx) = mpsc::channel(self.buffer);
        let mut reg = self.lock();
        reg.next_id += 1;
        let slot = Arc::new(Slot {
            id: reg.next_id,
            tx,
            overflowed: AtomicBool::new(false),
            last_revision: AtomicU64::new(0),
        });
        let keys = target.keys();
        for key in &keys {
            reg.list_mut(key).push(Arc::clone(&slot));
        }
        let kind = target.kind();
        crate::telemetry::watch_opened(kind);
        let at = self.dispatched();
        drop(reg);
        (
            Subscription {
                hub: Arc::clone(self),
                slot,
                keys,
                kind,
                rx,
                closing: self.closing.subscribe(),
            },
            at,
        )
    }

    /// Called by the writer after each commit, with its revisions in order.
    /// Never blocks on a watcher. The hot plans are brought up to date
    /// first, so a watcher that reads after an event reads at least it.
    pub fn dispatch(&self, revisions: &[Arc<Revision>]) {
        self.plans.apply(revisions);
        self.leases.observe(revisions);
        self.deadlines.observe(revisions);
        let reg = self.lock();
        let mut lists: Vec<&Vec<Arc<Slot>>> = Vec::new();
        for rev in revisions {
            lists.clear();
            let mut visible = false;
            for e in &rev.events {
                if e.kind == EventKind::PrincipalChanged {
                    lists.push(&reg.principals);
                    continue;
                }
                if e.kind.is_inbox() {
                    lists.push(&reg.inbox);
                    continue;
                }
                visible = true;
                lists.extend(reg.agents.get(e.agent_id.as_str()));
                if e.session_id.is_empty() {
                    continue;
                }
                if !e.previous_agent_id.is_empty() {
                    lists.extend(reg.agents.get(e.previous_agent_id.as_str()));
                }
                lists.extend(reg.sessions.get(e.session_id.as_str()));
                lists.extend(reg.trees.get(e.session_id.as_str()));
                for a in e.ancestors.iter().chain(&e.previous_ancestors) {
                    lists.extend(reg.trees.get(a.as_str()));
                }
            }
            if visible {
                lists.push(&reg.all);
            }
            for slot in lists.iter().copied().flatten() {
                // Once per watcher per revision, however many keys matched.
                if slot.last_revision.swap(rev.revision, Ordering::Relaxed) == rev.revision
                    || slot.overflowed.load(Ordering::Relaxed)
                {
                    continue;
                }
                if let Err(mpsc::error::TrySendError::Full(_)) = slot.tx.try_send(Arc::clone(rev)) {
                    slot.overflowed.store(true, Ordering::Release);
                }
            }
            self.dispatched.store(rev.revision, Ordering::Release);
        }
    }

    /// Clears a watcher's overflow and returns the revision from which the
    /// hub sends it revisions again (exclusive): everything up to it is in
    /// the log.
    fn resync(&self, slot: &Slot) -> u64 {
        let _reg = self.lock();
        slot.overflowed.store(false, Ordering::Release);
        self.dispatched()
    }

    fn unsubscribe(&self, slot: &Slot, keys: &[Key]) {
        let mut reg = self.lock();
        for key in keys {
            reg.remove(key, slot.id);
        }
    }
}

/// A watcher's registration; unregisters on drop (client gone).
#[derive(Debug)]
pub struct Subscription {
    hub: Arc<Hub>,
    slot: Arc<Slot>,
    keys: Vec<Key>,
    /// The target's kind, for the open-streams gauge.
    kind: &'static str,
    rx: mpsc::Receiver<Arc<Revision>>,
    closing: tokio::sync::watch::Receiver<bool>,
}

/// What a subscription's buffer holds now.
#[derive(Debug)]
pub enum Next {
    /// The next buffered revision.
    Revision(Arc<Revision>),
    /// Nothing buffered.
    Empty,
    /// The hub is gone.
    Closed,
}

impl Subscription {
    /// Takes the next buffered revision without waiting.
    pub fn try_next(&mut self) -> Next {
        match self.rx.try_recv() {
            Ok(rev) => Next::Revision(rev),
            Err(TryRecvError::Empty) => Next::Empty,
            Err(TryRecvError::Disconnected) => Next::Closed,
        }
    }

    /// Waits for the next revision; `None` once the server is shutting
    /// down (or the hub is gone).
    pub async fn next(&mut self) -> Option<Arc<Revision>> {
        tokio::select! {
            _ = self.closing.wait_for(|closing| *closing) => None,
            received = self.rx.recv() => received,
        }
    }

    /// Whether the buffer is empty now.
    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }

    /// Whether the hub stopped sending because the buffer was full: what
    /// it kept back is in the log, up to [`Subscription::resync`].
    pub fn overflowed(&self) -> bool {
        self.slot.overflowed.load(Ordering::Acquire)
    }

    /// Clears the overflow and returns the revision from which the hub
    /// sends again (exclusive): everything up to it is in the log.
    pub fn resync(&self) -> u64 {
        crate::telemetry::resync();
        self.hub.resync(&self.slot)
    }

    /// Last revision the hub has fully dispatched.
    pub fn dispatched(&self) -> u64 {
        self.hub.dispatched()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        crate::telemetry::watch_closed(self.kind);
        self.hub.unsubscribe(&self.slot, &self.keys);
    }
}
