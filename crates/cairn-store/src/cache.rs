//! The hot plans: the latest committed plan of recently used sessions, kept
//! in memory so that `GetPlan` answers without a database read or a hop to
//! a reader thread.
//!
//! ```text
//!  writer ── commit ──▶ PlanCache::apply(revisions) ──▶ Hub::dispatch
//!  GetPlan ──▶ PlanCache::get ── hit ──▶ answer on the request's own task
//!                             └─ miss ─▶ a reader thread ──▶ PlanCache::fill
//! ```
//!
//! Only committed data gets in, in revision order: the writer applies each
//! batch's events after its commit and before answering its callers, so a
//! caller reads its own write. A miss read from a snapshot may fill the
//! cache only if no revision was applied after that snapshot (checked under
//! the same lock the writer applies under); otherwise it could put back a
//! plan older than one applied and evicted meanwhile.
//!
//! An entry carries what rights are checked against (the session's agent
//! and ancestry), so reading from the cache enforces the same access as
//! reading the store. A session moved in the tree changes the ancestry of
//! everything below it, which the cache cannot find cheaply: a move clears
//! it. The size is bounded by `--plan-cache-bytes` (0 turns it off).

use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use bytes::Bytes;
use quick_cache::Weighter;
use quick_cache::sync::Cache;

use crate::records::{EventKind, EventObject, PlanRecord, Revision};

/// One session's hot plan and the facts its access is checked against.
#[derive(Debug)]
pub struct HotPlan {
    /// The session's agent.
    pub agent_id: String,
    /// The session's ancestors, root first.
    pub ancestors: Vec<String>,
    /// The plan as committed.
    pub record: PlanRecord,
    /// The plan as the API encodes it, made by the first reader that needs
    /// it and reused by the next ones (the store does not know the API).
    pub encoded: OnceLock<Bytes>,
    /// Approximate bytes held, for the size bound.
    weight: u64,
}

impl HotPlan {
    /// The session as rights see it.
    pub fn facts<'a>(&'a self, session_id: &'a str) -> cairn_core::access::SessionFacts<'a> {
        cairn_core::access::SessionFacts {
            session_id,
            agent_id: &self.agent_id,
            ancestors: &self.ancestors,
        }
    }

    pub fn new(agent_id: String, ancestors: Vec<String>, record: PlanRecord) -> Self {
        let weight = approximate_bytes(&agent_id, &ancestors, &record);
        HotPlan {
            agent_id,
            ancestors,
            record,
            encoded: OnceLock::new(),
            weight,
        }
    }
}

/// Bytes an entry holds: its text, plus a fixed cost per item and per entry
/// for the structures around it.
fn approximate_bytes(agent_id: &str, ancestors: &[String], r: &PlanRecord) -> u64 {
    let p = &r.plan;
    let items: usize = p.checklist.items.iter().map(|i| i.step.len() + 48).sum();
    let m = &p.mode;
    // Implementation plans are rare and varied: measured by their encoding.
    let mode = if m.pending.is_none() && m.active.is_none() && m.modifications.is_empty() {
        m.goal.len() + m.scope.len() + 64
    } else {
        serde_json::to_vec(m).map_or(64 * 1024, |v| v.len())
    };
    let text = agent_id.len()
        + ancestors.iter().map(|a| a.len() + 24).sum::<usize>()
        + r.session_id.len()
        + p.checklist.explanation.len();
    // Twice the record for the encoded copy, once filled.
    ((text + items + mode) * 2 + 256) as u64
}

#[derive(Debug, Clone, Copy)]
struct ByBytes;

impl Weighter<String, Arc<HotPlan>> for ByBytes {
    fn weight(&self, key: &String, val: &Arc<HotPlan>) -> u64 {
        key.len() as u64 + val.weight
    }
}

/// The hot plans of the store.
pub struct PlanCache {
    entries: Option<Cache<String, Arc<HotPlan>, ByBytes>>,
    /// The last revision applied. The writer holds it exclusively while
    /// applying; a fill holds it shared while it checks and inserts.
    applied: RwLock<u64>,
}

impl std::fmt::Debug for PlanCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanCache")
            .field("entries", &self.entries.as_ref().map(Cache::len))
            .field("applied", &self.applied())
            .finish()
    }
}

impl PlanCache {
    /// A cache of about `bytes` bytes (0: no cache) over a store at
    /// `revision`.
    pub fn new(bytes: u64, revision: u64) -> Self {
        let entries = (bytes > 0).then(|| {
            let estimated = usize::try_from(bytes / 2048).unwrap_or(usize::MAX).max(16);
            Cache::with_weighter(estimated, bytes, ByBytes)
        });
        PlanCache {
            entries,
            applied: RwLock::new(revision),
        }
    }

