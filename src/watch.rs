//! Live progress: fan-out of committed revisions to watchers, catch-up from
//! the event log, and `Wait`.
//!
//! ```text
//!  writer thread ── commit ──▶ Hub::dispatch(revisions)
//!                                │ index: tree root / session / agent / all
//!                                │ try_send to the few watchers each event concerns
//!                                ▼
//!          per-watcher buffer (bounded) ──▶ watch stream ──▶ gRPC
//!                                ▲ full? the hub stops sending and flags it;
//!                                │ the stream reads the log from its own
//!                                │ position, then resyncs with the hub
//! ```
//!
//! The hub is indexed by target, so a revision costs a few hash lookups and
//! wakes only the watchers it concerns, whether 10 or 10,000 streams are
//! open. It never blocks: a watcher that cannot keep up is flagged and
//! stops receiving; the stream then reads the log from the revision it owes
//! its client (`next`), asks the hub, under the hub's lock, which revision
//! it has dispatched (`D`), replays the log up to `D`, and takes live
//! revisions after `D` from its buffer again. Everything up to `D` is in the
//! log because the hub dispatches only committed revisions. So events arrive
//! in revision order, none twice, none missing, a revision's events
//! together, and a watcher too far behind ends with `REVISION_COMPACTED`.
//! Read transactions are opened per catch-up chunk, never held for the life
//! of a stream.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TryRecvError;
use tokio_stream::Stream;

use crate::domain::session::Session;
use crate::error::{Error, Result};
use crate::store::records::{Event, EventKind, PlanRecord, Revision};
use crate::store::{ReadView, Store, ops};

/// Revisions read from the log per catch-up step.
const CATCH_UP_CHUNK: usize = 256;
/// Bytes of log records read per catch-up step (at least one revision):
/// what a lagging watcher holds beyond its buffer, whatever its backlog.
const CATCH_UP_BYTES: usize = 1 << 20;

/// What a watch follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One session: its record and plan.
    Session(String),
    /// A session and every session below it, decided at each event's
    /// revision (sessions created or moved in later count).
    Tree(String),
    /// One agent's todo list.
    Agent(String),
    /// Several sessions (for `Wait`).
    Sessions(BTreeSet<String>),
    /// Everything.
    All,
}

impl Target {
    /// Whether `event` belongs to this target.
    pub fn matches(&self, event: &Event) -> bool {
        match self {
            Target::Session(id) => event.session_id == *id,
            Target::Tree(root) => event.in_tree(root),
            Target::Agent(agent) => {
                matches!(
                    event.kind,
                    EventKind::TodosUpdated | EventKind::TodosCleared
                ) && event.agent_id == *agent
            }
            Target::Sessions(ids) => ids.contains(&event.session_id),
            Target::All => true,
        }
    }

