//! The watch stream: a snapshot or a replay from the log, then live
//! revisions from the hub, with heartbeats.
//!
//! It stays in revision order, never twice, never a gap, a revision's
//! events together, across falling behind: the hub stops sending to a
//! watcher whose buffer is full and flags it; the stream then reads the log
//! from the revision it owes its client (`next`), asks the hub which
//! revision it has dispatched (`D`), replays the log up to `D` one bounded
//! chunk at a time, and takes live revisions after `D` from its buffer
//! again. Everything up to `D` is in the log because the hub dispatches
//! only committed revisions. A watcher too far behind ends with
//! `REVISION_COMPACTED`. Read transactions are opened per chunk, never held
//! for the life of a stream.
//!
//! A snapshot is read the same way, in bounded chunks, each from its own
//! read transaction ([`Snapshot`]): a stream holds one chunk whatever the
//! store holds and however slowly its client reads. The first chunk is read
//! at revision `R1`, the last at `Rn`; the stream then replays the log
//! from `R1 + 1` like any catch-up and sends `synced{Rn}` once it has
//! delivered `Rn`. Each event carries its object whole, so a client that
//! applies everything before `synced` in order holds exactly the state at
//! `Rn` (an object read in a later chunk may briefly be overwritten by an
//! older event of the replay, then by its newer ones).

use std::time::Duration;

use cairn_core::error::{Error, Result};
use cairn_core::inbox::Awaiting;
use cairn_core::session::Session;
use cairn_store::hub::{Next, Topic};
use cairn_store::records::{Event, EventKind};
use cairn_store::{ReadTxn, Store, inbox, ops};
use tokio_stream::{Stream, StreamExt};

/// Revisions read from the log per catch-up step.
const CATCH_UP_CHUNK: usize = 256;
/// Bytes of log records read per catch-up step (at least one revision):
/// what a lagging watcher holds beyond its buffer, whatever its backlog.
const CATCH_UP_BYTES: usize = 1 << 20;

