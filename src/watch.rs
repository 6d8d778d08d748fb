//! Live progress: fan-out of committed revisions to watchers, catch-up from
//! the event log, and `Wait`.
//!
//! A watch is a stream, not a task: it holds a broadcast receiver of
//! committed revisions and the next revision it owes its client (`next`).
//!
//! ```text
//!            subscribe first ─┐
//!  snapshot at R (optional) ──┼─▶ next = R + 1
//!                             ▼
//!   ┌──────────▶ behind? (next <= committed) ── read the log from `next` ─┐
//!   │                         │ no                                        │
//!   │            live.recv(): rev == next → deliver; rev < next → skip;   │
//!   │                         rev > next or Lagged → back to the log      │
//!   └─────────────────────────┴───────────────────────────────────────────┘
//! ```
//!
//! So events arrive in revision order, none twice, none missing, and a
//! revision's events are sent together. The broadcast ring is shared and
//! bounded: a watcher that falls behind costs nothing extra and never
//! blocks the writer; it reads the log instead, or ends with
//! `REVISION_COMPACTED` when the log no longer reaches back to `next`.
//! Read transactions are opened per catch-up chunk, never held for the
//! life of a stream.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use tokio_stream::Stream;

use crate::domain::session::Session;
use crate::error::{Error, Result};
use crate::store::records::{Event, EventKind, PlanRecord};
use crate::store::{ReadView, Store, ops};

/// Revisions read from the log per catch-up step.
const CATCH_UP_CHUNK: usize = 256;

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
            Target::All => true,
        }
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

/// Checks `start` against the log up front, so a compacted revision fails
/// the call itself rather than its first message.
pub async fn check_start(store: &Store, start: Start) -> Result<()> {
    if let Start::From(requested) = start {
        store.read(move |v| ensure_retained(v, requested)).await?;
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

/// The watch stream. It ends with an error item on compaction, storage
/// failure or shutdown; dropping it (client gone) ends it silently.
pub fn watch(
    store: Store,
    target: Target,
    start: Start,
    progress_interval: Duration,
) -> impl Stream<Item = Result<Item>> + Send + 'static {
    // Subscribe before anything is read, so no commit falls between the
    // read and the live feed; and do it now, not at the first poll, so
    // "from now" means from the call.
    let mut live = store.subscribe();
    let now = store.revision() + 1;
    async_stream::stream! {
        let mut next = match start {
            Start::Now => now,
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
            // Behind the committed revision: read the log.
            while next <= store.revision() {
                let from = next;
                let chunk = store
                    .read(move |v| {
                        ensure_retained(v, from)?;
                        v.revisions_from(from, CATCH_UP_CHUNK)
                    })
                    .await;
                let revs = match chunk {
                    Ok(revs) => revs,
                    Err(e) => {
                        yield Err(e);
                        return;
                    }
                };
                if revs.first().is_none_or(|r| r.revision != from) {
                    // The log must hold every committed revision it has not
                    // compacted; anything else is corruption, not a gap to skip.
                    yield Err(Error::Storage(format!("event log has no revision {from}")));
                    return;
                }
                for rev in revs {
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
            tokio::select! {
                received = live.recv() => match received {
                    Ok(rev) if rev.revision == next => {
                        let items = select(&target, rev.revision, &rev.events);
                        if !items.is_empty() {
                            heartbeat.reset();
                        }
                        for item in items {
                            yield Ok(item);
                        }
                        next += 1;
                    }
                    // Already delivered from the log.
                    Ok(rev) if rev.revision < next => {}
                    // A gap: the loop top reads the log.
                    Ok(_) => {}
                    Err(RecvError::Lagged(missed)) => {
                        tracing::debug!(missed, next, "watcher fell behind the live feed; reading the log");
                    }
                    Err(RecvError::Closed) => {
                        yield Err(Error::ShuttingDown);
                        return;
                    }
                },
                _ = heartbeat.tick() => {
                    yield Ok(Item::Progress(next - 1));
                }
            }
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
    let mut live = store.subscribe();
    let deadline = tokio::time::Instant::now() + timeout;
    let (plans, complete, ids, start) = read_target(store, &target).await?;
    if condition == Condition::AllPlansCompleted && complete {
        return Ok(WaitOutcome {
            satisfied: true,
            revision: start,
            plans,
        });
    }
    let mut watched: BTreeSet<String> = ids;
    drop(plans);
    let mut seen = start;
    loop {
        let touched = tokio::select! {
            received = live.recv() => match received {
                Ok(rev) => {
                    if rev.revision <= seen {
                        false
                    } else {
                        seen = rev.revision;
                        rev.events.iter().any(|e| touches(&target, &watched, e))
                    }
                }
                // Missed revisions: re-read and decide from the state.
                Err(RecvError::Lagged(_)) => true,
                Err(RecvError::Closed) => return Err(Error::ShuttingDown),
            },
            () = tokio::time::sleep_until(deadline) => {
                let (plans, complete, _, revision) = read_target(store, &target).await?;
                let satisfied = condition == Condition::AllPlansCompleted && complete;
                return Ok(WaitOutcome { satisfied, revision, plans });
            }
        };
        if !touched {
            continue;
        }
        let (plans, complete, ids, revision) = read_target(store, &target).await?;
        watched = ids;
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

fn touches(target: &WaitTarget, watched: &BTreeSet<String>, e: &Event) -> bool {
    match target {
        WaitTarget::Tree(root) => e.in_tree(root),
        WaitTarget::Sessions(_) => watched.contains(&e.session_id),
    }
}

/// Plans of the target, whether all are complete, the session ids, and the
/// revision, from one snapshot.
async fn read_target(
    store: &Store,
    target: &WaitTarget,
) -> Result<(Vec<PlanRecord>, bool, BTreeSet<String>, u64)> {
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
            Ok((plans, complete, ids.into_iter().collect(), revision))
        })
        .await
}