    /// The hub index keys this target is filed under.
    fn keys(&self) -> Vec<Key> {
        match self {
            Target::Session(id) => vec![Key::Session(id.clone())],
            Target::Tree(root) => vec![Key::Tree(root.clone())],
            Target::Agent(agent) => vec![Key::Agent(agent.clone())],
            Target::Sessions(ids) => ids.iter().cloned().map(Key::Session).collect(),
            Target::All => vec![Key::All],
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
}

/// One registered watcher, as the hub sees it.
#[derive(Debug)]
struct Slot {
    id: u64,
    tx: mpsc::Sender<Arc<Revision>>,
    /// Set by the hub (under its lock) when the buffer was full; from then
    /// on the hub sends this watcher nothing until it resyncs.
    overflowed: AtomicBool,
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
}

impl Registry {
    /// The list a key files into.
    fn list_mut(&mut self, key: &Key) -> &mut Vec<Arc<Slot>> {
        match key {
            Key::Session(id) => self.sessions.entry(id.clone()).or_default(),
            Key::Tree(id) => self.trees.entry(id.clone()).or_default(),
            Key::Agent(id) => self.agents.entry(id.clone()).or_default(),
            Key::All => &mut self.all,
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
}

impl Hub {
    /// A hub whose watchers start after `revision`, each buffering up to
    /// `buffer` revisions.
    pub fn new(revision: u64, buffer: usize) -> Self {
        Hub {
            registry: Mutex::new(Registry::default()),
            dispatched: AtomicU64::new(revision),
            buffer: buffer.max(1),
            closing: tokio::sync::watch::Sender::new(false),
        }
    }

    /// Ends every watch stream and `Wait` (with `UNAVAILABLE`), now and
    /// from now on: the server is shutting down.
    pub fn close(&self) {
        self.closing.send_replace(true);
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
    pub fn subscribe(self: &Arc<Self>, target: &Target) -> (Subscription, u64) {
        let (tx, rx) = mpsc::channel(self.buffer);
        let mut reg = self.lock();
        reg.next_id += 1;
        let slot = Arc::new(Slot {
            id: reg.next_id,
            tx,
            overflowed: AtomicBool::new(false),
        });
        let keys = target.keys();
        for key in &keys {
            reg.list_mut(key).push(Arc::clone(&slot));
        }
        let at = self.dispatched();
        drop(reg);
        (
            Subscription {
                hub: Arc::clone(self),
                slot,
                keys,
                rx,
                closing: self.closing.subscribe(),
            },
            at,
        )
    }

    /// Called by the writer after each commit, with its revisions in order.
    /// Never blocks on a watcher.
    pub fn dispatch(&self, revisions: &[Arc<Revision>]) {
        let reg = self.lock();
        let mut hits: Vec<&Arc<Slot>> = Vec::new();
        for rev in revisions {
            hits.clear();
            let mut lists: Vec<&Vec<Arc<Slot>>> = vec![&reg.all];
            for e in &rev.events {
                if e.session_id.is_empty() {
                    lists.extend(reg.agents.get(e.agent_id.as_str()));
                    continue;
                }
                lists.extend(reg.sessions.get(e.session_id.as_str()));
                lists.extend(reg.trees.get(e.session_id.as_str()));
                for a in e.ancestors.iter().chain(&e.previous_ancestors) {
                    lists.extend(reg.trees.get(a.as_str()));
                }
            }
            for s in lists.into_iter().flatten() {
                if !hits.iter().any(|h| h.id == s.id) {
                    hits.push(s);
                }
            }
            for slot in &hits {
                if slot.overflowed.load(Ordering::Relaxed) {
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
    rx: mpsc::Receiver<Arc<Revision>>,
    closing: tokio::sync::watch::Receiver<bool>,
}

/// Completes once the server is shutting down.
async fn closed(closing: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = closing.wait_for(|closing| *closing).await;
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.unsubscribe(&self.slot, &self.keys);
    }
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Only changes committed after the call.
    Now,
    /// Replay from this revision (inclusive), then live.
    From(u64),
    /// The current state of every object, `Synced`, then changes.
    Snapshot,
}

/// One message of a watch stream.
// Events dominate a stream and go straight to the wire; boxing them would
// add an allocation per event to save bytes on rare heartbeats.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// An event. Before `Synced`, an object of the snapshot (its revision
    /// is the object's own).
    Event(Delivered),
    /// The snapshot is complete as of this revision.
    Synced(u64),
    /// Heartbeat: everything up to this revision has been delivered.
    Progress(u64),
}

/// An event as a stream delivers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// Revision of the event (or, in a snapshot, of the object).
    pub revision: u64,
    /// The event.
    pub event: Event,
    /// Position among this revision's events on this stream.
    pub index: u32,
    /// Number of this revision's events on this stream.
    pub count: u32,
}

impl Delivered {
    fn single(revision: u64, event: Event) -> Item {
        Item::Event(Delivered {
            revision,
            event,
            index: 0,
            count: 1,
        })
    }
}

/// The events of `rev` that `target` wants, numbered within the revision.
fn select(target: &Target, revision: u64, events: &[Event]) -> Vec<Item> {
    let matching: Vec<&Event> = events.iter().filter(|e| target.matches(e)).collect();
    let count = u32::try_from(matching.len()).unwrap_or(u32::MAX);
    matching
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            Item::Event(Delivered {
                revision,
                event: e.clone(),
                index: u32::try_from(i).unwrap_or(u32::MAX),
                count,
            })
        })
        .collect()
}

/// Checks `start` against the log up front, so a compacted revision (or
/// one after the next) fails the call itself rather than its first message.
pub async fn check_start(store: &Store, start: Start) -> Result<()> {
    if let Start::From(requested) = start {
        store
            .read(move |v| {
                ensure_retained(v, requested)?;
                let next = v.revision()?.saturating_add(1);
                if requested > next {
                    return Err(Error::RevisionNotYet { requested, next });
                }
                Ok(())
            })
            .await?;
    }
    Ok(())
}

fn ensure_retained(v: &dyn ReadView, requested: u64) -> Result<()> {
    let compact_revision = v.compact_revision()?;
    if requested <= compact_revision {
        return Err(Error::RevisionCompacted {
            requested,
            compact_revision,
            current_revision: v.revision()?,
        });
    }
    Ok(())
}

/// Reads one bounded chunk of the log from `next` (through `upto` at most)
/// and returns the items for `target`, with `next` moved past what was
/// read. The stream yields a chunk's items before reading the next, so a
/// lagging watcher holds one chunk, whatever its backlog.
async fn read_chunk(
    store: &Store,
    target: &Target,
    next: &mut u64,
    upto: u64,
) -> Result<Vec<Item>> {
    let from = *next;
    let revs = store
        .read(move |v| {
            ensure_retained(v, from)?;
            v.revisions_from(from, CATCH_UP_CHUNK, CATCH_UP_BYTES)
        })
        .await?;
    if revs.first().is_none_or(|r| r.revision != from) {
        // The log holds every dispatched revision it has not compacted;
        // anything else is corruption, not a gap to skip.
        return Err(Error::DataLoss {
            file: store.path().display().to_string(),
            detail: format!("the event log has no revision {from}"),
        });
    }
    let mut items = Vec::new();
    for rev in revs.into_iter().take_while(|r| r.revision <= upto) {
        items.extend(select(target, rev.revision, &rev.events));
        *next = rev.revision + 1;
    }
    Ok(items)
}

/// The watch stream. It ends with an error item on compaction, storage
/// failure or shutdown; dropping it (client gone) unregisters it.
pub fn watch(
    store: Store,
    target: Target,
    start: Start,
    progress_interval: Duration,
) -> impl Stream<Item = Result<Item>> + Send + 'static {
    // Register now, not at the first poll: "from now" means from the call,
    // and nothing committed between a read and the live feed is missed.
    let (mut sub, registered) = store.hub().subscribe(&target);
    async_stream::stream! {
        // `next`: the first revision not yet delivered. `upto`: revisions
        // through it come from the log, later ones from the hub.
        let mut upto = registered;
        let mut next = match start {
            Start::Now => registered + 1,
            Start::From(r) => r.max(1),
            Start::Snapshot => {
                let t = target.clone();
                match store.read(move |v| snapshot(v, &t)).await {
                    Ok((items, at)) => {
                        for item in items {
                            yield Ok(item);
                        }
                        yield Ok(Item::Synced(at));
                        at + 1
                    }
                    Err(e) => {
                        yield Err(e);
                        return;
                    }
                }
            }
        };
        let period = progress_interval.max(Duration::from_millis(10));
        let mut heartbeat = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if next <= upto {
                match read_chunk(&store, &target, &mut next, upto).await {
                    Ok(items) => {
                        if !items.is_empty() {
                            heartbeat.reset();
                        }
                        for item in items {
                            yield Ok(item);
                        }
                    }
                    Err(e) => {
                        yield Err(e);
                        return;
                    }
                }
                continue;
            }
            let rev = match sub.rx.try_recv() {
                Ok(rev) => rev,
                Err(TryRecvError::Disconnected) => {
                    yield Err(Error::ShuttingDown);
                    return;
                }
                Err(TryRecvError::Empty) => {
                    if sub.slot.overflowed.load(Ordering::Acquire) {
                        // Everything the hub kept from us is in the log.
                        upto = sub.hub.resync(&sub.slot);
                        tracing::debug!(next, upto, "watcher overflowed; reading the log");
                        continue;
                    }
                    tokio::select! {
                        () = closed(&mut sub.closing) => {
                            yield Err(Error::ShuttingDown);
                            return;
                        }
                        received = sub.rx.recv() => {
                            if let Some(rev) = received {
                                rev
                            } else {
                                yield Err(Error::ShuttingDown);
                                return;
                            }
                        }
                        _ = heartbeat.tick() => {
                            // Load first, then look: an empty buffer after the
                            // load means everything through it was delivered.
                            // Never claim a revision not dispatched yet (a
                            // start just ahead of the hub waits silently).
                            let dispatched = sub.hub.dispatched();
                            if sub.rx.is_empty()
                                && !sub.slot.overflowed.load(Ordering::Acquire)
                                && next <= dispatched + 1
                            {
                                next = dispatched + 1;
                                yield Ok(Item::Progress(dispatched));
                            }
                            continue;
                        }
                    }
                }
            };
            if rev.revision < next {
                continue; // delivered from the log already
            }
            let items = select(&target, rev.revision, &rev.events);
            if !items.is_empty() {
                heartbeat.reset();
            }
            for item in items {
                yield Ok(item);
            }
            next = rev.revision + 1;
        }
    }
}

/// The current objects of `target` and the revision they were read at.
fn snapshot(v: &dyn ReadView, target: &Target) -> Result<(Vec<Item>, u64)> {
    let at = v.revision()?;
    let mut items = Vec::new();
    let push_session = |v: &dyn ReadView,
                        s: Session,
                        ancestors: Vec<String>,
                        items: &mut Vec<Item>|
     -> Result<()> {
        let plan = v.plan(&s.session_id)?;
        items.push(Delivered::single(
            s.revision,
            Event::session(EventKind::SessionCreated, &s, ancestors.clone()),
        ));
        if let Some(p) = plan {
            items.push(Delivered::single(
                p.revision,
                Event::plan(&s, &p, ancestors),
            ));
        }
        Ok(())
    };
    match target {
        Target::Session(id) => {
            if let Some(s) = v.session(id)? {
                let chain = ops::ancestors(v, s.parent_session_id.as_deref())?;
                push_session(v, s, chain, &mut items)?;
            }
        }
        Target::Sessions(ids) => {
            for id in ids {
                if let Some(s) = v.session(id)? {
                    let chain = ops::ancestors(v, s.parent_session_id.as_deref())?;
                    push_session(v, s, chain, &mut items)?;
                }
            }
        }
        Target::Tree(root) => {
            if let Some(s) = v.session(root)? {
                let chain = ops::ancestors(v, s.parent_session_id.as_deref())?;
                // Pre-order, parents before children, each with its chain.
                let mut stack = vec![(s, chain)];
                while let Some((s, chain)) = stack.pop() {
                    let mut below = chain.clone();
                    below.push(s.session_id.clone());
                    let kids = v.children(&s.session_id)?;
                    for kid in kids.iter().rev() {
                        if let Some(k) = v.session(kid)? {
                            stack.push((k, below.clone()));
                        }
                    }
                    push_session(v, s, chain, &mut items)?;
                }
            }
        }
        Target::Agent(agent) => {
            if let Some(t) = v.todos(agent)? {
                items.push(Delivered::single(t.revision, Event::todos(&t)));
            }
        }
        Target::All => {
            let mut sessions = Vec::new();
            let mut after: Option<String> = None;
            loop {
                let page = v.sessions_after(after.as_deref(), 1024)?;
                sessions.extend(page.sessions);
                match page.next_after {
                    Some(a) => after = Some(a),
                    None => break,
                }
            }
            let mut with_chains = Vec::with_capacity(sessions.len());
            for s in sessions {
                let chain = ops::ancestors(v, s.parent_session_id.as_deref())?;
                with_chains.push((s, chain));
            }
            // Parents before children.
            with_chains
                .sort_by(|a, b| (a.1.len(), &a.0.session_id).cmp(&(b.1.len(), &b.0.session_id)));
            for (s, chain) in with_chains {
                push_session(v, s, chain, &mut items)?;
            }
            for t in v.all_todos()? {
                items.push(Delivered::single(t.revision, Event::todos(&t)));
            }
        }
    }
    Ok((items, at))
}

/// Which sessions a `Wait` looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitTarget {
    /// A session and its descendants (at each check).
    Tree(String),
    /// These sessions.
    Sessions(Vec<String>),
}

/// What a `Wait` waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// Every plan in the target is complete. In a tree, every session below
    /// the root must have a complete plan (a sub-agent that has not planned
    /// yet is not done); the root counts only if it has a plan. Listed
    /// sessions must each have a complete plan.
    AllPlansCompleted,
    /// Anything in the target changed after the call.
    AnyChange,
}