/// Objects read per snapshot chunk at most.
const SNAPSHOT_CHUNK: usize = 128;
/// Approximate encoded bytes per snapshot chunk (at least one object).
const SNAPSHOT_BYTES: usize = 1 << 20;

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
fn select(target: &Topic, revision: u64, events: &[Event]) -> Vec<Item> {
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

fn ensure_retained(v: &dyn ReadTxn, requested: u64) -> Result<()> {
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
async fn read_chunk(store: &Store, target: &Topic, next: &mut u64, upto: u64) -> Result<Vec<Item>> {
    let from = *next;
    let dense = store
        .read(move |v| {
            ensure_retained(v, from)?;
            Ok(v.dense())
        })
        .await?;
    let revs = store.log_from(from, CATCH_UP_CHUNK, CATCH_UP_BYTES).await?;
    let starts_right = |r: &cairn_store::records::Revision| {
        if dense {
            r.revision == from
        } else {
            // An engine sharing its counter (etcd) skips numbers, never
            // a logged revision.
            r.revision >= from && r.revision <= upto
        }
    };
    if !revs.first().is_some_and(starts_right) {
        // The log holds every dispatched revision it has not compacted;
        // anything else is corruption, not a gap to skip.
        return Err(Error::DataLoss {
            file: store.describe(),
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

/// `synced{at}` once the stream owes nothing through `at` any more (its
/// next revision to deliver is past it); clears the debt.
fn synced_due(synced: &mut Option<u64>, next: u64) -> Option<Item> {
    let at = (*synced)?;
    (next > at).then(|| {
        *synced = None;
        Item::Synced(at)
    })
}

/// `items` (in revision order, the stream then owing `next`) with the
/// `synced` the stream owes, if any, in its place.
fn with_synced(items: Vec<Item>, synced: &mut Option<u64>, next: u64) -> Vec<Item> {
    if synced.is_none() {
        return items;
    }
    let mut out = Vec::with_capacity(items.len() + 1);
    for item in items {
        if let Item::Event(d) = &item
            && let Some(s) = synced_due(synced, d.revision)
        {
            out.push(s);
        }
        out.push(item);
    }
    out.extend(synced_due(synced, next));
    out
}

/// A piece of a snapshot as [`snapshot_items`] streams it.
// Items dominate, as in `Item` itself.
#[allow(clippy::large_enum_variant)]
enum Piece {
    Item(Item),
    /// Everything is out: read from revision `first` to `last`.
    Read {
        first: u64,
        last: u64,
    },
}

/// The snapshot of `target`, a chunk at a time, each from its own read.
fn snapshot_items(store: Store, target: Topic) -> impl Stream<Item = Result<Piece>> {
    async_stream::try_stream! {
        let mut snap = Some(Snapshot::new(&target));
        let (mut first, mut last) = (None, 0);
        while let Some(s) = snap.take() {
            let (rest, items, at) = snapshot_chunk(&store, s).await?;
            first.get_or_insert(at);
            last = at;
            snap = rest;
            for item in items {
                yield Piece::Item(item);
            }
        }
        yield Piece::Read { first: first.unwrap_or(0), last };
    }
}

/// Reads the next chunk of `snap`: it back, unless done, with the items
/// and the revision they were read at.
async fn snapshot_chunk(
    store: &Store,
    mut snap: Snapshot,
) -> Result<(Option<Snapshot>, Vec<Item>, u64)> {
    let (snap, (items, at)) = store
        .read(move |v| snap.chunk(v).map(|out| (snap, out)))
        .await?;
    Ok(((!snap.done()).then_some(snap), items, at))
}

/// The watch stream. It ends with an error item on compaction, storage
/// failure or shutdown; dropping it (client gone) unregisters it.
pub fn watch(
    store: Store,
    target: Topic,
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
        let mut synced: Option<u64> = None;
        let mut next = match start {
            Start::Now => registered + 1,
            Start::From(r) => r.max(1),
            Start::Snapshot => {
                let snap = snapshot_items(store.clone(), target.clone());
                tokio::pin!(snap);
                let mut first = 0;
                while let Some(piece) = snap.next().await {
                    match piece {
                        Ok(Piece::Item(item)) => yield Ok(item),
                        Ok(Piece::Read { first: f, last }) => (first, synced) = (f, Some(last)),
                        Err(e) => {
                            yield Err(e);
                            return;
                        }
                    }
                }
                // From the first chunk's revision on, the log brings every
                // change the later chunks may not show.
                first + 1
            }
        };
        // `synced{at}` goes out once everything through `at` has.
        if let Some(item) = synced_due(&mut synced, next) {
            yield Ok(item);
        }
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
                        for item in with_synced(items, &mut synced, next) {
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
            let rev = match sub.try_next() {
                Next::Revision(rev) => rev,
                Next::Closed => {
                    yield Err(Error::ShuttingDown);
                    return;
                }
                Next::Empty => {
                    if sub.overflowed() {
                        // Everything the hub kept from us is in the log.
                        upto = sub.resync();
                        tracing::debug!(next, upto, "watcher overflowed; reading the log");
                        continue;
                    }
                    tokio::select! {
                        received = sub.next() => {
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
                            let dispatched = sub.dispatched();
                            if sub.is_empty()
                                && !sub.overflowed()
                                && next <= dispatched + 1
                            {
                                next = dispatched + 1;
                                if let Some(item) = synced_due(&mut synced, next) {
                                    yield Ok(item);
                                }
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
            let items = with_synced(select(&target, rev.revision, &rev.events), &mut synced, rev.revision + 1);
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

/// One piece of snapshot work.
#[derive(Debug, Clone)]
enum Work {
    /// A session (and its plan), if it exists; its chain is looked up.
    Session(String),
    /// A session and everything below it, pre-order; `chain` is its
    /// ancestors when known (below a root already read).
    Tree {
        id: String,
        chain: Option<std::sync::Arc<Vec<String>>>,
        /// For a watch of several trees: a root inside another root's tree
        /// is skipped, as that tree holds it.
        roots: Option<std::sync::Arc<Vec<String>>>,
    },
    /// An agent's sessions, then its todo list.
    Agent(String),
    /// An agent's todo list.
    Todos(String),
    /// Every session, by id, from after this one.
    AllSessions(Option<String>),
    /// Every todo list, by agent, from after this one.
    AllTodos(Option<String>),
    /// Every item awaiting approval, oldest first, from after this one
    /// (the scope keeps what the caller may decide on).
    Inbox(Option<Awaiting>),
}

/// A snapshot read chunk by chunk: what is left to read.
#[derive(Debug)]
pub struct Snapshot {
    work: std::collections::VecDeque<Work>,
}

impl Snapshot {
    fn new(target: &Topic) -> Self {
        let work = match target {
            Topic::Session(id) => vec![Work::Session(id.clone())],
            Topic::Sessions(ids) => ids.iter().cloned().map(Work::Session).collect(),
            Topic::Tree(root) => vec![Work::Tree {
                id: root.clone(),
                chain: None,
                roots: None,
            }],
            Topic::Trees(roots) => {
                let all = std::sync::Arc::new(roots.iter().cloned().collect::<Vec<_>>());
                roots
                    .iter()
                    .map(|r| Work::Tree {
                        id: r.clone(),
                        chain: None,
                        roots: Some(std::sync::Arc::clone(&all)),
                    })
                    .collect()
            }
            Topic::Agent(agent) => vec![Work::Agent(agent.clone())],
            // Never a watch target of a client.
            Topic::Principals => Vec::new(),
            Topic::All => vec![Work::AllSessions(None), Work::AllTodos(None)],
            Topic::Inbox => vec![Work::Inbox(None)],
        };
        Snapshot { work: work.into() }
    }

    fn done(&self) -> bool {
        self.work.is_empty()
    }

    /// Reads the next chunk from `v`: its items and the revision of `v`.
    fn chunk(&mut self, v: &dyn ReadTxn) -> Result<(Vec<Item>, u64)> {
        let at = v.revision()?;
        let mut out = Chunk::default();
        while !out.full() {
            let Some(work) = self.work.pop_front() else {
                break;
            };
            match work {
                Work::Session(id) => {
                    if let Some(s) = v.session(&id)? {
                        let chain = ops::ancestors(v, s.parent_session_id.as_deref())?;
                        out.session(v, &s, chain)?;
                    }
                }
                Work::Tree { id, chain, roots } => {
                    let Some(s) = v.session(&id)? else { continue };
                    let chain = if let Some(c) = chain {
                        c
                    } else {
                        let c = ops::ancestors(v, s.parent_session_id.as_deref())?;
                        if roots
                            .as_ref()
                            .is_some_and(|r| c.iter().any(|a| r.contains(a)))
                        {
                            continue;
                        }
                        std::sync::Arc::new(c)
                    };
                    let mut below = (*chain).clone();
                    below.push(s.session_id.clone());
                    let below = std::sync::Arc::new(below);
                    // Children next, in order, before this one's siblings.
                    for kid in v.children(&s.session_id)?.into_iter().rev() {
                        self.work.push_front(Work::Tree {
                            id: kid,
                            chain: Some(std::sync::Arc::clone(&below)),
                            roots: None,
                        });
                    }
                    out.session(v, &s, (*chain).clone())?;
                }
                Work::Agent(agent) => {
                    self.work.push_front(Work::Todos(agent.clone()));
                    for id in v.agent_sessions(&agent)?.into_iter().rev() {
                        self.work.push_front(Work::Session(id));
                    }
                }
                Work::Todos(agent) => {
                    if let Some(t) = v.todos(&agent)? {
                        out.push(Delivered::single(t.revision, Event::todos(&t)));
                    }
                }
                Work::AllSessions(after) => {
                    // A few at a time: each may bring a plan of up to
                    // `--max-plan-bytes`, and the byte bound is checked
                    // between pieces of work.
                    let page = v.sessions_after(after.as_deref(), 16)?;
                    if let Some(next) = page.next_after {
                        self.work.push_front(Work::AllSessions(Some(next)));
                    }
                    for s in page.sessions {
                        let chain = ops::ancestors(v, s.parent_session_id.as_deref())?;
                        out.session(v, &s, chain)?;
                    }
                }
                Work::Inbox(after) => {
                    let page = v.awaiting_after(after.as_ref(), SNAPSHOT_CHUNK)?;
                    if page.len() == SNAPSHOT_CHUNK
                        && let Some(last) = page.last()
                    {
                        self.work.push_front(Work::Inbox(Some(last.clone())));
                    }
                    for key in page {
                        if let Some((item, chain, revision)) = inbox::read(v, key)? {
                            let e = Event::inbox(EventKind::InboxAdded, item, chain);
                            out.push(Delivered::single(revision, e));
                        }
                    }
                }
                Work::AllTodos(after) => {
                    let page = v.todos_after(after.as_deref(), SNAPSHOT_CHUNK)?;
                    if page.len() == SNAPSHOT_CHUNK
                        && let Some(last) = page.last()
                    {
                        self.work
                            .push_front(Work::AllTodos(Some(last.agent_id.clone())));
                    }
                    for t in page {
                        out.push(Delivered::single(t.revision, Event::todos(&t)));
                    }
                }
            }
        }
        Ok((out.items, at))
    }
}

/// The items of one snapshot chunk and about how many bytes they hold.
#[derive(Default)]
struct Chunk {
    items: Vec<Item>,
    bytes: usize,
}

impl Chunk {
    fn full(&self) -> bool {
        self.items.len() >= SNAPSHOT_CHUNK || self.bytes >= SNAPSHOT_BYTES
    }

    fn push(&mut self, item: Item) {
        if let Item::Event(d) = &item {
            self.bytes += cairn_store::codec::encode(&d.event).map_or(0, |b| b.len());
        }
        self.items.push(item);
    }

    /// A session and its plan, as snapshot events.
    fn session(&mut self, v: &dyn ReadTxn, s: &Session, ancestors: Vec<String>) -> Result<()> {
        let plan = v.plan(&s.session_id)?;
        self.push(Delivered::single(
            s.revision,
            Event::session(EventKind::SessionCreated, s, ancestors.clone()),
        ));
        if let Some(p) = plan {
            self.push(Delivered::single(p.revision, Event::plan(s, &p, ancestors)));
        }
        Ok(())
    }
}