    /// The last revision applied.
    pub fn applied(&self) -> u64 {
        *self.applied.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// A session's hot plan, if cached.
    pub fn get(&self, session_id: &str) -> Option<Arc<HotPlan>> {
        self.entries.as_ref()?.get(session_id)
    }

    /// Offers a plan read from a snapshot at revision `at`; kept only if
    /// nothing was applied since that snapshot. Returns it either way.
    pub fn fill(&self, at: u64, session_id: &str, hot: HotPlan) -> Arc<HotPlan> {
        let hot = Arc::new(hot);
        if let Some(entries) = &self.entries {
            let applied = self.applied.read().unwrap_or_else(PoisonError::into_inner);
            if *applied == at {
                entries.insert(session_id.to_owned(), Arc::clone(&hot));
            }
        }
        hot
    }

    /// Applies committed revisions, in order. Called by whoever commits,
    /// before it answers the writers and before the hub dispatches.
    pub fn apply(&self, revisions: &[Arc<Revision>]) {
        let mut applied = self.applied.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(entries) = &self.entries {
            for e in revisions.iter().flat_map(|r| &r.events) {
                let id = e.session_id.as_str();
                match (&e.kind, &e.object) {
                    (EventKind::PlanUpdated, EventObject::Plan(p)) => {
                        let hot =
                            HotPlan::new(e.agent_id.clone(), e.ancestors.clone(), (**p).clone());
                        entries.insert(id.to_owned(), Arc::new(hot));
                    }
                    (EventKind::SessionCreated, _) => {
                        let empty = PlanRecord {
                            session_id: id.to_owned(),
                            ..PlanRecord::default()
                        };
                        let hot = HotPlan::new(e.agent_id.clone(), e.ancestors.clone(), empty);
                        entries.insert(id.to_owned(), Arc::new(hot));
                    }
                    (EventKind::SessionUpdated, _) if e.moved => entries.clear(),
                    (EventKind::SessionUpdated, _) => {
                        if let Some(old) = entries.get(id) {
                            let hot = HotPlan::new(
                                e.agent_id.clone(),
                                e.ancestors.clone(),
                                old.record.clone(),
                            );
                            entries.insert(id.to_owned(), Arc::new(hot));
                        }
                    }
                    (EventKind::SessionDeleted, _) => {
                        entries.remove(id);
                    }
                    _ => {}
                }
            }
        }
        if let Some(last) = revisions.last() {
            *applied = last.revision;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Event;
    use cairn_core::session::Session;

    fn session(id: &str, parent: Option<&str>, agent: &str) -> Session {
        Session {
            session_id: id.into(),
            parent_session_id: parent.map(Into::into),
            agent_id: agent.into(),
            ..Session::default()
        }
    }

    fn plan(id: &str, revision: u64) -> PlanRecord {
        PlanRecord {
            session_id: id.into(),
            revision,
            ..PlanRecord::default()
        }
    }

    fn rev(revision: u64, events: Vec<Event>) -> Arc<Revision> {
        Arc::new(Revision {
            revision,
            time: 0,
            events,
        })
    }

    #[test]
    fn follows_commits_and_refuses_stale_fills() {
        let cache = PlanCache::new(1 << 20, 0);
        let a = session("a", None, "coder");
        cache.apply(&[rev(
            1,
            vec![
                Event::session(EventKind::SessionCreated, &a, Vec::new()),
                Event::plan(&a, &plan("a", 1), Vec::new()),
            ],
        )]);
        let hot = cache.get("a").unwrap();
        assert_eq!((hot.record.revision, hot.agent_id.as_str()), (1, "coder"));

        // A read from the snapshot at 1 fills; one from before does not.
        cache.fill(
            1,
            "b",
            HotPlan::new(String::new(), Vec::new(), plan("b", 1)),
        );
        cache.fill(
            0,
            "c",
            HotPlan::new(String::new(), Vec::new(), plan("c", 0)),
        );
        assert!(cache.get("b").is_some());
        assert!(cache.get("c").is_none());

        // A new agent is the one rights see next.
        let mut handed = a.clone();
        handed.agent_id = "tester".into();
        cache.apply(&[rev(
            2,
            vec![Event::session(
                EventKind::SessionUpdated,
                &handed,
                Vec::new(),
            )],
        )]);
        assert_eq!(cache.get("a").unwrap().agent_id, "tester");
        assert_eq!(cache.applied(), 2);

        // A move clears everything; a deletion removes its session.
        let mut moved = Event::session(
            EventKind::SessionUpdated,
            &session("b", Some("a"), ""),
            vec!["a".into()],
        );
        moved.moved = true;
        cache.apply(&[rev(3, vec![moved])]);
        assert!(cache.get("a").is_none() && cache.get("b").is_none());
        cache.apply(&[rev(4, vec![Event::plan(&a, &plan("a", 4), Vec::new())])]);
        assert!(cache.get("a").is_some());
        cache.apply(&[rev(
            5,
            vec![Event::session(EventKind::SessionDeleted, &a, Vec::new())],
        )]);
        assert!(cache.get("a").is_none());
    }

    #[test]
    fn stays_within_its_size_and_can_be_off() {
        let cache = PlanCache::new(64 * 1024, 0);
        let events: Vec<Event> = (0..10_000)
            .map(|i| {
                let s = session(&format!("s{i}"), None, "");
                Event::plan(&s, &plan(&s.session_id, 1), Vec::new())
            })
            .collect();
        cache.apply(&[rev(1, events)]);
        let held = cache.entries.as_ref().unwrap().weight();
        assert!(held <= 64 * 1024, "{held} bytes held");
        assert!(cache.entries.as_ref().unwrap().len() > 10);

        let off = PlanCache::new(0, 0);
        off.apply(&[rev(
            1,
            vec![Event::plan(
                &session("a", None, ""),
                &plan("a", 1),
                Vec::new(),
            )],
        )]);
        assert!(off.get("a").is_none());
        assert_eq!(off.applied(), 1);
    }
}