/// The answer of a `Wait`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitOutcome {
    /// Whether the condition held before the timeout.
    pub satisfied: bool,
    /// Revision the plans were read at.
    pub revision: u64,
    /// Current plans of the target sessions (empty plans for sessions
    /// without one).
    pub plans: Vec<PlanRecord>,
}

/// Blocks until `condition` holds on `target` or `timeout` passes.
pub async fn wait(
    store: &Store,
    target: WaitTarget,
    condition: Condition,
    timeout: Duration,
) -> Result<WaitOutcome> {
    let deadline = tokio::time::Instant::now() + timeout;
    let hub_target = match &target {
        WaitTarget::Tree(root) => Target::Tree(root.clone()),
        WaitTarget::Sessions(ids) => Target::Sessions(ids.iter().cloned().collect()),
    };
    // Subscribe before reading, so a change between the two is not missed.
    let (mut sub, _) = store.hub().subscribe(&hub_target);
    let (plans, complete, start) = read_target(store, &target).await?;
    if condition == Condition::AllPlansCompleted && complete {
        return Ok(WaitOutcome {
            satisfied: true,
            revision: start,
            plans,
        });
    }
    drop(plans);
    loop {
        tokio::select! {
            () = closed(&mut sub.closing) => return Err(Error::ShuttingDown),
            received = sub.rx.recv() => match received {
                // A change the target may care about, or already read.
                Some(rev) if rev.revision > start || sub.slot.overflowed.load(Ordering::Acquire) => {}
                Some(_) => continue,
                None => return Err(Error::ShuttingDown),
            },
            () = tokio::time::sleep_until(deadline) => {
                let (plans, complete, revision) = read_target(store, &target).await?;
                let satisfied = condition == Condition::AllPlansCompleted && complete;
                return Ok(WaitOutcome { satisfied, revision, plans });
            }
        }
        // Decide from the state, not the event: several changes may have
        // landed, and a full buffer only means "look again".
        sub.hub.resync(&sub.slot);
        while sub.rx.try_recv().is_ok() {}
        let (plans, complete, revision) = read_target(store, &target).await?;
        let satisfied = match condition {
            Condition::AllPlansCompleted => complete,
            Condition::AnyChange => revision > start,
        };
        if satisfied {
            return Ok(WaitOutcome {
                satisfied,
                revision,
                plans,
            });
        }
    }
}

