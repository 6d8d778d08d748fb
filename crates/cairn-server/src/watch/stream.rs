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

use std::time::Duration;

use cairn_core::error::{Error, Result};
use cairn_core::session::Session;
use cairn_store::hub::{Next, Target};
use cairn_store::records::{Event, EventKind};
use cairn_store::{ReadView, Store, ops};
use tokio_stream::Stream;

/// Revisions read from the log per catch-up step.
const CATCH_UP_CHUNK: usize = 256;
/// Bytes of log records read per catch-up step (at least one revision):
/// what a lagging watcher holds beyond its buffer, whatever its backlog.
const CATCH_UP_BYTES: usize = 1 << 20;

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
    let (revs, dense) = store
        .read(move |v| {
            ensure_retained(v, from)?;
            Ok((
                v.revisions_from(from, CATCH_UP_CHUNK, CATCH_UP_BYTES)?,
                v.dense(),
            ))
        })
        .await?;
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

/// A session and its plan, as snapshot events.
fn push_session(
    v: &dyn ReadView,
    s: &Session,
    ancestors: Vec<String>,
    items: &mut Vec<Item>,
) -> Result<()> {
    let plan = v.plan(&s.session_id)?;
    items.push(Delivered::single(
        s.revision,
        Event::session(EventKind::SessionCreated, s, ancestors.clone()),
    ));
    if let Some(p) = plan {
        items.push(Delivered::single(p.revision, Event::plan(s, &p, ancestors)));
    }
    Ok(())
}

/// A session tree's objects, parents before children.
fn snapshot_tree(v: &dyn ReadView, root: &str, items: &mut Vec<Item>) -> Result<()> {
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
            push_session(v, &s, chain, items)?;
        }
    }
    Ok(())
}

/// The current objects of `target` and the revision they were read at.
fn snapshot(v: &dyn ReadView, target: &Target) -> Result<(Vec<Item>, u64)> {
    let at = v.revision()?;
    let mut items = Vec::new();
    match target {
        Target::Session(id) => {
            if let Some(s) = v.session(id)? {
                let chain = ops::ancestors(v, s.parent_session_id.as_deref())?;
                push_session(v, &s, chain, &mut items)?;
            }
        }
        Target::Sessions(ids) => {
            for id in ids {
                if let Some(s) = v.session(id)? {
                    let chain = ops::ancestors(v, s.parent_session_id.as_deref())?;
                    push_session(v, &s, chain, &mut items)?;
                }
            }
        }
        Target::Tree(root) => snapshot_tree(v, root, &mut items)?,
        Target::Trees(roots) => {
            for root in roots {
                // A root inside another root's tree is already in it.
                let chain = match v.session(root)? {
                    Some(s) => ops::ancestors(v, s.parent_session_id.as_deref())?,
                    None => continue,
                };
                if chain.iter().any(|a| roots.contains(a)) {
                    continue;
                }
                snapshot_tree(v, root, &mut items)?;
            }
        }
        Target::Agent(agent) => {
            for id in v.agent_sessions(agent)? {
                if let Some(s) = v.session(&id)? {
                    let chain = ops::ancestors(v, s.parent_session_id.as_deref())?;
                    push_session(v, &s, chain, &mut items)?;
                }
            }
            if let Some(t) = v.todos(agent)? {
                items.push(Delivered::single(t.revision, Event::todos(&t)));
            }
        }
        // Never a watch target of a client.
        Target::Principals => {}
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
                push_session(v, &s, chain, &mut items)?;
            }
            for t in v.all_todos()? {
                items.push(Delivered::single(t.revision, Event::todos(&t)));
            }
        }
    }
    Ok((items, at))
}