/// Plans of the target, whether all are complete, and the revision, from
/// one snapshot.
async fn read_target(store: &Store, target: &WaitTarget) -> Result<(Vec<PlanRecord>, bool, u64)> {
    let target = target.clone();
    store
        .read(move |v| {
            let revision = v.revision()?;
            let (ids, root) = match &target {
                WaitTarget::Tree(root) => {
                    ops::require_session(v, root)?;
                    (ops::subtree(v, root)?, Some(root.clone()))
                }
                WaitTarget::Sessions(ids) => {
                    for id in ids {
                        ops::require_session(v, id)?;
                    }
                    (ids.clone(), None)
                }
            };
            let mut plans = Vec::with_capacity(ids.len());
            let mut complete = true;
            for id in &ids {
                let stored = v.plan(id)?;
                let is_root = root.as_deref() == Some(id.as_str());
                match &stored {
                    Some(p) => complete &= p.plan.is_complete(),
                    None => complete &= is_root,
                }
                plans.push(stored.unwrap_or_else(|| PlanRecord {
                    session_id: id.clone(),
                    ..PlanRecord::default()
                }));
            }
            // A tree of nothing but an unplanned root has nothing done.
            if plans.iter().all(|p| p.revision == 0) {
                complete = false;
            }
            Ok((plans, complete, revision))
        })
        .await
}
